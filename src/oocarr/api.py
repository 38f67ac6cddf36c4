"""The storage half of the public API: open, create, save, from_numpy, to_numpy."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import pages, registry
from .blocked import BlockedArray
from .disk_array import DiskArray
from .dtypes import as_dtype
from .errors import UnknownDriverError
from .locator import Locator, split_url
from .scratch import scratch_locator

__all__ = ["resolve", "open", "create", "save", "from_numpy", "to_numpy"]


def resolve(
    url: str | os.PathLike | Locator,
    *,
    driver: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    driver_options: Mapping[str, Any] | None = None,
) -> tuple[type[BlockedArray], Locator]:
    """Find the driver for ``url`` and build its locator.

    The driver is ``driver`` when given, else the first registered driver
    that claims the URL (by suffix: ``.npy``, ``.h5``/``.hdf5``, ``.zarr``).

    Raises
    ------
    UnknownDriverError
        When ``driver`` is not registered or no driver claims the URL.

    Examples
    --------
    >>> cls, loc = resolve("data/run1.h5#/train/x")
    >>> cls.name, loc.path
    ('hdf5', '/train/x')
    """
    if isinstance(url, Locator):
        return registry.get_driver(url.driver), url
    container, inner = split_url(url)
    storage_options = dict(storage_options or {})
    if driver is not None:
        cls = registry.get_driver(driver)
    else:
        drivers = registry.load_drivers()
        claims = [c for c in drivers.values() if c.can_open(container, inner, storage_options)]
        if not claims:
            known = ", ".join(
                f"{' '.join(c.suffixes)} ({n})" for n, c in sorted(drivers.items()) if c.suffixes
            )
            raise UnknownDriverError(
                f"cannot tell which driver opens {os.fspath(url)!r}; known suffixes: {known}. "
                "Pass driver=NAME (or --driver NAME) to choose one",
                url=os.fspath(url),
            )
        # A driver that claims the URL by its own suffix beats one that claims it otherwise
        # (a .npy file inside a .zarr directory is still a .npy file).
        base = container.rstrip("/").lower()
        claims.sort(key=lambda c: not any(base.endswith(s) for s in c.suffixes))
        cls = claims[0]
    return cls, cls.locate(container, inner, storage_options, driver_options)


def open(
    url: str | os.PathLike | Locator,
    mode: str = "r",
    *,
    driver: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    **driver_options: Any,
) -> DiskArray:
    """Open a stored array.

    Parameters
    ----------
    url : str or Locator
        ``PATH_OR_URL#/path/inside``: ``data.npy``, ``data.h5#/group/x``,
        ``s3://bucket/data.zarr#/x``, or a locator.
    mode : {"r", "r+"}
        Read-only (default) or read-write.
    driver : str, optional
        Driver name; inferred from the suffix when omitted.
    storage_options : mapping, optional
        Passed to fsspec (credentials, endpoints ...).
    **driver_options
        Driver-specific, e.g. ``shape=`` and ``dtype=`` for a raw binary file.

    Returns
    -------
    DiskArray

    Raises
    ------
    NotFoundError, InvalidStoreError, UnknownDriverError

    Examples
    --------
    >>> import numpy as np, tempfile, os, oocarr
    >>> path = os.path.join(tempfile.mkdtemp(), "a.npy")
    >>> np.save(path, np.arange(3))
    >>> oocarr.open(path).shape
    (3,)
    """
    cls, locator = resolve(
        url, driver=driver, storage_options=storage_options, driver_options=driver_options
    )
    return DiskArray(cls.open(locator, mode))


def create(
    url: str | os.PathLike | Locator,
    shape: Sequence[int],
    dtype: Any,
    *,
    chunks: Sequence[int] | None = None,
    compression: Any = None,
    attrs: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    driver: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    **driver_options: Any,
) -> DiskArray:
    """Create an array, writable, that appears at ``url`` when closed.

    Fill it through ``.store`` (``x.store[0:10] = values``), then
    ``close()`` it or use it in a ``with`` block: an exception inside the
    block discards the new array and leaves ``url`` as it was.

    Parameters
    ----------
    url : str or Locator
        Where to create it (see :func:`open`).
    shape : sequence of int
    dtype : dtype-like
    chunks : sequence of int, optional
        Storage chunks; chosen from the page size when omitted.
    compression : str, optional
        ``"gzip"``, ``"gzip:6"``, ``"lzf"`` (HDF5) or ``"zstd"`` (Zarr).
    attrs : mapping, optional
    overwrite : bool
        Replace an existing array once the new one is complete.
    driver, storage_options, **driver_options
        As for :func:`open`.

    Examples
    --------
    >>> import tempfile, os, oocarr
    >>> path = os.path.join(tempfile.mkdtemp(), "a.h5#/x")
    >>> with oocarr.create(path, (4,), "int32", attrs={"units": "s"}) as x:
    ...     x.store[:] = [1, 2, 3, 4]
    >>> oocarr.to_numpy(oocarr.open(path))
    array([1, 2, 3, 4], dtype=int32)
    """
    cls, locator = resolve(
        url, driver=driver, storage_options=storage_options, driver_options=driver_options
    )
    store = cls.create(
        locator,
        shape,
        dtype,
        chunks=chunks,
        compression=compression,
        attrs=attrs,
        overwrite=overwrite,
    )
    return DiskArray(store)


def _source_store(x: Any) -> BlockedArray | np.ndarray:
    if isinstance(x, DiskArray):
        return x.store
    if isinstance(x, BlockedArray):
        return x
    return np.asarray(x)


def to_numpy(x: Any) -> np.ndarray:
    """Read any array (``DiskArray``, ``BlockedArray``, JAX or NumPy) into a NumPy array.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> oocarr.to_numpy(oocarr.from_numpy(np.eye(2)))
    array([[1., 0.],
           [0., 1.]])
    """
    src = _source_store(x)
    return src.read_region(None) if isinstance(src, BlockedArray) else np.array(src)


def save(
    x: Any,
    url: str | os.PathLike | Locator,
    *,
    chunks: Sequence[int] | None = None,
    compression: Any = None,
    attrs: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    driver: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    tile_bytes: int | None = None,
    mode: str = "r",
    **driver_options: Any,
) -> DiskArray:
    """Copy any array to ``url`` one tile at a time; the result appears when complete.

    Parameters
    ----------
    x : DiskArray, BlockedArray or array-like
        The source; a stored source is read a tile at a time.
    url : str or Locator
        The destination (see :func:`open`).
    chunks : sequence of int, optional
        Destination chunks; the source's chunks when it has them.
    compression, attrs, overwrite, driver, storage_options, **driver_options
        As for :func:`create`; ``attrs=None`` copies the source's attrs.
    tile_bytes : int, optional
        Bytes per copied tile (default :data:`oocarr.pages.DEFAULT_PAGE_BYTES`).
    mode : {"r", "r+"}
        How the returned array is opened: read-only by default, so it holds
        no write lock (HDF5 lets other processes open a file only while no
        process has it open for writing).

    Returns
    -------
    DiskArray
        The new array.

    Examples
    --------
    >>> import numpy as np, tempfile, os, oocarr
    >>> d = tempfile.mkdtemp()
    >>> x = oocarr.save(np.arange(10.0), os.path.join(d, "a.h5#/x"), compression="gzip")
    >>> y = oocarr.save(x, os.path.join(d, "b.zarr"))
    >>> np.array_equal(oocarr.to_numpy(y), np.arange(10.0))
    True
    """
    src = _source_store(x)
    cls, locator = resolve(
        url, driver=driver, storage_options=storage_options, driver_options=driver_options
    )
    if chunks is None and isinstance(src, BlockedArray) and cls.supports_chunks:
        chunks = src.chunks
    if attrs is None and isinstance(src, BlockedArray):
        attrs = src.attrs if cls.supports_attrs else {}
    dst = cls.create(
        locator,
        src.shape,
        src.dtype,
        chunks=chunks,
        compression=compression,
        attrs=attrs,
        overwrite=overwrite,
    )
    with dst:
        copy_tiles(src, dst, tile_bytes or pages.DEFAULT_PAGE_BYTES)
    return DiskArray(cls.open(dst.locator, mode))


def copy_tiles(src: BlockedArray | np.ndarray, dst: BlockedArray, tile_bytes: int) -> None:
    """Copy ``src`` into ``dst`` tile by tile, reusing one read buffer.

    Tiles are made of whole chunks of both sides when that fits in
    ``tile_bytes``, so neither side's chunks are cut.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> dst = oocarr.from_numpy(np.zeros(5), mode="r+").store
    >>> copy_tiles(np.arange(5.0), dst, 16)
    >>> dst[:]
    array([0., 1., 2., 3., 4.])
    """
    src_chunks = src.chunks if isinstance(src, BlockedArray) else None
    tile = pages.common_block(dst.shape, dst.itemsize, tile_bytes, dst.chunks, src_chunks)
    tiled = dst.with_pages(tile)
    if isinstance(src, BlockedArray):
        buffer = np.empty(int(np.prod(tile)), dtype=src.dtype)
    for index in tiled.block_grid():
        region = tiled.block_region(index)
        if isinstance(src, BlockedArray):
            shape = pages.region_shape(region)
            out = buffer[: int(np.prod(shape))].reshape(shape)
            tiled.write_region(region, src.read_region(region, out=out))
        else:
            tiled.write_region(region, src[region])


def from_numpy(
    array: Any,
    url: str | os.PathLike | Locator | None = None,
    **create_options: Any,
) -> DiskArray:
    """Store an in-memory array and return it as a ``DiskArray``.

    Parameters
    ----------
    array : array-like
        NumPy, JAX or anything ``np.asarray`` takes.
    url : str or Locator, optional
        Where to store it; ``None`` writes a scratch array (a ``.npy`` file
        unless scratch is configured otherwise) that is deleted when the
        returned array is garbage collected.
    **create_options
        Passed to :func:`save` (``chunks``, ``compression``, ``attrs``, ``mode`` ...).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.ones((2, 2), dtype="float32"))
    >>> x.store.name
    'memmap'
    """
    data = np.asarray(array)
    as_dtype(data.dtype)
    if url is None:
        stored = save(data, scratch_locator(None, data.shape, data.dtype), **create_options)
        return DiskArray(stored.store, owned=True)
    return save(data, url, **create_options)
