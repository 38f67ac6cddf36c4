"""HDF5 files on fsspec filesystems (``s3://``, ``gcs://``, ``memory://``, ``https://``), read-only.

h5py reads a remote file through an fsspec file object (its ``fileobj``
driver), one per process and file (:mod:`oocarr_drivers.hdf5_handles` keeps
it with the ``h5py.File``).  Only metadata, and the data of layouts the
driver cannot fetch itself, go through that object and its read-ahead cache:
the stored bytes of chunks, and the runs of a contiguous dataset, are
fetched by the driver with ranged requests (:meth:`RemoteFile.fetch_batches`):
neighbours less than :data:`MAX_GAP` apart are merged into requests of up to
:data:`MAX_REQUEST`, and a batch of them is in flight at once through
``cat_ranges``, as the fsspec driver fetches Zarr chunks.

Errors of the storage itself (no connection, access denied ...) are fsspec's
own, as the fsspec driver lets them through, with a note naming the URL; a
missing file is :class:`~oocarr.errors.NotFoundError`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import h5py
import numpy as np

from oocarr.errors import NotFoundError
from oocarr.store import Locator, corrupt, require_exists
from oocarr_drivers.fsspec_urls import url_filesystem

__all__ = [
    "BLOCK_SIZE",
    "FETCH_BATCH_BYTES",
    "MAX_GAP",
    "MAX_REQUEST",
    "RemoteFile",
    "contiguous_overhead",
    "is_transport_error",
    "read_contiguous",
]

#: Read-ahead of the file object h5py reads through: a miss fetches what HDF5 asked for and
#: this much after it.  Metadata costs a few misses (HDF5 caches what it decoded); chunks of
#: filters HDF5 decodes itself are read in file order, so the next ones are mostly in the
#: window (a 76 MB Bitshuffle dataset from moto's S3: 4.0 s with 1 MiB, 1.5 s with 4 MiB).
BLOCK_SIZE = 4 * 2**20
#: Ranges at most this far apart are fetched in one request (a gap costs less than a request).
MAX_GAP = 256 * 2**10
#: Largest request that merging makes (S3's guidance: 8-16 MB ranged GETs).
MAX_REQUEST = 8 * 2**20
#: Bytes fetched per batch of requests in flight at once; a batch is used before the next.
FETCH_BATCH_BYTES = 64 * 2**20
#: Most runs a contiguous region is fetched in: a region of more (a thin slice across many
#: rows) is fetched in whole rows of an outer axis instead, reading the gaps too.
MAX_RUNS = 4096
#: Attribute that marks an exception as raised by the storage, not by HDF5 or a decoder.
_TRANSPORT = "_oocarr_hdf5_transport"


def is_transport_error(err: BaseException) -> bool:
    """Whether ``err`` came from the storage (fsspec) under a remote file, not from HDF5.

    h5py re-raises what the file object raised as it is, so the driver tells a
    failed request (kept as fsspec raised it) from a damaged file (an
    ``InvalidStoreError``) by this mark.
    """
    return bool(getattr(err, _TRANSPORT, False))


def _transport(err: BaseException, url: str) -> BaseException:
    if not is_transport_error(err):
        try:
            setattr(err, _TRANSPORT, True)
        except AttributeError:
            pass
        err.add_note(f"while reading {url} (hdf5 driver, through fsspec)")
    return err


class _Reader:
    """The fsspec file object as h5py sees it: read-only, and marking what it raises as the
    storage's.  Its ``repr`` is the URL, which h5py takes for the file's name."""

    def __init__(self, raw: Any, url: str) -> None:
        self._raw = raw
        self._url = url

    def __repr__(self) -> str:
        return self._url

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self._raw, method)(*args)
        except Exception as err:
            raise _transport(err, self._url) from None

    def readinto(self, buffer: Any) -> int:
        return self._call("readinto", buffer)

    def read(self, size: int = -1) -> bytes:
        return self._call("read", size)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._call("seek", offset, whence)

    def tell(self) -> int:
        return self._call("tell")

    def flush(self) -> None:
        """Nothing to write."""

    def close(self) -> None:
        self._raw.close()


class RemoteFile:
    """One process's access to a remote HDF5 file: its filesystem, the file object h5py reads
    and the ranged reads of stored data.  Never carried across processes (a store reopens
    its own from the locator)."""

    def __init__(self, locator: Locator) -> None:
        self.locator = locator
        self.url = locator.url
        self.fs, self.path = url_filesystem(locator)
        self._reader: _Reader | None = None

    def open_hdf5(self) -> h5py.File:
        """A fresh read-only ``h5py.File`` on the file (the previous file object closed).

        Raises
        ------
        NotFoundError
            When there is no file at the URL.
        OSError
            h5py's, when the object is not HDF5 (or damaged); the storage's, marked
            (:func:`is_transport_error`), when a request failed.
        """
        self.close()
        try:
            raw = self.fs.open(self.path, "rb", block_size=BLOCK_SIZE, cache_type="readahead")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            require_exists(False, self.locator, "file")
            raise
        except Exception as err:
            raise _transport(err, self.url) from None
        reader = _Reader(raw, self.url)
        try:
            file = h5py.File(reader, "r")
        except BaseException:
            reader.close()
            raise
        self._reader = reader
        return file

    def head(self, nbytes: int) -> bytes:
        """The first ``nbytes`` bytes of the file (fewer when it is shorter)."""
        try:
            return bytes(self.fs.cat_file(self.path, start=0, end=nbytes))
        except FileNotFoundError:
            return b""
        except Exception as err:
            raise _transport(err, self.url) from None

    def close(self) -> None:
        """Close the file object (after the ``h5py.File`` on it)."""
        reader, self._reader = self._reader, None
        if reader is not None:
            try:
                reader.close()
            except Exception:
                pass

    # -- ranged reads -------------------------------------------------------
    def fetch_batches(
        self, ranges: Sequence[tuple[int, int]]
    ) -> Iterator[list[tuple[int, memoryview]]]:
        """The bytes of each ``(start, end)`` range of the file as ``(its index in ranges,
        bytes)``, a batch at a time.

        Ranges are taken in file order; neighbours less than :data:`MAX_GAP`
        apart are fetched in one request of up to :data:`MAX_REQUEST` (a range
        larger than that is a request of its own), and the requests of a batch
        (up to :data:`FETCH_BATCH_BYTES` in all, or one request) are in flight
        at once.  Each batch is fetched only when the previous one has been
        used, so at most one batch is held.
        """
        order = sorted(range(len(ranges)), key=lambda i: ranges[i][0])
        requests = _merge([ranges[i] for i in order])
        batch: list[tuple[int, int, list[int]]] = []
        held = 0
        for start, end, members in requests:
            if batch and held + (end - start) > FETCH_BATCH_BYTES:
                yield self._fetch(batch, ranges, order)
                batch, held = [], 0
            batch.append((start, end, members))
            held += end - start
        if batch:
            yield self._fetch(batch, ranges, order)

    def _fetch(
        self,
        batch: list[tuple[int, int, list[int]]],
        ranges: Sequence[tuple[int, int]],
        order: list[int],
    ) -> list[tuple[int, memoryview]]:
        starts = [s for s, _, _ in batch]
        ends = [e for _, e, _ in batch]
        if self.fs.async_impl and len(batch) > 1:
            found = self.fs.cat_ranges([self.path] * len(batch), starts, ends, on_error="return")
        else:
            found = []
            for start, end in zip(starts, ends):
                try:
                    found.append(self.fs.cat_file(self.path, start=start, end=end))
                except Exception as err:  # sorted out below, as cat_ranges' answers are
                    found.append(err)
        out = []
        for (start, end, members), blob in zip(batch, found):
            if isinstance(blob, FileNotFoundError):
                raise NotFoundError(
                    f"{self.locator.full_url}: the file is no longer at {self.url} (it was "
                    "deleted or moved while open)",
                    url=self.locator.full_url,
                )
            if isinstance(blob, BaseException):
                raise _transport(blob, self.url)
            if len(blob) != end - start:
                raise corrupt(
                    self.locator,
                    f"the file ends before byte {end} that its metadata points at (it is "
                    f"{start + len(blob)} bytes or shorter; was it replaced while open?)",
                )
            view = memoryview(blob)
            for slot in members:
                index = order[slot]
                a, b = ranges[index]
                out.append((index, view[a - start : b - start]))
        return out


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int, list[int]]]:
    """``(start, end, members)`` requests covering ``ranges`` (sorted by start): neighbours
    less than :data:`MAX_GAP` apart joined while the request stays within :data:`MAX_REQUEST`.

    Examples
    --------
    >>> _merge([(0, 10), (10, 20), (2**30, 2**30 + 5)])
    [(0, 20, [0, 1]), (1073741824, 1073741829, [2])]
    """
    requests: list[tuple[int, int, list[int]]] = []
    for i, (start, end) in enumerate(ranges):
        if requests:
            first, last, members = requests[-1]
            if start - last <= MAX_GAP and max(end, last) - first <= MAX_REQUEST:
                requests[-1] = (first, max(end, last), [*members, i])
                continue
        requests.append((start, end, [i]))
    return requests


# ----------------------------------------------------------------------
# Contiguous datasets
# ----------------------------------------------------------------------
def _row_bytes(shape: Sequence[int], itemsize: int, axis: int) -> int:
    """Bytes of one index along ``axis`` with every later axis whole."""
    return math.prod(shape[axis + 1 :]) * itemsize


def _run_axis(shape: Sequence[int], itemsize: int, region: Sequence[slice]) -> int:
    """The axis whose index ranges the runs of ``region`` are fetched in.

    Exact runs start at the outermost axis after which the region is whole;
    they go deeper while one index there is larger than a request, and back
    out (fetching whole rows, gaps included) while they are too many.
    """
    ndim = len(shape)
    axis = ndim - 1
    while axis > 0 and region[axis].start == 0 and region[axis].stop == shape[axis]:
        axis -= 1
    while axis < ndim - 1 and _row_bytes(shape, itemsize, axis) > MAX_REQUEST:
        axis += 1
    while (
        axis > 0
        and math.prod(s.stop - s.start for s in region[:axis]) > MAX_RUNS
        and _row_bytes(shape, itemsize, axis - 1) <= MAX_REQUEST
    ):
        axis -= 1
    return axis


def _blocks(
    shape: Sequence[int], itemsize: int, region: Sequence[slice], axis: int
) -> Iterator[tuple[tuple[int, ...], int, int]]:
    """``(outer index, first, stop)`` of each block: indices ``first:stop`` along ``axis``
    under one index of the axes before it, at most :data:`MAX_REQUEST` bytes of whole rows."""
    per_block = max(1, MAX_REQUEST // max(1, _row_bytes(shape, itemsize, axis)))
    outer = [range(s.start, s.stop) for s in region[:axis]]
    along = region[axis]
    for index in np.ndindex(*(len(r) for r in outer)):
        lead = tuple(r[i] for r, i in zip(outer, index))
        for first in range(along.start, along.stop, per_block):
            yield lead, first, min(first + per_block, along.stop)


def contiguous_overhead(shape: Sequence[int], full: Sequence[int], itemsize: int) -> int:
    """Bytes :func:`read_contiguous` holds for a region of ``shape`` of a dataset of shape
    ``full``: one batch, and never more than the region's rows of the outermost axis (every
    byte fetched lies in them)."""
    if not shape:
        return 0
    return min(FETCH_BATCH_BYTES, max(shape[0], 0) * _row_bytes(full, itemsize, 0))


def read_contiguous(
    remote: RemoteFile,
    offset: int,
    shape: tuple[int, ...],
    dtype: np.dtype,
    region: tuple[slice, ...],
    out: np.ndarray,
) -> None:
    """Fill ``out`` with ``region`` of the unfiltered C-ordered dataset of ``shape`` stored
    at byte ``offset`` of the file: its runs fetched with ranged requests and copied in.

    Examples
    --------
    >>> import fsspec
    >>> fs = fsspec.filesystem("memory")
    >>> data = np.arange(24, dtype="<i2").reshape(2, 3, 4)
    >>> fs.pipe_file("/doc-contiguous.bin", b"head" + data.tobytes())
    >>> remote = RemoteFile(Locator.make("hdf5", "memory:///doc-contiguous.bin", "/x"))
    >>> out = np.zeros((2, 2, 2), "<i2")
    >>> region = (slice(0, 2), slice(1, 3), slice(2, 4))
    >>> read_contiguous(remote, 4, data.shape, data.dtype, region, out)
    >>> bool((out == data[region]).all())
    True
    """
    if any(s.stop <= s.start for s in region):
        return
    itemsize = dtype.itemsize
    axis = _run_axis(shape, itemsize, region)
    strides = [_row_bytes(shape, itemsize, i) for i in range(len(shape))]
    blocks = list(_blocks(shape, itemsize, region, axis))
    ranges = []
    for lead, first, stop in blocks:
        start = offset + sum(i * s for i, s in zip(lead, strides)) + first * strides[axis]
        ranges.append((start, start + (stop - first) * strides[axis]))
    inner = region[axis + 1 :]
    for batch in remote.fetch_batches(ranges):
        for index, data in batch:
            lead, first, stop = blocks[index]
            rows = np.frombuffer(data, dtype).reshape((stop - first, *shape[axis + 1 :]))
            where = tuple(i - r.start for i, r in zip(lead, region))
            along = slice(first - region[axis].start, stop - region[axis].start)
            trailing = tuple(slice(r.start, r.stop) for r in inner)
            out[(*where, along)] = rows[(slice(None), *trailing)]
