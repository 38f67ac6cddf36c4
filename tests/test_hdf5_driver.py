"""hdf5 driver specifics: h5py as the oracle, atomic creates, file sharing and bad input."""

from __future__ import annotations

import concurrent.futures
import gc
import hashlib
import multiprocessing
import os
import pickle
import subprocess
import sys
import threading

import h5py
import numpy as np
import pytest

import oocarr
from oocarr import errors
from oocarr_drivers import hdf5 as hdf5_driver


def digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def chunk_cache_of(store) -> tuple[int, int, float]:
    """``(nslots, nbytes, w0)`` of the chunk cache the store's dataset is open with."""
    with hdf5_driver._LOCK:
        return store._dataset().id.get_access_plist().get_chunk_cache()


def h5_datasets(path) -> list[str]:
    names: list[str] = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: names.append("/" + n) if isinstance(o, h5py.Dataset) else None)
    return sorted(names)


@pytest.fixture
def h5file(tmp_path):
    """A file made by h5py with the layouts and dtypes oocarr must read."""
    path = tmp_path / "made_by_h5py.h5"
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        f.create_dataset("contiguous", data=np.arange(24.0).reshape(4, 6))
        f.create_dataset(
            "a/b/c/gzip",
            data=np.arange(600, dtype="i4").reshape(20, 30),
            chunks=(7, 11),
            compression="gzip",
            compression_opts=7,
        )
        f.create_dataset(
            "a/lzf",
            data=rng.standard_normal((10, 10)).astype("f4"),
            chunks=(5, 5),
            compression="lzf",
            shuffle=True,
        )
        f.create_dataset("big_endian_f8", data=np.arange(10, dtype=">f8"))
        f.create_dataset("big_endian_i4", data=np.arange(-5, 5, dtype=">i4"), chunks=(3,))
        f.create_dataset("scalar", data=np.float32(2.5))
        f.create_dataset("bools", data=np.array([True, False, True]))
        f.create_dataset("complex", data=np.array([1 + 2j, 3 - 4j], dtype="c8"))
        f.create_dataset("strings", data=np.array(["a", "bc"], dtype=h5py.string_dtype()))
        f.create_dataset("records", data=np.zeros(3, dtype=[("x", "f4"), ("y", "i2")]))
        f.create_dataset("null", data=h5py.Empty("f4"))
        d = f["contiguous"]
        d.attrs["units"] = "metres"
        d.attrs["fixed"] = np.bytes_(b"ascii")
        d.attrs["count"] = 3
        d.attrs["scale"] = 0.5
        d.attrs["axes"] = np.array([[1, 2], [3, 4]])
        d.attrs["names"] = np.array(["x", "yy"], dtype=h5py.string_dtype())
        d.attrs["flag"] = np.bool_(True)
    return path


# ----------------------------------------------------------------------
# Reading files made by h5py
# ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "name",
    [
        "contiguous",
        "a/b/c/gzip",
        "a/lzf",
        "big_endian_f8",
        "big_endian_i4",
        "scalar",
        "bools",
        "complex",
    ],
)
def test_h5py_datasets_read_back_equal(h5file, name):
    with h5py.File(h5file, "r") as f:
        expected = f[name][()]
        chunks = f[name].chunks
        dtype = f[name].dtype
    x = oocarr.open(f"{h5file}#/{name}")
    store = x.store
    assert store.shape == expected.shape and store.chunks == chunks
    assert store.dtype == dtype  # the stored byte order is kept
    assert np.array_equal(oocarr.to_numpy(x), expected)
    if store.ndim:
        small = store.with_pages(tuple(max(1, s // 3) for s in store.shape))
        for index in small.block_grid():
            region = small.block_region(index)
            assert np.array_equal(small.read_block(index), expected[region])
    store.close()


def test_out_buffers_are_filled_in_place(h5file):
    store = oocarr.open(f"{h5file}#/a/b/c/gzip").store
    buf = np.empty((5, 30), dtype=store.dtype)
    assert store.read_region((slice(3, 8), slice(0, 30)), out=buf) is buf
    assert np.array_equal(buf, np.arange(600, dtype="i4").reshape(20, 30)[3:8])
    scalar = oocarr.open(f"{h5file}#/scalar").store
    out = np.empty((), scalar.dtype)
    assert scalar.read_region((), out=out) is out and out == np.float32(2.5)


def test_h5py_attrs_read_back_as_json(h5file):
    attrs = oocarr.open(f"{h5file}#/contiguous").store.attrs
    assert attrs == {
        "units": "metres",
        "fixed": "ascii",
        "count": 3,
        "scale": 0.5,
        "axes": [[1, 2], [3, 4]],
        "names": ["x", "yy"],
        "flag": True,
    }


def test_info_describes_storage(h5file):
    gz = oocarr.open(f"{h5file}#/a/b/c/gzip").store.info()
    assert gz["compression"] == "gzip:7" and gz["chunks"] == [7, 11]
    assert gz["stored_nbytes"] < gz["nbytes"] and gz["compression_ratio"] > 1
    assert gz["driver"] == "hdf5" and gz["locator"]["path"] == "/a/b/c/gzip"
    assert oocarr.open(f"{h5file}#/a/lzf").store.compression == "lzf"
    plain = oocarr.open(f"{h5file}#/contiguous").store.info()
    assert plain["compression"] is None and plain["chunks"] is None
    assert plain["stored_nbytes"] == plain["nbytes"] == 24 * 8
    assert oocarr.open(f"{h5file}#/big_endian_f8").store.info()["byte_order"] == "big"


def test_page_shapes_are_whole_chunks(h5file):
    store = oocarr.open(f"{h5file}#/a/b/c/gzip").store
    assert all(p % c == 0 or p == s for p, c, s in zip(store.page_shape, (7, 11), (20, 30)))


def test_unfiltered_chunk_cache_holds_one_small_chunk_or_none(tmp_path):
    path = tmp_path / "c.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", shape=(4000, 4000), dtype="f8", chunks=(100, 100))
        f.create_dataset("big", shape=(4096, 256), dtype="f4", chunks=(2048, 256))
    store = oocarr.open(f"{path}#/x").store.with_pages((400, 400))
    store.read_region((slice(0, 1), slice(0, 1)))
    nslots, nbytes, w0 = chunk_cache_of(store)
    # one chunk, so each is read from the file in one piece; pages never read one twice
    assert nbytes == 100 * 100 * 8 and nslots >= 100 and w0 == 1.0
    wider = store.with_pages((4000, 4000))
    wider.read_region((slice(0, 1), slice(0, 1)))
    assert chunk_cache_of(wider)[1] == 100 * 100 * 8
    big = oocarr.open(f"{path}#/big").store
    big.read_region((slice(0, 1), slice(0, 1)))
    assert chunk_cache_of(big)[1] == 0  # 2 MiB chunks go straight into the caller's buffer
    np.testing.assert_array_equal(big[4000:], np.zeros((96, 256), "f4"))
    big.close()
    store.close()


def test_filtered_chunk_cache_holds_one_layer_of_chunks_across_a_page(tmp_path):
    path = tmp_path / "c.h5"
    chunk = 100 * 400 * 8
    with h5py.File(path, "w") as f:
        f.create_dataset("x", (4000, 4000), "f8", chunks=(100, 400), compression="gzip")
        f.create_dataset("shuffled", (4000, 4000), "f8", chunks=(100, 400), shuffle=True)
    store = oocarr.open(f"{path}#/x").store.with_pages((100, 400))
    store.read_region((slice(0, 1), slice(0, 1)))
    assert chunk_cache_of(store)[1] == chunk  # pages of one chunk share none; keep one
    # pages of 4 x 10 chunks cut only axis 0: neighbours share a layer of 10 chunks
    rows = store.with_pages((400, 4000))  # shares the dataset handle; its cache grows
    rows.read_region((slice(0, 1), slice(0, 1)))
    nslots, nbytes, w0 = chunk_cache_of(rows)
    assert nbytes == 10 * chunk and nslots >= 100 * 10 and w0 == 1.0
    assert chunk_cache_of(store)[1] == 10 * chunk
    other = oocarr.open(f"{path}#/x").store.with_pages((100, 400))
    assert chunk_cache_of(other)[1] == 10 * chunk  # smaller pages keep the larger cache
    # shuffle alone is a filter (the store reports no compression) and gets the same cache
    shuffled = oocarr.open(f"{path}#/shuffled").store.with_pages((400, 4000))
    assert shuffled.compression is None and chunk_cache_of(shuffled)[1] == 10 * chunk
    cache = hdf5_driver._chunk_cache
    # a page that is not a whole number of chunks can straddle one more per axis
    assert cache((10**4, 10**4), (1000, 1000), 8, (1500, 10**4), True)[1] == 10 * 8 * 10**6
    assert cache((10**4, 10**4), (1000, 1000), 8, (1500, 2500), True)[1] == 4 * 8 * 10**6
    assert cache((10**7,), (10**5,), 8, (150000,), True)[1] == 8 * 10**5
    assert cache((1000,), (100,), 8, (1000,), True)[1] == 800  # one page: nothing shared
    # without filters: one chunk up to 1 MiB, none above
    assert cache((10**4, 10**4), (1000, 1000), 8, (1500, 10**4), False)[1] == 0
    assert cache((10**4,), (2**17,), 8, (2**17,), False)[1] == 2**20
    for s in (store, rows, other, shuffled):
        s.close()


READ_SCRIPT = """
import json, sys
import numpy as np
import oocarr

store = oocarr.open(sys.argv[1]).store
out = np.ones(store.page_shape, store.dtype)  # touched before the baseline
store.read_block((0, 0), out=out)
baseline = peak_rss()
for index in store.block_grid():
    store.read_block(index, out=out[: store.block_shape(index)[0]])
print(json.dumps({"growth": peak_rss() - baseline, "page": out.nbytes}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_streaming_unfiltered_chunks_costs_no_chunk_cache_memory(tmp_path):
    from subprocess_rss import run_script

    path = tmp_path / "big.h5"
    with h5py.File(path, "w") as f:  # 64 MiB in 2 MiB chunks, read in 8 MiB pages
        x = f.create_dataset("x", (65536, 256), "f4", chunks=(2048, 256))
        for start in range(0, 65536, 8192):
            x[start : start + 8192] = np.float32(start)
    report = run_script(READ_SCRIPT, f"{path}#/x")
    assert report["page"] == 8 * 2**20
    # chunks go straight from the file into the page buffer; a cache sized for pages would
    # have kept 16 MiB of chunks that are never read again
    assert report["growth"] < 2**20, f"reading pages grew RSS by {report['growth']} bytes"


# ----------------------------------------------------------------------
# Arrays oocarr creates, read by h5py
# ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "compression, chunks, h5_compression, opts, described",
    [
        (None, (3, 5), None, None, None),
        ("gzip", None, "gzip", 4, "gzip:4"),
        ("gzip:9", (4, 4), "gzip", 9, "gzip:9"),
        ("lzf", (2, 7), "lzf", None, "lzf"),
    ],
)
def test_created_datasets_read_in_h5py(
    tmp_path, compression, chunks, h5_compression, opts, described
):
    data = np.arange(70, dtype="f4").reshape(10, 7)
    url = f"{tmp_path / 'new.h5'}#/grp/sub/x"
    attrs = {"units": "s", "n": 3, "ok": False, "axes": [1.5, 2.5], "tags": ["a", "b"]}
    with oocarr.create(
        url, data.shape, "f4", chunks=chunks, compression=compression, attrs=attrs
    ) as x:
        x.store[:] = data
    with h5py.File(tmp_path / "new.h5", "r") as f:
        d = f["grp/sub/x"]
        assert np.array_equal(d[()], data) and d.dtype == np.float32
        assert d.compression == h5_compression and d.compression_opts == opts
        assert d.chunks == (chunks or hdf5_driver.HDF5Array.default_chunks((10, 7), d.dtype))
        assert d.attrs["units"] == "s" and d.attrs["n"] == 3 and not d.attrs["ok"]
        assert list(d.attrs["axes"]) == [1.5, 2.5] and list(d.attrs["tags"]) == ["a", "b"]
    store = oocarr.open(url).store
    assert store.attrs == attrs and store.compression == described
    assert store.chunks == (chunks or (10, 7))


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int16", ">f4", ">i8", "float16", "complex128"])
def test_dtypes_round_trip_through_h5py(tmp_path, dtype):
    data = (np.arange(12) % 3).astype(dtype).reshape(3, 4)
    url = f"{tmp_path / 'd.h5'}#/x"
    oocarr.save(data, url).store.close()
    with h5py.File(tmp_path / "d.h5", "r") as f:
        assert f["x"].dtype == np.dtype(dtype) and np.array_equal(f["x"][()], data)
    again = oocarr.open(url).store
    assert again.dtype == np.dtype(dtype) and np.array_equal(again[:], data)


def test_scalar_empty_and_oversized_chunks(tmp_path):
    path = tmp_path / "shapes.h5"
    with oocarr.create(f"{path}#/s", (), "f8", compression="gzip") as s:
        s.store[()] = 4.0
    with oocarr.create(f"{path}#/e", (0, 5), "i2") as e:
        pass
    with oocarr.create(f"{path}#/o", (3,), "i2", chunks=(10,), compression="lzf") as o:
        o.store[:] = [1, 2, 3]
    with h5py.File(path, "r") as f:
        assert f["s"][()] == 4.0 and f["s"].chunks is None
        assert f["e"].shape == (0, 5)
        assert f["o"].chunks == (10,) and list(f["o"][()]) == [1, 2, 3]
    assert oocarr.open(f"{path}#/s").store.compression is None
    assert oocarr.open(f"{path}#/e").store.shape == (0, 5)
    assert e.store.shape == (0, 5)
    assert oocarr.open(f"{path}#/o").store.chunks == (10,)


def test_attrs_round_trip_and_their_h5py_form(tmp_path):
    url = f"{tmp_path / 'attrs.h5'}#/x"
    attrs = {
        "meta": {"a": 1, "b": [1, "x"]},
        "nothing": None,
        "mixed": [1, "a"],
        "ragged": [[1], [2, 3]],
        "empty": [],
        "grid": [[True, False], [False, True]],
        "big": 2**70,
        "json_looking": '{"a": 1}',
    }
    with oocarr.create(url, (2,), "f4", attrs=attrs) as x:
        x.store.update_attrs({"later": "yes"})
    store = oocarr.open(url, "r+").store
    assert store.attrs == {**attrs, "later": "yes"}
    with h5py.File(tmp_path / "attrs.h5", "r") as f:
        a = f["x"].attrs
        assert a["meta"] == '{"a": 1, "b": [1, "x"]}'
        assert a["json_looking"] == '{"a": 1}'
        assert a["grid"].dtype == bool
        assert sorted(a[hdf5_driver.JSON_ATTRS]) == [
            "big",
            "empty",
            "meta",
            "mixed",
            "nothing",
            "ragged",
        ]
    store.set_attrs({"only": 1})
    assert store.attrs == {"only": 1}
    with pytest.raises(errors.InvalidArgumentError, match="reserved"):
        store.update_attrs({hdf5_driver.JSON_ATTRS: 1})
    with pytest.raises(errors.InvalidArgumentError, match="reserved"):
        oocarr.create(f"{tmp_path / 'r.h5'}#/x", (1,), "f4", attrs={hdf5_driver.JSON_ATTRS: 1})
    store.close()


# ----------------------------------------------------------------------
# Atomic create, overwrite and abort
# ----------------------------------------------------------------------
def test_new_file_appears_only_on_commit(tmp_path):
    path = tmp_path / "fresh.h5"
    x = oocarr.create(f"{path}#/g/x", (4,), "i4")
    x.store[:] = [1, 2, 3, 4]
    x.store.flush()
    assert not path.exists()
    # besides the temporary, only the writer lock (a hidden ``.lock`` file) is there
    (hidden,) = [n for n in os.listdir(tmp_path) if not n.endswith(".lock")]
    assert hidden.startswith(".fresh.h5.tmp-")
    assert list(x.store[:]) == [1, 2, 3, 4]  # a pending array reads its temporary
    assert not oocarr.get_driver("hdf5").exists(x.locator)
    x.store.commit()
    x.close()
    assert os.listdir(tmp_path) == ["fresh.h5"]
    assert h5_datasets(path) == ["/g/x"]


def test_exception_in_with_block_leaves_nothing(tmp_path):
    path = tmp_path / "never.h5"
    with pytest.raises(RuntimeError), oocarr.create(f"{path}#/x", (3,), "f4") as x:
        x.store[:] = 1
        raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_exception_leaves_the_old_dataset_intact(tmp_path):
    path = tmp_path / "old.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(5.0)
        f["other"] = np.ones(2)
    with pytest.raises(RuntimeError), oocarr.create(f"{path}#/x", (5,), "f8", overwrite=True) as x:
        x.store[:] = -1
        raise RuntimeError("boom")
    with pytest.raises(RuntimeError), oocarr.create(f"{path}#/new/y", (2,), "f8") as y:
        y.store[:] = 7
        raise RuntimeError("boom")
    assert h5_datasets(path) == ["/other", "/x"]
    with h5py.File(path, "r") as f:
        assert list(f) == ["other", "x"]  # no group was left behind for /new/y
        assert np.array_equal(f["x"][()], np.arange(5.0))
    assert os.listdir(tmp_path) == ["old.h5"]


def test_create_over_existing_needs_overwrite(tmp_path):
    path = tmp_path / "keep.h5"
    oocarr.save(np.arange(3.0), f"{path}#/x").store.close()
    before = digest(path)
    with pytest.raises(errors.AlreadyExistsError, match="overwrite=True"):
        oocarr.create(f"{path}#/x", (3,), "f8")
    assert digest(path) == before
    assert np.array_equal(oocarr.to_numpy(oocarr.open(f"{path}#/x")), np.arange(3.0))


def test_overwrite_replaces_only_on_commit(tmp_path):
    path = tmp_path / "over.h5"
    oocarr.save(np.arange(3.0), f"{path}#/g/x", attrs={"v": 1}).store.close()
    x = oocarr.create(f"{path}#/g/x", (2, 2), "i8", overwrite=True, attrs={"v": 2})
    x.store[:] = [[1, 2], [3, 4]]
    old = oocarr.open(f"{path}#/g/x").store
    assert old.shape == (3,) and np.array_equal(old[:], np.arange(3.0))
    x.store.close()
    new = oocarr.open(f"{path}#/g/x").store
    assert new.shape == (2, 2) and new.attrs == {"v": 2} and new[1, 1] == 4
    assert h5_datasets(path) == ["/g/x"]  # no temporary dataset left


def test_adding_datasets_keeps_the_others(tmp_path):
    path = tmp_path / "many.h5"
    with h5py.File(path, "w") as f:
        f["a"] = np.arange(4)
        f.create_dataset("g/b", data=np.ones((2, 2)), compression="gzip")
        f["g"].attrs["note"] = "group attrs stay"
    oocarr.save(np.zeros(3), f"{path}#/g/c").store.close()
    oocarr.save(np.zeros(3), f"{path}#/h/i/d").store.close()
    assert h5_datasets(path) == ["/a", "/g/b", "/g/c", "/h/i/d"]
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["a"][()], np.arange(4)) and f["g"].attrs["note"] == (
            "group attrs stay"
        )


def test_two_pending_creates_into_one_new_file(tmp_path):
    path = tmp_path / "pair.h5"
    x = oocarr.create(f"{path}#/x", (3,), "f4")
    y = oocarr.create(f"{path}#/y", (2,), "i2", compression="gzip")
    x.store[:] = 1
    y.store[:] = 2
    x.close()
    y.close()
    assert h5_datasets(path) == ["/x", "/y"]
    assert oocarr.open(f"{path}#/y").store.compression == "gzip:4"
    assert list(oocarr.open(f"{path}#/x").store[:]) == [1, 1, 1]
    assert os.listdir(tmp_path) == ["pair.h5"]


def test_delete_and_exists(tmp_path):
    path = tmp_path / "del.h5"
    with h5py.File(path, "w") as f:
        f["a"] = np.arange(4)
        f["g/b"] = np.arange(2)
    driver = oocarr.get_driver("hdf5")
    loc = oocarr.open(f"{path}#/g/b").locator
    assert driver.exists(loc)
    assert not driver.exists(oocarr.resolve(f"{path}#/g")[1])  # a group is not an array
    driver.delete(loc)
    driver.delete(loc)  # absent: no error
    assert not driver.exists(loc) and h5_datasets(path) == ["/a"]
    with pytest.raises(errors.InvalidUrlError, match="group"):
        driver.delete(oocarr.resolve(f"{path}#/g")[1])
    driver.delete(oocarr.resolve(f"{path}#/a")[1])
    assert path.exists()  # the user's file stays, even when empty


# ----------------------------------------------------------------------
# Read-only opens and file sharing
# ----------------------------------------------------------------------
def test_read_only_open_never_writes_the_file(h5file):
    before = digest(h5file)
    store = oocarr.open(f"{h5file}#/a/b/c/gzip").store
    assert store[:].shape == (20, 30) and store.attrs == {}
    with pytest.raises(errors.ReadOnlyError, match="mode='r\\+'"):
        store[0] = 5
    with pytest.raises(errors.ReadOnlyError):
        store.update_attrs({"x": 1})
    store.close()
    assert digest(h5file) == before


def test_reading_then_creating_in_the_same_file(tmp_path):
    path = tmp_path / "share.h5"
    oocarr.save(np.arange(10.0), f"{path}#/x").store.close()
    reader = oocarr.open(f"{path}#/x").store
    assert reader[3] == 3.0  # holds the file open read-only
    with oocarr.create(f"{path}#/y", (2,), "f8") as y:
        y.store[:] = [5, 6]
        assert reader[4] == 4.0  # still reads while the file is open for writing
    assert reader[5] == 5.0 and reader.readonly
    with pytest.raises(errors.ReadOnlyError):
        reader[0] = 1
    writer = oocarr.open(f"{path}#/y", "r+").store
    writer[0] = 50
    assert oocarr.open(f"{path}#/y").store[0] == 50
    writer.close()
    reader.close()
    with h5py.File(path, "r+") as f:  # every oocarr handle on the file is closed
        assert list(f["y"][()]) == [50, 6]


def test_forgotten_stores_release_the_file(tmp_path):
    path = tmp_path / "gc.h5"
    oocarr.save(np.arange(4.0), f"{path}#/x").store.close()
    store = oocarr.open(f"{path}#/x").store
    store[:]
    del store
    gc.collect()
    with h5py.File(path, "r+") as f:
        f["x"][0] = 9


def test_concurrent_reads_from_threads(tmp_path):
    data = np.arange(200 * 50, dtype="f8").reshape(200, 50)
    url = f"{tmp_path / 't.h5'}#/x"
    oocarr.save(data, url, chunks=(10, 50), compression="gzip").store.close()
    store = oocarr.open(url).store.with_pages((10, 50))
    errors_seen = []

    def work(rows):
        try:
            for i in rows:
                assert np.array_equal(store.read_block((i, 0)), data[i * 10 : (i + 1) * 10])
        except Exception as err:  # reported below
            errors_seen.append(err)

    threads = [threading.Thread(target=work, args=(range(k, 20, 2),)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors_seen == []
    store.close()


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_pickled_stores_read_in_child_processes(tmp_path, method):
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} start method here")
    data = np.arange(60, dtype=">i4").reshape(6, 10)
    url = f"{tmp_path / 'p.h5'}#/g/x"
    oocarr.save(data, url, chunks=(2, 10)).store.close()
    store = oocarr.open(url).store.with_pages((2, 10))
    assert np.array_equal(store[:], data)  # the parent holds the file open before forking
    again = pickle.loads(pickle.dumps(store))
    assert again.page_shape == (2, 10) and np.array_equal(again[:], data)
    ctx = multiprocessing.get_context(method)
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
        assert np.array_equal(pool.submit(oocarr.to_numpy, store).result(timeout=60), data)
    assert np.array_equal(store[:], data)
    store.close()


# ----------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------
def test_missing_file_and_dataset(tmp_path, h5file):
    with pytest.raises(errors.NotFoundError, match="nope.h5"):
        oocarr.open(f"{tmp_path / 'nope.h5'}#/x")
    with pytest.raises(errors.NotFoundError) as info:
        oocarr.open(f"{h5file}#/a/missing")
    assert "/a/missing" in str(info.value) and str(h5file) in str(info.value)
    assert "/a/b/c/gzip" in str(info.value)  # lists what is there


def test_url_naming_a_group_or_nothing(h5file):
    with pytest.raises(errors.InvalidUrlError, match="group") as info:
        oocarr.open(f"{h5file}#/a/b")
    assert "/a/b/c/gzip" in str(info.value)
    with pytest.raises(errors.InvalidUrlError, match="name a dataset") as info:
        oocarr.open(str(h5file))
    assert "/contiguous" in str(info.value) and "/a/lzf" in str(info.value)


def test_file_that_is_not_hdf5(tmp_path):
    path = tmp_path / "text.h5"
    path.write_text("just some text\n")
    with pytest.raises(errors.InvalidStoreError, match="not in HDF5 format"):
        oocarr.open(f"{path}#/x")
    with pytest.raises(errors.InvalidArgumentError, match="not an HDF5 file"):
        oocarr.create(f"{path}#/x", (2,), "f4", overwrite=True)
    assert path.read_text() == "just some text\n"


@pytest.mark.parametrize("name", ["strings", "records"])
def test_unsupported_dataset_dtypes(h5file, name):
    with pytest.raises(errors.UnsupportedDtypeError, match=name):
        oocarr.open(f"{h5file}#/{name}")


def test_null_dataspace_is_not_an_array(h5file):
    with pytest.raises(errors.InvalidStoreError, match="null dataspace"):
        oocarr.open(f"{h5file}#/null")


def test_bfloat16_is_refused(tmp_path):
    with pytest.raises(errors.UnsupportedDtypeError, match="bfloat16"):
        oocarr.create(f"{tmp_path / 'b.h5'}#/x", (2,), "bfloat16")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"storage_options": {"anon": True}}, errors.InvalidArgumentError, "storage_options"),
        ({"shape": (3,)}, errors.InvalidArgumentError, "unknown hdf5 options"),
    ],
)
def test_options_the_driver_does_not_take(h5file, kwargs, error, match):
    with pytest.raises(error, match=match):
        oocarr.open(f"{h5file}#/contiguous", **kwargs)


def test_remote_hdf5_is_read_only_and_points_to_zarr():
    """Remote HDF5 files open read-only (tests/test_hdf5_remote.py); writing one is refused
    before any request, naming Zarr as the format to write remotely."""
    with pytest.raises(errors.ReadOnlyError, match="zarr"):
        oocarr.create("https://example.com/data.hdf5#/x", (2,), "f4")


def test_file_urls_are_local(h5file):
    assert oocarr.open(f"file://{h5file}#/scalar").store.locator.url == str(h5file)


@pytest.mark.parametrize(
    "compression, match", [("gzip:12", "0-9"), ("lzf:3", "no level"), ("zstd", "offers")]
)
def test_bad_compression(tmp_path, compression, match):
    with pytest.raises(errors.UnsupportedCompressionError, match=match):
        oocarr.create(f"{tmp_path / 'c.h5'}#/x", (4,), "f4", compression=compression)
    assert os.listdir(tmp_path) == []


def test_bad_create_targets(tmp_path):
    path = tmp_path / "t.h5"
    with h5py.File(path, "w") as f:
        f["d"] = np.arange(3)
        f.create_group("g")
    before = digest(path)
    with pytest.raises(errors.InvalidUrlError, match="/d is a dataset"):
        oocarr.create(f"{path}#/d/x", (2,), "f4")
    with pytest.raises(errors.InvalidUrlError, match="is a group"):
        oocarr.create(f"{path}#/g", (2,), "f4", overwrite=True)
    assert digest(path) == before
    with pytest.raises(errors.InvalidArgumentError, match="does not exist"):
        oocarr.create(f"{tmp_path / 'no' / 'dir.h5'}#/x", (2,), "f4")


def test_writable_open_of_a_file_held_read_only_elsewhere(tmp_path):
    path = tmp_path / "held.h5"
    oocarr.save(np.arange(3.0), f"{path}#/x").store.close()
    with h5py.File(path, "r"):
        with pytest.raises(errors.ReadOnlyError, match="close that handle"):
            oocarr.open(f"{path}#/x", "r+")
    assert oocarr.open(f"{path}#/x", "r+").store[1] == 1.0


def test_a_chunk_that_does_not_decode(tmp_path):
    path = tmp_path / "bad.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", data=np.arange(1000.0), chunks=(100,), compression="gzip")
        info = d.id.get_chunk_info(3)
    with open(path, "r+b") as raw:
        raw.seek(info.byte_offset)
        raw.write(b"\xff" * info.size)
    store = oocarr.open(f"{path}#/x").store
    assert np.array_equal(store[:100], np.arange(100.0))
    with pytest.raises(errors.InvalidStoreError, match="bad.h5#/x"):
        store[300:400]


def test_a_dataset_replaced_under_an_open_array(tmp_path):
    url = f"{tmp_path / 'r.h5'}#/x"
    oocarr.save(np.arange(4.0), url).store.close()
    old = oocarr.open(url).store
    assert old[0] == 0.0
    oocarr.save(np.zeros((2, 2)), url, overwrite=True).store.close()
    with pytest.raises(errors.InvalidStoreError, match="open it again"):
        old[:]
    assert oocarr.open(url).store.shape == (2, 2)


def test_collected_handles_release_after_the_lock_is_let_go(tmp_path):
    path = tmp_path / "late.h5"
    oocarr.save(np.arange(3.0), f"{path}#/x").store.close()
    store = oocarr.open(f"{path}#/x").store
    store[:]
    key = (os.getpid(), str(path))
    with hdf5_driver._LOCK:
        del store
        gc.collect()
        assert key in hdf5_driver._FILES  # not closed inside a locked section
    assert key not in hdf5_driver._FILES


@pytest.mark.skipif(
    os.environ.get("HDF5_USE_FILE_LOCKING", "").upper() == "FALSE", reason="locking disabled"
)
def test_a_file_another_process_writes_is_refused(tmp_path):
    path = tmp_path / "busy.h5"
    oocarr.save(np.arange(3.0), f"{path}#/x").store.close()
    code = (
        "import sys, h5py; f = h5py.File(sys.argv[1], 'r+'); print('ready', flush=True); "
        "sys.stdin.read()"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        with pytest.raises(errors.OocarrError, match="another process has the file open"):
            oocarr.open(f"{path}#/x")
    finally:
        child.communicate("", timeout=30)
    assert oocarr.open(f"{path}#/x").store[2] == 2.0


# -- filtered chunks decoded outside HDF5, in parallel -------------------------------------
@pytest.mark.parametrize(
    ("dtype", "filters"),
    [
        ("<f4", {"compression": "gzip"}),
        ("<f4", {"compression": "gzip", "shuffle": True}),
        (">i8", {"compression": "gzip", "compression_opts": 1, "shuffle": True}),
        ("<u2", {"shuffle": True}),
        ("<f8", {"compression": "gzip", "fletcher32": True}),  # checksums: HDF5 decodes
    ],
)
def test_filtered_regions_read_as_h5py_reads_them(tmp_path, dtype, filters):
    path = tmp_path / "f.h5"
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((45, 70)) * 1000).astype(dtype)
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", data.shape, dtype, chunks=(8, 16), fillvalue=7, **filters)
        d[:40] = data[:40]  # rows 40..44: chunks partly never written hold the fill value
        expected = d[...]
    store = oocarr.open(f"{path}#/x").store
    for region in [
        (slice(0, 45), slice(0, 70)),
        (slice(3, 44), slice(5, 69)),
        (slice(8, 16), slice(16, 32)),  # exactly one chunk
        (slice(39, 45), slice(60, 70)),  # edge chunks, partly unwritten
    ]:
        np.testing.assert_array_equal(store.read_region(region), expected[region])
    assert store.read_region().dtype == np.dtype(dtype)
    store.close()


def test_gzip_chunks_are_decoded_outside_hdf5(tmp_path, monkeypatch):
    from oocarr_drivers import hdf5_chunks

    path = tmp_path / "g.h5"
    data = np.arange(64 * 64, dtype="f4").reshape(64, 64)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=(16, 16), compression="gzip", shuffle=True)
    decoded = []
    inflate = hdf5_chunks.inflate
    monkeypatch.setattr(hdf5_chunks, "inflate", lambda *a: decoded.append(1) or inflate(*a))
    store = oocarr.open(f"{path}#/x").store
    np.testing.assert_array_equal(store.read_region(), data)
    assert len(decoded) == 16  # each chunk once, by the module's decoder
    store.close()


def test_a_corrupt_gzip_chunk_is_an_invalid_store(tmp_path):
    path = tmp_path / "bad.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", data=np.ones((32, 32), "f4"), chunks=(16, 16), compression="gzip")
        info = d.id.get_chunk_info_by_coord((16, 16))
    raw = bytearray(path.read_bytes())
    raw[info.byte_offset + 2 : info.byte_offset + info.size] = b"\xff" * (info.size - 2)
    path.write_bytes(bytes(raw))
    store = oocarr.open(f"{path}#/x").store
    np.testing.assert_array_equal(store.read_region((slice(0, 16), slice(0, 32))), 1)
    with pytest.raises(errors.InvalidStoreError, match="bad.h5"):
        store.read_region()
    store.close()
