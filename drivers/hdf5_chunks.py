"""Parallel reads of HDF5 chunks whose filters this module decodes itself.

HDF5 decodes a filtered chunk inside the library, under the process-wide
lock that h5py holds for every call, so decompression runs on one core at a
time however many threads read.  For the filters most compressed HDF5 files
use, this module reads each chunk's stored bytes with ``H5Dread_chunk``
(under the lock, a plain file read) and decodes them in a small thread pool
outside it:

* deflate (HDF5's gzip), with ISA-L's inflate when ``isal`` is installed
  (about twice zlib's speed) and zlib's otherwise;
* shuffle, with numcodecs' ``Shuffle`` (about 3x NumPy's transposing copy);
* the hdf5plugin filters Blosc (32001, every compressor and its own
  shuffle/bitshuffle, through ``numcodecs.blosc``), Zstd (32015, through
  ``zstandard``) and LZ4 (32004, its blocks through ``numcodecs.lz4``),

alone or after shuffle.  Every decoder releases the GIL while it works and
is handed the chunk's size: a chunk that is corrupt or claims to hold more
bytes than that raises before anything larger than the chunk is allocated.

For a remote file (:mod:`oocarr_drivers.hdf5_remote`) the stored bytes come
from ranged requests instead of ``H5Dread_chunk``, a batch of chunks in
flight at once (``fetch=``), and unfiltered chunks take this path too: the
bytes are the chunk.  Only the chunk index is read through HDF5 (under the
lock, from the metadata it caches).

Bitshuffle (32008) stays with HDF5: bit-unshuffling in NumPy runs at about
40 MB/s a core (unpackbits/packbits on 8 KiB blocks, measured), against
750-850 MB/s for h5py's own read of a Bitshuffle-LZ4 dataset (the filter's
SIMD code under HDF5's lock), so decoding it here would be slower even on
many cores.  Any other filter (Blosc2, BZip2, LZF, szip, checksums ...) is
decoded by HDF5 too.

Measured (2 shared cores, warm page cache, a 400 MB float32 dataset of smooth
values in 1 MiB chunks; MB/s over three runs, which vary with the machine's
other load): LZ4 ``store[:]`` 1780-2880 against h5py's ``dset[:]``
1050-1290 (``oocarr.sum`` 920-1100); gzip+shuffle 310-490 against 260-300;
Zstd 850-1260 against 630-1000; Blosc-LZ4 730-1480 against 720-960;
Blosc-Zstd 580-1210 against 610-690; shuffle+Zstd 540-655 against 480-610
(the unshuffle holds the GIL).
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import struct
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any

import h5py
import numpy as np
from numcodecs import lz4 as _lz4
from numcodecs.shuffle import Shuffle as _Shuffle

from oocarr_drivers.bounded import inflate, unblosc, unzstd
from oocarr_drivers.decode_buffers import CallBuffers, same_memory

__all__ = [
    "DECODER_CHUNKS",
    "ChunkDecoder",
    "decoder_for",
    "decoding_threads",
    "unblosc",
    "unlz4",
]

_DEFLATE = h5py.h5z.FILTER_DEFLATE
_SHUFFLE = h5py.h5z.FILTER_SHUFFLE
#: hdf5plugin's filter ids (https://github.com/HDFGroup/hdf5_plugins/blob/master/docs/RegisteredFilterPlugins.md).
BLOSC, LZ4, BITSHUFFLE, ZSTD = 32001, 32004, 32008, 32015

#: Threads decoding chunks at once: each holds one stored and one or two decoded chunks.
MAX_DECODERS = 4
#: Chunk-sized buffers one decoding thread holds at most (stored, decoded, unshuffled).
DECODER_CHUNKS = 3
#: Bytes of the header of the LZ4 filter's chunks.
LZ4_HEADER = 12

#: Where stored chunk bytes come from for a remote file: ``(start, end)`` byte ranges in, their
#: bytes out as ``(index, bytes)`` batches (:meth:`RemoteFile.fetch_batches`).
Fetch = Callable[[list[tuple[int, int]]], Iterable[list[tuple[int, Any]]]]

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


def decoder_for(dset: h5py.Dataset, dtype: np.dtype, raw: bool = False) -> ChunkDecoder | None:
    """A decoder for ``dset``'s chunks, or ``None`` when HDF5 must decode them itself.

    Only chunked datasets whose every filter is one this module decodes
    (deflate, shuffle, Blosc, Zstd, LZ4) and whose stored type is a plain
    integer or float equal to ``dtype`` qualify; with ``raw`` (the chunks are
    fetched, not read by HDF5) unfiltered ones too, of any type stored as
    ``dtype``.

    Examples
    --------
    >>> import h5py, hdf5plugin, numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "d.h5")
    >>> with h5py.File(path, "w") as f:
    ...     _ = f.create_dataset("z", data=np.zeros((8, 8)), chunks=(4, 4), **hdf5plugin.Zstd())
    ...     _ = f.create_dataset("b", data=np.zeros((8, 8)), chunks=(4, 4), **hdf5plugin.BZip2())
    >>> with h5py.File(path) as f:
    ...     decoder_for(f["z"], np.dtype("f8")).filters, decoder_for(f["b"], np.dtype("f8"))
    ((32015,), None)
    """
    if dset.chunks is None or dtype.kind not in ("biufc" if raw else "fiu"):
        return None
    plist = dset.id.get_create_plist()
    filters = tuple(plist.get_filter(i)[0] for i in range(plist.get_nfilters()))
    if not set(filters) <= _UNFILTERS.keys() or not (filters or raw):
        return None
    if filters and dtype.kind not in "fiu":
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
        fetch: Fetch | None = None,
    ) -> None:
        """Fill ``out`` with ``region`` of ``dset``; ``lock`` guards each call into h5py.

        With ``parallel=False`` (for a caller that holds ``lock`` itself) every
        chunk is decoded in the calling thread.  With ``fetch`` (a remote
        file's :meth:`~oocarr_drivers.hdf5_remote.RemoteFile.fetch_batches`)
        the stored bytes come from it, a batch of chunks at a time, instead of
        from HDF5.  A chunk that cannot be decoded raises ``OSError`` naming it.
        """
        buffers = CallBuffers(self.chunk_bytes, count=2)
        if fetch is not None:
            for tasks in self._fetched_tasks(dset, region, out, lock, fetch, buffers):
                self._run(tasks, parallel)
            return
        tasks = [
            self._task(dset, region, out, lock, start, buffers) for start in self._starts(region)
        ]
        self._run(tasks, parallel)

    @staticmethod
    def _run(tasks: list[Callable[[], None]], parallel: bool) -> None:
        if len(tasks) <= 1 or not parallel:
            for task in tasks:
                task()
            return
        for future in [_pool().submit(task) for task in tasks]:
            future.result()

    def _starts(self, region: tuple[slice, ...]) -> Iterator[tuple[int, ...]]:
        """Start coordinates of every chunk the region touches, in C order."""
        axes = [range(r.start - r.start % c, r.stop, c) for r, c in zip(region, self.chunks)]
        return itertools.product(*axes)

    def _overlap(
        self, region: tuple[slice, ...], start: tuple[int, ...]
    ) -> tuple[tuple[slice, ...], tuple[slice, ...], tuple[slice, ...]]:
        """Where chunk ``start`` meets ``region``: in the dataset, in ``out``, in the chunk."""
        inner = tuple(
            slice(max(r.start, s), min(r.stop, s + c))
            for r, s, c in zip(region, start, self.chunks)
        )
        local = tuple(slice(i.start - r.start, i.stop - r.start) for i, r in zip(inner, region))
        within = tuple(slice(i.start - s, i.stop - s) for i, s in zip(inner, start))
        return inner, local, within

    def _task(
        self,
        dset: h5py.Dataset,
        region: tuple[slice, ...],
        out: np.ndarray,
        lock: AbstractContextManager[Any],
        start: tuple[int, ...],
        buffers: CallBuffers,
    ) -> Callable[[], None]:
        inner, local, within = self._overlap(region, start)

        def run() -> None:
            with lock:
                if dset.id.get_chunk_info_by_coord(start).byte_offset is None:
                    # Never written: HDF5 knows the fill value.
                    dset.read_direct(out, source_sel=inner, dest_sel=local)
                    return
                mask, stored = dset.id.read_direct_chunk(start)
            self._place(stored, mask, start, out[local], within, buffers)

        return run

    def _fetched_tasks(
        self,
        dset: h5py.Dataset,
        region: tuple[slice, ...],
        out: np.ndarray,
        lock: AbstractContextManager[Any],
        fetch: Fetch,
        buffers: CallBuffers,
    ) -> Iterator[list[Callable[[], None]]]:
        """The decoding tasks of the region's chunks, a fetched batch at a time (chunks never
        written are filled by HDF5 first)."""
        starts, infos = list(self._starts(region)), []
        with lock:
            for start in starts:
                info = dset.id.get_chunk_info_by_coord(start)
                if info.byte_offset is None:
                    inner, local, _ = self._overlap(region, start)
                    dset.read_direct(out, source_sel=inner, dest_sel=local)
                else:
                    infos.append((start, info.filter_mask, info.byte_offset, info.size))
        ranges = [(offset, offset + size) for _, _, offset, size in infos]
        for batch in fetch(ranges):
            tasks: list[Callable[[], None]] = []
            for index, stored in batch:
                start, mask = infos[index][:2]
                _, local, within = self._overlap(region, start)
                tasks.append(
                    functools.partial(self._place, stored, mask, start, out[local], within, buffers)
                )
            yield tasks

    def _place(
        self,
        stored: Any,
        mask: int,
        start: tuple[int, ...],
        target: np.ndarray,
        within: tuple[slice, ...],
        buffers: CallBuffers,
    ) -> None:
        """Decode chunk ``start`` from its ``stored`` bytes into ``target`` (its ``within``
        part): a whole chunk landing contiguously is decoded straight into it, otherwise
        through this thread's buffers, then copied."""
        direct = (
            target.shape == self.chunks and target.dtype == self.dtype and target.flags.c_contiguous
        )
        chunk = self._decode(stored, mask, start, buffers, target if direct else None)
        if not (direct and same_memory(chunk, target)):
            target[...] = chunk[within]

    def _decode(
        self,
        stored: bytes,
        mask: int,
        start: tuple[int, ...],
        buffers: CallBuffers | None = None,
        target: np.ndarray | None = None,
    ) -> np.ndarray:
        """Chunk ``start`` decoded from its ``stored`` bytes: its filters undone through
        ``buffers`` (when given) and the last into ``target`` (when given) where they can."""
        final = None if target is None else target.reshape(-1).view(np.uint8)
        try:
            data = self._unfilter(stored, mask, buffers, final)
            if len(data) != self.chunk_bytes:
                raise ValueError(f"it decoded to {len(data)} bytes, not {self.chunk_bytes}")
        except Exception as err:  # ValueError from the bounded decoders, anything else
            raise OSError(f"{self._name(start)} could not be decoded: {err}") from None
        return np.frombuffer(data, self.dtype).reshape(self.chunks)

    def _name(self, start: tuple[int, ...]) -> str:
        """``chunk (1, 0) (elements [100:200, 0:50])``."""
        index = tuple(s // c for s, c in zip(start, self.chunks))
        where = ", ".join(f"{s}:{s + c}" for s, c in zip(start, self.chunks))
        return f"chunk {index} (elements [{where}])"

    def _unfilter(
        self,
        stored: bytes,
        mask: int,
        buffers: CallBuffers | None = None,
        final: np.ndarray | None = None,
    ) -> Any:
        """The filters not skipped (``mask``) undone, last applied first; a filter that can
        decodes into ``final`` when it is the last undone, else into whichever of this
        thread's two ``buffers`` does not hold its input."""
        steps = [p for p in reversed(range(len(self.filters))) if not mask & (1 << p)]
        data: Any = stored
        for i, position in enumerate(steps):
            fid = self.filters[position]
            out = None
            if fid in _INTO:
                if i == len(steps) - 1 and final is not None:
                    out = final
                elif buffers is not None:
                    out = next(
                        b
                        for b in (buffers.get(0), buffers.get(1))
                        if not (isinstance(data, np.ndarray) and np.may_share_memory(data, b))
                    )
            data = _UNFILTERS[fid](data, self.chunk_bytes, self.dtype.itemsize, out)
        return data


# ----------------------------------------------------------------------
# The filters, each undone within a chunk's size
# ----------------------------------------------------------------------
def unlz4(data: Any, limit: int, out: np.ndarray | None = None) -> np.ndarray:
    """A chunk of the LZ4 filter (32004) decompressed, at most ``limit`` bytes.

    The filter writes the decoded size (8 bytes, big-endian), the block size
    (4 bytes), then each block as its stored size (4 bytes) and an LZ4 block,
    or the block's raw bytes when LZ4 did not make it smaller.

    Examples
    --------
    >>> raw = bytes(range(10)) * 3
    >>> block = _lz4.compress(raw)[4:]  # numcodecs' own 4-byte size prefix dropped
    >>> chunk = struct.pack(">QII", 30, 30, len(block)) + block
    >>> unlz4(chunk, 30).tobytes() == raw
    True
    """
    view = memoryview(data).cast("B")
    if len(view) < LZ4_HEADER:
        raise ValueError(f"it holds {len(view)} bytes, less than the LZ4 filter's header")
    total, block = struct.unpack_from(">QI", view)
    if total > limit:
        raise ValueError(
            f"its LZ4 header claims {total} bytes, more than the {limit} a chunk holds"
        )
    if block == 0 and total:
        raise ValueError("its LZ4 header gives a block size of 0")
    if out is None or out.nbytes != total:
        out = np.empty(total, np.uint8)
    pos = LZ4_HEADER
    for begin in range(0, total, block or 1):
        size = min(block, total - begin)
        if pos + 4 > len(view):
            raise ValueError(f"it ends before LZ4 block {begin // block}")
        (stored,) = struct.unpack_from(">I", view, pos)
        pos += 4
        if stored > len(view) - pos:
            raise ValueError(f"LZ4 block {begin // block} claims more bytes than the chunk has")
        piece, target = view[pos : pos + stored], out[begin : begin + size]
        pos += stored
        if stored == size:
            target[:] = np.frombuffer(piece, np.uint8)  # stored raw
            continue
        try:
            _lz4.decompress(struct.pack("<I", size) + piece, target)
        except (RuntimeError, ValueError) as err:
            raise ValueError(f"LZ4 block {begin // block} is corrupt ({err})") from None
    return out


def _unshuffle(data: Any, itemsize: int, out: np.ndarray | None = None) -> np.ndarray:
    """Undo HDF5's shuffle filter (the first bytes of every element, then the second...)
    with numcodecs' Shuffle, about 3x NumPy's transposing copy.

    Examples
    --------
    >>> _unshuffle(bytes([1, 3, 2, 4]), 2).tobytes()
    b'\\x01\\x02\\x03\\x04'
    """
    raw = np.frombuffer(data, np.uint8)
    if itemsize == 1:
        return raw
    if raw.size % itemsize:
        raise ValueError(f"it holds {raw.size} bytes, not whole {itemsize}-byte elements")
    if out is None or out.nbytes != raw.size:
        out = np.empty(raw.size, np.uint8)
    _Shuffle(itemsize).decode(raw, out)
    return out


#: How each filter is undone: ``(stored, chunk bytes, itemsize, out) -> decoded``, into
#: ``out`` (uint8, or ``None``) when it has the decoded size and the filter can.
_UNFILTERS: dict[int, Callable[[Any, int, int, Any], Any]] = {
    _DEFLATE: lambda data, limit, _itemsize, _out: inflate(data, limit),
    _SHUFFLE: lambda data, _limit, itemsize, out: _unshuffle(data, itemsize, out),
    BLOSC: lambda data, limit, _itemsize, out: unblosc(data, limit, out),
    ZSTD: lambda data, limit, _itemsize, out: unzstd(data, limit, out),
    LZ4: lambda data, limit, _itemsize, out: unlz4(data, limit, out),
}
#: The filters whose decoder writes into a given buffer.
_INTO = frozenset({_SHUFFLE, BLOSC, ZSTD, LZ4})
