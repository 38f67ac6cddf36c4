"""The storage half of the public API: open, create, save, from_numpy, to_numpy."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from oocarr.engine import plan, progress
from oocarr.engine.budget import available_memory, memory_budget_bytes
from oocarr.engine.copy_tasks import copy_on
from oocarr.engine.executor import current_executor
from oocarr.engine.io import stream_copy, stream_read
from oocarr.engine.stats import IOCounts, call_site, record
from oocarr.jaxlayer.disk_array import ArrayLike, DiskArray, DTypeLike
from oocarr.store import pages, registry
from oocarr.store.blocked import BlockedArray
from oocarr.store.compression import CompressionSpec
from oocarr.store.containment import check_apart
from oocarr.store.dtypes import as_dtype
from oocarr.store.locator import Locator, option_mapping, split_url
from oocarr.store.scratch import scratch_locator

__all__ = [
    "resolve",
    "open",
    "create",
    "save",
    "from_numpy",
    "to_numpy",
    "tile_plan",
    "copy_tiles",
    "tile_projection",
    "read_tiles",
]


def resolve(
    url: str | os.PathLike | Locator,
    *,
    driver: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    driver_options: Mapping[str, Any] | None = None,
) -> tuple[type[BlockedArray], Locator]:
    """Find the driver for ``url`` and build its locator.

    The driver is ``driver`` when given, else the one
    :func:`oocarr.store.registry.guess_driver` finds (by suffix: ``.npy``,
    ``.h5``/``.hdf5``, ``.zarr``; or by content, such as a directory
    holding ``zarr.json``).

    Raises
    ------
    UnknownDriverError
        When ``driver`` is not registered or no driver claims the URL.
    MissingDependencyError
        When the driver needs a package that is not installed.

    Examples
    --------
    >>> cls, loc = resolve("data/run1.h5#/train/x")
    >>> cls.name, loc.path
    ('hdf5', '/train/x')
    """
    if isinstance(url, Locator):
        return registry.get_driver(url.driver), url
    # split_url takes a path too (it reads it with os.fspath), though its annotation says str
    container, inner = split_url(cast(str, url))
    storage_options = option_mapping(storage_options, "storage_options")
    if driver is not None:
        cls = registry.storage_driver(driver)
    else:
        cls = registry.guess_driver(container, inner, storage_options)
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
        Read-only (default) or read-write.  With ``"r+"`` on a local path this
        process holds the array's writer lock until the returned array is
        closed or garbage collected (or the process ends, however it ends):
        one process writes an array at a time; readers are never refused.
    driver : str, optional
        Driver name; inferred from the suffix when omitted.
    storage_options : mapping, optional
        Passed to fsspec (credentials, endpoints ...).
    **driver_options
        Driver-specific, e.g. ``shape=`` and ``dtype=`` for a raw binary file;
        ``follow_external=False`` (every driver) refuses to read through links that
        lead out of the container (writes through them are always refused).

    Returns
    -------
    DiskArray

    Raises
    ------
    NotFoundError, InvalidStoreError, UnknownDriverError
    StorageBusyError
        With ``mode="r+"``, when another process has the array open for writing.

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
    dtype: DTypeLike,
    *,
    chunks: Sequence[int] | None = None,
    compression: CompressionSpec = None,
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

    Raises
    ------
    AlreadyExistsError
        When an array exists at ``url`` and ``overwrite`` is false.
    StorageBusyError
        When another process has the array at ``url`` open for writing (the
        new array holds the writer lock, as ``open(url, "r+")`` does, until
        it is closed or garbage collected).

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


def to_numpy(x: ArrayLike | BlockedArray) -> np.ndarray:
    """Read any array (``DiskArray``, ``BlockedArray``, JAX or NumPy) into a NumPy array.

    Raises
    ------
    BudgetTooSmallError
        When a stored array is larger than the memory available, before anything is
        allocated (read it a region at a time, or reduce it with oocarr's ops, instead).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> oocarr.to_numpy(oocarr.from_numpy(np.eye(2)))
    array([[1., 0.],
           [0., 1.]])
    """
    src = _source_store(x)
    if not isinstance(src, BlockedArray):
        return np.array(src)
    whole = f"the whole array of shape {src.shape} and dtype {src.dtype}"
    plan.require(
        plan.Projection("to_numpy", (plan.Buffers(whole, 1, src.nbytes),)),
        available_memory(),
        limit="the memory available",
        remedy="by freeing memory, or read a region of it (x[start:stop]) or reduce it with "
        "oocarr's functions instead",
        url=src.url,
    )
    return src.read_region(None)


def save(
    x: ArrayLike | BlockedArray,
    url: str | os.PathLike | Locator,
    *,
    chunks: Sequence[int] | None = None,
    compression: CompressionSpec = None,
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
        Bytes per copied tile (default: a quarter of the memory budget, at most
        :data:`oocarr.store.pages.DEFAULT_PAGE_BYTES`).
    mode : {"r", "r+"}
        How the returned array is opened: read-only by default, so it holds
        no write lock (HDF5 lets other processes open a file only while no
        process has it open for writing).

    Returns
    -------
    DiskArray
        The new array.

    Raises
    ------
    InvalidArgumentError
        When ``url`` is the stored source itself, lies inside its storage
        (``a.zarr`` to ``a.zarr/b.zarr``, ``f.h5#/g`` to ``f.h5#/g/x``) or
        holds it; another array in the same file or group is fine.

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
    if isinstance(src, BlockedArray):
        check_apart(src.locator, locator)
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
        if isinstance(src, BlockedArray):
            dst.set_dimension_names(src.dimension_names)
        copy_tiles(src, dst, tile_bytes or pages.DEFAULT_PAGE_BYTES)
    return DiskArray(cls.open(dst.locator, mode))


def _tile_plan(
    store: BlockedArray,
    purpose: str,
    chunks: Sequence[Sequence[int] | None],
    remedy: str,
    most: int | None,
) -> tuple[tuple[int, ...], plan.Projection]:
    buffers = {"copy": plan.COPY_TILES, "stats": plan.STATS_TILES}[purpose]
    return plan.chunk_tile(
        purpose,
        store.shape,
        store.itemsize,
        memory_budget_bytes(),
        buffers,
        *chunks,
        store.chunks,
        url=store.url,
        remedy=remedy,
        most=most,
    )


def tile_plan(
    store: BlockedArray,
    purpose: str,
    *chunks: Sequence[int] | None,
    remedy: str = "with oocarr.set_memory_budget",
    most: int | None = None,
) -> tuple[int, ...]:
    """The tile a copy (``purpose="copy"``) or a statistics pass (``"stats"``) of ``store``
    streams in: whole chunks of ``store`` and of ``chunks``, sized by the memory model
    (:mod:`oocarr.engine.plan`) for the budget in force, at most ``most`` bytes.

    Raises
    ------
    BudgetTooSmallError
        When one tile of whole chunks is larger than the whole budget.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> store = oocarr.from_numpy(np.zeros((1000, 100), "f4")).store
    >>> with oocarr.memory_budget("700KB"):
    ...     tile_plan(store, "copy")
    (250, 100)
    """
    return _tile_plan(store, purpose, chunks, remedy, most)[0]


def tile_projection(
    store: BlockedArray,
    purpose: str,
    *chunks: Sequence[int] | None,
    remedy: str = "with oocarr.set_memory_budget",
    most: int | None = None,
) -> tuple[tuple[int, ...], int]:
    """:func:`tile_plan`'s tile and the bytes the memory model projects a pass in it holds
    (what one task of the pass holds on a cluster's worker).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> store = oocarr.from_numpy(np.zeros((1000, 100), "f4")).store
    >>> with oocarr.memory_budget("700KB"):
    ...     tile, nbytes = tile_projection(store, "copy")
    >>> tile, nbytes <= 700_000
    ((250, 100), True)
    """
    tile, projection = _tile_plan(store, purpose, chunks, remedy, most)
    return tile, projection.nbytes


def read_tiles(
    store: BlockedArray, tile: Sequence[int]
) -> Iterator[tuple[tuple[slice, ...], np.ndarray]]:
    """``(region, values)`` for every tile of ``store`` in C order, on the engine's loop (the
    next tile read ahead while the caller works on this one).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> store = oocarr.from_numpy(np.arange(5)).store
    >>> [(r[0].start, v.tolist()) for r, v in read_tiles(store, (2,))]
    [(0, [0, 1]), (2, [2, 3]), (4, [4])]
    """
    tiled = store.with_pages(tuple(tile))
    regions = (tiled.block_region(i) for i in tiled.block_grid())
    counts = IOCounts(calls=1)
    try:
        yield from stream_read(tiled, regions, counts)
    finally:
        record(call_site("read"), counts)


def copy_tiles(
    src: BlockedArray | np.ndarray,
    dst: BlockedArray,
    tile_bytes: int | None = None,
    *,
    advance: Callable[[int], Any] | None = None,
    remedy: str = "with oocarr.set_memory_budget",
) -> None:
    """Copy ``src`` into ``dst`` tile by tile on the engine's loop (the next tile read ahead,
    each written behind).

    Tiles are made of whole chunks of both sides, sized by the memory model
    for the budget in force (a copy holds :data:`oocarr.engine.plan.COPY_TILES`
    tiles), at most ``tile_bytes`` when given; ``advance(nbytes)`` is called
    after each tile is written.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> dst = oocarr.from_numpy(np.zeros(5), mode="r+").store
    >>> copy_tiles(np.arange(5.0), dst, 16)
    >>> dst[:]
    array([0., 1., 2., 3., 4.])
    """
    src_chunks = src.chunks if isinstance(src, BlockedArray) else None
    on_cluster = _copies_on_cluster(src, dst)
    # whole chunks of both sides when a tile of them fits, else whole chunks of the first:
    # the source's here (each read once), the destination's write units on a cluster (each
    # chunk or shard has one writer, with no read-modify-write across processes)
    chunks = [dst.write_chunks, src_chunks] if on_cluster else [src_chunks, dst.write_chunks]
    if on_cluster:
        # a task per tile: tiles as large as a fold group where the budget allows, so the
        # scheduler (on a 2-core machine, a core it takes from the workers) has fewer tasks
        tile_bytes = max(tile_bytes or 0, plan.FOLD_GROUP_BYTES)
    tile, projection = _tile_plan(dst, "copy", chunks, remedy, tile_bytes)
    counts = IOCounts(calls=1)
    counts.project(projection.nbytes)
    tiled = dst.with_pages(tile)
    regions = (tiled.block_region(i) for i in tiled.block_grid())
    site = call_site("copy")
    bar = progress.start(site, tiled.num_blocks)
    if bar is not None:
        advance = _shown_on(bar, advance)
    try:
        if on_cluster:
            cluster, nbytes = current_executor(), projection.nbytes
            # _copies_on_cluster found both: an executor in force, a stored source
            assert cluster is not None and isinstance(src, BlockedArray)
            copy_on(cluster, src, dst, list(regions), nbytes, counts, advance, site)
        else:
            source = src.with_pages(tile) if isinstance(src, BlockedArray) else np.asarray(src)
            stream_copy(source, tiled, regions, counts, advance)
    finally:
        if bar is not None:
            bar.close()
        record(site, counts)


def _shown_on(bar: progress.Bar, advance: Callable[[int], Any] | None) -> Callable[[int], None]:
    """``advance``, and a tile of ``nbytes`` counted on ``bar``."""

    def step(nbytes: int) -> None:
        bar.advance(1, nbytes)
        if advance is not None:
            advance(nbytes)

    return step


def _copies_on_cluster(src: BlockedArray | np.ndarray, dst: BlockedArray) -> bool:
    """Whether a copy runs as tasks on the executor in force: a stored source (in-memory data
    is here already) into a destination that takes parallel writers (else a message says
    the copy runs here)."""
    if current_executor() is None or not isinstance(src, BlockedArray):
        return False
    if dst.parallel_writer() is None:
        warnings.warn(
            f"{dst.url} is written by this process, not on the cluster: its storage "
            f"({dst.locator.driver}) takes one writer at a time; save to Zarr for a copy "
            "written in parallel by the workers",
            UserWarning,
            stacklevel=4,
        )
        return False
    return True


def from_numpy(
    array: npt.ArrayLike,
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
