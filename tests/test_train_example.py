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


def test_a_killed_run_resumed_from_its_checkpoint_ends_as_an_uninterrupted_one(tmp_path):
    """Killed (SIGKILL) between two checkpoints in the second epoch, then resumed: the same
    final epoch loss and bitwise the same parameters as a run that was never stopped (the
    oracle: that run)."""
    import jax

    import oocarr

    common = ["--mlp-only", "--rows", "24000", "--features", "8", "--budget", "1MB"]
    common += ["--epochs", "2", "--batch-size", "512", "--checkpoint-every", "10"]

    def run(workdir, *extra):
        return subprocess.run(
            [sys.executable, str(SCRIPT), *common, "--workdir", str(workdir), *extra],
            capture_output=True,
            text=True,
            timeout=600,
        )

    whole = run(tmp_path / "whole", "--save-params", str(tmp_path / "whole.h5"))
    assert whole.returncode == 0, whole.stderr[-3000:]
    data = str(tmp_path / "whole" / "train.h5")
    killed = run(tmp_path / "killed", "--data", data, "--die-at-step", "55")  # epoch 2 of 42
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert "killed at step 55 (last checkpoint: step 50)" in killed.stdout
    resumed = run(
        tmp_path / "killed", "--data", data, "--resume", "--save-params", str(tmp_path / "r.h5")
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stdout and "step 50, epoch 2, batch 8" in resumed.stdout

    def final(out):
        return re.search(r"final epoch loss (\S+)", out).group(1)

    assert final(resumed.stdout) == final(whole.stdout)
    a, b = oocarr.load_params(tmp_path / "whole.h5"), oocarr.load_params(tmp_path / "r.h5")
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))
