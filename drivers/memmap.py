"""The memmap driver: ``.npy`` files and raw binary files, read through ``numpy.memmap``.

URL forms
---------
``path/to/data.npy`` (or ``file:///abs/data.npy``)
    A standard ``.npy`` file, created with NumPy's own header so
    ``np.load`` reads it; Fortran-ordered files are read too.
``path/to/data.bin`` with ``driver="memmap", shape=..., dtype=...``
    A raw binary file (C order); ``offset=`` skips a header.

Attributes live in a sidecar JSON file ``<name>.attrs.json`` written only
when there are attributes.  A created file is written under a hidden
temporary name beside the target and renamed into place on commit.
"""

from __future__ import annotations

import itertools
import json
import math
import mmap
import os
import threading
import tokenize
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from oocarr.errors import (
    InvalidArgumentError,
    InvalidStoreError,
    InvalidUrlError,
    ReadOnlyError,
    UnsupportedDtypeError,
)
from oocarr.store import (
    BlockedArray,
    Compression,
    Locator,
    as_dtype,
    corrupt,
    dtype_token,
    follow_external_option,
    follows_external,
    is_bfloat16,
    is_local,
    normalize_container,
    require_exists,
    storage_error,
    temp_sibling,
)
from oocarr_drivers.claims import MEMMAP_SUFFIXES, memmap_can_list, memmap_can_open
from oocarr_drivers.mapped_views import map_view

__all__ = ["MemmapArray"]

ATTRS_SUFFIX = ".attrs.json"

#: Regions whose contiguous runs are shorter than this are copied out of a mapping of a few
#: rows at a time, instead of one ``pread`` per run: a 512×256 float32 panel of a 2048-wide
#: file (512 runs of 1 KiB) took 0.68 ms with a ``pread`` per run, 0.08 ms from a mapping.
SHORT_RUN_BYTES = 64 * 1024
#: Fewest runs read from a mapping: a mapping costs about 20 µs, a ``pread`` of a short run 3-7
#: (2 runs: 14 µs by ``pread``, 21 mapped; 8 runs: 28 and 25; 128 runs: 318 and 33).
MAPPED_RUNS = 8
#: Most bytes mapped at once by such a read: its touched pages count in the process's
#: RSS until the window is unmapped, right after its rows are copied.
READ_WINDOW_BYTES = 2 * 2**20


#: Largest byte size of an array: NumPy's (and the file system's) sizes are 64-bit signed.
MAX_NBYTES = 2**63 - 1


def _write_json_temp(path: str, data: Mapping[str, Any]) -> str:
    """Write ``data`` to a fresh temporary beside ``path`` (removed if that fails)."""
    tmp = temp_sibling(path)
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
    except BaseException:
        _discard(tmp)
        raise
    return tmp


def _write_json_atomic(path: str, data: Mapping[str, Any]) -> None:
    os.replace(_write_json_temp(path, data), path)


def _layout_ints(value: Any, name: str, url: str) -> list[int]:
    """Non-negative integers from a ``shape=``/``offset=`` option: an int, a sequence of ints,
    or their text (``"10"``, ``"10,4"``, ``"(10, 4)"``, as ``-O shape=10,4`` gives it)."""
    items = value
    if isinstance(value, str):
        text = value.strip().strip("()[]").strip()
        items = [part.strip() for part in text.split(",") if part.strip()] if text else []
    elif np.ndim(value) == 0:
        items = [value]
    try:
        out = [_exact_int(item) for item in items]
    except (TypeError, ValueError, OverflowError):
        raise InvalidArgumentError(
            f"{name}={value!r} for {url} must be non-negative integers, e.g. "
            f"{name}={'(10, 4)' if name == 'shape' else '128'}",
            url=url,
        ) from None
    if any(n < 0 for n in out):
        raise InvalidArgumentError(
            f"{name}={value!r} for {url} has a negative value; give lengths >= 0", url=url
        )
    return out


def _exact_int(item: Any) -> int:
    if isinstance(item, (bool, np.bool_)):
        raise TypeError(item)
    if isinstance(item, str):
        return int(item, 10)
    number = int(item)
    if number != item:
        raise ValueError(item)
    return number


def _too_large(shape: tuple[int, ...], itemsize: int) -> bool:
    """Whether no array of ``shape`` can exist (NumPy counts zero-length axes as 1 here)."""
    return math.prod(max(n, 1) for n in shape) * max(itemsize, 1) > MAX_NBYTES


def _npy_header(path: str) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """Shape, Fortran flag, dtype and data offset of a ``.npy`` file."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        return tuple(shape), fortran, dtype, f.tell()


def _runs(
    shape: Sequence[int], region: Sequence[slice], itemsize: int
) -> Iterator[tuple[int, int]]:
    """``(byte offset, byte length)`` of the contiguous runs a C-order region covers, in order."""
    if not shape:
        yield 0, itemsize
        return
    split = len(shape) - 1
    while split > 0 and region[split].start == 0 and region[split].stop == shape[split]:
        split -= 1
    strides = [math.prod(shape[axis + 1 :]) for axis in range(len(shape))]
    run = (region[split].stop - region[split].start) * strides[split] * itemsize
    outer = [range(r.start, r.stop) for r in region[:split]]
    for index in itertools.product(*outer):
        elem = sum(i * s for i, s in zip(index, strides)) + region[split].start * strides[split]
        yield elem * itemsize, run


def _pread_exactly(fd: int, buffer: np.ndarray, offset: int, locator: Locator) -> None:
    # numpy's stubs give ndarray the buffer protocol's __buffer__ from Python 3.12 on only
    view, done = memoryview(buffer), 0  # type: ignore[arg-type]
    while done < len(view):
        got = os.preadv(fd, [view[done:]], offset + done)
        if got == 0:
            raise corrupt(locator, f"the file ended at byte {offset + done}; it was truncated")
        done += got


class _Descriptor:
    """One process's descriptor on a data file, closed by :meth:`close` or, at the latest,
    when the last store sharing it (a store and its ``with_pages`` views) is collected."""

    __slots__ = ("fd", "pid", "_finalizer", "__weakref__")

    def __init__(self, path: str, flags: int) -> None:
        self.fd = os.open(path, flags)
        self.pid = os.getpid()
        self._finalizer = weakref.finalize(self, _close_fd, self.fd, self.pid)
        # at exit the operating system closes it; closing it early could pull it from under
        # a daemon thread still reading
        self._finalizer.atexit = False

    def close(self) -> None:
        self._finalizer()


def _close_fd(fd: int, pid: int) -> None:
    if os.getpid() == pid:
        try:
            os.close(fd)
        except OSError:
            pass


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _discard(path: str) -> None:
    """Remove a temporary file if it is there and can be removed (cleanup after a failure)."""
    try:
        os.remove(path)
    except OSError:
        pass


class PendingFile:
    """Where a pending file's data goes, for writers in other processes: the locator and the
    hidden file the creator writes until it commits (renaming it into place)."""

    def __init__(
        self, locator: Locator, shape: Sequence[int], dtype: Any, data_path: str, offset: int
    ) -> None:
        self.locator = locator
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.data_path = data_path
        self.offset = offset

    def __repr__(self) -> str:
        return f"PendingFile({self.locator.full_url!r})"

    def open(self) -> MemmapArray:
        """A writable array over the pending data (closing it commits nothing: the creator
        does)."""
        return MemmapArray(
            self.locator,
            self.shape,
            self.dtype,
            mode="r+",
            data_path=self.data_path,
            offset=self.offset,
        )


class MemmapArray(BlockedArray):
    """A ``.npy`` or raw binary file mapped with ``numpy.memmap``.

    Examples
    --------
    >>> import numpy as np, tempfile, os, oocarr
    >>> path = os.path.join(tempfile.mkdtemp(), "x.npy")
    >>> np.save(path, np.arange(6).reshape(2, 3))
    >>> store = oocarr.open(path).store
    >>> store.name, store.chunks, store[1]
    ('memmap', None, array([3, 4, 5]))
    """

    name = "memmap"
    suffixes = MEMMAP_SUFFIXES
    compressions = frozenset()
    supports_out_buffer = True
    supports_chunks = False

    def __init__(
        self,
        locator: Locator,
        shape: Sequence[int],
        dtype: Any,
        *,
        mode: str,
        data_path: str,
        offset: int,
        pending: bool = False,
    ) -> None:
        super().__init__(locator, shape, dtype, None, mode=mode, pending=pending)
        self._data_path = data_path
        self._offset = offset
        self._handle_lock = threading.Lock()
        self._mm: np.memmap | None = None
        self._mm_pid: int | None = None
        self._fd: _Descriptor | None = None
        self._pending_attrs: dict[str, Any] | None = None
        self._order: Literal["C", "F"] = "C"

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
        if not is_local(container):
            raise InvalidUrlError(
                f"the memmap driver maps local files only, not {url!r}; use the fsspec "
                "driver (a .zarr URL) for remote storage",
                url=url,
            )
        if inner:
            raise InvalidUrlError(
                f"{url!r}: a .npy or raw file holds one array; drop the '#{inner}' part",
                url=url,
            )
        if storage_options:
            raise InvalidArgumentError(
                f"the memmap driver takes no storage_options (got {dict(storage_options)}) "
                f"for {url}",
                url=url,
            )
        path = normalize_container(container)
        opts = dict(driver_options or {})
        kept = follow_external_option(opts, url)
        unknown = set(opts) - {"shape", "dtype", "offset"}
        if unknown:
            raise InvalidArgumentError(
                f"unknown memmap options {sorted(unknown)} for {url}; it takes shape=, "
                "dtype= and offset= for raw binary files, and follow_external=",
                url=url,
            )
        raw: dict[str, Any] = {}
        if opts or not path.lower().endswith(".npy"):
            raw = {"raw": True, "offset": 0}
            if "offset" in opts:
                offset = _layout_ints(opts["offset"], "offset", url)
                if len(offset) != 1:
                    raise InvalidArgumentError(
                        f"offset={opts['offset']!r} for {url} must be one integer >= 0", url=url
                    )
                raw["offset"] = offset[0]
            if "dtype" in opts:
                raw["dtype"] = dtype_token(as_dtype(opts["dtype"], url=url))
            if "shape" in opts:
                raw["shape"] = _layout_ints(opts["shape"], "shape", url)
                itemsize = as_dtype(opts["dtype"]).itemsize if "dtype" in opts else 1
                if _too_large(tuple(raw["shape"]), itemsize):
                    raise InvalidArgumentError(
                        f"shape={opts['shape']!r} for {url} is larger than any array can be",
                        url=url,
                    )
        return Locator.make(cls.name, path, "", None, {**raw, **kept})

    @classmethod
    def can_open(cls, container: str, inner: str, storage_options: Mapping[str, Any]) -> bool:
        return memmap_can_open(container, inner, storage_options)

    @classmethod
    def scratch_locator(
        cls, directory: str, stem: str, shape: Sequence[int] | None, dtype: Any
    ) -> Locator:
        """A ``.npy`` file, or for bfloat16 (which ``.npy`` cannot record) a raw ``.bin`` file
        whose locator holds the layout.

        Examples
        --------
        >>> MemmapArray.scratch_locator("/tmp/s", "w", (2, 3), "bfloat16").driver_kwargs["shape"]
        [2, 3]
        """
        if dtype is None or shape is None or not is_bfloat16(as_dtype(dtype)):
            return super().scratch_locator(directory, stem, shape, dtype)
        layout = {"shape": [int(n) for n in shape], "dtype": as_dtype(dtype)}
        return cls.locate(f"{directory}/{stem}.bin", "", None, layout)

    @staticmethod
    def _is_raw(locator: Locator) -> bool:
        return bool(locator.driver_kwargs.get("raw"))

    @classmethod
    def supports_dtype(cls, dtype: np.dtype) -> bool:
        return True

    # -- opening and creating -----------------------------------------
    @classmethod
    def _open(cls, locator: Locator, mode: str) -> MemmapArray:
        path = locator.url
        require_exists(os.path.isfile(path), locator, "file")
        if os.path.islink(path) and (mode == "r+" or not follows_external(locator)):
            cls._refuse_link(path, mode)
        if cls._is_raw(locator):
            opts = locator.driver_kwargs
            if "shape" not in opts or "dtype" not in opts:
                raise InvalidArgumentError(
                    f"{path} is not a .npy file, so give its layout: "
                    "oocarr.open(url, driver='memmap', shape=(...), dtype='float32')",
                    url=path,
                )
            shape, dtype, offset = tuple(opts["shape"]), as_dtype(opts["dtype"]), opts["offset"]
            order: Literal["C", "F"] = "C"
            need = offset + math.prod(shape) * dtype.itemsize
            have = os.path.getsize(path)
            if have < need:
                raise corrupt(
                    locator,
                    f"the file has {have} bytes but offset {offset} + shape {shape} of "
                    f"{dtype} needs {need}",
                )
        else:
            shape, dtype, offset, order = cls._read_npy_header(locator)
        store = cls(locator, shape, dtype, mode=mode, data_path=path, offset=offset)
        store._order = order
        return store

    @staticmethod
    def _refuse_link(path: str, mode: str) -> None:
        """A file that is a symbolic link is read through (unless ``follow_external=False``)
        but never written through: a write changes the file the URL names, not another."""
        target = os.path.realpath(path)
        if mode == "r+":
            raise ReadOnlyError(
                f"cannot open {path} for writing: it is a symbolic link to {target}, and oocarr "
                "writes only the file a URL names; open the target's own path, or replace the "
                "link by a copy",
                url=path,
            )
        raise InvalidStoreError(
            f"cannot read {path} with follow_external=False: it is a symbolic link to {target}",
            url=path,
        )

    @staticmethod
    def _read_npy_header(
        locator: Locator,
    ) -> tuple[tuple[int, ...], np.dtype, int, Literal["C", "F"]]:
        path = locator.url
        try:
            shape, fortran, dtype, offset = _npy_header(path)
        except (ValueError, OSError, SyntaxError, tokenize.TokenError) as err:
            raise corrupt(locator, f"not a readable .npy file ({err})") from None
        dtype = as_dtype(dtype, url=path)
        if any(n < 0 for n in shape):
            raise corrupt(locator, f"the header's shape {tuple(shape)} has a negative length")
        if _too_large(tuple(shape), dtype.itemsize):
            raise corrupt(locator, f"the header's shape {tuple(shape)} is larger than any array")
        need = offset + math.prod(shape) * dtype.itemsize
        have = os.path.getsize(path)
        if have < need:
            raise corrupt(locator, f"the file is truncated: {have} bytes of {need} expected")
        return tuple(shape), dtype, offset, "F" if fortran else "C"

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
    ) -> MemmapArray:
        path = locator.url
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            raise InvalidArgumentError(
                f"cannot create {path}: directory {parent} does not exist; create it first",
                url=path,
            )
        raw = cls._is_raw(locator)
        if not raw and is_bfloat16(dtype):
            raise UnsupportedDtypeError(
                f".npy files cannot record bfloat16 ({path}); store it as a raw file "
                "(driver='memmap', shape=, dtype='bfloat16') or in Zarr",
                url=path,
            )
        for taken in (path, path + ATTRS_SUFFIX):
            if os.path.lexists(taken) and not os.path.isfile(taken):
                raise InvalidArgumentError(
                    f"cannot create {path}: {taken} exists and is not a file (a directory?); "
                    "remove it or pick another name",
                    url=path,
                )
        tmp = temp_sibling(path)
        try:
            if raw:
                opts = locator.driver_kwargs
                offset = opts.get("offset", 0)
                if opts.get("shape", list(shape)) != list(shape) or (
                    "dtype" in opts and as_dtype(opts["dtype"]) != dtype
                ):
                    raise InvalidArgumentError(
                        f"driver options {opts} disagree with shape {shape} and dtype {dtype} "
                        f"given to create {path}",
                        url=path,
                    )
                with open(tmp, "wb") as f:
                    f.truncate(offset + math.prod(shape) * dtype.itemsize)
                locator = Locator.make(
                    cls.name,
                    path,
                    "",
                    None,
                    {
                        "raw": True,
                        "offset": offset,
                        "shape": list(shape),
                        "dtype": dtype_token(dtype),
                    },
                )
            else:
                np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=shape).flush()
                offset = _npy_header(tmp)[3]
        except OSError as err:
            _discard(tmp)
            raise storage_error("creating", path, err) from err
        store = cls(locator, shape, dtype, mode="r+", data_path=tmp, offset=offset, pending=True)
        store._pending_attrs = dict(attrs)
        return store

    @classmethod
    def exists(cls, locator: Locator) -> bool:
        return os.path.isfile(locator.url)

    @classmethod
    def delete(cls, locator: Locator) -> None:
        _remove(locator.url)
        _remove(locator.url + ATTRS_SUFFIX)

    # -- handles --------------------------------------------------------
    def _ensure_mapped(self) -> np.memmap | None:
        """A memmap for this process (Fortran-ordered files only; ``None`` when empty)."""
        if self.size == 0:
            return None
        with self._handle_lock:
            if self._mm is None or self._mm_pid != os.getpid():
                mode: Literal["r", "r+"] = "r" if self.readonly else "r+"
                try:
                    self._mm = np.memmap(
                        self._data_path,
                        dtype=self.dtype,
                        mode=mode,
                        shape=self.shape,
                        offset=self._offset,
                        order=self._order,
                    )
                except (ValueError, OSError) as err:
                    raise corrupt(self.locator, f"cannot map the file ({err})") from None
                self._mm_pid = os.getpid()
            return self._mm

    def _file(self) -> int:
        """This process's file descriptor on the data file."""
        with self._handle_lock:
            if self._fd is None or self._fd.pid != os.getpid():
                flags = os.O_RDONLY if self.readonly else os.O_RDWR
                try:
                    self._fd = _Descriptor(self._data_path, flags)
                except OSError as err:
                    raise corrupt(self.locator, f"cannot open the file ({err})") from None
            return self._fd.fd

    # Reads and writes of C-ordered files go through pread/pwrite rather than a mapping:
    # pages of a mapping stay resident in the process (and count in its RSS) until it is
    # unmapped, which would break the memory budget on arrays larger than memory.
    def _read(self, region: tuple[slice, ...], out: np.ndarray) -> None:
        if self._order == "F":
            mm = self._ensure_mapped()
            if mm is not None:  # None: an empty array, nothing to read
                np.copyto(out, mm[region])
            return
        if self._read_mapped(region, out):
            return
        fd, buffer, pos = self._file(), out.reshape(-1).view(np.uint8), 0
        for offset, nbytes in _runs(self.shape, region, self.itemsize):
            _pread_exactly(fd, buffer[pos : pos + nbytes], self._offset + offset, self.locator)
            pos += nbytes

    def _read_mapped(self, region: tuple[slice, ...], out: np.ndarray) -> bool:
        """Copy a region of short runs out of mappings of at most :data:`READ_WINDOW_BYTES`
        of whole rows each, unmapped as soon as their rows are copied; ``False`` (nothing
        read) for long runs, fewer than :data:`MAPPED_RUNS`, rows larger than a window, or a
        file shorter than the region."""
        if not self.ndim or out.size == 0:
            return False
        first = next(_runs(self.shape, region, self.itemsize))
        row_bytes = math.prod(self.shape[1:]) * self.itemsize
        if first[1] >= SHORT_RUN_BYTES or out.nbytes // first[1] < MAPPED_RUNS:
            return False  # long runs, or few: a pread each is as fast
        if row_bytes > READ_WINDOW_BYTES or row_bytes == 0:
            return False
        fd = self._file()
        rows = region[0]
        if self._offset + rows.stop * row_bytes > os.fstat(fd).st_size:
            return False  # the reads say where the file ends
        per = READ_WINDOW_BYTES // row_bytes
        inner = (slice(None), *region[1:])
        for top in range(rows.start, rows.stop, per):
            count = min(per, rows.stop - top)
            start = self._offset + top * row_bytes
            base = start - start % mmap.ALLOCATIONGRANULARITY
            window = mmap.mmap(
                fd,
                start + count * row_bytes - base,
                flags=mmap.MAP_SHARED,
                prot=mmap.PROT_READ,
                offset=base,
            )
            try:
                block = np.frombuffer(
                    window, self.dtype, count * row_bytes // self.itemsize, offset=start - base
                ).reshape((count, *self.shape[1:]))
                np.copyto(out[top - rows.start : top - rows.start + count], block[inner])
                del block
            finally:
                window.close()
        return True

    # A view maps only its own region, and only when it is one run of the file.
    def _view(self, region: tuple[slice, ...]) -> np.ndarray | None:
        runs = list(itertools.islice(_runs(self.shape, region, self.itemsize), 2))
        if self._order == "F" or len(runs) != 1:
            return None
        shape = tuple(r.stop - r.start for r in region)
        return map_view(self._file(), self._offset + runs[0][0], shape, self.dtype)

    def _write(self, region: tuple[slice, ...], value: np.ndarray) -> None:
        if self._order == "F":
            try:
                mm = self._ensure_mapped()
                if mm is not None:  # None: an empty array, nothing to write
                    mm[region] = value
            except OSError as err:
                raise storage_error("writing", self.url, err) from err
            return
        fd, data, pos = self._file(), value.reshape(-1).view(np.uint8), 0
        for offset, nbytes in _runs(self.shape, region, self.itemsize):
            view = memoryview(data[pos : pos + nbytes])  # type: ignore[arg-type]  # (as above)
            written = 0
            while written < nbytes:
                try:
                    written += os.pwrite(fd, view[written:], self._offset + offset + written)
                except OSError as err:
                    raise storage_error("writing", self.url, err) from err
            pos += nbytes

    def _flush(self) -> None:
        with self._handle_lock:
            if self._mm is not None and self._mm_pid == os.getpid():
                try:
                    self._mm.flush()
                except OSError as err:
                    raise storage_error("writing", self.url, err) from err

    def _release(self) -> None:
        with self._handle_lock:
            if self._mm is not None and self._mm_pid == os.getpid():
                self._mm.flush()
            self._mm = None
            self._mm_pid = None
            if self._fd is not None:
                self._fd.close()
            self._fd = None

    def _commit(self) -> None:
        self._release()
        path = self.locator.url
        attrs_tmp = None
        try:
            # both files are written before either replaces what was there
            if self._pending_attrs:
                attrs_tmp = _write_json_temp(path + ATTRS_SUFFIX, self._pending_attrs)
            os.replace(self._data_path, path)
        except OSError as err:
            if attrs_tmp is not None:
                _discard(attrs_tmp)
            raise storage_error("committing", path, err) from err
        if attrs_tmp is not None:
            os.replace(attrs_tmp, path + ATTRS_SUFFIX)
        else:
            _remove(path + ATTRS_SUFFIX)
        self._pending_attrs = None
        self._data_path = path

    def _abort(self) -> None:
        self._release()
        _discard(self._data_path)
        self._pending_attrs = None

    def parallel_writer(self) -> PendingFile | None:
        """Writers in other processes of a pending C-ordered file: each writes its regions'
        byte runs in place with ``pwrite``, so disjoint regions need no coordination, and a
        retried region is written again whole (F-ordered files are written through a mapping,
        by this process only)."""
        if not self.pending or self._order != "C" or self.size == 0:
            return None
        return PendingFile(self.locator, self.shape, self.dtype, self._data_path, self._offset)

    # -- attrs and sizes ------------------------------------------------
    def _read_attrs(self) -> dict[str, Any]:
        if self._pending_attrs is not None:
            return dict(self._pending_attrs)
        path = self.locator.url + ATTRS_SUFFIX
        try:
            with open(path, encoding="utf-8") as f:
                attrs = json.load(f)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as err:
            raise corrupt(self.locator, f"the attrs file {path} is unreadable ({err})") from None
        return attrs if isinstance(attrs, dict) else {}

    def _write_attrs(self, attrs: dict[str, Any]) -> None:
        if self._pending_attrs is not None:
            self._pending_attrs = dict(attrs)
            return
        try:
            if attrs:
                _write_json_atomic(self.locator.url + ATTRS_SUFFIX, attrs)
            else:
                _remove(self.locator.url + ATTRS_SUFFIX)
        except OSError as err:
            raise storage_error("writing the attrs of", self.url, err) from err

    def _stored_nbytes(self) -> int | None:
        try:
            return os.path.getsize(self._data_path)
        except OSError:
            return None

    # -- listing ----------------------------------------------------------
    supports_listing = True

    @classmethod
    def can_list(cls, container: str, storage_options: Mapping[str, Any]) -> bool:
        """A local ``.npy`` file or a local directory (of ``.npy`` files)."""
        return memmap_can_list(container, storage_options)

    @classmethod
    def list_arrays(
        cls,
        container: str,
        inner: str = "",
        storage_options: Mapping[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """The ``.npy`` files of a directory (not recursive), or the one ``.npy`` file named.

        Examples
        --------
        >>> import numpy as np, tempfile, os
        >>> d = tempfile.mkdtemp()
        >>> np.save(os.path.join(d, "b.npy"), np.zeros(3, ">i2"))
        >>> [(e["path"], e["dtype"]) for e in MemmapArray.list_arrays(d)]
        [('b.npy', dtype('>i2'))]
        """
        path = cls.locate(container, inner, storage_options).url
        if os.path.isdir(path):
            names = sorted(
                n
                for n in os.listdir(path)
                if n.lower().endswith(".npy")
                and not n.startswith(".")
                and os.path.isfile(os.path.join(path, n))
            )
            return [_npy_entry(os.path.join(path, n), n) for n in names]
        require_exists(os.path.isfile(path), Locator.make(cls.name, path), "file or directory")
        return [_npy_entry(path, os.path.basename(path))]

    @classmethod
    def member_url(cls, container: str, inner: str, name: str) -> str:
        """A ``.npy`` file under the directory ``container``: ``DIR/slot0/w.npy``.

        Examples
        --------
        >>> MemmapArray.member_url("/runs/ckpt", "", "slot0/w")
        '/runs/ckpt/slot0/w.npy'
        """
        if inner:
            raise InvalidUrlError(
                f"{container}#{inner}: a memmap container is a directory; drop the "
                f"'#{inner}' part or put it in the directory's path",
                url=f"{container}#{inner}",
            )
        return os.path.join(normalize_container(container), *name.split("/")) + ".npy"

    @classmethod
    def prepare_member(cls, locator: Locator) -> None:
        """Make the directories of a member file (see :meth:`member_url`)."""
        os.makedirs(os.path.dirname(locator.url), exist_ok=True)


def _npy_entry(path: str, name: str) -> dict[str, Any]:
    """One ``list_arrays`` entry for the ``.npy`` file at ``path``."""
    shape: tuple[int, ...] | None
    dtype: np.dtype | str
    try:
        shape, _fortran, dtype, _offset = _npy_header(path)
    except (ValueError, OSError, SyntaxError):
        shape, dtype = None, "unreadable .npy header"
    return {
        "path": name,
        "url": path,
        "kind": "array",
        "shape": None if shape is None else tuple(shape),
        "dtype": dtype,
        "chunks": None,
    }
