"""``x[key] = value`` on a ``DiskArray``, outside a JAX trace, as NumPy assigns.

Where the values go depends on whose storage ``x`` is:

- **a result** (anything oocarr made: an op's output, ``from_numpy``, ``asarray(x, copy=True)``,
  a view of a result or of a read-only source): the write goes into scratch storage of ``x``'s
  own, never into an array the user stored.  When ``x`` alone holds its scratch array and the
  selection is one tile, that tile is rewritten in place; otherwise ``x`` moves to a new
  scratch array, written tile by tile with the assignment applied, and takes it over once it
  is complete (a failed write leaves ``x`` as it was).  Results are values: arrays made from
  ``x`` before the write (views of it, handles a jitted function passed through) keep the
  values they had.
- **storage the user opened for writing** (``oocarr.open(url, mode="r+")``,
  ``oocarr.create``, and views of those): written in place, tile by tile, as before; views share
  it, as NumPy's do.
- **a source opened read-only**: refused with :class:`~oocarr.errors.ReadOnlyError`.

Under ``jax.jit`` (or any JAX transformation) arrays are immutable, as JAX's are:
:class:`~oocarr.errors.NotSupportedError` names ``oocarr.where`` and ``x.update_``.

Keys are NumPy's basic ones (integers, negative ones too; slices with any step; ``...``;
``None``; tuples of these) or one boolean mask (NumPy, JAX or a ``DiskArray``, streamed tile by
tile) over ``x``'s leading axes. The value (a scalar, an array in memory or a ``DiskArray``,
read tile by tile) broadcasts to the selection, and is cast to ``x``'s dtype as
``np.asarray(value, dtype=x.dtype)`` casts (complex into a real array is refused). A mask's
value is a scalar, broadcasts over the selected positions, or has one row per true position,
in C order.  Every pass holds tiles sized by the memory model under the budget in force.
"""

from __future__ import annotations

import itertools
import json
import math
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax._src import core as jax_core

from oocarr.api.storage import copy_tiles
from oocarr.engine import fused, plan
from oocarr.engine.budget import memory_budget_bytes
from oocarr.engine.stats import IOCounts, call_site, record
from oocarr.errors import (
    DtypeMismatchError,
    InvalidArgumentError,
    NotSupportedError,
    ReadOnlyError,
    ShapeMismatchError,
)
from oocarr.jaxlayer.callbacks import create_store, is_traced, open_store, scratch_takes_chunks
from oocarr.jaxlayer.disk_array import DiskArray, is_disk, lifetime_of
from oocarr.store.blocked import BlockedArray
from oocarr.store.locator import Locator
from oocarr.store.scratch import is_scratch, scratch_locator
from oocarr.store.views import key_region, strided_length

__all__ = ["setitem"]

Region = tuple[slice, ...]


def setitem(x: Any, key: Any, value: Any) -> None:
    """``x[key] = value`` (``DiskArray.__setitem__``): see the module's docstring.

    Parameters
    ----------
    x : DiskArray
        The array written; outside any JAX transformation.
    key : int, slice, Ellipsis, None, tuple of these, or a boolean mask
        A mask is an array of booleans (NumPy, JAX or ``DiskArray``) of the shape of ``x``'s
        leading axes, alone in the key (a trailing ``...`` allowed).
    value : scalar, array-like or DiskArray
        Broadcast to the selection (NumPy's rule), cast to ``x.dtype``.

    Raises
    ------
    ReadOnlyError
        ``x`` is a source the user opened read-only.
    NotSupportedError
        Under a JAX transformation; an integer-array key; a mask with other indices.
    ShapeMismatchError
        The value does not broadcast to the selection, or the mask's shape is not that of
        ``x``'s leading axes.
    DtypeMismatchError
        A complex value for a real array.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.arange(6, dtype="float32"))
    >>> y = x * 2.0
    >>> y[1:5:2] = -1.0
    >>> y[y > 8] = 0.0
    >>> np.asarray(y).tolist(), np.asarray(x).tolist()
    ([0.0, -1.0, 4.0, -1.0, 8.0, 0.0], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    """
    if isinstance(x, jax_core.Tracer) or is_traced([x, value]) or _traced_key(key):
        raise _immutable(x)
    if not isinstance(x, DiskArray):
        raise InvalidArgumentError(f"setitem: expected a DiskArray, got {type(x).__name__}")
    shape = tuple(x.shape)
    dtype = np.dtype(x.dtype)
    sel = _selection(key, shape)
    val = _Value.of(value, dtype)
    val.check(sel)
    if isinstance(sel, _Nothing) or sel.empty:
        return
    base = _storage(x.locator)
    if not (is_scratch(base) or fused.is_fused(base) or fused.is_deferred(base)):
        if not x.store.readonly:
            _in_place(x, x.store, sel, val)
            return
        if _holds_writer(x):  # opened for writing; this handle reads (update_ reopened it)
            _write_reopened(x, sel, val, keep=True)
            return
        if base == x.locator:
            raise ReadOnlyError(
                f"{x!r} was opened read-only, and an assignment never writes a source opened "
                "so: open it with mode='r+' to write its storage, or assign into a writable "
                "copy, y = xp.asarray(x, copy=True) (xp = oocarr.array_api), which leaves "
                f"{x.url} untouched",
                url=x.url,
            )
    elif _alone(x) and isinstance(sel, _Basic):
        box = sel.bounding_box()
        tile = _plan(shape, dtype, val, [], contiguous=False)[0]
        if math.prod(r.stop - r.start for r in box) <= math.prod(tile):
            _write_reopened(x, sel, val, [box])
            return
    _move(x, sel, val)


def _traced_key(key: Any) -> bool:
    keys = key if isinstance(key, tuple) else (key,)
    return is_traced(keys)


def _immutable(x: Any) -> NotSupportedError:
    return NotSupportedError(
        "x[key] = value under jax.jit (or another JAX transformation): there oocarr's arrays "
        "are immutable, as JAX's are (x.at[key].set(value) in jax.numpy). Make a new array "
        "instead: oocarr.where(mask, value, x) for a masked or indexed update, "
        "x.update_(new) to overwrite a stored array whole; or assign outside the transformed "
        "function"
    )


# ----------------------------------------------------------------------
# keys
# ----------------------------------------------------------------------
@dataclass(frozen=True)
class _Basic:
    """A basic key: per axis of ``x`` ``(start, step, count, kept)``, and the selection's
    entries in order (an axis number, or ``None`` for a new axis of length one)."""

    axes: tuple[tuple[int, int, int, bool], ...]
    entries: tuple[int | None, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        """NumPy's ``x[key].shape``."""
        return tuple(1 if e is None else self.axes[e][2] for e in self.entries)

    @property
    def empty(self) -> bool:
        return any(count == 0 for _, _, count, _ in self.axes)

    def bounding_box(self) -> Region:
        """The smallest region of ``x`` holding every selected element."""
        box = []
        for start, step, count, _ in self.axes:
            last = start + step * (count - 1)
            box.append(slice(min(start, last), max(start, last) + 1))
        return tuple(box)

    def part(self, region: Region) -> tuple[Region, tuple, tuple[slice, ...], bool] | None:
        """The selected part of ``region``: its bounding box, the key of the part in a block of
        that box, the part's slices in selection coordinates (one per entry), and whether the
        part fills the box; ``None`` when the region holds no selected element."""
        box: list[slice] = []
        local: list[slice | int] = []
        spans: list[slice] = []
        full = True
        for (start, step, count, kept), r in zip(self.axes, region):
            j0, j1 = _span(start, step, count, r.start, r.stop)
            if j0 >= j1:
                return None
            first, last = start + step * j0, start + step * (j1 - 1)
            lo = min(first, last)
            box.append(slice(lo, max(first, last) + 1))
            spans.append(slice(j0, j1))
            if kept:
                stop = first - lo + step * (j1 - j0)
                local.append(slice(first - lo, stop if stop >= 0 else None, step))
                full = full and (abs(step) == 1 or j1 - j0 == 1)
            else:
                local.append(first - lo)
        entries = tuple(slice(0, 1) if e is None else spans[e] for e in self.entries)
        return tuple(box), tuple(local), entries, full


@dataclass(frozen=True)
class _Masked:
    """A boolean mask over the first ``mask.ndim`` axes of ``x``."""

    mask: Any  # DiskArray or np.ndarray of booleans
    rest: tuple[int, ...]  # the shape of x's other axes

    @property
    def k(self) -> int:
        return len(self.mask.shape)

    @property
    def shape(self) -> tuple[int | None, ...]:
        """The selection's shape; its first length (the true positions) is not counted."""
        return (None, *self.rest)

    @property
    def empty(self) -> bool:
        return math.prod(self.mask.shape) == 0 or math.prod(self.rest) == 0

    def read(self, region: Region, counts: IOCounts) -> np.ndarray:
        """The mask over ``region`` of ``x`` (its first ``k`` axes)."""
        part = region[: self.k]
        if isinstance(self.mask, DiskArray):
            block = self.mask.store.read_region(part)
            counts.count_read(block.nbytes)
            return block
        return self.mask[part]


@dataclass(frozen=True)
class _Nothing:
    """A key selecting nothing whatever the value (``x[False]``): only the value is checked."""

    shape: tuple[int, ...]
    empty: bool = True


def _selection(key: Any, shape: tuple[int, ...]) -> _Basic | _Masked | _Nothing:
    keys = tuple(_index(k) for k in (key if isinstance(key, tuple) else (key,)))
    arrays = [i for i, k in enumerate(keys) if _is_array(k)]
    if not arrays:
        return _basic(keys, shape)
    at = arrays[0]
    mask = keys[at]
    if not _is_bool(mask):
        dtype = mask.dtype if is_disk(mask) else np.asarray(mask).dtype
        raise NotSupportedError(
            f"assignment with an array key of {dtype} (an integer-array index): oocarr assigns "
            "with basic keys (integers, slices, ...) and with one boolean mask; select the "
            "positions with a boolean mask of x's shape, or use oocarr.where"
        )
    if len(arrays) > 1 or at != 0 or any(k is not Ellipsis for k in keys[1:]) or len(keys) > 2:
        raise NotSupportedError(
            "assignment with a boolean mask and other indices in one key: oocarr takes the mask "
            "alone (x[mask] = value, the Array API's form); make one mask over x's leading "
            "axes (e.g. with oocarr.logical_and), or use oocarr.where"
        )
    if not is_disk(mask):
        mask = np.asarray(mask)
    k = len(mask.shape)
    if k == 0:  # x[True] selects everything under a new axis, x[False] nothing (NumPy)
        if bool(np.asarray(mask)):
            return _basic((None, Ellipsis), shape)
        return _Nothing((0, *shape))
    if tuple(mask.shape) != shape[:k]:
        raise ShapeMismatchError(
            f"a boolean mask of shape {tuple(mask.shape)} does not match the leading axes of "
            f"the array, of shape {shape[:k] if k <= len(shape) else shape}"
        )
    return _Masked(mask, shape[k:])


def _index(k: Any) -> Any:
    """An integer for a 0-d integer array (NumPy's rule); other keys as given."""
    if isinstance(k, np.ndarray | jax.Array) and k.ndim == 0 and np.dtype(k.dtype).kind in "iu":
        return operator.index(k.item())
    return k


def _is_array(k: Any) -> bool:
    return isinstance(k, np.ndarray | list | DiskArray | jax.Array | bool | np.bool_)


def _is_bool(k: Any) -> bool:
    dtype = getattr(k, "dtype", None)
    if dtype is None:
        return np.asarray(k).dtype == np.bool_
    return np.dtype(dtype) == np.bool_


def _basic(keys: tuple, shape: tuple[int, ...]) -> _Basic:
    for k in keys:
        if not (k is None or k is Ellipsis or isinstance(k, slice)):
            try:
                operator.index(k)
            except TypeError:
                raise InvalidArgumentError(
                    f"cannot assign with a key of type {type(k).__name__}: use integers, "
                    "slices, ..., None or one boolean mask"
                ) from None
    keys = tuple(k if k is None or k is Ellipsis or isinstance(k, slice) else int(k) for k in keys)
    region = key_region(keys, shape)
    axes: list[tuple[int, int, int, bool]] = []
    entries: list[int | None] = []
    for r in region:
        if r is None:
            entries.append(None)
            continue
        start, stop, kept = r[0], r[1], r[2]
        step = r[3] if len(r) > 3 else 1
        if kept:
            entries.append(len(axes))
            axes.append((start, step, strided_length(start, stop, step), True))
        else:
            axes.append((start, 1, 1, False))
    return _Basic(tuple(axes), tuple(entries))


def _span(start: int, step: int, count: int, lo: int, hi: int) -> tuple[int, int]:
    """The ``j`` with ``lo <= start + step * j < hi``, ``0 <= j < count``, as a range."""
    if step > 0:
        j0, j1 = -((start - lo) // step), -((start - hi) // step)
    else:
        j0, j1 = (start - hi) // -step + 1, (start - lo) // -step + 1
    return max(0, j0), min(count, j1)


# ----------------------------------------------------------------------
# values
# ----------------------------------------------------------------------
class _Value:
    """The assigned value: in memory (cast once) or stored (read and cast a part at a time)."""

    def __init__(self, data: Any, dtype: np.dtype, stored: bool) -> None:
        self.data = data
        self.dtype = dtype
        self.stored = stored
        self.shape = tuple(data.shape)
        self.aligned: tuple[int, ...] = self.shape
        self.strip = 0  # leading axes of length one beyond the selection's
        self.view = data  # in memory: the data with the selection's number of axes

    @classmethod
    def of(cls, value: Any, dtype: np.dtype) -> _Value:
        if is_disk(value):
            _check_kind(np.dtype(value.dtype), dtype)
            return cls(value, dtype, True)
        found = np.asarray(value)
        _check_kind(found.dtype, dtype)
        if found.dtype == dtype:
            return cls(found, dtype, False)
        try:
            return cls(np.asarray(value, dtype=dtype), dtype, False)
        except OverflowError as err:
            raise InvalidArgumentError(
                f"cannot assign {value!r} to an array of {dtype}: {err}"
            ) from None

    @property
    def itemsize(self) -> int:
        return np.dtype(self.data.dtype).itemsize

    @property
    def rows(self) -> bool:
        """Whether a mask's value has one row per true position (not broadcast over them)."""
        return self.aligned[0] != 1

    def check(self, sel: _Basic | _Masked | _Nothing) -> None:
        """Check the value broadcasts to ``sel``'s shape (a mask's count aside) and note how."""
        target = sel.shape
        shape = self.shape
        strip = 0
        while len(shape) - strip > len(target) and shape[strip] == 1:
            strip += 1
        kept = shape[strip:]
        aligned = (1,) * (len(target) - len(kept)) + kept
        fits = len(kept) <= len(target) and all(
            a == 1 or t is None or a == t for a, t in zip(aligned, target)
        )
        if not fits:
            want = tuple("n" if t is None else t for t in target)
            raise ShapeMismatchError(
                f"cannot broadcast a value of shape {self.shape} to the selection of shape "
                f"{want}" + (" (n: the mask's true positions)" if None in target else "")
            )
        self.strip, self.aligned = strip, aligned
        if not self.stored:
            self.view = self.data.reshape(aligned)

    def part(self, where: Sequence[slice], counts: IOCounts) -> np.ndarray:
        """The value over ``where`` (one slice per axis of the selection), with length one on
        the axes it broadcasts along."""
        picks = tuple(slice(0, 1) if a == 1 else s for a, s in zip(self.aligned, where))
        if not self.stored:
            return self.view[picks]
        own = len(self.shape) - self.strip
        region = (slice(0, 1),) * self.strip + picks[len(picks) - own :]
        block = self.data.store.read_region(region)
        counts.count_read(block.nbytes)
        return block.astype(self.dtype, copy=False).reshape(tuple(p.stop - p.start for p in picks))


def _check_kind(found: np.dtype, dtype: np.dtype) -> None:
    if found.kind == "c" and dtype.kind != "c":
        raise DtypeMismatchError(
            f"cannot assign complex values ({found}) to an array of {dtype}: the imaginary "
            "parts would be lost; assign oocarr.real(value) (or its absolute value)"
        )


# ----------------------------------------------------------------------
# where the values go
# ----------------------------------------------------------------------
def _storage(locator: Locator) -> Locator:
    """The stored array ``locator`` reads: itself, or the base of a view (of a view ...)."""
    while locator.driver == "view":
        locator = Locator.from_dict(json.loads(locator.url))
    return locator


def _holds_writer(x: DiskArray) -> bool:
    """Whether ``x`` was opened for writing (and not closed) though its store now reads:
    ``update_`` reopens the storage of the handle it writes.  A handle opened read-only holds
    no writer lock, even on an array opened for writing before."""
    lock = x._writer
    return lock is not None and bool(lock.held)


def _alone(x: DiskArray) -> bool:
    """Whether ``x`` owns its scratch array and no other live handle sees it (a view, a handle
    a jitted function passed through): then writing it in place changes no other value."""
    lifetime = lifetime_of(x.locator)
    if lifetime is None or x._finalizer is not lifetime or not is_scratch(x.locator):
        return False
    return not any(h is not x and _storage(h.locator) == x.locator for h in lifetime.holders())


def _plan(
    shape: tuple[int, ...],
    dtype: np.dtype,
    val: _Value,
    chunks: list[Sequence[int] | None],
    *,
    contiguous: bool,
    url: str | None = None,
) -> tuple[tuple[int, ...], plan.Projection]:
    """The tile a pass over ``x`` streams in, and its projection: whole chunks of ``chunks``
    unless a mask's value has a row per true position (then runs of whole trailing axes, so
    the rows of one tile are consecutive)."""
    itemsize = max(dtype.itemsize, val.itemsize)
    given = [] if contiguous else [c for c in chunks if c is not None]
    return plan.chunk_tile(
        "setitem",
        shape,
        itemsize,
        memory_budget_bytes(),
        plan.COPY_TILES,
        *given,
        url=url,
        remedy="with oocarr.set_memory_budget",
    )


def _regions(shape: tuple[int, ...], tile: Sequence[int], within: Region | None = None) -> Iterator:
    """The tiles of ``shape`` (those meeting ``within``) in C order."""
    within = within or tuple(slice(0, n) for n in shape)
    ranges = [
        range(w.start // t * t, w.stop, t) if w.stop > w.start else range(0)
        for w, t in zip(within, tile)
    ]
    for starts in itertools.product(*ranges):
        yield tuple(slice(s, min(s + t, n)) for s, t, n in zip(starts, tile, shape))


def _rank_starts(sel: _Masked, regions: list[Region], counts: IOCounts) -> tuple[list[int], int]:
    """The rank of the first true position of each region's mask among all of them in C
    order (regions are runs in C order), and the count of true positions."""
    starts = []
    prev, start, found = None, 0, 0
    for region in regions:
        part = region[: sel.k]
        if part != prev:
            start, found = start + found, int(np.count_nonzero(sel.read(region, counts)))
            prev = part
        starts.append(start)
    return starts, start + found


def _masked_rows(sel: _Masked, val: _Value, regions: list[Region], counts: IOCounts) -> list[int]:
    """Each region's first value row (a value with a row per true position), after checking
    the count of true positions against the value's rows."""
    if not val.rows:
        return [0] * len(regions)
    starts, total = _rank_starts(sel, regions, counts)
    if total != val.aligned[0]:
        raise ShapeMismatchError(
            f"cannot assign {val.aligned[0]} rows of values to the {total} true positions of "
            "the mask: give one row per true position, or one row to broadcast"
        )
    return starts


def _patch(
    block: np.ndarray,
    region: Region,
    sel: _Basic | _Masked,
    val: _Value,
    first_row: int,
    counts: IOCounts,
    mask: np.ndarray | None = None,
) -> bool:
    """Assign the selected part of ``region`` in ``block`` (its data; ``mask``: the mask over
    it, when read already); whether any was."""
    if isinstance(sel, _Masked):
        m = sel.read(region, counts) if mask is None else mask
        n = int(np.count_nonzero(m))
        if not n:
            return False
        rows = slice(first_row, first_row + n) if val.rows else slice(0, 1)
        block[m] = val.part((rows, *region[sel.k :]), counts)
        return True
    found = sel.part(region)
    if found is None:
        return False
    box, local, where, _ = found
    inner = tuple(slice(b.start - r.start, b.stop - r.start) for b, r in zip(box, region))
    block[inner][local] = _drop_new(sel, val.part(where, counts))
    return True


def _drop_new(sel: _Basic, part: np.ndarray) -> np.ndarray:
    """``part`` without the selection's new axes (of length one)."""
    return part[tuple(0 if e is None else slice(None) for e in sel.entries)]


def _snapshot(x: DiskArray, other: Any) -> Any:
    """``other``, copied to scratch first when it is stored in ``x``'s storage (a value or mask
    read while ``x`` is written in place: ``x[1:] = x[:-1]``)."""
    if not isinstance(other, DiskArray) or _storage(other.locator) != _storage(x.locator):
        return other
    locator = scratch_locator(None, other.shape, other.dtype)
    with create_store(locator, tuple(other.shape), other.dtype) as copy:
        copy_tiles(other.store, copy)
    return DiskArray._at(locator, other.shape, other.dtype)._own()


def _in_place(
    x: DiskArray,
    store: BlockedArray,
    sel: Any,
    val: _Value,
    regions: list[Region] | None = None,
) -> None:
    """Write ``x``'s writable ``store`` in place: the tiles holding selected elements (or the
    given ``regions``), each read, assigned and written back (a part wholly assigned is not
    read first)."""
    jax.effects_barrier()  # jitted calls still reading x finish first
    if val.stored:
        val.data = _snapshot(x, val.data)
    if isinstance(sel, _Masked):
        sel = _Masked(_snapshot(x, sel.mask), sel.rest)
    mask_chunks = sel.mask.chunks if isinstance(sel, _Masked) and is_disk(sel.mask) else None
    chunks: list[Sequence[int] | None] = [store.chunks, mask_chunks]
    contiguous = isinstance(sel, _Masked) and val.rows
    tile, projection = _plan(
        store.shape, store.dtype, val, chunks, contiguous=contiguous, url=x.url
    )
    if regions is None:
        within = sel.bounding_box() if isinstance(sel, _Basic) else None
        regions = list(_regions(store.shape, tile, within))
    counts = IOCounts(calls=1)
    counts.project(projection.nbytes)
    try:
        first_rows = _masked_rows(sel, val, regions, counts) if isinstance(sel, _Masked) else None
        for i, region in enumerate(regions):
            if isinstance(sel, _Masked) and first_rows is not None:  # the same test twice
                m = sel.read(region, counts)
                if not np.any(m):
                    continue
                block = store.read_region(region)
                counts.count_read(block.nbytes)
                _patch(block, region, sel, val, first_rows[i], counts, m)
                where = region
            else:
                found = sel.part(region)
                if found is None:
                    continue
                where, local, entries, full = found
                block = (
                    np.empty(tuple(r.stop - r.start for r in where), store.dtype)
                    if full
                    else store.read_region(where)
                )
                if not full:
                    counts.count_read(block.nbytes)
                block[local] = _drop_new(sel, val.part(entries, counts))
            store.write_region(where, block)
            counts.count_written(block.nbytes)
        store.flush()
    finally:
        record(call_site("setitem"), counts)


def _write_reopened(
    x: DiskArray,
    sel: Any,
    val: _Value,
    regions: list[Region] | None = None,
    *,
    keep: bool = False,
) -> None:
    """Write ``x``'s storage in place through a handle opened for writing: storage the user
    opened so (``keep``: ``x`` keeps that handle, so its views write through again), or (one
    region, the selection's box) ``x``'s own scratch array."""
    x._wait()
    old = x._store
    x._store = None  # its handle may map or cache the storage: reopened on next use
    if old is not None:
        old.close()
    store = open_store(x.locator, "r+")
    try:
        _in_place(x, store, sel, val, regions)
    finally:
        if keep:
            store.flush()
            x._store = store
        else:
            store.close()


def _move(x: DiskArray, sel: _Basic | _Masked, val: _Value) -> None:
    """Write ``x`` with the assignment applied to a new scratch array, tile by tile, and make
    ``x`` its owner once complete (``x`` keeps its old data if anything fails)."""
    source = x.store
    shape, dtype = tuple(x.shape), np.dtype(x.dtype)
    mask_chunks = sel.mask.chunks if isinstance(sel, _Masked) and is_disk(sel.mask) else None
    contiguous = isinstance(sel, _Masked) and val.rows
    tile, projection = _plan(
        shape, dtype, val, [source.chunks, mask_chunks], contiguous=contiguous, url=x.url
    )
    locator = scratch_locator(None, shape, dtype)
    regions = list(_regions(shape, tile))
    counts = IOCounts(calls=1)
    counts.project(projection.nbytes)
    chunks = tile if scratch_takes_chunks(locator) else None
    try:
        first_rows = _masked_rows(sel, val, regions, counts) if isinstance(sel, _Masked) else None
        with create_store(locator, shape, dtype, chunks) as target:
            for i, region in enumerate(regions):
                block = source.read_region(region)
                counts.count_read(block.nbytes)
                _patch(block, region, sel, val, first_rows[i] if first_rows else 0, counts)
                target.write_region(region, block)
                counts.count_written(block.nbytes)
    finally:
        record(call_site("setitem"), counts)
    x._rebind(locator)
