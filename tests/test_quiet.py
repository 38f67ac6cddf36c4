"""Normal use prints no deprecation warning: the command and the Python API run, in fresh
processes with ``DeprecationWarning`` as an error, over a sharded Zarr v3 array (whose shard
index carries a CRC32C checksum: numcodecs' deprecated ``crc32c`` path warned on every command
that read one) and an HDF5 file, both written by zarr-python and h5py."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import h5py
import numpy as np
import pytest
import zarr

CONSOLE_SCRIPT = pathlib.Path(sys.executable).parent / "oocarr"
DATA = np.arange(64 * 48, dtype="f4").reshape(64, 48)


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("quiet")
    z = zarr.create_array(
        str(root / "sharded.zarr"), shape=DATA.shape, chunks=(16, 16), shards=(32, 48), dtype="f4"
    )
    z[:] = DATA
    with h5py.File(root / "data.h5", "w") as f:
        f.create_dataset("x", data=DATA, chunks=(16, 48))
    return root


def _quiet_env() -> dict[str, str]:
    return {**os.environ, "PYTHONWARNINGS": "error::DeprecationWarning"}


def _assert_quiet(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, done.stderr
    assert "deprecat" not in (done.stdout + done.stderr).lower(), done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("inspect", "{root}/sharded.zarr"),
        ("inspect", "{root}/data.h5#/x"),
        ("ls", "{root}/data.h5"),
        ("convert", "{root}/sharded.zarr", "{root}/out.h5#/x"),
        ("convert", "{root}/data.h5#/x", "{root}/out.zarr"),
    ],
)
def test_each_command_prints_no_deprecation_warning(stored, args):
    assert CONSOLE_SCRIPT.exists(), f"install oocarr (pip install -e .) to get {CONSOLE_SCRIPT}"
    argv = [a.format(root=stored) for a in args]
    done = subprocess.run(
        [str(CONSOLE_SCRIPT), *argv], capture_output=True, text=True, env=_quiet_env()
    )
    _assert_quiet(done)


def test_the_python_api_prints_no_deprecation_warning(stored):
    program = f"""
import jax, numpy as np, oocarr
x = oocarr.open({str(stored / "sharded.zarr")!r})
h = oocarr.open({str(stored / "data.h5")!r} + "#/x")
assert float(oocarr.sum(x)) == float(oocarr.sum(h)) == {float(DATA.sum())!r}
oocarr.save(oocarr.exp(x * 0.0), {str(stored / "api_out.zarr")!r})
grad = jax.grad(lambda w: oocarr.sum(oocarr.square(h @ w)))(np.ones(48, "f4"))
assert grad.shape == (48,)
"""
    done = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", program],
        capture_output=True,
        text=True,
        env=_quiet_env(),
    )
    _assert_quiet(done)
    written = zarr.open_array(str(stored / "api_out.zarr"), mode="r")
    np.testing.assert_array_equal(written[:], np.ones_like(DATA))
