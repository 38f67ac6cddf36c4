"""The namespace's reductions under the keywords NumPy gives them (``ddof=``, ``dtype=``).

xarray reduces a duck array through its namespace with NumPy's keywords: ``xp.std(x,
axis=, ddof=)`` and, for floating data (``skipna``), ``xp.nanmean(x, axis=, dtype=)``,
``xp.nanstd(x, axis=, dtype=, ddof=)``, ``xp.nanmax`` ...  A namespace without these
names sends it to ``np.nanmean``, which reads the whole array into memory; with them
``DataArray.mean(dim)`` and ``std(dim)`` stream.  ``ddof`` is the standard's
``correction``; ``dtype`` casts the result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oocarr.errors import InvalidArgumentError

from . import elementwise as fn
from . import statistics
from .statistics import Axis

if TYPE_CHECKING:
    from oocarr.api.types import AnyArray, ArrayLike, DTypeLike, Result

__all__ = ["var", "std", "nanmean", "nanvar", "nanstd", "nanmax", "nanmin", "nansum"]


def _correction(correction: float, ddof: float | None) -> float:
    if ddof is None:
        return correction
    if correction:
        raise InvalidArgumentError(
            f"give correction= (the standard's) or ddof= (NumPy's), not both "
            f"(got correction={correction}, ddof={ddof})"
        )
    return ddof


def _as(result: Result, dtype: DTypeLike | None) -> AnyArray:
    return result if dtype is None else fn.astype(result, dtype)


def var(
    x: ArrayLike,
    axis: Axis = None,
    *,
    correction: float = 0.0,
    keepdims: bool = False,
    ddof: float | None = None,
    dtype: DTypeLike | None = None,
) -> AnyArray:
    """:func:`oocarr.var`, also taking NumPy's ``ddof`` and ``dtype``.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(var(oocarr.from_numpy(np.array([1.0, 3.0], "f4")), ddof=1))
    2.0
    """
    correction = _correction(correction, ddof)
    return _as(statistics.var(x, axis, correction=correction, keepdims=keepdims), dtype)


def std(
    x: AnyArray,
    axis: Axis = None,
    *,
    correction: float = 0.0,
    keepdims: bool = False,
    ddof: float | None = None,
    dtype: DTypeLike | None = None,
) -> AnyArray:
    """:func:`oocarr.std`, also taking NumPy's ``ddof`` and ``dtype``.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(std(oocarr.from_numpy(np.array([1.0, 3.0], "f4")), ddof=0))
    1.0
    """
    correction = _correction(correction, ddof)
    return _as(statistics.std(x, axis, correction=correction, keepdims=keepdims), dtype)


def nanmean(
    x: AnyArray, axis: Axis = None, dtype: DTypeLike | None = None, *, keepdims: bool = False
) -> AnyArray:
    """:func:`oocarr.nanmean` with NumPy's ``dtype``.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(nanmean(oocarr.from_numpy(np.array([1.0, np.nan, 2.0], "f4")), dtype=None))
    1.5
    """
    return _as(statistics.nanmean(x, axis, keepdims=keepdims), dtype)


def nansum(
    x: ArrayLike, axis: Axis = None, dtype: DTypeLike | None = None, *, keepdims: bool = False
) -> AnyArray:
    """:func:`oocarr.nansum` with NumPy's ``dtype``.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(nansum(oocarr.from_numpy(np.array([1.0, np.nan, 2.0], "f4"))))
    3.0
    """
    return _as(statistics.nansum(x, axis, keepdims=keepdims), dtype)


def nanvar(
    x: ArrayLike,
    axis: Axis = None,
    dtype: DTypeLike | None = None,
    *,
    ddof: float = 0,
    keepdims: bool = False,
) -> AnyArray:
    """:func:`oocarr.nanvar` with NumPy's ``dtype`` and ``ddof``.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(nanvar(oocarr.from_numpy(np.array([1.0, np.nan, 3.0], "f4")), ddof=1))
    2.0
    """
    return _as(statistics.nanvar(x, axis, correction=ddof, keepdims=keepdims), dtype)


def nanstd(
    x: ArrayLike,
    axis: Axis = None,
    dtype: DTypeLike | None = None,
    *,
    ddof: float = 0,
    keepdims: bool = False,
) -> AnyArray:
    """:func:`oocarr.nanstd` with NumPy's ``dtype`` and ``ddof``.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(nanstd(oocarr.from_numpy(np.array([1.0, np.nan, 3.0], "f4"))))
    1.0
    """
    return _as(statistics.nanstd(x, axis, correction=ddof, keepdims=keepdims), dtype)


def nanmax(x: ArrayLike, axis: Axis = None, *, keepdims: bool = False) -> Result:
    """:func:`oocarr.nanmax` (NumPy's positional ``axis``).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(nanmax(oocarr.from_numpy(np.array([1.0, np.nan, 2.0], "f4")), 0))
    2.0
    """
    return statistics.nanmax(x, axis, keepdims=keepdims)


def nanmin(x: ArrayLike, axis: Axis = None, *, keepdims: bool = False) -> Result:
    """:func:`oocarr.nanmin` (NumPy's positional ``axis``).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(nanmin(oocarr.from_numpy(np.array([1.0, np.nan, 2.0], "f4")), 0))
    1.0
    """
    return statistics.nanmin(x, axis, keepdims=keepdims)
