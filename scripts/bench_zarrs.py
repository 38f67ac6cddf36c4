"""The data and the cases of two workloads of ``scripts/bench.py`` (issue 15).

``zarrs``: the shape of the public zarrs benchmark: a uint16 cube (1024³ at full size), 256³
chunks, written once by zarr-python in four variants: uncompressed, zstd, sharded (64³ inner
chunks, zstd) and Zarr v2 with Blosc-LZ4; a full read into memory and a sum, by oocarr,
TensorStore, zarr-python and Dask.

``hdf5-plugins``: a float32 HDF5 dataset (4 GiB at full size) compressed with Blosc-LZ4 and
with Zstd through hdf5plugin; a full read and a sum, by oocarr, Dask (``da.from_array`` of the
h5py dataset) and h5py's own read.  oocarr is not given ``import hdf5plugin``: its driver
registers the filters itself.

Heavy libraries are imported inside the runners, so a worker imports only what its engine uses.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import bench_workloads as bw
import numpy as np


@dataclass(frozen=True)
class FormatSizes:
    """The arrays of one size of run: the cube, its chunks and inner chunks, the HDF5 plane."""

    side: int
    chunk: int
    inner: int
    plane: tuple[int, int]
    plane_chunks: tuple[int, int]

    @property
    def cube_bytes(self) -> int:
        return self.side**3 * 2

    @property
    def plane_bytes(self) -> int:
        return self.plane[0] * self.plane[1] * 4


SIZES = {
    "full": FormatSizes(1024, 256, 64, (32768, 32768), (1024, 1024)),
    "quick": FormatSizes(512, 128, 32, (8192, 8192), (1024, 1024)),
    "tiny": FormatSizes(128, 32, 8, (1024, 1024), (256, 256)),
}

ZARR_FORMATS = ("zarr-raw", "zarr-zstd", "zarr-sharded", "zarr2-blosc-lz4")
HDF5_FORMATS = ("hdf5-blosc-lz4", "hdf5-zstd")
FILES = {
    "zarr-raw": "cube_raw.zarr",
    "zarr-zstd": "cube_zstd.zarr",
    "zarr-sharded": "cube_sharded.zarr",
    "zarr2-blosc-lz4": "cube_v2_blosc_lz4.zarr",
    "hdf5-blosc-lz4": "plane_blosc_lz4.h5",
    "hdf5-zstd": "plane_zstd.h5",
}
WORKLOAD_FORMATS = {"zarrs": ZARR_FORMATS, "hdf5-plugins": HDF5_FORMATS}
DATASET = "x"
#: Values of the cube: 10-bit, a smooth ramp plus noise (an image compressors can work on).
CUBE_LEVELS = 1024
PLANE_SEED = 11


def sizes_of(sizes: bw.Sizes) -> FormatSizes:
    """This module's sizes for the run whose :class:`bench_workloads.Sizes` is ``sizes``."""
    return SIZES[next(mode for mode, s in bw.SIZES.items() if s == sizes)]


def path_of(data_dir: str, fmt: str) -> str:
    return os.path.join(data_dir, FILES[fmt])


def url_of(data_dir: str, fmt: str) -> str:
    """The oocarr URL of ``fmt``'s array (``file.h5#/x`` for HDF5)."""
    path = path_of(data_dir, fmt)
    return f"{path}#/{DATASET}" if fmt.startswith("hdf5") else path


def size_label(workload: str, sizes: bw.Sizes) -> str:
    s = sizes_of(sizes)
    if workload == "zarrs":
        return f"{s.side}³ uint16 ({bw_bytes(s.cube_bytes)}), chunks {s.chunk}³, inner {s.inner}³"
    rows, cols = s.plane
    return f"{rows}×{cols} float32 ({bw_bytes(s.plane_bytes)}), chunks {s.plane_chunks}"


def bw_bytes(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


# --------------------------------------------------------------------------------------------
# The data


def cube_layers(side: int, start: int, stop: int) -> np.ndarray:
    """Layers ``start:stop`` of the cube (the same values at every slab size)."""
    ramp = (np.arange(side)[:, None] + np.arange(side)[None, :]) // 4
    layers = []
    for z in range(start, stop):
        noise = np.random.default_rng([PLANE_SEED, z]).integers(0, 64, (side, side))
        layers.append(((ramp + z + noise) % CUBE_LEVELS).astype(np.uint16))
    return np.stack(layers)


def _create_zarr(path: str, fmt: str, s: FormatSizes) -> Any:
    import numcodecs
    import zarr
    from zarr.codecs import ZstdCodec

    shape, chunks = (s.side,) * 3, (s.chunk,) * 3
    kwargs: dict[str, Any] = {"compressors": None}
    if fmt == "zarr-zstd":
        kwargs = {"compressors": ZstdCodec()}
    elif fmt == "zarr-sharded":
        kwargs = {"compressors": ZstdCodec(), "shards": chunks}
        chunks = (s.inner,) * 3
    elif fmt == "zarr2-blosc-lz4":
        blosc = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
        kwargs = {"compressors": blosc, "zarr_format": 2}
    return zarr.create_array(path, shape=shape, chunks=chunks, dtype="uint16", **kwargs)


def _write_zarr(path: str, fmt: str, s: FormatSizes) -> None:
    z = _create_zarr(path, fmt, s)
    for start in range(0, s.side, s.chunk):
        z[start : start + s.chunk] = cube_layers(s.side, start, start + s.chunk)


def _plane_spec(s: FormatSizes) -> bw.ArraySpec:
    return bw.ArraySpec("plane", s.plane, s.plane_chunks, PLANE_SEED)


def _hdf5_filter(fmt: str) -> Any:
    import hdf5plugin

    if fmt == "hdf5-blosc-lz4":
        return hdf5plugin.Blosc(cname="lz4", clevel=5, shuffle=hdf5plugin.Blosc.SHUFFLE)
    return hdf5plugin.Zstd(clevel=3)


def _write_hdf5(path: str, fmt: str, s: FormatSizes) -> None:
    import h5py

    spec = _plane_spec(s)
    with h5py.File(path, "w") as f:
        dset = f.create_dataset(DATASET, s.plane, "f4", chunks=s.plane_chunks, **_hdf5_filter(fmt))
        step = bw._write_slab_rows(spec)
        for start in range(0, s.plane[0], step):
            dset[start : start + step] = bw.rows_of(spec, start, min(start + step, s.plane[0]))


def _mismatch(path: str, fmt: str, s: FormatSizes) -> str | None:
    """Why the existing ``path`` is not ``fmt``'s array of this size, or ``None``."""
    if fmt.startswith("hdf5"):
        import h5py

        with h5py.File(path, "r") as f:
            d = f.get(DATASET)
            got = None if d is None else (d.shape, d.chunks, d.dtype.str)
        want = (s.plane, s.plane_chunks, "<f4")
    else:
        import zarr

        z = zarr.open_array(path, mode="r")
        got = (z.shape, z.chunks, z.shards, z.metadata.zarr_format, z.dtype.str)
        sharded = fmt == "zarr-sharded"
        chunks = (s.inner if sharded else s.chunk,) * 3
        shards = (s.chunk,) * 3 if sharded else None
        want = ((s.side,) * 3, chunks, shards, 2 if fmt.startswith("zarr2") else 3, "<u2")
    return None if got == want else f"has {got}, not {want}"


def ensure_data(
    data_dir: str, sizes: bw.Sizes, workloads: list[str], log: Callable[[str], None]
) -> dict[str, float]:
    """Write the arrays of ``workloads`` missing from ``data_dir``; reuse those present.

    As :func:`bench_workloads.ensure_data`: each under a temporary name, renamed when
    complete; an existing array of another layout is an error.
    """
    s = sizes_of(sizes)
    os.makedirs(data_dir, exist_ok=True)
    seconds = {}
    for fmt in [f for w in workloads for f in WORKLOAD_FORMATS.get(w, ())]:
        path = path_of(data_dir, fmt)
        if os.path.exists(path):
            if (why := _mismatch(path, fmt, s)) is not None:
                raise SystemExit(f"{path} exists but {why}; remove it or choose another --dir")
            continue
        nbytes = s.plane_bytes if fmt.startswith("hdf5") else s.cube_bytes
        if shutil.disk_usage(data_dir).free < nbytes + bw.OUTPUT_ROOM_BYTES:
            raise SystemExit(f"{data_dir} has no room for {path}; choose another --dir")
        t0 = time.perf_counter()
        log(f"writing {path} ({nbytes / 2**30:.2f} GiB before compression)")
        head, tail = os.path.split(path)
        partial = os.path.join(head, f".{tail}.partial-{os.getpid()}")
        (_write_hdf5 if fmt.startswith("hdf5") else _write_zarr)(partial, fmt, s)
        os.rename(partial, path)
        seconds[os.path.basename(path)] = time.perf_counter() - t0
    if seconds:
        os.sync()
    return seconds


# --------------------------------------------------------------------------------------------
# Cases


def fingerprint(values: Any) -> dict[str, Any]:
    """A read's check value: its shape, dtype and a BLAKE2b digest of its bytes."""
    a = np.ascontiguousarray(values)
    digest = hashlib.blake2b(memoryview(a).cast("B"), digest_size=16).hexdigest()
    return {"shape": list(a.shape), "dtype": a.dtype.name, "digest": digest}


def _uint32_total(value: Any) -> float:
    """A uint16 cube's sum as jax.numpy's dtype rules give it (and so oocarr.sum): without
    x64, a uint16 sum accumulates in uint32, so every engine's exact total is taken modulo
    2**32 before the engines are compared."""
    return float(int(round(float(value))) % 2**32)


def _check(op: str, fmt: str) -> Callable[[Any], Any]:
    if op == "read":
        return fingerprint
    return float if fmt.startswith("hdf5") else _uint32_total


def _info(op: str, nbytes: int) -> dict[str, Any]:
    """The bytes of a read's result: the RSS a read legitimately holds beyond the budget."""
    return {"result_bytes": nbytes} if op == "read" else {}


def _case(ctx: bw.Context, op: str, fmt: str, read: Callable, add: Callable) -> bw.Case:
    """A case of ``op`` on ``fmt``: ``read()`` for a full read, ``add()`` for a sum."""
    s = sizes_of(ctx.sizes)
    nbytes = s.plane_bytes if fmt.startswith("hdf5") else s.cube_bytes
    run = read if op == "read" else add
    return bw.Case(run, [path_of(ctx.data_dir, fmt)], _check(op, fmt), info=_info(op, nbytes))


def _slab_sum(length: int, step: int, read: Callable[[int, int], np.ndarray]) -> float:
    """The sum of ``read(start, stop)`` over slabs of ``step`` along the first axis."""
    total = 0
    for start in range(0, length, step):
        total += read(start, min(start + step, length)).sum(dtype=np.float64)
    return float(total)


def _oocarr(ctx: bw.Context, op: str, fmt: str) -> bw.Case:
    import oocarr

    url = url_of(ctx.data_dir, fmt)
    return _case(
        ctx,
        op,
        fmt,
        lambda: oocarr.to_numpy(oocarr.open(url)),
        lambda: float(oocarr.sum(oocarr.open(url))),
    )


def _tensorstore(ctx: bw.Context, op: str, fmt: str) -> bw.Case:
    import tensorstore as ts

    driver = "zarr" if fmt.startswith("zarr2") else "zarr3"
    spec = {"driver": driver, "kvstore": {"driver": "file", "path": path_of(ctx.data_dir, fmt)}}
    s = sizes_of(ctx.sizes)

    def read() -> np.ndarray:
        return ts.open(spec, read=True).result().read().result()

    def add() -> float:
        t = ts.open(spec, read=True).result()
        return _slab_sum(s.side, s.chunk, lambda a, b: t[a:b].read().result())

    return _case(ctx, op, fmt, read, add)


def _zarr_python(ctx: bw.Context, op: str, fmt: str) -> bw.Case:
    import zarr

    path = path_of(ctx.data_dir, fmt)
    s = sizes_of(ctx.sizes)

    def add() -> float:
        z = zarr.open_array(path, mode="r")
        return _slab_sum(s.side, s.chunk, lambda a, b: z[a:b])

    return _case(ctx, op, fmt, lambda: zarr.open_array(path, mode="r")[...], add)


def _dask_zarr(ctx: bw.Context, op: str, fmt: str) -> bw.Case:
    import dask.array as da
    import zarr

    path = path_of(ctx.data_dir, fmt)

    def array() -> Any:
        z = zarr.open_array(path, mode="r")
        return da.from_zarr(z, chunks=z.shards or z.chunks)  # whole shards per task

    return _case(
        ctx,
        op,
        fmt,
        lambda: array().compute(),
        lambda: float(array().sum(dtype=np.float64).compute()),
    )


def _dask_hdf5(ctx: bw.Context, op: str, fmt: str) -> bw.Case:
    import dask.array as da
    import h5py
    import hdf5plugin  # noqa: F401  (what a Dask user has to import)

    path = path_of(ctx.data_dir, fmt)

    def run(compute: Callable[[Any], Any]) -> Callable[[], Any]:
        def timed() -> Any:
            with h5py.File(path, "r") as f:
                dset = f[DATASET]
                return compute(da.from_array(dset, chunks=dset.chunks))

        return timed

    read = run(lambda x: x.compute())
    add = run(lambda x: float(x.sum(dtype=np.float64).compute()))
    return _case(ctx, op, fmt, read, add)


def _h5py(ctx: bw.Context, op: str, fmt: str) -> bw.Case:
    import h5py
    import hdf5plugin  # noqa: F401

    path = path_of(ctx.data_dir, fmt)
    s = sizes_of(ctx.sizes)

    def read() -> np.ndarray:
        with h5py.File(path, "r") as f:
            return f[DATASET][...]

    def add() -> float:
        rows = bw.slab_rows(_plane_spec(s))
        blocks = bw._h5_blocks(path, DATASET, (rows, s.plane[1]))
        return float(sum(block.sum(dtype=np.float64) for _, block in blocks))

    return _case(ctx, op, fmt, read, add)


#: (workload, engine) -> runner(ctx, op, fmt) -> Case.
RUNNERS: dict[tuple[str, str], Callable[[bw.Context, str, str], bw.Case]] = {
    ("zarrs", "oocarr"): _oocarr,
    ("zarrs", "tensorstore"): _tensorstore,
    ("zarrs", "zarr"): _zarr_python,
    ("zarrs", "dask"): _dask_zarr,
    ("hdf5-plugins", "oocarr"): _oocarr,
    ("hdf5-plugins", "dask"): _dask_hdf5,
    ("hdf5-plugins", "h5py"): _h5py,
}


def prepare_engine(workload: str, engine: str, budget: int, scratch: str) -> Callable[[], Any]:
    """:func:`bench_workloads.prepare_engine`, plus the peers of these workloads."""
    if workload not in WORKLOAD_FORMATS or engine.startswith("oocarr"):
        return bw.prepare_engine(workload, engine, budget, scratch)
    if engine == "dask":
        warm_up = bw.prepare_engine(workload, engine, budget, scratch)
        import hdf5plugin  # noqa: F401

        return warm_up
    if engine == "tensorstore":
        import tensorstore as ts

        def warm_up() -> float:
            spec = {"driver": "zarr3", "kvstore": {"driver": "memory"}}
            t = ts.open(spec, create=True, dtype=ts.uint16, shape=[64, 64]).result()
            t.write(np.ones((64, 64), np.uint16)).result()
            return float(t.read().result().sum())

        return warm_up
    if engine == "zarr":
        import zarr

        def warm_up() -> float:
            z = zarr.create_array({}, shape=(64, 64), chunks=(32, 32), dtype="uint16")
            z[...] = 1
            return float(z[...].sum())

        return warm_up
    import h5py  # noqa: F401
    import hdf5plugin  # noqa: F401

    return lambda: float(np.ones((64, 64)).sum())
