"""Running a measurement script in a fresh Python process and reading its peak memory."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

#: Source of ``peak_rss()`` for scripts run in a child process.  VmHWM restarts at exec;
#: ``ru_maxrss`` would carry the parent's peak over fork and exec and hide all growth.
PEAK_RSS = textwrap.dedent(
    """
    def peak_rss():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    """
)


def run_script(script: str, *args: str) -> dict:
    """Run ``PEAK_RSS`` + ``script`` with ``args``; return the JSON its last line prints."""
    result = subprocess.run(
        [sys.executable, "-c", PEAK_RSS + textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def write_features_and_labels(
    driver: str, root, rows: int, cols: int, labels, scale: float = 1.0, shift: float = 0.0
) -> tuple[str, str]:
    """Write ``rows x cols`` float32 features (uniform, ``* scale + shift``), a slab at a time,
    and ``labels``, as ``.npy`` files (``driver="memmap"``) or datasets of one HDF5 file with
    2048-row chunks; returns their URLs."""
    import h5py
    import numpy as np

    rng = np.random.default_rng(0)
    step = 8192
    if driver == "memmap":
        x_url, y_url = str(root / "x.npy"), str(root / "y.npy")
        x = np.lib.format.open_memmap(x_url, mode="w+", dtype="f4", shape=(rows, cols))
        for start in range(0, rows, step):
            x[start : start + step] = rng.random((step, cols), dtype=np.float32) * scale + shift
            x.flush()
        del x
        np.save(y_url, labels)
        return x_url, y_url
    path = str(root / "data.h5")
    with h5py.File(path, "w") as f:
        x = f.create_dataset("x", (rows, cols), "f4", chunks=(2048, cols))
        for start in range(0, rows, step):
            x[start : start + step] = rng.random((step, cols), dtype=np.float32) * scale + shift
        f.create_dataset("y", data=labels, chunks=(65536, *labels.shape[1:]))
    return path + "#/x", path + "#/y"
