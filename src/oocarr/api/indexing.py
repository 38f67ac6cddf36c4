"""NumPy indexing of ``DiskArray``: basic keys, one integer array (a gather of rows) and boolean
masks, eagerly and under ``jax.jit``/``jax.grad``; and the Array API's ``take``.

Basic keys (integers, slices with any step, ``None``, ``...``) give a view eagerly and a tiled
copy under a transformation.  A key with one integer array is its basic part followed by a
:class:`~oocarr.ops.take.Take` along the array's axis: rows are read in sorted order, those
sharing a tile's extent in one read.  A boolean mask selects the positions where it is true, in
C order: its true positions are found tile by tile (held in memory as NumPy holds an index
array, 8 bytes per true position and masked axis), then gathered the same way.  A mask's
selection has a data-dependent shape, so under ``jax.jit`` only a mask known when tracing
(NumPy) works; a traced or stored one raises, naming ``where`` as the way to keep the shape.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from jax._src import core as jax_core

from oocarr.api.elementwise import transpose
from oocarr.api.storage import read_tiles, tile_plan
from oocarr.errors import InvalidArgumentError, NotSupportedError, ShapeMismatchError
from oocarr.jaxlayer.disk_array import DiskArray, DiskArrayType, is_disk
from oocarr.jaxlayer.make_op import make_op
from oocarr.ops.slicing import Slice
from oocarr.ops.take import Take, checked_indices
from oocarr.store.views import key_region

if TYPE_CHECKING:
    from oocarr.jaxlayer.disk_array import AnyArray, Result

__all__ = ["take", "install_indexing"]

_take = make_op(Take)
_slice = make_op(Slice)
#: ``DiskArray.__getitem__`` of basic keys: a view of the region, sharing the storage.
_view = DiskArray.__getitem__


def _whole(k: slice) -> bool:
    """Whether ``k`` is ``:`` (compared by its parts: a bound may be a 0-d array, whose ``==``
    is elementwise)."""
    return k.start is None and k.stop is None and k.step is None


def take(x: AnyArray, indices: Any, /, *, axis: int | None = None) -> Result:
    """Elements of ``x`` at ``indices`` along ``axis`` (the Array API's ``take``), read in
    sorted order tile by tile; differentiable in ``x`` (repeated indices add their gradients).

    Parameters
    ----------
    x : DiskArray or array-like
    indices : 1-d array of integers
        Negative ones count from the end; any out of bounds raise ``InvalidArgumentError``.
    axis : int, optional
        Required unless ``x`` is 1-d.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.arange(12.0).reshape(4, 3))
    >>> np.asarray(oocarr.take(x, np.array([3, 0, 3]), axis=0))[:, 0]
    array([9., 0., 9.])
    """
    ndim = len(x.shape)
    if axis is None:
        if ndim != 1:
            raise InvalidArgumentError(f"take: axis= is required for a {ndim}-d array")
        axis = 0
    if not -ndim <= axis < ndim:
        raise InvalidArgumentError(f"take: axis {axis} is out of range for {ndim} axes")
    if len(np.shape(indices)) != 1:
        raise ShapeMismatchError(f"take: indices must be 1-d, got shape {np.shape(indices)}")
    return _gather(x, _as_index(indices).reshape(-1, 1), axis % ndim)


def _gather(x: Any, positions: Any, axis: int) -> Any:
    """``x`` with ``positions.shape[1]`` axes from ``axis`` replaced by the rows of positions.

    Positions known here (NumPy) are checked now, so a gather along an axis after the first
    fuses under ``jax.jit`` (:class:`~oocarr.ops.take.RowTake`); traced ones are checked when
    the stored op reads them."""
    if isinstance(positions, np.ndarray):
        positions = checked_indices(positions, tuple(x.shape), axis)
        return _take(x, positions, axis=axis, checked=True)
    return _take(x, positions, axis=axis)


def _as_index(index: Any) -> Any:
    """An integer index array as NumPy (or as itself, when traced)."""
    if isinstance(index, jax_core.Tracer):
        return index
    if is_disk(index):
        index = np.asarray(index)
    index = np.asarray(index)
    if index.dtype.kind not in "iu":
        raise InvalidArgumentError(
            f"an index array must hold integers or booleans, got {index.dtype}"
        )
    return index


def _is_array_key(k: Any) -> bool:
    arrays = (np.ndarray, list, DiskArray, jax.Array, jax_core.Tracer, bool, np.bool_)
    return isinstance(k, arrays)


def _is_bool(k: Any) -> bool:
    if isinstance(k, (bool, np.bool_)):
        return True
    dtype = getattr(k, "dtype", None)
    if dtype is None:
        return np.asarray(k).dtype == np.bool_
    return np.dtype(dtype) == np.bool_


def _basic(x: Any, key: tuple, traced: bool) -> Any:
    full = all(k is Ellipsis or (isinstance(k, slice) and _whole(k)) for k in key)
    ellipses = sum(k is Ellipsis for k in key)
    fits = len(key) - ellipses <= len(x.shape) if ellipses else len(key) == len(x.shape)
    if full and ellipses <= 1 and fits:
        return x
    if traced:
        region = tuple(None if r is None else tuple(r) for r in key_region(key, tuple(x.shape)))
        return _slice(x, region=region)
    return _view(x, key)


def _mask_positions(mask: Any, traced: bool) -> np.ndarray:
    """``(count, mask.ndim)`` positions where ``mask`` holds, in C order, read tile by tile."""
    if isinstance(mask, jax_core.Tracer) or (traced and is_disk(mask)):
        raise NotSupportedError(
            "indexing with a boolean mask under jax.jit: the result's shape depends on the "
            "mask's values; use oocarr.where(mask, x, 0) to keep the shape, or index outside jit"
        )
    if not is_disk(mask):
        return np.argwhere(np.asarray(mask))
    parts = []
    store = mask.store
    for region, block in read_tiles(store, tile_plan(store, "stats")):
        found = np.argwhere(np.asarray(block))
        parts.append(found + np.array([r.start for r in region], np.int64))
    found = np.concatenate(parts) if parts else np.zeros((0, len(mask.shape)), np.int64)
    # tiles are walked in C order of tiles, not of elements: sort the positions back
    return found[np.lexsort(found.T[::-1])] if len(found) else found


def _scalar_mask(x: Any, keys: tuple, at: int, mask: Any, traced: bool) -> Any:
    """``x[..., True, ...]`` adds an axis of length one there, ``False`` one of length zero,
    as NumPy does."""
    if isinstance(mask, jax_core.Tracer) or (traced and is_disk(mask)):
        raise NotSupportedError(
            "indexing with a 0-d boolean array under jax.jit: the result's shape depends on its "
            "value; use oocarr.where, or index outside jit"
        )
    y = _basic(x, keys[:at] + (None,) + keys[at + 1 :], traced)
    if bool(np.asarray(mask)):
        return y
    axis = sum(1 for k in keys[:at] if k is None or isinstance(k, slice))
    if Ellipsis in keys[:at]:
        consumed = sum(k is not None and k is not Ellipsis for k in keys) - 1
        axis += len(x.shape) - consumed
    return _basic(y, (slice(None),) * axis + (slice(0, 0),) + (Ellipsis,), traced)


def getitem(x: AnyArray, key: Any, traced: bool = False) -> Result:
    """``x[key]`` for any NumPy key oocarr supports (see the module's docstring).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.arange(12.0).reshape(4, 3))
    >>> np.asarray(getitem(x, (np.array([2, 0]), slice(1, None))))
    array([[7., 8.],
           [1., 2.]])
    >>> np.asarray(getitem(x, np.asarray(x) % 5 == 0))
    array([ 0.,  5., 10.])
    """
    keys = key if isinstance(key, tuple) else (key,)
    arrays = [i for i, k in enumerate(keys) if _is_array_key(k)]
    if not arrays:
        return _basic(x, keys, traced)
    if len(arrays) > 1:
        raise NotSupportedError(
            f"indexing with {len(arrays)} arrays in one key: oocarr takes one integer array or "
            "boolean mask per key; index one axis at a time (x[i][:, j])"
        )
    at = arrays[0]
    index = keys[at]
    mask = _is_bool(index)
    depth = len(np.shape(index)) if mask else 1
    if mask and depth == 0:
        return _scalar_mask(x, keys, at, index, traced)
    ndim = len(x.shape)
    consumed = sum(k is not None and k is not Ellipsis for k in keys) - 1 + depth
    if consumed > ndim:
        raise InvalidArgumentError(f"too many indices ({consumed}) for an array of {ndim} axes")
    axis = 0
    for k in keys[:at]:
        if k is Ellipsis:
            axis += ndim - consumed
        elif k is None or isinstance(k, slice):
            axis += 1
    rest = keys[:at] + (slice(None),) * depth + keys[at + 1 :]
    if Ellipsis not in rest:
        rest = rest + (Ellipsis,)
    y = _basic(x, rest, traced)
    if mask:
        expected = tuple(y.shape[axis : axis + depth])
        if tuple(np.shape(index)) != expected:
            raise ShapeMismatchError(
                f"a boolean mask of shape {tuple(np.shape(index))} does not match the "
                f"indexed axes of shape {expected}"
            )
        return _gather(y, _mask_positions(index, traced), axis)
    index = _as_index(index)
    if len(np.shape(index)) == 0:
        return _basic(x, keys[:at] + (int(index),) + keys[at + 1 :], traced)
    out = _gather(y, index.reshape(-1, 1), axis)
    if len(np.shape(index)) > 1:
        from oocarr.api.manipulation import reshape

        shape = tuple(out.shape[:axis]) + tuple(np.shape(index)) + tuple(out.shape[axis + 1 :])
        out = reshape(out, shape)
    if _split_advanced(keys, at):
        # NumPy puts the indexed axes first when integers and the array are apart in the key
        n = len(np.shape(index))
        order = (*range(axis, axis + n), *range(axis), *range(axis + n, len(out.shape)))
        out = transpose(out, order)
    return out


def _split_advanced(keys: tuple, at: int) -> bool:
    """Whether the integers of ``keys`` and its array (at ``at``) are not all adjacent."""
    advanced = [i for i, k in enumerate(keys) if i == at or isinstance(k, (int, np.integer))]
    return advanced[-1] - advanced[0] + 1 != len(advanced)


def _eager_getitem(self: DiskArray, key: Any) -> Any:
    return getitem(self, key)


_eager_getitem.__doc__ = _view.__doc__


def install_indexing() -> None:
    """Give ``DiskArray`` (and its traced type) NumPy indexing: ``x[key]`` eagerly and under
    ``jax.jit``, with one integer array or boolean mask per key.

    :mod:`oocarr` calls this once when it is imported; calling it again changes nothing.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> install_indexing()
    >>> np.asarray(oocarr.from_numpy(np.arange(5))[[4, 1]])
    array([4, 1])
    """
    # set by name: mypy sees DiskArray's own __getitem__ (a view), the type's is JAX's
    setattr(DiskArray, "__getitem__", _eager_getitem)  # noqa: B010
    setattr(DiskArrayType, "_getitem", staticmethod(lambda x, key: getitem(x, key, traced=True)))  # noqa: B010
