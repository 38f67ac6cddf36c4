"""The Array API's set functions (standard 2023.12) and ``nonzero``, streamed over stored arrays.

Their output shapes depend on the data, so they run eagerly only: under
``jax.jit`` (or another JAX transformation) they raise
:class:`~oocarr.errors.NotSupportedError`; call them outside it.

The input is read one tile at a time.  The ``unique_*`` functions merge each
tile's sorted unique values (``numpy.unique``) into a running set, so their
memory grows with the number of unique values (with their counts and first
indices when asked), not with the input; ``inverse_indices`` is written tile
by tile in a second pass, each tile's indices found by ``numpy.searchsorted``
among the unique values.  Unique values come back sorted (NaNs last); as the
standard says, NaNs never compare equal, so each NaN is its own unique value
(every NaN is then held in memory, with its position when indices or inverse
indices are asked for), while ``-0.0`` and ``0.0`` are one.  ``nonzero``
counts each tile's non-zeros in a first pass and writes their indices in a
second, so its memory is a few tiles whatever the number of non-zeros.

Indices have the default index dtype, ``jax.numpy``'s (int32, int64 with
``jax_enable_x64``), or int64 when an array has more elements than int32
counts.  Every result is a ``DiskArray`` in scratch storage.

Examples
--------
>>> import numpy as np, oocarr
>>> from oocarr.api import sets
>>> x = oocarr.from_numpy(np.array([[3, 1, 3], [2, 1, 3]], "int32"))
>>> np.asarray(sets.unique_counts(x).counts).tolist()
[2, 1, 3]
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
from jax._src import core as jax_core

from oocarr.api.creation import default_dtype, plan_tile, write_scratch
from oocarr.api.storage import from_numpy
from oocarr.engine.io import WriteBehind, stream_read
from oocarr.engine.stats import IOCounts, call_site, record
from oocarr.errors import InvalidArgumentError, NotSupportedError
from oocarr.jaxlayer.callbacks import create_store, is_traced, open_store
from oocarr.jaxlayer.disk_array import DiskArray, is_disk
from oocarr.store import pages
from oocarr.store.blocked import BlockedArray
from oocarr.store.scratch import scratch_locator

__all__ = [
    "UniqueAllResult",
    "UniqueCountsResult",
    "UniqueInverseResult",
    "unique_all",
    "unique_counts",
    "unique_inverse",
    "unique_values",
    "nonzero",
]

Region = tuple[slice, ...]
Source = BlockedArray | np.ndarray

#: Tile-sized buffers a pass over the input holds: the block in use and the one read ahead.
SCAN_TILES = 2


class UniqueAllResult(NamedTuple):
    """:func:`unique_all`'s result."""

    values: DiskArray
    indices: DiskArray
    inverse_indices: DiskArray
    counts: DiskArray


class UniqueCountsResult(NamedTuple):
    """:func:`unique_counts`'s result."""

    values: DiskArray
    counts: DiskArray


class UniqueInverseResult(NamedTuple):
    """:func:`unique_inverse`'s result."""

    values: DiskArray
    inverse_indices: DiskArray


# ----------------------------------------------------------------------------
# Inputs and tiles
# ----------------------------------------------------------------------------
def _source(x: Any, name: str) -> Source:
    """What ``name`` reads: a stored array's store, or ``x`` as a NumPy array; refused when
    traced."""
    if isinstance(x, jax_core.Tracer) or is_traced([x]):
        raise NotSupportedError(
            f"{name} cannot run under jax.jit or another JAX transformation: the shape of its "
            "output depends on the values of its input; call it outside jit, on a concrete "
            "array (a DiskArray, or a NumPy or JAX array)"
        )
    if is_disk(x):
        return x.store
    return np.asarray(x)


def _index_dtype(size: int) -> np.dtype:
    """The default index dtype, or int64 where it cannot count ``size`` elements."""
    dtype = default_dtype("integral")
    return dtype if size <= np.iinfo(dtype).max else np.dtype(np.int64)


def _tile(src: Source, name: str, element_bytes: int, contiguous: bool) -> tuple[int, ...]:
    """A tile of ``src`` for a pass holding :data:`SCAN_TILES` tiles of ``element_bytes`` per
    element: whole chunks, or (``contiguous``) one run of ``src``'s C order."""
    chunks = src.chunks if isinstance(src, BlockedArray) and not contiguous else None
    url = src.url if isinstance(src, BlockedArray) else None
    tile, _ = plan_tile(name, src.shape, element_bytes, SCAN_TILES, chunks, url=url)
    if contiguous:
        partial = [d for d, (t, n) in enumerate(zip(tile, src.shape)) if t < n]
        if partial:
            tile = tuple(1 if d < partial[-1] else t for d, t in enumerate(tile))
    return tile


def _flat_indices(region: Region, shape: tuple[int, ...]) -> np.ndarray:
    """The C-order flat index of each element of the tile at ``region``."""
    flat = np.zeros([s.stop - s.start for s in region], np.int64)
    stride = 1
    for axis in reversed(range(len(shape))):
        index = np.arange(region[axis].start, region[axis].stop, dtype=np.int64) * stride
        flat += index.reshape([-1 if d == axis else 1 for d in range(len(shape))])
        stride *= shape[axis]
    return flat


# ----------------------------------------------------------------------------
# Unique values
# ----------------------------------------------------------------------------
def _merge(
    values: np.ndarray, counts: np.ndarray, first: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Sorted unique ``values`` (no NaNs), each with its total count and least ``first``."""
    if values.size == 0:
        return values, counts, first
    order = np.argsort(values) if first is None else np.lexsort((first, values))
    values = values[order]
    starts = np.flatnonzero(np.concatenate([[True], values[1:] != values[:-1]]))
    counts = np.add.reduceat(counts[order], starts)
    if first is not None:
        first = first[order][starts]  # sorted by first within each value: its least
    return values[starts], counts, first


class _Uniques:
    """The running set of unique values of a stream of blocks: sorted values with counts
    (and least flat indices with ``first``), plus each NaN apart (with its flat index with
    ``nan_positions``).

    Tiles' sets wait until they outnumber the merged set before they are merged into it,
    so merging costs ``O(n log n)`` in all."""

    def __init__(self, dtype: np.dtype, first: bool, nan_positions: bool) -> None:
        self.first = first
        self.nan_positions = nan_positions or first
        self.has_nan = bool(jnp.issubdtype(dtype, jnp.inexact))
        self.merged = (np.empty(0, dtype), np.empty(0, np.int64), np.empty(0, np.int64))
        self.pending: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]] = []
        self.pending_size = 0
        self.nans: list[np.ndarray] = []
        self.nan_flat: list[np.ndarray] = []

    def add(self, block: np.ndarray, flat: np.ndarray | None) -> None:
        values = block.reshape(-1)
        flat = None if flat is None else flat.reshape(-1)
        if self.has_nan:
            nan = np.isnan(values)
            if nan.any():
                self.nans.append(values[nan])
                if self.nan_positions and flat is not None:
                    self.nan_flat.append(flat[nan])
                values = values[~nan]
                flat = None if flat is None else flat[~nan]
        if self.first:
            part = _merge(values, np.ones(values.size, np.int64), flat)
        else:
            unique, counts = np.unique(values, return_counts=True)
            part = (unique, counts.astype(np.int64), None)
        self.pending.append(part)
        self.pending_size += part[0].size
        if self.pending_size > self.merged[0].size:
            self._collapse()

    def _collapse(self) -> None:
        if not self.pending:
            return
        parts = [self.merged, *self.pending]
        first = np.concatenate([p[2] for p in parts]) if self.first else None
        values = np.concatenate([p[0] for p in parts])
        counts = np.concatenate([p[1] for p in parts])
        values, counts, first = _merge(values, counts, first)
        self.merged = (values, counts, first if first is not None else np.empty(0, np.int64))
        self.pending, self.pending_size = [], 0

    def result(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The unique values (sorted, NaNs last in the input's order when positions were
        kept), their counts, least flat indices, and the NaNs' flat indices."""
        self._collapse()
        values, counts, first = self.merged
        nans = np.concatenate(self.nans) if self.nans else values[:0]
        nan_flat = np.concatenate(self.nan_flat) if self.nan_flat else np.empty(0, np.int64)
        if self.nan_positions:
            order = np.argsort(nan_flat, kind="stable")
            nans, nan_flat = nans[order], nan_flat[order]
        return (
            np.concatenate([values, nans]),
            np.concatenate([counts, np.ones(nans.size, np.int64)]),
            np.concatenate([first, nan_flat]) if self.first else first,
            nan_flat,
        )


class _Scan(NamedTuple):
    src: Source
    values: np.ndarray
    counts: np.ndarray
    first: np.ndarray
    nan_flat: np.ndarray


def _scan(x: Any, name: str, first: bool = False, nan_positions: bool = False) -> _Scan:
    src = _source(x, name)
    shape, dtype = tuple(src.shape), np.dtype(src.dtype)
    # the block, its flattened and sorted copies (with flat indices and an argsort)
    tile = _tile(src, name, 3 * dtype.itemsize + 24, contiguous=False)
    uniques = _Uniques(dtype, first, nan_positions)
    counts = IOCounts(calls=1)
    try:
        for region, block in stream_read(src, pages.tile_regions(shape, tile), counts):
            counts.tiles += 1
            flat = _flat_indices(region, shape) if uniques.nan_positions else None
            uniques.add(np.asarray(block), flat)
    finally:
        record(call_site(name), counts)
    return _Scan(src, *uniques.result())


def _inverse(scan: _Scan, name: str) -> DiskArray:
    """Each element's index among ``scan``'s unique values, written tile by tile."""
    shape = tuple(scan.src.shape)
    nan_count = scan.nan_flat.size
    ordered = scan.values[: scan.values.size - nan_count]
    has_nan = nan_count > 0

    def compute(region: Region, block: np.ndarray) -> np.ndarray:
        values = np.asarray(block).reshape(-1)
        inverse = np.searchsorted(ordered, values)
        if has_nan:
            nan = np.isnan(values)
            flat = _flat_indices(region, shape).reshape(-1)[nan]
            inverse[nan] = ordered.size + np.searchsorted(scan.nan_flat, flat)
        return inverse.reshape(np.shape(block))

    dtype = _index_dtype(math.prod(shape))
    return write_scratch(
        shape, dtype, name, compute, source=scan.src, element_bytes=scan.src.dtype.itemsize + 24
    )


def unique_values(x: Any, /) -> DiskArray:
    """The unique elements of ``x`` (flattened), sorted, each NaN apart.

    Memory grows with the number of unique values; see the module's notes.

    Parameters
    ----------
    x : DiskArray or array-like
        Concrete (not traced): refused under ``jax.jit``.

    Returns
    -------
    DiskArray
        1-d, ``x``'s dtype.

    Raises
    ------
    NotSupportedError
        Under ``jax.jit`` or another JAX transformation.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.array([2.0, np.nan, 1.0, 2.0, np.nan], "f4"))
    >>> np.asarray(unique_values(x)).tolist()
    [1.0, 2.0, nan, nan]
    """
    return from_numpy(_scan(x, "unique_values").values)


def unique_counts(x: Any, /) -> UniqueCountsResult:
    """The unique elements of ``x`` (sorted, each NaN apart) and how many times each occurs.

    Returns
    -------
    UniqueCountsResult
        ``values`` (``x``'s dtype) and ``counts`` (the default index dtype), 1-d.

    Raises
    ------
    NotSupportedError
        Under ``jax.jit`` or another JAX transformation.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> result = unique_counts(oocarr.from_numpy(np.array([5, 3, 5, 5], "int32")))
    >>> np.asarray(result.values).tolist(), np.asarray(result.counts).tolist()
    ([3, 5], [1, 3])
    """
    scan = _scan(x, "unique_counts")
    counts = scan.counts.astype(_index_dtype(math.prod(scan.src.shape)))
    return UniqueCountsResult(from_numpy(scan.values), from_numpy(counts))


def unique_inverse(x: Any, /) -> UniqueInverseResult:
    """The unique elements of ``x`` (sorted, each NaN apart) and, for each element of ``x``,
    the index of its value among them.

    ``inverse_indices`` has ``x``'s shape and is written tile by tile in a second pass over
    ``x``; ``values[inverse_indices]`` is ``x``.

    Returns
    -------
    UniqueInverseResult
        ``values`` (1-d, ``x``'s dtype) and ``inverse_indices`` (``x``'s shape, the default
        index dtype).

    Raises
    ------
    NotSupportedError
        Under ``jax.jit`` or another JAX transformation.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> result = unique_inverse(oocarr.from_numpy(np.array([[7, 3], [3, 9]], "int32")))
    >>> np.asarray(result.inverse_indices).tolist()
    [[1, 0], [0, 2]]
    """
    scan = _scan(x, "unique_inverse", nan_positions=True)
    return UniqueInverseResult(from_numpy(scan.values), _inverse(scan, "unique_inverse"))


def unique_all(x: Any, /) -> UniqueAllResult:
    """The unique elements of ``x`` (sorted, each NaN apart), the flat index of each one's
    first occurrence, each element's index among them, and each one's count.

    Returns
    -------
    UniqueAllResult
        ``values`` (1-d, ``x``'s dtype); ``indices`` (1-d, indices into ``x`` flattened in
        C order), ``inverse_indices`` (``x``'s shape) and ``counts`` (1-d), all of the
        default index dtype.

    Raises
    ------
    NotSupportedError
        Under ``jax.jit`` or another JAX transformation.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> result = unique_all(oocarr.from_numpy(np.array([4.0, 2.0, 4.0], "f4")))
    >>> [np.asarray(a).tolist() for a in result]
    [[2.0, 4.0], [1, 0], [1, 0, 1], [1, 2]]
    """
    scan = _scan(x, "unique_all", first=True, nan_positions=True)
    dtype = _index_dtype(math.prod(scan.src.shape))
    return UniqueAllResult(
        from_numpy(scan.values),
        from_numpy(scan.first.astype(dtype)),
        _inverse(scan, "unique_all"),
        from_numpy(scan.counts.astype(dtype)),
    )


# ----------------------------------------------------------------------------
# nonzero
# ----------------------------------------------------------------------------
def nonzero(x: Any, /) -> tuple[DiskArray, ...]:
    """The indices of ``x``'s non-zero (true) elements, one 1-d array per axis, in C order
    (row-major), as ``numpy.nonzero`` gives them.

    Two passes over ``x``, in tiles that are each one run of its C order: the first counts
    each tile's non-zeros, the second writes their indices (tiles without any are not read
    again).  Memory: a few tiles, whatever the number of non-zeros.

    Parameters
    ----------
    x : DiskArray or array-like
        At least 1-d (the standard does not allow a 0-d array); concrete, not traced.

    Returns
    -------
    tuple of DiskArray
        ``x.ndim`` arrays of the default index dtype, each as long as ``x`` has non-zeros.

    Raises
    ------
    InvalidArgumentError
        When ``x`` is 0-d.
    NotSupportedError
        Under ``jax.jit`` or another JAX transformation.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> rows, cols = nonzero(oocarr.from_numpy(np.array([[0, 5], [7, 0]], "int32")))
    >>> np.asarray(rows).tolist(), np.asarray(cols).tolist()
    ([0, 1], [1, 0])
    """
    src = _source(x, "nonzero")
    shape, ndim = tuple(src.shape), len(src.shape)
    if ndim == 0:
        raise InvalidArgumentError(
            "nonzero: x is 0-d, which the Array API standard does not allow; pass a 1-d "
            "array (x[None]) instead"
        )
    dtype = _index_dtype(math.prod(shape))
    # the block, its mask, and np.nonzero's int64 indices with their cast copies
    tile = _tile(src, "nonzero", np.dtype(src.dtype).itemsize + 1 + 16 * ndim, contiguous=True)
    regions = list(pages.tile_regions(shape, tile))
    counts = IOCounts(calls=1)
    try:
        found = [int(np.count_nonzero(block)) for _, block in stream_read(src, regions, counts)]
        counts.tiles += len(regions)
        return _write_nonzero(src, regions, found, dtype, counts)
    finally:
        record(call_site("nonzero"), counts)


def _write_nonzero(
    src: Source, regions: list[Region], found: list[int], dtype: np.dtype, counts: IOCounts
) -> tuple[DiskArray, ...]:
    """The second pass of :func:`nonzero`: each tile's non-zeros' indices written after the
    previous tiles' ones."""
    total, ndim = sum(found), len(src.shape)
    locators = [scratch_locator(None, (total,), dtype) for _ in range(ndim)]
    starts = [0, *np.cumsum(found, dtype=np.int64).tolist()]
    busy = [(r, s) for r, s, n in zip(regions, starts, found) if n]

    with contextlib.ExitStack() as stack:
        outs = [stack.enter_context(create_store(loc, (total,), dtype)) for loc in locators]

        def write(_: Any, at: slice, indices: tuple[np.ndarray, ...]) -> None:
            for out, index in zip(outs, indices):
                out.write_region((at,), index)
                counts.count_written(index.nbytes)

        with WriteBehind(write, None) as writer:
            blocks = stream_read(src, [r for r, _ in busy], counts)
            for (region, block), (_, start) in zip(blocks, busy):
                local = np.nonzero(np.asarray(block))
                at = slice(start, start + local[0].size)
                writer.submit(at, tuple((i + s.start).astype(dtype) for i, s in zip(local, region)))
                counts.tiles += 1
    return tuple(DiskArray(open_store(loc), owned=True) for loc in locators)
