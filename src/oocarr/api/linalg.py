"""The Array API's ``linalg`` extension (2023.12): the functions that stream as compositions of
oocarr's ops.

Each is made of streamed, differentiable ops, so it runs on stored arrays of any size under the
memory budget, works under ``jax.jit`` and gives ``jax.numpy.linalg``'s gradients:

- ``matmul``, ``tensordot``, ``matrix_transpose``: the streamed matrix product (with batch
  axes), the contraction built on it and the tiled transpose;
- ``vecdot``, ``outer``, ``cross``: elementwise products (fused under ``jax.jit``), a sum over
  the vectors' axis (``vecdot``) and a concat of the three components (``cross``);
- ``diagonal`` (:class:`~oocarr.ops.diagonal.Diagonal`, which reads only blocks on the
  diagonal) and ``trace`` (its sum);
- ``vector_norm`` and ``matrix_norm``: ``abs``/``square``/``power`` and reductions (``sum``,
  ``max``, ``min``) over the axes named; the SVD-based matrix norms (``ord`` 2, -2,
  ``"nuc"``) reduce the singular values of ``svdvals`` (TSQR, streamed for tall matrices;
  a complex matrix through its real embedding).

Stacks of matrices are the last two axes, with leading batch axes, as the standard says.  The
face users import is :mod:`oocarr.linalg` (also ``xp.linalg`` of the Array API namespace).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.api import contraction, manipulation
from oocarr.api import elementwise as fn
from oocarr.errors import InvalidArgumentError, ShapeMismatchError
from oocarr.jaxlayer.make_op import make_op
from oocarr.ops.diagonal import Diagonal

if TYPE_CHECKING:
    from oocarr.jaxlayer.disk_array import AnyArray, ArrayLike, DTypeLike, Result

__all__ = [
    "cross",
    "diagonal",
    "matmul",
    "matrix_norm",
    "matrix_transpose",
    "outer",
    "tensordot",
    "trace",
    "vecdot",
    "vector_norm",
]

Axis = int | tuple[int, ...] | None

_diagonal = make_op(Diagonal)


# ----------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------
def _array(x: Any) -> Any:
    """``x`` as something with ``shape`` and ``dtype`` (Python scalars and lists as NumPy)."""
    return x if hasattr(x, "shape") and hasattr(x, "dtype") else np.asarray(x)


def _is_complex(x: Any) -> bool:
    return np.issubdtype(np.dtype(x.dtype), np.complexfloating)


def _inexact(x: Any) -> Any:
    """``x`` cast to the default floating dtype when it is boolean or integer (as
    ``jax.numpy.linalg`` promotes them), else ``x``."""
    dtype = np.dtype(x.dtype)
    if np.issubdtype(dtype, np.inexact):
        return x
    target = np.dtype(jax.dtypes.canonicalize_dtype(jnp.promote_types(dtype, jnp.float32)))
    return fn.astype(x, target)


def _real_dtype(x: Any) -> np.dtype:
    """The real dtype of ``x``'s (floating or complex) dtype."""
    return np.dtype(np.finfo(np.dtype(x.dtype)).dtype)


def _static_int(value: Any, name: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidArgumentError(f"{what}: {name} must be a Python int, got {value!r}")
    return int(value)


def _negative_axis(axis: Any, ndim: int, what: str) -> int:
    """``axis`` checked to be negative and within the last ``ndim`` axes (the standard's rule
    for the vectors' axis of ``vecdot`` and ``cross``, which does not broadcast)."""
    axis = _static_int(axis, "axis", what)
    if not -ndim <= axis < 0:
        raise InvalidArgumentError(
            f"{what}: axis must be a negative integer within the last {ndim} axes, got {axis}"
        )
    return axis


def _sum(x: Any, axis: Axis, dtype: Any, keepdims: bool = False) -> Any:
    """``sum`` with the standard's ``dtype``: ``x`` cast first, the result in that dtype."""
    if dtype is None:
        return fn.sum(x, axis=axis, keepdims=keepdims)
    dtype = np.dtype(dtype)
    if dtype != np.dtype(x.dtype):
        x = fn.astype(x, dtype)
    out = fn.sum(x, axis=axis, keepdims=keepdims)
    # JAX sums small integers in 32 bits; the dtype asked for is that sum modulo its range
    return out if np.dtype(out.dtype) == dtype else fn.astype(out, dtype)


def _norm_axes(axis: Any, ndim: int) -> Axis:
    """``vector_norm``'s ``axis`` checked: ``None``, an axis or a tuple of distinct axes."""
    if axis is None:
        return None
    given = tuple(axis) if isinstance(axis, Sequence) else (axis,)
    axes = tuple(_static_int(a, "axis", "vector_norm") for a in given)
    if any(not -ndim <= a < ndim for a in axes):
        raise InvalidArgumentError(
            f"vector_norm: axis {axis!r} is out of range for an array of {ndim} axes"
        )
    if len({a % ndim for a in axes}) != len(axes):
        raise InvalidArgumentError(f"vector_norm: repeated axis in {axis!r}; give each axis once")
    return axes[0] if isinstance(axis, numbers.Integral) else axes


def _squared_magnitude(x: Any) -> Any:
    """``|x|**2`` elementwise: ``x * x`` for real ``x`` (``jax.numpy.linalg``'s gradient at
    zero), the squared modulus for complex ``x``."""
    return fn.square(fn.abs(x)) if _is_complex(x) else fn.square(x)


# ----------------------------------------------------------------------------
# products
# ----------------------------------------------------------------------------
def matmul(x1: ArrayLike, x2: ArrayLike, /) -> Result:
    """Matrix product ``x1 @ x2`` with NumPy's rules (stacks broadcast over their batch axes,
    1-d operands are vectors), streamed tile by tile; differentiable.

    Examples
    --------
    >>> import numpy as np, oocarr.linalg
    >>> a = oocarr.from_numpy(np.arange(6.0, dtype="f4").reshape(2, 3))
    >>> np.asarray(oocarr.linalg.matmul(a, np.ones((3, 2), "f4"))).tolist()
    [[3.0, 3.0], [12.0, 12.0]]
    """
    return fn.matmul(x1, x2)


def tensordot(
    x1: AnyArray, x2: AnyArray, /, *, axes: int | tuple[Sequence[int], Sequence[int]] = 2
) -> Result:
    """Sum of products over ``axes``: the last ``axes`` axes of ``x1`` with the first of
    ``x2``, or the two sequences of axes given; one streamed matrix product.

    Examples
    --------
    >>> import numpy as np, oocarr.linalg
    >>> a = oocarr.from_numpy(np.arange(6.0, dtype="f4").reshape(2, 3))
    >>> np.asarray(oocarr.linalg.tensordot(a, np.ones(3, "f4"), axes=1)).tolist()
    [3.0, 12.0]
    """
    return contraction.tensordot(x1, x2, axes=axes)


def matrix_transpose(x: AnyArray, /) -> Result:
    """Each matrix of a stack transposed (its last two axes swapped), copied tile by tile.

    Examples
    --------
    >>> import numpy as np, oocarr.linalg
    >>> oocarr.linalg.matrix_transpose(oocarr.from_numpy(np.zeros((5, 2, 3), "f4"))).shape
    (5, 3, 2)
    """
    x = _array(x)
    ndim = len(x.shape)
    if ndim < 2:
        raise InvalidArgumentError(
            f"matrix_transpose needs at least 2 axes, got shape {tuple(x.shape)}"
        )
    return fn.transpose(x, (*range(ndim - 2), ndim - 1, ndim - 2))


def vecdot(x1: AnyArray, x2: AnyArray, /, *, axis: int = -1) -> Result:
    """The dot product of the vectors along ``axis`` (``x1`` conjugated), broadcast over the
    other axes: ``sum(conj(x1) * x2, axis)``, the product fused into the sum under ``jax.jit``.

    ``axis`` is negative (the vectors' axis does not broadcast), as the standard says.

    Examples
    --------
    >>> import numpy as np, oocarr.linalg
    >>> a = oocarr.from_numpy(np.array([[1.0, 2.0], [3.0, 4.0]], "f4"))
    >>> np.asarray(oocarr.linalg.vecdot(a, a)).tolist()
    [5.0, 25.0]
    """
    x1, x2 = _array(x1), _array(x2)
    axis = _negative_axis(axis, min(len(x1.shape), len(x2.shape)), "vecdot")
    if x1.shape[axis] != x2.shape[axis]:
        raise ShapeMismatchError(
            f"vecdot: axis {axis} has {x1.shape[axis]} elements in x1 {tuple(x1.shape)} and "
            f"{x2.shape[axis]} in x2 {tuple(x2.shape)}; they must be equal (that axis does not "
            "broadcast)"
        )
    if _is_complex(x1):
        x1 = fn.conj(x1)
    dtype = np.dtype(jnp.result_type(np.dtype(x1.dtype), np.dtype(x2.dtype)))
    return _sum(fn.multiply(x1, x2), axis=axis, dtype=dtype)


def outer(x1: AnyArray, x2: AnyArray, /) -> Result:
    """The outer product of two vectors: ``x1[:, None] * x2``, each output tile computed from
    the slices of ``x1`` and ``x2`` it spans.

    Examples
    --------
    >>> import numpy as np, oocarr.linalg
    >>> a = oocarr.from_numpy(np.array([1.0, 2.0], "f4"))
    >>> np.asarray(oocarr.linalg.outer(a, np.array([1.0, 10.0, 100.0], "f4"))).tolist()
    [[1.0, 10.0, 100.0], [2.0, 20.0, 200.0]]
    """
    x1, x2 = _array(x1), _array(x2)
    if len(x1.shape) != 1 or len(x2.shape) != 1:
        raise InvalidArgumentError(
            f"outer: x1 and x2 must be 1-d, got shapes {tuple(x1.shape)} and {tuple(x2.shape)}"
        )
    return fn.multiply(manipulation.expand_dims(x1, axis=1), x2)


def cross(x1: AnyArray, x2: AnyArray, /, *, axis: int = -1) -> Result:
    """The cross product of 3-element vectors along ``axis``, broadcast over the other axes.

    Each component (``x1[1] * x2[2] - x1[2] * x2[1]`` ...) is an elementwise expression of
    slices of the inputs, and the three are joined along ``axis``; ``axis`` is negative and has
    length 3 in both inputs, as the standard says.

    Examples
    --------
    >>> import numpy as np, oocarr.linalg
    >>> a = oocarr.from_numpy(np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], "f4"))
    >>> np.asarray(oocarr.linalg.cross(a, np.array([0.0, 1.0, 0.0], "f4"))).tolist()
    [[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    """
    x1, x2 = _array(x1), _array(x2)
    axis = _negative_axis(axis, min(len(x1.shape), len(x2.shape)), "cross")
    if x1.shape[axis] != 3 or x2.shape[axis] != 3:
        raise ShapeMismatchError(
            f"cross: axis {axis} must have 3 elements in x1 {tuple(x1.shape)} and x2 "
            f"{tuple(x2.shape)}"
        )
    after = (slice(None),) * (-axis - 1)

    def part(x: Any, i: int) -> Any:
        return x[(Ellipsis, slice(i, i + 1), *after)]

    a = [part(x1, i) for i in range(3)]
    b = [part(x2, i) for i in range(3)]
    components = [
        fn.subtract(fn.multiply(a[i], b[j]), fn.multiply(a[j], b[i]))
        for i, j in ((1, 2), (2, 0), (0, 1))
    ]
    return manipulation.concat(components, axis=axis)


# ----------------------------------------------------------------------------
# diagonal and trace
# ----------------------------------------------------------------------------
def diagonal(x: AnyArray, /, *, offset: int = 0) -> Result:
    """The ``offset``-th diagonal of each matrix of a stack (its last two axes): shape
    ``(*batch, k)``; ``offset > 0`` above the main diagonal, ``< 0`` below.

    Streamed by :class:`~oocarr.ops.diagonal.Diagonal`, which reads only square blocks on
    the diagonal; differentiable (the gradient is the cotangent on the diagonal, zeros
    elsewhere) and works under ``jax.jit``.

    Examples
    --------
    >>> import numpy as np, oocarr.linalg
    >>> x = oocarr.from_numpy(np.arange(12.0, dtype="f4").reshape(3, 4))
    >>> np.asarray(oocarr.linalg.diagonal(x)).tolist()
    [0.0, 5.0, 10.0]
    >>> np.asarray(oocarr.linalg.diagonal(x, offset=-1)).tolist()
    [4.0, 9.0]
    """
    x = _array(x)
    offset = _static_int(offset, "offset", "diagonal")
    if len(x.shape) < 2:
        raise InvalidArgumentError(f"diagonal needs at least 2 axes, got shape {tuple(x.shape)}")
    return _diagonal(x, offset=offset)


def trace(x: AnyArray, /, *, offset: int = 0, dtype: DTypeLike | None = None) -> Result:
    """The sum of the ``offset``-th diagonal of each matrix of a stack: shape ``batch``.

    ``dtype`` casts the diagonal before it is summed, as the standard's ``sum`` does; with
    ``None`` the sum's own dtype (JAX's rules).

    Examples
    --------
    >>> import numpy as np, oocarr.linalg
    >>> x = oocarr.from_numpy(np.arange(18.0, dtype="f4").reshape(2, 3, 3))
    >>> np.asarray(oocarr.linalg.trace(x)).tolist()
    [12.0, 39.0]
    """
    return _sum(diagonal(x, offset=offset), axis=-1, dtype=dtype)


# ----------------------------------------------------------------------------
# norms
# ----------------------------------------------------------------------------
def vector_norm(
    x: AnyArray, /, *, axis: Axis = None, keepdims: bool = False, ord: float = 2
) -> Result:
    """The vector norm of ``x`` over ``axis`` (all axes by default, as one vector).

    ``ord``: ``2`` (Euclidean, ``sqrt(sum(|x|**2))``), ``1`` (``sum(|x|)``), ``inf``
    (``max(|x|)``), ``-inf`` (``min(|x|)``), ``0`` (the count of non-zero elements) or any
    other ``p`` (``sum(|x|**p)**(1/p)``, negative ``p`` too).  Each is one streamed reduction
    of an elementwise expression (fused under ``jax.jit``); the result has ``x``'s real
    floating dtype (integers are promoted, as ``jax.numpy.linalg`` does).

    Examples
    --------
    >>> import numpy as np, oocarr.linalg
    >>> x = oocarr.from_numpy(np.array([[3.0, -4.0], [0.0, 1.0]], "f4"))
    >>> float(oocarr.linalg.vector_norm(x)), float(oocarr.linalg.vector_norm(x, ord=1))
    (5.099019527435303, 8.0)
    >>> np.asarray(oocarr.linalg.vector_norm(x, axis=-1, ord=np.inf)).tolist()
    [4.0, 1.0]
    """
    x = _inexact(_array(x))
    axis = _norm_axes(axis, len(x.shape))
    if isinstance(ord, bool) or not isinstance(ord, numbers.Real):
        raise InvalidArgumentError(f"vector_norm: ord must be a real number, got {ord!r}")
    if ord == 2:
        return fn.sqrt(fn.sum(_squared_magnitude(x), axis=axis, keepdims=keepdims))
    if ord == 0:
        count = fn.sum(fn.not_equal(x, 0), axis=axis, keepdims=keepdims)
        return fn.astype(count, _real_dtype(x))
    magnitude = fn.abs(x)
    if ord == 1:
        return fn.sum(magnitude, axis=axis, keepdims=keepdims)
    if ord == math.inf:
        return fn.max(magnitude, axis=axis, keepdims=keepdims)
    if ord == -math.inf:
        return fn.min(magnitude, axis=axis, keepdims=keepdims)
    if math.isnan(ord):
        raise InvalidArgumentError("vector_norm: ord must be a number, got nan")
    p = float(ord)
    return fn.power(fn.sum(fn.power(magnitude, p), axis=axis, keepdims=keepdims), 1.0 / p)


#: ``matrix_norm``'s orders that reduce ``|x|`` along rows or columns: (axis summed, reduction
#: of the sums).
_SUM_ORDS = {1: (-2, "max"), -1: (-2, "min"), math.inf: (-1, "max"), -math.inf: (-1, "min")}
#: ``matrix_norm``'s orders that reduce the singular values.
_SVD_ORDS = {2: "max", -2: "min", "nuc": "sum"}


def _svdvals(x: Any) -> Any:
    """The singular values of each matrix of a stack, in descending order (TSQR's).

    A complex ``A = X + iY`` has the singular values of the real ``[[X, -Y], [Y, X]]``, each
    twice (that matrix is unitarily similar to ``diag(A, conj(A))``): real TSQR gives them.
    """
    from oocarr.api.linalg_tsqr import svdvals

    if not _is_complex(x):
        return svdvals(x)
    re, im = fn.real(x), fn.imag(x)
    top = manipulation.concat([re, fn.negative(im)], axis=-1)
    bottom = manipulation.concat([im, re], axis=-1)
    return svdvals(manipulation.concat([top, bottom], axis=-2))[..., ::2]


def matrix_norm(x: AnyArray, /, *, keepdims: bool = False, ord: Any = "fro") -> Result:
    """The matrix norm of each matrix of a stack (its last two axes).

    ``ord``: ``"fro"`` (Frobenius, ``sqrt(sum(|x|**2))``), ``1`` / ``-1`` (the largest /
    smallest column sum of ``|x|``), ``inf`` / ``-inf`` (the largest / smallest row sum),
    each streamed reductions of ``|x|``; ``2`` / ``-2`` / ``"nuc"`` (the largest / smallest
    singular value, their sum) reduce :func:`svdvals`'s singular values.  ``keepdims``
    keeps the two axes with length one.

    Examples
    --------
    >>> import numpy as np, oocarr.linalg
    >>> x = oocarr.from_numpy(np.array([[1.0, -2.0], [3.0, 4.0]], "f4"))
    >>> float(oocarr.linalg.matrix_norm(x)) == float(np.sqrt(30.0, dtype="f4"))
    True
    >>> float(oocarr.linalg.matrix_norm(x, ord=1)), float(oocarr.linalg.matrix_norm(x, ord=np.inf))
    (6.0, 7.0)
    """
    x = _inexact(_array(x))
    if len(x.shape) < 2:
        raise InvalidArgumentError(f"matrix_norm needs at least 2 axes, got shape {tuple(x.shape)}")
    if isinstance(ord, str):
        known = ord in ("fro", "nuc")
    else:
        known = not isinstance(ord, bool) and isinstance(ord, numbers.Real)
        known = known and (ord in _SUM_ORDS or ord in _SVD_ORDS)
    if not known:
        raise InvalidArgumentError(
            f"matrix_norm: ord must be 'fro', 'nuc', 1, -1, 2, -2, inf or -inf, got {ord!r}"
        )
    if ord == "fro":
        return fn.sqrt(fn.sum(_squared_magnitude(x), axis=(-2, -1), keepdims=keepdims))
    if ord in _SUM_ORDS:
        summed, reduce = _SUM_ORDS[ord]
        sums = fn.sum(fn.abs(x), axis=summed, keepdims=keepdims)
        other = -1 if summed == -2 or not keepdims else -2
        return getattr(fn, reduce)(sums, axis=other, keepdims=keepdims)
    # the singular values are in memory (R's): so is their reduction
    out = getattr(jnp, _SVD_ORDS[ord])(_svdvals(x), axis=-1, keepdims=keepdims)
    return out[..., None] if keepdims else out
