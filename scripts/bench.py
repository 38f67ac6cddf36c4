"""Benchmark oocarr side by side with the tools a user would pick instead, on the same files.

Every figure is a ratio to a peer measured in the same run: Dask (threaded scheduler, chunks
matched to the storage), a plain read loop over the same driver (h5py ``read_direct``, NumPy
``readinto``, zarr-python), and the data in memory (NumPy, JAX) where the workload fits.

    python scripts/bench.py --quick                      # about 2 minutes on 2 cores
    python scripts/bench.py --json out.json --markdown out.md
    python scripts/bench.py --only sum,matmul --repeats 5 --budget 512MB
    python scripts/bench.py --quick --plot charts/        # and a PNG chart per workload

``--plot DIR`` draws each workload's speed ratios to its peers as ``DIR/NN-name.png``
(``scripts/bench_plot.py``; matplotlib, in the ``bench`` extra); with ``--from`` it draws
them from results files written earlier, without running anything, a later file's
workloads replacing an earlier one's:

    python scripts/bench.py --plot docs/images/bench --from full.json stream-sum.json

Data files are written once under ``--dir`` (default ``$OOCARR_BENCH_DIR`` or
``/tmp/oocarr-bench``), in a subdirectory per size, and reused: about 37 GiB at full size,
1.2 GiB with ``--quick``; the full run then takes about half an hour on 2 cores (more while
oocarr misses its targets).  Each engine of each workload
runs in a fresh subprocess (this script with ``--worker``): per operation, one warm-up, then
``--repeats`` timed runs with the page cache warm, then (workloads 1, 2, 5) as many with the
input files evicted first ("cold").  oocarr's peak RSS is VmHWM, reset before each run, minus
the VmRSS the run started from (what the warm-up left, such as the user's jitted step, is
reported beside it); Dask's is VmHWM minus the worker's VmRSS after its imports and a tiny
warm-up operation.  Results are checked against
every peer's; a disagreement stops the script before anything is reported.

Workloads 8 and 9 (``scripts/bench_zarrs.py``) are issue 15's: the shape of the public zarrs
benchmark (a 1024³ uint16 cube in 256³ chunks, uncompressed, zstd, sharded with 64³ inner
chunks and Zarr v2 Blosc-LZ4, written once by zarr-python; 512³ with ``--quick``) read whole
and summed beside TensorStore, zarr-python and Dask, and a 4 GiB HDF5 dataset with Blosc-LZ4
and with Zstd (hdf5plugin) beside Dask and h5py.  Their data add about 8 GiB on disk at full
size:

    python scripts/bench.py --only zarrs,hdf5-plugins --quick

Workload 10 (``scripts/bench_cluster.py``) is issue 16's: ``sum``, the least-squares
``value_and_grad`` and a convert to Zarr with zstd, run by oocarr inside
``oocarr.executor(client)`` on a 2-worker ``distributed.LocalCluster`` (processes of one
thread, started in the engine's worker process and closed when it exits) beside
``dask.array`` on the same kind of cluster and beside oocarr's local executor.  Its inputs
and the copy are Zarr.  It runs only when asked for, with ``--executor dask`` (alone, or
added to ``--only``) or ``--only cluster``.  The peak RSS of a cluster engine is its client
process's only, not the cluster's workers'; oocarr's largest per-task peak on the workers
(``io_stats().total.peak_task_bytes``) is in the JSON's ``info``:

    python scripts/bench.py --executor dask --quick

Workload 11 (``scripts/bench_matmul.py``) is matmul at three budgets: ``oocarr.matmul(A, B)``
of square float32 matrices on disk (``.npy`` and HDF5, 1024×1024 chunks), 4096² and 8192²
each at 256 MB, 512 MB and 1 GB (1024² and 2048² at 8, 16 and 32 MB with ``--quick``).  Each
row is one size and budget (operation ``4096@256MB``): oocarr runs inside
``oocarr.memory_budget`` of that budget, which is also the row's RSS check and the budget of
its Hong–Kung I/O bound, whatever ``--budget`` says.  Dask (1024×1024 blocks, target 1.2×)
and NumPy in memory (target 0.9×) are measured once per size and shared by its budgets' rows;
every row gives each engine's GFLOP/s.  It runs only when asked for, as it takes several
minutes at full size; 8192² reuses workload 3's files, and 4096² adds 256 MiB on disk:

    python scripts/bench.py --only matmul-budgets

Workloads 12-14 (``scripts/bench_training.py``) are issue 35's, the training path: ``step-tax``
(a user's own jitted MLP step, 400 steps, in a worker that imported oocarr beside one that
never did), ``train`` (an MLP epoch through ``oocarr.batches`` from HDF5, Zarr and ``.npy``,
in order and shuffled, under a budget of an eighth of the dataset, beside the same loop over
in-memory NumPy in a worker without oocarr) and ``stream-sum`` (1 GiB least squares,
logistic regression, MLP and softmax regression ``value_and_grad``, by ``stream_sum`` and
written op by op, beside in-memory JAX). They add about 3 GiB of data at full size:

    python scripts/bench.py --only step-tax,train,stream-sum

Workloads 15 and 16 (``scripts/bench_linalg.py``) are issue 37's linear algebra, each beside
``dask.array.linalg`` in the same chunks (target 1.5×) and SciPy's float32 LAPACK in memory
(target 0.8×; ``numpy.linalg`` computes float32 in float64):
``tsqr``, ``qr`` and ``svd(full_matrices=False)`` of a 4 GiB tall float32 matrix (8388608 ×
128, HDF5 and ``.npy``) under a budget of an eighth of it, Q or U written to a file; and
``cholesky``, ``cholesky`` and ``solve`` of a 16384² SPD matrix (HDF5, 1 GiB) under a budget
of a quarter of it, L written to a file.  Each result is checked against its input (Q·R,
U·diag(S)·Vh and L·Lᵀ at three spots, the backward error of ``solve``) and against its
peers'.  They run only when asked for (many minutes at full size, 9 GiB of data):

    python scripts/bench.py --only tsqr,cholesky
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_cluster as bc  # noqa: E402
import bench_linalg as bl  # noqa: E402
import bench_matmul as bm  # noqa: E402
import bench_training as bt  # noqa: E402
import bench_workloads as bw  # noqa: E402
import bench_zarrs as bz  # noqa: E402

WARM, COLD = "warm", "cold"
BOTH = (WARM, COLD)
MEMORY = "memory"
DEFAULT_BUDGET = {"tiny": "256MB", "quick": "256MB", "full": "512MB"}
WORKER_TIMEOUT_S = {"tiny": 300, "quick": 600, "full": 3600}
#: Relative tolerance of results against a peer's, times the result's magnitude.  Float32
#: sums over up to 2**30 values in different orders differ by ~1e-6 relative; a lost or
#: doubled tile moves a result by far more than these.
RTOL = {"lsq": 1e-3, "batches": 1e-3}
DEFAULT_RTOL = 1e-4


# --------------------------------------------------------------------------------------------
# What is measured


@dataclass(frozen=True)
class Peer:
    """A peer of an oocarr engine in a workload, and the least speed ratio the issue asks for.

    ``fmt``/``cache`` name the peer's own format and cache when they are not the row's (the
    in-memory peers); ``target_cache`` limits the target to rows of that cache; ``op`` names
    the peer's own operation when it is not the row's (the in-order epoch beside the shuffled
    ones), and ``of`` the only rows it is compared with then.
    """

    label: str
    engine: str
    target: float | None = None
    target_cache: str | None = None
    fmt: str | None = None
    cache: str | None = None
    op: str | None = None
    of: tuple[str, ...] = ()


@dataclass(frozen=True)
class Workload:
    """One of the issue's workloads: its operations, formats, caches and who is compared."""

    number: int
    name: str
    title: str
    ops: tuple[str, ...]
    formats: tuple[str, ...]
    caches: tuple[str, ...]
    subjects: dict[str, tuple[Peer, ...]]
    #: The operations measured cold too (all of them when ``None``): fewer 4 GiB cold passes
    #: keep the full run within half an hour.
    cold_ops: tuple[str, ...] | None = None
    #: Operations of the sizes of run where they are not ``ops`` (workload 11's names carry
    #: the matrix side, which differs with the size).
    mode_ops: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: The operation the peers measure for one of oocarr's, where oocarr's depend on a setting
    #: the peers do not have (workload 11's budget): a peer's figure then serves several rows.
    #: ``None``: the same operation.
    peer_op_of: Callable[[str], str] | None = None

    def ops_for(self, mode: str | None) -> tuple[str, ...]:
        """oocarr's operations in a run of ``mode``'s sizes (``ops`` when ``None``)."""
        return self.mode_ops.get(mode, self.ops) if mode else self.ops

    def peer_op(self, op: str) -> str:
        """The operation whose peer measurements oocarr's ``op`` is compared with."""
        return self.peer_op_of(op) if self.peer_op_of else op

    def engines(self) -> list[str]:
        """Engines to run, oocarr's first (peers may need their facts, e.g. block sizes)."""
        names = list(self.subjects)
        for peers in self.subjects.values():
            names += [p.engine for p in peers if p.engine not in names]
        return list(dict.fromkeys(names))

    def cases(self, engine: str, mode: str | None = None) -> list[dict[str, Any]]:
        """``{"op", "format", "caches"}`` for each operation ``engine`` runs in a run of
        ``mode``'s sizes (as a peer, each of :meth:`peer_op`'s operations once)."""
        wanted: dict[tuple[str, str], list[str]] = {}
        for subject, peers in self.subjects.items():
            roles = [(None, None, False)] if subject == engine else []
            roles += [(p.fmt, p.cache, True) for p in peers if p.engine == engine]
            for fmt, cache, peer in roles:
                for op in [self.peer_op(o) if peer else o for o in self.ops_for(mode)]:
                    for f in [fmt] if fmt else self.formats:
                        caches = wanted.setdefault((op, f), [])
                        caches += [
                            c
                            for c in ([cache] if cache else self.caches)
                            if c not in caches
                            and (c != COLD or self.cold_ops is None or op in self.cold_ops)
                        ]
        return [{"op": op, "format": f, "caches": c} for (op, f), c in wanted.items()]


DASK, LOOP = Peer("Dask", "dask", 1.5), Peer("loop", "loop", 0.9)
#: The shuffled epochs of workload 6, compared with the in-order one too.
SHUFFLED = ("shuffled", "shuffled-one-block")
JAX_IN_MEMORY = Peer("JAX in memory", "jax", fmt=MEMORY, cache=WARM)
#: Issue 37's peers of the linear-algebra workloads (15, 16).  The in-memory one is SciPy's
#: float32 LAPACK: ``numpy.linalg`` computes float32 matrices in float64.
LINALG_PEERS = (Peer("Dask", "dask", 1.5), Peer("SciPy in memory", "scipy", 0.8, fmt=MEMORY))

WORKLOADS = {
    w.name: w
    for w in [
        Workload(
            1,
            "sum",
            "sum / mean(axis=0)",
            ("sum", "mean0"),
            bw.FORMATS,
            BOTH,
            {"oocarr": (DASK, LOOP)},
            cold_ops=("sum",),
        ),
        Workload(
            2,
            "chain",
            "sum(((a - b) * 2) ** 2)",
            ("chain",),
            ("hdf5", "npy"),
            BOTH,
            {
                "oocarr": (DASK, LOOP),
                "oocarr-opbyop": (DASK, Peer("stream_sum", "oocarr"), Peer("loop", "loop")),
            },
        ),
        Workload(
            3,
            "matmul",
            "matmul(A, B)",
            ("matmul",),
            ("hdf5", "npy"),
            (WARM,),
            {
                "oocarr": (
                    Peer("Dask", "dask", 1.2),
                    Peer("NumPy in memory", "numpy", 0.9, fmt=MEMORY),
                )
            },
        ),
        Workload(
            4,
            "tall",
            "X @ W, W in memory",
            ("xw",),
            ("hdf5", "npy"),
            (WARM,),
            {"oocarr": (Peer("Dask", "dask"), Peer("loop", "loop"))},
        ),
        Workload(
            5,
            "lsq",
            "least squares value_and_grad",
            ("value_and_grad",),
            ("hdf5", "npy"),
            BOTH,
            {
                "oocarr": (
                    Peer("JAX in memory", "jax", 0.8, WARM, MEMORY, WARM),
                    Peer("Dask", "dask"),
                    Peer("loop", "loop", 0.9, COLD),
                ),
                "oocarr-opbyop": (
                    Peer("stream_sum", "oocarr", 0.8),
                    JAX_IN_MEMORY,
                    Peer("Dask", "dask"),
                    Peer("loop", "loop"),
                ),
            },
        ),
        Workload(
            6,
            "batches",
            "one epoch of batches(1024)",
            ("in-order", "shuffled", "shuffled-one-block"),
            ("hdf5",),
            (WARM,),
            {
                "oocarr": (
                    Peer("loop", "loop", 1.0),
                    Peer("in order", "oocarr", 0.9, op="in-order", of=SHUFFLED),
                )
            },
        ),
        Workload(
            7,
            "convert",
            "oocarr convert",
            ("convert",),
            ("hdf5-to-zarr", "zarr-to-hdf5"),
            (WARM,),
            {"oocarr": (Peer("Dask", "dask"), Peer("loop", "loop", 0.9))},
        ),
        Workload(
            8,
            "zarrs",
            "zarrs benchmark: uint16 cube",
            ("read", "sum"),
            bz.ZARR_FORMATS,
            BOTH,
            {
                "oocarr": (
                    Peer("TensorStore", "tensorstore", 1.0),
                    Peer("zarr-python", "zarr", 1.5),
                    Peer("Dask", "dask"),
                )
            },
        ),
        Workload(
            9,
            "hdf5-plugins",
            "HDF5 plugin filters",
            ("read", "sum"),
            bz.HDF5_FORMATS,
            BOTH,
            {"oocarr": (Peer("Dask", "dask", 1.5), Peer("h5py", "h5py", 1.5))},
        ),
        Workload(
            10,
            bc.WORKLOAD,
            "on a 2-worker Dask LocalCluster",
            bc.OPS,
            (bc.FORMAT,),
            (WARM,),
            {
                "oocarr-dask": (
                    Peer("dask.array on the cluster", "dask-cluster", 1.0),
                    Peer("local executor", "oocarr", 0.8),
                )
            },
        ),
        Workload(
            11,
            bm.WORKLOAD,
            "matmul(A, B) at three budgets",
            bm.OPS["full"],
            bm.FORMATS,
            (WARM,),
            {
                "oocarr": (
                    Peer("Dask", "dask", 1.2),
                    Peer("NumPy in memory", "numpy", 0.9, fmt=MEMORY),
                )
            },
            mode_ops=bm.OPS,
            peer_op_of=bm.peer_op,
        ),
        Workload(
            12,
            bt.STEP_TAX,
            "the user's jitted step, oocarr imported",
            ("step", "step-host"),
            (MEMORY,),
            (WARM,),
            {"oocarr": (Peer("never imported", "jax", 0.95),)},
        ),
        Workload(
            13,
            bt.TRAIN,
            "one epoch of MLP training through batches(1024)",
            ("in-order", "shuffled"),
            bt.FORMATS,
            (WARM,),
            {
                "oocarr": (
                    Peer(
                        "NumPy in memory",
                        "numpy",
                        0.95,
                        fmt=MEMORY,
                        op="in-order",
                        of=("in-order",),
                    ),
                    Peer(
                        "NumPy in memory", "numpy", 0.9, fmt=MEMORY, op="shuffled", of=("shuffled",)
                    ),
                )
            },
        ),
        Workload(
            14,
            bt.STREAM_SUM,
            "value_and_grad over the whole dataset",
            bt.LOSSES,
            bt.FORMATS,
            BOTH,
            {
                "oocarr": (Peer("JAX in memory", "jax", 0.8, WARM, MEMORY, WARM),),
                "oocarr-opbyop": (
                    Peer("stream_sum", "oocarr", 0.8),
                    JAX_IN_MEMORY,
                ),
            },
        ),
        Workload(
            15,
            bl.TSQR,
            "tall matrix: qr and svd by TSQR",
            bl.OPS[bl.TSQR],
            bl.FORMATS[bl.TSQR],
            (WARM,),
            {"oocarr": LINALG_PEERS},
        ),
        Workload(
            16,
            bl.CHOLESKY,
            "square SPD matrix: cholesky and solve",
            bl.OPS[bl.CHOLESKY],
            bl.FORMATS[bl.CHOLESKY],
            (WARM,),
            {"oocarr": LINALG_PEERS},
        ),
    ]
}
#: Workloads run only when named (``--only``, ``--executor``): ``cluster`` starts clusters,
#: ``matmul-budgets`` takes several minutes at full size, and the linear algebra many
#: minutes with 9 GiB more data.
ON_REQUEST = (bc.WORKLOAD, bm.WORKLOAD, *bl.WORKLOADS)

#: (workload, engine) -> runner(ctx, op, fmt) -> Case, of every workload.
RUNNERS = {**bw.RUNNERS, **bz.RUNNERS, **bc.RUNNERS, **bm.RUNNERS, **bt.RUNNERS, **bl.RUNNERS}

#: Environment of particular workers.  The least-squares loop's matrix-vector products on
#: 8 MiB slabs are too small for BLAS threads: on a 2-core VM OpenBLAS's thread hand-offs made
#: them 10-50x slower and erratic, which would flatter oocarr against its I/O reference.
WORKER_ENV = {("lsq", "loop"): {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}}

SUBJECT_LABELS = {
    "oocarr": "oocarr",
    "oocarr-opbyop": "oocarr op-by-op",
    "oocarr-dask": "oocarr on the cluster",
}
OP_LABELS = {
    "sum": "sum",
    "mean0": "mean(axis=0)",
    "chain": "sum(((a - b) * 2) ** 2)",
    "matmul": "matmul(A, B)",
    "xw": "X @ W, W in memory",
    "value_and_grad": "least squares value_and_grad",
    "in-order": "batches(1024), in order",
    "shuffled": "batches(1024), shuffled",
    "shuffled-one-block": "batches(1024), shuffled, shuffle_buffer = one block + a batch",
    "convert": "oocarr convert",
    "read": "full read into memory",
}


# --------------------------------------------------------------------------------------------
# The worker: one engine of one workload, in its own process


def _status_bytes(field_name: str) -> int:
    """A ``VmRSS``/``VmHWM`` line of ``/proc/self/status``, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field_name} in /proc/self/status")


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); ``False`` where that is not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _files_under(path: str) -> Iterator[str]:
    if os.path.isdir(path):
        for root, _, names in os.walk(path):
            yield from (os.path.join(root, n) for n in names)
    elif os.path.exists(path):
        yield path


def evict(paths: list[str]) -> None:
    """Drop ``paths`` (every chunk file of a Zarr directory) from the page cache."""
    os.sync()
    for path in paths:
        for name in _files_under(path):
            fd = os.open(name, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _io_counter(engine: str) -> Callable[[], Any]:
    if engine.startswith("oocarr"):
        import oocarr

        return oocarr.io_stats
    return contextlib.nullcontext


def _timed_run(case: bw.Case, counting: Callable[[], Any], cold: bool, baseline: int) -> dict:
    """One timed run of ``case``: seconds, peak RSS growth, oocarr's I/O counts, check value."""
    if cold:
        evict(case.files)
    resident = _status_bytes("VmRSS")
    before = resident - baseline
    reset_peak_rss()
    with counting() as stats:
        start = time.perf_counter()
        result = case.run()
        elapsed = time.perf_counter() - start
    peak = _status_bytes("VmHWM")
    growth = peak - baseline
    check = case.check(result)
    del result  # oocarr deletes a stored result here (no gc.collect: 80 ms with JAX loaded)
    case.cleanup()
    total = stats.total if stats is not None else None
    return {
        "seconds": elapsed,
        "rss_growth": growth,
        "rss_growth_before": before,
        "rss_run_peak": peak - resident,
        "bytes_read": total.bytes_read if total else None,
        "bytes_written": total.bytes_written if total else None,
        "check": check,
    }


def time_case(
    workload: str, engine: str, case: bw.Case, caches: list[str], repeats: int, baseline: int
) -> list[dict[str, Any]]:
    """One warm-up run of ``case``, then ``repeats`` timed runs per cache, each checked
    against the warm-up's result (an intermittently wrong answer fails the run)."""
    counting = _io_counter(engine)
    expected = case.check(case.run())
    case.cleanup()
    gc.collect()
    measured = []
    for cache in caches:
        runs = [_timed_run(case, counting, cache == COLD, baseline) for _ in range(repeats)]
        for number, r in enumerate(runs):
            if why := disagreement(workload, r["check"], expected):
                raise AssertionError(f"{engine} {cache} run {number} vs its warm-up: {why}")
        times = [r["seconds"] for r in runs]
        measured.append(
            {
                "cache": cache,
                "times": times,
                "median": statistics.median(times),
                "rss_growth": [r["rss_growth"] for r in runs],
                # what earlier runs left resident (compiled code, caches): part of the growth
                "rss_growth_before_run": [r["rss_growth_before"] for r in runs],
                # the run's own peak: above the RSS it started from
                "rss_run_peak": [r["rss_run_peak"] for r in runs],
                "bytes_read": runs[-1]["bytes_read"],
                "bytes_written": runs[-1]["bytes_written"],
                "check": runs[-1]["check"],
                "info": case.info,
            }
        )
    return measured


def worker_main(spec_path: str) -> None:
    """Run the cases of ``spec_path`` (written by :func:`run_worker`) and write their times."""
    with open(spec_path) as f:
        spec = json.load(f)
    workload, engine = spec["workload"], spec["engine"]
    warm_up = bt.prepare_engine(
        workload, engine, spec["budget"], spec["scratch"], bc.prepare_engine
    )
    warm_up()
    baseline = _status_bytes("VmRSS")
    ready = time.time() - spec["spawned_at"]
    context = bw.Context(
        spec["data_dir"], spec["out_dir"], bw.SIZES[spec["size"]], spec["budget"], spec["hints"]
    )
    runner = RUNNERS[(workload, engine)]
    measurements = []
    for item in spec["cases"]:
        case = runner(context, item["op"], item["format"])
        timed = time_case(workload, engine, case, item["caches"], spec["repeats"], baseline)
        for m in timed:
            measurements.append({"op": item["op"], "format": item["format"], **m})
        del case
        gc.collect()
    result = {
        "startup_seconds": ready,
        "baseline_rss": baseline,
        "peak_rss_per_run": reset_peak_rss(),
        "measurements": measurements,
    }
    with open(spec["result"], "w") as f:
        json.dump(result, f)


# --------------------------------------------------------------------------------------------
# The parent: data, workers, checks, report


@dataclass
class Run:
    """Settings of this run, from the command line."""

    mode: str
    data_dir: str
    out_dir: str
    scratch: str
    budget: int
    budget_text: str
    repeats: int
    workloads: list[str]
    started: float = field(default_factory=time.perf_counter)

    def log(self, message: str) -> None:
        print(f"[{time.perf_counter() - self.started:6.1f} s] {message}", file=sys.stderr)


def parse_size(text: str) -> int:
    """Bytes in ``"256MB"``, ``"1GiB"``, ``"512000000"`` (decimal and binary units)."""
    units = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "KI": 2**10, "MI": 2**20, "GI": 2**30}
    text = text.strip().upper().removesuffix("B")
    number = text.rstrip("KMGI")
    return int(float(number) * units[text[len(number) :]])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (``sys.argv[1:]`` when ``argv`` is ``None``)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--quick", action="store_true", help="small sizes (~2 min on 2 cores)")
    add("--tiny", action="store_true", help=argparse.SUPPRESS)
    add("--dir", help="data directory (default $OOCARR_BENCH_DIR, else /tmp/oocarr-bench)")
    add(
        "--json",
        dest="json_out",
        metavar="OUT.json",
        help="results (default DIR/SIZE/results.json)",
    )
    add("--markdown", metavar="OUT.md", help="the table and the machine description")
    add("--plot", metavar="DIR", help="draw each workload's ratios to its peers as DIR/NN-name.png")
    add(
        "--from",
        dest="from_json",
        nargs="+",
        metavar="RESULTS.json",
        help="with --plot: draw from these results (a later file's workloads replace an earlier "
        "one's) instead of running",
    )
    names = ",".join(f"{w.number}:{name}" for name, w in WORKLOADS.items())
    add("--only", metavar="WORKLOAD,...", help=f"workloads by name or number ({names})")
    add(
        "--budget",
        help="oocarr's memory budget (default 256MB; 512MB for the full run; workloads 11, 13, "
        "15 and 16 set their own)",
    )
    add("--repeats", type=int, help="timed runs per figure (default 3; 1 with --tiny)")
    add(
        "--executor",
        choices=["dask"],
        help="dask: run workload 10, oocarr on a 2-worker Dask LocalCluster (with --only: "
        "added to those workloads)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.from_json and not args.plot:
        parser.error("--from needs --plot DIR")
    return args


def _selected(only: str | None, executor: str | None = None) -> list[str]:
    cluster = [bc.WORKLOAD] if executor == "dask" else []
    if not only:
        return cluster or [n for n in WORKLOADS if n not in ON_REQUEST]
    by_number = {str(w.number): name for name, w in WORKLOADS.items()}
    names = [by_number.get(n.strip(), n.strip()) for n in only.split(",") if n.strip()]
    names += cluster
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise SystemExit(f"unknown workload(s) {unknown}; choose from {', '.join(WORKLOADS)}")
    return [n for n in WORKLOADS if n in names]


def make_run(args: argparse.Namespace) -> Run:
    """The settings of a run from its command line, defaults filled in for its size."""
    mode = "tiny" if args.tiny else "quick" if args.quick else "full"
    root = os.path.abspath(
        args.dir or os.environ.get("OOCARR_BENCH_DIR") or os.path.join("/tmp", "oocarr-bench")
    )
    data_dir = os.path.join(root, mode)  # one per size, so that sizes never clash
    budget_text = args.budget or DEFAULT_BUDGET[mode]
    repeats = args.repeats or (1 if mode == "tiny" else 3)
    if repeats < 1:
        raise SystemExit("--repeats must be at least 1")
    return Run(
        mode,
        data_dir,
        os.path.join(data_dir, "out"),
        os.path.join(data_dir, "scratch"),
        parse_size(budget_text),
        budget_text,
        repeats,
        _selected(args.only, args.executor),
    )


def run_worker(run: Run, workload: Workload, engine: str, hints: dict) -> dict[str, Any]:
    """Run ``engine``'s cases of ``workload`` in a fresh process; return its measurements."""
    with tempfile.TemporaryDirectory(prefix="oocarr-bench-") as tmp:
        spec = {
            "workload": workload.name,
            "engine": engine,
            "cases": workload.cases(engine, run.mode),
            "size": run.mode,
            "data_dir": run.data_dir,
            "out_dir": run.out_dir,
            "scratch": run.scratch,
            "budget": run.budget,
            "repeats": run.repeats,
            "hints": hints,
            "result": os.path.join(tmp, "result.json"),
            "spawned_at": time.time(),
        }
        spec_path = os.path.join(tmp, "spec.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        command = [sys.executable, os.path.abspath(__file__), "--worker", spec_path]
        started = time.perf_counter()
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=WORKER_TIMEOUT_S[run.mode],
            env={**os.environ, **WORKER_ENV.get((workload.name, engine), {})},
        )
        if done.returncode != 0:
            raise SystemExit(
                f"the {engine} worker of workload {workload.name} failed "
                f"(exit {done.returncode}):\n{done.stderr[-6000:]}"
            )
        with open(spec["result"]) as f:
            result = json.load(f)
    run.log(f"{workload.name}: {engine} done in {time.perf_counter() - started:.1f} s")
    return result


def _hints(measurements: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What oocarr's runs tell their peers, by fact and operation (``block_rows`` of batches)."""
    hints: dict[str, dict[str, Any]] = {}
    for m in measurements:
        for key, value in m.get("info", {}).items():
            hints.setdefault(key, {})[m["op"]] = value
    return hints


def measure(run: Run) -> tuple[dict[tuple, dict[str, Any]], dict[str, Any]]:
    """Every worker of every selected workload: measurements keyed by
    ``(workload, engine, op, format, cache)``, and each worker's baseline RSS."""
    measured: dict[tuple, dict[str, Any]] = {}
    baselines: dict[str, Any] = {}
    os.makedirs(run.out_dir, exist_ok=True)
    for name in run.workloads:
        workload = WORKLOADS[name]
        hints: dict[str, Any] = {}
        for engine in workload.engines():
            result = run_worker(run, workload, engine, hints)
            baselines[f"{name}/{engine}"] = {
                "startup_seconds": result["startup_seconds"],
                "baseline_rss": result["baseline_rss"],
                "peak_rss_per_run": result["peak_rss_per_run"],
            }
            for m in result["measurements"]:
                m = {"workload": name, "engine": engine, **m}
                measured[(name, engine, m["op"], m["format"], m["cache"])] = m
            if engine in workload.subjects:
                hints.update(_hints(result["measurements"]))
    return measured, baselines


# Checks ---------------------------------------------------------------------------------------


def _far(a: Any, b: Any, rtol: float) -> float | None:
    """The largest difference of ``a`` and ``b`` relative to their magnitude, when above
    ``rtol``; ``None`` when they agree."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        return float("inf")
    scale = max(np.abs(a).max(initial=0.0), np.abs(b).max(initial=0.0), 1e-30)
    worst = float(np.abs(a - b).max(initial=0.0) / scale)
    return worst if worst > rtol or not np.isfinite(worst) else None


def disagreement(workload: str, got: Any, want: Any) -> str | None:
    """Why check values ``got`` and ``want`` of ``workload`` disagree, or ``None``."""
    if workload in bl.WORKLOADS:
        return bl.disagreement(got, want)
    rtol = RTOL.get(workload, DEFAULT_RTOL)
    if isinstance(want, dict) and "digest" in want:
        return None if got == want else f"read {got} differs from {want}"
    if isinstance(want, dict) and "equal" in want:
        return None if got["equal"] and want["equal"] else "the copies differ from the source"
    if isinstance(want, dict) and "rows" in want:
        if got["rows"] != want["rows"]:
            return f"{got['rows']} rows delivered, not {want['rows']}"
        far = _far(got["total"], want["total"], rtol)
    elif isinstance(want, dict):
        far = _far([got["value"], *got["grad"]], [want["value"], *want["grad"]], rtol)
    elif isinstance(want, list) and want and isinstance(want[0], dict):
        if [b["at"] for b in got] != [b["at"] for b in want]:
            return "different blocks were checked"
        far = max((_far(g["values"], w["values"], rtol) or 0.0) for g, w in zip(got, want))
        far = far or None
    else:
        far = _far(got, want, rtol)
    return None if far is None else f"relative difference {far:.3g} > {rtol:g}"


def reference_blocks(run: Run, workload: str, op: str, blocks: list[dict[str, Any]]) -> list[dict]:
    """The float64 values of the spot-checked blocks of a matmul or ``X @ W`` result."""
    sizes = bw.SIZES[run.mode]
    if workload == bm.WORKLOAD:
        sa, sb = bm.inputs(run.data_dir, sizes, bm.side_of(op), "npy")
        a, b = np.load(sa.path, mmap_mode="r"), np.load(sb.path, mmap_mode="r")
    elif workload == "matmul":
        a = np.load(bw.stored(run.data_dir, sizes, "matmul_A", "npy").path, mmap_mode="r")
        b = np.load(bw.stored(run.data_dir, sizes, "matmul_B", "npy").path, mmap_mode="r")
    else:
        a = np.load(bw.stored(run.data_dir, sizes, "tall_X", "npy").path, mmap_mode="r")
        b = bw.tall_weights(sizes)
    reference = []
    for block in blocks:
        (r, c), side = block["at"], np.shape(block["values"])
        rows = np.asarray(a[r : r + side[0]], dtype=np.float64)
        cols = np.asarray(b[:, c : c + side[1]], dtype=np.float64)
        reference.append({"at": [r, c], "values": (rows @ cols).tolist()})
    return reference


def verify(run: Run, measured: dict[tuple, dict[str, Any]]) -> list[str]:
    """Every oocarr result against each peer's for the same operation, format and cache, and
    matrix products against float64 references; the disagreements, described."""
    failures = []
    for key, m in measured.items():
        workload, engine, op, fmt, cache = key
        if workload in ("matmul", "tall", bm.WORKLOAD):
            reference = reference_blocks(run, workload, op, m["check"])
            if why := disagreement(workload, m["check"], reference):
                failures.append(f"{workload} {engine} {fmt} {cache}: vs float64 reference: {why}")
        if workload in bl.WORKLOADS:
            sizes = bw.SIZES[run.mode]
            if why := bl.input_failure(run.data_dir, sizes, workload, op, fmt, m["check"]):
                failures.append(f"{workload} {op} {engine} {fmt} {cache}: vs the input: {why}")
        for subject in WORKLOADS[workload].subjects:
            if engine == subject:
                continue
            for mine_op, mine in _checked_against(run, measured, key, subject):
                if why := disagreement(workload, mine["check"], m["check"]):
                    failures.append(
                        f"{workload} {mine_op} {fmt} {cache}: {subject} vs {engine}: {why}"
                    )
    return failures


def _checked_against(
    run: Run, measured: dict[tuple, dict[str, Any]], key: tuple, subject: str
) -> list[tuple[str, dict[str, Any]]]:
    """``subject``'s measurements, with their operations, that another engine's measurement
    ``key`` is checked against: the same format and cache, of each operation whose peers
    measure ``key``'s (every budget's, in workload 11); for an in-memory peer, the first of
    each such operation."""
    workload, _, op, fmt, cache = key
    w = WORKLOADS[workload]
    found = []
    for mine_op in [o for o in w.ops_for(run.mode) if w.peer_op(o) == op]:
        mine = measured.get((workload, subject, mine_op, fmt, cache))
        if mine is None and fmt == MEMORY:
            mine = next(
                (v for k, v in measured.items() if k[:3] == (workload, subject, mine_op)), None
            )
        if mine is not None:
            found.append((mine_op, mine))
    return found


# Rows -----------------------------------------------------------------------------------------


def size_label(workload: str, sizes: bw.Sizes, op: str = "") -> str:
    """The size column: shapes and bytes (of ``op``'s matrices in workload 11)."""
    if workload == bm.WORKLOAD:
        return bm.size_label(op)
    if workload in bz.WORKLOAD_FORMATS:
        return bz.size_label(workload, sizes)
    if workload == bc.WORKLOAD:
        return bc.size_label(workload, sizes)
    if workload in bt.WORKLOADS:
        return bt.size_label(workload, sizes)
    if workload in bl.WORKLOADS:
        return bl.size_label(workload, sizes)

    def gib(*shapes: tuple[int, ...]) -> str:
        return _bytes(sum(int(np.prod(s)) for s in shapes) * 4)

    n = sizes.matmul_n
    labels = {
        "sum": f"{sizes.sum_shape[0]}×{sizes.sum_shape[1]} ({gib(sizes.sum_shape)})",
        "chain": f"2 × {sizes.chain_shape[0]}×{sizes.chain_shape[1]} "
        f"({gib(sizes.chain_shape, sizes.chain_shape)})",
        "matmul": f"{n}×{n} @ {n}×{n}",
        "tall": f"{sizes.tall_shape[0]}×{sizes.tall_shape[1]} @ "
        f"{sizes.tall_shape[1]}×{sizes.tall_out_cols} ({gib(sizes.tall_shape)})",
        "lsq": f"{sizes.lsq_shape[0]}×{sizes.lsq_shape[1]} + y ({gib(sizes.lsq_shape)})",
        "batches": f"{sizes.lsq_shape[0]}×{sizes.lsq_shape[1]} + y ({gib(sizes.lsq_shape)})",
        "convert": f"{sizes.convert_shape[0]}×{sizes.convert_shape[1]} "
        f"({gib(sizes.convert_shape)})",
    }
    return labels[workload]


def _target(ratio: float, least: float) -> dict[str, Any]:
    return {"ratio": ratio, "target": f">= {least:.3g}", "met": ratio >= least}


def matmul_extras(n: int, budget: int, subject: dict, peers: list[dict]) -> dict[str, Any]:
    """GFLOP/s of each engine in an ``n``-sided product, and oocarr's bytes read against the
    I/O lower bound at its ``budget`` (bytes).

    The bound is ``2 n^3 / sqrt(M)`` words for a budget of ``M`` elements, and never less
    than reading both inputs once (``2 n^2`` words), which dominates at small ``n``.
    """
    flops = 2 * n**3
    bound_words = max(flops / math.sqrt(budget / 4), 2 * n**2)
    extras: dict[str, Any] = {"gflops": {"oocarr": flops / subject["median"] / 1e9}}
    for p in peers:
        extras["gflops"][p["label"]] = flops / p["median"] / 1e9 if p["median"] else None
    if subject.get("bytes_read") is not None:
        ratio = subject["bytes_read"] / (bound_words * 4)
        extras["io_bound_bytes"] = bound_words * 4
        extras["io_vs_bound"] = {"ratio": ratio, "target": "<= 2", "met": ratio <= 2}
    return extras


def op_budget(run: Run, workload: str, op: str) -> tuple[int, str]:
    """The budget oocarr ran ``op`` of ``workload`` under, in bytes and as written: the run's
    ``--budget``, except in workload 11, whose operations each name their own."""
    if workload == bm.WORKLOAD:
        text = bm.budget_of(op)
        return parse_size(text), text
    if workload == bt.TRAIN:
        budget = bt.budget_bytes(bw.SIZES[run.mode])
        return budget, _bytes(budget)
    if workload in bl.WORKLOADS:
        budget = bl.budget_bytes(workload, bw.SIZES[run.mode])
        return budget, _bytes(budget)
    return run.budget, run.budget_text


def build_rows(run: Run, measured: dict[tuple, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per oocarr engine, operation, format and cache, with its peers and ratios."""
    rows = []
    sizes = bw.SIZES[run.mode]
    for name in run.workloads:
        workload = WORKLOADS[name]
        for subject, peers in workload.subjects.items():
            for op in workload.ops_for(run.mode):
                for fmt in workload.formats:
                    for cache in workload.caches:
                        me = measured.get((name, subject, op, fmt, cache))
                        if me is None:
                            continue
                        row = _row(run, workload, subject, peers, op, fmt, cache, measured)
                        row["size"] = size_label(name, sizes, op)
                        rows.append(row)
    return rows


def _row(
    run: Run,
    workload: Workload,
    subject: str,
    peers: tuple[Peer, ...],
    op: str,
    fmt: str,
    cache: str,
    measured: dict[tuple, dict[str, Any]],
) -> dict[str, Any]:
    me = measured[(workload.name, subject, op, fmt, cache)]
    budget, budget_text = op_budget(run, workload.name, op)
    compared = []
    for p in peers:
        if p.op is not None and op not in p.of:
            continue
        peer_op = p.op or workload.peer_op(op)
        peer_key = (workload.name, p.engine, peer_op, p.fmt or fmt, p.cache or cache)
        them = measured.get(peer_key)
        if them is None:
            continue
        ratio = them["median"] / me["median"]
        entry = {"label": p.label, "engine": p.engine, "median": them["median"], "ratio": ratio}
        if p.target is not None and p.target_cache in (None, cache):
            entry.update(_target(ratio, p.target))
        entry["rss_growth"] = max(them["rss_growth"])
        compared.append(entry)
    row = {
        "workload": workload.name,
        "number": workload.number,
        "title": workload.title,
        "oocarr_engine": subject,
        "op": op,
        "format": fmt,
        "cache": cache,
        "oocarr_median": me["median"],
        "oocarr_times": me["times"],
        "peers": compared,
        "oocarr_rss_growth": max(me["rss_growth"]),
        "oocarr_rss_run_peak": max(me["rss_run_peak"]),
        "oocarr_rss_retained": max(me["rss_growth_before_run"]),
        "rss_within_budget": max(me["rss_run_peak"]) <= budget,
        "budget": budget,
        "budget_text": budget_text,
        "dask_rss_growth": next((p["rss_growth"] for p in compared if p["engine"] == "dask"), None),
        "bytes_read": me["bytes_read"],
        "bytes_written": me["bytes_written"],
        "verified": True,
        "note": "",
    }
    if workload.name == "convert":
        nbytes = int(np.prod(bw.SIZES[run.mode].convert_shape)) * 4
        row["bytes_read"] = row["bytes_written"] = nbytes
        row["bytes_note"] = "array size: oocarr.io_stats() does not count convert"
    if workload.name == "matmul":
        row.update(matmul_extras(bw.SIZES[run.mode].matmul_n, budget, me, compared))
    elif workload.name == bm.WORKLOAD:
        row.update(matmul_extras(bm.side_of(op), budget, me, compared))
    elif workload.name in bl.WORKLOADS:
        row.update(bl.extras(workload.name, op, bw.SIZES[run.mode], budget, me, compared))
    result_bytes = me.get("info", {}).get("result_bytes")
    if result_bytes:  # a full read holds its result: the budget bounds the rest
        row["rss_within_budget"] = row["oocarr_rss_run_peak"] <= budget + result_bytes
        row["note"] = f"RSS includes the {_bytes(result_bytes)} result"
    verdicts = [p["met"] for p in compared if "met" in p]
    if "met" in row.get("io_vs_bound", {}):
        verdicts.append(row["io_vs_bound"]["met"])
    row["targets_met"] = all(verdicts) if verdicts else None
    return row


# Report ---------------------------------------------------------------------------------------


def _read_first(path: str, prefix: str) -> str | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(prefix):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _filesystem(path: str) -> dict[str, Any]:
    """Device, filesystem type and mount point of ``path``, and its total and free bytes."""
    path = os.path.realpath(path)
    best = ("?", "?", "/")
    with contextlib.suppress(OSError), open("/proc/mounts") as f:
        for line in f:
            device, mount, fstype = line.split()[:3]
            inside = path == mount or path.startswith(mount.rstrip("/") + "/")
            if inside and len(mount) >= len(best[2]):
                best = (device, fstype, mount)
    usage = shutil.disk_usage(path)
    return {
        "device": best[0],
        "type": best[1],
        "mount": best[2],
        "total_bytes": usage.total,
        "free_bytes": usage.free,
    }


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def machine(run: Run) -> dict[str, Any]:
    """What the numbers were measured on."""
    memory_kib = _read_first("/proc/meminfo", "MemTotal") or "0 kB"
    packages = ["numpy", "jax", "jaxlib", "h5py", "zarr", "dask", "oocarr"]
    packages += ["tensorstore", "numcodecs", "hdf5plugin"]
    return {
        "cpu": _read_first("/proc/cpuinfo", "model name") or platform.processor(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "ram_bytes": int(memory_kib.split()[0]) * 1024,
        "os": f"{platform.system()} {platform.release()}",
        "data_dir": run.data_dir,
        "filesystem": _filesystem(run.data_dir),
        "scratch_dir": os.environ.get("OOCARR_SCRATCH_DIR") or run.scratch,
        "versions": {"python": platform.python_version(), **{p: _version(p) for p in packages}},
    }


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _bytes(value: float | None) -> str:
    if value is None:
        return "–"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def _ratio_cell(peer: dict[str, Any]) -> str:
    text = f"{peer['label']} {peer['ratio']:.2f}×"
    if "met" in peer:
        text += f" ({peer['target'].replace('>= ', '≥')} {'✓' if peer['met'] else '✗'})"
    return text


COLUMNS = [
    "#",
    "workload",
    "size",
    "format",
    "cache",
    "oocarr",
    "peers",
    "oocarr ÷ peer speed (target)",
    "oocarr RSS / budget",
    "Dask RSS",
    "read",
    "written",
    "note",
]


def row_label(r: dict[str, Any]) -> str:
    """The workload column of row ``r``: its operation, and oocarr's engine unless plain."""
    if r["workload"] == bm.WORKLOAD:
        what = bm.op_label(r["op"])
    elif r["workload"] in bt.WORKLOADS:
        what = bt.OP_LABELS[r["workload"], r["op"]]
    elif r["workload"] in bl.WORKLOADS:
        what = bl.OP_LABELS[r["op"]]
    else:
        what = OP_LABELS[r["op"]]
    if r["oocarr_engine"] != "oocarr":
        what += f" ({SUBJECT_LABELS[r['oocarr_engine']]})"
    return what


def table_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The Markdown table of ``rows``."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        what = row_label(r)
        mine = _seconds(r["oocarr_median"])
        ratios = [_ratio_cell(p) for p in r["peers"]]
        peers = [f"{p['label']} {_seconds(p['median'])}" for p in r["peers"]]
        if "gflops" in r:
            mine += f" ({r['gflops']['oocarr']:.1f} GFLOP/s)"
            peers = [
                f"{p} ({r['gflops'][q['label']]:.1f} GFLOP/s)" for p, q in zip(peers, r["peers"])
            ]
        if "io_vs_bound" in r:
            io = r["io_vs_bound"]
            target = f" (≤2 {'✓' if io['met'] else '✗'})" if "met" in io else ""
            ratios.append(f"read {io['ratio']:.2f}× I/O bound{target}")
        cells = [
            str(r["number"]),
            what,
            r["size"],
            r["format"].replace("-to-", "→"),
            r["cache"],
            mine,
            "; ".join(peers),
            "; ".join(ratios),
            f"{_bytes(r['oocarr_rss_run_peak'])} / {_bytes(r['budget'])} "
            f"{'✓' if r['rss_within_budget'] else '✗'}" + _retained(r["oocarr_rss_retained"]),
            _bytes(r["dask_rss_growth"]),
            _bytes(r["bytes_read"]),
            _bytes(r["bytes_written"]),
            r["note"],
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _retained(nbytes: int) -> str:
    """`` (+N kept)`` when earlier runs left more than 1 MiB resident, else nothing."""
    return f" (+{_bytes(nbytes)} kept)" if nbytes > 2**20 else ""


def machine_lines(run: Run, description: dict[str, Any], elapsed: float) -> list[str]:
    """The machine, the versions and how the run measured, as Markdown bullets."""
    fs = description["filesystem"]
    versions = ", ".join(f"{k} {v}" for k, v in description["versions"].items() if v)
    lines = [
        f"- CPU: {description['cpu']}, {description['cores_usable']} cores usable; "
        f"RAM {_bytes(description['ram_bytes'])}; {description['os']}",
        f"- data: `{description['data_dir']}` on {fs['device']} ({fs['type']}, mounted at "
        f"{fs['mount']}, {_bytes(fs['free_bytes'])} free); scratch `{description['scratch_dir']}`",
        f"- {versions}",
        f"- run: {run.mode} sizes, oocarr budget {run.budget_text}, median of {run.repeats} "
        f"run(s) after one warm-up, {elapsed / 60:.1f} min in all",
        "- speed ratios are oocarr's speed ÷ the peer's (> 1: oocarr is faster); oocarr RSS is "
        "each timed run's peak (VmHWM) above the RSS the run started from, checked against the "
        'budget; "+N kept" is what earlier runs left resident (compiled code, the user\'s jitted '
        "step) above the worker's baseline after imports and a tiny warm-up; Dask RSS is peak "
        "growth above that baseline",
        "- Dask: threaded scheduler, chunks = the storage chunks (HDF5, Zarr), 32 MiB row slabs "
        "(.npy), 1024×1024 blocks for matmul; loop: h5py `read_direct` chunk by chunk (row "
        "slabs for 4-6), NumPy `readinto` 8 MiB row slabs, zarr-python chunk-row bands; "
        "in-memory peers exclude the load",
        "- zarrs / HDF5 plugin filters: TensorStore, zarr-python and h5py read whole arrays "
        "with one call and sum in slabs of chunk layers (8 MiB row slabs for h5py); Dask "
        "reads whole shards per task; oocarr is `to_numpy(open(url))` and `sum(open(url))`",
    ]
    if bc.WORKLOAD in run.workloads:
        lines.append(
            "- cluster (workload 10): oocarr inside `oocarr.executor(client)` and `dask.array` "
            "with the client of a 2-worker `LocalCluster` (processes of one thread) each; the "
            "RSS columns are the client process's only (oocarr's per-task peak on the workers "
            "is in the JSON's `info.peak_task_bytes`)"
        )
    if bm.WORKLOAD in run.workloads:
        lines.append(
            "- matmul at three budgets (workload 11): each row's oocarr budget is its own "
            "(`oocarr.memory_budget`), not the run's, and so are its RSS check and I/O bound; "
            "Dask (1024×1024 blocks) and NumPy do not depend on the budget: each is measured "
            "once per size (and format) and shown in every budget's row"
        )
    if any(w in bl.WORKLOADS for w in run.workloads):
        lines.append(
            "- linear algebra (workloads 15, 16): oocarr under its own budget, the matrix over "
            "8 (TSQR) or 4 (Cholesky, solve); Dask in the storage's chunks (row slabs of the tall "
            "matrix in both formats, 1024×1024 blocks of A); Q, U and L written to a file by "
            "oocarr and Dask, kept in memory by SciPy (float32 LAPACK); I/O bound: the larger "
            "of reading the matrix once and flops / √budget words, no target"
        )
    return lines


def write_outputs(run: Run, args: argparse.Namespace, report: dict[str, Any]) -> None:
    """Write the JSON report; when every result agreed, print the table (and write the
    Markdown file)."""
    json_path = args.json_out or os.path.join(run.data_dir, "results.json")
    with open(json_path, "w") as f:
        json.dump(report, f, indent=1)
    run.log(f"wrote {json_path}")
    if report["verified"]:
        lines = table_lines(report["rows"])
        print("\n".join(lines))
        if args.markdown:
            head = machine_lines(run, report["machine"], report["elapsed_seconds"])
            with open(args.markdown, "w") as f:
                f.write("\n".join([*head, "", *lines, ""]))
            run.log(f"wrote {args.markdown}")


def ensure_data(run: Run) -> dict[str, float]:
    """Write the data files the selected workloads read that are not there yet."""
    sizes = bw.SIZES[run.mode]
    mine = [w for w in run.workloads if w in bz.WORKLOAD_FORMATS]
    others = (bc.WORKLOAD, bm.WORKLOAD, *bt.WORKLOADS, *bl.WORKLOADS)
    theirs = [w for w in run.workloads if w not in bz.WORKLOAD_FORMATS and w not in others]
    generated = bw.ensure_data(run.data_dir, sizes, theirs, run.log)
    generated |= bz.ensure_data(run.data_dir, sizes, mine, run.log)
    generated |= bm.ensure_data(run.data_dir, sizes, run.workloads, run.log)
    generated |= bt.ensure_data(run.data_dir, sizes, run.workloads, run.log)
    generated |= bl.ensure_data(run.data_dir, sizes, run.workloads, run.log)
    return generated | bc.ensure_data(run.data_dir, sizes, run.workloads, run.log)


def _remove_if_empty(path: str) -> None:
    with contextlib.suppress(OSError):
        os.rmdir(path)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, with ``--worker``, one worker); the exit status."""
    args = parse_args(argv)
    if args.worker:
        worker_main(args.worker)
        return 0
    if args.from_json:
        reports = []
        for path in args.from_json:
            with open(path) as f:
                reports.append(json.load(f))
        plot(reports, args.plot)
        return 0
    if args.plot:
        import_plotting()  # before an hour of running, not after
    run = make_run(args)
    run.log(f"{run.mode} run of {', '.join(run.workloads)} in {run.data_dir}")
    generated = ensure_data(run)
    try:
        measured, baselines = measure(run)
    finally:
        _remove_if_empty(run.out_dir)
        _remove_if_empty(run.scratch)
    failures = verify(run, measured)
    elapsed = time.perf_counter() - run.started
    report = {
        "mode": run.mode,
        "budget": run.budget,
        "repeats": run.repeats,
        "workloads": run.workloads,
        "machine": machine(run),
        "generation_seconds": generated,
        "elapsed_seconds": elapsed,
        "workers": baselines,
        "measurements": [
            {k: v for k, v in m.items() if k != "check"}
            | {"check": _summary(m["workload"], m["check"])}
            for m in measured.values()
        ],
        "verified": not failures,
        "failures": failures,
        "rows": [] if failures else build_rows(run, measured),
    }
    write_outputs(run, args, report)
    if failures:
        print("RESULTS DISAGREE; nothing reported:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    if args.plot:
        plot([report], args.plot, run.log)
    run.log(f"done in {elapsed:.1f} s")
    return 0


def import_plotting() -> Any:
    """``scripts/bench_plot.py``, or ``SystemExit`` naming the extra when matplotlib is missing."""
    import bench_plot

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit(bench_plot.MISSING) from None
    return bench_plot


def plot(reports: list[dict[str, Any]], out_dir: str, log: Callable[[str], None] = print) -> None:
    """Draw each workload's chart of ``reports`` into ``out_dir``."""
    for path in import_plotting().plot(reports, out_dir, row_label):
        log(f"wrote {path}")


def _summary(workload: str, check: Any) -> Any:
    """A check value shortened for the JSON (the first values of long vectors and blocks)."""
    if workload in bl.WORKLOADS:
        return bl.summary(check)
    if isinstance(check, list) and check and isinstance(check[0], dict):
        return [{"at": b["at"], "first": b["values"][0][:4]} for b in check]
    if isinstance(check, list):
        return {"length": len(check), "first": check[:4], "sum": float(np.sum(check))}
    if isinstance(check, dict) and "grad" in check:
        return {"value": check["value"], "grad_first": check["grad"][:4]}
    return check


if __name__ == "__main__":
    sys.exit(main())
