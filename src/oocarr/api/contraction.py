"""Tensor contractions: ``tensordot`` and ``einsum``, as streamed matrix products.

Both reduce to one :func:`oocarr.matmul` (which streams, with batch axes) between the
operands laid out as ``(batch..., free, contracted)`` and ``(batch..., contracted, free)``:
axes are permuted and merged with the streamed ``transpose`` and ``reshape`` (skipped where
the layout already fits), and the product is split and permuted back the same way.  Axes an
operand alone has and the output does not are summed first.  Differentiable through the ops
it is made of.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax.numpy as jnp

from oocarr.api import creation, manipulation
from oocarr.api import elementwise as fn
from oocarr.errors import InvalidArgumentError, NotSupportedError, ShapeMismatchError

if TYPE_CHECKING:
    from oocarr.jaxlayer.disk_array import AnyArray, Result

__all__ = ["tensordot", "einsum"]


def _permuted(x: Any, order: Sequence[int]) -> Any:
    order = tuple(order)
    return x if order == tuple(range(len(order))) else fn.transpose(x, order)


def _reshaped(x: Any, shape: Sequence[int]) -> Any:
    shape = tuple(int(n) for n in shape)
    return x if tuple(x.shape) == shape else manipulation.reshape(x, shape)


def _contract(
    a: Any, b: Any, batch: Sequence[tuple[int, int]], pairs: Sequence[tuple[int, int]]
) -> tuple[Any, list[int], list[int]]:
    """``a`` and ``b`` multiplied over the axis ``pairs`` and matched along the ``batch``
    pairs: the result, laid out ``(batch..., a's free..., b's free...)``, and the free axes."""
    batch_a, batch_b = [p[0] for p in batch], [p[1] for p in batch]
    sum_a, sum_b = [p[0] for p in pairs], [p[1] for p in pairs]
    free_a = [i for i in range(len(a.shape)) if i not in batch_a and i not in sum_a]
    free_b = [i for i in range(len(b.shape)) if i not in batch_b and i not in sum_b]
    for i, j in (*batch, *pairs):
        if a.shape[i] != b.shape[j]:
            raise ShapeMismatchError(
                f"contracted axes {i} of {tuple(a.shape)} and {j} of {tuple(b.shape)} differ"
            )
    sizes = [a.shape[i] for i in batch_a]
    m = math.prod(a.shape[i] for i in free_a)
    k = math.prod(a.shape[i] for i in sum_a)
    n = math.prod(b.shape[i] for i in free_b)
    shape = [*sizes, *(a.shape[i] for i in free_a), *(b.shape[i] for i in free_b)]
    if 0 in (m, n, *sizes) or k == 0:
        # nothing to multiply (the streamed matmul needs elements): zeros, as a sum of nothing
        dtype = jnp.result_type(a.dtype, b.dtype)
        return creation.zeros(tuple(shape), dtype=dtype), free_a, free_b
    left = _reshaped(_permuted(a, [*batch_a, *free_a, *sum_a]), [*sizes, m, k])
    right = _reshaped(_permuted(b, [*batch_b, *sum_b, *free_b]), [*sizes, k, n])
    out = fn.matmul(left, right)
    return _reshaped(out, shape), free_a, free_b


def tensordot(
    x1: AnyArray, x2: AnyArray, /, *, axes: int | tuple[Sequence[int], Sequence[int]] = 2
) -> Result:
    """Sum of products over ``axes`` (the Array API's ``tensordot``): the last ``axes`` axes
    of ``x1`` with the first of ``x2``, or the two sequences of axes given; a streamed matrix
    product, differentiable.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> a = oocarr.from_numpy(np.arange(24.0, dtype="f4").reshape(2, 3, 4))
    >>> b = np.ones((3, 4, 5), "f4")
    >>> np.asarray(oocarr.tensordot(a, b, axes=2))[:, 0]
    array([ 66., 210.], dtype=float32)
    """
    if isinstance(axes, int):
        if axes < 0 or axes > min(len(x1.shape), len(x2.shape)):
            raise InvalidArgumentError(
                f"tensordot: axes={axes} does not fit {x1.shape}, {x2.shape}"
            )
        first = list(range(len(x1.shape) - axes, len(x1.shape)))
        second = list(range(axes))
    else:
        first, second = ([int(a) for a in ax] for ax in axes)
        if len(first) != len(second):
            raise InvalidArgumentError(f"tensordot: axes {axes} pair unequal numbers of axes")
        first = [a % len(x1.shape) for a in first]
        second = [a % len(x2.shape) for a in second]
    out, _, _ = _contract(x1, x2, [], list(zip(first, second)))
    return out


def _parse(subscripts: str, operands: Sequence[Any]) -> tuple[list[str], str]:
    spec = subscripts.replace(" ", "")
    if "." in spec:
        raise NotSupportedError("einsum with '...': name every axis in the subscripts")
    inputs, arrow, output = spec.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(operands):
        raise InvalidArgumentError(
            f"einsum: {subscripts!r} names {len(terms)} operands, got {len(operands)}"
        )
    for term, x in zip(terms, operands):
        if not term.isalpha() or len(term) != len(x.shape):
            raise InvalidArgumentError(
                f"einsum: term {term!r} does not name the {len(x.shape)} axes of an operand"
            )
        if len(set(term)) != len(term):
            raise NotSupportedError(
                f"einsum: a repeated index in {term!r} (a diagonal) is not streamed"
            )
    if not arrow:
        counts = {c: inputs.count(c) for c in set(inputs) if c.isalpha()}
        output = "".join(sorted(c for c, n in counts.items() if n == 1))
    if len(set(output)) != len(output) or not set(output) <= set(inputs):
        raise InvalidArgumentError(f"einsum: bad output subscripts in {subscripts!r}")
    return terms, output


def _sum_alone(x: Any, term: str, keep: str) -> tuple[Any, str]:
    """``x`` summed over the axes of ``term`` not in ``keep``, and the term left."""
    gone = tuple(i for i, c in enumerate(term) if c not in keep)
    if not gone:
        return x, term
    return fn.sum(x, axis=gone), "".join(c for c in term if c in keep)


def einsum(subscripts: str, /, *operands: Any) -> Result:
    """Einstein summation over one or two operands, for contractions (NumPy's ``einsum``
    without diagonals or ``...``): permutes, sums and one streamed (batched) matrix product;
    differentiable.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> a = oocarr.from_numpy(np.arange(6.0, dtype="f4").reshape(2, 3))
    >>> np.asarray(oocarr.einsum("ij,kj->ik", a, np.ones((4, 3), "f4")))[:, 0]
    array([ 3., 12.], dtype=float32)
    >>> np.asarray(oocarr.einsum("ij->j", a))
    array([3., 5., 7.], dtype=float32)
    """
    if not 1 <= len(operands) <= 2:
        raise NotSupportedError(f"einsum of {len(operands)} operands: contract them two at a time")
    terms, output = _parse(subscripts, operands)
    if len(operands) == 1:
        x, term = _sum_alone(operands[0], terms[0], output)
        return _permuted(x, [term.index(c) for c in output])
    a, ta = _sum_alone(operands[0], terms[0], output + terms[1])
    b, tb = _sum_alone(operands[1], terms[1], output + terms[0])
    batch = [(ta.index(c), tb.index(c)) for c in ta if c in tb and c in output]
    pairs = [(ta.index(c), tb.index(c)) for c in ta if c in tb and c not in output]
    out, free_a, free_b = _contract(a, b, batch, pairs)
    layout = [ta[i] for i, _ in batch] + [ta[i] for i in free_a] + [tb[j] for j in free_b]
    return _permuted(out, [layout.index(c) for c in output])
