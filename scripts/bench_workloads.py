"""The data and the workloads of ``scripts/bench.py``.

The first half describes the arrays each workload reads and writes them once (reused when
present with the right shape); the second half builds, for one workload, engine, operation and
format, a :class:`Case`: the timed call, the files a cold run evicts, and a JSON-able value
that ``bench.py`` checks against every peer's.

Engines: ``oocarr`` (for workloads 2 and 5, ``stream_sum``), ``oocarr-opbyop`` (workloads 2
and 5 written op by op under ``jax.jit``), ``dask`` (threaded scheduler), ``loop`` (a plain read
loop over h5py, ``readinto`` or zarr-python), ``numpy`` and ``jax`` (the data in memory, loaded
before timing).
Heavy libraries are imported inside the runners, so a worker imports only what its engine uses.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MiB = 2**20
#: Storage chunks of the square-ish arrays (workloads 1, 2, 3, 7) in HDF5 and Zarr.
GRID_CHUNK = (1024, 1024)
#: Bytes per storage chunk of the tall arrays (workloads 4, 5, 6): whole rows.
ROW_CHUNK_BYTES = 4 * MiB
#: Bytes per slab the plain loops read where they read row slabs.
LOOP_SLAB_BYTES = 8 * MiB
#: Bytes per Dask chunk over a ``.npy`` file: row slabs, a few per core and well under
#: Dask's 128 MiB default, so that both threads stay busy on the quick sizes too.
DASK_SLAB_BYTES = 32 * MiB
#: Rows generated per random draw; every array is the same at every size of write slab.
GEN_ROWS = 1024
#: Equal values in a row: low-entropy data that gzip level 1 compresses ~25x and inflates
#: at ~800 MB/s, so the gzip case measures the engines and not only zlib.
RUN = 16
BATCH_SIZE = 1024
#: Side of the blocks of a matrix result that are checked against a float64 reference.
SPOT = 64
#: Starting weights of workload 5's least squares.
LSQ_W0 = 0.01

FORMATS = ("hdf5", "hdf5-gzip", "npy", "zarr")
#: Room kept free for a run's outputs besides its data (the largest: workload 4's result
#: written by a peer plus oocarr's in scratch, 2 GiB each at full size).
OUTPUT_ROOM_BYTES = 5 * 2**30


@dataclass(frozen=True)
class Sizes:
    """Shapes of one size of run (``full``, ``quick`` or ``tiny``)."""

    sum_shape: tuple[int, int]
    chain_shape: tuple[int, int]
    matmul_n: int
    tall_shape: tuple[int, int]
    tall_out_cols: int
    lsq_shape: tuple[int, int]
    convert_shape: tuple[int, int]


SIZES = {
    "full": Sizes(
        (131072, 8192), (65536, 8192), 8192, (2_000_000, 512), 256, (4_000_000, 256), (65536, 8192)
    ),
    "quick": Sizes(
        (2048, 8192), (1024, 8192), 2048, (65536, 512), 256, (131072, 256), (2048, 8192)
    ),
    "tiny": Sizes((1024, 2048), (512, 2048), 256, (4096, 512), 64, (8192, 256), (512, 2048)),
}


# --------------------------------------------------------------------------------------------
# The data


@dataclass(frozen=True)
class ArraySpec:
    """One logical array: its shape, storage chunks and the seed of its values."""

    name: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    seed: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * 4


def _grid_chunks(shape: tuple[int, int]) -> tuple[int, int]:
    return (min(GRID_CHUNK[0], shape[0]), min(GRID_CHUNK[1], shape[1]))


def _row_chunks(shape: tuple[int, int], row_of: tuple[int, int] | None = None) -> tuple[int, int]:
    """Whole rows, :data:`ROW_CHUNK_BYTES` a chunk (the rows of ``row_of``'s chunks if given)."""
    width = (row_of or shape)[1]
    rows = min(shape[0], max(1, ROW_CHUNK_BYTES // (4 * width)))
    return (rows, shape[1])


def array_specs(sizes: Sizes) -> dict[str, ArraySpec]:
    """Every array of a run, by name."""
    n = sizes.matmul_n
    rows, cols = sizes.lsq_shape
    specs = [
        ArraySpec("sum", sizes.sum_shape, _grid_chunks(sizes.sum_shape), 1),
        ArraySpec("chain_a", sizes.chain_shape, _grid_chunks(sizes.chain_shape), 2),
        ArraySpec("chain_b", sizes.chain_shape, _grid_chunks(sizes.chain_shape), 3),
        ArraySpec("matmul_A", (n, n), _grid_chunks((n, n)), 4),
        ArraySpec("matmul_B", (n, n), _grid_chunks((n, n)), 5),
        ArraySpec("tall_X", sizes.tall_shape, _row_chunks(sizes.tall_shape), 6),
        ArraySpec("lsq_X", sizes.lsq_shape, _row_chunks(sizes.lsq_shape), 7),
        ArraySpec("lsq_y", (rows, 1), _row_chunks((rows, 1), (rows, cols)), 8),
        ArraySpec("convert", sizes.convert_shape, _grid_chunks(sizes.convert_shape), 9),
    ]
    return {s.name: s for s in specs}


#: (array, format) -> (file or directory name, HDF5 dataset name).
LAYOUT: dict[tuple[str, str], tuple[str, str | None]] = {
    ("sum", "hdf5"): ("sum_plain.h5", "x"),
    ("sum", "hdf5-gzip"): ("sum_gzip.h5", "x"),
    ("sum", "npy"): ("sum.npy", None),
    ("sum", "zarr"): ("sum.zarr", None),
    ("chain_a", "hdf5"): ("chain.h5", "a"),
    ("chain_b", "hdf5"): ("chain.h5", "b"),
    ("chain_a", "npy"): ("chain_a.npy", None),
    ("chain_b", "npy"): ("chain_b.npy", None),
    ("matmul_A", "hdf5"): ("matmul.h5", "A"),
    ("matmul_B", "hdf5"): ("matmul.h5", "B"),
    ("matmul_A", "npy"): ("matmul_A.npy", None),
    ("matmul_B", "npy"): ("matmul_B.npy", None),
    ("tall_X", "hdf5"): ("tall.h5", "X"),
    ("tall_X", "npy"): ("tall.npy", None),
    ("lsq_X", "hdf5"): ("lsq.h5", "X"),
    ("lsq_y", "hdf5"): ("lsq.h5", "y"),
    ("lsq_X", "npy"): ("lsq_X.npy", None),
    ("lsq_y", "npy"): ("lsq_y.npy", None),
    ("convert", "hdf5"): ("convert.h5", "x"),
    ("convert", "zarr"): ("convert.zarr", None),
}

#: The stored arrays each workload reads.
WORKLOAD_ARRAYS: dict[str, tuple[tuple[str, str], ...]] = {
    "sum": tuple(("sum", f) for f in FORMATS),
    "chain": tuple((a, f) for f in ("hdf5", "npy") for a in ("chain_a", "chain_b")),
    "matmul": tuple((a, f) for f in ("hdf5", "npy") for a in ("matmul_A", "matmul_B")),
    "tall": (("tall_X", "hdf5"), ("tall_X", "npy")),
    "lsq": tuple((a, f) for f in ("hdf5", "npy") for a in ("lsq_X", "lsq_y")),
    "batches": (("lsq_X", "hdf5"), ("lsq_y", "hdf5")),
    "convert": (("convert", "hdf5"), ("convert", "zarr")),
}


@dataclass(frozen=True)
class Stored:
    """One array in one format: where it is and how to name it."""

    spec: ArraySpec
    fmt: str
    path: str
    dataset: str | None

    @property
    def url(self) -> str:
        """The oocarr URL (``file.h5#/x``)."""
        return f"{self.path}#/{self.dataset}" if self.dataset else self.path

    @property
    def gzip(self) -> bool:
        return self.fmt == "hdf5-gzip"


def stored(data_dir: str, sizes: Sizes, array: str, fmt: str) -> Stored:
    """Where ``array`` is stored in format ``fmt`` under ``data_dir``."""
    name, dataset = LAYOUT[(array, fmt)]
    return Stored(array_specs(sizes)[array], fmt, os.path.join(data_dir, name), dataset)


def rows_of(spec: ArraySpec, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of ``spec``'s values: steps of 1/4 around 1, in runs of :data:`RUN`
    equal values along each row (positive on average, so sums have a magnitude to compare)."""
    cols = spec.shape[1]
    blocks = []
    for first in range(start // GEN_ROWS * GEN_ROWS, stop, GEN_ROWS):
        rng = np.random.default_rng([spec.seed, first])
        draws = rng.standard_normal((GEN_ROWS, -(-cols // RUN)), dtype=np.float32)
        block = np.repeat(np.round(draws * 4) / 4 + 1, RUN, axis=1)[:, :cols]
        blocks.append(block[max(start - first, 0) : stop - first])
    return np.ascontiguousarray(np.concatenate(blocks), dtype=np.float32)


def tall_weights(sizes: Sizes) -> np.ndarray:
    """Workload 4's in-memory ``W`` (``k x tall_out_cols``), scaled to keep ``X @ W`` near 1."""
    spec = ArraySpec("W", (sizes.tall_shape[1], sizes.tall_out_cols), (1, 1), 10)
    return rows_of(spec, 0, spec.shape[0]) / np.float32(spec.shape[0])


def _write_slab_rows(spec: ArraySpec) -> int:
    """Rows per generated slab: whole storage chunks, about 32 MiB."""
    chunk_rows = spec.chunks[0]
    per_slab = max(1, (32 * MiB) // (4 * spec.shape[1] * chunk_rows))
    return chunk_rows * per_slab


def _slabs(spec: ArraySpec) -> Iterator[tuple[int, np.ndarray]]:
    step = _write_slab_rows(spec)
    for start in range(0, spec.shape[0], step):
        yield start, rows_of(spec, start, min(start + step, spec.shape[0]))


def _write_hdf5(path: str, arrays: list[Stored]) -> None:
    import h5py

    with h5py.File(path, "w") as f:
        for a in arrays:
            dset = f.create_dataset(
                a.dataset,
                a.spec.shape,
                "f4",
                chunks=a.spec.chunks,
                **({"compression": "gzip", "compression_opts": 1} if a.gzip else {}),
            )
            for start, slab in _slabs(a.spec):
                dset[start : start + len(slab)] = slab


def _write_npy(path: str, a: Stored) -> None:
    out = np.lib.format.open_memmap(path, mode="w+", dtype="f4", shape=a.spec.shape)
    for start, slab in _slabs(a.spec):
        out[start : start + len(slab)] = slab
        out.flush()
    del out


def _write_zarr(path: str, a: Stored) -> None:
    import zarr

    out = zarr.create_array(
        path, shape=a.spec.shape, chunks=a.spec.chunks, dtype="float32", compressors=None
    )
    for start, slab in _slabs(a.spec):
        out[start : start + len(slab)] = slab


def _mismatch(a: Stored) -> str | None:
    """Why the existing ``a`` is not what this run needs, or ``None`` when it is."""
    want = (a.spec.shape, a.spec.chunks)
    if a.fmt.startswith("hdf5"):
        import h5py

        with h5py.File(a.path, "r") as f:
            if a.dataset not in f:
                return f"has no dataset /{a.dataset}"
            d = f[a.dataset]
            got = (d.shape, d.chunks)
            if d.dtype != np.float32 or (d.compression == "gzip") != a.gzip or got != want:
                return f"has {d.dtype} {got} compression={d.compression}"
        return None
    if a.fmt == "npy":
        x = np.load(a.path, mmap_mode="r")
        good = x.dtype == np.float32 and x.shape == a.spec.shape
        return None if good else f"has {x.dtype} {x.shape}"
    import zarr

    z = zarr.open_array(a.path, mode="r")
    got = (z.shape, z.chunks)
    return None if z.dtype == np.float32 and got == want else f"has {z.dtype} {got}"


def _check_room(data_dir: str, missing: list[Stored]) -> None:
    """Stop before writing anything when ``data_dir``'s filesystem cannot hold the missing
    arrays plus the outputs of a run (gzip arrays are counted as 1/8 of their size)."""
    need = sum(a.spec.nbytes // (8 if a.gzip else 1) for a in missing)
    if not need:
        return
    need += OUTPUT_ROOM_BYTES
    free = shutil.disk_usage(data_dir).free
    if free < need:
        raise SystemExit(
            f"{data_dir} has {free / 2**30:.1f} GiB free; the data and outputs of this run need "
            f"about {need / 2**30:.1f} GiB. Choose another --dir"
        )


def ensure_data(
    data_dir: str, sizes: Sizes, workloads: list[str], log: Callable[[str], None]
) -> dict[str, float]:
    """Write the arrays ``workloads`` read that are not in ``data_dir`` yet.

    Each file is written under a temporary name and renamed when complete, so an
    interrupted run never leaves a file that looks finished.  An existing file with another
    shape is an error: it is not ours to replace.

    Returns
    -------
    dict
        Seconds spent writing each file (empty when everything was reused).
    """
    os.makedirs(data_dir, exist_ok=True)
    by_path: dict[str, list[Stored]] = {}
    for w in workloads:
        for array, fmt in WORKLOAD_ARRAYS[w]:
            a = stored(data_dir, sizes, array, fmt)
            by_path.setdefault(a.path, [])
            if a not in by_path[a.path]:
                by_path[a.path].append(a)
    seconds = write_missing(data_dir, by_path, _write_file, log)
    if seconds:
        os.sync()  # so that the first cold run does not flush what was just written
    return seconds


def _write_file(path: str, arrays: list[Stored]) -> None:
    """Write ``arrays`` (all of one file) at ``path`` in their format."""
    if arrays[0].fmt.startswith("hdf5"):
        _write_hdf5(path, arrays)
    elif arrays[0].fmt == "npy":
        _write_npy(path, arrays[0])
    else:
        _write_zarr(path, arrays[0])


def write_missing(
    data_dir: str,
    by_path: dict[str, list[Stored]],
    write: Callable[[str, list[Stored]], None],
    log: Callable[[str], None],
) -> dict[str, float]:
    """Write the files of ``by_path`` (path -> the arrays it holds) missing from ``data_dir``
    with ``write(path, arrays)``, each under a temporary name renamed when complete; an
    existing file of another shape or chunking is an error.  Seconds per file written."""
    import time

    _check_room(
        data_dir, [a for p, arrays in by_path.items() if not os.path.exists(p) for a in arrays]
    )
    seconds = {}
    for path, arrays in by_path.items():
        if os.path.exists(path):
            for a in arrays:
                if (why := _mismatch(a)) is not None:
                    raise SystemExit(
                        f"{a.url} exists but {why}, not {a.spec.shape} chunks {a.spec.chunks}; "
                        "remove it or choose another --dir"
                    )
            continue
        t0 = time.perf_counter()
        log(f"writing {path} ({sum(a.spec.nbytes for a in arrays) / 2**30:.2f} GiB)")
        head, tail = os.path.split(path)
        partial = os.path.join(head, f".{tail}.partial-{os.getpid()}")
        write(partial, arrays)
        os.rename(partial, path)
        seconds[tail] = time.perf_counter() - t0
    return seconds


# --------------------------------------------------------------------------------------------
# Reading loops shared by the plain peers


def region_grid(shape: tuple[int, int], block: tuple[int, int]) -> Iterator[tuple[slice, slice]]:
    """Row-major regions of ``block`` shape covering ``shape`` (cut at the edges)."""
    for r in range(0, shape[0], block[0]):
        for c in range(0, shape[1], block[1]):
            yield (slice(r, min(r + block[0], shape[0])), slice(c, min(c + block[1], shape[1])))


def _h5_blocks(path: str, dataset: str, block: tuple[int, int] | None) -> Iterator:
    """``(region, values)`` of an HDF5 dataset read with ``read_direct`` into one reused
    buffer of ``block`` shape (the storage chunk when ``None``)."""
    import h5py

    with h5py.File(path, "r") as f:
        dset = f[dataset]
        block = block or dset.chunks
        buffer = np.empty(block, dset.dtype)
        for region in region_grid(dset.shape, block):
            rows, cols = (s.stop - s.start for s in region)
            dset.read_direct(buffer, region, np.s_[:rows, :cols])
            yield region, buffer[:rows, :cols]


def npy_header(f: Any) -> tuple[tuple[int, ...], np.dtype]:
    """Read a ``.npy`` header from the open file ``f``, leaving it at the first data byte."""
    version = np.lib.format.read_magic(f)
    read = (
        np.lib.format.read_array_header_1_0
        if version == (1, 0)
        else np.lib.format.read_array_header_2_0
    )
    shape, fortran_order, dtype = read(f)
    if fortran_order:
        raise ValueError(f"{f.name} is in Fortran order")
    return shape, dtype


def _npy_slabs(path: str, slab_rows: int) -> Iterator:
    """``(region, values)`` of a 2-d ``.npy`` file, ``readinto`` one reused row-slab buffer."""
    with open(path, "rb", buffering=0) as f:
        shape, dtype = npy_header(f)
        buffer = np.empty((slab_rows, shape[1]), dtype)
        for start in range(0, shape[0], slab_rows):
            rows = min(slab_rows, shape[0] - start)
            view = memoryview(buffer[:rows]).cast("B")
            filled = 0
            while filled < len(view):
                got = f.readinto(view[filled:])
                if not got:
                    raise EOFError(f"{path} ends before row {start + rows}")
                filled += got
            yield (slice(start, start + rows), slice(0, shape[1])), buffer[:rows]


def _zarr_bands(path: str) -> Iterator:
    """``(region, values)`` of a Zarr array, one band of whole chunk rows per read."""
    import zarr

    z = zarr.open_array(path, mode="r")
    for start in range(0, z.shape[0], z.chunks[0]):
        stop = min(start + z.chunks[0], z.shape[0])
        yield (slice(start, stop), slice(0, z.shape[1])), z[start:stop]


def slab_rows(spec: ArraySpec) -> int:
    """Rows per plain-loop slab: whole storage chunk rows, about :data:`LOOP_SLAB_BYTES`."""
    per_chunk = spec.chunks[0]
    return per_chunk * max(1, LOOP_SLAB_BYTES // (4 * spec.shape[1] * per_chunk))


def read_blocks(a: Stored, rows: int | None = None) -> Iterator:
    """The plain reader of each format: HDF5 chunk by chunk (or in slabs of ``rows`` rows),
    ``.npy`` with ``readinto`` in row slabs, Zarr in bands of chunk rows."""
    if a.fmt.startswith("hdf5"):
        block = (rows, a.spec.shape[1]) if rows else None
        return _h5_blocks(a.path, a.dataset, block)
    if a.fmt == "npy":
        return _npy_slabs(a.path, rows or slab_rows(a.spec))
    return _zarr_bands(a.path)


def dask_array(a: Stored, chunks: tuple[int, int] | None = None) -> tuple[Any, Callable]:
    """``a`` as a Dask array with the chunks a sensible Dask user picks, and its closer.

    HDF5 and Zarr: the storage chunks, so each task reads whole chunks once.  ``.npy`` (no
    chunks of its own): row slabs of :data:`DASK_SLAB_BYTES`, unless ``chunks`` is given.
    """
    import dask.array as da

    if a.fmt.startswith("hdf5"):
        import h5py

        f = h5py.File(a.path, "r")
        dset = f[a.dataset]
        return da.from_array(dset, chunks=chunks or dset.chunks), f.close
    if a.fmt == "npy":
        x = np.load(a.path, mmap_mode="r")
        slab = max(1, DASK_SLAB_BYTES // (x.itemsize * x.shape[1]))
        return da.from_array(x, chunks=chunks or (slab, x.shape[1])), lambda: None
    return da.from_zarr(a.path), lambda: None


# --------------------------------------------------------------------------------------------
# Cases


@dataclass
class Context:
    """What a runner needs: where the data is, the sizes, the budget, where outputs go."""

    data_dir: str
    out_dir: str
    sizes: Sizes
    budget: int
    hints: dict[str, Any] = field(default_factory=dict)

    def stored(self, array: str, fmt: str) -> Stored:
        return stored(self.data_dir, self.sizes, array, fmt)

    def output(self, name: str) -> str:
        """The path of an output called ``name`` under ``out_dir``."""
        return os.path.join(self.out_dir, name)


def remove(path: str) -> None:
    """Remove an output this script wrote (a file or a Zarr directory), if present."""
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


def _keep(result: Any) -> Any:
    return result


def _nothing() -> None:
    return None


@dataclass
class Case:
    """One timed operation.

    Attributes
    ----------
    run : callable
        The timed work; returns its result (kept alive until after the timing).
    files : list of str
        Inputs a cold run evicts from the page cache.
    check : callable
        Result -> JSON-able value compared against the peers', computed after the timing.
    cleanup : callable
        Removes what ``run`` wrote, after the timing.
    info : dict
        Facts for the report or for the peers (the block size ``batches`` reads).
    """

    run: Callable[[], Any]
    files: list[str]
    check: Callable[[Any], Any] = _keep
    cleanup: Callable[[], None] = _nothing
    info: dict[str, Any] = field(default_factory=dict)


def spot_blocks(read: Callable[[slice, slice], np.ndarray], shape: tuple[int, int]) -> list:
    """Three ``SPOT``-sided blocks of a matrix result (a corner, the middle, the far corner)."""
    side_r, side_c = min(SPOT, shape[0]), min(SPOT, shape[1])
    corners = [(0, 0), (shape[0] // 2, shape[1] // 3), (shape[0] - side_r, shape[1] - side_c)]
    blocks = []
    for r, c in corners:
        values = np.asarray(read(slice(r, r + side_r), slice(c, c + side_c)), dtype=float)
        blocks.append({"at": [r, c], "values": values.tolist()})
    return blocks


def _scalar(result: Any) -> float:
    return float(result)


def _vector(result: Any) -> list[float]:
    return np.asarray(result, dtype=float).tolist()


# Workload 1: sum and mean(axis=0) --------------------------------------------------------


def _reduce_check(op: str) -> Callable[[Any], Any]:
    return _scalar if op == "sum" else _vector


def _sum_oocarr(ctx: Context, op: str, fmt: str) -> Case:
    import oocarr

    a = ctx.stored("sum", fmt)

    def run() -> Any:
        x = oocarr.open(a.url)
        return float(oocarr.sum(x)) if op == "sum" else np.asarray(oocarr.mean(x, axis=0))

    return Case(run, [a.path], _reduce_check(op))


def _sum_dask(ctx: Context, op: str, fmt: str) -> Case:
    a = ctx.stored("sum", fmt)

    def run() -> Any:
        x, close = dask_array(a)
        try:
            return float(x.sum().compute()) if op == "sum" else x.mean(axis=0).compute()
        finally:
            close()

    return Case(run, [a.path], _reduce_check(op))


def _sum_loop(ctx: Context, op: str, fmt: str) -> Case:
    a = ctx.stored("sum", fmt)
    rows, cols = a.spec.shape

    def run() -> Any:
        if op == "sum":
            return sum(float(block.sum()) for _, block in read_blocks(a))
        column_sums = np.zeros(cols)
        for (_, col), block in read_blocks(a):
            column_sums[col] += block.sum(axis=0)
        return column_sums / rows

    return Case(run, [a.path], _reduce_check(op))


# Workload 2: sum(((a - b) * 2) ** 2) ----------------------------------------------------------


def _chain_inputs(ctx: Context, fmt: str) -> tuple[Stored, Stored, list[str]]:
    a, b = ctx.stored("chain_a", fmt), ctx.stored("chain_b", fmt)
    return a, b, sorted({a.path, b.path})


def _chain_oocarr(ctx: Context, op: str, fmt: str) -> Case:
    """The chain fused: one pass of ``stream_sum`` over row tiles of both arrays."""
    import jax.numpy as jnp

    import oocarr

    sa, sb, files = _chain_inputs(ctx, fmt)
    chain = oocarr.stream_sum(lambda _, a, b: jnp.sum(((a - b) * 2) ** 2))

    def run() -> float:
        return float(chain((), oocarr.open(sa.url), oocarr.open(sb.url)))

    return Case(run, files, _scalar)


def _chain_oocarr_opbyop(ctx: Context, op: str, fmt: str) -> Case:
    """The chain written op by op under ``jax.jit``: the elementwise ops fuse into the sum."""
    import jax

    import oocarr

    sa, sb, files = _chain_inputs(ctx, fmt)
    chain = jax.jit(lambda a, b: oocarr.sum(((a - b) * 2) ** 2))

    def run() -> float:
        return float(chain(oocarr.open(sa.url), oocarr.open(sb.url)))

    return Case(run, files, _scalar)


def _chain_dask(ctx: Context, op: str, fmt: str) -> Case:
    sa, sb, files = _chain_inputs(ctx, fmt)

    def run() -> float:
        (a, close_a), (b, close_b) = dask_array(sa), dask_array(sb)
        try:
            return float((((a - b) * 2) ** 2).sum().compute())
        finally:
            close_a()
            close_b()

    return Case(run, files, _scalar)


def _chain_loop(ctx: Context, op: str, fmt: str) -> Case:
    sa, sb, files = _chain_inputs(ctx, fmt)

    def run() -> float:
        pairs = zip(read_blocks(sa), read_blocks(sb))
        return sum(float((((a - b) * 2) ** 2).sum()) for (_, a), (_, b) in pairs)

    return Case(run, files, _scalar)


# Workload 3: matmul ------------------------------------------------------------------------


def _matmul_inputs(ctx: Context, fmt: str) -> tuple[Stored, Stored, list[str]]:
    a, b = ctx.stored("matmul_A", fmt), ctx.stored("matmul_B", fmt)
    return a, b, sorted({a.path, b.path})


def _spot_memmap(result: np.ndarray) -> list:
    return spot_blocks(lambda r, c: result[r, c], result.shape)


def _matmul_oocarr(ctx: Context, op: str, fmt: str) -> Case:
    import oocarr

    sa, sb, files = _matmul_inputs(ctx, fmt)

    def run() -> Any:
        return oocarr.matmul(oocarr.open(sa.url), oocarr.open(sb.url))

    def check(product: Any) -> list:
        return spot_blocks(lambda r, c: product.store[r, c], product.shape)

    return Case(run, files, check)


def _store_to_npy(result: Any, path: str) -> np.ndarray:
    """Dask ``result`` computed into a new ``.npy`` file (a memmap), as oocarr's is."""
    import dask.array as da

    out = np.lib.format.open_memmap(path, mode="w+", dtype=result.dtype, shape=result.shape)
    da.store(result, out, lock=False)
    return out


def _matmul_dask(ctx: Context, op: str, fmt: str) -> Case:
    sa, sb, files = _matmul_inputs(ctx, fmt)
    out = ctx.output("matmul-dask.npy")

    def run() -> np.ndarray:
        # Square blocks (the HDF5 chunks, and the same for .npy): dask's matmul contracts
        # block by block, and row slabs of A would make every task hold all of B.
        (a, close_a), (b, close_b) = dask_array(sa, GRID_CHUNK), dask_array(sb, GRID_CHUNK)
        try:
            return _store_to_npy(a @ b, out)
        finally:
            close_a()
            close_b()

    return Case(run, files, _spot_memmap, lambda: remove(out))


def _matmul_numpy(ctx: Context, op: str, fmt: str) -> Case:
    a = np.load(ctx.stored("matmul_A", "npy").path)
    b = np.load(ctx.stored("matmul_B", "npy").path)
    return Case(lambda: np.matmul(a, b), [], _spot_memmap)


# Workload 4: tall-skinny X @ W -------------------------------------------------------------


def _tall_oocarr(ctx: Context, op: str, fmt: str) -> Case:
    import jax.numpy as jnp

    import oocarr

    x = ctx.stored("tall_X", fmt)
    w = jnp.asarray(tall_weights(ctx.sizes))

    def run() -> Any:
        return oocarr.open(x.url) @ w

    def check(product: Any) -> list:
        return spot_blocks(lambda r, c: product.store[r, c], product.shape)

    return Case(run, [x.path], check)


def _tall_dask(ctx: Context, op: str, fmt: str) -> Case:
    x = ctx.stored("tall_X", fmt)
    w = tall_weights(ctx.sizes)
    out = ctx.output("tall-dask.npy")

    def run() -> np.ndarray:
        xd, close = dask_array(x)
        try:
            return _store_to_npy(xd @ w, out)
        finally:
            close()

    return Case(run, [x.path], _spot_memmap, lambda: remove(out))


def _tall_loop(ctx: Context, op: str, fmt: str) -> Case:
    x = ctx.stored("tall_X", fmt)
    w = tall_weights(ctx.sizes)
    out = ctx.output("tall-loop.npy")

    def run() -> np.ndarray:
        shape = (x.spec.shape[0], w.shape[1])
        result = np.lib.format.open_memmap(out, "w+", "f4", shape)
        for (rows, _), slab in read_blocks(x, slab_rows(x.spec)):
            np.matmul(slab, w, out=result[rows])
        return result

    return Case(run, [x.path], _spot_memmap, lambda: remove(out))


# Workload 5: least squares, value and gradient ----------------------------------------------


def lsq_start(sizes: Sizes) -> np.ndarray:
    """The weights workload 5 differentiates at: ``(d, 1)`` of :data:`LSQ_W0`."""
    return np.full((sizes.lsq_shape[1], 1), LSQ_W0, np.float32)


def _lsq_inputs(ctx: Context, fmt: str = "hdf5") -> tuple[Stored, Stored, list[str]]:
    x, y = ctx.stored("lsq_X", fmt), ctx.stored("lsq_y", fmt)
    return x, y, sorted({x.path, y.path})


def _value_grad(result: Any) -> dict[str, Any]:
    value, grad = result
    return {"value": float(value), "grad": np.asarray(grad, dtype=float).ravel().tolist()}


def _lsq_stored_case(ctx: Context, fmt: str, loss: Callable[..., Any]) -> Case:
    """``jax.jit(jax.value_and_grad(loss))(w, X, y)`` with ``X`` and ``y`` opened by oocarr."""
    import jax
    import jax.numpy as jnp

    import oocarr

    x, y, files = _lsq_inputs(ctx, fmt)
    step = jax.jit(jax.value_and_grad(loss))
    w = jnp.asarray(lsq_start(ctx.sizes))

    def run() -> Any:
        value, grad = step(w, oocarr.open(x.url), oocarr.open(y.url))
        return float(value), np.asarray(grad)

    return Case(run, files, _value_grad)


def _lsq_oocarr(ctx: Context, op: str, fmt: str) -> Case:
    import jax.numpy as jnp

    import oocarr

    loss = oocarr.stream_sum(lambda w, xb, yb: jnp.sum((xb @ w - yb) ** 2))
    return _lsq_stored_case(ctx, fmt, loss)


def _lsq_oocarr_opbyop(ctx: Context, op: str, fmt: str) -> Case:
    import oocarr

    return _lsq_stored_case(ctx, fmt, lambda w, x, y: oocarr.sum(oocarr.square(x @ w - y)))


def _lsq_jax(ctx: Context, op: str, fmt: str) -> Case:
    import h5py
    import jax
    import jax.numpy as jnp

    x, y, _ = _lsq_inputs(ctx)
    with h5py.File(x.path, "r") as f:  # the load is not timed
        data_x, data_y = jnp.asarray(f[x.dataset][...]), jnp.asarray(f[y.dataset][...])
    step = jax.jit(jax.value_and_grad(lambda w, x, y: jnp.sum((x @ w - y) ** 2)))
    w = jnp.asarray(lsq_start(ctx.sizes))

    def run() -> Any:
        value, grad = step(w, data_x, data_y)
        return float(value), np.asarray(grad)

    return Case(run, [], _value_grad)


def _lsq_dask(ctx: Context, op: str, fmt: str) -> Case:
    import dask

    x, y, files = _lsq_inputs(ctx, fmt)
    w = lsq_start(ctx.sizes)

    def run() -> Any:
        (xd, close_x), (yd, close_y) = dask_array(x), dask_array(y)
        try:
            residual = xd @ w - yd
            return dask.compute((residual**2).sum(), xd.T @ (2 * residual))
        finally:
            close_x()
            close_y()

    return Case(run, files, _value_grad)


def _lsq_loop(ctx: Context, op: str, fmt: str) -> Case:
    x, y, files = _lsq_inputs(ctx, fmt)
    w = lsq_start(ctx.sizes)

    def run() -> Any:
        value, grad = 0.0, np.zeros(w.shape)
        rows = slab_rows(x.spec)
        for (_, xb), (_, yb) in zip(read_blocks(x, rows), read_blocks(y, rows)):
            residual = xb @ w - yb
            value += float(np.vdot(residual, residual))
            grad += xb.T @ (2 * residual)
        return value, grad

    return Case(run, files, _value_grad)


# Workload 6: one epoch of minibatches -------------------------------------------------------


def _batch_step() -> Callable[[Any, Any], Any]:
    """The trivial training step, the same for oocarr's batches and the loop's."""
    import jax
    import jax.numpy as jnp

    return jax.jit(lambda xb, yb: jnp.sum(xb) + jnp.sum(yb))


def _epoch_check(result: tuple[float, int]) -> dict[str, Any]:
    return {"total": result[0], "rows": result[1]}


def _batches_oocarr(ctx: Context, op: str, fmt: str) -> Case:
    import oocarr

    x, y, files = _lsq_inputs(ctx)
    step = _batch_step()
    shuffle = op.startswith("shuffled")
    buffer_rows = None  # the default: what the budget leaves

    def loader() -> Any:
        features, targets = oocarr.open(x.url), oocarr.open(y.url)
        return oocarr.batches(
            features,
            targets,
            batch_size=BATCH_SIZE,
            shuffle=shuffle,
            seed=0,
            shuffle_buffer=buffer_rows,
        )

    if op == "shuffled-one-block":  # the loop's mixing: rows of one block (and a remainder)
        buffer_rows = loader().plan()["block_rows"] + BATCH_SIZE

    def run() -> tuple[float, int]:
        total, rows = 0.0, 0
        for xb, yb in loader():
            total += float(step(xb, yb))
            rows += xb.shape[0]
        return total, rows

    return Case(run, files, _epoch_check, info={"block_rows": loader().plan()["block_rows"]})


def _batches_loop(ctx: Context, op: str, fmt: str) -> Case:
    """The h5py peer of ``batches``: the same block reads (rows per block from oocarr's plan,
    aligned to the chunks), in order or in a shuffled block order, then batches of rows
    gathered from the block buffer in order or at random.  oocarr does not expose the row
    order it produced, so the shuffled peer has its own order with the same reads and copies.
    """
    import h5py

    x, y, files = _lsq_inputs(ctx)
    step = _batch_step()
    shuffle = op.startswith("shuffled")
    rows, cols = x.spec.shape
    block = int(ctx.hints.get("block_rows", {}).get(op) or x.spec.chunks[0])

    def run() -> tuple[float, int]:
        rng = np.random.default_rng(0)
        starts = np.arange(0, rows, block)
        if shuffle:
            starts = rng.permutation(starts)
        buf_x = np.empty((block + BATCH_SIZE, cols), np.float32)
        buf_y = np.empty((block + BATCH_SIZE, 1), np.float32)
        total, delivered, held = 0.0, 0, 0
        with h5py.File(x.path, "r") as f:
            dx, dy = f[x.dataset], f[y.dataset]
            for number, start in enumerate(starts):
                stop = min(start + block, rows)
                dx.read_direct(buf_x, np.s_[start:stop], np.s_[held : held + stop - start])
                dy.read_direct(buf_y, np.s_[start:stop], np.s_[held : held + stop - start])
                held += stop - start
                order = rng.permutation(held) if shuffle else np.arange(held)
                last = number == len(starts) - 1
                whole = held if last else held // BATCH_SIZE * BATCH_SIZE
                for first in range(0, whole, BATCH_SIZE):
                    picked = order[first : first + BATCH_SIZE]
                    xb, yb = np.take(buf_x, picked, axis=0), np.take(buf_y, picked, axis=0)
                    total += float(step(xb, yb))
                    delivered += len(picked)
                left = order[whole:]
                buf_x[: len(left)], buf_y[: len(left)] = buf_x[left], buf_y[left]
                held = len(left)
        return total, delivered

    return Case(run, files, _epoch_check, info={"block_rows": block})


# Workload 7: convert HDF5 -> Zarr and back -------------------------------------------------


def _convert_ends(ctx: Context, direction: str, engine: str) -> tuple[Stored, str, str]:
    """The source, the destination path and its URL (``.h5#/x`` for HDF5) of ``direction``
    (``"hdf5-to-zarr"`` or ``"zarr-to-hdf5"``)."""
    src_fmt, dst_fmt = direction.split("-to-")
    source = ctx.stored("convert", src_fmt)
    suffix = ".zarr" if dst_fmt == "zarr" else ".h5"
    path = ctx.output(f"converted-{engine}{suffix}")
    return source, path, path if dst_fmt == "zarr" else f"{path}#/x"


def _read_any(path: str, region: tuple[slice, slice]) -> np.ndarray:
    if path.endswith(".zarr"):
        import zarr

        return zarr.open_array(path, mode="r")[region]
    import h5py

    with h5py.File(path, "r") as f:
        return f["x"][region]


def _convert_check(source: Stored, path: str) -> Callable[[Any], dict[str, Any]]:
    """A check that compares three chunks of the copy with the source, exactly."""

    def check(_: Any) -> dict[str, Any]:
        regions = list(region_grid(source.spec.shape, source.spec.chunks))
        picked = [regions[0], regions[len(regions) // 2], regions[-1]]
        equal = all(np.array_equal(_read_any(path, r), _read_any(source.path, r)) for r in picked)
        if not equal:
            raise AssertionError(f"{path} differs from {source.url}")
        return {"equal": equal, "chunks_compared": len(picked)}

    return check


def _convert_oocarr(ctx: Context, op: str, fmt: str) -> Case:
    from oocarr.cli.main import main

    source, path, url = _convert_ends(ctx, fmt, "oocarr")

    def run() -> None:
        remove(path)
        args = ["-q", "--memory", str(ctx.budget), "convert", source.url, url]
        main(args, standalone_mode=False)

    return Case(run, [source.path], _convert_check(source, path), lambda: remove(path))


def _convert_dask(ctx: Context, op: str, fmt: str) -> Case:
    source, path, _ = _convert_ends(ctx, fmt, "dask")

    def run() -> None:
        remove(path)
        x, close = dask_array(source)
        try:
            if path.endswith(".zarr"):
                x.to_zarr(path, compressors=None)
            else:
                x.to_hdf5(path, "/x", chunks=source.spec.chunks)
        finally:
            close()

    return Case(run, [source.path], _convert_check(source, path), lambda: remove(path))


def _convert_loop(ctx: Context, op: str, fmt: str) -> Case:
    import h5py
    import zarr

    source, path, _ = _convert_ends(ctx, fmt, "loop")
    shape, chunks = source.spec.shape, source.spec.chunks

    def run() -> None:
        remove(path)
        if path.endswith(".zarr"):
            dst = zarr.create_array(
                path, shape=shape, chunks=chunks, dtype="float32", compressors=None
            )
            for region, block in read_blocks(source):
                dst[region] = block
            return
        z = zarr.open_array(source.path, mode="r")
        with h5py.File(path, "w") as f:
            dst = f.create_dataset("x", shape, "f4", chunks=chunks)
            for region in region_grid(shape, chunks):
                dst[region] = z[region]

    return Case(run, [source.path], _convert_check(source, path), lambda: remove(path))


#: (workload, engine) -> runner(ctx, op, fmt) -> Case.
RUNNERS: dict[tuple[str, str], Callable[[Context, str, str], Case]] = {
    ("sum", "oocarr"): _sum_oocarr,
    ("sum", "dask"): _sum_dask,
    ("sum", "loop"): _sum_loop,
    ("chain", "oocarr"): _chain_oocarr,
    ("chain", "oocarr-opbyop"): _chain_oocarr_opbyop,
    ("chain", "dask"): _chain_dask,
    ("chain", "loop"): _chain_loop,
    ("matmul", "oocarr"): _matmul_oocarr,
    ("matmul", "dask"): _matmul_dask,
    ("matmul", "numpy"): _matmul_numpy,
    ("tall", "oocarr"): _tall_oocarr,
    ("tall", "dask"): _tall_dask,
    ("tall", "loop"): _tall_loop,
    ("lsq", "oocarr"): _lsq_oocarr,
    ("lsq", "oocarr-opbyop"): _lsq_oocarr_opbyop,
    ("lsq", "jax"): _lsq_jax,
    ("lsq", "dask"): _lsq_dask,
    ("lsq", "loop"): _lsq_loop,
    ("batches", "oocarr"): _batches_oocarr,
    ("batches", "loop"): _batches_loop,
    ("convert", "oocarr"): _convert_oocarr,
    ("convert", "dask"): _convert_dask,
    ("convert", "loop"): _convert_loop,
}


def prepare_engine(workload: str, engine: str, budget: int, scratch: str) -> Callable[[], Any]:
    """Configure ``engine`` in this (worker) process; return a tiny warm-up operation that
    brings in what its first real call would (libraries, backends, thread pools)."""
    if engine.startswith("oocarr"):
        import oocarr

        if not os.environ.get("OOCARR_SCRATCH_DIR"):
            os.makedirs(scratch, exist_ok=True)
            oocarr.set_scratch_dir(scratch)
        oocarr.set_memory_budget(budget)
        return lambda: float(oocarr.sum(oocarr.from_numpy(np.ones((64, 64), np.float32))))
    if engine == "dask":
        import dask
        import dask.array as da
        import h5py  # noqa: F401
        import zarr  # noqa: F401

        dask.config.set(scheduler="threads")
        return lambda: float(da.ones((64, 64), chunks=32).sum().compute())
    if engine == "jax" or workload == "batches":  # the batches loop steps in JAX too
        import h5py  # noqa: F401
        import jax.numpy as jnp

        return lambda: float(jnp.ones((64, 64)).sum())
    import h5py  # noqa: F401

    return lambda: float(np.ones((64, 64)).sum())
