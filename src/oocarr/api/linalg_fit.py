"""The ``linalg`` functions whose matrix must fit in memory: ``eigh``, ``eigvalsh``, ``pinv``,
``matrix_rank`` and ``matrix_power``.

None of them streams: an eigendecomposition, a pseudo-inverse or a power of a matrix needs the
whole matrix at once.  So a stored matrix (each matrix of a stack in turn) is read whole into
memory with :func:`oocarr.materialize` -- a differentiable read, eager and under
``jax.jit`` -- and handed to :mod:`jax.numpy.linalg`: values and gradients are
``jax.numpy.linalg``'s.  Before anything is read, the matrix and the working copies the
function holds beside it are checked against the memory budget; one that does not fit is
refused with :class:`~oocarr.errors.BudgetTooSmallError` (through
:func:`oocarr.engine.plan.require`), naming the bytes needed.  Arrays that are not stored go
to :mod:`jax.numpy.linalg` directly.

Results: ``eigh``, ``eigvalsh`` and ``matrix_rank`` give small results (or results the size
of the matrix that the caller asked for as factors) in memory, as ``jax.Array``s.  ``pinv``
and ``matrix_power`` of a stored matrix give a stored matrix (a ``DiskArray`` in scratch,
written by :func:`oocarr.asarray`, differentiable), as every other oocarr function whose
result is an array of the input's size: so a stack's results are never all in memory at
once, and the caller goes on streaming.  ``rtol`` is the Array API's, a tolerance relative
to the largest singular value, by default ``max(M, N) · eps`` of the matrix's floating dtype
(``jax.numpy.linalg.pinv``'s default is ten times that, and ``jax.numpy.linalg.matrix_rank``
takes a given ``rtol`` as an absolute tolerance: both follow the standard here, for arrays in
memory too).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.api import manipulation
from oocarr.api.creation import asarray
from oocarr.engine import plan
from oocarr.engine.budget import memory_budget_bytes
from oocarr.errors import InvalidArgumentError
from oocarr.jaxlayer.disk_array import DiskArray, is_disk
from oocarr.jaxlayer.make_op import materialize

if TYPE_CHECKING:
    from oocarr.jaxlayer.disk_array import AnyArray, ArrayLike, Result

__all__ = [
    "EighResult",
    "eigh",
    "eigvalsh",
    "matrix_power",
    "matrix_rank",
    "pinv",
    "in_memory",
    "is_complex",
    "read_whole",
]


class EighResult(NamedTuple):
    """``eigh``'s result: the eigenvalues (ascending) and the eigenvectors (as columns)."""

    eigenvalues: Any
    eigenvectors: Any


#: Matrix-sized buffers each function holds at once, the matrix read included: the read
#: matrix, JAX's working copy of it (a symmetrized one for ``eigh``), and the factors or
#: products computed from it.
_BUFFERS = {
    "eigh": 3,
    "eigvalsh": 3,
    "matrix_rank": 2,
    "pinv": 5,
    "matrix_power": 3,
    "matrix_power of a negative power": 4,
}


def _shape(x: Any, name: str, *, square: bool) -> tuple[int, ...]:
    shape = tuple(x.shape)
    if len(shape) < 2:
        raise InvalidArgumentError(
            f"{name} needs a matrix (at least 2 axes), got shape {shape}; reshape the input "
            "to (..., M, N)"
        )
    if square and shape[-1] != shape[-2]:
        raise InvalidArgumentError(
            f"{name} needs square matrices (the last two axes of equal length), got shape {shape}"
        )
    return shape


def _float_dtype(x: Any) -> np.dtype:
    """The floating dtype ``jax.numpy.linalg`` computes ``x`` in."""
    return np.dtype(jnp.promote_types(x.dtype, jnp.float32))


def _url(x: Any) -> str | None:
    if isinstance(x, DiskArray):
        return x.url
    locator = getattr(jax.typeof(x), "locator", None)
    return None if locator is None else locator.full_url


def _require_fits(name: str, x: Any, results_kept: int = 0) -> None:
    """Refuse, before any I/O, a matrix of ``x`` that does not fit the memory budget with the
    working copies ``name`` holds beside it (and ``results_kept`` elements of the earlier
    matrices' results of a stack, kept in memory)."""
    shape = tuple(x.shape)
    itemsize = max(np.dtype(x.dtype).itemsize, _float_dtype(x).itemsize)
    matrix = shape[-2] * shape[-1] * itemsize
    items = [
        plan.Buffers(
            f"one {shape[-2]} x {shape[-1]} matrix and its working copies, in memory",
            _BUFFERS[name],
            matrix,
        )
    ]
    if results_kept:
        items.append(
            plan.Buffers("the stack's other matrices' results, in memory", 1, results_kept)
        )
    plan.require(
        plan.Projection(name, tuple(items)),
        memory_budget_bytes(),
        remedy=(
            f"with oocarr.set_memory_budget (or oocarr.memory_budget(...)); {name} reads "
            "each matrix whole, it does not stream"
        ),
        url=_url(x),
    )


def read_whole(name: str, x: AnyArray, copies: int) -> jax.Array:
    """``x`` read whole into memory, differentiably, once it is known to fit the budget with
    ``copies`` working copies beside it (refused before any I/O otherwise): for what no
    streamed algorithm of oocarr computes (the TSQR functions of a complex matrix).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.eye(2, dtype="c8"))
    >>> read_whole("qr", x, 3).dtype
    dtype('complex64')
    """
    nbytes = math.prod(x.shape) * max(np.dtype(x.dtype).itemsize, _float_dtype(x).itemsize)
    what = f"the whole {' x '.join(map(str, x.shape))} array and its working copies, in memory"
    plan.require(
        plan.Projection(name, (plan.Buffers(what, copies, nbytes),)),
        memory_budget_bytes(),
        remedy=f"with oocarr.set_memory_budget; {name} of a complex matrix reads it whole",
        url=_url(x),
    )
    return materialize(x)


def is_complex(*arrays: Any) -> bool:
    """Whether any of ``arrays`` is stored and complex: oocarr's streamed and out-of-core
    factorizations are built for real matrices, so such a call reads its operands whole
    (:func:`in_memory`) and hands them to ``jax.numpy.linalg``."""
    return any(is_disk(a) and np.dtype(a.dtype).kind == "c" for a in arrays)


def in_memory(name: str, x: AnyArray, copies: int = 4) -> jax.Array:
    """``x`` in memory: read whole (:func:`read_whole`) when stored, else as a JAX array."""
    return read_whole(name, x, copies) if is_disk(x) else jnp.asarray(x)


def _each_matrix(x: Any, compute: Callable[[Any, tuple[int, ...]], Any]) -> list[Any]:
    """``compute(matrix, index)`` for each matrix of the stack ``x``, in C order."""
    batch = tuple(x.shape[:-2])
    if not batch:
        return [compute(materialize(x), ())]
    return [compute(materialize(x[index]), index) for index in np.ndindex(*batch)]


def _stacked(found: list[Any], batch: tuple[int, ...], empty: Any) -> Any:
    """In-memory results of each matrix of a stack, as one array of the stack's batch."""
    if not batch:
        return found[0]
    if not found:
        return empty
    return jnp.stack(found).reshape(*batch, *found[0].shape)


def _stored_stack(stored: list[Any], batch: tuple[int, ...], empty: Any) -> Any:
    """Results of each matrix of a stack, each written to scratch as it was computed, stacked
    (``empty`` for a stack of no matrices)."""
    if not stored:
        return asarray(empty)
    if not batch:
        return stored[0]
    joined = manipulation.stack(stored, axis=0)
    if len(batch) == 1:
        return joined
    return manipulation.reshape(joined, (*batch, *stored[0].shape))


def eigh(x: ArrayLike, /) -> EighResult:
    """The eigenvalues (ascending) and eigenvectors of a symmetric (Hermitian) matrix, or of
    each matrix of a stack, as ``jax.numpy.linalg.eigh`` gives them (its lower triangle
    used, symmetrized).

    A stored matrix is read whole into memory, one matrix of a stack at a time: it must fit
    the memory budget with about two working copies.  Both results are in memory.

    Raises
    ------
    BudgetTooSmallError
        When one matrix and its working copies do not fit the memory budget (before any I/O).
    InvalidArgumentError
        When the matrices are not square.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.array([[2.0, 1.0], [1.0, 2.0]], "f4"))
    >>> w, v = eigh(x)
    >>> np.round(np.asarray(w), 4).tolist()
    [1.0, 3.0]
    """
    if not is_disk(x):
        w, v = jnp.linalg.eigh(jnp.asarray(x))
        return EighResult(w, v)
    shape = _shape(x, "eigh", square=True)
    batch, n = shape[:-2], shape[-1]
    count = math.prod(batch)
    _require_fits("eigh", x, max(0, count - 1) * (n * n + n) * _float_dtype(x).itemsize)
    found = _each_matrix(x, lambda m, _: jnp.linalg.eigh(m))
    dtype = _float_dtype(x)
    values = _stacked([f[0] for f in found], batch, jnp.zeros((*batch, n), dtype))
    vectors = _stacked([f[1] for f in found], batch, jnp.zeros((*batch, n, n), dtype))
    return EighResult(values, vectors)


def eigvalsh(x: ArrayLike, /) -> jax.Array:
    """The eigenvalues (ascending) of a symmetric (Hermitian) matrix, or of each matrix of a
    stack, as ``jax.numpy.linalg.eigvalsh`` gives them.

    A stored matrix is read whole into memory, one matrix of a stack at a time (see
    :func:`eigh`); the eigenvalues are in memory.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.diag(np.array([3.0, -1.0], "f4")))
    >>> np.asarray(eigvalsh(x)).tolist()
    [-1.0, 3.0]
    """
    if not is_disk(x):
        return jnp.linalg.eigvalsh(jnp.asarray(x))
    shape = _shape(x, "eigvalsh", square=True)
    batch, n = shape[:-2], shape[-1]
    _require_fits("eigvalsh", x, max(0, math.prod(batch) - 1) * n * _float_dtype(x).itemsize)
    found = _each_matrix(x, lambda m, _: jnp.linalg.eigvalsh(m))
    return _stacked(found, batch, jnp.zeros((*batch, n), _float_dtype(x)))


def _default_rtol(shape: tuple[int, ...], dtype: np.dtype) -> float:
    """The Array API's default relative tolerance: ``max(M, N) · eps``."""
    return max(shape[-2:]) * float(np.finfo(dtype).eps)


def _rtol_of(rtol: Any, batch: tuple[int, ...], index: tuple[int, ...]) -> Any:
    """The tolerance of matrix ``index`` of a stack: ``rtol`` itself, or its element where it
    is an array broadcast to the stack's batch shape."""
    if rtol is None or np.ndim(rtol) == 0:
        return rtol
    return jnp.broadcast_to(jnp.asarray(rtol), batch)[index]


def _check_rtol(rtol: Any, batch: tuple[int, ...], name: str) -> None:
    if rtol is None or np.ndim(rtol) == 0:
        return
    try:
        np.broadcast_shapes(np.shape(rtol), batch)
    except ValueError:
        raise InvalidArgumentError(
            f"{name}: rtol of shape {np.shape(rtol)} does not broadcast to the stack's batch "
            f"shape {batch}; give a float, or an array of the batch shape"
        ) from None
    if np.broadcast_shapes(np.shape(rtol), batch) != batch:
        raise InvalidArgumentError(
            f"{name}: rtol of shape {np.shape(rtol)} has more matrices than the stack's batch "
            f"shape {batch}"
        )


def pinv(x: ArrayLike, /, *, rtol: float | Any | None = None) -> Result:
    """The Moore-Penrose pseudo-inverse of a matrix, or of each matrix of a stack: the
    singular values at most ``rtol`` times the largest count as zero (default
    ``max(M, N) · eps`` of the matrix's floating dtype, the Array API's).

    A stored matrix is read whole into memory, one matrix of a stack at a time: it must fit
    the memory budget with about four working copies (its SVD).  The pseudo-inverse of a
    stored matrix is stored (a ``DiskArray`` of shape ``(..., N, M)`` in scratch), and
    differentiable as ``jax.numpy.linalg.pinv``.

    Raises
    ------
    BudgetTooSmallError
        When one matrix and its working copies do not fit the memory budget (before any I/O).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.array([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0]], "f4"))
    >>> np.asarray(pinv(x)).tolist()
    [[1.0, 0.0, 0.0], [0.0, 0.5, 0.0]]
    """
    if not is_disk(x):
        x = jnp.asarray(x)
        tol = _default_rtol(x.shape, _float_dtype(x)) if rtol is None else rtol
        return jnp.linalg.pinv(x, rtol=tol)
    shape = _shape(x, "pinv", square=False)
    batch = shape[:-2]
    _check_rtol(rtol, batch, "pinv")
    _require_fits("pinv", x)
    tol = _default_rtol(shape, _float_dtype(x)) if rtol is None else rtol
    found = _each_matrix(x, lambda m, i: asarray(jnp.linalg.pinv(m, rtol=_rtol_of(tol, batch, i))))
    empty = jnp.zeros((*batch, shape[-1], shape[-2]), _float_dtype(x))
    return _stored_stack(found, batch, empty)


def _rank(m: jax.Array, rtol: Any) -> jax.Array:
    """The rank of ``m`` (a matrix or a stack): its singular values above ``rtol`` times the
    largest, ``rtol`` relative as the Array API says (``jax.numpy.linalg.matrix_rank`` takes
    a given ``rtol`` as an absolute tolerance)."""
    s = jnp.linalg.svdvals(m)
    if rtol is None:
        rtol = _default_rtol(m.shape, np.dtype(s.dtype))
    largest = jnp.max(s, axis=-1, keepdims=True, initial=0.0)
    return jnp.sum(s > jnp.asarray(rtol, s.dtype)[..., None] * largest, axis=-1)


def matrix_rank(x: ArrayLike, /, *, rtol: float | Any | None = None) -> jax.Array:
    """The rank of a matrix, or of each matrix of a stack: how many singular values are
    larger than ``rtol`` times the largest (default ``max(M, N) · eps`` of the matrix's
    floating dtype), as the Array API says.  ``rtol`` may be an array, one tolerance per
    matrix of the stack.

    A stored matrix is read whole into memory, one matrix of a stack at a time; the ranks
    are in memory.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.array([[1.0, 2.0], [2.0, 4.0], [0.0, 0.0]], "f4"))
    >>> int(matrix_rank(x))
    1
    """
    if not is_disk(x):
        x = jnp.asarray(x)
        _shape(x, "matrix_rank", square=False)
        _check_rtol(rtol, tuple(x.shape[:-2]), "matrix_rank")
        return _rank(x, rtol)
    shape = _shape(x, "matrix_rank", square=False)
    batch = shape[:-2]
    _check_rtol(rtol, batch, "matrix_rank")
    _require_fits("matrix_rank", x, max(0, math.prod(batch) - 1) * 8)
    found = _each_matrix(x, lambda m, i: _rank(m, _rtol_of(rtol, batch, i)))
    dtype = jnp.sum(jnp.zeros(1, bool)).dtype
    return _stacked(found, batch, jnp.zeros(batch, dtype))


def matrix_power(x: AnyArray, n: int, /) -> Result:
    """A square matrix (each matrix of a stack) raised to the integer power ``n``, by repeated
    squaring as ``jax.numpy.linalg.matrix_power``; ``n = 0`` gives the identity, a negative
    ``n`` the inverse's power.

    A stored matrix is read whole into memory, one matrix of a stack at a time: it must fit
    the memory budget with two working copies (three for a negative power: the inverse).
    The power of a stored matrix is stored (a ``DiskArray`` in scratch), differentiable as
    ``jax.numpy.linalg.matrix_power``.

    Raises
    ------
    BudgetTooSmallError
        When one matrix and its working copies do not fit the memory budget (before any I/O).
    InvalidArgumentError
        When ``n`` is not an integer, or the matrices are not square.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.array([[1.0, 1.0], [0.0, 1.0]], "f4"))
    >>> np.asarray(matrix_power(x, 3)).tolist(), np.asarray(matrix_power(x, -1)).tolist()
    ([[1.0, 3.0], [0.0, 1.0]], [[1.0, -1.0], [0.0, 1.0]])
    """
    if isinstance(n, bool) or not isinstance(n, int | np.integer):
        raise InvalidArgumentError(
            f"matrix_power: n must be a Python integer, got {type(n).__name__} {n!r:.40}"
        )
    n = int(n)
    if not is_disk(x):
        return jnp.linalg.matrix_power(jnp.asarray(x), n)
    shape = _shape(x, "matrix_power", square=True)
    _require_fits("matrix_power of a negative power" if n < 0 else "matrix_power", x)
    found = _each_matrix(x, lambda m, _: asarray(jnp.linalg.matrix_power(m, n)))
    return _stored_stack(
        found, shape[:-2], jnp.zeros(shape, x.dtype if n >= 0 else _float_dtype(x))
    )
