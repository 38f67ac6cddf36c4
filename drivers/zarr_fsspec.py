"""The fsspec driver: Zarr v2 and v3 arrays on any fsspec filesystem, written with fsspec directly.

URL forms
---------
``path/to/data.zarr`` (or ``file:///abs/data.zarr``, ``.../data.zarr/zarr.json``)
    A Zarr v3 array in a local directory.
``path/to/data.zarr#/group/x``
    The array ``group/x`` inside the Zarr hierarchy ``data.zarr``; parent
    groups get a group ``zarr.json`` when the array is created.
``memory://name.zarr``, ``s3://bucket/data.zarr`` ...
    Any fsspec URL; credentials and endpoints go in ``storage_options``.
``zip://data.zarr::path/to/archive.zip``
    Read-only access to a Zarr hierarchy stored in a zip archive.

Chunks (or shards) are written under the array's final prefix (or, when
overwriting, under a hidden sibling prefix) and the metadata (``zarr.json``,
or ``.zarray`` after ``.zattrs``) is written last, at commit, so a
half-written array never opens.  Every chunk read is one request (a
byte-range read, so S3 needs no ``HEAD`` first), many in flight at once
through fsspec's ``cat_ranges``.  See ``docs/drivers/fsspec.md``.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import math
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import EllipsisType
from typing import Any

import fsspec
import numpy as np
from fsspec.archive import AbstractArchiveFileSystem
from fsspec.implementations.local import LocalFileSystem

from oocarr.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    InvalidStoreError,
    OocarrError,
    ReadOnlyError,
    UnsupportedCompressionError,
    UnsupportedDtypeError,
)
from oocarr.store import (
    BFLOAT16,
    DEFAULT_CHUNK_BYTES,
    BlockedArray,
    Compression,
    Locator,
    check_within,
    follow_external_option,
    follows_external,
    grow_block,
    is_local,
    normalize_container,
    require_exists,
    storage_error,
)
from oocarr_drivers import zarr_v2
from oocarr_drivers.chunk_runs import read_chunk_region, read_chunk_slabs
from oocarr_drivers.claims import ZARR_SUFFIXES, zarr_can_open
from oocarr_drivers.decode_buffers import CallBuffers, same_memory
from oocarr_drivers.fsspec_urls import url_filesystem
from oocarr_drivers.zarr_codecs import LEVEL_RANGES, WRITABLE, CodecPipeline, chunk_error
from oocarr_drivers.zarr_meta import (
    DATA_TYPES,
    ArrayMeta,
    KeyEncoding,
    array_document,
    group_document,
    parse_array,
    parse_dimension_names,
    parse_document,
    read_document,
    zarr_type_name,
)
from oocarr_drivers.zarr_shards import EMPTY, ShardLayout, coalesce

__all__ = ["PendingChunks", "ZarrArray"]

META_KEY = "zarr.json"
#: Metadata documents of either format that make a prefix an array.
ARRAY_KEYS = (META_KEY, zarr_v2.ARRAY_KEY)
#: Options ``create`` takes for the layout of a new array (not kept in its locator).
CREATE_OPTIONS = ("zarr_format", "shards")
#: Members named in the error for a group opened as an array.
MAX_LISTED = 8
#: Largest shard oocarr picks for ``shards="auto"``.
DEFAULT_SHARD_BYTES = 32 * 2**20
#: Bytes of shard indices kept per open array (the index of a shard is read once).
INDEX_CACHE_BYTES = 4 * 2**20
#: Decoded bytes of the chunks fetched (or written) in one batch of requests.
BATCH_BYTES = 64 * 2**20
#: Most chunk requests in one batch.
BATCH_KEYS = 1024
#: Uncompressed local chunks at least this large are read by several threads at once.
LOCAL_PARALLEL_BYTES = 256 * 2**10
#: Bytes of each reused per-thread buffer that chunks are decoded (or uncompressed chunk
#: slabs read) into: each codec thread keeps two, also after a read.
SCRATCH_BYTES = 4 * 2**20
_THREAD_BUFFERS = threading.local()
#: Decoded bytes of chunks one codec task handles.
TASK_BYTES = 2 * 2**20
#: Threads that encode and decode compressed chunks.
CODEC_THREADS = min(8, os.cpu_count() or 1)
_POOL: ThreadPoolExecutor | None = None
_POOL_PID: int | None = None
_POOL_LOCK = threading.Lock()


# ----------------------------------------------------------------------
# Paths and filesystem helpers
# ----------------------------------------------------------------------
def _join(prefix: str, key: str) -> str:
    if not prefix:
        return key
    if not key:
        return prefix
    return prefix.rstrip("/") + "/" + key


def _split(prefix: str) -> tuple[str, str]:
    head, _, tail = prefix.rstrip("/").rpartition("/")
    return head, tail


def _hidden_sibling(prefix: str, locator: Locator) -> str:
    head, tail = _split(prefix)
    if not tail or (not head and "/" not in prefix):
        raise InvalidArgumentError(
            f"cannot replace {locator.full_url} atomically: it is at the root of its "
            "filesystem or bucket; delete it first or create it one level down",
            url=locator.full_url,
        )
    return f"{head}/.{tail}.tmp-{os.getpid()}-{os.urandom(4).hex()}"


def _filesystem(locator: Locator) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem of ``locator`` and the array's root prefix in it."""
    options = locator.options
    if is_local(locator.url):
        options.setdefault("auto_mkdir", True)
    fs, base = url_filesystem(locator, options)
    return fs, base


def _read_only_fs(fs: fsspec.AbstractFileSystem) -> bool:
    return isinstance(fs, AbstractArchiveFileSystem)


def _rm(fs: fsspec.AbstractFileSystem, path: str) -> None:
    try:
        fs.rm(path, recursive=True)
    except FileNotFoundError:
        pass


def _write_json(fs: fsspec.AbstractFileSystem, key: str, doc: dict[str, Any]) -> None:
    """Write ``doc`` at ``key``; on a local disk through a temporary file and a rename."""
    data = json.dumps(doc, indent=2).encode("utf-8")
    if not isinstance(fs, LocalFileSystem):
        fs.pipe_file(key, data)
        return
    head, tail = _split(key)
    tmp = f"{head}/.{tail}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        fs.pipe_file(tmp, data)
        fs.mv(tmp, key)
    except BaseException:
        _rm(fs, tmp)
        raise


class _NotAChunk(Exception):
    """A chunk key names a directory (or runs through a file): the store is damaged."""

    def __init__(self, key: str, err: OSError) -> None:
        super().__init__(key, err)
        self.key, self.err = key, err


def _fetch_ranges(
    fs: fsspec.AbstractFileSystem, requests: Sequence[tuple[str, int, int | None]], url: str
) -> list[bytes | None]:
    """The bytes of each ``(key, start, end)`` range (``None`` where there is no object).

    Each range is one request: a ranged ``GET`` on object stores (an open-ended
    ``bytes=0-`` for a whole chunk, so s3fs asks for no size first; a suffix
    ``bytes=-n`` for a shard index at the end), all in flight at once through
    ``cat_ranges`` on asynchronous filesystems; a missing chunk is told by the
    same request's not-found answer.
    """
    if not requests:
        return []
    keys = [k for k, _, _ in requests]
    starts = [a for _, a, _ in requests]
    ends = [b for _, _, b in requests]
    if fs.async_impl and len(requests) > 1:
        found = fs.cat_ranges(keys, starts, ends, on_error="return")
    else:
        found = []
        for key, start, end in requests:
            try:
                found.append(fs.cat_file(key, start=start, end=end))
            except Exception as err:  # sorted out below, as cat_ranges' answers are
                found.append(err)
    out: list[bytes | None] = []
    for key, value in zip(keys, found):
        if isinstance(value, FileNotFoundError):
            out.append(None)
        elif isinstance(value, (IsADirectoryError, NotADirectoryError)):
            raise _NotAChunk(key, value)
        elif isinstance(value, BaseException):
            if isinstance(value, OSError):
                value.add_note(f"while reading chunk {key!r} of {url}")
            raise value
        else:
            out.append(value)
    return out


def _fetch(fs: fsspec.AbstractFileSystem, keys: list[str], url: str) -> dict[str, bytes | None]:
    """The stored bytes of each key (``None`` when absent), one request each."""
    found = _fetch_ranges(fs, [(key, 0, None) for key in keys], url)
    return dict(zip(keys, found))


def _read_file_into(path: str, buffer: np.ndarray) -> bool:
    """Fill ``buffer`` with the bytes of the file at ``path``; False when there is no file.

    Raises
    ------
    ValueError
        When the file does not hold exactly ``buffer.nbytes`` bytes.
    """
    # numpy's stubs give ndarray the buffer protocol's __buffer__ from Python 3.12 on only
    view = memoryview(buffer.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
    try:
        with open(path, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            if size != len(view):
                raise ValueError(f"the chunk file has {size} bytes, expected {len(view)}")
            done = 0
            while done < len(view):
                got = f.readinto(view[done:])
                if not got:
                    raise ValueError(f"the chunk file ended after {done} of {len(view)} bytes")
                done += got
    except FileNotFoundError:
        return False
    return True


def _store(fs: fsspec.AbstractFileSystem, blobs: dict[str, bytes]) -> None:
    if len(blobs) > 1 and fs.async_impl:
        fs.pipe(blobs)
    else:
        for key, data in blobs.items():
            try:
                fs.pipe_file(key, data)
            except (IsADirectoryError, NotADirectoryError) as err:
                raise _NotAChunk(key, err) from None


def _probe(fs: fsspec.AbstractFileSystem, prefix: str, locator: Locator) -> tuple[str, str]:
    """What is at ``prefix``: ``array``, ``group``, ``other`` (a broken or v2 array),
    ``leftover`` (chunks of an unfinished create), ``empty`` or ``foreign``; plus a description.
    """
    raw = read_document(fs, _join(prefix, META_KEY), locator)
    if raw is not None:
        try:
            doc = parse_document(raw, locator)
        except InvalidStoreError:
            return "other", "an unreadable zarr.json"
        return ("group", "a Zarr group") if doc["node_type"] == "group" else ("array", "an array")
    if read_document(fs, _join(prefix, zarr_v2.ARRAY_KEY), locator) is not None:
        return "array", "a Zarr v2 array"
    try:
        entries = fs.ls(prefix, detail=True, refresh=True)
    except (FileNotFoundError, NotADirectoryError):
        return "empty", "nothing"
    names = []
    for entry in entries:
        name = entry["name"].rstrip("/")
        if name == prefix.rstrip("/"):
            return "foreign", "a file"
        names.append(_split(name)[1])
    if ".zgroup" in names:
        return "group", "a Zarr v2 group"
    if not names:
        return "empty", "nothing"
    if all(_LEFTOVER.fullmatch(n) for n in names):
        return "leftover", "chunks of an unfinished create"
    return "foreign", "files that are not a Zarr array (" + ", ".join(sorted(names)[:3]) + ")"


#: A Zarr v2 chunk key (or the first directory of one with ``/`` separators).
_V2_CHUNK = re.compile(r"\d+(\.\d+)*")
#: What an unfinished create leaves: chunk keys, attributes, temporary metadata files.
_LEFTOVER = re.compile(r"c|\d+(\.\d+)*|\.zattrs|\.(zarr\.json|zarray|zattrs)\.tmp-.*")
#: Names an array's own directory holds: metadata, chunk keys (``c``, ``c.0.1``, ``0.1``).
_OWN_NAME = re.compile(r"zarr\.json|\.zarray|\.zattrs|c|c\..*|\d+(\.\d+)*|\..*")


def _check_no_strangers(fs: fsspec.AbstractFileSystem, prefix: str, url: str) -> None:
    """Refuse to replace the array at ``prefix`` while its directory holds anything that is not
    the array's (another array written inside it): replacing it would delete that too."""
    try:
        names = [_split(e.rstrip("/"))[1] for e in fs.ls(prefix, detail=False, refresh=True)]
    except (FileNotFoundError, NotADirectoryError):
        return
    strangers = sorted(n for n in names if not _OWN_NAME.fullmatch(n))
    if strangers:
        raise InvalidArgumentError(
            f"cannot replace {url}: its directory also holds {', '.join(strangers[:3])}, which "
            "is not part of the array (an array stored inside it?), and replacing the array "
            "would delete it; move it out first",
            url=url,
        )


@contextlib.contextmanager
def _storage_failures(action: str, url: str) -> Iterator[None]:
    """Turn the operating system's errors (full disk, read-only filesystem) into oocarr's."""
    try:
        yield
    except OSError as err:
        if isinstance(err, OocarrError):
            raise
        raise storage_error(action, url, err) from err


def _codec_pool() -> ThreadPoolExecutor:
    """Threads that compress and decompress chunks (zlib and zstd release the GIL)."""
    global _POOL, _POOL_PID
    with _POOL_LOCK:
        if _POOL is None or os.getpid() != _POOL_PID:
            _POOL = ThreadPoolExecutor(CODEC_THREADS, thread_name_prefix="oocarr-zarr-codec")
            _POOL_PID = os.getpid()
        return _POOL


# ----------------------------------------------------------------------
# Metadata of either format, and the layout of new arrays
# ----------------------------------------------------------------------
def _read_meta(fs: fsspec.AbstractFileSystem, prefix: str, locator: Locator) -> ArrayMeta:
    """The array at ``prefix``: its ``zarr.json``, else its ``.zarray`` and ``.zattrs``."""
    node = _node(fs, prefix, locator)
    if node is None:
        require_exists(False, locator, "Zarr array (zarr.json or .zarray)")
    kind, doc, attrs = node
    if kind in ("group", "v2-group"):
        raise _group_error(fs, prefix, locator)
    if kind == "v2-array":
        return zarr_v2.parse_array(doc, attrs, locator)
    return parse_array(doc, locator)


def _group_error(fs: fsspec.AbstractFileSystem, prefix: str, locator: Locator) -> InvalidStoreError:
    """The error for opening a group as an array, naming the arrays inside it (a sparse
    AnnData matrix is a group of ``data``, ``indices`` and ``indptr``)."""
    members = [
        _split(child)[1]
        for child in _child_prefixes(fs, prefix)[:MAX_LISTED]
        if any(read_document(fs, _join(child, key), locator) for key in ARRAY_KEYS)
    ]
    inside = f" (arrays here: {', '.join(members)})" if members else ""
    base = locator.full_url.rstrip("/")
    example = f"{base}/{members[0]}" if "#" in base else f"{base}#/{members[0]}" if members else ""
    hint = f", e.g. {example}" if example else ""
    return InvalidStoreError(
        f"{locator.full_url} is a Zarr group, not an array{inside}; address an array inside "
        f"it with URL#/name{hint}",
        url=locator.full_url,
    )


def _freeze_shards(value: Any) -> Any:
    return list(value) if isinstance(value, (tuple, list)) else value


def _check_layout_options(layout: dict[str, Any], url: str) -> None:
    """Refuse a ``zarr_format`` other than 2 or 3, and ``shards`` that are not a shape,
    ``"auto"`` or ``None`` (or given for a v2 array, which has no sharding)."""
    zarr_format = layout.get("zarr_format", 3)
    if zarr_format not in (2, 3) or isinstance(zarr_format, bool):
        raise InvalidArgumentError(f"zarr_format={zarr_format!r} for {url} must be 2 or 3", url=url)
    shards = layout.get("shards")
    if shards is None:
        return
    if zarr_format == 2:
        raise InvalidArgumentError(
            f"Zarr v2 has no sharding, so {url} cannot take shards={shards!r}; drop shards= "
            "or write Zarr v3 (zarr_format=3)",
            url=url,
        )
    if shards == "auto":
        return
    if not isinstance(shards, (list, tuple)) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in shards
    ):
        raise InvalidArgumentError(
            f"shards={shards!r} for {url} must be a shape of positive integers (a multiple of "
            "the chunks on every axis), 'auto' or None",
            url=url,
        )


def _largest_divisor(n: int, most: int) -> int:
    return next(d for d in range(max(1, min(n, most)), 0, -1) if n % d == 0)


def _layout(
    shape: tuple[int, ...], dtype: np.dtype, chunks: Any, shards: Any, url: str
) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """The chunk shape (inner chunks when sharded) and the shard shape of a new array."""
    if shards is None:
        if chunks is None:
            chunks = ZarrArray.default_chunks(shape, dtype)
        return tuple(chunks), None
    if shards == "auto":
        if chunks is None:
            chunks = ZarrArray.default_chunks(shape, dtype)
        chunks = tuple(chunks)
        grown = grow_block(shape, dtype.itemsize, DEFAULT_SHARD_BYTES, base=chunks)
        return chunks, tuple(-(-g // c) * c for g, c in zip(grown, chunks))
    shards = tuple(shards)
    if len(shards) != len(shape):
        raise InvalidArgumentError(
            f"shards {list(shards)} for {url} do not match the array's {len(shape)} axes",
            url=url,
        )
    if chunks is None:
        first = grow_block(shards, dtype.itemsize, DEFAULT_CHUNK_BYTES)
        chunks = tuple(_largest_divisor(s, c) for s, c in zip(shards, first))
    chunks = tuple(chunks)
    if any(s % c for s, c in zip(shards, chunks)):
        raise InvalidArgumentError(
            f"shards {list(shards)} for {url} are not a multiple of the chunks {list(chunks)} "
            "on every axis; pick shards made of whole chunks",
            url=url,
        )
    return chunks, shards


def _scratch(name: str) -> np.ndarray:
    """This thread's reused buffer ``name`` of :data:`SCRATCH_BYTES`."""
    buffer = getattr(_THREAD_BUFFERS, name, None)
    if buffer is None:
        buffer = np.empty(SCRATCH_BYTES, np.uint8)
        setattr(_THREAD_BUFFERS, name, buffer)
    return buffer


class _DecodeBuffers(CallBuffers):
    """The buffers compressed chunks of one read call decode into, one per codec thread:
    this thread's reused :data:`SCRATCH_BYTES` buffer for chunks that fit it, otherwise one
    of the chunk's size for the call (``read_overhead`` counts one per codec thread)."""

    def get(self, which: int = 0) -> np.ndarray:
        if self.nbytes <= SCRATCH_BYTES:
            return _scratch("decode")
        return super().get(which)


def _chunk_ranges(region: tuple[slice, ...], chunks: tuple[int, ...]) -> list[range]:
    return [range(r.start // c, (r.stop - 1) // c + 1) for r, c in zip(region, chunks)]


def _batches(indices: Iterator[tuple[int, ...]], chunk_nbytes: int) -> Iterator[list]:
    size = max(1, min(BATCH_KEYS, BATCH_BYTES // max(1, chunk_nbytes)))
    while batch := list(itertools.islice(indices, size)):
        yield batch


class PendingChunks:
    """Where a pending Zarr array's chunks go, for writers in other processes: the locator,
    the metadata the creator chose, and the (maybe hidden) prefix the chunks are written
    under until the creator commits."""

    def __init__(
        self, locator: Locator, meta: ArrayMeta, base: str, prefix: str, data_prefix: str
    ) -> None:
        self.locator = locator
        self.meta = meta
        self.base = base
        self.prefix = prefix
        self.data_prefix = data_prefix

    def __repr__(self) -> str:
        return f"PendingChunks({self.locator.full_url!r})"

    def open(self) -> ZarrArray:
        """A writable array whose chunk writes land in the pending data (closing it commits
        nothing: the creator does)."""
        return ZarrArray(
            self.locator,
            self.meta,
            mode="r+",
            base=self.base,
            prefix=self.prefix,
            data_prefix=self.data_prefix,
        )


class ZarrArray(BlockedArray):
    """A Zarr v2 or v3 array on any fsspec filesystem.

    Reads regular-grid arrays of either format with any codec numcodecs
    registers (Blosc, Zstd, GZip, Zlib, BZ2, LZ4, CRC32C, the v2 filters),
    either byte order, C or F order, and sharded v3 arrays
    (``sharding_indexed``); writes v3 (default) or v2 (``zarr_format=2``),
    sharded (``shards=``) or not, with ``gzip``, ``zstd``, ``blosc``,
    ``lz4``, ``zlib`` or ``bz2``, readable by zarr-python and TensorStore.

    Examples
    --------
    >>> import numpy as np, tempfile, os, oocarr
    >>> path = os.path.join(tempfile.mkdtemp(), "x.zarr")
    >>> with oocarr.create(path, (4, 3), "int16", chunks=(2, 2), compression="zstd") as x:
    ...     x.store[:] = np.arange(12).reshape(4, 3)
    >>> store = oocarr.open(path).store
    >>> store.name, store.chunks, store.compression, store[1]
    ('fsspec', (2, 2), 'zstd:3', array([3, 4, 5], dtype=int16))
    """

    _chunks: tuple[int, ...]  # a Zarr array is always chunked (BlockedArray's may be None)

    name = "fsspec"
    suffixes = ZARR_SUFFIXES
    compressions = WRITABLE
    supports_out_buffer = True
    supports_partial_chunk_writes = False

    def __init__(
        self,
        locator: Locator,
        meta: ArrayMeta,
        *,
        mode: str,
        base: str,
        prefix: str,
        data_prefix: str,
        fs: fsspec.AbstractFileSystem | None = None,
        pending: bool = False,
    ) -> None:
        super().__init__(locator, meta.shape, meta.dtype, meta.chunks, mode=mode, pending=pending)
        self._meta = meta
        self._base = base
        self._prefix = prefix
        self._data_prefix = data_prefix
        self._fs_lock = threading.Lock()
        self._chunk_lock = threading.Lock()
        self._fs_obj = fs
        self._fs_pid = os.getpid() if fs is not None else None
        self._new_dirs: list[str] = []
        self._follow = follows_external(locator)
        # Local directories checked to lie inside the container (chunk writes never leave it).
        self._inside: set[str] = set()
        self._index_cache: OrderedDict[tuple[int, ...], np.ndarray | None] = OrderedDict()
        self._index_lock = threading.Lock()

    # -- locating ------------------------------------------------------
    @classmethod
    def can_open(cls, container: str, inner: str, storage_options: Mapping[str, Any]) -> bool:
        return zarr_can_open(container, inner, storage_options)

    @classmethod
    def locate(
        cls,
        container: str,
        inner: str,
        storage_options: Mapping[str, Any] | None = None,
        driver_options: Mapping[str, Any] | None = None,
    ) -> Locator:
        driver_options = dict(driver_options or {})
        layout = {k: driver_options.pop(k) for k in CREATE_OPTIONS if k in driver_options}
        kept = follow_external_option(driver_options, container)
        if driver_options:
            raise InvalidArgumentError(
                f"the fsspec driver takes no driver options but follow_external, zarr_format "
                f"and shards (got {sorted(driver_options)}) for {container}; pass fsspec "
                "settings as storage_options=",
                url=container,
            )
        _check_layout_options(layout, container)
        kept.update({k: _freeze_shards(v) for k, v in layout.items() if v is not None})
        segments = container.split("::")
        for i, segment in enumerate(segments):
            stripped = segment.rstrip("/")
            if stripped == META_KEY:
                segments[i] = "."
            elif stripped.endswith("/" + META_KEY):
                segments[i] = stripped[: -len(META_KEY) - 1] or "/"
        if len(segments) > 1 and is_local(segments[-1]):
            segments[-1] = normalize_container(segments[-1])
        container = normalize_container("::".join(segments))
        if not is_local(container) and "::" not in container:
            container = re.sub(r"(?<=[^:/])/+$", "", container)
        return Locator.make(cls.name, container, inner, storage_options, kept)

    @classmethod
    def supports_dtype(cls, dtype: np.dtype) -> bool:
        return zarr_type_name(dtype) is not None

    @classmethod
    def default_chunks(cls, shape: tuple[int, ...], dtype: np.dtype) -> tuple[int, ...]:
        if not shape:
            return ()
        return grow_block(shape, dtype.itemsize, DEFAULT_CHUNK_BYTES)

    # -- opening and creating -----------------------------------------
    @staticmethod
    def _prefix_of(locator: Locator, base: str) -> str:
        return _join(base, locator.path.strip("/"))

    @classmethod
    def _open(cls, locator: Locator, mode: str) -> ZarrArray:
        fs, base = _filesystem(locator)
        prefix = cls._prefix_of(locator, base)
        if mode == "r+" and _read_only_fs(fs):
            raise ReadOnlyError(
                f"{locator.full_url} is inside an archive, which fsspec reads only; open it "
                "with mode='r' or copy it to a directory to write",
                url=locator.full_url,
            )
        meta = _read_meta(fs, prefix, locator)
        return cls(locator, meta, mode=mode, base=base, prefix=prefix, data_prefix=prefix, fs=fs)

    @classmethod
    def _check_levels(cls, compression: Compression | None, url: str) -> None:
        if compression is None or compression.level is None:
            return
        low, high = LEVEL_RANGES[compression.name]
        if not low <= compression.level <= high:
            raise UnsupportedCompressionError(
                f"{compression.name} level {compression.level} for {url} is outside {low}..{high}",
                url=url,
            )

    @classmethod
    def _check_parents(
        cls, fs: fsspec.AbstractFileSystem, base: str, locator: Locator
    ) -> list[str]:
        """The group prefixes above the array; raise when one of them is an array."""
        if not locator.path:
            return []
        parts = [p for p in locator.path.split("/") if p][:-1]
        parents = [_join(base, "/".join(parts[:i])) for i in range(len(parts) + 1)]
        for parent in parents:
            try:
                node = _node(fs, parent, locator)
            except InvalidStoreError as err:
                raise InvalidStoreError(
                    f"cannot create {locator.full_url}: the parent {parent} holds metadata "
                    f"that is not valid Zarr ({err}); fix or remove it",
                    url=locator.full_url,
                ) from None
            if node is not None and node[0] in ("array", "v2-array"):
                raise InvalidArgumentError(
                    f"cannot create {locator.full_url}: {parent} is a Zarr array, and only "
                    "groups hold members; pick another path",
                    url=locator.full_url,
                )
        return parents

    @classmethod
    def _create(
        cls,
        locator: Locator,
        shape: tuple[int, ...],
        dtype: np.dtype,
        chunks: tuple[int, ...] | None,
        compression: Compression | None,
        attrs: dict[str, Any],
        overwrite: bool,
    ) -> ZarrArray:
        url = locator.full_url
        fs, base = _filesystem(locator)
        if _read_only_fs(fs):
            raise ReadOnlyError(
                f"cannot create {url}: fsspec archives are read-only; write a directory "
                "store and archive it afterwards",
                url=url,
            )
        cls._check_levels(compression, url)
        name = zarr_type_name(dtype)
        if name is None:  # oocarr.create checked supports_dtype first
            raise UnsupportedDtypeError(f"Zarr has no data type for {dtype} ({url})", url=url)
        dtype = DATA_TYPES[name]
        options = locator.driver_kwargs
        zarr_format = options.pop("zarr_format", 3)
        shards = options.pop("shards", None)
        if zarr_format == 2 and dtype == BFLOAT16:
            raise UnsupportedDtypeError(
                f"Zarr v2 has no bfloat16 type, so {url} cannot hold one; store it as Zarr v3 "
                "(the default) or cast it to float32",
                url=url,
            )
        chunks, shard_shape = _layout(shape, dtype, chunks, shards, url)
        locator = Locator.make(cls.name, locator.url, locator.path, locator.options, options)
        prefix = cls._prefix_of(locator, base)
        cls._check_parents(fs, base, locator)
        state, what = _probe(fs, prefix, locator)
        if state in ("group", "foreign"):
            raise AlreadyExistsError(
                f"cannot create an array at {url}: it holds {what}; pick another path "
                "(a group's members are addressed as URL#/name)",
                url=url,
            )
        if state in ("array", "other"):
            if not overwrite:
                raise AlreadyExistsError(
                    f"{url} already holds {what}; pass overwrite=True to replace it", url=url
                )
            _check_no_strangers(fs, prefix, url)
            data_prefix = _hidden_sibling(prefix, locator)
        else:
            if state == "leftover":
                for entry in fs.ls(prefix, detail=False):
                    if _LEFTOVER.fullmatch(_split(entry.rstrip("/"))[1]):
                        _rm(fs, entry)
            data_prefix = prefix
        codecs = CodecPipeline.for_writing(dtype, compression, zarr_format)
        meta = ArrayMeta(
            shape=shape,
            dtype=dtype,
            chunks=chunks,
            fill_value=dtype.type(0),
            key_encoding=KeyEncoding("v2", ".") if zarr_format == 2 else KeyEncoding(),
            codecs=codecs,
            attrs=dict(attrs),
            zarr_format=zarr_format,
            shards=(
                None
                if shard_shape is None
                else ShardLayout.for_writing(shard_shape, chunks, codecs, locator)
            ),
        )
        store = cls(
            locator,
            meta,
            mode="r+",
            base=base,
            prefix=prefix,
            data_prefix=data_prefix,
            fs=fs,
            pending=True,
        )
        if isinstance(fs, LocalFileSystem):
            store._new_dirs = cls._missing_dirs(fs, data_prefix, base)
        return store

    @staticmethod
    def _missing_dirs(fs: fsspec.AbstractFileSystem, prefix: str, base: str) -> list[str]:
        """Directories from ``prefix`` up to ``base`` that do not exist yet (deepest first)."""
        out = []
        path = prefix
        while path and not fs.exists(path):
            out.append(path)
            if path.rstrip("/") == base.rstrip("/"):
                break
            path = _split(path)[0]
        return out

    @classmethod
    def exists(cls, locator: Locator) -> bool:
        fs, base = _filesystem(locator)
        prefix = cls._prefix_of(locator, base)
        raw = read_document(fs, _join(prefix, META_KEY), locator)
        if raw is None:
            return read_document(fs, _join(prefix, zarr_v2.ARRAY_KEY), locator) is not None
        try:
            return parse_document(raw, locator).get("node_type") == "array"
        except InvalidStoreError:
            return False

    @classmethod
    def delete(cls, locator: Locator) -> None:
        with _storage_failures("deleting", locator.full_url):
            cls._delete(locator)

    @classmethod
    def _delete(cls, locator: Locator) -> None:
        fs, base = _filesystem(locator)
        prefix = cls._prefix_of(locator, base)
        state, what = _probe(fs, prefix, locator)
        if state == "group":
            raise InvalidArgumentError(
                f"{locator.full_url} is {what}, not an array; oocarr deletes arrays only",
                url=locator.full_url,
            )
        if state in ("array", "other"):
            for key in ARRAY_KEYS:
                _rm(fs, _join(prefix, key))
            _rm(fs, prefix)
        elif state == "leftover":
            _rm(fs, prefix)

    # -- handles --------------------------------------------------------
    def _fs(self) -> fsspec.AbstractFileSystem:
        """The filesystem for this process (fsspec re-creates instances after a fork)."""
        with self._fs_lock:
            if self._fs_obj is None or self._fs_pid != os.getpid():
                self._fs_obj = _filesystem(self._locator)[0]
                self._fs_pid = os.getpid()
            return self._fs_obj

    def _release(self) -> None:
        with self._fs_lock:
            self._fs_obj = None
            self._fs_pid = None

    # -- chunk I/O ------------------------------------------------------
    def _key(self, index: tuple[int, ...]) -> str:
        return _join(self._data_prefix, self._meta.key_encoding.key(index))

    def _guard(self, fs: fsspec.AbstractFileSystem, keys: list[str], *, writing: bool) -> None:
        """Refuse chunk keys of a local array that lead out of its container through a symbolic
        link: always for writes, for reads with ``follow_external=False``."""
        if not isinstance(fs, LocalFileSystem) or not (writing or not self._follow):
            return
        own = self._data_prefix != self._prefix  # a fresh hidden directory of this store
        root = fs._strip_protocol(self._data_prefix if own else self._base)
        for key in keys:
            path = fs._strip_protocol(key)
            parent = os.path.dirname(path)
            if parent not in self._inside:
                check_within(parent, root, self.url, writing=writing)
                self._inside.add(parent)
            if os.path.islink(path):
                check_within(path, root, self.url, writing=writing)

    def _overlap(
        self,
        index: tuple[int, ...],
        region: tuple[slice, ...],
        chunks: tuple[int, ...] | None = None,
    ) -> tuple[tuple[slice, ...], tuple[slice, ...], bool]:
        """Slices of chunk ``index`` (of ``chunks``, this array's by default) and of the
        region where they meet, and whether the region covers the chunk's part of the array
        entirely."""
        in_chunk, in_region, whole = [], [], True
        for i, c, r, n in zip(index, chunks or self._chunks, region, self._shape):
            lo, hi = i * c, min((i + 1) * c, n)
            start, stop = max(lo, r.start), min(hi, r.stop)
            in_chunk.append(slice(start - lo, stop - lo))
            in_region.append(slice(start - r.start, stop - r.start))
            whole = whole and start == lo and stop == hi
        return tuple(in_chunk), tuple(in_region), whole

    def _decode(
        self, data: bytes | memoryview, key: str, buffer: np.ndarray | None = None
    ) -> np.ndarray:
        """Chunk ``key`` decoded; into ``buffer`` when given and the codecs can (the result
        is then valid until the buffer's next use)."""
        try:
            return self._meta.codecs.decode(data, self._chunks, buffer)
        except ValueError as err:
            raise chunk_error(self._locator, key, err) from None

    def _indices(self, region: tuple[slice, ...]) -> Iterator[tuple[int, ...]]:
        return itertools.product(*_chunk_ranges(region, self._chunks))

    def _map(self, fn: Callable[[Any], Any], items: list) -> list:
        """``fn`` over ``items``, on the codec thread pool when chunks are compressed, in
        groups of about :data:`TASK_BYTES` of chunks per task: one task per small chunk
        costs more than decoding it (4096 zstd inner chunks of 8 KiB: 0.39 s one per task,
        0.13 s in one thread)."""
        if len(items) <= 1 or not self._meta.codecs.compressors:
            return [fn(item) for item in items]
        per_task = max(1, TASK_BYTES // max(1, self._meta.chunk_nbytes))
        per_task = min(per_task, -(-len(items) // CODEC_THREADS))
        if per_task == 1:
            return list(_codec_pool().map(fn, items))
        groups = [items[i : i + per_task] for i in range(0, len(items), per_task)]
        done = _codec_pool().map(lambda group: [fn(item) for item in group], groups)
        return [result for group in done for result in group]

    def read_overhead(self, shape: Sequence[int]) -> int:
        """Uncompressed local chunks: none (read straight into the caller's buffer), or a
        slab buffer per thread; compressed local chunks: the chunk each codec thread read and
        the one it decodes; otherwise one batch of encoded chunks fetched and one decoded
        chunk per codec thread."""
        if self._meta.codecs.plain and isinstance(self._fs(), LocalFileSystem):
            if all(s <= c for s, c in zip(shape[1:], self._chunks[1:])):
                return 0  # whole chunks land contiguously in such a tile: no buffer
            chunks = math.prod(-(-max(1, s) // max(1, c)) for s, c in zip(shape, self._chunks))
            return min(CODEC_THREADS, chunks) * SCRATCH_BYTES
        chunks = math.prod(-(-max(1, s) // max(1, c)) for s, c in zip(shape, self._chunks))
        nbytes = self._meta.chunk_nbytes
        decoding = min(CODEC_THREADS, chunks) * nbytes
        if self._meta.shards is None and isinstance(self._fs(), LocalFileSystem):
            return 2 * decoding  # each codec thread: the chunk it read, the chunk it decodes
        fetched = min(chunks, max(1, min(BATCH_KEYS, BATCH_BYTES // max(1, nbytes)))) * nbytes
        return fetched + decoding

    def read_threads(self, shape: Sequence[int]) -> int:
        """Compressed chunks decode on the codec threads, one chunk each: a region of fewer
        chunks than threads keeps only that many busy.  Uncompressed local chunks: 0 (the
        read is a copy from the page cache or the disk)."""
        if self._meta.codecs.plain and isinstance(self._fs(), LocalFileSystem):
            return 0
        chunks = math.prod(-(-max(1, s) // max(1, c)) for s, c in zip(shape, self._chunks))
        return min(CODEC_THREADS, chunks)

    def _read(self, region: tuple[slice, ...], out: np.ndarray) -> None:
        try:
            self._read_chunks(region, out)
        except _NotAChunk as err:
            raise chunk_error(self._locator, err.key, err.err) from None

    def _read_chunks(self, region: tuple[slice, ...], out: np.ndarray) -> None:
        fs = self._fs()
        if self._meta.shards is not None:
            self._read_sharded(fs, region, out)
            return
        if isinstance(fs, LocalFileSystem) and self._meta.codecs.plain:
            self._read_local(fs, region, out)
            return

        buffers = _DecodeBuffers(self._meta.chunk_nbytes)
        if isinstance(fs, LocalFileSystem):
            # each codec thread reads its chunk and decodes it, so reading one chunk overlaps
            # decoding another.  1024³ uint16 in 256³ chunks read whole on 2 cores, medians
            # of 3: zstd 5.9 s warm, 6.8 s cold when batches were fetched then decoded;
            # 4.7 s, 5.9 s one chunk a task (Blosc-LZ4 cold: 4.2 s, 3.7 s)
            def fetch_and_fill(index: tuple[int, ...]) -> None:
                key = self._key(index)
                (data,) = _fetch_ranges(fs, [(key, 0, None)], self.url)
                self._place(data, key, index, region, out, buffers)

            indices = list(self._indices(region))
            self._guard(fs, [self._key(index) for index in indices], writing=False)
            self._map(fetch_and_fill, indices)
            return

        def fill(item: tuple[tuple[int, ...], str, bytes | None]) -> None:
            index, key, data = item
            self._place(data, key, index, region, out, buffers)

        for batch in _batches(self._indices(region), self._meta.chunk_nbytes):
            keys = [self._key(index) for index in batch]
            self._guard(fs, keys, writing=False)
            found = _fetch(fs, keys, self.url)
            self._map(fill, [(index, key, found[key]) for index, key in zip(batch, keys)])

    def _read_local(self, fs: LocalFileSystem, region: tuple[slice, ...], out: np.ndarray) -> None:
        """Read uncompressed chunks of a local array, several at a time: a whole chunk that
        lands contiguously in ``out`` with one ``readinto``; otherwise the chunk's rows the
        region needs, in slabs through a reused per-thread buffer of :data:`SCRATCH_BYTES`,
        then copied (rows of more than that: the byte runs of the part, ``pread`` straight
        into ``out``), so a chunk larger than the memory budget streams within it."""
        nbytes = self._meta.chunk_nbytes
        dtype = np.dtype(self._dtype)
        row = math.prod(self._chunks[1:]) * dtype.itemsize
        slabs = len(self._chunks) > 1 and row <= SCRATCH_BYTES

        def fill(index: tuple[int, ...]) -> None:
            key = self._key(index)
            in_chunk, in_out, whole = self._overlap(index, region)
            at: tuple[slice | EllipsisType, ...] = (*in_out, ...)
            target = out[at]  # a view even of a 0-d array
            full = all(s.stop - s.start == c for s, c in zip(in_chunk, self._chunks))
            path = fs._strip_protocol(key)
            try:
                if whole and full and target.flags.c_contiguous:
                    found = _read_file_into(path, target)
                elif slabs:
                    # 64³ uint16 chunks of a 256³ tile as row runs of 128 bytes: 0.95 s for
                    # 32 MiB (4096 preads a chunk); in slabs through a buffer: 0.02 s
                    found = read_chunk_slabs(
                        path, self._chunks, dtype, in_chunk, target, _scratch("slab")
                    )
                else:
                    found = read_chunk_region(path, self._chunks, dtype, in_chunk, target)
                if not found:
                    target[...] = self._meta.fill_value
            except (ValueError, IsADirectoryError, NotADirectoryError) as err:
                raise chunk_error(self._locator, key, err) from None

        indices = list(self._indices(region))
        self._guard(fs, [self._key(index) for index in indices], writing=False)
        if len(indices) > 1 and nbytes >= LOCAL_PARALLEL_BYTES:
            list(_codec_pool().map(fill, indices))
        else:
            for index in indices:
                fill(index)

    def _place(
        self,
        data: bytes | memoryview | None,
        key: str,
        index: tuple[int, ...],
        region: tuple[slice, ...],
        out: np.ndarray,
        buffers: _DecodeBuffers,
    ) -> None:
        """Chunk ``index`` (stored as ``data``; ``None``: missing) put where it meets
        ``region`` in ``out``: decoded straight into ``out`` when it lands there whole and
        contiguous (a tile of whole chunks), otherwise into this thread's decode buffer of
        ``buffers`` and copied.  Decoding a 32 MiB zstd chunk into a fresh buffer and then
        copying it spent half its time faulting in the two (py-spy, 256³ uint16)."""
        in_chunk, in_out, whole = self._overlap(index, region)
        if data is None:
            out[in_out] = self._meta.fill_value
            return
        at: tuple[slice | EllipsisType, ...] = (*in_out, ...)
        target = out[at]  # a view even of a 0-d array
        direct = (
            whole
            and target.shape == self._chunks
            and target.dtype == self._dtype
            and target.flags.c_contiguous
        )
        chunk = self._decode(data, key, target if direct else buffers.get())
        if not (direct and same_memory(chunk, target)):
            target[...] = chunk[in_chunk]

    def _blank_chunk(self) -> np.ndarray:
        return np.full(self._chunks, self._meta.fill_value, dtype=self._dtype)

    def _write(self, region: tuple[slice, ...], value: np.ndarray) -> None:
        try:
            with _storage_failures("writing", self.url):
                self._write_chunks(region, value)
        except _NotAChunk as err:
            raise chunk_error(self._locator, err.key, err.err) from None

    def _write_chunks(self, region: tuple[slice, ...], value: np.ndarray) -> None:
        fs = self._fs()
        if self._meta.shards is not None:
            self._write_sharded(fs, region, value)
            return

        def encode(item: tuple[tuple[slice, ...], tuple[slice, ...]]) -> bytes:
            in_chunk, in_value = item
            part = value[in_value]
            if part.shape != self._chunks:
                chunk = self._blank_chunk()
                chunk[in_chunk] = part
                part = chunk
            return self._meta.codecs.encode(part)

        for batch in _batches(self._indices(region), self._meta.chunk_nbytes):
            whole: list[tuple[tuple[int, ...], tuple[slice, ...], tuple[slice, ...]]] = []
            partial: list[tuple[tuple[int, ...], tuple[slice, ...], tuple[slice, ...]]] = []
            for index in batch:
                in_chunk, in_value, covered = self._overlap(index, region)
                (whole if covered else partial).append((index, in_chunk, in_value))
            if whole:
                keys = [self._key(index) for index, _, _ in whole]
                self._guard(fs, keys, writing=True)
                blobs = self._map(encode, [(c, v) for _, c, v in whole])
                _store(fs, dict(zip(keys, blobs)))
            if partial:
                self._read_modify_write(fs, partial, value)

    def _read_modify_write(
        self, fs: fsspec.AbstractFileSystem, partial: list, value: np.ndarray
    ) -> None:
        def update(item: tuple[str, bytes | None, tuple[slice, ...], tuple[slice, ...]]) -> bytes:
            key, data, in_chunk, in_value = item
            chunk = self._blank_chunk() if data is None else self._decode(data, key).copy()
            chunk[in_chunk] = value[in_value]
            return self._meta.codecs.encode(chunk)

        with self._chunk_lock:
            keys = [self._key(index) for index, _, _ in partial]
            self._guard(fs, keys, writing=True)
            found = _fetch(fs, keys, self.url)
            items = [(k, found[k], c, v) for k, (_, c, v) in zip(keys, partial)]
            _store(fs, dict(zip(keys, self._map(update, items))))

    # -- shards ----------------------------------------------------------
    def _sharding(self) -> ShardLayout:
        """The shard layout, for the methods of a sharded array."""
        layout = self._meta.shards
        if layout is None:
            raise RuntimeError(f"{self.url} is not sharded")
        return layout

    def _shard_indices(self, fs: fsspec.AbstractFileSystem, shards: list[tuple[int, ...]]) -> dict:
        """The index of each shard (``None`` for a shard not stored), each fetched once with
        one byte-range request and kept while it fits :data:`INDEX_CACHE_BYTES`."""
        layout = self._sharding()
        size = layout.index_nbytes
        out: dict = {}
        with self._index_lock:
            for shard in shards:
                if shard in self._index_cache:
                    self._index_cache.move_to_end(shard)
                    out[shard] = self._index_cache[shard]
        todo = [shard for shard in shards if shard not in out]
        keys = [self._key(shard) for shard in todo]
        self._guard(fs, keys, writing=False)
        ranges: list[tuple[str, int, int | None]] = [
            (k, 0, size) if layout.index_at_start else (k, -size, None) for k in keys
        ]
        for shard, key, data in zip(todo, keys, _fetch_ranges(fs, ranges, self.url)):
            entries = None
            if data is not None:
                try:
                    entries = layout.decode_index(data, key)
                    layout.check_index(entries, None)
                except ValueError as err:
                    raise chunk_error(self._locator, key, err) from None
            out[shard] = entries
        with self._index_lock:
            for shard in todo:
                self._index_cache[shard] = out[shard]
            most = max(1, INDEX_CACHE_BYTES // (layout.count * 16))
            while len(self._index_cache) > most:
                self._index_cache.popitem(last=False)
        return out

    def _forget_shards(self, shards: Iterable[tuple[int, ...]]) -> None:
        with self._index_lock:
            for shard in shards:
                self._index_cache.pop(shard, None)

    def _read_sharded(
        self, fs: fsspec.AbstractFileSystem, region: tuple[slice, ...], out: np.ndarray
    ) -> None:
        """Read the inner chunks ``region`` needs: each shard's index, then one byte-range
        request per run of adjacent needed inner chunks, decoded on the codec threads."""
        layout = self._sharding()
        wanted: dict[tuple[int, ...], list] = {}
        for index in self._indices(region):
            shard, place = layout.local(index)
            wanted.setdefault(shard, []).append((index, place))
        per_batch = max(1, min(BATCH_KEYS, BATCH_BYTES // max(1, self._meta.chunk_nbytes)))

        buffers = _DecodeBuffers(self._meta.chunk_nbytes)

        def fill(item: tuple[tuple[int, ...], str, memoryview | None]) -> None:
            index, key, data = item
            self._place(data, f"{key} (inner chunk {index})", index, region, out, buffers)

        shards = list(wanted)
        start = 0
        while start < len(shards):
            batch: list[tuple[int, ...]] = []
            count = 0
            while start < len(shards) and (not batch or count < per_batch):
                batch.append(shards[start])
                count += len(wanted[shards[start]])
                start += 1
            indices = self._shard_indices(fs, batch)
            items: list[tuple[tuple[int, ...], str, memoryview | None]] = []
            requests: list[tuple[str, int, int]] = []
            runs: list[Any] = []
            for shard in batch:
                key, entries = self._key(shard), indices[shard]
                needed = []
                for index, place in wanted[shard]:
                    offset, nbytes = (EMPTY, EMPTY) if entries is None else entries[place]
                    if offset == EMPTY and nbytes == EMPTY:
                        items.append((index, key, None))
                    else:
                        needed.append((int(offset), int(nbytes), index))
                for run in coalesce(needed):
                    begin, end = run[0][0], run[-1][0] + run[-1][1]
                    requests.append((key, begin, end))
                    runs.append(run)
            for (key, begin, end), data, run in zip(
                requests, _fetch_ranges(fs, requests, self.url), runs
            ):
                if data is None or len(data) != end - begin:
                    got = "no shard" if data is None else f"{len(data)} bytes"
                    raise chunk_error(
                        self._locator,
                        key,
                        ValueError(
                            f"the shard is truncated: bytes {begin}..{end} of its inner "
                            f"chunks gave {got}"
                        ),
                    )
                view = memoryview(data)
                for offset, nbytes, index in run:
                    items.append((index, key, view[offset - begin : offset - begin + nbytes]))
            self._map(fill, items)

    def _write_sharded(
        self, fs: fsspec.AbstractFileSystem, region: tuple[slice, ...], value: np.ndarray
    ) -> None:
        """Write every shard ``region`` touches whole, one writer per shard: a shard the
        region covers is encoded from ``value``; one it covers in part is read, patched and
        rewritten under the array's chunk lock."""
        layout = self._sharding()
        shard_nbytes = math.prod(layout.shard_shape) * self._dtype.itemsize
        ranges = _chunk_ranges(region, layout.shard_shape)
        for batch in _batches(itertools.product(*ranges), shard_nbytes):
            whole: list[tuple[int, ...]] = []
            partial: list[tuple[int, ...]] = []
            for shard in batch:
                covered = self._overlap(shard, region, layout.shard_shape)[2]
                (whole if covered else partial).append(shard)
            if whole:
                keys = [self._key(shard) for shard in whole]
                self._guard(fs, keys, writing=True)
                blobs = [
                    self._encode_shard(shard, region, value, None, k)
                    for shard, k in zip(whole, keys)
                ]
                self._forget_shards(whole)
                _store(fs, dict(zip(keys, blobs)))
            if partial:
                with self._chunk_lock:
                    keys = [self._key(shard) for shard in partial]
                    self._guard(fs, keys, writing=True)
                    old = _fetch(fs, keys, self.url)
                    blobs = [
                        self._encode_shard(shard, region, value, old[k], k)
                        for shard, k in zip(partial, keys)
                    ]
                    self._forget_shards(partial)
                    _store(fs, dict(zip(keys, blobs)))

    def _encode_shard(
        self,
        shard: tuple[int, ...],
        region: tuple[slice, ...],
        value: np.ndarray,
        old: bytes | None,
        key: str,
    ) -> bytes:
        """The bytes of ``shard`` after writing ``value`` at ``region`` over ``old``."""
        layout = self._sharding()
        entries = None
        if old is not None:
            part = (
                old[: layout.index_nbytes] if layout.index_at_start else old[-layout.index_nbytes :]
            )
            try:
                entries = layout.decode_index(part, key)
                layout.check_index(entries, len(old))
            except ValueError as err:
                raise chunk_error(self._locator, key, err) from None

        def stored(place: int) -> bytes | None:
            if old is None or entries is None or (entries[place] == EMPTY).all():
                return None  # (entries come from old)
            offset, nbytes = (int(v) for v in entries[place])
            return old[offset : offset + nbytes]

        def encode(item: tuple[int, tuple[int, ...]]) -> bytes | None:
            place, index = item
            if any(i * c >= n for i, c, n in zip(index, self._chunks, self._shape)):
                return None  # past the array's edge: nothing to store
            in_chunk, in_value, covered = self._overlap(index, region)
            if any(sl.start >= sl.stop for sl in in_value):
                return stored(place)  # the region does not touch it
            part = value[in_value]
            if not covered or part.shape != self._chunks:
                data = stored(place)
                if data is None:
                    chunk = self._blank_chunk()
                else:
                    chunk = self._decode(data, f"{key} (inner chunk {index})").copy()
                chunk[in_chunk] = part
                part = chunk
            return self._meta.codecs.encode(part)

        origin = tuple(s * p for s, p in zip(shard, layout.per_shard))
        items = [
            (place, tuple(o + i for o, i in zip(origin, local)))
            for place, local in enumerate(np.ndindex(*layout.per_shard))
        ]
        return layout.assemble(self._map(encode, items))

    # -- life cycle -----------------------------------------------------
    def _document(self) -> dict[str, Any]:
        """The v3 ``zarr.json`` (or the v2 ``.zarray``) of this array."""
        meta = self._meta
        if meta.zarr_format == 2:
            return zarr_v2.array_document(
                meta.shape, meta.dtype, meta.chunks, meta.fill_value, meta.codecs
            )
        if meta.shards is not None:
            grid, codecs = meta.shards.shard_shape, [meta.shards.to_json()]
        else:
            grid, codecs = meta.chunks, meta.codecs.to_json()
        return array_document(
            meta.shape,
            meta.dtype,
            grid,
            meta.fill_value,
            codecs,
            meta.attrs,
            meta.dimension_names,
        )

    def _v2_attrs(self) -> dict[str, Any]:
        """The ``.zattrs`` of a v2 array: its attrs plus xarray's ``_ARRAY_DIMENSIONS``."""
        attrs = dict(self._meta.attrs)
        if self._meta.dimension_names is not None:
            attrs[zarr_v2.DIMENSIONS_ATTR] = list(self._meta.dimension_names)
        return attrs

    def _write_metadata(
        self, fs: fsspec.AbstractFileSystem, prefix: str, doc: dict[str, Any]
    ) -> None:
        """Write the array's metadata under ``prefix``: ``zarr.json``, or ``.zattrs`` then
        ``.zarray`` (the document that makes it an array goes last)."""
        if self._meta.zarr_format == 2:
            _write_json(fs, _join(prefix, zarr_v2.ATTRS_KEY), self._v2_attrs())
            _write_json(fs, _join(prefix, zarr_v2.ARRAY_KEY), doc)
        else:
            _write_json(fs, _join(prefix, META_KEY), doc)

    def _rewrite_metadata(self) -> None:
        """Rewrite the committed array's metadata after its attrs or dimension names changed
        (fields oocarr does not interpret are kept)."""
        if self._meta.zarr_format == 2:
            with _storage_failures("writing the attributes of", self.url):
                _write_json(self._fs(), _join(self._prefix, zarr_v2.ATTRS_KEY), self._v2_attrs())
            return
        doc = dict(self._meta.document)
        doc["attributes"] = self._meta.attrs
        if self._meta.dimension_names is not None:
            doc["dimension_names"] = list(self._meta.dimension_names)
        with _storage_failures("writing the attributes of", self.url):
            _write_json(self._fs(), _join(self._prefix, META_KEY), doc)
        self._meta.document = doc

    def _commit(self) -> None:
        with _storage_failures("committing", self.url):
            self._publish()

    def _publish(self) -> None:
        fs = self._fs()
        doc = self._document()
        v2 = self._meta.zarr_format == 2
        for parent in self._check_parents(fs, self._base, self._locator):
            if not any(
                read_document(fs, _join(parent, key), self._locator) is not None
                for key in (META_KEY, zarr_v2.GROUP_KEY)
            ):
                key, group = (
                    (zarr_v2.GROUP_KEY, zarr_v2.group_document())
                    if v2
                    else (META_KEY, group_document())
                )
                _write_json(fs, _join(parent, key), group)
        if self._data_prefix == self._prefix:
            self._write_metadata(fs, self._prefix, doc)
        elif isinstance(fs, LocalFileSystem):
            self._swap_local(fs, doc)
        else:
            self._swap_remote(fs, doc)
        self._data_prefix = self._prefix
        self._meta.document = doc
        self._new_dirs = []

    def _swap_local(self, fs: fsspec.AbstractFileSystem, doc: dict[str, Any]) -> None:
        """Replace the old array by renaming directories (each rename is atomic)."""
        self._write_metadata(fs, self._data_prefix, doc)
        trash = _hidden_sibling(self._prefix, self._locator)
        fs.mv(self._prefix, trash)
        try:
            fs.mv(self._data_prefix, self._prefix)
        except BaseException:
            fs.mv(trash, self._prefix)
            raise
        _rm(fs, trash)

    def _swap_remote(self, fs: fsspec.AbstractFileSystem, doc: dict[str, Any]) -> None:
        """Replace the old array on an object store: delete, move new keys in, metadata last."""
        for key in ARRAY_KEYS:
            _rm(fs, _join(self._prefix, key))
        _rm(fs, self._prefix)
        src = self._data_prefix.rstrip("/")
        try:
            files = fs.find(src)
        except FileNotFoundError:
            files = []
        if files:
            fs.copy(files, [self._prefix.rstrip("/") + f[len(src) :] for f in files])
        _rm(fs, src)
        self._write_metadata(fs, self._prefix, doc)

    def _abort(self) -> None:
        """Remove what the pending array wrote, as far as the storage lets it (a failed write
        is reported by whoever raised it, not hidden by a failed clean-up)."""
        try:
            fs = self._fs()
            if self._data_prefix != self._prefix:
                _rm(fs, self._data_prefix)
            elif self._meta.zarr_format == 2:
                for entry in fs.ls(self._prefix, detail=False, refresh=True):
                    if _V2_CHUNK.fullmatch(_split(entry.rstrip("/"))[1]):
                        _rm(fs, entry)
            else:
                _rm(fs, _join(self._prefix, "c"))
        except OSError:
            pass
        for path in self._new_dirs:
            try:
                fs.rmdir(path)
            except OSError:
                break
        self._new_dirs = []

    # -- attrs and sizes ------------------------------------------------
    def _read_attrs(self) -> dict[str, Any]:
        return copy.deepcopy(self._meta.attrs)

    def _write_attrs(self, attrs: dict[str, Any]) -> None:
        attrs = dict(attrs)
        if self._meta.zarr_format == 2 and zarr_v2.DIMENSIONS_ATTR in attrs:
            names = parse_dimension_names(attrs.pop(zarr_v2.DIMENSIONS_ATTR), len(self._shape))
            self._meta.dimension_names = names or self._meta.dimension_names
        old = self._meta.attrs
        self._meta.attrs = copy.deepcopy(attrs)
        if not self._pending:
            try:
                self._rewrite_metadata()
            except BaseException:
                self._meta.attrs = old
                raise

    def _read_dimension_names(self) -> tuple[str | None, ...] | None:
        return self._meta.dimension_names

    def _read_masked_fill_value(self) -> Any:
        """A v2 array's ``fill_value`` as a scalar of its dtype (``None`` when ``null``); v3's
        fill value marks no missing data (xarray reads it so too)."""
        if self._meta.zarr_format != 2 or self._meta.document.get("fill_value") is None:
            return None
        return np.asarray(self._meta.fill_value, self._dtype)[()]

    def _write_dimension_names(self, names: tuple[str | None, ...]) -> None:
        old = self._meta.dimension_names
        self._meta.dimension_names = tuple(names)
        if not self._pending:
            try:
                self._rewrite_metadata()
            except BaseException:
                self._meta.dimension_names = old
                raise

    def parallel_writer(self) -> PendingChunks | None:
        """Other processes write this pending array's chunks (or shards) through the returned
        handle, each one whole and atomically as here; the metadata is written by
        :meth:`commit`, here, last.  ``None`` for ``memory://`` (this process's only) and for
        archives (one writer)."""
        fs = self._fs()
        if not self._pending or fs.protocol in ("memory", ("memory",)) or _read_only_fs(fs):
            return None
        return PendingChunks(self._locator, self._meta, self._base, self._prefix, self._data_prefix)

    @property
    def write_chunks(self) -> tuple[int, ...] | None:
        """A shard when sharded (each is written whole by one writer), else a chunk."""
        return self._meta.grid_chunks

    def info(self) -> dict[str, Any]:
        """The base description plus the Zarr format and, when sharded, the shard shape."""
        shards = self._meta.shards
        return super().info() | {
            "zarr_format": self._meta.zarr_format,
            "shards": None if shards is None else list(shards.shard_shape),
        }

    def _stored_nbytes(self) -> int | None:
        try:
            return int(self._fs().du(self._data_prefix, total=True))
        except FileNotFoundError:
            return 0
        except (OSError, NotImplementedError, ValueError):
            return None

    @property
    def compression(self) -> str | None:
        return self._meta.codecs.compression

    # -- listing and chunk counts ---------------------------------------------
    supports_listing = True

    @classmethod
    def list_arrays(
        cls,
        container: str,
        inner: str = "",
        storage_options: Mapping[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """The groups and arrays of a Zarr v2 or v3 hierarchy (under ``inner``), parents first;
        a v2 hierarchy's consolidated ``.zmetadata`` is read instead of listing when present.

        Examples
        --------
        >>> import numpy as np, tempfile, os, oocarr
        >>> path = os.path.join(tempfile.mkdtemp(), "h.zarr")
        >>> _ = oocarr.save(np.zeros((4, 2), "f4"), path + "#/g/x", chunks=(2, 2))
        >>> [(e["path"], e["kind"], e["chunks"]) for e in ZarrArray.list_arrays(path)]
        [('/g', 'group', None), ('/g/x', 'array', (2, 2))]
        """
        locator = cls.locate(container, inner, storage_options)
        fs, base = _filesystem(locator)
        prefix = cls._prefix_of(locator, base)
        root = _node(fs, prefix, locator)
        if root is None:
            require_exists(False, locator, "Zarr hierarchy (zarr.json, .zgroup or .zarray)")
        consolidated = _consolidated(fs, prefix, locator) if root[0] == "v2-group" else None
        found: list[dict[str, Any]] = []
        pending = [(prefix, locator.path.rstrip("/") or "", root)]
        while pending:
            node_prefix, path, node = pending.pop()
            here = Locator.make(cls.name, locator.url, path, storage_options)
            kind, doc, attrs = node
            if kind in ("array", "v2-array"):
                found.append(_array_entry(kind, doc, attrs, here))
                continue
            if path:
                group = {"path": path, "url": here.full_url, "kind": "group"}
                found.append(group | {"shape": None, "dtype": None, "chunks": None})
            if consolidated is not None:
                found.extend(_consolidated_entries(consolidated, path, locator, storage_options))
                break
            for child in _child_prefixes(fs, node_prefix):
                sub = _node(fs, child, locator)
                if sub is not None:
                    pending.append((child, f"{path}/{_split(child)[1]}", sub))
        return sorted(found, key=lambda e: e["path"].split("/"))

    @classmethod
    def group_attrs(
        cls, container: str, inner: str = "", storage_options: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """The attributes of a Zarr group: v3 ``zarr.json``'s ``attributes``, v2 ``.zattrs``.

        Examples
        --------
        >>> import numpy as np, tempfile, os, oocarr, json
        >>> path = os.path.join(tempfile.mkdtemp(), "h.zarr")
        >>> _ = oocarr.save(np.zeros(2, "f4"), path + "#/g/x")
        >>> doc = {"zarr_format": 3, "node_type": "group", "attributes": {"title": "run"}}
        >>> with open(os.path.join(path, "g", "zarr.json"), "w") as f:
        ...     json.dump(doc, f)
        >>> ZarrArray.group_attrs(path, "/g")
        {'title': 'run'}
        """
        locator = cls.locate(container, inner, storage_options)
        fs, base = _filesystem(locator)
        prefix = cls._prefix_of(locator, base)
        node = _node(fs, prefix, locator)
        if node is None:
            require_exists(False, locator, "Zarr group (zarr.json or .zgroup)")
        kind, doc, _ = node
        if kind not in ("group", "v2-group"):
            raise InvalidArgumentError(
                f"{locator.full_url} is a Zarr array, not a group; name a group (or the root)",
                url=locator.full_url,
            )
        if kind == "group":
            attrs = doc.get("attributes")
            return copy.deepcopy(attrs) if isinstance(attrs, dict) else {}
        raw = read_document(fs, _join(prefix, zarr_v2.ATTRS_KEY), locator)
        attrs = zarr_v2.parse_json(raw, ".zattrs", locator)
        return attrs if isinstance(attrs, dict) else {}

    def initialized_chunks(self) -> tuple[int, int] | None:
        """``(stored, total)`` chunks (shards when sharded): keys present out of the grid."""
        fs, total = self._fs(), self.chunk_count()
        if total is None:  # never: a Zarr array is chunked
            return None
        if self._meta.shards is not None:
            shard = self._meta.shards.shard_shape
            total = math.prod(-(-n // c) for n, c in zip(self._shape, shard))
        try:
            keys = fs.find(self._data_prefix)
        except FileNotFoundError:
            keys = []
        stored = sum(
            1 for k in keys if _split(k)[1] != META_KEY and not _split(k)[1].startswith(".")
        )
        return stored, total


def _child_prefixes(fs: fsspec.AbstractFileSystem, prefix: str) -> list[str]:
    """The sub-directories (or common prefixes) of ``prefix``, hidden ones left out."""
    try:
        entries = fs.ls(prefix, detail=True, refresh=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(
        e["name"].rstrip("/")
        for e in entries
        if e.get("type") == "directory" and not _split(e["name"])[1].startswith(".")
    )


def _node(
    fs: fsspec.AbstractFileSystem, prefix: str, locator: Locator
) -> tuple[str, dict, dict | None] | None:
    """What is at ``prefix``: ``("array"|"group", zarr.json, None)``, ``("v2-array", .zarray,
    .zattrs)``, ``("v2-group", .zgroup, None)``, or ``None``."""
    raw = read_document(fs, _join(prefix, META_KEY), locator)
    if raw is not None:
        doc = parse_document(raw, locator)
        return ("array" if doc["node_type"] == "array" else "group"), doc, None
    raw = read_document(fs, _join(prefix, zarr_v2.ARRAY_KEY), locator)
    if raw is not None:
        doc = zarr_v2.parse_json(raw, ".zarray", locator)
        attrs = zarr_v2.parse_json(
            read_document(fs, _join(prefix, zarr_v2.ATTRS_KEY), locator), ".zattrs", locator
        )
        return "v2-array", doc, attrs
    raw = read_document(fs, _join(prefix, zarr_v2.GROUP_KEY), locator)
    if raw is not None:
        return "v2-group", zarr_v2.parse_json(raw, ".zgroup", locator), None
    return None


def _consolidated(
    fs: fsspec.AbstractFileSystem, prefix: str, locator: Locator
) -> dict[str, Any] | None:
    """The ``metadata`` of a v2 hierarchy's ``.zmetadata``, or ``None``."""
    doc = zarr_v2.parse_json(
        read_document(fs, _join(prefix, zarr_v2.CONSOLIDATED_KEY), locator), ".zmetadata", locator
    )
    metadata = None if doc is None else doc.get("metadata")
    return metadata if isinstance(metadata, dict) else None


def _consolidated_entries(
    metadata: dict[str, Any], path: str, locator: Locator, storage_options: Mapping[str, Any] | None
) -> list[dict[str, Any]]:
    """``list_arrays`` entries below ``path`` from consolidated metadata."""
    out = []
    for key, doc in metadata.items():
        head, _, name = key.rpartition("/")
        if (
            name not in (zarr_v2.ARRAY_KEY, zarr_v2.GROUP_KEY)
            or not head
            or not isinstance(doc, dict)
        ):
            continue
        node_path = f"{path}/{head}"
        here = Locator.make(ZarrArray.name, locator.url, node_path, storage_options)
        if name == zarr_v2.GROUP_KEY:
            entry = {"path": node_path, "url": here.full_url, "kind": "group"}
            out.append(entry | {"shape": None, "dtype": None, "chunks": None})
        else:
            attrs = metadata.get(f"{head}/{zarr_v2.ATTRS_KEY}")
            out.append(
                _array_entry("v2-array", doc, attrs if isinstance(attrs, dict) else {}, here)
            )
    return out


def _array_entry(
    kind: str, doc: dict[str, Any], attrs: dict[str, Any] | None, locator: Locator
) -> dict[str, Any]:
    """One ``list_arrays`` entry for an array document (raw fields when oocarr cannot read it)."""
    entry = {"path": locator.path or "/", "url": locator.full_url, "kind": "array"}
    try:
        if kind == "v2-array":
            meta = zarr_v2.parse_array(doc, attrs, locator)
        else:
            meta = parse_array(doc, locator)
    except (InvalidStoreError, UnsupportedCompressionError):
        if kind == "v2-array":
            chunks, dtype = doc.get("chunks"), doc.get("dtype")
        else:
            grid = doc.get("chunk_grid")
            chunks = (
                grid.get("configuration", {}).get("chunk_shape") if isinstance(grid, dict) else None
            )
            dtype = doc.get("data_type")
        shape = doc.get("shape")
        return entry | {
            "shape": tuple(shape) if isinstance(shape, list) else None,
            "dtype": f"unsupported {dtype}",
            "chunks": tuple(chunks) if isinstance(chunks, list) else None,
        }
    return entry | {"shape": meta.shape, "dtype": meta.dtype, "chunks": meta.chunks}
