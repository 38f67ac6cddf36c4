"""Peak memory of the Array API's new streamed functions on a 64 MiB ``.npy`` under an 8 MB
budget, in a fresh process: reshape, concat, broadcast, gather, sort, argmax, prod,
cumulative_sum and creation never hold the array."""

from __future__ import annotations

import numpy as np
import pytest

from subprocess_rss import run_script

BUDGET = 8 * 10**6


def test_new_functions_stream_within_the_budget(tmp_path):
    path = str(tmp_path / "big.npy")
    big = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(4096, 4096))
    big[:] = np.arange(4096, dtype=np.float32)[:, None] % 7
    big.flush()
    del big
    report = run_script(SCRIPT, path, str(BUDGET))
    rows = np.arange(4096, dtype=np.float64) % 7
    assert report["reshape"] == pytest.approx(4096 * rows.sum())
    assert report["concat"] == pytest.approx(2 * 4096 * rows.sum())
    assert report["gather"] == pytest.approx(4096 * rows[report["idx"]].sum())
    assert report["sort"] == pytest.approx(4096 * rows.sum())
    assert report["argmax"] == int(np.argmax(rows)) * 4096
    assert report["cumsum"] == pytest.approx(4096 * rows.sum())
    assert report["zeros"] == 0.0 and report["arange"] == pytest.approx((2**24 - 1) * 2**23)
    for name, growth in report["growth"].items():
        assert growth <= 1.25 * BUDGET, f"{name} peaked {growth / 1e6:.1f} MB over baseline"


SCRIPT = """
import json, sys
import numpy as np
import oocarr

x = oocarr.open(sys.argv[1])
# an array like x, whose runs compile every program the measured runs use: compiling is not
# data, and a new tile shape's compile would show as growth
like_x = oocarr.zeros(x.shape, dtype=x.dtype)
idx = np.random.default_rng(0).integers(0, 4096, 3000)
growth = {}


def run(name, fn):
    with oocarr.memory_budget(int(sys.argv[2])):
        fn(like_x)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the peak restarts from the current resident size
        baseline = peak_rss()
        out = fn(x)
    growth[name] = peak_rss() - baseline
    return out


report = {
    "reshape": float(run("reshape", lambda a: oocarr.sum(oocarr.reshape(a, (-1, 1024))))),
    "concat": float(run("concat", lambda a: oocarr.sum(oocarr.concat([a, a], axis=0)))),
    "gather": float(run("gather", lambda a: oocarr.sum(a[idx]))),
    "sort": float(run("sort", lambda a: oocarr.sum(oocarr.sort(a, axis=1)))),
    "argmax": int(run("argmax", oocarr.argmax)),
    "cumsum": float(run("cumsum", lambda a: oocarr.sum(oocarr.cumulative_sum(a, axis=1)[:, -1]))),
    "zeros": float(run("zeros", lambda a: oocarr.sum(oocarr.zeros((2**24,))))),
    "arange": float(run("arange", lambda a: oocarr.sum(oocarr.arange(2**24, dtype="float64")))),
    "idx": idx.tolist(),
    "growth": growth,
}
print(json.dumps(report))
"""
