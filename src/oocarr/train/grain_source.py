"""Stored arrays as a Grain data source: Grain's samplers, transformations and loaders on rows
of HDF5, Zarr or ``.npy`` data.

``GrainSource(*arrays)`` has what Grain's ``RandomAccessDataSource`` protocol asks for,
``__len__`` and ``__getitem__(index)`` (a tuple with that row of each array), and pickles by
its arrays' URLs, so Grain's worker processes open the arrays themselves.  Grain is not
imported here: the protocol is duck-typed.

A record is one row.  Records asked for in order are read a block at a time: each array
keeps the block of rows it read last (one chunk along the rows, whole along the rest; 64 KiB
of rows for an unchunked array), and the rows after the first come from memory.  Any other
record is read alone, which costs a small read from uncompressed storage, and a chunk read
and decode from compressed storage: ``oocarr.batches`` reads whole blocks in a shuffled
order and is much faster for shuffled epochs.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from oocarr.errors import InvalidArgumentError, ShapeMismatchError
from oocarr.jaxlayer.disk_array import DiskArray
from oocarr.store.blocked import BlockedArray

__all__ = ["GrainSource"]

#: Bytes of rows an unchunked array (``.npy``, contiguous HDF5) reads at a time.  A chunked
#: array reads one chunk along the rows.  Blocks serve records asked for in order only: with
#: 4 MiB blocks for every record (256 KiB HDF5 chunks), Grain's shuffled DataLoader read
#: 620-760 records/s; with one chunk, 840-1,080; reading out-of-order records alone,
#: 950-1,170.
BLOCK_BYTES = 64 * 2**10


class _Rows:
    """One array's rows, read a chunk-aligned block at a time and kept until another block is
    needed."""

    def __init__(self, value: Any) -> None:
        if isinstance(value, DiskArray):
            value = value.store
        held: BlockedArray | np.ndarray
        self.store: BlockedArray | None
        self.array: np.ndarray | None
        if isinstance(value, BlockedArray):
            self.store, self.array = value, None
            held = value
        else:
            self.store, self.array = None, np.asarray(value)
            held = self.array
        if not held.shape:
            raise InvalidArgumentError("GrainSource: a 0-d array has no rows")
        self.shape = tuple(held.shape)
        row_bytes = max(1, math.prod(self.shape[1:]) * np.dtype(held.dtype).itemsize)
        chunks = self.store.chunks if self.store is not None else None
        self.block_rows = int(chunks[0]) if chunks else max(1, BLOCK_BYTES // row_bytes)
        self._block: tuple[int, np.ndarray] | None = None
        self._last = -2  # the row read last: the next one is read with its block
        self._lock = threading.Lock()

    def row(self, index: int) -> np.ndarray:
        if self.array is not None:  # in memory (exactly one of store and array is set)
            return self.array[index]
        store = self.store
        assert store is not None
        with self._lock:
            block, sequential = self._block, index == self._last + 1
            self._last = index
            if block is not None and block[0] <= index < block[0] + len(block[1]):
                return block[1][index - block[0]].copy()
            if not sequential:  # one row: a driver reads only its bytes where it can
                region = (slice(index, index + 1), *(slice(0, n) for n in self.shape[1:]))
                return store.read_region(region)[0]
            start = index - index % self.block_rows
            stop = min(start + self.block_rows, self.shape[0])
            region = (slice(start, stop), *(slice(0, n) for n in self.shape[1:]))
            block = self._block = (start, store.read_region(region))
            return block[1][index - block[0]].copy()

    def __getstate__(self) -> dict[str, Any]:
        return {"store": self.store, "array": self.array}

    def __setstate__(self, state: dict[str, Any]) -> None:
        type(self).__init__(self, state["store"] if state["store"] is not None else state["array"])


class GrainSource:
    """Rows of arrays that share their leading axis, as a Grain ``RandomAccessDataSource``.

    Parameters
    ----------
    *arrays : DiskArray, BlockedArray or array-like
        Arrays with the same number of rows, on any driver or in memory.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> source = oocarr.GrainSource(oocarr.from_numpy(np.arange(12.0).reshape(6, 2)), np.arange(6))
    >>> len(source), source[4]
    (6, (array([8., 9.]), np.int64(4)))
    """

    def __init__(self, *arrays: Any) -> None:
        if not arrays:
            raise InvalidArgumentError("GrainSource needs at least one array")
        self._rows = [_Rows(a) for a in arrays]
        lengths = {r.shape[0] for r in self._rows}
        if len(lengths) != 1:
            raise ShapeMismatchError(
                f"GrainSource: the arrays must share their leading axis, got lengths "
                f"{[r.shape[0] for r in self._rows]}"
            )
        self._length = lengths.pop()

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> tuple[np.ndarray, ...]:
        index = int(index)
        if not -self._length <= index < self._length:
            raise IndexError(f"GrainSource: record {index} of {self._length}")
        index %= self._length
        return tuple(r.row(index) for r in self._rows)

    def __repr__(self) -> str:
        names = ", ".join(
            r.store.url if r.store is not None else f"in-memory {r.shape}" for r in self._rows
        )
        return f"GrainSource({names}: {self._length} records)"
