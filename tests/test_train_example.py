"""scripts/train_hdf5.py end to end at a small size: both models train from the HDF5 file and
their checkpoint reloads identical."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "train_hdf5.py"


def test_the_training_example_runs_and_beats_the_majority_class(tmp_path):
    args = ["--rows", "40000", "--features", "8", "--budget", "1MB", "--workdir", str(tmp_path)]
    args += ["--lbfgs-steps", "4", "--epochs", "1", "--batch-size", "512"]
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "reloaded identical" in out
    assert "x the 1 MB budget" in out
    with h5py.File(tmp_path / "train.h5", "r") as f:
        majority = max(np.mean(f["test/y"][:]), 1 - np.mean(f["test/y"][:]))
    held_out = [float(a) for a in re.findall(r"held out (0\.\d+)", out)]
    assert len(held_out) == 2 and min(held_out) > majority + 0.05, out
