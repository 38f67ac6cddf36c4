"""The fsspec driver: Zarr v3 arrays on any fsspec filesystem, written with fsspec directly.

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

Chunks are written under the array's final prefix (or, when overwriting,
under a hidden sibling prefix) and ``zarr.json`` is written last, at
commit, so a half-written array never opens.  See ``docs/drivers/fsspec.md``.
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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import fsspec
import numpy as np
from fsspec.archive import AbstractArchiveFileSystem
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from oocarr.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    InvalidStoreError,
    InvalidUrlError,
    MissingDependencyError,
    OocarrError,
    ReadOnlyError,
    UnsupportedCompressionError,
)
from oocarr.store import (
    DEFAULT_CHUNK_BYTES,
    BlockedArray,
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
from oocarr_drivers.chunk_runs import read_chunk_region
from oocarr_drivers.claims import ZARR_SUFFIXES, zarr_can_open
from oocarr_drivers.zarr_codecs import LEVEL_RANGES, CodecPipeline, chunk_error
from oocarr_drivers.zarr_meta import (
    DATA_TYPES,
    ArrayMeta,
    KeyEncoding,
    array_document,
    group_document,
    parse_array,
    parse_document,
    read_document,
    zarr_type_name,
)

__all__ = ["ZarrArray"]

META_KEY = "zarr.json"
#: Decoded bytes of the chunks fetched (or written) in one batch of requests.
BATCH_BYTES = 64 * 2**20
#: Most chunk requests in one batch.
BATCH_KEYS = 1024
_GLOB_CHARS = re.compile(r"[*?\[]")
_UNSEEN = object()
#: Uncompressed local chunks at least this large are read by several threads at once.
LOCAL_PARALLEL_BYTES = 256 * 2**10
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
    try:
        fs, base = url_to_fs(locator.url, **options)
    except ImportError as err:
        raise MissingDependencyError(
            f"cannot open {locator.full_url}: {err} (pip install the fsspec backend it names, "
            "e.g. s3fs for s3://)",
            url=locator.full_url,
        ) from err
    except (ValueError, TypeError) as err:
        raise InvalidUrlError(
            f"fsspec cannot open {locator.url!r} ({err}); check the protocol and the "
            "storage_options",
            url=locator.full_url,
        ) from None
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


def _fetch(fs: fsspec.AbstractFileSystem, keys: list[str], url: str) -> dict[str, bytes | None]:
    """The stored bytes of each key (``None`` when absent), fetched concurrently where possible."""
    if len(keys) > 1 and fs.async_impl and not any(_GLOB_CHARS.search(k) for k in keys):
        found = fs.cat(keys, on_error="return")
        out: dict[str, bytes | None] = {}
        rest = []
        for key in keys:
            value = found[key] if key in found else found.get(fs._strip_protocol(key), _UNSEEN)
            if value is _UNSEEN:
                rest.append(key)  # named differently by the backend: fetch it on its own
            elif isinstance(value, FileNotFoundError):
                out[key] = None
            elif isinstance(value, (IsADirectoryError, NotADirectoryError)):
                raise _NotAChunk(key, value)
            elif isinstance(value, BaseException):
                value.add_note(f"while reading chunk {key!r} of {url}")
                raise value
            else:
                out[key] = value
        keys = rest
    else:
        out = {}
    for key in keys:
        try:
            out[key] = fs.cat_file(key)
        except FileNotFoundError:
            out[key] = None
        except (IsADirectoryError, NotADirectoryError) as err:
            raise _NotAChunk(key, err) from None
        except OSError as err:
            err.add_note(f"while reading chunk {key!r} of {url}")
            raise
    return out


def _read_file_into(path: str, buffer: np.ndarray) -> bool:
    """Fill ``buffer`` with the bytes of the file at ``path``; False when there is no file.

    Raises
    ------
    ValueError
        When the file does not hold exactly ``buffer.nbytes`` bytes.
    """
    view = memoryview(buffer.reshape(-1).view(np.uint8))
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
    if ".zarray" in names:
        return "other", "a Zarr v2 array"
    if ".zgroup" in names:
        return "group", "a Zarr v2 group"
    if not names:
        return "empty", "nothing"
    if all(n == "c" or n.startswith(f".{META_KEY}.tmp-") for n in names):
        return "leftover", "chunks of an unfinished create"
    return "foreign", "files that are not a Zarr array (" + ", ".join(sorted(names)[:3]) + ")"


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


def _chunk_ranges(region: tuple[slice, ...], chunks: tuple[int, ...]) -> list[range]:
    return [range(r.start // c, (r.stop - 1) // c + 1) for r, c in zip(region, chunks)]


def _batches(indices: Iterator[tuple[int, ...]], chunk_nbytes: int) -> Iterator[list]:
    size = max(1, min(BATCH_KEYS, BATCH_BYTES // max(1, chunk_nbytes)))
    while batch := list(itertools.islice(indices, size)):
        yield batch


class ZarrArray(BlockedArray):
    """A Zarr v3 array on any fsspec filesystem.

    Reads regular-grid arrays with the ``bytes`` (either byte order),
    ``transpose``, ``gzip``, ``zstd`` and ``crc32c`` codecs; writes
    little-endian ``bytes`` plus optional ``gzip`` or ``zstd``, readable by
    zarr-python and TensorStore.

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

    name = "fsspec"
    suffixes = ZARR_SUFFIXES
    compressions = frozenset({"gzip", "zstd"})
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

    # -- locating ------------------------------------------------------
    @classmethod
    def can_open(cls, container, inner, storage_options) -> bool:
        return zarr_can_open(container, inner, storage_options)

    @classmethod
    def locate(cls, container, inner, storage_options=None, driver_options=None) -> Locator:
        driver_options = dict(driver_options or {})
        kept = follow_external_option(driver_options, container)
        if driver_options:
            raise InvalidArgumentError(
                f"the fsspec driver takes no driver options but follow_external (got "
                f"{sorted(driver_options)}) for {container}; pass fsspec settings as "
                "storage_options=",
                url=container,
            )
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
    def supports_dtype(cls, dtype) -> bool:
        return zarr_type_name(dtype) is not None

    @classmethod
    def default_chunks(cls, shape, dtype) -> tuple[int, ...]:
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
        raw = read_document(fs, _join(prefix, META_KEY), locator)
        if raw is None:
            if fs.exists(_join(prefix, ".zarray")) or fs.exists(_join(prefix, ".zgroup")):
                raise InvalidStoreError(
                    f"{locator.full_url} is Zarr v2, and oocarr reads Zarr v3 only; convert "
                    "it with zarr-python: zarr.create_array(NEW_PATH, "
                    "data=zarr.open_array(OLD_PATH), zarr_format=3)",
                    url=locator.full_url,
                )
            require_exists(False, locator, "Zarr array (zarr.json)")
        meta = parse_array(parse_document(raw, locator), locator)
        return cls(locator, meta, mode=mode, base=base, prefix=prefix, data_prefix=prefix, fs=fs)

    @classmethod
    def _check_levels(cls, compression, url: str) -> None:
        if compression is None or compression.level is None:
            return
        low, high = LEVEL_RANGES[compression.name]
        if not low <= compression.level <= high:
            raise UnsupportedCompressionError(
                f"{compression.name} level {compression.level} for {url} is outside {low}..{high}",
                url=url,
            )

    @classmethod
    def _check_parents(cls, fs, base: str, locator: Locator) -> list[str]:
        """The group prefixes above the array; raise when one of them is an array."""
        if not locator.path:
            return []
        parts = [p for p in locator.path.split("/") if p][:-1]
        parents = [_join(base, "/".join(parts[:i])) for i in range(len(parts) + 1)]
        for parent in parents:
            raw = read_document(fs, _join(parent, META_KEY), locator)
            try:
                node = None if raw is None else parse_document(raw, locator)["node_type"]
            except InvalidStoreError as err:
                raise InvalidStoreError(
                    f"cannot create {locator.full_url}: the parent {parent}/{META_KEY} is not "
                    f"valid Zarr v3 metadata ({err}); fix or remove it",
                    url=locator.full_url,
                ) from None
            if node == "array":
                raise InvalidArgumentError(
                    f"cannot create {locator.full_url}: {parent} is a Zarr array, and only "
                    "groups hold members; pick another path",
                    url=locator.full_url,
                )
        return parents

    @classmethod
    def _create(cls, locator, shape, dtype, chunks, compression, attrs, overwrite):
        url = locator.full_url
        fs, base = _filesystem(locator)
        if _read_only_fs(fs):
            raise ReadOnlyError(
                f"cannot create {url}: fsspec archives are read-only; write a directory "
                "store and archive it afterwards",
                url=url,
            )
        cls._check_levels(compression, url)
        dtype = DATA_TYPES[zarr_type_name(dtype)]
        chunks = cls.default_chunks(shape, dtype) if chunks is None else tuple(chunks)
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
                _rm(fs, _join(prefix, "c"))
                for entry in fs.ls(prefix, detail=False):
                    if _split(entry)[1].startswith(f".{META_KEY}.tmp-"):
                        _rm(fs, entry)
            data_prefix = prefix
        meta = ArrayMeta(
            shape=shape,
            dtype=dtype,
            chunks=chunks,
            fill_value=dtype.type(0),
            key_encoding=KeyEncoding(),
            codecs=CodecPipeline.for_writing(dtype, compression),
            attrs=dict(attrs),
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
    def _missing_dirs(fs, prefix: str, base: str) -> list[str]:
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
        raw = read_document(fs, _join(cls._prefix_of(locator, base), META_KEY), locator)
        if raw is None:
            return False
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
            _rm(fs, _join(prefix, META_KEY))
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

    def _guard(self, fs, keys: list[str], *, writing: bool) -> None:
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

    def _overlap(self, index, region) -> tuple[tuple[slice, ...], tuple[slice, ...], bool]:
        """Slices of chunk ``index`` and of the region where they meet, and whether the
        region covers the chunk's part of the array entirely."""
        in_chunk, in_region, whole = [], [], True
        for i, c, r, n in zip(index, self._chunks, region, self._shape):
            lo, hi = i * c, min((i + 1) * c, n)
            start, stop = max(lo, r.start), min(hi, r.stop)
            in_chunk.append(slice(start - lo, stop - lo))
            in_region.append(slice(start - r.start, stop - r.start))
            whole = whole and start == lo and stop == hi
        return tuple(in_chunk), tuple(in_region), whole

    def _decode(self, data: bytes, key: str) -> np.ndarray:
        try:
            return self._meta.codecs.decode(data, self._chunks)
        except ValueError as err:
            raise chunk_error(self._locator, key, err) from None

    def _indices(self, region) -> Iterator[tuple[int, ...]]:
        return itertools.product(*_chunk_ranges(region, self._chunks))

    def _map(self, fn, items: list) -> list:
        """``fn`` over ``items``, on the codec thread pool when chunks are compressed."""
        if len(items) > 1 and self._meta.codecs.compressors:
            return list(_codec_pool().map(fn, items))
        return [fn(item) for item in items]

    def read_overhead(self, shape) -> int:
        """Uncompressed local chunks: none (read straight into the caller's buffer);
        otherwise one batch of encoded chunks fetched and one decoded chunk per codec thread."""
        if self._meta.codecs.plain and isinstance(self._fs(), LocalFileSystem):
            return 0
        chunks = math.prod(-(-max(1, s) // max(1, c)) for s, c in zip(shape, self._chunks))
        nbytes = self._meta.chunk_nbytes
        decoding = min(CODEC_THREADS, chunks) * nbytes
        fetched = min(chunks, max(1, min(BATCH_KEYS, BATCH_BYTES // max(1, nbytes)))) * nbytes
        return fetched + decoding

    def _read(self, region, out) -> None:
        try:
            self._read_chunks(region, out)
        except _NotAChunk as err:
            raise chunk_error(self._locator, err.key, err.err) from None

    def _read_chunks(self, region, out) -> None:
        fs = self._fs()
        if isinstance(fs, LocalFileSystem) and self._meta.codecs.plain:
            self._read_local(fs, region, out)
            return

        def fill(item) -> None:
            index, key, data = item
            in_chunk, in_out, _ = self._overlap(index, region)
            if data is None:
                out[in_out] = self._meta.fill_value
            else:
                out[in_out] = self._decode(data, key)[in_chunk]

        for batch in _batches(self._indices(region), self._meta.chunk_nbytes):
            keys = [self._key(index) for index in batch]
            self._guard(fs, keys, writing=False)
            found = _fetch(fs, keys, self.url)
            self._map(fill, [(index, key, found[key]) for index, key in zip(batch, keys)])

    def _read_local(self, fs: LocalFileSystem, region, out: np.ndarray) -> None:
        """Read uncompressed chunks of a local array, several at a time: a whole chunk that
        lands contiguously in ``out`` with one ``readinto``, part of a chunk as the byte runs
        of that part (``pread`` straight into ``out``), so no chunk-sized buffer is held and a
        chunk larger than the memory budget streams within it."""
        nbytes = self._meta.chunk_nbytes
        dtype = np.dtype(self._dtype)

        def fill(index: tuple[int, ...]) -> None:
            key = self._key(index)
            in_chunk, in_out, whole = self._overlap(index, region)
            target = out[(*in_out, ...)]  # a view even of a 0-d array
            full = all(s.stop - s.start == c for s, c in zip(in_chunk, self._chunks))
            path = fs._strip_protocol(key)
            try:
                if whole and full and target.flags.c_contiguous:
                    found = _read_file_into(path, target)
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

    def _blank_chunk(self) -> np.ndarray:
        return np.full(self._chunks, self._meta.fill_value, dtype=self._dtype)

    def _write(self, region, value) -> None:
        try:
            with _storage_failures("writing", self.url):
                self._write_chunks(region, value)
        except _NotAChunk as err:
            raise chunk_error(self._locator, err.key, err.err) from None

    def _write_chunks(self, region, value) -> None:
        fs = self._fs()

        def encode(item) -> bytes:
            in_chunk, in_value = item
            part = value[in_value]
            if part.shape != self._chunks:
                chunk = self._blank_chunk()
                chunk[in_chunk] = part
                part = chunk
            return self._meta.codecs.encode(part)

        for batch in _batches(self._indices(region), self._meta.chunk_nbytes):
            whole, partial = [], []
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

    def _read_modify_write(self, fs, partial: list, value: np.ndarray) -> None:
        def update(item) -> bytes:
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

    # -- life cycle -----------------------------------------------------
    def _document(self) -> dict[str, Any]:
        meta = self._meta
        return array_document(
            meta.shape,
            meta.dtype,
            meta.chunks,
            meta.fill_value,
            meta.codecs.to_json(),
            meta.attrs,
        )

    def _commit(self) -> None:
        with _storage_failures("committing", self.url):
            self._publish()

    def _publish(self) -> None:
        fs = self._fs()
        doc = self._document()
        for parent in self._check_parents(fs, self._base, self._locator):
            if read_document(fs, _join(parent, META_KEY), self._locator) is None:
                _write_json(fs, _join(parent, META_KEY), group_document())
        if self._data_prefix == self._prefix:
            _write_json(fs, _join(self._prefix, META_KEY), doc)
        elif isinstance(fs, LocalFileSystem):
            self._swap_local(fs, doc)
        else:
            self._swap_remote(fs, doc)
        self._data_prefix = self._prefix
        self._meta.document = doc
        self._new_dirs = []

    def _swap_local(self, fs, doc: dict[str, Any]) -> None:
        """Replace the old array by renaming directories (each rename is atomic)."""
        _write_json(fs, _join(self._data_prefix, META_KEY), doc)
        trash = _hidden_sibling(self._prefix, self._locator)
        fs.mv(self._prefix, trash)
        try:
            fs.mv(self._data_prefix, self._prefix)
        except BaseException:
            fs.mv(trash, self._prefix)
            raise
        _rm(fs, trash)

    def _swap_remote(self, fs, doc: dict[str, Any]) -> None:
        """Replace the old array on an object store: delete, move new keys in, zarr.json last."""
        _rm(fs, _join(self._prefix, META_KEY))
        _rm(fs, self._prefix)
        src = self._data_prefix.rstrip("/")
        try:
            files = fs.find(src)
        except FileNotFoundError:
            files = []
        if files:
            fs.copy(files, [self._prefix.rstrip("/") + f[len(src) :] for f in files])
        _rm(fs, src)
        _write_json(fs, _join(self._prefix, META_KEY), doc)

    def _abort(self) -> None:
        """Remove what the pending array wrote, as far as the storage lets it (a failed write
        is reported by whoever raised it, not hidden by a failed clean-up)."""
        try:
            fs = self._fs()
            if self._data_prefix != self._prefix:
                _rm(fs, self._data_prefix)
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
        if not self._pending:
            doc = dict(self._meta.document)
            doc["attributes"] = attrs
            with _storage_failures("writing the attributes of", self.url):
                _write_json(self._fs(), _join(self._prefix, META_KEY), doc)
            self._meta.document = doc
        self._meta.attrs = copy.deepcopy(attrs)

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
    def list_arrays(cls, container, inner="", storage_options=None) -> list[dict[str, Any]]:
        """The groups and arrays of a Zarr v3 hierarchy (under ``inner``), parents first.

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
        root = read_document(fs, _join(prefix, META_KEY), locator)
        if root is None:
            if fs.exists(_join(prefix, ".zarray")) or fs.exists(_join(prefix, ".zgroup")):
                raise InvalidStoreError(
                    f"{locator.full_url} is Zarr v2, and oocarr reads Zarr v3 only; convert it "
                    "with zarr-python (zarr_format=3)",
                    url=locator.full_url,
                )
            require_exists(False, locator, "Zarr hierarchy (zarr.json)")
        found: list[dict[str, Any]] = []
        pending = [(prefix, locator.path.rstrip("/") or "", root)]
        while pending:
            node_prefix, path, raw = pending.pop()
            node = Locator.make(cls.name, locator.url, path, storage_options)
            doc = parse_document(raw, node)
            if doc["node_type"] == "array":
                found.append(_array_entry(doc, node))
                continue
            if path:
                group = {"path": path, "url": node.full_url, "kind": "group"}
                found.append(group | {"shape": None, "dtype": None, "chunks": None})
            for child in _child_prefixes(fs, node_prefix):
                raw = read_document(fs, _join(child, META_KEY), locator)
                if raw is not None:
                    pending.append((child, f"{path}/{_split(child)[1]}", raw))
        return sorted(found, key=lambda e: e["path"].split("/"))

    def initialized_chunks(self) -> tuple[int, int] | None:
        """``(stored, total)`` chunks: chunk keys present in the store out of the grid."""
        fs, total = self._fs(), self.chunk_count()
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


def _array_entry(doc: dict[str, Any], locator: Locator) -> dict[str, Any]:
    """One ``list_arrays`` entry for an array document (raw fields when oocarr cannot read it)."""
    entry = {"path": locator.path or "/", "url": locator.full_url, "kind": "array"}
    try:
        meta = parse_array(doc, locator)
    except (InvalidStoreError, UnsupportedCompressionError):
        grid = doc.get("chunk_grid")
        chunks = (
            grid.get("configuration", {}).get("chunk_shape") if isinstance(grid, dict) else None
        )
        shape = doc.get("shape")
        return entry | {
            "shape": tuple(shape) if isinstance(shape, list) else None,
            "dtype": f"unsupported {doc.get('data_type')}",
            "chunks": tuple(chunks) if isinstance(chunks, list) else None,
        }
    return entry | {"shape": meta.shape, "dtype": meta.dtype, "chunks": meta.chunks}
