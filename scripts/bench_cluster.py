"""The data and the cases of workload 10 of ``scripts/bench.py`` (issue 16): on a Dask cluster.

``cluster``: a sum, the least-squares ``value_and_grad`` and a convert to Zarr with zstd, run
by oocarr inside ``oocarr.executor(client)`` on a 2-worker ``distributed.LocalCluster`` (one
thread per worker process, on 127.0.0.1), beside ``dask.array`` on the same kind of cluster
and beside oocarr's local executor (no cluster, the same budget).  Every engine does the same
work:

- ``sum``: ``oocarr.sum(x)``; ``da.from_zarr(x).sum(dtype=float64)``.
- ``value_and_grad``: ``jax.value_and_grad(oocarr.stream_sum(loss, mean=True))`` with
  ``loss(w, x, y) = (x @ w - y) ** 2``, jitted; Dask computes ``r = X @ w - y``, the value
  ``(r**2).mean()`` and the gradient ``2 X^T r / n`` together.
- ``convert``: ``oocarr.save(x, out, compression="zstd", chunks=x's chunks)``;
  ``da.to_zarr`` with the same chunks and ``ZstdCodec(level=3)`` (oocarr's zstd level).

Inputs and the convert destination are Zarr v3 (the format that takes parallel writers):
the ``sum`` and ``convert`` arrays of workloads 1 and 7 (``sum.zarr``, ``convert.zarr``,
uncompressed, 1024×1024 chunks), and workload 5's least-squares data with the same values
written here as zstd Zarr (``lsq_X_zstd.zarr``, 4 MiB row chunks, and a 1-d
``lsq_y_zstd.zarr``).

Each cluster engine's worker process starts its ``LocalCluster`` and client before its
warm-up, reuses them for every run, and closes both when it exits.  Its peak RSS is the
client process's only: the cluster's worker processes are not included.  oocarr measures
each task's peak on its worker; the largest over the runs (``io_stats().total.peak_task_bytes``)
is in the JSON's ``info`` of the ``oocarr-dask`` measurements, as ``peak_task_bytes``.

Heavy libraries are imported inside the runners, so a worker imports only what its engine uses.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import time
from collections.abc import Callable
from typing import Any

import bench_workloads as bw
import bench_zarrs as bz
import numpy as np

WORKLOAD = "cluster"
OPS = ("sum", "value_and_grad", "convert")
FORMAT = "zarr"
#: Workers of the cluster: processes of one thread each, the client and scheduler here.
CLUSTER = {
    "n_workers": 2,
    "threads_per_worker": 1,
    "processes": True,
    "host": "127.0.0.1",
    "dashboard_address": None,
}
#: oocarr's level for ``compression="zstd"`` (``oocarr_drivers.zarr_codecs.DEFAULT_LEVELS``).
ZSTD_LEVEL = 3
#: The least-squares arrays this module writes: (array of workload 5, file name).
LSQ_FILES = {"lsq_X": "lsq_X_zstd.zarr", "lsq_y": "lsq_y_zstd.zarr"}
#: The arrays of other workloads read here, in Zarr.
REUSED = ("sum", "convert")

#: This worker process's cluster and client (``cluster``, ``client``), once started.
_running: dict[str, Any] = {}


def _mib(n: int) -> str:
    return bz.bw_bytes(n)


def size_label(workload: str, sizes: bw.Sizes) -> str:
    """The size column: each operation's arrays."""
    specs = bw.array_specs(sizes)
    s, x, c = specs["sum"], specs["lsq_X"], specs["convert"]
    return (
        f"sum {s.shape[0]}×{s.shape[1]} ({_mib(s.nbytes)}); "
        f"lsq {x.shape[0]}×{x.shape[1]} + y ({_mib(x.nbytes)}, zstd); "
        f"convert {c.shape[0]}×{c.shape[1]} ({_mib(c.nbytes)}) → zstd"
    )


# --------------------------------------------------------------------------------------------
# The data


def lsq_stored(data_dir: str, sizes: bw.Sizes, array: str) -> bw.Stored:
    """Workload 5's ``array`` (``lsq_X`` or ``lsq_y``) in this module's zstd Zarr; ``y`` is
    1-d, as the weights are (``(x @ w - y) ** 2`` is one value per row)."""
    spec = bw.array_specs(sizes)[array]
    if array == "lsq_y":
        spec = bw.ArraySpec(spec.name, spec.shape[:1], spec.chunks[:1], spec.seed)
    return bw.Stored(spec, FORMAT, os.path.join(data_dir, LSQ_FILES[array]), None)


def _write_lsq(path: str, a: bw.Stored, sizes: bw.Sizes) -> None:
    import zarr
    from zarr.codecs import ZstdCodec

    full = bw.array_specs(sizes)[a.spec.name]  # workload 5's spec gives the values
    out = zarr.create_array(
        path,
        shape=a.spec.shape,
        chunks=a.spec.chunks,
        dtype="float32",
        compressors=ZstdCodec(level=ZSTD_LEVEL),
    )
    step = bw._write_slab_rows(full)
    for start in range(0, full.shape[0], step):
        slab = bw.rows_of(full, start, min(start + step, full.shape[0]))
        out[start : start + len(slab)] = slab.reshape((len(slab), *a.spec.shape[1:]))


def _lsq_mismatch(a: bw.Stored) -> str | None:
    import zarr

    z = zarr.open_array(a.path, mode="r")
    codecs = [type(c).__name__ for c in z.compressors]
    got = (z.shape, z.chunks, z.metadata.zarr_format, z.dtype.str, codecs)
    want = (a.spec.shape, a.spec.chunks, 3, "<f4", ["ZstdCodec"])
    return None if got == want else f"has {got}, not {want}"


def ensure_data(
    data_dir: str, sizes: bw.Sizes, workloads: list[str], log: Callable[[str], None]
) -> dict[str, float]:
    """Write the arrays of ``workloads`` missing from ``data_dir``; reuse those present.

    As :func:`bench_workloads.ensure_data`: each under a temporary name, renamed when
    complete; an existing array of another layout is an error.
    """
    if WORKLOAD not in workloads:
        return {}
    os.makedirs(data_dir, exist_ok=True)
    wanted = [(bw.stored(data_dir, sizes, name, FORMAT), bw._mismatch) for name in REUSED]
    wanted += [(lsq_stored(data_dir, sizes, name), _lsq_mismatch) for name in LSQ_FILES]
    seconds = {}
    for a, mismatch in wanted:
        if os.path.exists(a.path):
            if (why := mismatch(a)) is not None:
                raise SystemExit(f"{a.path} exists but {why}; remove it or choose another --dir")
            continue
        if shutil.disk_usage(data_dir).free < a.spec.nbytes + bw.OUTPUT_ROOM_BYTES:
            raise SystemExit(f"{data_dir} has no room for {a.path}; choose another --dir")
        t0 = time.perf_counter()
        log(f"writing {a.path} ({a.spec.nbytes / 2**30:.2f} GiB before compression)")
        head, tail = os.path.split(a.path)
        partial = os.path.join(head, f".{tail}.partial-{os.getpid()}")
        if a.spec.name in LSQ_FILES:
            _write_lsq(partial, a, sizes)
        else:
            bw._write_zarr(partial, a)
        os.rename(partial, a.path)
        seconds[os.path.basename(a.path)] = time.perf_counter() - t0
    if seconds:
        os.sync()
    return seconds


# --------------------------------------------------------------------------------------------
# The cluster of a worker process


def start_cluster() -> Any:
    """This process's ``LocalCluster`` and client, started once and closed at exit."""
    if "client" not in _running:
        from distributed import Client, LocalCluster

        cluster = LocalCluster(**CLUSTER)
        _running["cluster"] = cluster
        _running["client"] = Client(cluster)
        atexit.register(close_cluster)  # after distributed's own handlers: runs before them
    return _running["client"]


def close_cluster() -> None:
    """Close the client, then the cluster and its worker processes."""
    client, cluster = _running.pop("client", None), _running.pop("cluster", None)
    if client is not None:
        with contextlib.suppress(Exception):
            client.close()
    if cluster is not None:
        with contextlib.suppress(Exception):
            cluster.close()


# --------------------------------------------------------------------------------------------
# Cases


def _lsq_inputs(ctx: bw.Context) -> tuple[bw.Stored, bw.Stored, np.ndarray]:
    x, y = (lsq_stored(ctx.data_dir, ctx.sizes, name) for name in LSQ_FILES)
    return x, y, bw.lsq_start(ctx.sizes).ravel()


def _convert_ends(ctx: bw.Context, engine: str) -> tuple[bw.Stored, str]:
    return ctx.stored("convert", FORMAT), ctx.output(f"cluster-converted-{engine}.zarr")


def _oocarr(ctx: bw.Context, op: str, fmt: str, client: Any = None) -> bw.Case:
    """oocarr's case: on ``client``'s cluster (``oocarr.executor``), or here when ``None``."""
    import oocarr

    info: dict[str, Any] = {}

    def on_cluster(work: Callable[[], Any]) -> Callable[[], Any]:
        if client is None:
            return work

        def run() -> Any:
            with oocarr.executor(client), oocarr.io_stats() as stats:
                result = work()
            peak = max(info.get("peak_task_bytes", 0), stats.total.peak_task_bytes)
            info["peak_task_bytes"] = peak
            return result

        return run

    if op == "sum":
        a = ctx.stored("sum", fmt)
        work = on_cluster(lambda: float(oocarr.sum(oocarr.open(a.url))))
        return bw.Case(work, [a.path], bw._scalar, info=info)
    if op == "value_and_grad":
        import jax
        import jax.numpy as jnp

        x, y, w0 = _lsq_inputs(ctx)

        def loss(w: Any, xb: Any, yb: Any) -> Any:
            return (xb @ w - yb) ** 2

        step = jax.jit(jax.value_and_grad(oocarr.stream_sum(loss, mean=True)))
        w = jnp.asarray(w0)

        def value_and_grad() -> Any:
            value, grad = step(w, oocarr.open(x.url), oocarr.open(y.url))
            return float(value), np.asarray(grad)

        return bw.Case(on_cluster(value_and_grad), [x.path, y.path], bw._value_grad, info=info)
    source, out = _convert_ends(ctx, "oocarr-dask" if client is not None else "oocarr")

    def convert() -> None:
        bw.remove(out)
        oocarr.save(oocarr.open(source.url), out, compression="zstd", chunks=source.spec.chunks)

    check = bw._convert_check(source, out)
    return bw.Case(on_cluster(convert), [source.path], check, lambda: bw.remove(out), info)


def _oocarr_dask(ctx: bw.Context, op: str, fmt: str) -> bw.Case:
    return _oocarr(ctx, op, fmt, start_cluster())


def _dask_cluster(ctx: bw.Context, op: str, fmt: str) -> bw.Case:
    """``dask.array`` from the same Zarr arrays, computed on the cluster's client."""
    import dask.array as da

    client = start_cluster()
    if op == "sum":
        a = ctx.stored("sum", fmt)

        def total() -> float:
            x = da.from_zarr(a.path)
            return float(client.compute(x.sum(dtype=np.float64), sync=True))

        return bw.Case(total, [a.path], bw._scalar)
    if op == "value_and_grad":
        x, y, w = _lsq_inputs(ctx)

        def value_and_grad() -> Any:
            xd, yd = da.from_zarr(x.path), da.from_zarr(y.path)
            residual = xd @ w - yd
            value = (residual**2).mean()
            grad = 2 * (xd.T @ residual) / xd.shape[0]
            return client.compute([value, grad], sync=True)

        return bw.Case(value_and_grad, [x.path, y.path], bw._value_grad)
    from zarr.codecs import ZstdCodec

    source, out = _convert_ends(ctx, "dask-cluster")

    def convert() -> None:
        bw.remove(out)
        x = da.from_zarr(source.path)  # chunks: the source's, and so the copy's
        stored = da.to_zarr(x, out, compute=False, compressors=ZstdCodec(level=ZSTD_LEVEL))
        client.compute(stored, sync=True)

    check = bw._convert_check(source, out)
    return bw.Case(convert, [source.path], check, lambda: bw.remove(out))


#: (workload, engine) -> runner(ctx, op, fmt) -> Case.
RUNNERS: dict[tuple[str, str], Callable[[bw.Context, str, str], bw.Case]] = {
    (WORKLOAD, "oocarr-dask"): _oocarr_dask,
    (WORKLOAD, "dask-cluster"): _dask_cluster,
    (WORKLOAD, "oocarr"): _oocarr,
}


def prepare_engine(workload: str, engine: str, budget: int, scratch: str) -> Callable[[], Any]:
    """:func:`bench_zarrs.prepare_engine`, plus the cluster engines of this workload: their
    cluster is started here, and the warm-up imports the engine's libraries on its workers."""
    if workload != WORKLOAD or engine == "oocarr":
        return bz.prepare_engine(workload, engine, budget, scratch)
    if engine == "oocarr-dask":
        warm_up = bw.prepare_engine(workload, engine, budget, scratch)
        client = start_cluster()

        def warm_oocarr() -> float:
            client.run(exec, "import oocarr, zarr")
            return warm_up()

        return warm_oocarr
    import dask.array as da
    import zarr  # noqa: F401

    client = start_cluster()

    def warm_dask() -> float:
        client.run(exec, "import dask.array, zarr")
        return float(client.compute(da.ones((64, 64), chunks=32).sum(), sync=True))

    return warm_dask
