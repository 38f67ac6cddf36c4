"""Stored arrays as a Grain data source: Grain's samplers, transformations and loaders on rows
of HDF5, Zarr or ``.npy`` data.

``GrainSource(*arrays)`` has what Grain's ``RandomAccessDataSource`` protocol asks for,
``__len__`` and ``__getitem__(index)`` (a tuple with that row of each array), and pickles by
its arrays' URLs, so Grain's worker processes open the arrays themselves.  Grain is not
imported here: the protocol is duck-typed.

A record is one row, but storage is read a chunk at a time: each array keeps the block of
chunk-aligned rows it read last (one chunk along the rows, whole along the rest), so records
read in order, or in Grain's shuffled order over a window of nearby indices, come from memory.
Random single rows each cost a chunk read and, for compressed data, a chunk decode:
``oocarr.batches`` reads whole blocks in a shuffled order and is much faster for that.
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

#: Most bytes of rows an array keeps from its last read (when its chunks hold fewer rows,
#: a block is one chunk along the rows).
BLOCK_BYTES = 4 * 2**20


class _Rows:
    """One array's rows, read a chunk-aligned block at a time and kept until another block is
    needed."""

    def __init__(self, value: Any) -> None:
        if isinstance(value, DiskArray):
            value = value.store
        self.store = value if isinstance(value, BlockedArray) else None
        self.array = None if self.store is not None else np.asarray(value)
        held = self.store if self.store is not None else self.array
        if not held.shape:
            raise InvalidArgumentError("GrainSource: a 0-d array has no rows")
        self.shape = tuple(held.shape)
        row_bytes = max(1, math.prod(self.shape[1:]) * np.dtype(held.dtype).itemsize)
        chunks = self.store.chunks if self.store is not None else None
        per_block = max(1, BLOCK_BYTES // row_bytes)
        self.block_rows = int(chunks[0]) if chunks else per_block
        if chunks and self.block_rows < per_block:
            self.block_rows *= max(1, per_block // self.block_rows)
        self._block: tuple[int, np.ndarray] | None = None
        self._lock = threading.Lock()

    def row(self, index: int) -> np.ndarray:
        if self.store is None:
            return self.array[index]
        with self._lock:
            block = self._block
            if block is None or not block[0] <= index < block[0] + len(block[1]):
                start = index - index % self.block_rows
                stop = min(start + self.block_rows, self.shape[0])
                region = (slice(start, stop), *(slice(0, n) for n in self.shape[1:]))
                block = self._block = (start, self.store.read_region(region))
            return block[1][index - block[0]].copy()

    def __getstate__(self) -> dict[str, Any]:
        return {"store": self.store, "array": self.array}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["store"] if state["store"] is not None else state["array"])


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
