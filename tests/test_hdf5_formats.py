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


# ----------------------------------------------------------------------
# The corpus: files written by the tools that make them, each compared bit for bit with the
# writing tool's own read through open, region reads, inspect --json --stats and convert
# ----------------------------------------------------------------------
GRID = np.add.outer(np.arange(120.0), np.arange(90.0)).astype("f4") % 37 * 0.25


def _write_in_child(code: str, path: str) -> dict[str, np.ndarray]:
    """Run ``code`` (which writes ``sys.argv[1]`` and saves the tool's own read of each array
    with ``np.savez(sys.argv[1] + ".npz", ...)``) in a fresh interpreter; those reads.

    netCDF4-python and PyTables bundle HDF5 libraries of their own, so they run apart from
    this process's h5py.
    """
    result = _run(code, path)
    assert result.returncode == 0, result.stderr
    with np.load(path + ".npz") as saved:
        return dict(saved)


def _inspect(url: str) -> dict:
    result = CliRunner().invoke(main, ["inspect", "--json", "--stats", url])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _convert(src: str, dst: str) -> None:
    result = CliRunner().invoke(main, ["convert", "-q", src, dst])
    assert result.exit_code == 0, result.output


def _check_corpus(url: str, want: np.ndarray, tmp_path, dims: tuple | None = None) -> None:
    """``url`` read, inspected and converted as ``want`` (the writing tool's read)."""
    x = oocarr.open(url)
    assert x.store.name == "hdf5"
    assert (x.shape, x.dtype) == (want.shape, want.dtype)
    assert np.asarray(x.store[...]).tobytes() == want.tobytes()
    a, b = want.shape[0] // 3, want.shape[0] - 1
    if want.ndim == 2:
        c, d = 7, want.shape[1] - 2
        assert np.asarray(x.store[a:b, c:d]).tobytes() == want[a:b, c:d].tobytes()
    else:
        assert np.asarray(x.store[a:b]).tobytes() == want[a:b].tobytes()
    assert x.store.dimension_names == dims
    info = _inspect(url)
    assert info["shape"] == list(want.shape) and info["dtype"] == str(want.dtype)
    assert info["dimension_names"] == (None if dims is None else list(dims))
    stats = info["stats"]
    assert (stats["min"], stats["max"]) == (float(want.min()), float(want.max()))
    assert stats["mean"] == pytest.approx(float(want.astype(np.float64).mean()))

    tmp_path.mkdir(parents=True, exist_ok=True)
    h5 = str(tmp_path / "converted.h5")
    _convert(url, h5 + "#/x")
    with h5py.File(h5) as f:
        assert f["x"][...].tobytes() == want.tobytes()
        labels = tuple(d.label or None for d in f["x"].dims)
    assert labels == (dims or (None,) * want.ndim)
    zarr = pytest.importorskip("zarr")
    zpath = str(tmp_path / "converted.zarr")
    _convert(url, zpath)
    z = zarr.open_array(zpath, mode="r")
    assert z[...].tobytes() == want.tobytes()
    assert z.metadata.dimension_names == dims


@pytest.mark.parametrize("engine", ["netcdf4", "h5netcdf"])
def test_xarray_to_netcdf_files_read_as_xarray_reads_them(tmp_path, engine):
    pytest.importorskip("xarray")
    pytest.importorskip({"netcdf4": "netCDF4"}.get(engine, engine))
    path = str(tmp_path / f"xr-{engine}.nc")
    want = _write_in_child(
        f"""
        import sys, numpy as np, xarray as xr
        path = sys.argv[1]
        grid = np.add.outer(np.arange(120.0), np.arange(90.0)).astype("f4") % 37 * 0.25
        ds = xr.Dataset(
            {{"t2m": (("time", "x"), grid), "n": (("x",), np.arange(90, dtype="i2"))}},
            coords={{"time": np.arange(120.0)}},
        )
        ds.to_netcdf(path, engine="{engine}", encoding={{"t2m": {{"zlib": True}}}})
        with xr.open_dataset(path, engine="{engine}", mask_and_scale=False) as back:
            np.savez(path + ".npz", t2m=back["t2m"].values, n=back["n"].values)
        """,
        path,
    )
    np.testing.assert_array_equal(want["t2m"], GRID)
    _check_corpus(path + "#/t2m", want["t2m"], tmp_path / "t2m", ("time", "x"))
    assert oocarr.open(path + "#/t2m").store.compression == "gzip:4"
    _check_corpus(path + "#/n", want["n"], tmp_path / "n", ("x",))


@pytest.mark.parametrize("compression", ["zlib", "zstd"])
def test_netcdf4_python_files_read_as_netcdf4_reads_them(tmp_path, compression):
    netcdf4 = pytest.importorskip("netCDF4")
    if compression == "zstd" and not getattr(netcdf4, "__has_zstandard_support__", False):
        pytest.skip("this netCDF4 build has no zstd filter")
    path = str(tmp_path / f"{compression}.nc")
    want = _write_in_child(
        f"""
        import sys, numpy as np, netCDF4
        path = sys.argv[1]
        grid = np.add.outer(np.arange(120.0), np.arange(90.0)).astype("f4") % 37 * 0.25
        with netCDF4.Dataset(path, "w") as ds:
            ds.createDimension("time", 120)
            ds.createDimension("x", 90)
            v = ds.createVariable("t2m", "f4", ("time", "x"), compression="{compression}",
                                  complevel=4, chunksizes=(32, 45))
            v[:] = grid
        with netCDF4.Dataset(path) as ds:
            ds.set_auto_maskandscale(False)
            np.savez(path + ".npz", t2m=ds["t2m"][:])
        """,
        path,
    )
    _check_corpus(path + "#/t2m", want["t2m"], tmp_path, ("time", "x"))
    assert oocarr.open(path + "#/t2m").store.compression == (
        "gzip:4" if compression == "zlib" else "zstd"
    )


@pytest.fixture(scope="module")
def h5ad(tmp_path_factory):
    anndata = pytest.importorskip("anndata")
    scipy_sparse = pytest.importorskip("scipy.sparse")
    rng = np.random.default_rng(3)
    folder = tmp_path_factory.mktemp("h5ad")
    dense = str(folder / "dense.h5ad")
    adata = anndata.AnnData(
        X=rng.standard_normal((150, 40)).astype("f4"),
        obsm={"X_pca": rng.standard_normal((150, 10)).astype("f4")},
        layers={"counts": rng.poisson(3.0, (150, 40)).astype("i8")},
    )
    adata.write_h5ad(dense, compression="gzip")
    sparse = str(folder / "sparse.h5ad")
    csr = scipy_sparse.random(150, 40, density=0.1, format="csr", dtype="f4", random_state=1)
    anndata.AnnData(X=csr).write_h5ad(sparse)
    back = anndata.read_h5ad(dense)
    reads = {"X": back.X, "obsm/X_pca": back.obsm["X_pca"], "layers/counts": back.layers["counts"]}
    return dense, sparse, reads


@pytest.mark.parametrize("inner", ["X", "obsm/X_pca", "layers/counts"])
def test_anndata_dense_arrays_read_as_anndata_reads_them(h5ad, tmp_path, inner):
    dense, _, reads = h5ad
    _check_corpus(f"{dense}#/{inner}", np.asarray(reads[inner]), tmp_path)


def test_a_sparse_anndata_x_gets_an_error_naming_its_datasets(h5ad):
    _, sparse, _ = h5ad
    with pytest.raises(errors.OocarrError, match="/X/data.*/X/indices.*/X/indptr"):
        oocarr.open(sparse + "#/X")
    result = CliRunner().invoke(main, ["inspect", sparse + "#/X"])
    assert result.exit_code != 0 and "/X/indptr" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("complib", ["blosc:lz4", "zlib"])
def test_pytables_carrays_read_as_pytables_reads_them(tmp_path, complib):
    pytest.importorskip("tables")
    path = str(tmp_path / "carray.h5")
    want = _write_in_child(
        f"""
        import sys, numpy as np, tables
        path = sys.argv[1]
        grid = np.add.outer(np.arange(120.0), np.arange(90.0)).astype("f4") % 37 * 0.25
        filters = tables.Filters(complib="{complib}", complevel=5)
        with tables.open_file(path, "w") as f:
            f.create_carray("/", "x", obj=grid, filters=filters, chunkshape=(32, 45))
        with tables.open_file(path) as f:
            np.savez(path + ".npz", x=f.root.x[:])
        """,
        path,
    )
    _check_corpus(path + "#/x", want["x"], tmp_path)
    assert oocarr.open(path + "#/x").store.compression == complib.split(":")[0].replace(
        "zlib", "gzip:5"
    )


def test_save_keeps_a_netcdf_variables_dimension_names(tmp_path):
    xr = pytest.importorskip("xarray")
    pytest.importorskip("h5netcdf")
    src, dst = str(tmp_path / "in.nc"), str(tmp_path / "out.h5")
    xr.Dataset({"var": (("time", "x"), GRID)}).to_netcdf(src, engine="h5netcdf")
    oocarr.save(oocarr.open(src + "#/var"), dst + "#/v")
    with h5py.File(dst) as f:
        assert [d.label for d in f["v"].dims] == ["time", "x"]
        np.testing.assert_array_equal(f["v"][...], GRID)


def test_dimension_names_are_written_as_hdf5_labels(tmp_path):
    path = str(tmp_path / "new.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("old", data=GRID)
    with oocarr.create(path + "#/new", GRID.shape, "f4").store as store:  # pending
        store.set_dimension_names(("y", None))
        store.write_region((slice(0, 120), slice(0, 90)), GRID)
    store = oocarr.open(path + "#/old", mode="r+").store
    store.set_dimension_names(("a", "b"))
    store.set_attrs({"units": "K"})  # replacing the attributes keeps the labels
    store.close()
    with h5py.File(path) as f:
        assert [d.label for d in f["new"].dims] == ["y", ""]
        assert [d.label for d in f["old"].dims] == ["a", "b"]
        assert sorted(f["old"].attrs) == ["DIMENSION_LABELS", "units"]
    assert oocarr.open(path + "#/old").store.attrs == {"units": "K"}
