"""``oocarr convert`` of a 256 MiB array, 8x the 32 MB budget: peak RSS above the process's
baseline (after importing oocarr and converting a tiny array) stays within the budget.
Each conversion runs in its own subprocess, since peak RSS only grows.

Select these with ``-m memory``; they run in the default suite too.
"""

from __future__ import annotations

import sys
import textwrap

import h5py
import numpy as np
import pytest
import zarr

from subprocess_rss import run_script

BUDGET = 32 * 10**6
ROWS, COLS = 256 * 2**20 // 4 // 256, 256
STEP = 8192

SCRIPT = textwrap.dedent(
    """
    import json, os, sys, tempfile
    import numpy as np
    from oocarr.cli.main import main

    src, dst, budget, *extra = sys.argv[1:]
    tiny = os.path.join(tempfile.mkdtemp(), "tiny.npy")
    np.save(tiny, np.ones((64, 64), "f4"))
    main(["-q", "convert", tiny, os.path.join(os.path.dirname(dst), "tiny.zarr")],
         standalone_mode=False)
    baseline = peak_rss()
    main(["-q", "--memory", budget, "convert", src, dst, *extra], standalone_mode=False)
    print(json.dumps({"growth": peak_rss() - baseline}))
    """
)


def _column(start: int, stop: int) -> np.ndarray:
    return (np.arange(start * COLS, stop * COLS) % 1000).astype(np.float32).reshape(-1, COLS)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """The same 256 MiB of float32 as a chunked HDF5 dataset (h5py) and a .npy file (NumPy)."""
    root = tmp_path_factory.mktemp("cli-memory")
    h5, npy = root / "src.h5", root / "src.npy"
    with h5py.File(h5, "w") as f:
        x = f.create_dataset("x", (ROWS, COLS), "f4", chunks=(2048, COLS))
        for start in range(0, ROWS, STEP):
            x[start : start + STEP] = _column(start, start + STEP)
    out = np.lib.format.open_memmap(npy, mode="w+", dtype="f4", shape=(ROWS, COLS))
    for start in range(0, ROWS, STEP):
        out[start : start + STEP] = _column(start, start + STEP)
        out.flush()
    del out
    return {"hdf5": f"{h5}#/x", "npy": str(npy)}


@pytest.mark.memory
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
@pytest.mark.parametrize(
    "source, dst, extra",
    [("hdf5", "dst.zarr", ["--compression", "zstd"]), ("npy", "dst.h5#/x", [])],
    ids=["hdf5-to-zarr-zstd", "npy-to-hdf5"],
)
def test_convert_8x_the_budget_stays_within_it(sources, tmp_path, source, dst, extra):
    target = f"{tmp_path}/{dst}"
    growth = run_script(SCRIPT, sources[source], target, str(BUDGET), *extra)["growth"]
    print(f"{source} -> {dst}: peak RSS {growth / 1e6:.1f} MB above baseline")
    assert growth <= BUDGET, f"peaked {growth / 1e6:.1f} MB above the baseline"
    if dst.endswith(".zarr"):
        copy = zarr.open_array(target, mode="r")
        rows = [0, ROWS // 2, ROWS - 1]
        assert all(np.array_equal(copy[r], _column(r, r + 1)[0]) for r in rows)
    else:
        with h5py.File(target.partition("#")[0], "r") as f:
            assert np.array_equal(f["x"][-STEP:], _column(ROWS - STEP, ROWS))
