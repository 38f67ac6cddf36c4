"""Statistics built from the streamed ops: ``var``, ``std``, ``count_nonzero`` and the
NaN-ignoring reductions (``nansum``, ``nanmean``, ``nanmax``, ``nanmin``, ``nanvar``,
``nanstd``).

Each is a short composition of elementwise ops and reductions, run under ``jax.jit`` when
called on concrete arrays, so that the elementwise steps fuse into the reductions that read
them: eagerly ``var`` reads ``x`` twice (its mean, then the squared deviations from it, which
are never written) and is as exact as NumPy's two-pass formula.  Inside the caller's own
``jax.jit``, ``var`` and ``std`` share one pass with ``mean`` of the same array
(:mod:`oocarr.api.moments`).  Gradients come from the ops' own.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.api import elementwise as fn
from oocarr.api.moments import moments
from oocarr.errors import InvalidArgumentError
from oocarr.jaxlayer import traced_leaves
from oocarr.jaxlayer.disk_array import add_methods, is_disk
from oocarr.ops.reductions import normalize_axes

if TYPE_CHECKING:
    from oocarr.jaxlayer.disk_array import AnyArray, ArrayLike, Result

__all__ = [
    "var",
    "std",
    "count_nonzero",
    "nansum",
    "nanmean",
    "nanmax",
    "nanmin",
    "nanvar",
    "nanstd",
    "install_methods",
]

Axis = int | tuple[int, ...] | None


def _axis(axis: Axis) -> Axis:
    """``axis`` hashable, for ``jax.jit``'s static arguments (a list becomes a tuple)."""
    return axis if axis is None or isinstance(axis, int) else tuple(axis)


def _count(x: Any, axis: Axis) -> int:
    """Elements each output element of a reduction over ``axis`` reduces."""
    return math.prod(x.shape[a] for a in normalize_axes(axis, len(x.shape)))


def _floating(x: Any) -> bool:
    return np.issubdtype(np.dtype(x.dtype), np.inexact)


@functools.cache
def _jitted(impl: Any, names: tuple[str, ...]) -> Any:
    return jax.jit(impl, static_argnames=names)


def _fused(impl: Any, x: Any, **static: Any) -> Any:
    """``impl(x, **static)``, under ``jax.jit`` when ``x`` is a concrete array: its elementwise
    steps then fuse into the reductions that read them and nothing is written. Under a
    transformation it runs as is (an outer ``jit`` fuses it the same way)."""
    if isinstance(x, jax.core.Tracer):
        return impl(x, **static)
    return _jitted(impl, tuple(static))(x, **static)


def _check_correction(correction: float) -> float:
    if correction < 0:
        raise InvalidArgumentError(f"correction must be non-negative, got {correction}")
    return float(correction)


def _var(x: Any, axis: Axis, correction: float, keepdims: bool, one_pass: bool = False) -> Any:
    # under the caller's jit: one pass, shared with its mean (eagerly: the two-pass formula,
    # its result stored like every eager op's)
    shared = moments(x, axis) if one_pass else None
    if shared is not None:
        m2 = shared[1]
        if keepdims:
            m2 = jnp.expand_dims(m2, normalize_axes(axis, len(x.shape)))
        return m2 / max(_count(x, axis) - correction, 0)
    x = _floats(x)  # here, so that the cast fuses too
    squares = fn.sum(
        fn.square(x - fn.mean(x, axis=axis, keepdims=True)), axis=axis, keepdims=keepdims
    )
    return squares / max(_count(x, axis) - correction, 0)


def var(
    x: ArrayLike, axis: Axis = None, *, correction: float = 0.0, keepdims: bool = False
) -> Result:
    """Variance over ``axis`` (all axes by default), ``correction`` degrees of freedom
    subtracted from the count (NumPy's ``ddof``), streamed in two passes.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.array([[1.0, 2.0], [3.0, 6.0]], "f4"))
    >>> float(oocarr.var(x)), np.asarray(oocarr.var(x, axis=0, correction=1)).tolist()
    (3.5, [2.0, 8.0])
    """
    correction = _check_correction(correction)
    staged = traced_leaves.staged()
    return _fused(
        _var, x, axis=_axis(axis), correction=correction, keepdims=keepdims, one_pass=staged
    )


def std(
    x: AnyArray, axis: Axis = None, *, correction: float = 0.0, keepdims: bool = False
) -> Result:
    """Standard deviation over ``axis``: the square root of :func:`var`.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.array([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0], "f4"))
    >>> float(oocarr.std(x))
    2.0
    """
    variance = var(x, axis, correction=correction, keepdims=keepdims)
    return fn.sqrt(variance) if is_disk(variance) else jnp.sqrt(variance)


def _count_nonzero(x: Any, axis: Axis, keepdims: bool) -> Any:
    return fn.sum(fn.not_equal(x, 0), axis=axis, keepdims=keepdims)


def count_nonzero(x: ArrayLike, axis: Axis = None, *, keepdims: bool = False) -> Result:
    """The number of non-zero (true) elements over ``axis``, streamed.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.array([[0, 1, 7], [0, 0, 3]]))
    >>> int(oocarr.count_nonzero(x)), np.asarray(oocarr.count_nonzero(x, axis=1)).tolist()
    (3, [2, 1])
    """
    return _fused(_count_nonzero, x, axis=_axis(axis), keepdims=keepdims)


def _floats(x: Any) -> Any:
    """``x``, cast to float32 when it holds integers or booleans (as ``jnp.var`` does)."""
    return x if _floating(x) else fn.astype(x, "float32")


def _nansum(x: Any, axis: Axis, keepdims: bool) -> Any:
    return fn.sum(fn.where(fn.isnan(x), 0, x), axis=axis, keepdims=keepdims)


def nansum(x: ArrayLike, axis: Axis = None, *, keepdims: bool = False) -> Result:
    """Sum over ``axis`` treating NaNs as zero, streamed.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(oocarr.nansum(oocarr.from_numpy(np.array([1.0, np.nan, 2.0], "f4"))))
    3.0
    """
    if not _floating(x):
        return fn.sum(x, axis=axis, keepdims=keepdims)
    return _fused(_nansum, x, axis=_axis(axis), keepdims=keepdims)


def _nanmean(x: Any, axis: Axis, keepdims: bool) -> Any:
    valid = fn.logical_not(fn.isnan(x))
    total = fn.sum(fn.where(valid, x, 0), axis=axis, keepdims=keepdims)
    return total / fn.sum(valid, axis=axis, keepdims=keepdims)


def nanmean(x: AnyArray, axis: Axis = None, *, keepdims: bool = False) -> Result:
    """Mean over ``axis`` of the elements that are not NaN (NaN where all are), streamed.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(oocarr.nanmean(oocarr.from_numpy(np.array([1.0, np.nan, 2.0], "f4"))))
    1.5
    """
    if not _floating(x):
        return fn.mean(x, axis=axis, keepdims=keepdims)
    return _fused(_nanmean, x, axis=_axis(axis), keepdims=keepdims)


def _nanextreme(x: Any, axis: Axis, keepdims: bool, largest: bool) -> Any:
    nan = fn.isnan(x)
    reduce = fn.max if largest else fn.min
    extreme = reduce(fn.where(nan, -np.inf if largest else np.inf, x), axis=axis, keepdims=keepdims)
    return fn.where(fn.all(nan, axis=axis, keepdims=keepdims), np.nan, extreme)


def nanmax(x: ArrayLike, axis: Axis = None, *, keepdims: bool = False) -> Result:
    """Maximum over ``axis`` ignoring NaNs (NaN where every element is), streamed.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(oocarr.nanmax(oocarr.from_numpy(np.array([1.0, np.nan, 2.0], "f4"))))
    2.0
    """
    if not _floating(x):
        return fn.max(x, axis=axis, keepdims=keepdims)
    return _fused(_nanextreme, x, axis=_axis(axis), keepdims=keepdims, largest=True)


def nanmin(x: ArrayLike, axis: Axis = None, *, keepdims: bool = False) -> Result:
    """Minimum over ``axis`` ignoring NaNs (NaN where every element is), streamed.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(oocarr.nanmin(oocarr.from_numpy(np.array([1.0, np.nan, 2.0], "f4"))))
    1.0
    """
    if not _floating(x):
        return fn.min(x, axis=axis, keepdims=keepdims)
    return _fused(_nanextreme, x, axis=_axis(axis), keepdims=keepdims, largest=False)


def _nanvar(x: Any, axis: Axis, correction: float, keepdims: bool) -> Any:
    valid = fn.logical_not(fn.isnan(x))
    # NaNs replaced before any arithmetic: a NaN times a zero cotangent would be NaN
    clean = fn.where(valid, x, 0)
    count = fn.sum(valid, axis=axis, keepdims=True)
    mean = fn.sum(clean, axis=axis, keepdims=True) / count
    squares = fn.sum(fn.where(valid, fn.square(clean - mean), 0), axis=axis, keepdims=keepdims)
    count = count if keepdims else fn.sum(valid, axis=axis, keepdims=False)
    return squares / fn.maximum(count - correction, 0)


def nanvar(
    x: ArrayLike, axis: Axis = None, *, correction: float = 0.0, keepdims: bool = False
) -> Result:
    """Variance over ``axis`` of the elements that are not NaN, streamed in two passes.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(oocarr.nanvar(oocarr.from_numpy(np.array([1.0, np.nan, 3.0], "f4"))))
    1.0
    """
    if not _floating(x):
        return var(x, axis, correction=correction, keepdims=keepdims)
    correction = _check_correction(correction)
    return _fused(_nanvar, x, axis=_axis(axis), correction=correction, keepdims=keepdims)


def nanstd(
    x: ArrayLike, axis: Axis = None, *, correction: float = 0.0, keepdims: bool = False
) -> Result:
    """Standard deviation over ``axis`` of the elements that are not NaN.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(oocarr.nanstd(oocarr.from_numpy(np.array([1.0, np.nan, 3.0], "f4"))))
    1.0
    """
    return fn.sqrt(nanvar(x, axis, correction=correction, keepdims=keepdims))


def install_methods() -> None:
    """Give ``DiskArray`` (and its traced type) the methods ``.var()`` and ``.std()``;
    :mod:`oocarr` calls this once when it is imported.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> install_methods()
    >>> float(oocarr.from_numpy(np.array([1.0, 3.0], "f4")).var())
    1.0
    """
    add_methods({"var": var, "std": std})
