"""The data and the cases of workload 11 of ``scripts/bench.py``: matmul at three budgets.

``matmul-budgets``: ``oocarr.matmul(A, B)`` of square float32 matrices stored on disk, ``.npy``
and HDF5 (1024×1024 chunks, as workload 3's), at two sizes and three memory budgets: 4096² and
8192² at 256 MB, 512 MB and 1 GB at full size, the issue's "every budget from 4 panels up".
Each operation is one size and one budget, named ``"4096@256MB"``; oocarr runs it inside
``oocarr.memory_budget("256MB")``, so the row's RSS check and I/O bound are that budget's.

The peers are workload 3's: Dask with square 1024×1024 blocks, and NumPy with both matrices
loaded before timing.  Neither depends on the budget, so each measures a size once (operation
``"4096"``, per format for Dask) and that figure serves the rows of every budget.

Matrices of workload 3's size (``Sizes.matmul_n``: 8192 at full size) are its files; the
other size is written here once, as ``matmul_4096_A.npy``, ``matmul_4096_B.npy`` and
``matmul_4096.h5`` (datasets ``A`` and ``B``), with workload 3's seeds.

Heavy libraries are imported inside the runners, so a worker imports only what its engine uses.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import bench_workloads as bw
import numpy as np

WORKLOAD = "matmul-budgets"
FORMATS = ("hdf5", "npy")
#: Seeds of ``A`` and ``B``: workload 3's, so that its files serve the size they share.
SEEDS = {"A": 4, "B": 5}


@dataclass(frozen=True)
class BudgetSizes:
    """The matrix sides and oocarr's budgets of one size of run."""

    sides: tuple[int, ...]
    budgets: tuple[str, ...]


#: Quick and tiny budgets are scaled down with the sides, so that oocarr still plans several
#: output tiles at the smallest budget and a different plan at each.
SIZES = {
    "full": BudgetSizes((4096, 8192), ("256MB", "512MB", "1GB")),
    "quick": BudgetSizes((1024, 2048), ("8MB", "16MB", "32MB")),
    "tiny": BudgetSizes((256, 512), ("256KB", "512KB", "1MB")),
}


def op_name(side: int, budget: str) -> str:
    """The operation of one size and budget: ``"4096@256MB"``."""
    return f"{side}@{budget}"


#: The operations of each size of run: every side at every budget.
OPS = {mode: tuple(op_name(n, b) for n in s.sides for b in s.budgets) for mode, s in SIZES.items()}


def side_of(op: str) -> int:
    """The matrices' side of an operation (oocarr's ``"4096@256MB"`` or a peer's ``"4096"``)."""
    return int(op.split("@")[0])


def budget_of(op: str) -> str:
    """oocarr's budget of an operation, as written (``"256MB"``)."""
    return op.split("@")[1]


def peer_op(op: str) -> str:
    """The operation a peer measures for oocarr's ``op``: its size alone."""
    return str(side_of(op))


def op_label(op: str) -> str:
    """The workload column of ``op``'s row."""
    return f"matmul(A, B), budget {budget_of(op)}"


def size_label(op: str) -> str:
    """The size column of ``op``'s row: the shapes, as workload 3's."""
    n = side_of(op)
    return f"{n}×{n} @ {n}×{n}"


def mode_of(sizes: bw.Sizes) -> str:
    """The size of run (``full``, ``quick``, ``tiny``) whose shapes are ``sizes``."""
    return next(mode for mode, s in bw.SIZES.items() if s == sizes)


# --------------------------------------------------------------------------------------------
# The data


def inputs(data_dir: str, sizes: bw.Sizes, side: int, fmt: str) -> tuple[bw.Stored, bw.Stored]:
    """``A`` and ``B`` of ``side`` in ``fmt``: workload 3's at its size, else this module's."""
    if side == sizes.matmul_n:
        a, b = (bw.stored(data_dir, sizes, f"matmul_{m}", fmt) for m in SEEDS)
        return a, b
    found = []
    for matrix, seed in SEEDS.items():
        spec = bw.ArraySpec(
            f"matmul_{side}_{matrix}", (side, side), bw._grid_chunks((side,) * 2), seed
        )
        if fmt == "npy":
            found.append(bw.Stored(spec, fmt, os.path.join(data_dir, f"{spec.name}.npy"), None))
        else:
            found.append(bw.Stored(spec, fmt, os.path.join(data_dir, f"matmul_{side}.h5"), matrix))
    return found[0], found[1]


def _write(path: str, arrays: list[bw.Stored]) -> None:
    """Write ``arrays`` into the new file ``path``: both datasets of an HDF5 file, or a
    ``.npy`` file's one array."""
    if arrays[0].fmt == "npy":
        bw._write_npy(path, arrays[0])
    else:
        bw._write_hdf5(path, arrays)


def ensure_data(
    data_dir: str, sizes: bw.Sizes, workloads: list[str], log: Callable[[str], None]
) -> dict[str, float]:
    """Write the matrices of this workload missing from ``data_dir``; reuse those present.

    Workload 3's files are written by :func:`bench_workloads.ensure_data`; the others as
    there: each under a temporary name, renamed when complete, and an existing file of
    another shape is an error.
    """
    if WORKLOAD not in workloads:
        return {}
    os.makedirs(data_dir, exist_ok=True)
    seconds = bw.ensure_data(data_dir, sizes, ["matmul"], log)
    by_path: dict[str, list[bw.Stored]] = {}
    for side in SIZES[mode_of(sizes)].sides:
        if side != sizes.matmul_n:
            for fmt in FORMATS:
                for a in inputs(data_dir, sizes, side, fmt):
                    by_path.setdefault(a.path, []).append(a)
    seconds |= bw.write_missing(data_dir, by_path, _write, log)
    if seconds:
        os.sync()
    return seconds


# --------------------------------------------------------------------------------------------
# Cases


def _inputs(ctx: bw.Context, op: str, fmt: str) -> tuple[bw.Stored, bw.Stored, list[str]]:
    a, b = inputs(ctx.data_dir, ctx.sizes, side_of(op), fmt)
    return a, b, sorted({a.path, b.path})


def _oocarr(ctx: bw.Context, op: str, fmt: str) -> bw.Case:
    """``oocarr.matmul`` of the stored matrices inside ``oocarr.memory_budget`` of ``op``'s
    budget (the worker's own budget, the run's ``--budget``, is not used)."""
    import oocarr

    sa, sb, files = _inputs(ctx, op, fmt)
    budget = budget_of(op)

    def run() -> Any:
        with oocarr.memory_budget(budget):
            return oocarr.matmul(oocarr.open(sa.url), oocarr.open(sb.url))

    def check(product: Any) -> list:
        return bw.spot_blocks(lambda r, c: product.store[r, c], product.shape)

    return bw.Case(run, files, check)


def _dask(ctx: bw.Context, op: str, fmt: str) -> bw.Case:
    """Dask's product with square blocks, as workload 3's, stored into a ``.npy`` file."""
    sa, sb, files = _inputs(ctx, op, fmt)
    out = ctx.output(f"matmul-budgets-dask-{op}.npy")

    def run() -> np.ndarray:
        (a, close_a), (b, close_b) = (
            bw.dask_array(sa, bw.GRID_CHUNK),
            bw.dask_array(sb, bw.GRID_CHUNK),
        )
        try:
            return bw._store_to_npy(a @ b, out)
        finally:
            close_a()
            close_b()

    return bw.Case(run, files, bw._spot_memmap, lambda: bw.remove(out))


def _numpy(ctx: bw.Context, op: str, fmt: str) -> bw.Case:
    """``np.matmul`` of both matrices, loaded from the ``.npy`` files before the timing."""
    sa, sb, _ = _inputs(ctx, op, "npy")
    a, b = np.load(sa.path), np.load(sb.path)
    return bw.Case(lambda: np.matmul(a, b), [], bw._spot_memmap)


#: (workload, engine) -> runner(ctx, op, fmt) -> Case.
RUNNERS: dict[tuple[str, str], Callable[[bw.Context, str, str], bw.Case]] = {
    (WORKLOAD, "oocarr"): _oocarr,
    (WORKLOAD, "dask"): _dask,
    (WORKLOAD, "numpy"): _numpy,
}
