"""Linear algebra of tall matrices through TSQR: ``qr``, ``svd``, ``svdvals`` and ``lstsq``.

A stored matrix ``x`` (m × n, m ≥ n) is reduced to the R factor of its QR
decomposition in one pass over its row panels (:class:`oocarr.ops.tsqr.TSQR`,
under the memory budget; R is n × n, in memory).  Everything else follows
from R:

* ``svdvals(x)`` is ``svdvals(R)``;
* ``qr(x)`` is ``(Q, R)`` with Q by direct TSQR (:class:`oocarr.ops.tsqr_q.TSQRQ`:
  two more passes over the row panels, Q written to scratch), orthonormal to
  about ε however ill-conditioned ``x`` (``x R⁻¹``, the "indirect TSQR" of
  Benson, Gleich and Demmel, is orthonormal to about ε·κ(x) only);
* ``svd(x)`` takes the SVD ``R = U_R S Vᴴ``, and ``U = Q U_R`` (the same
  passes, ``U_R`` folded into each panel's factor);
* ``lstsq(x, y)`` factors ``[x | y]``: its R holds R, ``Qᵀy`` and the
  residuals, so the solution (NumPy's minimum-norm one, through the SVD of
  R) needs no Q at all.

Every function is differentiable, with ``jax.numpy.linalg``'s gradients: the R
factor's is one more pass over ``x`` (``x̄ = x·G``, see :mod:`oocarr.ops.tsqr`),
Q's two passes over Q and its cotangent (see :mod:`oocarr.ops.tsqr_q`), and the
rest is JAX on n × n matrices.  A wide matrix (m < n) is handled through its
transpose where the result allows (``svdvals``, ``svd``).  ``qr``, ``svd`` and
``svdvals`` of a stack (more than 2 axes) factor one matrix at a time, their
stored results stacked; ``lstsq`` takes one matrix, as NumPy's and
``jax.numpy.linalg``'s do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.api import creation, manipulation
from oocarr.api import elementwise as fn
from oocarr.api.linalg_fit import in_memory, is_complex, read_whole
from oocarr.errors import InvalidArgumentError, NotSupportedError
from oocarr.jaxlayer.disk_array import is_disk
from oocarr.jaxlayer.make_op import make_op
from oocarr.ops.tsqr import TSQR
from oocarr.ops.tsqr_q import TSQRQ

if TYPE_CHECKING:
    from oocarr.jaxlayer.disk_array import AnyArray, ArrayLike

__all__ = ["QRResult", "SVDResult", "lstsq", "qr", "r_factor", "svd", "svdvals"]

_r_factor = make_op(TSQR, in_memory=True)
_q_times = make_op(TSQRQ)


class QRResult(NamedTuple):
    """``qr``'s result: ``Q`` (m × n, stored) and ``R`` (n × n, in memory)."""

    Q: Any
    R: Any


class SVDResult(NamedTuple):
    """``svd``'s result: ``U`` (stored when ``x`` is), ``S`` and ``Vh`` (in memory)."""

    U: Any
    S: Any
    Vh: Any


def _matrix(x: Any, name: str) -> tuple[int, int]:
    shape = tuple(x.shape)
    if len(shape) != 2:
        raise NotSupportedError(
            f"{name} of a stored array works on one matrix of 2 axes, got shape {shape}; for a "
            f"stack of matrices, call {name} on each x[i]"
        )
    return shape


def _matrices(x: Any, name: str) -> tuple[int, ...]:
    shape = tuple(x.shape)
    if len(shape) < 2:
        raise InvalidArgumentError(f"{name} needs at least 2 axes, got shape {shape}")
    return shape


def _float(dtype: Any) -> np.dtype:
    return np.dtype(jnp.promote_types(dtype, jnp.float32))


def _transposed(x: Any) -> Any:
    return fn.transpose(x, (1, 0))


def r_factor(x: ArrayLike, /) -> jax.Array:
    """The R factor of ``x = QR`` for a tall matrix (m ≥ n), with a non-negative diagonal, by
    TSQR over its row panels (one pass, under the memory budget).

    NumPy's ``qr(x, mode="r")`` gives the same matrix up to the signs of its rows.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.array([[3.0, 0.0], [4.0, 5.0], [0.0, 0.0]], "f4"))
    >>> (np.round(np.asarray(r_factor(x)), 4) + 0.0).tolist()
    [[5.0, 4.0], [0.0, 3.0]]
    """
    _matrix(x, "r_factor")
    return _r_factor(x)


def svdvals(x: AnyArray, /) -> jax.Array:
    """The singular values of a matrix (of each matrix of a stack), in descending order: those
    of its TSQR factor R.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.diag(np.array([3.0, 1.0, 2.0], "f4")))
    >>> np.asarray(svdvals(x)).tolist()
    [3.0, 2.0, 1.0]
    """
    if not is_disk(x):
        return jnp.linalg.svdvals(jnp.asarray(x))
    if is_complex(x):
        return jnp.linalg.svdvals(read_whole("svdvals", x, 3))
    shape = tuple(x.shape)
    if len(shape) < 2:
        raise InvalidArgumentError(f"svdvals needs at least 2 axes, got shape {shape}")
    if len(shape) > 2:  # a stack: one matrix at a time; the values are few, and in memory
        batch = shape[:-2]
        if 0 in batch:
            return jnp.zeros((*batch, min(shape[-2:])), jnp.result_type(x.dtype, jnp.float32))
        found = [svdvals(x[index]) for index in np.ndindex(*batch)]
        return jnp.stack(found).reshape(*batch, -1)
    m, n = shape
    return jnp.linalg.svdvals(r_factor(x if m >= n else _transposed(x)))


def _per_matrix(x: Any, factor: Any, stored: tuple[bool, ...], empty: Any) -> tuple:
    """``factor`` of each matrix of the stack ``x`` in turn, its results stacked: each stored
    one (``stored``) by oocarr's ``stack``, each in-memory one by ``jax.numpy``'s; ``empty()``
    gives the results of a stack of no matrices."""
    batch = tuple(x.shape[:-2])
    if 0 in batch:
        return empty()
    found = [factor(x[index]) for index in np.ndindex(*batch)]
    results = []
    for i, is_stored in enumerate(stored):
        parts = [f[i] for f in found]
        if is_stored:
            joined: AnyArray = manipulation.stack(parts, axis=0)
            if len(batch) > 1:
                joined = manipulation.reshape(joined, (*batch, *parts[0].shape))
        else:
            joined = jnp.stack(parts).reshape(*batch, *parts[0].shape)
        results.append(joined)
    return tuple(results)


def _stored_zeros(shape: tuple[int, ...], dtype: Any) -> Any:
    return creation.zeros(shape, dtype=dtype)


def qr(x: AnyArray, /, *, mode: str = "reduced") -> QRResult:
    """``x = QR`` of a tall matrix (of each matrix of a stack): Q (m × n) in scratch storage,
    R (n × n, non-negative diagonal) in memory.

    Q is made by direct TSQR (:class:`~oocarr.ops.tsqr_q.TSQRQ`): orthonormal to about
    machine precision however ill-conditioned ``x``.  Two passes over ``x`` (R, then each
    row panel's own Q factor, written where Q goes) and one over Q (each panel's factor read
    back and multiplied by its n × n block of the stacked R factors' Q); the gradient is
    ``jax.numpy.linalg.qr``'s.

    Parameters
    ----------
    x : DiskArray
        A matrix with at least as many rows as columns, or a stack of them (``(..., m, n)``).
    mode : {"reduced", "complete"}
        ``"complete"`` only for a square matrix (a tall one's complete Q is m × m).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> a = np.random.default_rng(0).standard_normal((50, 3)).astype("f4")
    >>> q, r = qr(oocarr.from_numpy(a))
    >>> bool(np.allclose(np.asarray(q) @ np.asarray(r), a, atol=1e-4))
    True
    """
    if mode not in ("reduced", "complete"):
        raise InvalidArgumentError(f"qr mode must be 'reduced' or 'complete', got {mode!r}")
    if not is_disk(x) or is_complex(x):
        q, r = jnp.linalg.qr(in_memory("qr", x), mode=mode)
        return QRResult(q, r)
    shape = _matrices(x, "qr")
    m, n = shape[-2:]
    if m < n:
        raise NotSupportedError(
            f"qr of a stored wide matrix (shape {shape}) is not built: its R is m × n; "
            "factor its transpose (x.mT) instead"
        )
    if mode == "complete" and m > n:
        raise NotSupportedError(
            f"qr(mode='complete') of a stored tall matrix (shape {shape}) would make an "
            f"{m} × {m} Q; use mode='reduced'"
        )
    if len(shape) > 2:
        dtype = _float(x.dtype)

        def empty() -> tuple:
            return _stored_zeros(shape, dtype), jnp.zeros((*shape[:-2], n, n), dtype)

        return QRResult(*_per_matrix(x, qr, (True, False), empty))
    r = r_factor(x)
    return QRResult(_q_times(x, r, jnp.eye(n, dtype=r.dtype)), r)


def svd(x: AnyArray, /, *, full_matrices: bool = True) -> SVDResult:
    """``x = U diag(S) Vh`` of a stored matrix (of each matrix of a stack) through TSQR;
    ``full_matrices=False`` for a tall (or wide) one, whose full U (or Vh) would be m × m.

    ``R = U_R diag(S) Vh`` in memory, and ``U = Q U_R`` with Q by direct TSQR (orthonormal
    to about machine precision); a wide matrix goes through its transpose.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> a = np.random.default_rng(0).standard_normal((40, 3)).astype("f4")
    >>> u, s, vh = svd(oocarr.from_numpy(a), full_matrices=False)
    >>> bool(np.allclose((np.asarray(u) * np.asarray(s)) @ np.asarray(vh), a, atol=1e-4))
    True
    """
    if not is_disk(x) or is_complex(x):
        u, s, vh = jnp.linalg.svd(in_memory("svd", x), full_matrices=full_matrices)
        return SVDResult(u, s, vh)
    shape = _matrices(x, "svd")
    m, n = shape[-2:]
    if full_matrices and m != n:
        raise NotSupportedError(
            f"svd(full_matrices=True) of a stored {m} × {n} matrix would make a "
            f"{max(m, n)} × {max(m, n)} factor; pass full_matrices=False"
        )
    if len(shape) > 2:
        batch, k, dtype = shape[:-2], min(m, n), _float(x.dtype)

        def empty() -> tuple:
            u_shape, vh_shape = (*batch, m, k), (*batch, k, n)
            if m >= n:
                return (
                    _stored_zeros(u_shape, dtype),
                    jnp.zeros((*batch, k), dtype),
                    jnp.zeros(vh_shape, dtype),
                )
            return (
                jnp.zeros(u_shape, dtype),
                jnp.zeros((*batch, k), dtype),
                _stored_zeros(vh_shape, dtype),
            )

        stored = (True, False, False) if m >= n else (False, False, True)
        return SVDResult(*_per_matrix(x, lambda v: svd(v, full_matrices=False), stored, empty))
    if m < n:
        u, s, vh = svd(_transposed(x), full_matrices=False)
        return SVDResult(vh.T, s, _transposed(u))
    r = r_factor(x)
    ur, s, vh = jnp.linalg.svd(r, full_matrices=False)
    return SVDResult(_q_times(x, r, ur), s, vh)


def lstsq(a: AnyArray, b: AnyArray, rcond: float | None = None) -> tuple[Any, Any, Any, Any]:
    """Least squares ``a @ x ≈ b`` for a tall ``a``, with NumPy's signature and results:
    ``(x, residuals, rank, s)``.  One matrix ``a`` of 2 axes: NumPy's and
    ``jax.numpy.linalg``'s ``lstsq`` take no stacks either (solve each ``a[i]`` in turn).

    ``[a | b]`` is factored by TSQR in one pass; ``x`` is NumPy's minimum-norm solution
    (singular values of ``a`` at most ``rcond`` times the largest count as zero; ``rcond``
    defaults to machine precision times ``max(m, n)``).  ``residuals`` are the squared norms
    of ``b - a @ x`` per column when ``a`` has full rank and more rows than columns, else
    empty, as NumPy's (under ``jax.jit`` the rank is not known while tracing, and the
    residuals are always returned).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> a = np.random.default_rng(0).standard_normal((100, 3)).astype("f4")
    >>> w = np.array([1.0, -2.0, 0.5], "f4")
    >>> x, res, rank, s = lstsq(oocarr.from_numpy(a), oocarr.from_numpy(a @ w))
    >>> np.round(np.asarray(x), 3).tolist(), int(rank)
    ([1.0, -2.0, 0.5], 3)
    """
    m, n = _matrix(a, "lstsq")
    if m < n:
        raise NotSupportedError(
            f"lstsq of a stored wide matrix (shape {(m, n)}) is not built; TSQR needs at least "
            "as many rows as columns"
        )
    b_shape = tuple(b.shape)
    if len(b_shape) not in (1, 2) or b_shape[0] != m:
        raise InvalidArgumentError(
            f"lstsq: b must have shape ({m},) or ({m}, k) for a of shape {(m, n)}, got {b_shape}"
        )
    columns = b if len(b_shape) == 2 else manipulation.reshape(b, (m, 1))
    if not is_disk(columns):
        columns = np.asarray(columns)
    k = columns.shape[1]
    dtype = jnp.result_type(a.dtype, columns.dtype, jnp.float32)
    if m < n + k:
        raise NotSupportedError(
            f"lstsq of a stored {m} × {n} matrix with {k} right-hand sides needs at least "
            f"{n + k} rows"
        )
    joined = manipulation.concat([_as(a, dtype), _as(columns, dtype)], axis=1)
    full = r_factor(joined)
    r, z, tail = full[:n, :n], full[:n, n:], full[n:, n:]
    u, s, vh = jnp.linalg.svd(r, full_matrices=False)
    if rcond is None:
        rcond = float(np.finfo(np.dtype(dtype)).eps) * max(m, n)
    keep = s > rcond * s[0]
    inverse = jnp.where(keep, 1.0 / jnp.where(keep, s, 1.0), 0.0)
    x = vh.T @ (inverse[:, None] * (u.T @ z))
    rank = jnp.sum(keep)
    residuals = jnp.sum(tail**2, axis=0)
    try:
        deficient = int(rank) < n
    except jax.errors.ConcretizationTypeError:  # traced: NumPy's empty result needs a value
        deficient = False
    if m <= n or deficient:
        residuals = jnp.zeros((0,), dtype)
    if len(b_shape) == 1:
        x = x[:, 0]
        residuals = residuals[:1] if residuals.shape[0] else residuals
    return x, residuals, rank, s


def _as(x: Any, dtype: Any) -> Any:
    if is_disk(x):
        return x if x.dtype == dtype else fn.astype(x, dtype)
    return np.asarray(x, dtype)
