"""The HDF5 driver: datasets in HDF5 files, read and written through ``h5py``.

URL forms
---------
``path/to/file.h5#/group/name`` (also ``.hdf5``, and ``file:///abs/file.h5#/x``)
    The dataset ``/group/name`` in a local HDF5 file.  The ``#/inner/path``
    part is required.
``s3://bucket/file.h5#/group/name`` (any fsspec URL: ``gcs://``, ``https://``, ``memory://`` ...)
    The same in a remote file, read-only, with ``storage_options`` for fsspec:
    :mod:`oocarr_drivers.hdf5_remote`.  Writing one raises ``ReadOnlyError``.

Handles
-------
One reference-counted ``h5py.File`` per process and file, shared by every
store on it, opened read-write only while a store in the process writes, and
never carried across ``fork``: :mod:`oocarr_drivers.hdf5_handles`.

Attributes and dimension names
------------------------------
Strings, numbers, booleans and rectangular lists of one of those types are
stored as native HDF5 attributes; dicts, ``None``, empty, mixed and ragged
lists are stored as JSON text and their names recorded in the attribute
``_oocarr_json`` so they read back as what was written
(:mod:`oocarr_drivers.hdf5_attrs`).  Dimension names are a netCDF-4
variable's dimension scales, else HDF5 dimension labels, which is also how
they are written.

Creating
--------
A new file is written at a hidden temporary name beside the target and
renamed into place on commit.  A dataset added to an existing file is
written as a hidden dataset at the file's root and moved to its name on
commit; the other datasets in the file are not touched.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import h5py
import hdf5plugin
import numpy as np

from oocarr.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    InvalidStoreError,
    InvalidUrlError,
    NotFoundError,
    OocarrError,
    ReadOnlyError,
    UnsupportedCompressionError,
    UnsupportedDtypeError,
    WriteError,
)
from oocarr.store import (
    BlockedArray,
    Compression,
    Locator,
    as_dtype,
    corrupt,
    follow_external_option,
    follows_external,
    is_bfloat16,
    is_local,
    normalize_container,
    pid_alive,
    require_exists,
    storage_error,
    temp_sibling,
)
from oocarr_drivers.claims import HDF5_SUFFIXES
from oocarr_drivers.hdf5_attrs import (
    JSON_ATTRS,
    load_attrs,
    load_dimension_names,
    load_native_attrs,
    store_attrs,
    store_dimension_names,
)
from oocarr_drivers.hdf5_chunks import DECODER_CHUNKS, ChunkDecoder, decoder_for, decoding_threads
from oocarr_drivers.hdf5_handles import (
    FILES,
    LOCK,
    Handle,
    SharedFile,
    borrowed,
    ensure_file,
    not_hdf5,
    open_file,
    read_only_error,
)
from oocarr_drivers.hdf5_remote import (
    FETCH_BATCH_BYTES,
    MAX_GAP,
    contiguous_overhead,
    is_transport_error,
    read_contiguous,
)
from oocarr_drivers.hdf5_views import view_start, viewable
from oocarr_drivers.mapped_views import map_view

__all__ = ["HDF5Array"]

# The shared-handle state under the names the driver's tests inspect it by.
_LOCK, _FILES = LOCK, FILES

#: Unfiltered chunks up to this size go through a chunk cache of one chunk, so each is read
#: from the file in one piece rather than a row at a time; larger ones get no cache at all:
#: HDF5 moves them straight between the file and the caller's buffer.
CACHED_CHUNK_LIMIT = 2**20
#: Upper bound on chunk-cache hash slots (each costs a pointer).
MAX_CACHE_SLOTS = 2**20
DEFAULT_GZIP_LEVEL = 4
_LISTED = 20
#: Free space a change to an existing file must leave: HDF5 does not journal its metadata, and
#: a disk that fills up while it changes a file in place can crash it and damage the file.
SPACE_MARGIN = 256 * 2**10
_TEMP_MARK = ".tmp-"

_UNKNOWN = object()
#: Files this process failed to close after a storage failure: HDF5 keeps them open, and
#: opening them again would use the broken state.
_BROKEN: dict[str, Exception] = {}
#: Reserve files by (process, the HDF5 file they keep space for).
_RESERVES: dict[tuple[int, str], str] = {}


# ----------------------------------------------------------------------
# Chunk caches
# ----------------------------------------------------------------------
def _next_prime(n: int) -> int:
    n = max(2, n)
    while any(n % d == 0 for d in range(2, math.isqrt(n) + 1)):
        n += 1
    return n


def _chunk_cache(
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    itemsize: int,
    page: tuple[int, ...],
    filtered: bool,
) -> tuple[int, int]:
    """``(nslots, nbytes)`` of the chunk cache of a chunked dataset read in ``page``s.

    Reading a page touches each of its chunks once; only a chunk that a page
    boundary cuts is needed again, by the neighbouring page, and only a
    filtered chunk is costly to fetch twice (it is decompressed whole).  So a
    filtered dataset gets room for one layer of chunks across a page (its
    largest cross-section perpendicular to an axis the pages cut; at least
    one chunk), and an unfiltered one room for a single chunk of up to
    :data:`CACHED_CHUNK_LIMIT`, or none.  A larger cache would fill up with
    chunks that are never read again: memory outside the engine's budget.
    """
    chunk_bytes = max(1, math.prod(chunks) * itemsize)
    if filtered:
        along, cut = [], []
        for s, c, p in zip(shape, chunks, page):
            # A page that is not a whole number of chunks can straddle one more.
            n = -(-p // c) + (1 if p % c else 0)
            along.append(max(1, min(n, -(-s // c))))
            cut.append(p < s)
        per_page = math.prod(along)
        layer = max((per_page // n for n, k in zip(along, cut) if k), default=1)
        nbytes = layer * chunk_bytes
    else:
        nbytes = chunk_bytes if chunk_bytes <= CACHED_CHUNK_LIMIT else 0
    nslots = _next_prime(min(MAX_CACHE_SLOTS, 100 * max(1, nbytes // chunk_bytes)))
    return nslots, nbytes


# ----------------------------------------------------------------------
# Files, paths and metadata
# ----------------------------------------------------------------------
def _is_hdf5(path: str) -> bool:
    try:
        return bool(h5py.is_hdf5(path))
    except OSError:
        return False


def _is_temp(name: str) -> bool:
    return name.rsplit("/", 1)[-1].startswith(".") and _TEMP_MARK in name


def _datasets(group: h5py.Group) -> list[str]:
    """Names of the datasets under ``group`` (hidden temporaries left out)."""
    found: list[str] = []

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset) and not _is_temp(obj.name):
            found.append(obj.name)

    try:
        group.visititems(visit)
    except Exception:
        pass
    return found


def _groups(file: h5py.File) -> list[str]:
    found = ["/"]

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Group):
            found.append("/" + name)

    file.visititems(visit)
    return found


def _listing(names: list[str]) -> str:
    if not names:
        return "none"
    shown = ", ".join(names[:_LISTED])
    return shown + (f" and {len(names) - _LISTED} more" if len(names) > _LISTED else "")


def _lookup(file: h5py.File, name: str) -> Any:
    """The object at ``name`` (following links), or ``None``."""
    try:
        return file.get(name)
    except (KeyError, OSError, ValueError, TypeError):
        return None


def _require_dataset(file: h5py.File, locator: Locator) -> h5py.Dataset:
    path, inner, url = locator.url, locator.path, locator.full_url
    obj = _lookup(file, inner)
    if obj is None:
        raise NotFoundError(
            f"no dataset {inner} in {path} ({url}); datasets in the file: "
            f"{_listing(_datasets(file))}. Check the '#/inner/path' or create it with "
            "oocarr.create",
            url=url,
        )
    if isinstance(obj, h5py.Group):
        raise InvalidUrlError(
            f"{url} names a group, not a dataset; datasets under it: "
            f"{_listing(_datasets(obj))}. Add the dataset's name to the '#/inner/path'",
            url=url,
        )
    if not isinstance(obj, h5py.Dataset):
        raise InvalidUrlError(
            f"{url} names an HDF5 {type(obj).__name__}, not a dataset; point the "
            "'#/inner/path' at a dataset",
            url=url,
        )
    return obj


def _dataset_dtype(dset: h5py.Dataset, locator: Locator) -> np.dtype:
    url = locator.full_url
    try:
        raw = dset.dtype
    except Exception as err:
        raise UnsupportedDtypeError(
            f"{url} has an HDF5 datatype h5py cannot map to NumPy ({err}); oocarr reads "
            "bool, integer, float and complex datasets",
            url=url,
        ) from None
    if raw.kind not in "biufc":
        if h5py.check_string_dtype(raw) is not None:
            what = "string"
        elif raw.kind == "V" and raw.names is None:
            what = f"opaque {raw.itemsize}-byte"
            if raw.itemsize == 2:
                # h5py writes ml_dtypes.bfloat16 as an untagged 2-byte opaque type.
                what += " (bfloat16 written by h5py looks like this; bfloat16 is not supported)"
        else:
            what = f"{raw} ({raw.kind!r} kind)"
        raise UnsupportedDtypeError(
            f"{url} holds {what} data, which the hdf5 driver cannot use; it reads bool, "
            "integer, float and complex datasets (read this one with h5py directly, and "
            "keep bfloat16 arrays in Zarr or a raw memmap file)",
            url=url,
        )
    return as_dtype(np.dtype(raw.str), url=url)


#: Names of the filters hdf5plugin registers, by HDF5 filter id (HDF5's own names for them
#: are ``hdf5`` for LZ4 and Zstd, and ``bitshuffle;`` ...).
_PLUGIN_FILTERS = {
    code: {"bshuf": "bitshuffle"}.get(name, name) for name, code in hdf5plugin.FILTERS.items()
}


def _filters(dset: h5py.Dataset) -> str | None:
    """The dataset's compression in ``create``'s form (``"gzip:4"``, ``"lzf"``)."""
    plist = dset.id.get_create_plist()
    names = []
    for i in range(plist.get_nfilters()):
        code, _flags, values, name = plist.get_filter(i)
        if code in (h5py.h5z.FILTER_SHUFFLE, h5py.h5z.FILTER_FLETCHER32):
            continue
        if code == h5py.h5z.FILTER_DEFLATE:
            names.append(f"gzip:{values[0] if values else DEFAULT_GZIP_LEVEL}")
        elif code == h5py.h5z.FILTER_LZF:
            names.append("lzf")
        elif code in _PLUGIN_FILTERS:
            names.append(_PLUGIN_FILTERS[code])
        else:
            text = name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
            names.append(text.split()[0].lower() if text.strip() else f"filter-{code}")
    return "+".join(names) or None


def _external_link(file: h5py.File, inner: str) -> str | None:
    """The external link on the path of ``inner``, described, if any (found without following
    it: HDF5 opens a link's target file in the mode of the file that holds the link)."""
    parts = inner.strip("/").split("/")
    for i in range(1, len(parts) + 1):
        name = "/" + "/".join(parts[:i])
        try:
            link = file.get(name, getlink=True)
        except (KeyError, OSError, ValueError, RuntimeError):
            return None
        if isinstance(link, h5py.ExternalLink):
            return f"{name} is an HDF5 external link to {link.filename}#{link.path}"
    return None


def _outside(file: h5py.File, dset: h5py.Dataset, inner: str) -> str | None:
    """What makes dataset ``inner`` of ``file`` keep its data outside that file, if anything:
    links that end in another file, external raw storage, or a virtual dataset's sources."""
    home = os.path.realpath(dset.file.filename)
    if home != os.path.realpath(file.filename):
        return f"{inner} leads through links to a dataset in {home}"
    plist = dset.id.get_create_plist()
    if plist.get_external_count() > 0:
        names = [plist.get_external(i)[0] for i in range(plist.get_external_count())]
        shown = ", ".join(os.fsdecode(n) for n in names)
        return f"{inner} keeps its data in external raw files ({shown})"
    if dset.is_virtual:
        files = sorted({s.file_name for s in dset.virtual_sources() if s.file_name != "."})
        if files:
            return f"{inner} is a virtual dataset mapping data in {', '.join(files)}"
    return None


def _check_inside(
    file: h5py.File, dset: h5py.Dataset | None, locator: Locator, *, writing: bool
) -> None:
    """Refuse to write (or, with ``follow_external=False`` or in a remote file, to read) a
    dataset whose data lies outside the file the URL names; ``dset=None`` checks the links on
    its path only.  A remote file's links would lead to local files of the same name."""
    remote = not is_local(locator.url)
    if not writing and not remote and follows_external(locator):
        return
    if dset is None:
        where = _external_link(file, locator.path)
    else:
        where = _outside(file, dset, locator.path)
    if where is None:
        return
    url = locator.full_url
    if writing:
        raise ReadOnlyError(
            f"cannot open {url} for writing: {where}, outside {locator.url}; oocarr never "
            "writes outside the file it was given. Open it with mode='r', or write the "
            "target's own URL",
            url=url,
        )
    if remote:
        raise InvalidStoreError(
            f"cannot read {url}: {where}, outside {locator.url}; the hdf5 driver reads no data "
            "outside a remote file (HDF5 would look for it on the local disk). Copy the files "
            "locally to read through the links",
            url=url,
        )
    raise InvalidStoreError(
        f"cannot read {url} with follow_external=False: {where}, outside {locator.url}; open "
        "it with follow_external=True (the default) to read through links",
        url=url,
    )


def _check_target(file: h5py.File, locator: Locator, overwrite: bool) -> None:
    """Refuse a target whose path runs through a dataset or that names a group."""
    url, inner = locator.full_url, locator.path
    parts = inner.strip("/").split("/")
    for i in range(1, len(parts)):
        prefix = "/" + "/".join(parts[:i])
        outside = _external_link(file, prefix)
        if outside is not None:
            raise ReadOnlyError(
                f"cannot create {url}: {outside}, outside {locator.url}; oocarr never writes "
                "outside the file it was given",
                url=url,
            )
        obj = _lookup(file, prefix)
        if obj is not None and not isinstance(obj, h5py.Group):
            raise InvalidUrlError(
                f"cannot create {url}: {prefix} is a dataset, not a group", url=url
            )
    obj = _lookup(file, inner)
    if isinstance(obj, h5py.Group):
        raise InvalidUrlError(
            f"cannot create {url}: {inner} is a group; name a dataset inside it", url=url
        )
    if obj is not None and not overwrite:
        raise AlreadyExistsError(
            f"an array already exists at {url}; pass overwrite=True to replace it", url=url
        )


def _publish(entry: SharedFile, name: str, locator: Locator, overwrite: bool) -> None:
    """Move dataset ``name`` of ``entry``'s file to ``locator.path``, replacing any old one."""
    file = ensure_file(entry, locator)
    _check_target(file, locator, overwrite)
    entry.forget(name)
    entry.forget(locator.path)
    if _lookup(file, locator.path) is not None:
        del file[locator.path]
    parent = locator.path.rsplit("/", 1)[0]
    if parent:
        file.require_group(parent)
    file.move(name, locator.path)
    file.flush()


def _require_space(path: str, nbytes: int, url: str) -> None:
    """Before HDF5 changes the existing file at ``path`` in place: refuse unless its filesystem
    has room for ``nbytes`` more, and hold :data:`SPACE_MARGIN` of it in a reserve file.

    HDF5 does not journal its metadata: when the disk fills up while it
    changes a file, the file is damaged and closing it can crash the
    interpreter.  The reserve is freed when a write fails anyway (another
    process filled the disk meanwhile), so that HDF5 can close the file
    consistently, and when the store is released.
    """
    try:
        stat = os.statvfs(os.path.dirname(path) or ".")
    except (OSError, AttributeError):
        return
    held = (os.getpid(), path) in _RESERVES
    free, needed = stat.f_bavail * stat.f_frsize, nbytes + (0 if held else SPACE_MARGIN)
    if free < needed:
        raise WriteError(
            f"writing {url} refused: no space left on the device for it ({free} bytes free, "
            f"{needed} needed to change {path} safely; HDF5 can damage a file whose disk fills "
            "up while it is changed). Free some space or write elsewhere; the file is unchanged",
            url=url,
        )
    if not held:
        with LOCK:
            _reserve(path, url)


def _reserve(path: str, url: str) -> None:
    head, tail = os.path.split(path)
    _sweep_reserves(head, f".{tail}.reserve-")
    reserve = os.path.join(head, f".{tail}.reserve-{os.getpid()}")
    try:
        fd = os.open(reserve, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.posix_fallocate(fd, 0, SPACE_MARGIN)
        finally:
            os.close(fd)
    except (OSError, AttributeError) as err:
        with contextlib.suppress(OSError):
            os.remove(reserve)
        if getattr(err, "errno", None) in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            raise storage_error("writing", url, err) from None
        return  # no reserve where the filesystem cannot preallocate
    _RESERVES[(os.getpid(), path)] = reserve


def _sweep_reserves(head: str, prefix: str) -> None:
    """Remove the reserve files that processes which no longer run left beside a file."""
    try:
        names = [n for n in os.listdir(head or ".") if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        pid = name[len(prefix) :]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(head, name))


def _free_reserve(path: str) -> None:
    with LOCK:
        reserve = _RESERVES.pop((os.getpid(), path), None)
    if reserve is not None:
        _remove(reserve)


def _check_usable(path: str, url: str) -> None:
    """Refuse a file this process could not close after a storage failure."""
    if path in _BROKEN:
        raise WriteError(
            f"cannot use {url}: writing {path} failed earlier in this process "
            f"({storage_error('writing', url, _BROKEN[path])}), and HDF5 could not close it; "
            "restart the process to use it again",
            url=url,
        )


def _temp_name(locator: Locator) -> str:
    """A hidden, unique dataset name at the file's root for writing before a move."""
    base = locator.path.rsplit("/", 1)[-1]
    return f"/.{base}{_TEMP_MARK}{os.getpid()}-{os.urandom(4).hex()}"


# ----------------------------------------------------------------------
# The driver
# ----------------------------------------------------------------------
class HDF5Array(BlockedArray):
    """A dataset in an HDF5 file, read and written through ``h5py`` (read only in a remote one).

    Examples
    --------
    >>> import h5py, numpy as np, tempfile, os, oocarr
    >>> path = os.path.join(tempfile.mkdtemp(), "data.h5")
    >>> with h5py.File(path, "w") as f:
    ...     _ = f.create_dataset("g/x", data=np.arange(12.0).reshape(3, 4), chunks=(1, 4),
    ...                          compression="gzip")
    >>> store = oocarr.open(path + "#/g/x").store
    >>> store.name, store.chunks, store.compression, store[2]
    ('hdf5', (1, 4), 'gzip:4', array([ 8.,  9., 10., 11.]))
    >>> store.close()
    """

    name = "hdf5"
    suffixes = HDF5_SUFFIXES
    compressions = frozenset({"gzip", "lzf"})
    supports_out_buffer = True
    supports_partial_chunk_writes = True
    atomic_create = True
    supports_attrs = True
    supports_chunks = True

    def __init__(
        self,
        locator: Locator,
        shape: Sequence[int],
        dtype: Any,
        chunks: Sequence[int] | None,
        *,
        mode: str,
        compression: str | None,
        filtered: bool | None = None,
        file_path: str | None = None,
        dataset_name: str | None = None,
        pending: bool = False,
        overwrite: bool = False,
    ) -> None:
        super().__init__(locator, shape, dtype, chunks, mode=mode, pending=pending)
        # Where the data is now: the target, or the temporary file / dataset while pending.
        self._file_path = file_path or locator.url
        self._dataset_name = dataset_name or locator.path
        self._compression = compression
        # Any filter (shuffle and checksums too) makes HDF5 pass every chunk through the cache.
        self._filtered = compression is not None if filtered is None else filtered
        self._overwrite = overwrite
        self._handle: Handle | None = None
        # The storage failure that makes the open file unsafe to touch again (HDF5 crashes).
        self._failed: Exception | None = None
        self._chunk_decoder: ChunkDecoder | None | object = _UNKNOWN
        # Whether the dataset's bytes are its values (views), known from the first view asked
        self._viewable: bool | None = None

    # -- locating ------------------------------------------------------
    @classmethod
    def locate(
        cls,
        container: str,
        inner: str,
        storage_options: Mapping[str, Any] | None = None,
        driver_options: Mapping[str, Any] | None = None,
    ) -> Locator:
        url = container + (f"#{inner}" if inner else "")
        remote = not is_local(container)
        if storage_options and not remote:
            raise InvalidArgumentError(
                f"storage_options (got {dict(storage_options)}) are for remote files; {url} "
                "is a local file, opened without fsspec",
                url=url,
            )
        driver_options = dict(driver_options or {})
        kept = follow_external_option(driver_options, url)
        if driver_options:
            raise InvalidArgumentError(
                f"unknown hdf5 options {sorted(driver_options)} for {url}; the hdf5 driver "
                "takes only follow_external",
                url=url,
            )
        path = normalize_container(container)
        if not inner:
            raise InvalidUrlError(cls._missing_inner_message(path, url), url=url)
        return Locator.make(cls.name, path, inner, storage_options if remote else None, kept)

    @classmethod
    def _missing_inner_message(cls, path: str, url: str) -> str:
        message = (
            f"{url!r} names a file but no dataset in it; name a dataset: "
            f"{os.path.basename(path)}#/x"
        )
        if is_local(path) and os.path.isfile(path) and _is_hdf5(path):
            loc = Locator.make(cls.name, path, "/")
            try:
                with borrowed(path, False, loc) as entry:
                    message += f"; datasets here: {_listing(_datasets(entry.file))}"
            except OocarrError:
                pass
        return message

    @classmethod
    def supports_dtype(cls, dtype: np.dtype) -> bool:
        return not is_bfloat16(dtype)

    # -- opening -------------------------------------------------------
    @classmethod
    def _open(cls, locator: Locator, mode: str) -> HDF5Array:
        path = locator.url
        if not is_local(path):
            if mode == "r+":
                raise read_only_error(locator)
        else:
            require_exists(os.path.isfile(path), locator, "file")
            _check_usable(path, locator.full_url)
            if not _is_hdf5(path):
                raise not_hdf5(locator)
        with borrowed(path, mode == "r+", locator) as entry:
            _check_inside(entry.file, None, locator, writing=mode == "r+")
            dset = _require_dataset(entry.file, locator)
            _check_inside(entry.file, dset, locator, writing=mode == "r+")
            if dset.shape is None:
                raise corrupt(locator, "the dataset has a null dataspace and holds no array")
            dtype = _dataset_dtype(dset, locator)
            return cls(
                locator,
                dset.shape,
                dtype,
                dset.chunks,
                mode=mode,
                compression=_filters(dset),
                filtered=dset.id.get_create_plist().get_nfilters() > 0,
            )

    # -- creating --------------------------------------------------------
    @classmethod
    def create(cls, locator: Locator, *args: Any, **kwargs: Any) -> BlockedArray:
        """As :meth:`BlockedArray.create`; a remote file is refused (``ReadOnlyError``)."""
        if not is_local(locator.url):
            raise read_only_error(locator, "create an array there")
        return super().create(locator, *args, **kwargs)

    @classmethod
    def _layout(
        cls,
        shape: tuple[int, ...],
        dtype: np.dtype,
        chunks: tuple[int, ...] | None,
        compression: Compression | None,
        url: str,
    ) -> dict[str, Any]:
        """``create_dataset`` keywords for the storage layout."""
        if not shape:
            return {}  # HDF5 scalars are contiguous and unfiltered
        if chunks is None:
            chunks = cls.default_chunks(shape, dtype)
        if chunks is None:  # never: the default chunks every array of at least one axis
            return {}
        layout: dict[str, Any] = {"chunks": tuple(chunks)}
        if any(c > s for c, s in zip(chunks, shape)):
            # HDF5 takes a chunk longer than its axis only when the axis may grow.
            layout["maxshape"] = tuple(None if c > s else s for c, s in zip(chunks, shape))
        if compression is not None:
            if compression.name == "gzip":
                level = DEFAULT_GZIP_LEVEL if compression.level is None else compression.level
                if not 0 <= level <= 9:
                    raise UnsupportedCompressionError(
                        f"gzip level {level} for {url} is outside 0-9; use e.g. 'gzip:4'",
                        url=url,
                    )
                layout.update(compression="gzip", compression_opts=level)
            else:
                if compression.level is not None:
                    raise UnsupportedCompressionError(
                        f"lzf takes no level (got 'lzf:{compression.level}' for {url}); "
                        "write 'lzf'",
                        url=url,
                    )
                layout["compression"] = "lzf"
        return layout

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
    ) -> HDF5Array:
        path, url = locator.url, locator.full_url
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            raise InvalidArgumentError(
                f"cannot create {url}: directory {parent} does not exist; create it first",
                url=url,
            )
        if JSON_ATTRS in attrs:
            raise InvalidArgumentError(
                f"the attribute name {JSON_ATTRS!r} is reserved by the HDF5 driver ({url}); "
                "rename it",
                url=url,
            )
        layout = cls._layout(shape, dtype, chunks, compression, url)
        comp = None
        if shape and "compression" in layout:
            comp = "lzf" if layout["compression"] == "lzf" else f"gzip:{layout['compression_opts']}"
        _check_usable(path, url)
        if os.path.exists(path):
            if not os.path.isfile(path) or not _is_hdf5(path):
                raise InvalidArgumentError(
                    f"cannot create {url}: {path} exists and is not an HDF5 file; remove it "
                    "or pick another file name",
                    url=url,
                )
            _require_space(path, 0 if "compression" in layout else _nbytes(shape, dtype), url)
            file_path, name = path, _temp_name(locator)
        else:
            file_path, name = temp_sibling(path), locator.path
        store = cls(
            locator,
            shape,
            dtype,
            layout.get("chunks"),
            mode="r+",
            compression=comp,
            file_path=file_path,
            dataset_name=name,
            pending=True,
            overwrite=overwrite,
        )
        with LOCK:
            try:
                store._handle = Handle(file_path, True, locator, new=file_path != path)
                file = open_file(store._handle.entry)
                if file_path == path:
                    _check_target(file, locator, overwrite)
                dset = file.create_dataset(name, shape=shape, dtype=dtype, **layout)
                store_attrs(dset, attrs, locator)
            except BaseException as err:
                if isinstance(err, (OSError, RuntimeError)) and not isinstance(err, OocarrError):
                    store._failed = err
                with contextlib.suppress(OSError, RuntimeError):
                    store._abort()  # the error that matters is err
                store._release()
                if isinstance(err, (ValueError, TypeError)) and not isinstance(err, OocarrError):
                    raise InvalidArgumentError(f"cannot create {url}: {err}", url=url) from None
                if store._failed is not None:
                    raise storage_error("creating", url, err) from err
                raise
        return store

    @classmethod
    def exists(cls, locator: Locator) -> bool:
        path = locator.url
        if not is_local(path):
            try:
                with borrowed(path, False, locator) as entry:
                    _check_inside(entry.file, None, locator, writing=False)
                    return isinstance(_lookup(entry.file, locator.path), h5py.Dataset)
            except (NotFoundError, InvalidStoreError):
                return False
        if not os.path.isfile(path) or not _is_hdf5(path):
            return False
        with borrowed(path, False, locator) as entry:
            return isinstance(_lookup(entry.file, locator.path), h5py.Dataset)

    @classmethod
    def delete(cls, locator: Locator) -> None:
        path = locator.url
        if not is_local(path):
            raise read_only_error(locator, "delete it")
        if not os.path.isfile(path):
            return
        if not _is_hdf5(path):
            raise not_hdf5(locator, ", so it holds no dataset")
        _check_usable(path, locator.full_url)
        with borrowed(path, True, locator) as entry:
            file = open_file(entry)
            obj = _lookup(file, locator.path)
            if obj is None:
                return
            _require_space(path, 0, locator.full_url)
            if not isinstance(obj, h5py.Dataset):
                raise InvalidUrlError(
                    f"{locator.full_url} is a group, not a dataset; oocarr deletes datasets "
                    "only (use h5py to remove groups)",
                    url=locator.full_url,
                )
            entry.forget(locator.path)
            try:
                del file[locator.path]
                file.flush()
            finally:
                _free_reserve(path)

    # -- handles --------------------------------------------------------
    def _cache_spec(self) -> tuple[int, int] | None:
        if self._chunks is None:
            return None
        return _chunk_cache(
            self._shape, self._chunks, self.itemsize, self.page_shape, self._filtered
        )

    def _own_handle(self) -> Handle:
        """This process's handle on the file (call with ``LOCK`` held)."""
        handle = self._handle
        if handle is None or handle.pid != os.getpid():
            if handle is not None:
                handle.abandon()
            self._handle = None
            handle = self._handle = Handle(self._file_path, not self.readonly, self._locator)
        return handle

    def _decoder(self, dset: h5py.Dataset) -> ChunkDecoder | None:
        """How this store's chunks are decoded outside HDF5 (``None``: by HDF5); a remote
        file's unfiltered chunks are fetched and copied the same way."""
        if (self._filtered or self._remote) and self._chunk_decoder is _UNKNOWN:
            self._chunk_decoder = decoder_for(dset, self._dtype, raw=self._remote)
        decoder = self._chunk_decoder  # _UNKNOWN, None or a ChunkDecoder
        return decoder if isinstance(decoder, ChunkDecoder) else None

    @property
    def _remote(self) -> bool:
        return not is_local(self._locator.url)

    def _dataset(self) -> h5py.Dataset:
        """This process's dataset handle (call with ``LOCK`` held)."""
        entry = self._own_handle().entry
        dset = entry.dataset(self._dataset_name, self._cache_spec(), self._locator)
        if dset.shape != self._shape or dset.dtype != self._dtype:
            raise corrupt(
                self._locator,
                f"the dataset changed since it was opened (now shape {dset.shape}, dtype "
                f"{dset.dtype}); open it again",
            )
        return dset

    def read_overhead(self, shape: Sequence[int]) -> int:
        """Filtered chunks: each decoding thread holds one stored and up to two decoded
        chunks (HDF5 decoding itself holds as much in its chunk cache).  A remote file: also
        the batch of stored chunks (or runs of a contiguous dataset) fetched."""
        if self._remote and self.chunks is None:
            return contiguous_overhead(tuple(shape), self._shape, self._dtype.itemsize)
        if not (self._filtered or self._remote) or self.chunks is None:
            return 0
        chunks = math.prod(-(-max(1, s) // max(1, c)) for s, c in zip(shape, self.chunks))
        chunk_bytes = math.prod(self.chunks) * self._dtype.itemsize
        decoding = min(decoding_threads(), chunks) * DECODER_CHUNKS * chunk_bytes
        if not self._remote:
            return decoding
        return decoding + min(FETCH_BATCH_BYTES, chunks * (chunk_bytes + MAX_GAP))

    def _read(self, region: tuple[slice, ...], out: np.ndarray) -> None:
        lock = LOCK
        with lock:
            dset = self._dataset()
            decoder = self._decoder(dset)
            remote = self._own_handle().entry.remote  # the handle _dataset() made
            offset = self._contiguous_offset(dset) if remote is not None else None
        try:
            if decoder is not None and self.ndim:
                fetch = None if remote is None else remote.fetch_batches
                decoder.read(dset, region, out, lock, parallel=not lock.held_here(), fetch=fetch)
                return
            if offset is not None and remote is not None:  # (an offset is a remote file's)
                read_contiguous(remote, offset, self._shape, self._dtype, region, out)
                return
            with lock:
                if self.ndim == 0:
                    dset.read_direct(out)
                else:
                    dset.read_direct(out, source_sel=region)
        except OSError as err:
            if isinstance(err, OocarrError) or is_transport_error(err):
                raise
            raise corrupt(self._locator, f"reading {region} failed ({err})") from None

    def _view(self, region: tuple[slice, ...]) -> np.ndarray | None:
        """A mapping of the file's bytes of ``region`` where they are one aligned run
        (:mod:`.hdf5_views`); only while every handle on the file in this process is
        read-only, so that HDF5 holds no newer data in its caches."""
        if self._filtered or self._viewable is False:
            return None
        with LOCK:
            dset = self._dataset()
            entry = self._own_handle().entry  # the handle _dataset() made
            if entry.writable or entry.remote is not None:
                return None
            if self._viewable is None:
                self._viewable = viewable(dset, self._dtype)
            start = view_start(dset, region, self.itemsize) if self._viewable else None
            if start is None:
                return None
            fd = os.dup(open_file(entry).id.get_vfd_handle())
        try:
            return map_view(fd, start, tuple(r.stop - r.start for r in region), self._dtype)
        finally:
            os.close(fd)

    def _contiguous_offset(self, dset: h5py.Dataset) -> int | None:
        """Where a remote contiguous dataset's data starts in the file, when the driver can
        fetch it itself: allocated, unfiltered, stored as this store's dtype (call with
        ``LOCK`` held)."""
        if self._chunks is not None or self._filtered or not self.ndim:
            return None
        if dset.id.get_type().dtype != self._dtype:
            return None
        return dset.id.get_offset()

    def _write(self, region: tuple[slice, ...], value: np.ndarray) -> None:
        with LOCK:
            dset = self._dataset()
            if self._file_path == self._locator.url and not self._allocated(dset):
                _require_space(self._file_path, value.nbytes, self.url)
            try:
                if self.ndim == 0:
                    dset.write_direct(value)
                else:
                    dset.write_direct(value, dest_sel=region)
            except (OSError, RuntimeError) as err:
                raise self._storage_failure("writing", err) from err

    def _allocated(self, dset: h5py.Dataset) -> bool:
        """Whether writes to ``dset`` reuse its file space (unfiltered and fully allocated)."""
        try:
            return not self._filtered and dset.id.get_storage_size() >= self.nbytes
        except (OSError, RuntimeError):
            return False

    def _flush(self) -> None:
        with LOCK:
            if self._failed is not None and not self._pending:
                self._release()  # the failed write was reported; only closing is safe now
                return
            handle = self._handle
            if handle is not None and handle.pid == os.getpid() and handle.entry.file:
                try:
                    handle.entry.file.flush()
                except (OSError, RuntimeError) as err:
                    raise self._storage_failure("flushing", err) from err

    def _release(self) -> None:
        with LOCK:
            handle, self._handle = self._handle, None
            if handle is not None:
                if handle.pid != os.getpid():
                    handle.abandon()
                elif self._failed is not None and self._file_path == self._locator.url:
                    self._close_after_failure(handle)
                else:
                    handle.close()
            if not self.readonly:
                _free_reserve(self._locator.url)

    # -- commit and abort -------------------------------------------------
    def _commit(self) -> None:
        with LOCK:
            if self._file_path != self._locator.url:
                self._commit_new_file()
            elif self._dataset_name != self._locator.path:
                self._commit_in_file()

    def _commit_in_file(self) -> None:
        _require_space(self._file_path, 0, self.url)
        try:
            _publish(self._own_handle().entry, self._dataset_name, self._locator, self._overwrite)
        except (AlreadyExistsError, InvalidUrlError):
            self._abort()
            raise
        except (OSError, RuntimeError) as err:
            if isinstance(err, OocarrError):
                raise
            raise self._storage_failure("committing", err) from err
        self._dataset_name = self._locator.path

    def _commit_new_file(self) -> None:
        locator, tmp = self._locator, self._file_path
        self._release()
        try:
            # A hard link publishes the file only if nothing appeared at the target meanwhile.
            os.link(tmp, locator.url)
        except FileExistsError:
            self._merge_into_existing(tmp)
        except OSError:
            if os.path.exists(locator.url):
                self._merge_into_existing(tmp)
            else:
                os.replace(tmp, locator.url)
        _remove(tmp)
        self._file_path = locator.url

    def _merge_into_existing(self, tmp: str) -> None:
        """Copy the new dataset into a file that appeared at the target after ``create``."""
        locator = self._locator
        try:
            if not _is_hdf5(locator.url):
                raise InvalidArgumentError(
                    f"cannot commit {locator.full_url}: a file that is not HDF5 appeared at "
                    f"{locator.url} meanwhile; the new array was discarded",
                    url=locator.full_url,
                )
            with borrowed(locator.url, True, locator) as entry:
                _check_target(entry.file, locator, self._overwrite)
                name = _temp_name(locator)
                with h5py.File(tmp, "r") as src:
                    src.copy(src[locator.path], entry.file, name=name)
                try:
                    _publish(entry, name, locator, self._overwrite)
                except BaseException:
                    del open_file(entry)[name]
                    raise
        except BaseException:
            _remove(tmp)
            raise

    def _abort(self) -> None:
        with LOCK:
            if self._file_path != self._locator.url:
                self._release()
                _remove(self._file_path)
                return
            if self._dataset_name == self._locator.path:
                return
            if self._failed is not None:
                self._discard_after_failure()
                return
            entry = self._own_handle().entry
            entry.forget(self._dataset_name)
            file = ensure_file(entry, self._locator)
            if _lookup(file, self._dataset_name) is not None:
                del file[self._dataset_name]
                file.flush()
            self._release()

    def _storage_failure(self, action: str, err: Exception) -> OocarrError:
        """The error for a failed write to the file, which is not used again but to close it."""
        self._failed = err
        return storage_error(action, self.url, err)

    def _discard_after_failure(self) -> None:
        """Drop a temporary dataset after a storage failure without using the broken state:
        the file is closed (:meth:`_close_after_failure`), and the dataset deleted from a
        fresh handle."""
        handle, self._handle = self._handle, None
        path = self._locator.url
        if handle is None or handle.pid != os.getpid() or not self._close_after_failure(handle):
            return
        try:
            with borrowed(path, True, self._locator) as entry:
                file = open_file(entry)
                if _lookup(file, self._dataset_name) is not None:
                    del file[self._dataset_name]
                    file.flush()
        except (OSError, RuntimeError):
            pass
        finally:
            _free_reserve(path)

    def _close_after_failure(self, handle: Handle) -> bool:
        """Close the user's file after HDF5 failed to write it; False when it could not.

        After a failed write (a full disk), any other use of the open file
        can crash the interpreter and damage the file.  The reserve file is
        freed first, so that HDF5 has room to write the metadata it holds.
        A file HDF5 cannot close stays open, unused, and is refused to this
        process from then on.
        """
        path = self._locator.url
        _free_reserve(path)
        closed = _close_entry(handle.entry)
        handle.close()
        if not closed:
            _BROKEN[path] = self._failed or RuntimeError(f"HDF5 could not close {path}")
        elif not self._pending:
            self._failed = None  # closed cleanly: a later use reopens the file afresh
        return closed

    # -- attrs and sizes ------------------------------------------------
    def _read_attrs(self) -> dict[str, Any]:
        with LOCK:
            return load_attrs(self._dataset())

    def _write_attrs(self, attrs: dict[str, Any]) -> None:
        with LOCK:
            store_attrs(self._dataset(), attrs, self._locator)

    def _read_native_attrs(self) -> dict[str, Any]:
        with LOCK:
            return load_native_attrs(self._dataset())

    def _read_dimension_names(self) -> tuple[str | None, ...] | None:
        """A netCDF-4 variable's dimensions (its attached dimension scales), else HDF5's
        dimension labels."""
        with LOCK:
            return load_dimension_names(self._dataset())

    def _write_dimension_names(self, names: tuple[str | None, ...]) -> None:
        """Stored as HDF5 dimension labels (``dset.dims[i].label``)."""
        with LOCK:
            store_dimension_names(self._dataset(), names)

    def _stored_nbytes(self) -> int | None:
        with LOCK:
            try:
                return int(self._dataset().id.get_storage_size())
            except OSError:
                return None

    @property
    def compression(self) -> str | None:
        """The dataset's compression in ``create``'s form (``"gzip:4"``, ``"lzf"``), or ``None``.

        Filters other than gzip and lzf are named by their HDF5 filter name;
        several are joined with ``+``.  Shuffle and checksums are not listed.
        """
        return self._compression

    # -- listing and chunk counts -------------------------------------------
    supports_listing = True

    @classmethod
    def list_arrays(
        cls,
        container: str,
        inner: str = "",
        storage_options: Mapping[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """The groups and datasets of a file (under ``inner``), parents first.

        Examples
        --------
        >>> import h5py, numpy as np, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "data.h5")
        >>> with h5py.File(path, "w") as f:
        ...     _ = f.create_dataset("g/x", data=np.zeros((4, 2), "f4"), chunks=(2, 2))
        >>> [(e["path"], e["kind"], e["shape"]) for e in HDF5Array.list_arrays(path)]
        [('/g', 'group', None), ('/g/x', 'array', (4, 2))]
        """
        locator = cls.locate(container, inner or "/", storage_options)
        path = locator.url
        if is_local(path):
            require_exists(os.path.isfile(path), locator, "file")
            if not _is_hdf5(path):
                raise not_hdf5(locator)
        with borrowed(path, False, locator) as entry:
            _check_inside(entry.file, None, locator, writing=False)
            top = _lookup(entry.file, locator.path)
            if top is None:
                raise NotFoundError(
                    f"no group or dataset {locator.path} in {path}; datasets in the file: "
                    f"{_listing(_datasets(entry.file))}",
                    url=locator.full_url,
                )
            if isinstance(top, h5py.Dataset):
                return [_list_entry(path, top)]
            found: list[dict[str, Any]] = []

            def visit(_name: str, obj: Any) -> None:
                if isinstance(obj, (h5py.Group, h5py.Dataset)) and not _is_temp(obj.name):
                    found.append(_list_entry(path, obj))

            top.visititems(visit)
        return sorted(found, key=lambda e: e["path"].split("/"))

    @classmethod
    def group_attrs(
        cls, container: str, inner: str = "", storage_options: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """The attributes of a group of the file (the root group when ``inner`` is ``""``),
        as :func:`load_native_attrs` reads them.

        Examples
        --------
        >>> import h5py, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "data.nc")
        >>> with h5py.File(path, "w") as f:
        ...     f.create_group("g").attrs["title"] = "run 1"
        >>> HDF5Array.group_attrs(path, "/g")
        {'title': 'run 1'}
        """
        locator = cls.locate(container, inner or "/", storage_options)
        path = locator.url
        if is_local(path):
            require_exists(os.path.isfile(path), locator, "file")
            if not _is_hdf5(path):
                raise not_hdf5(locator)
        with borrowed(path, False, locator) as entry:
            _check_inside(entry.file, None, locator, writing=False)
            group = _lookup(entry.file, locator.path)
            if not isinstance(group, h5py.Group):
                raise NotFoundError(
                    f"no group {locator.path} in {path}; groups in the file: "
                    f"{_listing(_groups(entry.file))}",
                    url=locator.full_url,
                )
            return load_native_attrs(group)

    def initialized_chunks(self) -> tuple[int, int] | None:
        """``(allocated, total)`` chunks of a chunked dataset (``None`` when contiguous)."""
        total = self.chunk_count()
        if total is None:
            return None
        with LOCK:
            try:
                return int(self._dataset().id.get_num_chunks()), total
            except (OSError, AttributeError):
                return None


def _nbytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    return math.prod(shape) * np.dtype(dtype).itemsize


def _close_entry(entry: SharedFile) -> bool:
    """Close ``entry``'s file after a failed write (its other stores reopen it on next use);
    False when HDF5 could not close it.

    HDF5 2.0 refuses to close a file whose metadata flush failed ("slist
    already enabled?") but closes it after one more flush attempt, which
    writes the metadata it holds once there is space again (the reserve
    file was freed first).
    """
    for name in list(entry.datasets):
        entry.forget(name)
    file, entry.file = entry.file, None
    if file is None or not file.id.valid:
        return True
    for step in (file.flush, file.close):
        try:
            step()
        except Exception:
            pass
    return not file.id.valid


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _list_entry(path: str, obj: Any) -> dict[str, Any]:
    """One ``list_arrays`` entry for a group or dataset of the file at ``path``."""
    entry = {"path": obj.name, "url": f"{path}#{obj.name}", "kind": "group"}
    if isinstance(obj, h5py.Group):
        return {**entry, "shape": None, "dtype": None, "chunks": None}
    raw = obj.dtype
    if raw.kind in "biufc":
        dtype: Any = np.dtype(raw.str)
    elif h5py.check_string_dtype(raw) is not None:
        dtype = "string"
    else:
        dtype = f"unsupported {raw}"
    return {**entry, "kind": "array", "shape": obj.shape, "dtype": dtype, "chunks": obj.chunks}
