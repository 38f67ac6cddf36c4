"""HDF5 files users already have (issue 15, items 4-6, first part): every hdf5plugin filter
without the user importing hdf5plugin, netCDF-4 and AnnData files by their own suffixes, a clear
error for netCDF-3, and ``convert --verify`` of every dtype (bfloat16 included).

Files are written by the tools that make them (h5py with hdf5plugin, netCDF4-python, SciPy's
netCDF-3 writer) and read back against NumPy's copy of the data.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import h5py
import hdf5plugin
import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner

import oocarr
from oocarr import errors
from oocarr.cli.main import main

DATA = (np.arange(40_000, dtype="f4").reshape(400, 100) % 97) * 0.5

FILTERS = {
    "blosc-lz4": (hdf5plugin.Blosc(cname="lz4", shuffle=hdf5plugin.Blosc.SHUFFLE), "blosc"),
    "blosc-zstd": (hdf5plugin.Blosc(cname="zstd", clevel=5), "blosc"),
    "blosc2": (hdf5plugin.Blosc2(cname="lz4"), "blosc2"),
    "lz4": (hdf5plugin.LZ4(), "lz4"),
    "zstd": (hdf5plugin.Zstd(clevel=3), "zstd"),
    "bitshuffle": (hdf5plugin.Bitshuffle(), "bitshuffle"),
    "bzip2": (hdf5plugin.BZip2(), "bzip2"),
}


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter, which imports oocarr but never hdf5plugin itself."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture(scope="module")
def plugin_file(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("plugins") / "filters.h5")
    with h5py.File(path, "w") as f:
        for name, (options, _) in FILTERS.items():
            f.create_dataset(name, data=DATA, chunks=(100, 50), **options)
    np.save(path + ".expected.npy", DATA)
    return path


def test_every_plugin_filter_reads_without_importing_hdf5plugin(plugin_file):
    result = _run(
        """
        import json, sys
        import numpy as np, oocarr
        path = sys.argv[1]
        want = np.load(path + ".expected.npy")
        out = {}
        for name in sys.argv[2:]:
            x = oocarr.open(f"{path}#/{name}")
            whole = oocarr.to_numpy(x)
            part = np.asarray(x.store[37:251, 13:77])
            with oocarr.memory_budget("2MB"):
                total = float(oocarr.sum(x))
            out[name] = [
                bool(np.array_equal(whole, want)),
                bool(np.array_equal(part, want[37:251, 13:77])),
                total,
                x.store.compression,
            ]
        print(json.dumps(out))
        """,
        plugin_file,
        *FILTERS,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    for name, (_, label) in FILTERS.items():
        whole, part, total, compression = out[name]
        assert whole and part, name
        assert total == pytest.approx(float(DATA.astype(np.float64).sum()), rel=1e-6)
        assert compression == label, name


def _cli(*args: str) -> subprocess.CompletedProcess:
    """The ``oocarr`` command in a fresh interpreter (which never imports hdf5plugin itself)."""
    return _run(
        "import sys; from oocarr.cli.main import main; sys.argv[0] = 'oocarr'; main()", *args
    )


def test_the_cli_inspects_and_converts_plugin_filtered_datasets(plugin_file, tmp_path):
    for name, (_, label) in FILTERS.items():
        result = _cli("inspect", "--json", "--stats", f"{plugin_file}#/{name}")
        assert result.returncode == 0, result.stderr
        info = json.loads(result.stdout)
        assert info["compression"] == label
        assert info["stats"]["max"] == float(DATA.max())
    out = str(tmp_path / "lz4.zarr")
    result = _cli("convert", "-q", "--verify", f"{plugin_file}#/lz4", out)
    assert result.returncode == 0, result.stderr
    np.testing.assert_array_equal(oocarr.to_numpy(oocarr.open(out)), DATA)


def test_netcdf4_file_opens_by_its_suffix(tmp_path):
    pytest.importorskip("netCDF4")
    path = str(tmp_path / "climate.nc")
    # netCDF4-python bundles its own HDF5 library: it writes in a process of its own
    result = _run(
        """
        import sys, numpy as np, netCDF4
        with netCDF4.Dataset(sys.argv[1], "w") as ds:
            ds.createDimension("time", 30)
            ds.createDimension("lat", 20)
            v = ds.createVariable("t2m", "f4", ("time", "lat"), zlib=True, complevel=4)
            v[:] = np.arange(600, dtype="f4").reshape(30, 20)
        """,
        path,
    )
    assert result.returncode == 0, result.stderr
    x = oocarr.open(path + "#/t2m")
    assert x.store.name == "hdf5"
    np.testing.assert_array_equal(oocarr.to_numpy(x), np.arange(600, dtype="f4").reshape(30, 20))


@pytest.mark.parametrize("suffix", [".h5ad", ".nc4", ".he5", ".hdf"])
def test_other_hdf5_suffixes_open_with_the_hdf5_driver(tmp_path, suffix):
    path = str(tmp_path / f"data{suffix}")
    with h5py.File(path, "w") as f:
        f.create_dataset("X", data=DATA[:10])
    x = oocarr.open(path + "#/X")
    assert x.store.name == "hdf5"
    np.testing.assert_array_equal(oocarr.to_numpy(x), DATA[:10])


def test_a_netcdf3_file_gets_an_error_saying_so(tmp_path):
    netcdf = pytest.importorskip("scipy.io").netcdf_file
    path = str(tmp_path / "old.nc")
    with netcdf(path, "w") as f:
        f.createDimension("x", 4)
        f.createVariable("v", "f4", ("x",))[:] = np.arange(4, dtype="f4")
    with pytest.raises(errors.InvalidStoreError, match="netCDF-3"):
        oocarr.open(path + "#/v")
    result = CliRunner().invoke(main, ["inspect", path + "#/v"])
    assert result.exit_code == 2 and "netCDF-3" in result.output


def test_convert_verify_works_for_bfloat16(tmp_path):
    src, dst = str(tmp_path / "a.zarr"), str(tmp_path / "b.zarr")
    values = (np.arange(1000) / 7).astype(ml_dtypes.bfloat16)
    oocarr.save(values, src, chunks=(300,))
    result = CliRunner().invoke(main, ["convert", "-q", "--verify", src, dst])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    got = oocarr.to_numpy(oocarr.open(dst))
    np.testing.assert_array_equal(got.view(np.uint16), values.view(np.uint16))
