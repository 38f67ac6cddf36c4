"""The engine's threads never deadlock (issue 14 item 13).

The reader (read-ahead), the drivers' decode threads and the write-behind
thread share locks with the caller's thread: a driver's lock, a buffer
pool's lock, the futures they wait on.  Each case runs many times in a
subprocess whose ``faulthandler.dump_traceback_later`` kills it (printing
every thread's stack) if it stalls, so a hang fails the test instead of
hanging the suite.  Outcomes are checked against NumPy: an op either
returns the right value or raises a typed error, never hangs.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

#: Seconds a script may run before its threads' stacks are dumped and it is killed.
STALL_S = 60

PRELUDE = """
import faulthandler, gc, os, sys, threading
faulthandler.dump_traceback_later({stall}, exit=True)
"""


def run_script(script: str, *args: str, stall: int = STALL_S) -> str:
    """Run ``script`` in a fresh interpreter; fail with its output if it stalls (no progress
    for ``stall`` seconds) or fails."""
    prelude = PRELUDE.format(stall=stall)
    try:
        result = subprocess.run(
            [sys.executable, "-c", prelude + textwrap.dedent(script), *args],
            capture_output=True,
            text=True,
            timeout=stall + 60,
            check=False,
        )
    except subprocess.TimeoutExpired as err:  # pragma: no cover - faulthandler fires first
        pytest.fail(f"the script hung past {stall + 60} s:\n{err.stderr}")
    assert "Timeout (" not in result.stderr, "a deadlock; every thread's stack:\n" + result.stderr
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_closing_the_read_ahead_does_not_wait_for_a_read_blocked_on_the_closer():
    """A read-ahead iterator closed (by the caller, or by a garbage collection) in a thread
    holding a lock that the read in flight needs."""
    out = run_script(
        """
        from oocarr.engine.io import prefetched

        lock = threading.Lock()
        started = threading.Event()

        def read(i):
            if i == 1:
                started.set()
                with lock:  # held by the thread that closes the iterator
                    pass
            return i

        for _ in range(20):
            started.clear()
            steps = prefetched(range(3), read)
            with lock:
                assert next(steps) == (0, 0)  # the read of item 1 starts and waits for the lock
                assert started.wait(10)
                steps.close()
        print("ok")
        """,
        stall=20,
    )
    assert out.strip() == "ok"


def test_read_ahead_stops_when_the_consumer_raises():
    out = run_script(
        """
        from oocarr.engine.io import prefetched

        reads = []
        for _ in range(50):
            try:
                for i, v in prefetched(range(10), lambda i: reads.append(i) or i):
                    if i == 3:
                        raise KeyError(i)
            except KeyError:
                pass
        gc.collect()
        print(max(reads) <= 4, sum(t.name.startswith("oocarr-read") for t in threading.enumerate()))
        """
    )
    reads_stopped, readers_left = out.split()
    assert reads_stopped == "True"
    assert int(readers_left) <= 1  # at most one read was still finishing


def test_buffer_pool_survives_a_collection_inside_its_lock():
    """A pooled buffer that dies in a reference cycle is given back by a finaliser that the
    garbage collector may run in any thread, also inside the pool's own lock."""
    out = run_script(
        """
        from oocarr.store.buffers import BufferPool

        pool = BufferPool(keep=2)
        gc.set_threshold(5)
        for _ in range(20000):
            a = pool.empty((100,), "f8")
            cycle = [a]
            cycle.append(cycle)
            del a, cycle
        print("ok", pool.free <= 2)
        """,
        stall=20,
    )
    assert out.split() == ["ok", "True"]


ONE_BIG_CHUNK = """
import numpy as np, oocarr
from oocarr.errors import BudgetTooSmallError

d, driver = sys.argv[1], sys.argv[2]
data = np.arange(1 << 20, dtype="f4") % 4  # 4 MiB; every partial sum is exact in float32
url = {
    "npy": f"{d}/a.npy",
    "hdf5": f"{d}/a.h5#/x",
    "zarr": f"{d}/a.zarr",
}[driver]
kwargs = {} if driver == "npy" else {"chunks": (1 << 20,), "compression": "gzip"}
x = oocarr.save(data, url, **kwargs)
gc.set_threshold(50)  # finalisers run often, in whichever thread allocates
outcomes = set()
for i in range(8):
    with oocarr.memory_budget("1MB"):
        try:
            total = float(oocarr.sum(x))
            assert total == float(data.sum(dtype="f8")), total
            y = x + 1
            np.testing.assert_array_equal(np.asarray(y)[:5], data[:5] + 1)
            del y
            outcomes.add("result")
        except BudgetTooSmallError:
            outcomes.add("BudgetTooSmallError")
print(sorted(outcomes))
"""


@pytest.mark.parametrize("driver", ["npy", "hdf5", "zarr"])
def test_one_chunk_larger_than_the_budget(tmp_path, driver):
    out = run_script(ONE_BIG_CHUNK, str(tmp_path), driver)
    assert out.strip() in (
        "['result']",
        "['BudgetTooSmallError']",
        "['BudgetTooSmallError', 'result']",
    )


FAILING_IO = """
import numpy as np, oocarr
from oocarr_drivers.memmap import MemmapArray

where, d = sys.argv[1], sys.argv[2]
data = np.arange(200_000, dtype="f8") % 4  # every partial sum is exact in float32
x = oocarr.save(data, f"{d}/a.npy")
original = getattr(MemmapArray, where)
calls = {"n": 0}

class Injected(OSError):
    pass

def failing(self, *args):
    calls["n"] += 1
    if calls["n"] % 3 == 0:
        raise Injected(f"injected failure in {where}")
    return original(self, *args)

setattr(MemmapArray, where, failing)
raised = 0
with oocarr.memory_budget("256KB"):
    for i in range(12):
        try:
            np.asarray(x + 1)
            float(oocarr.sum(x * 2))
        except Exception as err:
            assert "injected failure" in str(err) or isinstance(err.__cause__, Injected), err
            raised += 1
setattr(MemmapArray, where, original)
with oocarr.memory_budget("256KB"):
    assert float(oocarr.sum(x + 1)) == float((data + 1).sum())
print(raised)
"""


@pytest.mark.parametrize("where", ["_read", "_write"])
def test_failing_reader_or_writer_raises_and_never_hangs(tmp_path, where):
    out = run_script(FAILING_IO, where, str(tmp_path))
    assert int(out.strip()) > 0  # the failures surfaced as errors
