"""Parallel reads of deflate- and shuffle-filtered HDF5 chunks.

HDF5 decodes a filtered chunk inside the library, under the process-wide
lock that h5py holds for every call, so decompression runs on one core at a
time however many threads read.  For the filters almost every compressed
HDF5 file uses (deflate, optionally after shuffle), this module reads each
chunk's stored bytes with ``H5Dread_chunk`` (under the lock, a plain file
read) and decodes them in a small thread pool outside it, with ISA-L's
inflate when ``isal`` is installed (about twice zlib's speed) and zlib's
otherwise.  Both release the GIL while they inflate.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any

import h5py
import numpy as np

from oocarr_drivers.bounded import inflate

__all__ = ["DECODER_CHUNKS", "ChunkDecoder", "decoder_for", "decoding_threads"]

_DEFLATE = h5py.h5z.FILTER_DEFLATE
_SHUFFLE = h5py.h5z.FILTER_SHUFFLE

#: Threads decoding chunks at once: each holds one stored and one or two decoded chunks.
MAX_DECODERS = 4
#: Chunk-sized buffers one decoding thread holds at most (stored, decoded, unshuffled).
DECODER_CHUNKS = 3

_POOL: tuple[int, ThreadPoolExecutor] | None = None
_POOL_LOCK = threading.Lock()


def decoding_threads() -> int:
    """How many threads decode chunks at once in this process.

    Examples
    --------
    >>> 1 <= decoding_threads() <= MAX_DECODERS
    True
    """
    return max(1, min(MAX_DECODERS, os.cpu_count() or 1))


def _pool() -> ThreadPoolExecutor:
    """This process's decoding threads (a pool inherited across ``fork`` has none)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL[0] != os.getpid():
            _POOL = (os.getpid(), ThreadPoolExecutor(decoding_threads(), "oocarr-hdf5-decode"))
        return _POOL[1]


def decoder_for(dset: h5py.Dataset, dtype: np.dtype) -> ChunkDecoder | None:
    """A decoder for ``dset``'s chunks, or ``None`` when HDF5 must decode them itself.

    Only chunked datasets whose filters are deflate and shuffle (at least one
    of them) and whose stored type is a plain integer or float equal to
    ``dtype`` qualify.
    """
    if dset.chunks is None or dtype.kind not in "fiu":
        return None
    plist = dset.id.get_create_plist()
    filters = tuple(plist.get_filter(i)[0] for i in range(plist.get_nfilters()))
    if not filters or not set(filters) <= {_DEFLATE, _SHUFFLE}:
        return None
    if dset.id.get_type().dtype != dtype:
        return None
    return ChunkDecoder(tuple(dset.chunks), dtype, filters)


class ChunkDecoder:
    """Reads a region of a filtered dataset chunk by chunk, decoding in parallel.

    Parameters
    ----------
    chunks : tuple of int
        The dataset's chunk shape.
    dtype : numpy.dtype
        Its element type (the stored type).
    filters : tuple of int
        The filter pipeline's HDF5 filter ids, in the order they were applied
        when writing.

    Examples
    --------
    >>> import h5py, numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "d.h5")
    >>> with h5py.File(path, "w") as f:
    ...     _ = f.create_dataset("x", data=np.arange(60.0).reshape(6, 10), chunks=(4, 4),
    ...                          compression="gzip", shuffle=True)
    >>> dset = h5py.File(path)["x"]
    >>> out = np.empty((3, 7))
    >>> region = (slice(2, 5), slice(1, 8))
    >>> decoder_for(dset, dset.dtype).read(dset, region, out, threading.Lock())
    >>> bool((out == dset[2:5, 1:8]).all())
    True
    """

    def __init__(self, chunks: tuple[int, ...], dtype: np.dtype, filters: tuple[int, ...]):
        self.chunks = chunks
        self.dtype = np.dtype(dtype)
        self.filters = filters
        self.chunk_bytes = math.prod(chunks) * self.dtype.itemsize

    def read(
        self,
        dset: h5py.Dataset,
        region: tuple[slice, ...],
        out: np.ndarray,
        lock: AbstractContextManager[Any],
        parallel: bool = True,
    ) -> None:
        """Fill ``out`` with ``region`` of ``dset``; ``lock`` guards each call into h5py.

        With ``parallel=False`` (for a caller that holds ``lock`` itself) every
        chunk is read and decoded in the calling thread.
        """
        tasks = [self._task(dset, region, out, lock, start) for start in self._starts(region)]
        if len(tasks) == 1 or not parallel:
            for task in tasks:
                task()
            return
        for future in [_pool().submit(task) for task in tasks]:
            future.result()

    def _starts(self, region: tuple[slice, ...]) -> Iterator[tuple[int, ...]]:
        """Start coordinates of every chunk the region touches, in C order."""
        axes = [range(r.start - r.start % c, r.stop, c) for r, c in zip(region, self.chunks)]
        return itertools.product(*axes)

    def _task(self, dset, region, out, lock, start) -> Callable[[], None]:
        inner = tuple(
            slice(max(r.start, s), min(r.stop, s + c))
            for r, s, c in zip(region, start, self.chunks)
        )
        local = tuple(slice(i.start - r.start, i.stop - r.start) for i, r in zip(inner, region))
        within = tuple(slice(i.start - s, i.stop - s) for i, s in zip(inner, start))

        def run() -> None:
            with lock:
                if dset.id.get_chunk_info_by_coord(start).byte_offset is None:
                    # Never written: HDF5 knows the fill value.
                    dset.read_direct(out, source_sel=inner, dest_sel=local)
                    return
                mask, stored = dset.id.read_direct_chunk(start)
            out[local] = self._decode(stored, mask)[within]

        return run

    def _decode(self, stored: bytes, mask: int) -> np.ndarray:
        try:
            data = self._unfilter(stored, mask)
        except Exception as err:  # zlib.error, isal_zlib.error
            raise OSError(f"a chunk could not be decoded ({err})") from None
        if len(data) != self.chunk_bytes:
            raise OSError(f"a chunk decoded to {len(data)} bytes, not {self.chunk_bytes}")
        return np.frombuffer(data, self.dtype).reshape(self.chunks)

    def _unfilter(self, stored: bytes, mask: int) -> Any:
        data: Any = stored
        for position in reversed(range(len(self.filters))):
            if mask & (1 << position):
                continue  # this filter was skipped when the chunk was written
            if self.filters[position] == _DEFLATE:
                data = inflate(data, self.chunk_bytes)
            else:
                data = _unshuffle(data, self.dtype.itemsize)
        return data


def _unshuffle(data: Any, itemsize: int) -> np.ndarray:
    """Undo HDF5's shuffle filter: the first bytes of every element, then the second..."""
    raw = np.frombuffer(data, np.uint8)
    if itemsize == 1:
        return raw
    count = raw.size // itemsize
    result = np.empty(raw.size, np.uint8)
    result[: count * itemsize].reshape(count, itemsize)[...] = (
        raw[: count * itemsize].reshape(itemsize, count).T
    )
    result[count * itemsize :] = raw[count * itemsize :]
    return result
