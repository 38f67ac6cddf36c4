"""``BlockedArray``: the one page-store interface between storage and everything else.

A driver subclasses :class:`BlockedArray` and supplies a handful of
primitives (open, create, exists, delete, region read and write, attrs);
the base class derives the rest once for every driver: page shapes, the
block grid, block reads and writes, NumPy indexing, ``info()``, pickling
by locator and the create-then-commit life cycle.

The contract, which the conformance suite in ``tests/`` checks for every
registered driver:

* Metadata (``shape``, ``dtype``, ``chunks``, ``attrs``) is read when the
  array is opened; storage handles are opened lazily, per process, and
  reopened after ``close()`` or a ``fork``.
* An array made by :meth:`BlockedArray.create` is *pending*: it becomes
  visible at its URL only when :meth:`commit` (or :meth:`close`, or the
  end of a ``with`` block without an exception) says it is complete.
  :meth:`abort`, or an exception inside the ``with`` block, discards it
  and leaves whatever was at the URL before untouched.
* ``_read`` fills a C-contiguous buffer of the array's dtype; ``_write``
  receives exactly the region's shape and the array's dtype.
"""

from __future__ import annotations

import abc
import atexit
import json
import math
import os
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Literal, NoReturn, overload

import numpy as np

from oocarr.errors import (
    AlreadyExistsError,
    DtypeMismatchError,
    InvalidArgumentError,
    InvalidStoreError,
    InvalidUrlError,
    NotFoundError,
    OocarrError,
    ReadOnlyError,
    ShapeMismatchError,
    UnsupportedDtypeError,
)

from . import locks, pages
from .buffers import aligned_empty
from .compression import Compression, parse_compression
from .dtypes import as_dtype, byte_order, dtype_name
from .locator import Locator, normalize_container
from .regions import check_region, parse_key
from .storage_errors import transport_failures

__all__ = ["BlockedArray", "jsonable_attrs", "require_exists", "corrupt", "temp_sibling"]

_MODES = ("r", "r+")
_SECRET_WORDS = ("secret", "password", "token", "key", "credential")


def jsonable_attrs(attrs: Mapping[str, Any], *, url: str | None = None) -> dict[str, Any]:
    """Convert attribute values to JSON types (NumPy scalars and arrays to lists, bytes to str).

    Raises
    ------
    InvalidArgumentError
        When a value has no JSON form.

    Examples
    --------
    >>> jsonable_attrs({"scale": np.float32(0.5), "axes": np.array([1, 2]), "name": b"x"})
    {'scale': 0.5, 'axes': [1, 2], 'name': 'x'}
    """

    def convert(value: Any) -> Any:
        if isinstance(value, bytes):
            return value.decode("utf-8", errors="replace")
        if isinstance(value, np.ndarray):
            return [convert(v) for v in value.tolist()] if value.ndim else convert(value.item())
        if isinstance(value, np.generic):
            return convert(value.item())
        if isinstance(value, Mapping):
            return {str(k): convert(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [convert(v) for v in value]
        if isinstance(value, complex):
            return [value.real, value.imag]
        return value

    out = {str(k): convert(v) for k, v in dict(attrs).items()}
    try:
        json.dumps(out, allow_nan=True)
    except (TypeError, ValueError) as err:
        raise InvalidArgumentError(
            f"attrs {dict(attrs)!r} cannot be stored{' at ' + url if url else ''}: {err}; "
            "use str, numbers, bools, lists and dicts",
            url=url,
        ) from None
    return out


#: The largest chunk ``create`` makes, in bytes: HDF5's limit (4 GiB - 1), and far beyond what
#: a chunk read or written whole should be.
MAX_CHUNK_BYTES = 2**32 - 1


class BlockedArray(abc.ABC):
    """An N-d array in storage, seen as a grid of pages.

    Drivers subclass this and implement the abstract methods; everything
    else is derived here.  Obtain instances with :func:`oocarr.open` and
    :func:`oocarr.create` (or a driver's :meth:`open` / :meth:`create` with
    a :class:`~oocarr.store.locator.Locator`).

    Examples
    --------
    >>> import tempfile, os, numpy as np, oocarr
    >>> path = os.path.join(tempfile.mkdtemp(), "a.npy")
    >>> with oocarr.create(path, (5, 3), "float32").store as store:
    ...     store[:] = np.ones((5, 3))
    ...     store[0] = [1, 2, 3]
    >>> store = oocarr.open(path).store
    >>> store.with_pages((2, 3)).grid_shape
    (3, 1)
    >>> store.read_block((0, 0))[0]
    array([1., 2., 3.], dtype=float32)
    """

    # A view made by with_pages shares the instance __dict__ (handles, pending
    # state) with its parent and keeps only its page shape in this slot.
    __slots__ = ("_view_pages", "__dict__", "__weakref__")
    _view_pages: tuple[int, ...] | None
    #: The writer lock a store opened for writing holds (:mod:`oocarr.store.locks`).
    _writer_lock: locks.WriterLock | None

    #: Entry-point name of the driver.
    name: ClassVar[str] = ""
    #: URL suffixes the driver claims when no ``driver=`` is given.
    suffixes: ClassVar[tuple[str, ...]] = ()
    #: Compressors ``create`` accepts for this driver.
    compressions: ClassVar[frozenset[str]] = frozenset()
    #: ``_read`` fills the caller's buffer with no intermediate copy.
    supports_out_buffer: ClassVar[bool] = False
    #: Writes that cover part of a storage chunk are native (not read-modify-write).
    supports_partial_chunk_writes: ClassVar[bool] = True
    #: A created array stays invisible until committed.
    atomic_create: ClassVar[bool] = True
    #: The driver can store attrs.
    supports_attrs: ClassVar[bool] = True
    #: The format stores arrays in chunks (``create`` accepts ``chunks=``).
    supports_chunks: ClassVar[bool] = True
    #: The driver can list the arrays in a container (:meth:`list_arrays`).
    supports_listing: ClassVar[bool] = False

    def __init__(
        self,
        locator: Locator,
        shape: Sequence[int],
        dtype: Any,
        chunks: Sequence[int] | None,
        *,
        mode: str = "r",
        pending: bool = False,
    ) -> None:
        if mode not in _MODES:
            raise InvalidArgumentError(f"mode must be 'r' or 'r+', got {mode!r}")
        self._locator = locator
        self._shape = tuple(int(s) for s in shape)
        self._dtype = np.dtype(dtype)
        self._chunks = None if chunks is None else tuple(int(c) for c in chunks)
        self._mode = mode
        self._pending = pending
        self._page_shape: tuple[int, ...] | None = None
        self._rmw_lock = threading.RLock()
        pages.check_layout(self._shape, self._dtype.itemsize, self._chunks, locator.full_url)

    # ------------------------------------------------------------------
    # Driver primitives: class level
    # ------------------------------------------------------------------
    @classmethod
    def can_open(cls, container: str, inner: str, storage_options: Mapping[str, Any]) -> bool:
        """Whether this driver claims a URL when no driver is named (by suffix by default)."""
        base = container.rstrip("/").lower()
        return any(base.endswith(s) for s in cls.suffixes)

    @classmethod
    def locate(
        cls,
        container: str,
        inner: str,
        storage_options: Mapping[str, Any] | None = None,
        driver_options: Mapping[str, Any] | None = None,
    ) -> Locator:
        """Build this driver's locator for a URL (local paths made absolute).

        Drivers override this to validate the URL and driver options.
        """
        return Locator.make(
            cls.name, normalize_container(container), inner, storage_options, driver_options
        )

    @classmethod
    def scratch_locator(
        cls, directory: str, stem: str, shape: Sequence[int] | None, dtype: Any
    ) -> Locator:
        """Where a temporary array named ``stem`` goes in the scratch ``directory`` (a path or URL).

        ``shape`` and ``dtype`` (``None`` when not known yet) let a driver pick
        a layout the array needs.  Default: ``stem`` plus the driver's first
        suffix; for a container format whose URL must name a member, the
        member ``/data`` inside it.  :meth:`delete` removes what the array
        holds; an emptied container is removed by the scratch module.

        Examples
        --------
        >>> from oocarr.store.registry import get_driver
        >>> get_driver("hdf5").scratch_locator("/tmp/s", "w", (2,), "f4").full_url
        '/tmp/s/w.h5#/data'
        """
        container = f"{directory}/{stem}{cls.suffixes[0] if cls.suffixes else ''}"
        try:
            return cls.locate(container, "")
        except InvalidUrlError:
            return cls.locate(container, "/data")

    @classmethod
    @abc.abstractmethod
    def _open(cls, locator: Locator, mode: str) -> BlockedArray:
        """Open an existing, committed array (raise :class:`NotFoundError` if absent)."""

    @classmethod
    @abc.abstractmethod
    def _create(
        cls,
        locator: Locator,
        shape: tuple[int, ...],
        dtype: np.dtype,
        chunks: tuple[int, ...] | None,
        compression: Compression | None,
        attrs: dict[str, Any],
        overwrite: bool,
    ) -> BlockedArray:
        """Create a pending array (invisible at its URL until :meth:`_commit`)."""

    @classmethod
    @abc.abstractmethod
    def exists(cls, locator: Locator) -> bool:
        """Whether a committed array exists at ``locator``."""

    @classmethod
    @abc.abstractmethod
    def delete(cls, locator: Locator) -> None:
        """Remove the array at ``locator`` (no error when it is absent)."""

    @classmethod
    def supports_dtype(cls, dtype: np.dtype) -> bool:
        """Whether the format can store ``dtype`` (default: all that :func:`as_dtype` takes)."""
        return True

    @classmethod
    def default_chunks(cls, shape: tuple[int, ...], dtype: np.dtype) -> tuple[int, ...] | None:
        """Chunk shape used by ``create`` when none is given (``None``: contiguous)."""
        if not shape or not cls.supports_chunks:
            return None
        return pages.grow_block(shape, dtype.itemsize, pages.DEFAULT_CHUNK_BYTES)

    # ------------------------------------------------------------------
    # Driver primitives: instance level
    # ------------------------------------------------------------------
    @abc.abstractmethod
    def _read(self, region: tuple[slice, ...], out: np.ndarray) -> None:
        """Fill ``out`` (C-contiguous, this dtype, the region's shape) with ``region``."""

    @abc.abstractmethod
    def _write(self, region: tuple[slice, ...], value: np.ndarray) -> None:
        """Store ``value`` (C-contiguous, this dtype, the region's shape) at ``region``."""

    @abc.abstractmethod
    def _read_attrs(self) -> dict[str, Any]:
        """The stored attrs as a JSON-able dict."""

    @abc.abstractmethod
    def _write_attrs(self, attrs: dict[str, Any]) -> None:
        """Replace the stored attrs."""

    def _flush(self) -> None:
        """Push buffered writes to storage (no-op by default)."""

    def _release(self) -> None:
        """Drop open handles; the next use reopens them (no-op by default)."""

    def _commit(self) -> None:
        """Make a pending array visible at its URL."""

    def _abort(self) -> None:
        """Discard a pending array, leaving the URL as it was."""

    def _stored_nbytes(self) -> int | None:
        """Bytes the array occupies in storage, or ``None`` when unknown."""
        return None

    @property
    def compression(self) -> str | None:
        """The compression in ``create``'s form (``"gzip:4"``), or ``None``."""
        return None

    def _read_dimension_names(self) -> tuple[str | None, ...] | None:
        """The stored name of each axis (``None`` for an unnamed one), or ``None`` when the
        format or the array names none (default)."""
        return None

    def _write_dimension_names(self, names: tuple[str | None, ...]) -> None:
        """Store the axis names where the format has a place for them (default: nowhere)."""

    def _read_native_attrs(self) -> dict[str, Any]:
        """The stored attrs with the types the format keeps them in (NumPy scalars and arrays,
        as netCDF readers give them); default: :meth:`_read_attrs`."""
        return self._read_attrs()

    def _read_masked_fill_value(self) -> Any:
        """The storage's fill value where the format takes it to mark missing elements (Zarr
        v2's ``fill_value``, which xarray reads as ``_FillValue``), else ``None`` (default)."""
        return None

    # ------------------------------------------------------------------
    # Opening and creating (derived)
    # ------------------------------------------------------------------
    @classmethod
    def open(cls, locator: Locator, mode: str = "r") -> BlockedArray:
        """Open the committed array at ``locator``.

        Parameters
        ----------
        locator : Locator
            Where the array is; its driver must be this class's.
        mode : {"r", "r+"}
            Read-only (default) or read-write.

        Examples
        --------
        >>> import tempfile, os, numpy as np, oocarr
        >>> path = os.path.join(tempfile.mkdtemp(), "a.npy")
        >>> loc = oocarr.save(np.zeros(3), path).store.locator
        >>> type(oocarr.open(path).store).open(loc).shape
        (3,)
        """
        if mode not in _MODES:
            raise InvalidArgumentError(
                f"mode {mode!r} for {locator.full_url} is not 'r' or 'r+'; "
                "use oocarr.create to make a new array",
                url=locator.full_url,
            )
        lock = locks.writer_lock(locator, mode)
        with locks.released_on_error(lock):
            with transport_failures("opening", locator.full_url):
                store = cls._open(locator, mode)
        store._writer_lock = lock
        return store

    @classmethod
    def create(
        cls,
        locator: Locator,
        shape: Sequence[int],
        dtype: Any,
        *,
        chunks: Sequence[int] | None = None,
        compression: Any = None,
        attrs: Mapping[str, Any] | None = None,
        overwrite: bool = False,
    ) -> BlockedArray:
        """Create a pending array at ``locator``; it appears there on :meth:`commit`.

        Parameters
        ----------
        locator : Locator
            Where the array goes.
        shape : sequence of int
            Its shape (any rank, zero-length axes allowed).
        dtype : dtype-like
            Its dtype; see :func:`oocarr.dtypes.as_dtype`.
        chunks : sequence of int, optional
            Storage chunk shape; the driver picks one when omitted.
        compression : str, optional
            ``"gzip"``, ``"gzip:6"``, ``"lzf"``, ``"zstd"`` where the driver offers it.
        attrs : mapping, optional
            JSON-able attributes.
        overwrite : bool
            Replace an existing array (only once the new one commits).

        Raises
        ------
        AlreadyExistsError
            When an array exists at ``locator`` and ``overwrite`` is false.

        Examples
        --------
        >>> import tempfile, os, oocarr
        >>> from oocarr.store.registry import get_driver
        >>> from oocarr.store.locator import Locator
        >>> loc = Locator.make("memmap", os.path.join(tempfile.mkdtemp(), "a.npy"))
        >>> with get_driver("memmap").create(loc, (2,), "int8") as store:
        ...     store[:] = [1, 2]
        >>> oocarr.to_numpy(oocarr.open(loc.url))
        array([1, 2], dtype=int8)
        """
        url = locator.full_url
        try:
            shape = tuple(int(s) for s in shape)
        except (TypeError, ValueError):
            raise InvalidArgumentError(
                f"shape {shape!r} for {url} must be a sequence of integers", url=url
            ) from None
        if any(s < 0 for s in shape):
            raise InvalidArgumentError(f"shape {shape} for {url} has a negative length", url=url)
        dtype = as_dtype(dtype, url=url)
        if not cls.supports_dtype(dtype):
            raise UnsupportedDtypeError(
                f"the {cls.name} driver cannot store dtype {dtype_name(dtype)} at {url}; "
                "pick another driver or dtype (docs/drivers lists what each format holds)",
                url=url,
            )
        if chunks is not None:
            if not cls.supports_chunks:
                raise InvalidArgumentError(
                    f"the {cls.name} driver stores arrays contiguously and takes no chunks= "
                    f"(asked for {tuple(chunks)} at {url}); drop chunks= or pick a chunked format",
                    url=url,
                )
            chunks = tuple(int(c) for c in chunks)
            if len(chunks) != len(shape) or any(c < 1 for c in chunks):
                raise InvalidArgumentError(
                    f"chunks {chunks} for {url} must be one positive integer per axis of {shape}",
                    url=url,
                )
        pages.check_layout(shape, dtype.itemsize, chunks, url, error=InvalidArgumentError)
        if chunks is not None and math.prod(chunks) * dtype.itemsize > MAX_CHUNK_BYTES:
            raise InvalidArgumentError(
                f"chunks {chunks} for {url} make chunks of {math.prod(chunks) * dtype.itemsize} "
                f"bytes, over the {MAX_CHUNK_BYTES} bytes a chunk can have (HDF5's limit; every "
                "chunk is read and written whole): pick smaller chunks",
                url=url,
            )
        comp = parse_compression(compression, cls.compressions, url=url)
        attrs = jsonable_attrs(attrs or {}, url=url)
        if attrs and not cls.supports_attrs:
            raise InvalidArgumentError(
                f"the {cls.name} driver cannot store attrs at {url}; drop attrs or pick "
                "another driver",
                url=url,
            )
        lock = locks.writer_lock(locator)
        with locks.released_on_error(lock):
            with transport_failures("creating", url):
                taken = not overwrite and cls.exists(locator)
            if taken:
                raise AlreadyExistsError(
                    f"an array already exists at {url}; pass overwrite=True to replace it",
                    url=url,
                )
            with transport_failures("creating", url):
                store = cls._create(locator, shape, dtype, chunks, comp, attrs, overwrite)
            store._guard_pending()
        store._writer_lock = lock
        return store

    # ------------------------------------------------------------------
    # Identity and metadata
    # ------------------------------------------------------------------
    @property
    def locator(self) -> Locator:
        """The hashable address that reopens this array in any process."""
        return self._locator

    @property
    def url(self) -> str:
        """``container#/inner`` form of the locator."""
        return self._locator.full_url

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape."""
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        """The array's dtype, with the byte order it is stored in."""
        return self._dtype

    @property
    def chunks(self) -> tuple[int, ...] | None:
        """The storage's own chunk shape, or ``None`` for contiguous storage."""
        return self._chunks

    @property
    def readonly(self) -> bool:
        """True when opened with ``mode="r"``."""
        return self._mode == "r"

    @property
    def mode(self) -> str:
        """``"r"`` or ``"r+"``."""
        return self._mode

    @property
    def pending(self) -> bool:
        """True for a created array that has not been committed yet."""
        return self._pending

    @property
    def ndim(self) -> int:
        """Number of axes."""
        return len(self._shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self._shape)

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self._dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Logical size in bytes (``size * itemsize``)."""
        return self.size * self.itemsize

    @property
    def stored_nbytes(self) -> int | None:
        """Bytes the array occupies in storage (after compression), ``None`` when unknown."""
        return self._stored_nbytes()

    @property
    def attrs(self) -> dict[str, Any]:
        """A copy of the array's attributes (JSON-able values)."""
        return self._read_attrs()

    def update_attrs(self, attrs: Mapping[str, Any]) -> None:
        """Merge ``attrs`` into the stored attributes.

        Examples
        --------
        >>> import tempfile, os, oocarr
        >>> path = os.path.join(tempfile.mkdtemp(), "a.h5#/x")
        >>> with oocarr.create(path, (2,), "f4").store as s:
        ...     s.update_attrs({"units": "m"})
        >>> oocarr.open(path).store.attrs
        {'units': 'm'}
        """
        self._check_writable()
        merged = self._read_attrs()
        merged.update(jsonable_attrs(attrs, url=self.url))
        self._write_attrs(merged)

    def set_attrs(self, attrs: Mapping[str, Any]) -> None:
        """Replace the stored attributes with ``attrs``."""
        self._check_writable()
        self._write_attrs(jsonable_attrs(attrs, url=self.url))

    def parallel_writer(self) -> Any | None:
        """A picklable handle through which other processes (a cluster's workers) write this
        array's data while it is pending: its ``open()`` returns a writable array whose writes
        of whole :attr:`write_chunks` (any region of unchunked storage) land where :meth:`commit`
        publishes them.  ``None`` (the default) where the storage takes one writer (an HDF5
        file, an archive) or where other processes cannot reach it (``memory://``); copies to
        it run here.

        Examples
        --------
        >>> import numpy as np, oocarr
        >>> oocarr.from_numpy(np.zeros(2)).store.parallel_writer() is None
        True
        """
        return None

    @property
    def write_chunks(self) -> tuple[int, ...] | None:
        """The unit a writer should cover whole (a Zarr shard; by default a chunk): copies
        are tiled in whole multiples of it, so no unit is read back and rewritten.

        Examples
        --------
        >>> import numpy as np, oocarr
        >>> oocarr.from_numpy(np.zeros(2)).store.write_chunks is None
        True
        """
        return self._chunks

    @property
    def dimension_names(self) -> tuple[str | None, ...] | None:
        """The name of each axis as the storage records it (a netCDF variable's dimensions,
        Zarr v3 ``dimension_names``, Zarr v2 ``_ARRAY_DIMENSIONS``, HDF5 dimension labels),
        ``None`` when it records none.

        Examples
        --------
        >>> import numpy as np, oocarr
        >>> oocarr.from_numpy(np.zeros(2)).store.dimension_names is None
        True
        """
        names = self._read_dimension_names()
        if names is None or len(names) != len(self._shape) or all(n is None for n in names):
            return None
        return tuple(names)

    @property
    def native_attrs(self) -> dict[str, Any]:
        """The attributes with the types the format stores them in: NumPy scalars and arrays
        for HDF5 (a netCDF ``scale_factor`` stays ``float32``), JSON values for Zarr.
        :attr:`attrs` gives them all as JSON values.

        Examples
        --------
        >>> import numpy as np, oocarr
        >>> oocarr.from_numpy(np.zeros(2)).store.native_attrs
        {}
        """
        return self._read_native_attrs()

    @property
    def masked_fill_value(self) -> Any:
        """The storage's fill value where the format takes it to mark missing elements (Zarr
        v2's ``fill_value``, as xarray reads it), else ``None``.

        Examples
        --------
        >>> import numpy as np, oocarr
        >>> oocarr.from_numpy(np.zeros(2)).store.masked_fill_value is None
        True
        """
        return self._read_masked_fill_value()

    def set_dimension_names(self, names: Sequence[str | None] | None) -> None:
        """Record the name of each axis where the format has a place for them (ignored by
        formats that have none, such as ``.npy``).

        Raises
        ------
        InvalidArgumentError
            When ``names`` does not have one entry (a string or ``None``) per axis.
        """
        self._check_writable()
        if names is None:
            return
        names = tuple(names)
        if len(names) != len(self._shape) or not all(
            n is None or isinstance(n, str) for n in names
        ):
            raise InvalidArgumentError(
                f"dimension names {names!r} for {self.url} must give one string (or None) per "
                f"axis of its {len(self._shape)}",
                url=self.url,
            )
        if any(n is not None for n in names):
            self._write_dimension_names(names)

    # ------------------------------------------------------------------
    # Pages and blocks
    # ------------------------------------------------------------------
    @property
    def page_shape(self) -> tuple[int, ...]:
        """The block shape the engine tiles this array with.

        Whole storage chunks grown to about :data:`oocarr.store.pages.DEFAULT_PAGE_BYTES`
        unless set with :meth:`with_pages`.
        """
        view_pages = getattr(self, "_view_pages", None)
        if view_pages is not None:
            return view_pages
        if self._page_shape is None:
            self._page_shape = pages.grow_block(
                self._shape, self.itemsize, pages.DEFAULT_PAGE_BYTES, base=self._chunks
            )
        return self._page_shape

    def with_pages(self, page_shape: Sequence[int]) -> BlockedArray:
        """A view of the same storage tiled with ``page_shape`` (shares handles; no copy).

        Examples
        --------
        >>> import numpy as np, oocarr
        >>> oocarr.from_numpy(np.zeros((5, 4))).store.with_pages((2, 3)).grid_shape
        (3, 2)
        """
        try:
            page_shape = tuple(int(p) for p in page_shape)
        except (TypeError, ValueError):
            raise InvalidArgumentError(
                f"page shape {page_shape!r} for {self.url} must be a sequence of integers",
                url=self.url,
            ) from None
        if len(page_shape) != self.ndim or any(p < 1 for p in page_shape):
            raise InvalidArgumentError(
                f"page shape {page_shape} for {self.url} must have one positive length per "
                f"axis of {self._shape}",
                url=self.url,
            )
        view = object.__new__(type(self))
        view.__dict__ = self.__dict__
        view._view_pages = page_shape
        self._share_pending(view)
        return view

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """Number of pages along each axis."""
        return pages.grid_shape(self._shape, self.page_shape)

    @property
    def num_blocks(self) -> int:
        """Total number of pages."""
        return math.prod(self.grid_shape)

    def block_grid(self) -> Iterator[tuple[int, ...]]:
        """Every page index, in C order (one ``()`` for a 0-d array, none for an empty one).

        Examples
        --------
        >>> import numpy as np, oocarr
        >>> list(oocarr.from_numpy(np.zeros((3, 2))).store.with_pages((2, 2)).block_grid())
        [(0, 0), (1, 0)]
        """
        return pages.grid_indices(self.grid_shape)

    def block_region(self, index: Sequence[int]) -> tuple[slice, ...]:
        """The region of page ``index`` (edge pages are smaller)."""
        index = tuple(int(i) for i in index)
        grid = self.grid_shape
        if len(index) != len(grid) or not all(0 <= i < n for i, n in zip(index, grid)):
            raise IndexError(f"block index {index} is outside the page grid {grid} of {self.url}")
        return pages.block_region(index, self.page_shape, self._shape)

    def block_shape(self, index: Sequence[int]) -> tuple[int, ...]:
        """The shape of page ``index``."""
        return pages.region_shape(self.block_region(index))

    def read_block(self, index: Sequence[int], out: np.ndarray | None = None) -> np.ndarray:
        """Read page ``index`` (into ``out`` when given)."""
        return self.read_region(self.block_region(index), out=out)

    def write_block(self, index: Sequence[int], value: Any) -> None:
        """Write page ``index``; ``value`` must have exactly the page's shape."""
        self.write_region(self.block_region(index), value)

    # ------------------------------------------------------------------
    # Region I/O
    # ------------------------------------------------------------------
    def read_region(
        self, region: Sequence[slice] | None = None, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Read a hyperrectangle of unit-step slices (the whole array for ``None``).

        Parameters
        ----------
        region : sequence of slice, optional
            One unit-step slice per axis.
        out : numpy.ndarray, optional
            A C-contiguous buffer of the region's shape and this dtype to
            fill; drivers with ``supports_out_buffer`` fill it without an
            intermediate copy.

        Returns
        -------
        numpy.ndarray
            ``out`` when given, else a new array.

        Examples
        --------
        >>> import numpy as np, oocarr
        >>> s = oocarr.from_numpy(np.arange(6).reshape(2, 3)).store
        >>> buf = np.empty((2, 2), dtype=s.dtype)
        >>> s.read_region((slice(0, 2), slice(1, 3)), out=buf) is buf
        True
        """
        region = check_region(region, self._shape, self.url)
        rshape = pages.region_shape(region)
        if out is None:
            out = aligned_empty(rshape, self._dtype)
        else:
            if not isinstance(out, np.ndarray):
                raise InvalidArgumentError(
                    f"out= must be a numpy.ndarray, got {type(out).__name__}", url=self.url
                )
            if out.shape != rshape:
                raise ShapeMismatchError(
                    f"out= has shape {out.shape} but the region of {self.url} has {rshape}",
                    url=self.url,
                )
            if out.dtype != self._dtype:
                raise DtypeMismatchError(
                    f"out= has dtype {out.dtype} but {self.url} holds {self._dtype}; "
                    "allocate the buffer with the array's dtype",
                    url=self.url,
                )
            if not out.flags.c_contiguous or not out.flags.writeable:
                raise InvalidArgumentError(
                    f"out= for {self.url} must be a writeable C-contiguous array", url=self.url
                )
        if out.size:
            with transport_failures("reading", self.url):
                self._read(region, out)
        return out

    def read_view(
        self,
        region: Sequence[slice] | None = None,
        empty: Callable[[tuple[int, ...], np.dtype], np.ndarray] | None = None,
        mapped: bool = True,
    ) -> np.ndarray:
        """Read a region as a read-only array that may share memory with the storage.

        Drivers that can hand out the stored bytes without a copy (a mapping of
        the region of a ``.npy`` file) do, unless ``mapped`` is false; the others
        read a copy, into ``empty(shape, dtype)`` when given (a C-contiguous
        buffer, such as :meth:`oocarr.store.buffers.BufferPool.empty`'s).  A view shows later writes
        to the same bytes, so it is for reading storage that nothing writes
        meanwhile (the engine's inputs: updates replace storage whole).  What a
        view maps is released when the array is collected.

        Examples
        --------
        >>> import numpy as np, oocarr
        >>> s = oocarr.from_numpy(np.arange(6.0).reshape(2, 3)).store
        >>> v = s.read_view((slice(1, 2), slice(0, 3)))
        >>> v, v.flags.writeable
        (array([[3., 4., 5.]]), False)
        """
        region = check_region(region, self._shape, self.url)
        wanted = mapped and math.prod(pages.region_shape(region)) != 0
        view = self._view(region) if wanted else None
        if view is None:
            buffer = None if empty is None else empty(pages.region_shape(region), self._dtype)
            view = self.read_region(region, out=buffer)
            view.flags.writeable = False
        return view

    def _view(self, region: tuple[slice, ...]) -> np.ndarray | None:
        """A read-only array sharing the stored bytes of ``region``, or ``None`` (then the
        region is read into a new buffer)."""
        return None

    def read_overhead(self, shape: Sequence[int]) -> int:
        """Bytes one read of a region of ``shape`` holds besides the caller's buffer, at most:
        encoded chunks fetched, chunks being decoded by the driver's threads.

        The memory model counts it per stored input of a streamer.  Drivers
        that decode in their own buffers say how much; the default is 0 (a
        read goes straight into the caller's buffer).

        Examples
        --------
        >>> import numpy as np, oocarr
        >>> oocarr.from_numpy(np.zeros((4, 4))).store.read_overhead((2, 4))
        0
        """
        return 0

    def read_bytes(self, shape: Sequence[int]) -> int:
        """Bytes one read of a region of ``shape`` reads from storage, as the I/O counters
        count it: the region's own bytes, or a computed array's inputs' (a fused array).

        Examples
        --------
        >>> import numpy as np, oocarr
        >>> oocarr.from_numpy(np.zeros((4, 4))).store.read_bytes((2, 4))
        64
        """
        return math.prod(shape) * self._dtype.itemsize

    @property
    def portable_locator(self) -> Locator:
        """The locator a task sent to another process reopens this array by: :attr:`locator`,
        or one that also carries values held only in this process (a fused array's)."""
        return self._locator

    def read_threads(self, shape: Sequence[int]) -> int:
        """Threads one read of a region of ``shape`` keeps busy, at most.

        Streamers read the next blocks in parallel when one read cannot use the machine's
        cores by itself (a block of one compressed chunk decodes in one thread).  The
        default, 0, means the read is I/O-bound or parallel inside the driver, and one
        block is read ahead at a time.

        Examples
        --------
        >>> import numpy as np, oocarr
        >>> oocarr.from_numpy(np.zeros((4, 4))).store.read_threads((2, 4))
        0
        """
        return 0

    def write_region(self, region: Sequence[slice] | None, value: Any) -> None:
        """Write ``value`` (exactly the region's shape, a safely castable dtype) at ``region``.

        Raises
        ------
        ReadOnlyError
            When the array was opened read-only.
        ShapeMismatchError, DtypeMismatchError
            When ``value`` does not fit the region.

        Examples
        --------
        >>> import numpy as np, oocarr
        >>> s = oocarr.from_numpy(np.zeros((2, 3), dtype="f4"), mode="r+").store
        >>> s.write_region((slice(0, 1), slice(0, 3)), np.ones((1, 3), "f4"))
        >>> s[0]
        array([1., 1., 1.], dtype=float32)
        """
        self._check_writable()
        region = check_region(region, self._shape, self.url)
        rshape = pages.region_shape(region)
        value = np.asarray(value)
        if value.shape != rshape:
            raise ShapeMismatchError(
                f"cannot write a value of shape {value.shape} to a region of shape {rshape} "
                f"in {self.url}; reshape it or write a matching region",
                url=self.url,
            )
        self._check_cast(value.dtype, "safe")
        if value.size:
            with transport_failures("writing", self.url):
                self._write(region, np.asarray(value, dtype=self._dtype, order="C"))

    def _check_cast(self, dtype: np.dtype, casting: Literal["safe", "same_kind"]) -> None:
        if dtype != self._dtype and not np.can_cast(dtype, self._dtype, casting=casting):
            raise DtypeMismatchError(
                f"cannot store {dtype} values in {self.url}, which holds {self._dtype}, "
                f"without losing information; convert them with .astype({str(self._dtype)!r})",
                url=self.url,
            )

    def _check_writable(self) -> None:
        if self.readonly:
            raise ReadOnlyError(
                f"{self.url} was opened read-only; reopen it with mode='r+' to write",
                url=self.url,
            )

    # ------------------------------------------------------------------
    # NumPy-style indexing, eager like h5py and zarr
    # ------------------------------------------------------------------
    def __getitem__(self, key: Any) -> np.ndarray:
        sel = parse_key(key, self._shape)
        data = self.read_region(sel.bounds)
        result = data[sel.post]
        return result if sel.is_contiguous else np.asarray(result, order="C")

    def __setitem__(self, key: Any, value: Any) -> None:
        self._check_writable()
        sel = parse_key(key, self._shape)
        value = np.asarray(value)
        self._check_cast(value.dtype, "same_kind")
        try:
            value = np.broadcast_to(value, sel.shape)
        except ValueError:
            raise ShapeMismatchError(
                f"cannot broadcast a value of shape {value.shape} to the selection "
                f"{sel.shape} of {self.url}",
                url=self.url,
            ) from None
        bshape = pages.region_shape(sel.bounds)
        if sel.is_contiguous:
            self.write_region(sel.bounds, value.astype(self._dtype).reshape(bshape))
            return
        with self._rmw_lock:
            block = self.read_region(sel.bounds)
            block[sel.post] = value
            self.write_region(sel.bounds, block)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        data = self.read_region(None)
        return data if dtype is None else data.astype(dtype, copy=False)

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d array")
        return self._shape[0]

    # ------------------------------------------------------------------
    # Life cycle
    # ------------------------------------------------------------------
    def flush(self) -> None:
        """Push buffered writes to storage (a pending array stays pending)."""
        if not self.readonly:
            self._flush()

    def commit(self) -> None:
        """Make a created array visible at its URL; it stays open for reading and writing.

        A no-op for arrays that were opened rather than created.  When the
        commit itself fails, the new array is discarded and the URL keeps
        what it held before.
        """
        if self._pending:
            try:
                with transport_failures("committing", self.url):
                    self._flush()
                    self._commit()
            except BaseException:
                self.abort()
                raise
            self._pending = False

    def abort(self) -> None:
        """Discard a created, uncommitted array; the URL is left as it was before ``create``."""
        if self._pending:
            try:
                self._abort()
            finally:
                self._pending = False
                locks.release_writer(self)

    def close(self) -> None:
        """Commit a pending array, flush, and release handles (later use reopens them) and
        this store's hold on the array's writer lock."""
        try:
            self.commit()
            self.flush()
            self._release()
        finally:
            locks.release_writer(self)

    def _guard_pending(self) -> None:
        """Discard this created array if it is dropped, or left at exit, uncommitted."""
        if self._pending:
            self._creator_pid = os.getpid()
            _PENDING.add(self)
            _register_exit_hook()

    def _share_pending(self, view: BlockedArray) -> None:
        """Keep a pending array alive for ``view`` (a ``with_pages`` view sharing its state)."""
        if self._pending and "_creator_pid" in self.__dict__:
            _PENDING.add(view)

    def _discard_unclosed(self, when: str) -> None:
        """Abort a created array nobody committed and say so, as Python does for unclosed files.

        Only in the process that created it: a forked child must not discard its parent's
        array.
        """
        state = self.__dict__
        if not state.get("_pending") or state.get("_creator_pid") != os.getpid():
            return
        problem = ""
        try:
            self.abort()
        except Exception as err:  # reported in the warning: nothing can raise from here
            state["_pending"] = False
            problem = f"; removing its temporary data failed ({err})"
        try:
            self._release()
        except Exception:
            pass
        warnings.warn(
            f"{self.url} was created but {when} without close() or commit(), so it was "
            f"discarded and nothing was written there{problem}. Close it (or create it in a "
            "'with' block) to keep it",
            ResourceWarning,
            stacklevel=2,
            source=self,
        )

    def __del__(self) -> None:
        state = self.__dict__
        if not state.get("_pending") or "_creator_pid" not in state:
            return
        if any(other is not self and other.__dict__ is state for other in list(_PENDING)):
            return  # a with_pages view still uses it
        self._discard_unclosed("dropped")

    def __enter__(self) -> BlockedArray:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None and self._pending:
            self.abort()
            self._release()
        else:
            self.close()

    def __reduce__(self) -> tuple[Any, ...]:
        if self._pending:
            raise OocarrError(
                f"{self.url} is still being created; commit() or close() it before sending "
                "it to another process",
                url=self.url,
            )
        # by the driver class itself (pickled by reference): the registry is a layer above
        return (type(self)._reopen, (self._locator, self._mode, getattr(self, "_view_pages", None)))

    @classmethod
    def _reopen(
        cls, locator: Locator, mode: str, page_shape: tuple[int, ...] | None
    ) -> BlockedArray:
        """Reopen an array from its locator: the target of pickling.

        Examples
        --------
        >>> import pickle, tempfile, os, numpy as np, oocarr
        >>> path = os.path.join(tempfile.mkdtemp(), "a.npy")
        >>> a = oocarr.save(np.arange(4.0), path).store
        >>> pickle.loads(pickle.dumps(a))[1:3]
        array([1., 2.])
        """
        store = cls.open(locator, mode)
        return store if page_shape is None else store.with_pages(page_shape)

    # ------------------------------------------------------------------
    # Description
    # ------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        """A JSON-able description of the array, as ``oocarr inspect --json`` prints it.

        Storage options whose names suggest secrets are redacted.

        Examples
        --------
        >>> import numpy as np, oocarr
        >>> info = oocarr.from_numpy(np.zeros((4, 2), "f4")).store.info()
        >>> info["driver"], info["shape"], info["dtype"], info["nbytes"]
        ('memmap', [4, 2], 'float32', 32)
        """
        loc = self._locator.to_dict()
        loc["storage_options"] = {
            k: ("***" if any(w in k.lower() for w in _SECRET_WORDS) else v)
            for k, v in loc["storage_options"].items()
        }
        stored = self.stored_nbytes
        return {
            "driver": self.name,
            "url": self.url,
            "locator": loc,
            "shape": list(self._shape),
            "dtype": dtype_name(self._dtype),
            "byte_order": byte_order(self._dtype),
            "itemsize": self.itemsize,
            "chunks": None if self._chunks is None else list(self._chunks),
            "page_shape": list(self.page_shape),
            "compression": self.compression,
            "nbytes": self.nbytes,
            "stored_nbytes": stored,
            "compression_ratio": (self.nbytes / stored) if stored else None,
            "readonly": self.readonly,
            "dimension_names": (
                None if self.dimension_names is None else list(self.dimension_names)
            ),
            "attrs": self.attrs,
        }

    def __repr__(self) -> str:
        chunks = "contiguous" if self._chunks is None else f"chunks={self._chunks}"
        state = ", pending" if self._pending else ""
        return (
            f"<{type(self).__name__} {self.url!r} shape={self._shape} "
            f"dtype={dtype_name(self._dtype)} {chunks} mode={self._mode!r}{state}>"
        )

    # ------------------------------------------------------------------
    # Optional: listing a container and counting initialised chunks
    # ------------------------------------------------------------------
    @classmethod
    def can_list(cls, container: str, storage_options: Mapping[str, Any]) -> bool:
        """Whether this driver claims ``container`` for :meth:`list_arrays` when none is named.

        Default: drivers with ``supports_listing`` claim what :meth:`can_open` claims.
        """
        return cls.supports_listing and cls.can_open(container, "", storage_options)

    @classmethod
    def list_arrays(
        cls,
        container: str,
        inner: str = "",
        storage_options: Mapping[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """The arrays (and groups) in ``container``, under ``inner`` when given.

        Each entry is a dict with ``path`` (inside the container, ``"/"``
        for an array that is the container itself, or a file name), ``url``
        (what :func:`oocarr.open` takes), ``kind`` (``"array"`` or
        ``"group"``), and for arrays ``shape`` (tuple), ``dtype`` (a NumPy
        dtype, or a short text for a type oocarr cannot read) and ``chunks``
        (tuple or ``None``); groups have ``None`` there.  Parents come before
        their members.  Drivers that can list set ``supports_listing``.

        Raises
        ------
        InvalidArgumentError
            By default: the driver cannot list containers.
        NotFoundError
            When the container (or ``inner`` in it) does not exist.

        Examples
        --------
        >>> import tempfile, os, numpy as np
        >>> from oocarr.store.registry import get_driver
        >>> d = tempfile.mkdtemp()
        >>> np.save(os.path.join(d, "a.npy"), np.zeros((2, 3), "f4"))
        >>> [(e["path"], e["shape"]) for e in get_driver("memmap").list_arrays(d)]
        [('a.npy', (2, 3))]
        """
        raise InvalidArgumentError(
            f"the {cls.name} driver cannot list the arrays in {container}; open an array by "
            "its full URL instead (or pass another driver)",
            url=container,
        )

    @classmethod
    def group_attrs(
        cls,
        container: str,
        inner: str = "",
        storage_options: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The attributes of the group ``inner`` of ``container`` (its root when ``inner`` is
        ``""``), with the types the format stores them in (as :attr:`native_attrs`).

        Default: ``{}`` (a format without groups, or without group attributes).

        Raises
        ------
        NotFoundError
            Where a driver reads groups: the container or the group does not exist.

        Examples
        --------
        >>> import tempfile
        >>> from oocarr.store.registry import get_driver
        >>> get_driver("memmap").group_attrs(tempfile.mkdtemp())
        {}
        """
        return {}

    @classmethod
    def member_url(cls, container: str, inner: str, name: str) -> str:
        """The URL of the array called ``name`` in the container at ``container#inner``.

        ``name`` is a relative path of ``/``-separated parts made of letters,
        digits, ``_`` and ``-``.  This is how callers that keep several arrays
        together (checkpoints) address them.  Default: a path inside the
        container (HDF5 groups, Zarr groups).  Drivers that hold one array
        per file override it with a file in a directory.

        Examples
        --------
        >>> BlockedArray.member_url("run.h5", "/ckpt", "slot0/w")
        'run.h5#/ckpt/slot0/w'
        """
        parts = [p for p in (*inner.split("/"), *name.split("/")) if p]
        return f"{container}#/{'/'.join(parts)}"

    @classmethod
    def prepare_member(cls, locator: Locator) -> None:
        """Make what must exist before :meth:`create` can make an array at ``locator``, an
        address given by :meth:`member_url` (no-op by default; file-per-array drivers make
        the directories)."""

    def initialized_chunks(self) -> tuple[int, int] | None:
        """``(written, total)`` storage chunks, or ``None`` where the format cannot tell.

        Chunked formats allocate a chunk when it is first written; a chunk
        never written reads as the fill value.

        Examples
        --------
        >>> import tempfile, os, oocarr
        >>> path = os.path.join(tempfile.mkdtemp(), "a.zarr")
        >>> with oocarr.create(path, (4,), "f4", chunks=(2,)).store as s:
        ...     s[0:2] = 1
        >>> oocarr.open(path).store.initialized_chunks()
        (1, 2)
        """
        return None

    def chunk_count(self) -> int | None:
        """Number of storage chunks in the chunk grid (``None`` for contiguous storage).

        Examples
        --------
        >>> import tempfile, os, oocarr
        >>> path = os.path.join(tempfile.mkdtemp(), "a.zarr")
        >>> oocarr.save([1, 2, 3, 4, 5], path, chunks=(2,)).store.chunk_count()
        3
        """
        if self._chunks is None:
            return None
        return math.prod(pages.grid_shape(self._shape, self._chunks))


#: Created arrays (and their ``with_pages`` views) not committed or aborted yet.
_PENDING: weakref.WeakSet[BlockedArray] = weakref.WeakSet()


def _discard_pending_at_exit() -> None:
    """Discard the created arrays the program left uncommitted (each warns)."""
    seen: set[int] = set()
    for store in list(_PENDING):
        if id(store.__dict__) not in seen:
            seen.add(id(store.__dict__))
            store._discard_unclosed("left open at exit")


_exit_hook_pid: int | None = None


def _register_exit_hook() -> None:
    """Register :func:`_discard_pending_at_exit` once per process, after the hook through which
    ``weakref.finalize`` releases drivers' handles at exit, so that it runs first (atexit runs
    hooks last-registered first) while pending arrays can still be aborted."""
    global _exit_hook_pid
    if _exit_hook_pid != os.getpid():
        weakref.finalize(_discard_pending_at_exit, int)  # makes weakref register its hook
        atexit.unregister(_discard_pending_at_exit)
        atexit.register(_discard_pending_at_exit)
        _exit_hook_pid = os.getpid()


@overload
def require_exists(found: Literal[False], locator: Locator, what: str = ...) -> NoReturn: ...
@overload
def require_exists(found: bool, locator: Locator, what: str = ...) -> None: ...
def require_exists(found: bool, locator: Locator, what: str = "array") -> None:
    """Raise :class:`NotFoundError` naming the URL when ``found`` is false (driver helper)."""
    if not found:
        raise NotFoundError(
            f"no {what} at {locator.full_url}; check the path (and the '#/inner/path') "
            "or create it with oocarr.create",
            url=locator.full_url,
        )


def corrupt(locator: Locator, detail: str) -> InvalidStoreError:
    """An :class:`InvalidStoreError` naming the URL (driver helper)."""
    return InvalidStoreError(
        f"{locator.full_url} is not a valid {locator.driver} array: {detail}. "
        "Check that the URL points at the right file, or recreate it",
        url=locator.full_url,
    )


def temp_sibling(path: str) -> str:
    """A hidden, unique name beside ``path`` for writing before an atomic rename."""
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.tmp-{os.getpid()}-{os.urandom(4).hex()}")
