"""The data and the cases of workloads 15 and 16 of ``scripts/bench.py``: linear algebra.

``tsqr`` (15): ``qr`` and ``svd(full_matrices=False)`` of a tall float32 matrix (4 GiB at full
size: 8388608 × 128, Gaussian values) stored as HDF5 (32 MiB row-slab chunks) and ``.npy``.
oocarr runs ``oocarr.linalg.qr`` / ``oocarr.linalg.svd`` under a budget of an eighth of the
matrix: TSQR's pass for R, then a pass that writes Q (or U) to scratch.  Dask runs
``dask.array.linalg.qr`` / ``svd`` (its TSQR) on ``da.from_array`` of the same file in the same
row chunks (the HDF5 chunks, for both formats), and stores Q (or U) into a ``.npy`` file in the
same graph as it computes R (or S and Vh).  The in-memory peer runs SciPy's float32 LAPACK
(``scipy.linalg.qr(mode="economic")`` / ``svd``) on the matrix loaded from ``.npy`` before the
timing; its Q (or U) stays in memory.  It is SciPy's and not ``numpy.linalg``'s because NumPy
computes a float32 matrix in float64: twice the arithmetic, and for ``qr`` a peak of 8 times
the matrix (32 GiB at full size, measured at 8x on the quick size).

``cholesky`` (16): ``cholesky(A)`` and ``solve(A, b)`` of a symmetric positive definite float32
matrix four times oocarr's budget (16384² at full size, 1 GiB, under a 256 MiB budget), stored
as HDF5 in 1024 × 1024 chunks with ``b`` (n × 1) beside it.  ``A`` is a symmetric matrix of
uniform values in [-1, 1] plus ``2√n`` on its diagonal: its eigenvalues lie in about
[0.85√n, 3.15√n], a condition number near 4.  oocarr writes ``L`` to scratch; Dask
(``dask.array.linalg.cholesky`` and ``solve``, blocks = the storage chunks, which its Cholesky
needs square) stores ``L`` into a ``.npy`` file and computes ``x`` into memory, as oocarr's
``x`` (n × 1) is small; SciPy's float32 LAPACK (``cholesky``, ``solve(assume_a="general")``:
LU with partial pivoting, as the others) factors and solves ``A`` loaded before the timing.

Each result is checked twice: against the input (Q·R, U·diag(S)·Vh and L·Lᵀ at three spots
against the stored values in float64, and the backward error of ``x`` over all of ``A``), and
against every peer's (|R|, S, blocks of L, ``x``).

Heavy libraries are imported inside the runners, so a worker imports only what its engine uses.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import bench_matmul as bm
import bench_workloads as bw
import numpy as np

TSQR, CHOLESKY = "tsqr", "cholesky"
WORKLOADS = (TSQR, CHOLESKY)
FORMATS = {TSQR: ("hdf5", "npy"), CHOLESKY: ("hdf5",)}
OPS = {TSQR: ("qr", "svd"), CHOLESKY: ("cholesky", "solve")}
OP_LABELS = {
    "qr": "qr(X) by TSQR, Q written",
    "svd": "svd(X, full_matrices=False) by TSQR, U written",
    "cholesky": "cholesky(A), L written",
    "solve": "solve(A, b)",
}
#: How many times oocarr's budget each workload's matrix is.
OVER_BUDGET = {TSQR: 8, CHOLESKY: 4}
#: Largest difference of a result from a peer's, or of a reconstruction from the input,
#: relative to the largest magnitude of either (float32 factors of up to 2**30 values).
RTOL = 1e-4
#: Largest normwise backward error ``|b - A x| / (|A| |x| + |b|)`` (infinity norms) of a
#: solution: about 80 float32 epsilons, where a lost or misplaced block is far above.
BACKWARD_ERROR = 1e-5
SEEDS = {"X": 21, "A": 22, "b": 23}


@dataclass(frozen=True)
class LinalgSizes:
    """Shapes of one size of run (``full``, ``quick`` or ``tiny``)."""

    tall_shape: tuple[int, int]
    #: Rows per storage chunk of the tall matrix (HDF5), and per Dask block in both formats.
    tall_chunk_rows: int
    #: Side of the square matrix ``A``, and of its storage chunks (Dask's blocks).
    side: int
    block: int


SIZES = {
    "full": LinalgSizes((8_388_608, 128), 65_536, 16_384, 1_024),
    # a quarter of full (1 GiB tall, 8192² square): OOCARR_BENCH_LINALG_SIZE=mid, with a --dir
    # of its own, for a run that fits a short session
    "mid": LinalgSizes((2_097_152, 128), 65_536, 8_192, 1_024),
    "quick": LinalgSizes((32_768, 128), 2_048, 2_048, 512),
    "tiny": LinalgSizes((4_096, 32), 256, 256, 64),
}


def sizes_of(sizes: bw.Sizes) -> LinalgSizes:
    """This module's shapes of the run whose ``bench_workloads`` shapes are ``sizes`` (or of
    the size ``$OOCARR_BENCH_LINALG_SIZE`` names)."""
    return SIZES[os.environ.get("OOCARR_BENCH_LINALG_SIZE") or bm.mode_of(sizes)]


def matrix_bytes(workload: str, sizes: bw.Sizes) -> int:
    """Bytes of the matrix ``workload`` factors."""
    s = sizes_of(sizes)
    shape = s.tall_shape if workload == TSQR else (s.side, s.side)
    return math.prod(shape) * 4


def budget_bytes(workload: str, sizes: bw.Sizes) -> int:
    """oocarr's budget in ``workload``: its matrix over :data:`OVER_BUDGET`."""
    return matrix_bytes(workload, sizes) // OVER_BUDGET[workload]


def size_label(workload: str, sizes: bw.Sizes) -> str:
    """The size column of a row of these workloads."""
    s, nbytes = sizes_of(sizes), matrix_bytes(workload, sizes)
    units = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))
    unit, size = next(((u, b) for u, b in units if nbytes >= b), units[-1])
    held = f"{nbytes / size:.1f} {unit}" if unit == "GiB" else f"{nbytes // size} {unit}"
    if workload == TSQR:
        return f"{s.tall_shape[0]}×{s.tall_shape[1]} ({held})"
    return f"{s.side}×{s.side} + b {s.side}×1 ({held})"


def flops(workload: str, op: str, sizes: bw.Sizes) -> float | None:
    """LAPACK's operation count of ``op`` (Cholesky n³/3, LU and two triangular solves
    2n³/3 + 2n²); ``None`` for the TSQR operations, whose count depends on the algorithm."""
    n = sizes_of(sizes).side
    return {"cholesky": n**3 / 3, "solve": 2 * n**3 / 3 + 2 * n**2}.get(op)


def extras(
    workload: str, op: str, sizes: bw.Sizes, budget: int, me: dict, peers: list[dict]
) -> dict[str, Any]:
    """GFLOP/s of each engine (Cholesky and solve), and oocarr's bytes read against the I/O
    lower bound: the larger of reading the matrix once and ``flops / sqrt(M)`` words for a
    budget of ``M`` words (below the first at these sizes).  No target: the issue sets none."""
    found: dict[str, Any] = {}
    count = flops(workload, op, sizes)
    if count is not None:
        found["gflops"] = {"oocarr": count / me["median"] / 1e9}
        for p in peers:
            found["gflops"][p["label"]] = count / p["median"] / 1e9
    bound = matrix_bytes(workload, sizes)
    if count is not None:
        bound = max(bound, count / math.sqrt(budget / 4) * 4)
    if me.get("bytes_read") is not None:
        found["io_bound_bytes"] = bound
        found["io_vs_bound"] = {"ratio": me["bytes_read"] / bound}
    return found


# --------------------------------------------------------------------------------------------
# The data


def _gaussian_rows(columns: int, seed: int, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of a float32 matrix of standard normal values, drawn
    :data:`bench_workloads.GEN_ROWS` rows at a time (the same whatever the slab)."""
    blocks = []
    for first in range(start // bw.GEN_ROWS * bw.GEN_ROWS, stop, bw.GEN_ROWS):
        rng = np.random.default_rng([seed, first])
        block = rng.standard_normal((bw.GEN_ROWS, columns), dtype=np.float32)
        blocks.append(block[max(start - first, 0) : stop - first])
    return np.ascontiguousarray(np.concatenate(blocks))


def tall_rows(s: LinalgSizes, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of the tall matrix ``X``."""
    return _gaussian_rows(s.tall_shape[1], SEEDS["X"], start, stop)


def _uniform_block(s: LinalgSizes, i: int, j: int) -> np.ndarray:
    rng = np.random.default_rng([SEEDS["A"], i, j])
    return rng.random((s.block, s.block), dtype=np.float32) * 2 - 1


def spd_panel(s: LinalgSizes, panel: int) -> np.ndarray:
    """Block row ``panel`` of ``A`` (``block`` rows): block (i, j) is drawn for i ≤ j and is
    the transpose of (j, i) below the diagonal; diagonal blocks are symmetrized."""
    blocks = []
    for j in range(s.side // s.block):
        if j == panel:
            g = _uniform_block(s, panel, panel)
            block = (g + g.T) / 2 + np.float32(2 * math.sqrt(s.side)) * np.eye(s.block, dtype="f4")
        else:
            block = _uniform_block(s, panel, j) if panel < j else _uniform_block(s, j, panel).T
        blocks.append(block)
    return np.concatenate(blocks, axis=1)


def rhs(s: LinalgSizes) -> np.ndarray:
    """``b``: n × 1 standard normal values."""
    return _gaussian_rows(1, SEEDS["b"], 0, s.side)


def stored(data_dir: str, sizes: bw.Sizes, name: str, fmt: str) -> bw.Stored:
    """Where ``X`` (TSQR; ``hdf5`` or ``npy``), ``A`` or ``b`` (HDF5) is stored."""
    s = sizes_of(sizes)
    if name == "X":
        spec = bw.ArraySpec("tsqr_X", s.tall_shape, (s.tall_chunk_rows, s.tall_shape[1]), 0)
        path = "tsqr.h5" if fmt == "hdf5" else "tsqr_X.npy"
        return bw.Stored(spec, fmt, os.path.join(data_dir, path), "X" if fmt == "hdf5" else None)
    shape = (s.side, s.side) if name == "A" else (s.side, 1)
    spec = bw.ArraySpec(f"spd_{name}", shape, (s.block, min(s.block, shape[1])), 0)
    return bw.Stored(spec, "hdf5", os.path.join(data_dir, "spd.h5"), name)


def _arrays(data_dir: str, sizes: bw.Sizes, workload: str) -> list[bw.Stored]:
    if workload == TSQR:
        return [stored(data_dir, sizes, "X", fmt) for fmt in FORMATS[TSQR]]
    return [stored(data_dir, sizes, name, "hdf5") for name in ("A", "b")]


def _panels(a: bw.Stored, s: LinalgSizes) -> Iterator[tuple[int, np.ndarray]]:
    """``(start, rows)`` of ``a``'s values, about 32 MiB (``X``) or one block row (``A``)."""
    if a.spec.name == "tsqr_X":
        step = max(bw.GEN_ROWS, 32 * bw.MiB // (4 * s.tall_shape[1]))
        for start in range(0, s.tall_shape[0], step):
            yield start, tall_rows(s, start, min(start + step, s.tall_shape[0]))
    elif a.spec.name == "spd_A":
        for panel in range(s.side // s.block):
            yield panel * s.block, spd_panel(s, panel)
    else:
        yield 0, rhs(s)


def _write(path: str, arrays: list[bw.Stored], s: LinalgSizes) -> None:
    if arrays[0].fmt == "npy":
        (a,) = arrays
        out = np.lib.format.open_memmap(path, mode="w+", dtype="f4", shape=a.spec.shape)
        for start, rows in _panels(a, s):
            out[start : start + len(rows)] = rows
        out.flush()
        del out
        return
    import h5py

    with h5py.File(path, "w") as f:
        for a in arrays:
            dset = f.create_dataset(a.dataset, a.spec.shape, "f4", chunks=a.spec.chunks)
            for start, rows in _panels(a, s):
                dset[start : start + len(rows)] = rows


def ensure_data(
    data_dir: str, sizes: bw.Sizes, workloads: list[str], log: Callable[[str], None]
) -> dict[str, float]:
    """Write the matrices of the selected linear-algebra workloads missing from ``data_dir``
    (each under a temporary name, renamed when complete); an existing file of another shape
    or chunking is an error."""
    by_path: dict[str, list[bw.Stored]] = {}
    for w in workloads:
        if w in WORKLOADS:
            for a in _arrays(data_dir, sizes, w):
                by_path.setdefault(a.path, []).append(a)
    if not by_path:
        return {}
    os.makedirs(data_dir, exist_ok=True)
    seconds = bw.write_missing(
        data_dir, by_path, lambda path, arrays: _write(path, arrays, sizes_of(sizes)), log
    )
    if seconds:
        os.sync()
    return seconds


# --------------------------------------------------------------------------------------------
# Check values: JSON-able, compared with the peers' and with the input


def _spots(rows: int) -> list[int]:
    """First rows of the three checked row blocks: the top, the middle, the bottom."""
    return [0, rows // 2, rows - min(bw.SPOT, rows)]


ReadRows = Callable[[slice], np.ndarray]


def _tsqr_check(op: str, read_rows: ReadRows, rows: int, small: tuple) -> dict[str, Any]:
    """|R| (or S), and the rows of the input that the factors rebuild at three spots."""
    spots = [(r, np.asarray(read_rows(slice(r, r + bw.SPOT)), float)) for r in _spots(rows)]
    if op == "qr":
        r_factor = np.asarray(small[0], float)
        values = {"abs_r": np.abs(r_factor).ravel().tolist()}
        rebuilt = [(at, q @ r_factor) for at, q in spots]
    else:
        s, vh = (np.asarray(v, float) for v in small)
        values = {"s": s.tolist()}
        rebuilt = [(at, (u * s) @ vh) for at, u in spots]
    return {
        "values": values,
        "reconstructed": [{"at": [at, 0], "values": v.tolist()} for at, v in rebuilt],
    }


def _cholesky_check(read_rows: ReadRows, n: int) -> dict[str, Any]:
    """Blocks of L at three spots (on, below and on the diagonal), and the blocks of L·Lᵀ
    there, from whole row panels of L."""
    side = min(bw.SPOT, n)
    spots = [(0, 0), (n // 2, n // 3), (n - side, n - side)]
    blocks, rebuilt = [], []
    for r, c in spots:
        rows_r = np.asarray(read_rows(slice(r, r + side)), float)
        rows_c = np.asarray(read_rows(slice(c, c + side)), float)
        blocks.append({"at": [r, c], "values": rows_r[:, c : c + side].tolist()})
        rebuilt.append({"at": [r, c], "values": (rows_r @ rows_c.T).tolist()})
    return {"values": {}, "blocks": blocks, "reconstructed": rebuilt}


def _solve_check(x: Any) -> dict[str, Any]:
    return {"values": {"x": np.asarray(x, float).ravel().tolist()}}


def _far(got: Any, want: Any) -> float | None:
    """The largest difference of ``got`` and ``want`` relative to their largest magnitude,
    when above :data:`RTOL` (or not finite); ``None`` when they agree."""
    a, b = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    if a.shape != b.shape:
        return math.inf
    scale = max(np.abs(a).max(initial=0.0), np.abs(b).max(initial=0.0), 1e-30)
    worst = float(np.abs(a - b).max(initial=0.0) / scale)
    return worst if worst > RTOL or not math.isfinite(worst) else None


def disagreement(got: dict[str, Any], want: dict[str, Any]) -> str | None:
    """Why two engines' check values of the same operation differ, or ``None``: each named
    value (|R|, S, x) and each block of L, relative to their magnitude."""
    for name, values in want["values"].items():
        if (far := _far(got["values"].get(name, []), values)) is not None:
            return f"{name}: relative difference {far:.3g} > {RTOL:g}"
    for g, w in zip(got.get("blocks", []), want.get("blocks", []), strict=True):
        if g["at"] != w["at"]:
            return "different blocks were checked"
        if (far := _far(g["values"], w["values"])) is not None:
            return f"L at {w['at']}: relative difference {far:.3g} > {RTOL:g}"
    return None


def _input_rows(a: bw.Stored, rows: slice) -> np.ndarray:
    if a.fmt == "npy":
        return np.asarray(np.load(a.path, mmap_mode="r")[rows], float)
    import h5py

    with h5py.File(a.path, "r") as f:
        return np.asarray(f[a.dataset][rows], float)


def _backward_error(data_dir: str, sizes: bw.Sizes, x: np.ndarray) -> float:
    """``|b - A x| / (|A| |x| + |b|)`` in infinity norms, in float64, ``A`` a block row at a
    time."""
    s = sizes_of(sizes)
    a, b = (stored(data_dir, sizes, name, "hdf5") for name in ("A", "b"))
    x = x.reshape(s.side, -1)
    residual = norm_a = 0.0
    rhs_values = _input_rows(b, slice(None))
    for start in range(0, s.side, s.block):
        panel = _input_rows(a, slice(start, start + s.block))
        got = panel @ x - rhs_values[start : start + s.block]
        residual = max(residual, float(np.abs(got).max()))
        norm_a = max(norm_a, float(np.abs(panel).sum(axis=1).max()))
    return residual / (norm_a * float(np.abs(x).max()) + float(np.abs(rhs_values).max()))


def input_failure(
    data_dir: str, sizes: bw.Sizes, workload: str, op: str, fmt: str, check: dict[str, Any]
) -> str | None:
    """Why a result does not reproduce its input, or ``None``: the rebuilt blocks against the
    stored values in float64, and a solution's backward error."""
    if op == "solve":
        error = _backward_error(data_dir, sizes, np.asarray(check["values"]["x"]))
        return (
            None if error <= BACKWARD_ERROR else f"backward error {error:.3g} > {BACKWARD_ERROR:g}"
        )
    if workload == TSQR:  # the in-memory peer's matrix was loaded from the .npy file
        source = stored(data_dir, sizes, "X", fmt if fmt in FORMATS[TSQR] else "npy")
    else:
        source = stored(data_dir, sizes, "A", "hdf5")
    for block in check["reconstructed"]:
        (r, c), (rows, cols) = block["at"], np.shape(block["values"])
        want = _input_rows(source, slice(r, r + rows))[:, c : c + cols]
        if (far := _far(block["values"], want)) is not None:
            return f"rebuilt input at {block['at']}: relative difference {far:.3g} > {RTOL:g}"
    return None


def summary(check: dict[str, Any]) -> dict[str, Any]:
    """A check value shortened for the JSON report: the first values of each."""
    short: dict[str, Any] = {k: v[:4] for k, v in check["values"].items()}
    for key in ("blocks", "reconstructed"):
        if key in check:
            short[key] = [{"at": b["at"], "first": b["values"][0][:4]} for b in check[key]]
    return short


# --------------------------------------------------------------------------------------------
# Cases


def _stored_rows(array: Any) -> ReadRows:
    return lambda rows: array.store[rows]


def _memory_rows(array: Any) -> ReadRows:
    return lambda rows: array[rows]


def _tsqr_oocarr(ctx: bw.Context, op: str, fmt: str) -> bw.Case:
    """``oocarr.linalg.qr``/``svd`` of the stored matrix under an eighth of its size: Q (or U)
    written to scratch, R (or S, Vh) in memory."""
    import oocarr

    x = stored(ctx.data_dir, ctx.sizes, "X", fmt)
    budget = budget_bytes(TSQR, ctx.sizes)
    factor = getattr(oocarr.linalg, op)

    def run() -> tuple:
        with oocarr.memory_budget(budget):
            a = oocarr.open(x.url)
            found = factor(a) if op == "qr" else factor(a, full_matrices=False)
            return (found[0], *(np.asarray(v) for v in found[1:]))

    def check(result: tuple) -> dict[str, Any]:
        return _tsqr_check(op, _stored_rows(result[0]), x.spec.shape[0], result[1:])

    return bw.Case(run, [x.path], check)


def _tsqr_dask(ctx: bw.Context, op: str, fmt: str) -> bw.Case:
    """``dask.array.linalg.qr``/``svd`` (TSQR) in the storage's row chunks: Q (or U) stored
    into a ``.npy`` file in the graph that computes R (or S, Vh)."""
    import dask
    import dask.array as da

    x = stored(ctx.data_dir, ctx.sizes, "X", fmt)
    out = ctx.output(f"tsqr-dask-{op}.npy")

    def run() -> tuple:
        xd, close = bw.dask_array(x, x.spec.chunks)
        try:
            tall, *small = da.linalg.qr(xd) if op == "qr" else da.linalg.svd(xd)
            target = np.lib.format.open_memmap(out, "w+", np.float32, tall.shape)
            store = da.store(tall, target, lock=False, compute=False)
            _, *small = dask.compute(store, *small)
            return (target, *small)
        finally:
            close()

    def check(result: tuple) -> dict[str, Any]:
        return _tsqr_check(op, _memory_rows(result[0]), x.spec.shape[0], result[1:])

    return bw.Case(run, [x.path], check, lambda: bw.remove(out))


def _tsqr_scipy(ctx: bw.Context, op: str, fmt: str) -> bw.Case:
    """SciPy's float32 LAPACK QR (``geqrf``, ``orgqr``) or SVD (``gesdd``) of the matrix
    loaded from ``.npy`` before the timing."""
    import scipy.linalg

    x = np.load(stored(ctx.data_dir, ctx.sizes, "X", "npy").path)

    def run() -> tuple:
        if op == "qr":
            return tuple(scipy.linalg.qr(x, mode="economic", check_finite=False))
        return tuple(scipy.linalg.svd(x, full_matrices=False, check_finite=False))

    def check(result: tuple) -> dict[str, Any]:
        return _tsqr_check(op, _memory_rows(result[0]), x.shape[0], result[1:])

    return bw.Case(run, [], check)


def _spd(ctx: bw.Context) -> tuple[bw.Stored, bw.Stored, int]:
    a, b = (stored(ctx.data_dir, ctx.sizes, name, "hdf5") for name in ("A", "b"))
    return a, b, a.spec.shape[0]


def _cholesky_oocarr(ctx: bw.Context, op: str, fmt: str) -> bw.Case:
    """``oocarr.linalg.cholesky`` (L written to scratch) or ``solve`` of the stored ``A`` under
    a quarter of its size."""
    import oocarr

    a, b, n = _spd(ctx)
    budget = budget_bytes(CHOLESKY, ctx.sizes)
    function = getattr(oocarr.linalg, op)

    def run() -> Any:
        with oocarr.memory_budget(budget):
            if op == "cholesky":
                return function(oocarr.open(a.url))
            return np.asarray(function(oocarr.open(a.url), oocarr.open(b.url)))

    def check(result: Any) -> dict[str, Any]:
        return (
            _cholesky_check(_stored_rows(result), n) if op == "cholesky" else _solve_check(result)
        )

    return bw.Case(run, [a.path], check)


def _cholesky_dask(ctx: bw.Context, op: str, fmt: str) -> bw.Case:
    """``dask.array.linalg.cholesky`` (L stored into a ``.npy`` file) or ``solve`` (x into
    memory), blocks = the storage chunks."""
    import dask.array as da

    a, b, n = _spd(ctx)
    out = ctx.output("cholesky-dask.npy")

    def run() -> Any:
        (ad, close_a), (bd, close_b) = bw.dask_array(a), bw.dask_array(b)
        try:
            if op == "cholesky":
                return bw._store_to_npy(da.linalg.cholesky(ad, lower=True), out)
            return da.linalg.solve(ad, bd).compute()
        finally:
            close_a()
            close_b()

    def check(result: Any) -> dict[str, Any]:
        return (
            _cholesky_check(_memory_rows(result), n) if op == "cholesky" else _solve_check(result)
        )

    return bw.Case(run, [a.path], check, lambda: bw.remove(out))


def _cholesky_scipy(ctx: bw.Context, op: str, fmt: str) -> bw.Case:
    """SciPy's float32 LAPACK Cholesky (``potrf``) or LU solve (``getrf``, ``getrs``) of ``A``
    (and ``b``) loaded before the timing."""
    import h5py
    import scipy.linalg

    a, b, n = _spd(ctx)
    with h5py.File(a.path, "r") as f:
        matrix, vector = f[a.dataset][...], f[b.dataset][...]

    def run() -> np.ndarray:
        if op == "cholesky":
            return scipy.linalg.cholesky(matrix, lower=True, check_finite=False)
        return scipy.linalg.solve(matrix, vector, check_finite=False, assume_a="general")

    def check(result: np.ndarray) -> dict[str, Any]:
        return (
            _cholesky_check(_memory_rows(result), n) if op == "cholesky" else _solve_check(result)
        )

    return bw.Case(run, [], check)


#: (workload, engine) -> runner(ctx, op, fmt) -> Case.
RUNNERS: dict[tuple[str, str], Callable[[bw.Context, str, str], bw.Case]] = {
    (TSQR, "oocarr"): _tsqr_oocarr,
    (TSQR, "dask"): _tsqr_dask,
    (TSQR, "scipy"): _tsqr_scipy,
    (CHOLESKY, "oocarr"): _cholesky_oocarr,
    (CHOLESKY, "dask"): _cholesky_dask,
    (CHOLESKY, "scipy"): _cholesky_scipy,
}
