"""The engine's loops: prefetch and write-behind threads, block reuse, the planner's budget."""

from __future__ import annotations

import math
import subprocess
import sys
import threading

import numpy as np
import pytest

import oocarr
from oocarr import engine, errors
from oocarr.ops.matmul import Matmul


def test_reads_run_ahead_and_writes_run_behind_in_their_own_threads(tmp_path, monkeypatch):
    a = np.arange(600, dtype="f4").reshape(60, 10)
    x = oocarr.save(a, str(tmp_path / "x.npy"))
    readers, writers = set(), set()
    read, write = engine.Operand.read, engine.OOCAlgorithm._write_tile

    def recording_read(self, region):
        readers.add(threading.current_thread().name.split("_")[0])
        return read(self, region)

    def recording_write(self, out, region, tile):
        writers.add(threading.current_thread().name.split("_")[0])
        return write(self, out, region, tile)

    monkeypatch.setattr(engine.Operand, "read", recording_read)
    monkeypatch.setattr(engine.OOCAlgorithm, "_write_tile", recording_write)
    with oocarr.memory_budget(6 * 4 * 40):
        y = x * 2.0 + 1.0
    np.testing.assert_array_equal(np.asarray(y), a * 2.0 + 1.0)
    assert readers == {"oocarr-read"}
    assert writers == {"oocarr-write"}


def test_a_read_error_in_the_background_reaches_the_caller_and_leaves_nothing(
    tmp_path, monkeypatch
):
    a = np.ones((60, 10), "f4")
    x = oocarr.save(a, str(tmp_path / "x.npy"))
    out = tmp_path / "out.npy"
    read = engine.Operand.read
    calls = []

    def failing(self, region):
        calls.append(region)
        if len(calls) == 4:
            raise OSError("disk gone")
        return read(self, region)

    monkeypatch.setattr(engine.Operand, "read", failing)
    with oocarr.memory_budget(6 * 4 * 40), pytest.raises(OSError, match="disk gone"):
        oocarr.save(x * 2.0, str(out))
    assert not out.exists()


def test_matmul_reads_each_row_panel_of_a_once(tmp_path):
    a = np.random.default_rng(0).random((64, 8), dtype="f4")
    b = np.random.default_rng(1).random((8, 64), dtype="f4")
    x, y = oocarr.save(a, str(tmp_path / "a.npy")), oocarr.save(b, str(tmp_path / "b.npy"))
    budget = 4 * 2600  # 22 x 22 output tiles, all of k in one step
    with oocarr.memory_budget(budget), oocarr.io_stats() as stats:
        got = x @ y
    np.testing.assert_allclose(np.asarray(got), a @ b, rtol=1e-5)
    operands = [engine.Operand(x.store), engine.Operand(y.store)]
    with oocarr.memory_budget(budget):
        plan = engine.OOCAlgorithm(Matmul((64, 8), (8, 64))).plan(operands, 4)
    tm, tn = plan.out_tile
    assert plan.extra["k"] == 8 and tn < 64, plan  # k in one step, several column tiles
    (counts,) = [c for site, c in stats.by_site.items() if site.startswith("matmul")]
    assert counts.bytes_read == a.nbytes + math.ceil(64 / tm) * b.nbytes


def test_the_planner_counts_prefetch_and_write_behind_buffers(tmp_path):
    x = oocarr.save(np.ones((10, 10), "f4"), str(tmp_path / "x.npy"))
    # elementwise: 4 buffers of its own; per stored input, the block read ahead and the one
    # XLA has not let go of yet; one written
    residency = engine.OOCAlgorithm(oocarr.ops.elementwise.BINARY["add"]((10, 10), (10, 10)))
    assert residency.residency([engine.Operand(x.store)] * 2) == 4 + 2 * 2 + 1
    # x + 1.0: one stored input, so 4 + 2 + 1 buffers of one float32 element at least
    with oocarr.memory_budget(4 * 7 - 1), pytest.raises(errors.BudgetTooSmallError) as info:
        x + 1.0
    assert "add" in str(info.value) and "at least 28 bytes" in str(info.value)
    with oocarr.memory_budget(4 * 7):
        np.testing.assert_array_equal(np.asarray(x + 1.0), np.full((10, 10), 2.0))


@pytest.mark.parametrize("fmt", ["npy", "h5"])
def test_reduction_tiles_suit_the_storage_layout(tmp_path, fmt):
    from oocarr.ops.reductions import Sum

    data = np.random.default_rng(2).random((96, 64), dtype="f4")
    if fmt == "npy":
        url = str(tmp_path / "x.npy")
        x = oocarr.save(data, url)
    else:
        h5py = pytest.importorskip("h5py")
        with h5py.File(tmp_path / "x.h5", "w") as f:
            f.create_dataset("x", data=data, chunks=(16, 16))
        x = oocarr.open(str(tmp_path / "x.h5") + "#/x")
    budget = 4 * 4 * 700  # tiles of at most ~700 elements beside the engine's buffers
    with oocarr.memory_budget(budget):
        plan = engine.OOCAlgorithm(Sum((96, 64))).plan([engine.Operand(x.store)], 4)
        total = float(oocarr.sum(x))
    tile = (plan.extra["in0"], plan.extra["in1"])
    if fmt == "npy":  # contiguous: whole rows, one run of the file per tile
        assert tile[1] == 64, tile
    else:  # chunks stacked along the first axis, cut evenly: no edge padding
        assert tile[1] == 16 and tile[0] % 16 == 0 and 96 % tile[0] == 0, tile
    np.testing.assert_allclose(total, data.sum(dtype=np.float64), rtol=1e-5)


def test_ops_written_before_host_folds_keep_their_plan_and_buffers_signatures():
    """An op overriding ``plan(budget_elems, chunks)`` and ``buffers(out, ins, stored)`` with
    the signatures from before ``host=`` still plans and runs."""
    from oocarr.engine.op import BlockParallelOp, Plan

    class Doubled(BlockParallelOp):
        name = "doubled"

        def compute_output_shape(self):
            return self.in_shapes[0]

        def plan(self, budget_elems, chunks):
            return Plan((min(self.output_shape[0], 7),))

        def buffers(self, out_tile, in_blocks, stored):
            return [("tiles", 4, out_tile[0])]

        def index_map(self, out_region, plan):
            yield (out_region,)

        def forward_block(self, x):
            return x * 2

    x = oocarr.from_numpy(np.arange(20.0, dtype="f4"))
    out = np.empty(20, "f4")
    engine.OOCAlgorithm(Doubled((20,))).forward([engine.Operand(x.store)], out)
    np.testing.assert_array_equal(out, np.arange(20.0) * 2)


def test_engine_client_runs_lapack_before_jax_starts_its_own():
    """The engine's CPU client has JAX's LAPACK custom calls even when it is made before JAX's
    default backend (a fresh process whose first computation is an out-of-core factorization)."""
    code = (
        "import numpy as np, jax, jax.numpy as jnp\n"
        "from oocarr.engine.device import engine_device\n"
        "x = jax.device_put(np.diag(np.array([4.0, 9.0], 'f4')), engine_device())\n"
        "print(np.asarray(jax.jit(jnp.linalg.cholesky)(x)).diagonal().tolist())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(np.sqrt([4.0, 9.0]).tolist())
