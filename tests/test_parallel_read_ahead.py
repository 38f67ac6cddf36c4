"""Steps read in parallel: a streamer whose stored input decodes each step in fewer threads
than the machine has cores (a step of one compressed chunk) reads several steps at once,
in order, within the memory budget."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest

import oocarr
from oocarr.engine import run as engine_run
from oocarr.engine.io import prefetched
from oocarr.engine.plan import reserved
from oocarr.ops.reductions import Sum
from subprocess_rss import run_script


class Concurrency:
    """Counts how many calls of a wrapped function run at once."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self._lock = threading.Lock()

    def wrap(self, fn):
        def counted(*args, **kwargs):
            with self._lock:
                self.now += 1
                self.most = max(self.most, self.now)
            try:
                time.sleep(0.01)  # long enough for a second read to start beside this one
                return fn(*args, **kwargs)
            finally:
                with self._lock:
                    self.now -= 1

        return counted


@pytest.mark.parametrize("ahead", [1, 2, 3])
def test_prefetched_keeps_order_and_at_most_ahead_reads_in_flight(ahead):
    seen = Concurrency()
    out = [v for _, v in prefetched(range(12), seen.wrap(lambda i: i * i), ahead)]
    assert out == [i * i for i in range(12)]
    assert seen.most == ahead


def test_prefetched_in_parallel_raises_at_the_failing_step():
    def read(i):
        if i == 4:
            raise OSError("step 4 failed")
        return i

    got = []
    with pytest.raises(OSError, match="step 4"):
        for _, v in prefetched(range(8), read, 3):
            got.append(v)
    assert got == [0, 1, 2, 3]


@pytest.fixture
def zstd_rows(tmp_path):
    """A zstd Zarr array whose reduction tiles are one chunk each."""
    data = np.random.default_rng(3).integers(0, 1000, (64, 512, 256)).astype("u2")
    url = str(tmp_path / "cube.zarr")
    oocarr.save(oocarr.from_numpy(data), url, chunks=(8, 512, 256), compression="zstd")
    return data, url


def _with_reads_counted(url, monkeypatch) -> Concurrency:
    x = oocarr.open(url)
    seen = Concurrency()
    monkeypatch.setattr(type(x.store), "_read", seen.wrap(type(x.store)._read))
    return seen


def test_a_sum_of_one_chunk_tiles_reads_them_in_parallel(zstd_rows, monkeypatch):
    data, url = zstd_rows
    monkeypatch.setattr(engine_run, "_cores", lambda: 8)
    seen = _with_reads_counted(url, monkeypatch)
    budget = 64 * 2**20
    with oocarr.memory_budget(budget), oocarr.io_stats() as stats:
        total = oocarr.sum(oocarr.open(url), axis=(1, 2))
    np.testing.assert_array_equal(np.asarray(total), data.sum(axis=(1, 2), dtype="u4"))
    assert seen.most > 1
    assert stats.total.bytes_read == data.nbytes  # every chunk once
    assert stats.total.projected_bytes <= budget


def test_read_ahead_shrinks_to_what_the_budget_holds(zstd_rows, monkeypatch):
    _, url = zstd_rows
    monkeypatch.setattr(engine_run, "_cores", lambda: 8)
    x = oocarr.open(url)
    algorithm = engine_run.OOCAlgorithm(Sum(x.shape))
    operands = [engine_run.Operand(x.store)]
    aheads = []
    for budget in (16 * 2**20, 24 * 2**20, 256 * 2**20):
        with oocarr.memory_budget(budget):
            plan, itemsize = algorithm.forward_plan(operands)
            ahead = algorithm.read_ahead(operands, plan, itemsize)
            projected = algorithm.projection(operands, plan, itemsize, ahead).nbytes
            assert projected <= budget - reserved(budget)
            aheads.append(ahead)
    assert aheads == sorted(aheads)
    assert aheads[0] < aheads[-1] == engine_run.MAX_READ_AHEAD


def test_uncompressed_or_one_core_reads_one_step_ahead(tmp_path, monkeypatch):
    data = np.arange(64 * 64 * 64, dtype="f4").reshape(64, 64, 64)
    url = str(tmp_path / "raw.zarr")
    oocarr.save(oocarr.from_numpy(data), url, chunks=(8, 64, 64))
    monkeypatch.setattr(engine_run, "_cores", lambda: 8)
    seen = _with_reads_counted(url, monkeypatch)
    with oocarr.memory_budget(2**20):
        total = float(oocarr.sum(oocarr.open(url)))
    assert total == pytest.approx(float(data.sum(dtype="f8")), rel=1e-6)
    assert seen.most == 1


READ_AHEAD_RSS = """
import json, sys
import numpy as np
import oocarr
from oocarr.engine import run

run._cores = lambda: 8  # as on an 8-core machine: four steps read at once where they fit
x = oocarr.open(sys.argv[1])
float(oocarr.sum(oocarr.from_numpy(np.ones((4, 4), "u2"))))
baseline = peak_rss()
with oocarr.memory_budget(int(sys.argv[2])), oocarr.io_stats() as stats:
    column_sums = oocarr.sum(x, axis=0)
total = int(np.asarray(oocarr.to_numpy(column_sums)).sum(dtype=np.uint64))
print(json.dumps({"growth": peak_rss() - baseline, "total": total,
                  "projected": stats.total.projected_bytes}))
"""


@pytest.mark.memory
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_reads_in_parallel_stay_within_the_budget(tmp_path):
    rows, cols = 32768, 2048  # 128 MiB of uint16 in 1 MiB zstd chunks
    url = str(tmp_path / "rows.zarr")
    rng = np.random.default_rng(5)
    expected = np.zeros(cols, "u8")
    with oocarr.create(url, (rows, cols), "u2", chunks=(256, cols), compression="zstd") as z:
        for start in range(0, rows, 4096):
            block = rng.integers(0, 4096, (4096, cols)).astype("u2")
            z.store[start : start + 4096] = block
            expected += block.sum(axis=0, dtype="u8")
    budget = 32 * 10**6
    got = run_script(READ_AHEAD_RSS, url, str(budget))
    assert got["total"] == int(expected.sum())
    assert got["projected"] <= budget
    assert got["growth"] <= 1.25 * budget, got
