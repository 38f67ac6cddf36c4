"""``xr.open_dataset(path, engine="oocarr")`` against xarray's own engines (netcdf4, h5netcdf,
zarr) on files written by netCDF4-python, h5netcdf and zarr-python: the same variables, dims,
coordinates, attributes and decoded values, with the data variables ``DiskArray``\\ s that
nothing reads at open and whose reductions stream."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import oocarr
from oocarr import errors

xr = pytest.importorskip("xarray")

from subprocess_rss import run_script  # noqa: E402

T, Y, X = 24, 10, 12
FLOAT = np.dtype(jax.dtypes.canonicalize_dtype(np.float64))  # float32 without jax_enable_x64

NETCDF4_WRITER = """
import pickle, sys
import numpy as np, netCDF4, xarray as xr
path = sys.argv[1]
rng = np.random.default_rng(0)
T, Y, X = 24, 10, 12
with netCDF4.Dataset(path, "w") as ds:
    ds.title = "oocarr backend test"
    ds.version = 1.5
    ds.Conventions = "CF-1.8"
    for name, n in (("time", T), ("lat", Y), ("lon", X), ("nv", 2)):
        ds.createDimension(name, n)
    time = ds.createVariable("time", "f8", ("time",))
    time.units, time.calendar = "hours since 2000-01-01", "standard"
    time[:] = np.arange(T) * 6.0
    lat = ds.createVariable("lat", "f4", ("lat",))
    lat.units = "degrees_north"
    lat[:] = np.linspace(-45, 45, Y)
    ds.createVariable("lon", "f4", ("lon",))[:] = np.linspace(0, 330, X)
    t2m = ds.createVariable("t2m", "i2", ("time", "lat", "lon"), fill_value=np.int16(-32767),
                            zlib=True, chunksizes=(6, 5, 6))
    t2m.set_auto_maskandscale(False)
    t2m.scale_factor, t2m.add_offset = np.float32(0.01), np.float32(273.15)
    t2m.units, t2m.long_name = "K", "2 m temperature"
    raw = rng.integers(-3000, 3000, (T, Y, X)).astype("i2")
    raw[rng.random((T, Y, X)) < 0.1] = -32767
    t2m[:] = raw
    precip = ds.createVariable("precip", "f4", ("time", "lat", "lon"), fill_value=np.float32(-999))
    precip.set_auto_maskandscale(False)
    values = rng.random((T, Y, X)).astype("f4")
    values[rng.random((T, Y, X)) < 0.1] = -999
    precip[:] = values
    counts = ds.createVariable("counts", "i4", ("time", "lat"))
    counts.missing_value = np.int32(-1)
    counts[:] = rng.integers(-1, 9, (T, Y)).astype("i4")
    flag = ds.createVariable("flag", "i1", ("lat", "lon"))
    flag.set_auto_maskandscale(False)
    flag._Unsigned = "true"
    flag[:] = rng.integers(-128, 128, (Y, X)).astype("i1")
    ds.createVariable("time_bnds", "f8", ("time", "nv"))[:] = np.stack(
        [np.arange(T) * 6.0, np.arange(T) * 6.0 + 6], axis=1)
    fc = ds.createGroup("forecast")
    fc.model = "persistence"
    v = fc.createVariable("t2m", "f4", ("time", "lat", "lon"))
    v.units = "K"
    v[:] = rng.random((T, Y, X)).astype("f4") * 30 + 260
reads = {
    "root": xr.open_dataset(path, engine="netcdf4").load(),
    "group": xr.open_dataset(path, engine="netcdf4", group="forecast").load(),
    "raw": xr.open_dataset(path, engine="netcdf4", mask_and_scale=False).load(),
    "dropped": xr.open_dataset(path, engine="netcdf4", drop_variables=["precip"]).load(),
    "no_times": xr.open_dataset(path, engine="netcdf4", decode_times=False).load(),
}
with open(path + ".pickle", "wb") as f:
    pickle.dump(reads, f)
"""


@pytest.fixture(scope="module")
def netcdf4_file(tmp_path_factory):
    """A netCDF-4 file written by netCDF4-python, and its netcdf4-engine reads; netCDF4-python
    bundles its own HDF5 library, so it runs apart from this process's h5py."""
    pytest.importorskip("netCDF4")
    path = str(tmp_path_factory.mktemp("nc") / "data.nc")
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(NETCDF4_WRITER), path],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    with open(path + ".pickle", "rb") as f:
        return path, pickle.load(f)


def _values(data) -> np.ndarray:
    return np.asarray(oocarr.to_numpy(data) if isinstance(data, oocarr.DiskArray) else data)


def assert_same_dataset(ours, theirs, rtol=1e-6):
    """Variables, dims, coords, attrs and values as xarray's engine gives them; a decoded
    ``float64`` is oocarr's float (``float32`` without ``jax_enable_x64``)."""
    assert set(ours.variables) == set(theirs.variables)
    assert dict(ours.sizes) == dict(theirs.sizes)
    assert set(ours.coords) == set(theirs.coords)
    np.testing.assert_equal(ours.attrs, theirs.attrs)
    for name, want in theirs.variables.items():
        got = ours.variables[name]
        assert got.dims == want.dims, name
        np.testing.assert_equal(got.attrs, want.attrs, err_msg=str(name))
        dtype = FLOAT if want.dtype == np.float64 and got.dtype != np.float64 else want.dtype
        assert got.dtype == dtype, (name, got.dtype, want.dtype)
        if want.dtype.kind in "fc":
            np.testing.assert_allclose(
                _values(got.data), want.values, rtol=rtol, equal_nan=True, err_msg=str(name)
            )
        else:
            np.testing.assert_array_equal(_values(got.data), want.values, err_msg=str(name))


# ----------------------------------------------------------------------------
# netCDF-4 written by netCDF4-python, against the netcdf4 engine
# ----------------------------------------------------------------------------
def test_netcdf4_file_opens_as_the_netcdf4_engine_opens_it(netcdf4_file):
    path, reads = netcdf4_file
    ds = xr.open_dataset(path, engine="oocarr")
    assert_same_dataset(ds, reads["root"])
    for name in ("t2m", "precip", "counts", "flag", "time_bnds"):
        assert isinstance(ds[name].data, oocarr.DiskArray), name
    assert ds["t2m"].dtype == np.float32  # packed int16 with float32 scale_factor
    assert np.isnan(_values(ds["t2m"].data)).any() and np.isnan(_values(ds["precip"].data)).any()
    assert ds["flag"].dtype == np.uint8
    assert ds["time"].dtype.kind == "M"  # decoded times, an index in memory
    assert ds["t2m"].encoding["scale_factor"] == np.float32(0.01)
    assert ds["t2m"].encoding["dtype"] == np.int16


def test_group_drop_variables_and_mask_and_scale_false(netcdf4_file):
    path, reads = netcdf4_file
    group = xr.open_dataset(path, engine="oocarr", group="forecast")
    assert_same_dataset(group, reads["group"])
    assert isinstance(group["t2m"].data, oocarr.DiskArray)
    by_url = xr.open_dataset(path + "#/forecast", engine="oocarr")
    assert_same_dataset(by_url, reads["group"])
    assert_same_dataset(
        xr.open_dataset(path, engine="oocarr", drop_variables=["precip"]), reads["dropped"]
    )
    raw = xr.open_dataset(path, engine="oocarr", mask_and_scale=False)
    assert_same_dataset(raw, reads["raw"])
    assert raw["t2m"].dtype == np.int16 and isinstance(raw["t2m"].data, oocarr.DiskArray)
    assert_same_dataset(
        xr.open_dataset(path, engine="oocarr", decode_times=False), reads["no_times"]
    )


def test_nothing_is_read_at_open_but_the_dimension_coordinates(netcdf4_file):
    path, reads = netcdf4_file
    with oocarr.io_stats() as stats:
        ds = xr.open_dataset(path, engine="oocarr")
        assert isinstance(ds["t2m"].data, oocarr.DiskArray)
    coords = sum(reads["raw"][c].values.nbytes for c in ("time", "lat", "lon"))
    assert stats.total.bytes_read <= coords


def test_reductions_and_arithmetic_equal_the_netcdf4_engines(netcdf4_file):
    path, reads = netcdf4_file
    want = reads["root"]
    ds = xr.open_dataset(path, engine="oocarr")
    with oocarr.memory_budget("64KB"):
        mean = ds["t2m"].mean("time")
        std = ds["t2m"].std("time")
        expr = (ds["t2m"] - 273.15) * 2 + ds["precip"]
        total = expr.mean()
    assert isinstance(mean.data, oocarr.DiskArray) and isinstance(expr.data, oocarr.DiskArray)
    np.testing.assert_allclose(_values(mean.data), want["t2m"].mean("time").values, rtol=1e-5)
    np.testing.assert_allclose(_values(std.data), want["t2m"].std("time").values, rtol=1e-4)
    expected = (want["t2m"] - 273.15) * 2 + want["precip"]
    np.testing.assert_allclose(_values(expr.data), expected.values, rtol=1e-5, equal_nan=True)
    np.testing.assert_allclose(float(_values(total.data)), float(expected.mean()), rtol=1e-5)
    counts = ds["counts"].std("lat", ddof=1)
    np.testing.assert_allclose(
        _values(counts.data), want["counts"].std("lat", ddof=1).values, rtol=1e-5
    )


def test_batches_yield_the_decoded_rows_after_the_dataset_is_closed(netcdf4_file):
    path, reads = netcdf4_file
    with xr.open_dataset(path, engine="oocarr") as ds:
        pass  # closing releases the files; a later read reopens them
    rows = [np.asarray(b) for (b,) in oocarr.batches(ds["t2m"].data, batch_size=5)]
    assert [len(r) for r in rows] == [5, 5, 5, 5, 4]
    np.testing.assert_allclose(
        np.concatenate(rows), reads["root"]["t2m"].values, rtol=1e-6, equal_nan=True
    )


# ----------------------------------------------------------------------------
# h5netcdf and Zarr (v2 and v3), against their own engines
# ----------------------------------------------------------------------------
def _source_dataset() -> xr.Dataset:
    rng = np.random.default_rng(1)
    temp = (rng.random((T, Y, X)) * 30 + 260).astype("f4")
    temp[0, 0, :3] = np.nan
    return xr.Dataset(
        {
            "temp": (("time", "lat", "lon"), temp, {"units": "K"}),
            "rain": (("time", "lat"), rng.random((T, Y)).astype("f4")),
        },
        coords={
            "time": ("time", np.arange(T, dtype="f8"), {"units": "hours since 2000-01-01"}),
            "lat": ("lat", np.linspace(-45, 45, Y).astype("f4"), {"units": "degrees_north"}),
            "lon": ("lon", np.linspace(0, 330, X).astype("f4")),
        },
        attrs={"title": "written by xarray", "answer": 42},
    )


PACKED = {
    "temp": {"dtype": "int16", "scale_factor": 0.01, "add_offset": 270.0, "_FillValue": -999},
    "rain": {"_FillValue": np.float32(-1.0)},
}


def test_h5netcdf_file_opens_as_the_h5netcdf_engine_opens_it(tmp_path):
    pytest.importorskip("h5netcdf")
    path = str(tmp_path / "h5.nc")
    _source_dataset().to_netcdf(path, engine="h5netcdf", encoding=PACKED)
    theirs = xr.open_dataset(path, engine="h5netcdf").load()
    ours = xr.open_dataset(path, engine="oocarr")
    assert_same_dataset(ours, theirs, rtol=1e-5)
    assert isinstance(ours["temp"].data, oocarr.DiskArray)
    assert np.isnan(_values(ours["temp"].data)[0, 0, :3]).all()


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_to_zarr_store_opens_as_the_zarr_engine_opens_it(tmp_path, zarr_format):
    pytest.importorskip("zarr")
    path = str(tmp_path / f"v{zarr_format}.zarr")
    _source_dataset().to_zarr(path, zarr_format=zarr_format, encoding=PACKED, consolidated=False)
    theirs = xr.open_dataset(path, engine="zarr", consolidated=False).load()
    with oocarr.io_stats() as stats:
        ours = xr.open_dataset(path, engine="oocarr")
    assert stats.total.bytes_read <= sum(theirs[c].values.nbytes for c in ("time", "lat", "lon"))
    assert_same_dataset(ours, theirs, rtol=1e-5)
    assert isinstance(ours["temp"].data, oocarr.DiskArray)
    np.testing.assert_allclose(
        _values(ours["temp"].mean("lat").data), theirs["temp"].mean("lat").values, rtol=1e-5
    )


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_plain_zarr_arrays_with_dimension_names(tmp_path, zarr_format):
    zarr = pytest.importorskip("zarr")
    path = str(tmp_path / f"plain{zarr_format}.zarr")
    root = zarr.open_group(path, mode="w", zarr_format=zarr_format)
    root.attrs["source"] = "zarr-python"
    sub = root.create_group("run")
    sub.attrs["n"] = 3
    data = np.arange(T * Y, dtype="f4").reshape(T, Y)
    names = {"dimension_names": ["time", "lat"]} if zarr_format == 3 else {}
    x = sub.create_array("x", shape=(T, Y), dtype="f4", chunks=(8, 5), fill_value=-1.0, **names)
    x[...] = data
    x.attrs["units"] = "m"
    if zarr_format == 2:
        x.attrs["_ARRAY_DIMENSIONS"] = ["time", "lat"]
    if zarr_format == 2:
        zarr.consolidate_metadata(path)
    consolidated = zarr_format == 2
    theirs = xr.open_dataset(path, engine="zarr", group="run", consolidated=consolidated).load()
    ours = xr.open_dataset(path, engine="oocarr", group="run")
    assert_same_dataset(ours, theirs)
    assert isinstance(ours["x"].data, oocarr.DiskArray)
    assert ours.attrs == {"n": 3} and xr.open_dataset(path, engine="oocarr").attrs == {
        "source": "zarr-python"
    }


def test_big_endian_and_unnamed_axes_read_as_h5netcdf_reads_them(tmp_path):
    import h5py

    pytest.importorskip("h5netcdf")
    path = str(tmp_path / "plain.h5")
    with h5py.File(path, "w") as f:
        f["a"] = np.arange(12, dtype=">i2").reshape(3, 4)
        f["a"].attrs["scale_factor"] = np.float32(0.5)
        f["b"] = np.arange(4, dtype="<f8")
    theirs = xr.open_dataset(path, engine="h5netcdf", phony_dims="sort").load()
    ours = xr.open_dataset(path, engine="oocarr")
    assert ours["a"].dims == ("phony_dim_0", "phony_dim_1") and ours["b"].dims == ("phony_dim_1",)
    for name in ("a", "b"):
        np.testing.assert_array_equal(np.asarray(ours[name]), theirs[name].values)
    assert isinstance(ours["b"].data, oocarr.DiskArray)  # a (big-endian) is xarray's to decode


# ----------------------------------------------------------------------------
# Memory, errors, the entry point
# ----------------------------------------------------------------------------
MEMORY_SCRIPT = """
import json, sys
import numpy as np, xarray as xr, oocarr
ds = xr.open_dataset(sys.argv[1], engine="oocarr")
rows = ds["x"].dims[0]
with oocarr.memory_budget(4 * 2**20):
    np.asarray(ds["x"].mean(rows).data)  # compiles what the measured run uses
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    baseline = peak_rss()
    mean = np.asarray(ds["x"].mean(rows).data)
    growth = peak_rss() - baseline
print(json.dumps({"growth": growth, "first": float(mean[0])}))
"""


def test_a_mean_over_a_variable_larger_than_the_budget_stays_bounded(tmp_path):
    import h5py

    path = str(tmp_path / "big.nc")
    rows, cols = 1024, 8192  # 16 MiB of int16, 32 MiB decoded
    with h5py.File(path, "w") as f:
        x = f.create_dataset("x", (rows, cols), "i2", chunks=(128, cols))
        for start in range(0, rows, 256):
            x[start : start + 256] = np.arange(start, start + 256, dtype="i2")[:, None] % 100
        x.attrs["scale_factor"] = np.float32(0.5)
    out = run_script(MEMORY_SCRIPT, path)
    assert out["first"] == pytest.approx(np.mean(np.arange(rows) % 100) * 0.5)
    assert out["growth"] < 12 * 2**20, out


def test_bad_inputs_get_errors_naming_the_input_and_the_fix(tmp_path, netcdf4_file):
    path, _ = netcdf4_file
    with pytest.raises(errors.NotFoundError, match=r"no group /nope .*group="):
        xr.open_dataset(path, engine="oocarr", group="nope")
    text = tmp_path / "notes.nc"
    text.write_text("not a dataset\n")
    with pytest.raises(errors.InvalidStoreError, match=r"notes\.nc.*netCDF-4/HDF5 files and Zarr"):
        xr.open_dataset(str(text), engine="oocarr")
    other = tmp_path / "table.csv"
    other.write_text("a,b\n")
    with pytest.raises(errors.UnknownDriverError, match=r"table\.csv.*driver="):
        xr.open_dataset(str(other), engine="oocarr")
    with pytest.raises(errors.InvalidArgumentError, match=r"is an array, not a group"):
        xr.open_dataset(path, engine="oocarr", group="t2m")
    with pytest.raises(errors.NotFoundError, match="missing"):
        xr.open_dataset(str(tmp_path / "missing.zarr"), engine="oocarr")


def test_the_engine_is_registered_and_claims_only_oocarr_urls():
    engine = xr.backends.list_engines()["oocarr"]
    assert "group" in engine.open_dataset_parameters and engine.description
    assert not engine.guess_can_open("data.nc") and not engine.guess_can_open("a.zarr")
    assert engine.guess_can_open("data.nc#/forecast")
