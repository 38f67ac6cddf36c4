"""Square systems through an out-of-core LU: ``solve``, ``inv``, ``det`` and ``slogdet``.

A stored square matrix, larger than the memory budget if need be, is factored ``P A = L U``
by LU with partial pivoting, left-looking over column panels (:mod:`oocarr.ops.lu`), the
factor kept in scratch storage; the right-hand sides are solved by forward and back
substitution streamed over the same panels (:mod:`oocarr.ops.lu_solve`).  ``inv`` solves
against the identity, made in memory; ``det`` and ``slogdet`` take the LU pass alone.
Signatures and results are the Array API's (2023.12) and ``jax.numpy.linalg``'s; arrays
that are not stored go to ``jax.numpy.linalg``.

A complex matrix is read whole into memory (it must fit the budget) and handed to
``jax.numpy.linalg``: the out-of-core LU is built for real matrices.

A singular matrix raises nothing, as in ``jax.numpy``: ``solve`` and ``inv`` give ``inf``
or ``nan``, ``det`` gives 0 and ``slogdet`` ``(0, -inf)``.  Every function is
differentiable (once), eagerly and under ``jax.jit``, with ``jax.numpy.linalg``'s
gradients.  Stacks (more than 2 axes) are solved one matrix at a time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from oocarr.api import manipulation
from oocarr.api.linalg_fit import in_memory, is_complex
from oocarr.errors import InvalidArgumentError, ShapeMismatchError
from oocarr.jaxlayer.disk_array import is_disk
from oocarr.jaxlayer.make_op import make_op
from oocarr.ops.lu import compute_dtype
from oocarr.ops.lu_solve import LUDeterminant, LUInverse, LUSolve

if TYPE_CHECKING:
    from oocarr.jaxlayer.disk_array import AnyArray, Result

__all__ = ["SlogdetResult", "det", "inv", "slogdet", "solve"]

_solve = make_op(LUSolve)
_inv = make_op(LUInverse)
_det = make_op(LUDeterminant, in_memory=True)


class SlogdetResult(NamedTuple):
    """``slogdet``'s result: the determinant's sign (0 when singular) and ``log|det|``."""

    sign: Any
    logabsdet: Any


def _square_stack(x: Any, name: str) -> tuple[tuple[int, ...], int]:
    """The batch shape and ``n`` of a stack of n × n matrices; raises otherwise."""
    shape = tuple(x.shape)
    if len(shape) < 2:
        raise InvalidArgumentError(
            f"{name} needs a matrix (at least 2 axes), got shape {shape}; a scalar system is "
            "a division"
        )
    if shape[-1] != shape[-2]:
        raise ShapeMismatchError(
            f"{name} needs square matrices (..., M, M), got shape {shape}; for a rectangular "
            "system use oocarr.linalg.lstsq"
        )
    compute_dtype(x.dtype, what=name)
    return shape[:-2], shape[-1]


def _array(x: Any) -> Any:
    return x if hasattr(x, "shape") and hasattr(x, "dtype") else np.asarray(x)


def _empty(x: Any) -> jnp.ndarray:
    """An in-memory stand-in for ``x`` when it has no elements (nothing to read)."""
    return jnp.asarray(np.zeros(tuple(x.shape), np.dtype(x.dtype)))


def _batch_index(index: tuple[int, ...], batch: tuple[int, ...]) -> tuple[int, ...]:
    """The index into an array of batch shape ``batch`` of the broadcast result's ``index``."""
    tail = index[len(index) - len(batch) :]
    return tuple(0 if size == 1 else i for i, size in zip(tail, batch))


def _stacked(results: list[Any], batch: tuple[int, ...], tail: tuple[int, ...]) -> Any:
    """Results of one matrix each, in C order of ``batch``, as one array of ``batch + tail``."""
    if any(is_disk(r) for r in results):
        joined = manipulation.stack(results)
        return manipulation.reshape(joined, (*batch, *tail))
    return jnp.stack([jnp.asarray(r) for r in results]).reshape(*batch, *tail)


def solve(x1: AnyArray, x2: AnyArray, /) -> Result:
    """The solution ``x`` of ``x1 @ x = x2`` for square ``x1``, as ``jax.numpy.linalg.solve``.

    Parameters
    ----------
    x1 : DiskArray or array-like
        Square matrices, shape (..., M, M).
    x2 : DiskArray or array-like
        Shape (M,): one vector, the same for every matrix of ``x1`` (the result has shape
        ``x1.shape[:-1]``); or (..., M, K): K columns per matrix, the batch axes broadcast
        against ``x1``'s (the result has shape (..., M, K)).

    A stored ``x1`` is LU-factored out of core (bytes read near those of the same algorithm
    with the widest panels the budget allows; see :mod:`oocarr.ops.lu`); a singular
    ``x1`` gives ``inf``/``nan`` values, not an error, as ``jax.numpy``.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> a = oocarr.from_numpy(np.array([[0.0, 2.0], [4.0, 1.0]], "f4"))
    >>> np.asarray(solve(a, np.array([2.0, 9.0], "f4"))).tolist()
    [2.0, 1.0]
    """
    if not (is_disk(x1) or is_disk(x2)) or is_complex(x1, x2):
        return jnp.linalg.solve(in_memory("solve", x1), in_memory("solve", x2))
    x1, x2 = _array(x1), _array(x2)
    batch1, n = _square_stack(x1, "solve")
    compute_dtype(x1.dtype, x2.dtype, what="solve")
    shape2 = tuple(x2.shape)
    if len(shape2) == 1:
        if shape2[0] != n:
            raise ShapeMismatchError(
                f"solve: x2 of shape {shape2} has {shape2[0]} rows, x1 of shape "
                f"{tuple(x1.shape)} has {n}; they must match"
            )
        batch2: tuple[int, ...] = ()
        tail: tuple[int, ...] = (n,)
    else:
        if shape2[-2] != n:
            raise ShapeMismatchError(
                f"solve: x2 of shape {shape2} must be (..., {n}, K) for x1 of shape "
                f"{tuple(x1.shape)}: its rows (axis -2) must match x1's {n}; for one vector "
                "per matrix, use x2[..., None]"
            )
        batch2, tail = shape2[:-2], shape2[-2:]
    try:
        batch = tuple(np.broadcast_shapes(batch1, batch2))
    except ValueError:
        raise ShapeMismatchError(
            f"solve: the batch axes of x1 {tuple(x1.shape)} and x2 {shape2} do not broadcast"
        ) from None
    if 0 in (n, tail[-1], *batch):
        return jnp.linalg.solve(_empty(x1), _empty(x2))
    if not batch:
        return _solve(x1, x2)
    results = []
    for index in np.ndindex(*batch):
        a = x1[_batch_index(index, batch1)] if batch1 else x1
        b = x2[_batch_index(index, batch2)] if batch2 else x2
        results.append(_solve(a, b))
    return _stacked(results, batch, tail)


def inv(x: AnyArray, /) -> Result:
    """The inverse of a square matrix (of each matrix of a stack), as
    ``jax.numpy.linalg.inv``: ``solve`` against the identity, out of core for a stored ``x``;
    ``inf``/``nan`` values for a singular one.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> a = oocarr.from_numpy(np.array([[0.0, 2.0], [4.0, 0.0]], "f4"))
    >>> np.asarray(inv(a)).tolist()
    [[0.0, 0.25], [0.5, 0.0]]
    """
    if not is_disk(x) or is_complex(x):
        return jnp.linalg.inv(in_memory("inv", x))
    batch, n = _square_stack(x, "inv")
    if 0 in (n, *batch):
        return jnp.linalg.inv(_empty(x))
    if not batch:
        return _inv(x)
    return _stacked([_inv(x[index]) for index in np.ndindex(*batch)], batch, (n, n))


def _slogdet_pairs(x: Any, name: str) -> Any:
    """``[sign, log|det|]`` of each matrix, shape batch + (2,), in memory."""
    batch, n = _square_stack(x, name)
    if 0 in (n, *batch):
        return jnp.stack(jnp.linalg.slogdet(_empty(x)), axis=-1)
    if not batch:
        return _det(x, log=True)
    return jnp.stack([_det(x[index], log=True) for index in np.ndindex(*batch)]).reshape(*batch, 2)


def det(x: AnyArray, /) -> Result:
    """The determinant of a square matrix (of each matrix of a stack), as
    ``jax.numpy.linalg.det``: the product of ``U``'s diagonal and the permutation's sign,
    from one out-of-core LU pass of a stored ``x``; 0 for a singular matrix (its gradient
    there is not the cofactor matrix JAX gives, but ``inf``/``nan``).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(det(oocarr.from_numpy(np.array([[0.0, 2.0], [4.0, 1.0]], "f4"))))
    -8.0
    """
    if not is_disk(x) or is_complex(x):
        return jnp.linalg.det(in_memory("det", x))
    batch, n = _square_stack(x, "det")
    if 0 in (n, *batch):
        return jnp.linalg.det(_empty(x))
    if not batch:
        return _det(x, log=False)
    return jnp.stack([_det(x[index], log=False) for index in np.ndindex(*batch)]).reshape(batch)


def slogdet(x: AnyArray, /) -> SlogdetResult:
    """``(sign, logabsdet)`` of the determinant of a square matrix (of each matrix of a
    stack), as ``jax.numpy.linalg.slogdet``: ``log|det|`` sums the logarithms of ``U``'s
    diagonal, so it does not overflow; ``(0, -inf)`` for a singular matrix.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> sign, logabsdet = slogdet(oocarr.from_numpy(np.diag(np.array([-1e30, 1e30], "f4"))))
    >>> float(sign), round(float(logabsdet), 3)
    (-1.0, 138.155)
    """
    if not is_disk(x) or is_complex(x):
        sign, logabsdet = jnp.linalg.slogdet(in_memory("slogdet", x))
        return SlogdetResult(sign, logabsdet)
    pairs = _slogdet_pairs(x, "slogdet")
    return SlogdetResult(pairs[..., 0], pairs[..., 1])
