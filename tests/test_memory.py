"""``save`` copies one tile at a time: peak memory stays near one tile, whatever the array size."""

from __future__ import annotations

import sys
import textwrap

import pytest

from subprocess_rss import run_script

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import h5py, numpy as np
    import oocarr

    src, dst = sys.argv[1], sys.argv[2]
    rows, cols = 250_000, 128                       # 128 MB of float32
    with h5py.File(src, "w") as f:
        ds = f.create_dataset("x", (rows, cols), "f4", chunks=(2048, cols))
        for start in range(0, rows, 8192):
            ds[start:start + 8192] = np.full((min(8192, rows - start), cols), start, "f4")
    oocarr.save(np.zeros((4, 4), "f4"), dst + "/warmup.zarr")   # import and warm every path
    baseline = peak_rss()
    out = oocarr.save(oocarr.open(src + "#/x"), dst + "/copy.zarr", tile_bytes=8 * 2**20)
    peak = peak_rss()
    first = out.store[0, 0]
    last = out.store[rows - 1, cols - 1]
    print(json.dumps({"baseline": baseline, "peak": peak, "nbytes": out.nbytes,
                      "first": float(first), "last": float(last)}))
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/status")
def test_save_peak_memory_is_about_one_tile(tmp_path):
    report = run_script(SCRIPT, str(tmp_path / "src.h5"), str(tmp_path))
    assert report["first"] == 0.0 and report["last"] == float((250_000 - 1) // 8192 * 8192)
    growth = report["peak"] - report["baseline"]
    print(f"peak RSS growth {growth / 2**20:.1f} MiB copying {report['nbytes'] / 2**20:.0f} MiB")
    # one 8 MiB tile read plus its encoded chunks and the HDF5 chunk cache, far below 128 MB
    assert growth < 64 * 2**20, f"peak grew by {growth / 2**20:.0f} MiB copying 128 MB"


READ_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import oocarr

    def rss_file():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssFile:"):
                    return int(line.split()[1]) * 1024

    path = sys.argv[1]
    np.save(path, np.zeros((2048, 8192), "f4"))          # 64 MiB
    store = oocarr.open(path).store.with_pages((128, 8192))
    before = rss_file()
    total = 0.0
    buffer = np.empty((128, 8192), "f4")
    for index in store.block_grid():
        total += float(store.read_block(index, out=buffer).sum())
    print(json.dumps({"growth": rss_file() - before, "total": total}))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_memmap_reads_do_not_keep_file_pages_resident(tmp_path):
    report = run_script(READ_SCRIPT, str(tmp_path / "big.npy"))
    assert report["total"] == 0.0
    assert report["growth"] < 16 * 2**20, f"file pages resident: {report['growth'] / 2**20} MiB"
