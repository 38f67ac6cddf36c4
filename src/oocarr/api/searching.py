"""The Array API's searching and sorting functions, ``prod`` and ``cumulative_sum`` over stored
arrays, streamed under the memory budget (NumPy's ``nanargmax`` and ``nanargmin`` too).

Each follows the Array API 2023.12 signature, with ``jax.numpy``'s result dtypes (without
x64: indices are int32).  ``prod``, ``cumulative_sum`` and ``sort`` are differentiable (``prod``
exactly, zeros included); indices are not (their gradient is zero, as in JAX).  Every function
works on ``DiskArray``s and in-memory arrays, eagerly (results in scratch storage) and under
``jax.jit``.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import numpy as np
from jax._src import core as jax_core

from oocarr.api import elementwise as fn
from oocarr.errors import InvalidArgumentError
from oocarr.jaxlayer.disk_array import add_methods
from oocarr.jaxlayer.make_op import make_op
from oocarr.ops.cumulative import CumulativeSum
from oocarr.ops.prod import Prod
from oocarr.ops.searching import ArgMax, ArgMin, NanArgMax, NanArgMin, SearchSorted
from oocarr.ops.sorting import ArgSort, Sort

if TYPE_CHECKING:
    from oocarr.jaxlayer.disk_array import ArrayLike, DTypeLike, Result

__all__ = [
    "argmax",
    "argmin",
    "nanargmax",
    "nanargmin",
    "prod",
    "cumulative_sum",
    "sort",
    "argsort",
    "searchsorted",
    "install_methods",
]

Axis = int | tuple[int, ...] | None

_argmax = make_op(ArgMax)
_argmin = make_op(ArgMin)
_nanargmax = make_op(NanArgMax)
_nanargmin = make_op(NanArgMin)
_prod = make_op(Prod)
_cumulative_sum = make_op(CumulativeSum)
_sort = make_op(Sort)
_argsort = make_op(ArgSort)
_searchsorted = make_op(SearchSorted)


def _axis(axis: Axis) -> Axis:
    """``axis`` as Python ints, hashable (a list becomes a tuple), for the ops' static
    parameters."""
    if axis is None:
        return None
    try:
        if isinstance(axis, tuple | list):
            return tuple(operator.index(a) for a in axis)
        return operator.index(axis)
    except TypeError as err:
        raise InvalidArgumentError(f"axis must be an int or a tuple of ints, got {axis!r}") from err


def _dtype_name(dtype: Any) -> str | None:
    """``dtype`` as its name (hashable), ``None`` kept."""
    if dtype is None:
        return None
    try:
        return np.dtype(dtype).name
    except TypeError as err:
        raise InvalidArgumentError(f"dtype {dtype!r} is not a data type") from err


def argmax(x: ArrayLike, /, *, axis: int | None = None, keepdims: bool = False) -> Result:
    """Index of the first maximal element along ``axis``, streamed tile by tile.

    With ``axis=None`` the index is into the flattened array (C order).  A NaN counts as
    maximal, as in ``jax.numpy.argmax``.

    Parameters
    ----------
    x : DiskArray or array-like
        A real-valued array; the reduced axis must not be empty.
    axis : int, optional
        The axis to search along; all axes (the flattened index) by default.
    keepdims : bool, default False
        Keep the reduced axis (axes) with length one.

    Returns
    -------
    DiskArray
        int32 indices in scratch storage (a 0-d result is a ``jax.Array``).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api import searching
    >>> x = oocarr.from_numpy(np.array([[1.0, 5.0, 5.0], [7.0, 0.0, 7.0]], "f4"))
    >>> int(searching.argmax(x)), np.asarray(searching.argmax(x, axis=1)).tolist()
    (3, [1, 0])
    """
    return _argmax(x, axis=_axis(axis), keepdims=bool(keepdims))


def argmin(x: ArrayLike, /, *, axis: int | None = None, keepdims: bool = False) -> Result:
    """Index of the first minimal element along ``axis``, streamed tile by tile.

    With ``axis=None`` the index is into the flattened array (C order).  A NaN counts as
    minimal, as in ``jax.numpy.argmin``.  Parameters and result as :func:`argmax`.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api import searching
    >>> x = oocarr.from_numpy(np.array([[3, 1, 2], [0, 4, 0]], "i4"))
    >>> int(searching.argmin(x)), np.asarray(searching.argmin(x, axis=0)).tolist()
    (3, [1, 0, 1])
    """
    return _argmin(x, axis=_axis(axis), keepdims=bool(keepdims))


def _all_nan_check(name: str, result: Any) -> Any:
    """``result``, after raising when it holds -1 (an all-NaN slice) and is concrete."""
    if isinstance(result, jax_core.Tracer):
        return result
    lowest = int(np.asarray(result).min()) if np.ndim(result) == 0 else int(fn.min(result))
    if lowest < 0:
        raise InvalidArgumentError(
            f"{name}: a slice holds nothing but NaNs, so it has no index (NumPy raises here "
            "too); under jax.jit the result holds -1 there, as jax.numpy's does"
        )
    return result


def nanargmax(x: ArrayLike, /, *, axis: int | None = None, keepdims: bool = False) -> Result:
    """Index of the first maximal element along ``axis`` ignoring NaNs, streamed.

    A slice of nothing but NaNs has no such index: called eagerly, this raises
    :class:`~oocarr.errors.InvalidArgumentError` (NumPy raises ``ValueError``); under
    ``jax.jit`` it cannot look at the values, and the index there is -1, as
    ``jax.numpy.nanargmax`` gives.  Parameters and result as :func:`argmax`.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api import searching
    >>> x = oocarr.from_numpy(np.array([[np.nan, 2.0], [1.0, np.nan]], "f4"))
    >>> int(searching.nanargmax(x)), np.asarray(searching.nanargmax(x, axis=1)).tolist()
    (1, [1, 0])
    """
    return _all_nan_check("nanargmax", _nanargmax(x, axis=_axis(axis), keepdims=bool(keepdims)))


def nanargmin(x: ArrayLike, /, *, axis: int | None = None, keepdims: bool = False) -> Result:
    """Index of the first minimal element along ``axis`` ignoring NaNs, streamed.

    All-NaN slices as in :func:`nanargmax`: an error eagerly, -1 under ``jax.jit``.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api import searching
    >>> x = oocarr.from_numpy(np.array([np.nan, 3.0, 1.0, np.nan], "f4"))
    >>> int(searching.nanargmin(x))
    2
    """
    return _all_nan_check("nanargmin", _nanargmin(x, axis=_axis(axis), keepdims=bool(keepdims)))


def prod(
    x: ArrayLike, /, *, axis: Axis = None, dtype: DTypeLike | None = None, keepdims: bool = False
) -> Result:
    """Product over ``axis`` (all axes by default), streamed tile by tile, with an exact
    gradient.

    The result dtype is ``jax.numpy.prod``'s (small integers widen to int32 or uint32,
    booleans to int32); ``dtype`` casts the elements first, as there.  The gradient with
    respect to an element is the product of the others in its slice, computed without
    dividing by zero: with one zero in a slice only the zero's position has a non-zero
    gradient, with two or more every position's is zero.

    Parameters
    ----------
    x : DiskArray or array-like
    axis : int or tuple of int, optional
        The axes to multiply over; all by default.
    dtype : dtype, optional
        The dtype the elements are multiplied in.
    keepdims : bool, default False
        Keep the reduced axes with length one.

    Returns
    -------
    DiskArray
        In scratch storage (a 0-d result is a ``jax.Array``).

    Examples
    --------
    >>> import jax, numpy as np, oocarr
    >>> from oocarr.api import searching
    >>> x = oocarr.from_numpy(np.array([[2.0, 0.0, 3.0], [1.0, 4.0, 5.0]], "f4"))
    >>> float(searching.prod(x[1])), np.asarray(searching.prod(x, axis=1)).tolist()
    (20.0, [0.0, 20.0])
    >>> np.asarray(jax.grad(lambda x: searching.prod(x[0]))(x))[0].tolist()
    [0.0, 6.0, 0.0]
    """
    return _prod(x, axis=_axis(axis), dtype=_dtype_name(dtype), keepdims=bool(keepdims))


def cumulative_sum(
    x: ArrayLike,
    /,
    *,
    axis: int | None = None,
    dtype: DTypeLike | None = None,
    include_initial: bool = False,
) -> Result:
    """Cumulative sum along ``axis``, streamed with a running carry; differentiable (the
    gradient is the reversed cumulative sum of the cotangent).

    Parameters
    ----------
    x : DiskArray or array-like
        At least 1-d.
    axis : int, optional
        The axis to sum along; may be omitted only for a 1-d ``x``.
    dtype : dtype, optional
        The result's dtype; ``jax.numpy.cumulative_sum``'s by default (small integers widen to
        int32 or uint32).
    include_initial : bool, default False
        Start the output with the empty sum (a zero), one longer along ``axis``.

    Returns
    -------
    DiskArray
        In scratch storage.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api import searching
    >>> x = oocarr.from_numpy(np.array([[1, 2, 3], [4, 5, 6]], "i4"))
    >>> np.asarray(searching.cumulative_sum(x, axis=1)).tolist()
    [[1, 3, 6], [4, 9, 15]]
    >>> np.asarray(searching.cumulative_sum(x[0], include_initial=True)).tolist()
    [0, 1, 3, 6]
    """
    return _cumulative_sum(
        x, axis=_axis(axis), dtype=_dtype_name(dtype), include_initial=bool(include_initial)
    )


def sort(
    x: ArrayLike, /, *, axis: int = -1, descending: bool = False, stable: bool = True
) -> Result:
    """``x`` sorted along ``axis``, in tiles of whole lines along it; differentiable.

    Each tile holds complete lines along ``axis`` (as many as the budget allows); when one
    line does not fit a tile of the budget, :class:`~oocarr.errors.BudgetTooSmallError` says
    how much it needs.  NaNs sort as in ``jax.numpy.sort`` (last, or first when descending).
    The gradient sends the cotangent back through each line's permutation.

    Parameters
    ----------
    x : DiskArray or array-like
        A real-valued array of at least 1 axis.
    axis : int, default -1
        The axis to sort along.
    descending : bool, default False
        Largest first.
    stable : bool, default True
        Keep equal elements in their order (the sort is stable either way).

    Returns
    -------
    DiskArray
        In scratch storage, the shape and dtype of ``x``.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api import searching
    >>> x = oocarr.from_numpy(np.array([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]], "f4"))
    >>> np.asarray(searching.sort(x, axis=0)).tolist()
    [[0.0, 1.0, 2.0], [3.0, 5.0, 4.0]]
    >>> np.asarray(searching.sort(x, descending=True)).tolist()
    [[3.0, 2.0, 1.0], [5.0, 4.0, 0.0]]
    """
    return _sort(x, axis=_axis(axis), descending=bool(descending), stable=bool(stable))


def argsort(
    x: ArrayLike, /, *, axis: int = -1, descending: bool = False, stable: bool = True
) -> Result:
    """Indices that sort ``x`` along ``axis`` (int32), in tiles of whole lines along it.

    Equal elements keep their original order, descending too (the standard's stable
    descending order).  Parameters as :func:`sort`; not differentiable.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api import searching
    >>> x = oocarr.from_numpy(np.array([2, 1, 2, 0], "i4"))
    >>> np.asarray(searching.argsort(x)).tolist()
    [3, 1, 0, 2]
    >>> np.asarray(searching.argsort(x, descending=True)).tolist()
    [0, 2, 1, 3]
    """
    return _argsort(x, axis=_axis(axis), descending=bool(descending), stable=bool(stable))


def searchsorted(
    x1: ArrayLike, x2: ArrayLike, /, *, side: str = "left", sorter: Any = None
) -> Result:
    """For each element of ``x2``, where it would go in the sorted 1-d ``x1`` to keep it sorted.

    ``x1`` (and ``sorter``) are read into memory whole, and must fit one tile-sized buffer of
    the budget (:class:`~oocarr.errors.BudgetTooSmallError` otherwise); ``x2`` streams tile
    by tile.

    Parameters
    ----------
    x1 : DiskArray or array-like
        1-d, sorted ascending (or put in that order by ``sorter``).
    x2 : DiskArray or array-like
        The values to place, of any shape.
    side : {'left', 'right'}
        For a value equal to elements of ``x1``: the index before them, or after.
    sorter : DiskArray or array-like of int, optional
        Indices that sort ``x1`` (as ``argsort(x1)`` gives).

    Returns
    -------
    DiskArray
        int32 indices of ``x2``'s shape, in scratch storage (a 0-d result is a ``jax.Array``).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.api import searching
    >>> edges = oocarr.from_numpy(np.array([0.0, 1.0, 2.0, 3.0], "f4"))
    >>> values = oocarr.from_numpy(np.array([[1.0, 2.5], [-1.0, 9.0]], "f4"))
    >>> np.asarray(searching.searchsorted(edges, values)).tolist()
    [[1, 3], [0, 4]]
    >>> np.asarray(searching.searchsorted(edges, values, side="right")).tolist()
    [[2, 3], [0, 4]]
    """
    if side not in ("left", "right"):
        raise InvalidArgumentError(f"searchsorted side must be 'left' or 'right', got {side!r}")
    if sorter is None:
        return _searchsorted(x1, x2, side=side)
    return _searchsorted(x1, x2, sorter, side=side)


def install_methods() -> None:
    """Give ``DiskArray`` (and its traced type) the methods ``.argmax()``, ``.argmin()`` and
    ``.prod()``; :mod:`oocarr` calls this once when it is imported.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> install_methods()
    >>> x = oocarr.from_numpy(np.array([[1.0, 5.0], [3.0, 2.0]], "f4"))
    >>> int(x.argmax()), np.asarray(x.argmin(axis=1)).tolist(), float(x.prod())
    (1, [0, 1], 30.0)
    """
    add_methods({"argmax": argmax, "argmin": argmin, "prod": prod})
