"""memmap driver specifics: NumPy's own reader as the oracle, raw files, and bad input."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

import oocarr
from oocarr import errors


def digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.mark.parametrize("dtype", ["bool", "uint8", ">f8", "<i4", "complex64", "float16"])
def test_created_npy_files_load_in_numpy(tmp_path, dtype):
    data = (np.arange(24) % 5).astype(dtype).reshape(2, 3, 4)
    path = tmp_path / "a.npy"
    with oocarr.create(str(path), data.shape, dtype) as x:
        x.store[:] = data
    loaded = np.load(path)
    assert loaded.dtype == np.dtype(dtype) and np.array_equal(loaded, data)


def test_npy_files_from_numpy_open_including_fortran_order(tmp_path):
    data = np.arange(30.0).reshape(5, 6)
    np.save(tmp_path / "c.npy", data)
    np.save(tmp_path / "f.npy", np.asfortranarray(data))
    for name in ("c.npy", "f.npy"):
        store = oocarr.open(str(tmp_path / name)).store.with_pages((2, 4))
        assert np.array_equal(store[:], data)
        assert np.array_equal(store.read_block((2, 1)), data[4:, 4:])


def test_read_only_open_never_writes_the_file(tmp_path):
    path = tmp_path / "src.npy"
    np.save(path, np.arange(100.0))
    before = digest(path)
    store = oocarr.open(str(path)).store
    store[:]
    with pytest.raises(errors.ReadOnlyError):
        store[0] = 5
    store.close()
    assert digest(path) == before


def test_raw_binary_files_with_offset(tmp_path):
    path = tmp_path / "data.bin"
    data = np.arange(12, dtype="<u2").reshape(3, 4)
    path.write_bytes(b"HEADER" + data.tobytes())
    x = oocarr.open(str(path), driver="memmap", shape=(3, 4), dtype="<u2", offset=6)
    assert np.array_equal(np.asarray(x), data)
    assert x.locator.driver_kwargs["offset"] == 6
    with pytest.raises(errors.InvalidArgumentError, match="shape="):
        oocarr.open(str(path), driver="memmap")
    with pytest.raises(errors.InvalidStoreError, match="needs"):
        oocarr.open(str(path), driver="memmap", shape=(4, 4), dtype="<u2", offset=6)
    with pytest.raises(errors.InvalidArgumentError, match="unknown memmap options"):
        oocarr.open(str(path), driver="memmap", shape=(3, 4), dtype="<u2", order="F")


def test_raw_bfloat16_round_trip(tmp_path):
    import ml_dtypes

    data = np.linspace(-2, 2, 8).astype(ml_dtypes.bfloat16)
    x = oocarr.save(data, str(tmp_path / "w.bf16"), driver="memmap")
    raw = np.fromfile(tmp_path / "w.bf16", dtype=ml_dtypes.bfloat16)
    assert raw.tobytes() == data.tobytes()
    again = oocarr.open(x.locator)
    assert again.dtype == data.dtype and np.asarray(again).tobytes() == data.tobytes()


@pytest.mark.parametrize(
    "content, match",
    [
        (b"", "readable"),
        (b"not an npy file at all", "readable"),
        (None, "truncated"),
    ],
)
def test_broken_npy_files_are_invalid_stores(tmp_path, content, match):
    path = tmp_path / "bad.npy"
    if content is None:
        np.save(path, np.arange(1000.0))
        path.write_bytes(path.read_bytes()[:-100])
    else:
        path.write_bytes(content)
    with pytest.raises(errors.InvalidStoreError, match=match) as info:
        oocarr.open(str(path))
    assert str(path) in str(info.value)


def test_object_npy_is_an_unsupported_dtype(tmp_path):
    np.save(tmp_path / "o.npy", np.array(["a", 1], dtype=object), allow_pickle=True)
    with pytest.raises(errors.UnsupportedDtypeError):
        oocarr.open(str(tmp_path / "o.npy"))


def test_bfloat16_npy_is_refused_with_a_way_out(tmp_path):
    with pytest.raises(errors.UnsupportedDtypeError, match="raw file"):
        oocarr.create(str(tmp_path / "b.npy"), (3,), "bfloat16")


def test_urls_the_driver_cannot_map(tmp_path):
    with pytest.raises(errors.InvalidUrlError, match="fsspec"):
        oocarr.open("s3://bucket/a.npy", driver="memmap")
    with pytest.raises(errors.InvalidUrlError, match="one array"):
        oocarr.open(str(tmp_path / "a.npy") + "#/x")
    with pytest.raises(errors.InvalidArgumentError, match="does not exist"):
        oocarr.create(str(tmp_path / "no" / "dir" / "a.npy"), (3,), "f4")


def test_attrs_live_in_a_sidecar_numpy_ignores(tmp_path):
    path = tmp_path / "a.npy"
    oocarr.save(np.ones(3), str(path), attrs={"units": "m"})
    assert (tmp_path / "a.npy.attrs.json").exists()
    assert np.array_equal(np.load(path), np.ones(3))
    assert oocarr.open(str(path)).attrs == {"units": "m"}
    oocarr.save(np.ones(3), str(path), overwrite=True, attrs={})
    assert not (tmp_path / "a.npy.attrs.json").exists()


def test_no_temporary_files_are_left_behind(tmp_path):
    oocarr.save(np.ones((10, 10)), str(tmp_path / "a.npy"))
    with pytest.raises(ValueError), oocarr.create(str(tmp_path / "b.npy"), (3,), "f4"):
        raise ValueError
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy"]


def test_read_view_maps_the_stored_bytes_read_only(tmp_path):
    data = np.arange(40 * 16, dtype="f4").reshape(40, 16)
    np.save(tmp_path / "v.npy", data)
    store = oocarr.open(str(tmp_path / "v.npy")).store
    rows = store.read_view((slice(8, 24), slice(0, 16)))
    np.testing.assert_array_equal(rows, data[8:24])
    assert not rows.flags.writeable and not rows.flags.owndata  # a mapping, not a buffer
    assert rows.ctypes.data % 64 == 0  # XLA's CPU client can take it without a copy
    columns = store.read_view((slice(0, 40), slice(2, 5)))  # not contiguous: a copy
    np.testing.assert_array_equal(columns, data[:, 2:5])
    assert not columns.flags.writeable
    store.close()


def test_read_view_of_a_truncated_file_is_an_error_not_a_crash(tmp_path):
    path = tmp_path / "t.npy"
    np.save(path, np.ones((64, 64), "f4"))
    store = oocarr.open(str(path)).store
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 1024)
    with pytest.raises(errors.InvalidStoreError, match="truncated"):
        store.read_view((slice(48, 64), slice(0, 64)))
    store.close()


def test_read_view_of_fortran_order_files(tmp_path):
    data = np.asfortranarray(np.arange(30.0).reshape(5, 6))
    np.save(tmp_path / "f.npy", data)
    store = oocarr.open(str(tmp_path / "f.npy")).store
    np.testing.assert_array_equal(store.read_view((slice(1, 4), slice(2, 6))), data[1:4, 2:6])
    store.close()


@pytest.mark.parametrize("dtype", ["<f4", ">i2", "u1", "c16"])
def test_regions_of_short_runs_read_from_mapped_windows(tmp_path, monkeypatch, dtype):
    """Strips of columns (short runs) are copied out of a few rows' mapping at a time; every
    region, crossing window edges included, reads what NumPy reads."""
    import oocarr_drivers.memmap as memmap

    monkeypatch.setattr(memmap, "READ_WINDOW_BYTES", 4096)  # windows of a few rows
    a = (np.arange(97 * 3 * 50) % 251).astype(dtype).reshape(97, 3, 50)
    np.save(tmp_path / "a.npy", a)
    store = oocarr.open(str(tmp_path / "a.npy")).store
    for region in [
        (slice(0, 97), slice(0, 3), slice(5, 9)),
        (slice(13, 88), slice(1, 2), slice(0, 50)),
        (slice(96, 97), slice(0, 3), slice(49, 50)),
        (slice(2, 60), slice(0, 3), slice(0, 1)),
    ]:
        np.testing.assert_array_equal(store.read_region(region), a[region])


def test_a_truncated_file_read_in_short_runs_is_an_error_not_a_crash(tmp_path):
    a = np.arange(400 * 64, dtype="f4").reshape(400, 64)
    np.save(tmp_path / "a.npy", a)
    store = oocarr.open(str(tmp_path / "a.npy")).store
    with open(tmp_path / "a.npy", "r+b") as f:
        f.truncate(os.path.getsize(tmp_path / "a.npy") - 4096)
    with pytest.raises(errors.InvalidStoreError, match="truncated"):
        store.read_region((slice(0, 400), slice(0, 3)))
