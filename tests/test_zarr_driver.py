"""The fsspec (Zarr v3) driver: interop with zarr-python and TensorStore, bad input, atomicity.

zarr-python, TensorStore and NumPy are the oracles: what oocarr writes must
read back identically through them, and what they write must read back
identically through oocarr.
"""

from __future__ import annotations

import json
import os
import pickle
import threading
import uuid
import zipfile
from unittest import mock

import numpy as np
import pytest

import oocarr
from oocarr.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    InvalidStoreError,
    NotFoundError,
    ReadOnlyError,
    UnsupportedCompressionError,
    UnsupportedDtypeError,
)
from oocarr.store import BFLOAT16
from oocarr.store.registry import get_driver

zarr = pytest.importorskip("zarr")
ts = pytest.importorskip("tensorstore")

ZarrArray = get_driver("fsspec")


# ----------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------
def sample(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) > 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def write(url, data, **kwargs):
    with oocarr.create(url, data.shape, data.dtype, **kwargs) as x:
        if data.size:
            x.store[...] = data
    return url


def read(url, **kwargs):
    return oocarr.to_numpy(oocarr.open(url, **kwargs))


def ts_read(path):
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}
    return ts.open(spec).result().read().result()


def meta(path):
    with open(os.path.join(path, "zarr.json"), encoding="utf-8") as f:
        return json.load(f)


def mem_url(suffix=".zarr"):
    return f"memory://oocarr-test-{uuid.uuid4().hex}{suffix}"


# ----------------------------------------------------------------------
# oocarr writes, zarr-python and TensorStore read
# ----------------------------------------------------------------------
WRITE_CASES = [
    ("bool", (5, 3), (2, 2), None),
    ("int8", (7, 5), (3, 2), "gzip"),
    ("uint8", (7, 5), (3, 2), "zstd"),
    ("int16", (9,), (4,), "zstd:1"),
    ("int64", (4, 4), (4, 4), None),
    ("float16", (3, 4, 5), (2, 3, 2), "gzip:9"),
    ("float64", (6, 5), (4, 4), None),
    ("complex64", (5, 3), (2, 2), "zstd"),
    ("float32", (), (), "gzip"),
    ("float64", (0, 4), (1, 2), None),
    ("int32", (3, 0, 2), (2, 1, 2), "zstd"),
]


@pytest.mark.parametrize("dtype, shape, chunks, compression", WRITE_CASES)
def test_oocarr_arrays_read_in_zarr_and_tensorstore(tmp_path, dtype, shape, chunks, compression):
    data = sample(shape, dtype)
    path = write(str(tmp_path / "a.zarr"), data, chunks=chunks, compression=compression)
    assert np.array_equal(read(path), data)
    got = zarr.open_array(path, mode="r")[...]
    assert got.dtype == data.dtype and np.array_equal(got, data)
    got = ts_read(path)
    assert got.dtype == data.dtype and np.array_equal(got, data)
    store = oocarr.open(path).store
    assert store.chunks == chunks
    defaults = {None: None, "gzip": "gzip:5", "zstd": "zstd:3"}
    assert store.compression == defaults.get(compression, compression)


def test_metadata_written(tmp_path):
    path = write(
        str(tmp_path / "a.zarr"), np.zeros((4, 3), "<i2"), chunks=(2, 2), compression="zstd"
    )
    doc = meta(path)
    assert doc["zarr_format"] == 3 and doc["node_type"] == "array"
    assert doc["chunk_key_encoding"] == {"name": "default", "configuration": {"separator": "/"}}
    assert doc["codecs"] == [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "zstd", "configuration": {"level": 3, "checksum": False}},
    ]
    assert os.path.isfile(os.path.join(path, "c", "1", "1"))
    path = write(str(tmp_path / "b.zarr"), np.zeros(3, "u1"))
    assert meta(path)["codecs"] == [{"name": "bytes"}]
    path = write(str(tmp_path / "s.zarr"), np.array(2.5))
    assert os.path.isfile(os.path.join(path, "c"))


def test_edge_chunks_are_stored_full_size(tmp_path):
    path = write(str(tmp_path / "a.zarr"), np.arange(5, dtype="<i4"), chunks=(4,))
    with open(os.path.join(path, "c", "1"), "rb") as f:
        assert np.frombuffer(f.read(), "<i4").tolist() == [4, 0, 0, 0]


def test_big_endian_dtype_is_stored_little_endian(tmp_path):
    data = np.arange(6, dtype=">f4").reshape(2, 3)
    path = write(str(tmp_path / "a.zarr"), data)
    store = oocarr.open(path).store
    assert store.dtype == np.dtype("<f4")
    assert np.array_equal(store[...], data)
    assert meta(path)["codecs"][0]["configuration"]["endian"] == "little"


def test_attrs_and_group_member(tmp_path):
    root = str(tmp_path / "x.zarr")
    data = sample((6, 4), "float32")
    url = write(root + "#/g/arr", data, chunks=(4, 3), attrs={"units": "m", "scale": 2.0})
    group = zarr.open_group(root, mode="r")
    member = group["g/arr"]
    assert np.array_equal(member[...], data)
    assert dict(member.attrs) == {"units": "m", "scale": 2.0}
    assert np.array_equal(ts_read(os.path.join(root, "g", "arr")), data)
    assert (
        meta(root)["node_type"] == "group" and meta(os.path.join(root, "g"))["node_type"] == "group"
    )
    store = oocarr.open(url, mode="r+").store
    store.update_attrs({"extra": [1, 2]})
    assert oocarr.open(url).store.attrs == {"units": "m", "scale": 2.0, "extra": [1, 2]}
    assert zarr.open_array(os.path.join(root, "g", "arr"), mode="r").attrs["extra"] == [1, 2]
    # a second member reuses the existing groups
    write(root + "#/g/other", np.ones(2))
    assert sorted(zarr.open_group(root, mode="r")["g"].array_keys()) == ["arr", "other"]


def test_member_of_an_array_is_refused(tmp_path):
    root = write(str(tmp_path / "x.zarr"), np.ones(2))
    with pytest.raises(InvalidArgumentError, match="x.zarr"):
        oocarr.create(root + "#/inner", (2,), "f4")


def test_attrs_update_keeps_unknown_fields(tmp_path):
    path = str(tmp_path / "z.zarr")
    zarr.create_array(
        store=path, shape=(2, 3), chunks=(2, 3), dtype="f4", dimension_names=["y", "x"]
    )[...] = 1
    oocarr.open(path, mode="r+").store.update_attrs({"a": 1})
    assert meta(path)["dimension_names"] == ["y", "x"]
    assert zarr.open_array(path, mode="r").attrs["a"] == 1


def test_attrs_set_before_commit(tmp_path):
    path = str(tmp_path / "a.zarr")
    with oocarr.create(path, (2,), "f4", attrs={"a": 1}) as x:
        x.store.update_attrs({"b": 2})
        assert not os.path.exists(os.path.join(path, "zarr.json"))
    assert meta(path)["attributes"] == {"a": 1, "b": 2}


def test_bfloat16_round_trips_through_tensorstore(tmp_path):
    data = np.arange(12, dtype="float32").reshape(4, 3).astype(BFLOAT16)
    path = write(str(tmp_path / "a.zarr"), data, chunks=(3, 2), compression="zstd")
    assert meta(path)["data_type"] == "bfloat16"
    got = ts_read(path)
    assert np.array_equal(got.astype("float32"), data.astype("float32"))

    path = str(tmp_path / "t.zarr")
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": path},
        "metadata": {
            "shape": [5, 2],
            "data_type": "bfloat16",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 2]}},
            "codecs": [
                {"name": "bytes", "configuration": {"endian": "big"}},
                {"name": "gzip", "configuration": {"level": 1}},
            ],
        },
    }
    t = ts.open(spec, create=True).result()
    t[...] = np.arange(10, dtype="float32").reshape(5, 2).astype(BFLOAT16)
    got = oocarr.open(path).store[...]
    assert got.dtype == BFLOAT16
    assert np.array_equal(got.astype("float32"), np.arange(10.0).reshape(5, 2))


# ----------------------------------------------------------------------
# zarr-python and TensorStore write, oocarr reads
# ----------------------------------------------------------------------
ZARR_CASES = [
    ("float32", None, 0.0),
    ("int16", "gzip", 7),
    ("uint8", "zstd", 3),
    ("float64", "zstd", np.nan),
    ("complex64", "gzip", 1 - 2j),
    ("bool", None, True),
    ("int64", "gzip", -5),
    ("float16", None, -np.inf),
]


@pytest.mark.parametrize("dtype, compressor, fill", ZARR_CASES)
def test_zarr_python_arrays_read_in_oocarr(tmp_path, dtype, compressor, fill):
    path = str(tmp_path / "z.zarr")
    compressors = {None: None, "gzip": zarr.codecs.GzipCodec(), "zstd": zarr.codecs.ZstdCodec()}[
        compressor
    ]
    z = zarr.create_array(
        store=path,
        shape=(7, 5),
        chunks=(3, 2),
        dtype=dtype,
        compressors=compressors,
        fill_value=fill,
    )
    data = sample((7, 5), dtype)
    z[:4, :] = data[:4]  # rows 4.. stay missing and read as the fill value
    expect = np.asarray(z[...])
    got = read(path)
    assert got.dtype == expect.dtype
    np.testing.assert_array_equal(got, expect)
    store = oocarr.open(path).store
    assert store.chunks == (3, 2)
    np.testing.assert_array_equal(store[5:7, 1:4], expect[5:7, 1:4])


def test_zarr_python_big_endian_transpose_v2_keys_crc32c(tmp_path):
    path = str(tmp_path / "z.zarr")
    z = zarr.create_array(
        store=path,
        shape=(5, 3),
        chunks=(2, 2),
        dtype=">i4",
        serializer=zarr.codecs.BytesCodec(endian="big"),
        filters=[zarr.codecs.TransposeCodec(order=(1, 0))],
        compressors=[zarr.codecs.ZstdCodec(level=1, checksum=True), zarr.codecs.Crc32cCodec()],
        chunk_key_encoding={"name": "v2", "separator": "."},
    )
    z[...] = np.arange(15).reshape(5, 3)
    store = oocarr.open(path).store
    assert store.dtype == np.dtype("<i4")
    np.testing.assert_array_equal(store[...], np.arange(15).reshape(5, 3))
    # oocarr writes through the same pipeline, and zarr-python reads the result
    store = oocarr.open(path, mode="r+").store
    store[1:3, 1] = [-1, -2]
    expect = np.arange(15).reshape(5, 3)
    expect[1:3, 1] = [-1, -2]
    np.testing.assert_array_equal(zarr.open_array(path, mode="r")[...], expect)


@pytest.mark.parametrize("dtype", [">c8", ">f2", ">u8"])
def test_writes_into_big_endian_arrays_stay_big_endian(tmp_path, dtype):
    path = str(tmp_path / "z.zarr")
    zarr.create_array(
        store=path,
        shape=(6, 6),
        chunks=(2, 2),
        dtype=dtype,
        serializer=zarr.codecs.BytesCodec(endian="big"),
    )
    data = sample((5, 5), dtype)
    oocarr.open(path, mode="r+").store[1:6, 1:6] = data  # whole chunks and partial ones
    expect = np.zeros((6, 6), dtype)
    expect[1:, 1:] = data
    np.testing.assert_array_equal(zarr.open_array(path, mode="r")[...], expect)
    np.testing.assert_array_equal(read(path), expect)


def test_zarr_python_zero_d_and_hex_fill(tmp_path):
    path = str(tmp_path / "s.zarr")
    zarr.create_array(store=path, shape=(), chunks=(), dtype="f8")[...] = 4.5
    assert read(path)[()] == 4.5
    path = str(tmp_path / "h.zarr")
    zarr.create_array(store=path, shape=(3,), chunks=(2,), dtype="f4", fill_value=1.0)
    doc = meta(path)
    doc["fill_value"] = "0x3fc00000"
    with open(os.path.join(path, "zarr.json"), "w") as f:
        json.dump(doc, f)
    np.testing.assert_array_equal(read(path), [1.5, 1.5, 1.5])


def test_tensorstore_arrays_read_in_oocarr(tmp_path):
    path = str(tmp_path / "t.zarr")
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": path},
        "metadata": {
            "shape": [6, 4],
            "data_type": "int16",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 3]}},
            "chunk_key_encoding": {"name": "default"},
            "fill_value": -1,
            "codecs": [
                {"name": "bytes", "configuration": {"endian": "big"}},
                {"name": "zstd", "configuration": {"level": 2}},
            ],
        },
    }
    t = ts.open(spec, create=True).result()
    t[:4, :] = np.arange(16, dtype="int16").reshape(4, 4)
    expect = np.full((6, 4), -1, "int16")
    expect[:4] = np.arange(16).reshape(4, 4)
    np.testing.assert_array_equal(read(path), expect)


# ----------------------------------------------------------------------
# Other fsspec filesystems and URL forms
# ----------------------------------------------------------------------
def test_memory_filesystem_round_trip():
    url = mem_url()
    data = sample((9, 7), "float32")
    write(url + "#/g/x", data, chunks=(4, 4), compression="gzip", attrs={"a": 1})
    store = oocarr.open(url + "#/g/x").store
    np.testing.assert_array_equal(store[...], data)
    np.testing.assert_array_equal(store[3:8, 2:6], data[3:8, 2:6])
    assert store.attrs == {"a": 1}
    assert store.stored_nbytes > 0
    assert pickle.loads(pickle.dumps(store))[2, 3] == data[2, 3]
    ZarrArray.delete(store.locator)
    assert not ZarrArray.exists(store.locator)


def test_memory_overwrite_replaces_the_array():
    url = mem_url()
    write(url, np.ones((4, 4)), chunks=(2, 2))
    write(url, np.full(3, 7, "i2"), chunks=(2,), overwrite=True)
    np.testing.assert_array_equal(read(url), [7, 7, 7])
    import fsspec

    fs = fsspec.filesystem("memory")
    root = url[len("memory://") :]
    assert not fs.exists(f"/{root}/c/1/1")  # stale chunks of the old array are gone
    assert not [p for p in fs.ls("/", detail=False) if ".tmp-" in p]


def test_zip_archive_read_only(tmp_path):
    root = str(tmp_path / "x.zarr")
    data = sample((5, 4), "int16")
    write(root + "#/g/arr", data, chunks=(2, 3), compression="zstd")
    archive = str(tmp_path / "x.zip")
    with zipfile.ZipFile(archive, "w") as zf:
        for dirpath, _, files in os.walk(root):
            for name in files:
                full = os.path.join(dirpath, name)
                zf.write(full, os.path.relpath(full, str(tmp_path)))
    url = f"zip://x.zarr::{archive}#/g/arr"
    np.testing.assert_array_equal(read(url), data)
    # an archive whose root is the hierarchy: name the driver
    archive2 = str(tmp_path / "root.zip")
    with zipfile.ZipFile(archive2, "w") as zf:
        for dirpath, _, files in os.walk(root):
            for name in files:
                full = os.path.join(dirpath, name)
                zf.write(full, os.path.relpath(full, root))
    np.testing.assert_array_equal(read(f"zip::{archive2}#/g/arr", driver="fsspec"), data)
    with pytest.raises(ReadOnlyError):
        oocarr.open(url, mode="r+")
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        loc = oocarr.open("zip://x.zarr::x.zip#/g/arr").store.locator
    finally:
        os.chdir(cwd)
    assert loc.url == f"zip://x.zarr::{archive}"  # the local archive path is made absolute
    with pytest.raises(ReadOnlyError):
        oocarr.create(f"zip://y.zarr::{archive}", (2,), "f4")


def test_url_forms(tmp_path):
    path = write(str(tmp_path / "plain"), np.arange(3), driver="fsspec")
    assert ZarrArray.can_open(path, "", {})  # a local directory holding zarr.json
    np.testing.assert_array_equal(read(path), [0, 1, 2])
    np.testing.assert_array_equal(read(os.path.join(path, "zarr.json")), [0, 1, 2])
    np.testing.assert_array_equal(read("file://" + path), [0, 1, 2])
    loc = oocarr.open(os.path.join(path, "zarr.json")).store.locator
    assert loc.url == path
    assert ZarrArray.can_open("s3://bucket/a.zarr", "", {})
    assert ZarrArray.can_open("s3://bucket/a.zarr/g/x", "", {})
    assert ZarrArray.can_open("simplecache::s3://bucket/a.zarr", "", {})
    assert not ZarrArray.can_open("s3://bucket/a.zarr/x.npy", "", {})
    assert not ZarrArray.can_open("s3://bucket/data", "", {})
    assert ZarrArray.locate("s3://bucket/a.zarr/", "").url == "s3://bucket/a.zarr"


# ----------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------
def _with_meta(tmp_path, text):
    path = tmp_path / "bad.zarr"
    path.mkdir()
    (path / "zarr.json").write_text(text)
    return str(path)


GOOD = {
    "zarr_format": 3,
    "node_type": "array",
    "shape": [2],
    "data_type": "float32",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
    "chunk_key_encoding": {"name": "default"},
    "fill_value": 0,
    "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
}


@pytest.mark.parametrize(
    "change, message",
    [
        ("{not json", "not JSON"),
        ({"shape": None}, "shape"),
        ({"codecs": None}, "codecs"),
        ({"zarr_format": 2}, "zarr_format"),
        ({"node_type": "group"}, "group"),
        ({"data_type": "string"}, "data type 'string'"),
        ({"fill_value": "banana"}, "fill_value"),
        (
            {"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 2]}}},
            "chunk_shape",
        ),
        ({"codecs": [{"name": "gzip", "configuration": {"level": 1}}]}, "bytes codec"),
    ],
)
def test_invalid_metadata(tmp_path, change, message):
    if isinstance(change, str):
        text = change
    else:
        doc = dict(GOOD)
        for k, v in change.items():
            if v is None:
                doc.pop(k)
            else:
                doc[k] = v
        text = json.dumps(doc)
    path = _with_meta(tmp_path, text)
    with pytest.raises(InvalidStoreError, match=message) as info:
        oocarr.open(path)
    assert "bad.zarr" in str(info.value)


def test_unknown_codecs_are_named(tmp_path):
    path = str(tmp_path / "odd.zarr")
    zarr.create_array(store=path, shape=(4,), chunks=(2,), dtype="f4")
    with open(os.path.join(path, "zarr.json")) as f:
        doc = json.load(f)
    doc["codecs"].append({"name": "made-up-codec", "configuration": {}})
    with open(os.path.join(path, "zarr.json"), "w") as f:
        json.dump(doc, f)
    with pytest.raises(UnsupportedCompressionError, match="made-up-codec") as info:
        oocarr.open(path)
    assert "odd.zarr" in str(info.value)
    path = str(tmp_path / "odd2.zarr")
    zarr.create_array(store=path, shape=(4,), chunks=(2,), dtype="f4", zarr_format=2)
    with open(os.path.join(path, ".zarray")) as f:
        doc = json.load(f)
    doc["compressor"] = {"id": "no-such-numcodec"}
    with open(os.path.join(path, ".zarray"), "w") as f:
        json.dump(doc, f)
    with pytest.raises(UnsupportedCompressionError, match="no-such-numcodec"):
        oocarr.open(path)


def test_blosc_sharded_and_v2_arrays_open(tmp_path):
    data = np.arange(12, dtype="f4").reshape(3, 4)
    for name, options in {
        "blosc": {"compressors": zarr.codecs.BloscCodec()},
        "shard": {"shards": (3, 4), "chunks": (1, 2)},
        "v2": {"zarr_format": 2},
    }.items():
        path = str(tmp_path / f"{name}.zarr")
        options = {"chunks": (2, 2), **options}
        zarr.create_array(store=path, shape=data.shape, dtype="f4", **options)[:] = data
        np.testing.assert_array_equal(oocarr.to_numpy(oocarr.open(path)), data)


def test_missing_array(tmp_path):
    with pytest.raises(NotFoundError, match="nothing.zarr"):
        oocarr.open(str(tmp_path / "nothing.zarr"))
    with pytest.raises(NotFoundError):
        oocarr.open(mem_url())
    root = write(str(tmp_path / "x.zarr") + "#/a", np.ones(2)).split("#")[0]
    with pytest.raises(NotFoundError, match="#/b"):
        oocarr.open(root + "#/b")
    with pytest.raises(InvalidStoreError, match="group"):
        oocarr.open(root)


def test_corrupt_chunk(tmp_path):
    path = write(str(tmp_path / "a.zarr"), np.ones((4, 4)), chunks=(2, 2), compression="gzip")
    with open(os.path.join(path, "c", "1", "0"), "wb") as f:
        f.write(b"garbage")
    store = oocarr.open(path).store
    np.testing.assert_array_equal(store[:2], np.ones((2, 4)))
    with pytest.raises(InvalidStoreError, match="c/1/0"):
        store[...]


def test_corrupt_uncompressed_chunk(tmp_path):
    path = write(str(tmp_path / "a.zarr"), np.ones((4, 4), "f4"), chunks=(2, 2))
    with open(os.path.join(path, "c", "1", "0"), "wb") as f:
        f.write(b"short")
    store = oocarr.open(path).store
    np.testing.assert_array_equal(store[:2], np.ones((2, 4)))
    with pytest.raises(InvalidStoreError, match="c/1/0.*5 bytes"):
        store[...]


@pytest.mark.parametrize("dtype", ["f4", "i2", "u1", "?"])
def test_local_uncompressed_reads_match_zarr_python(tmp_path, dtype):
    # chunks of 256 KiB or more are read by several threads; edge chunks are padded on disk
    rng = np.random.default_rng(3)
    data = (rng.standard_normal((700, 530)) * 100).astype(dtype)
    path = str(tmp_path / "a.zarr")
    z = zarr.create_array(store=path, shape=data.shape, chunks=(256, 256), dtype=dtype)
    z[:] = data
    z[256:512, 256:512] = 0  # stays stored: zarr-python writes chunks equal to the fill value
    os.remove(os.path.join(path, "c", "0", "1"))  # a chunk never written: the fill value
    expected = z[...]
    store = oocarr.open(path).store
    for region in [
        (slice(0, 700), slice(0, 530)),
        (slice(256, 512), slice(0, 530)),
        (slice(10, 600), slice(100, 300)),
        (slice(699, 700), slice(529, 530)),
    ]:
        np.testing.assert_array_equal(store.read_region(region), expected[region])


def test_local_whole_chunks_are_read_straight_into_the_tile(tmp_path):
    data = np.arange(1000 * 128, dtype="f8").reshape(1000, 128)
    path = str(tmp_path / "a.zarr")
    zarr.create_array(store=path, shape=data.shape, chunks=(300, 128), dtype="f8")[:] = data
    store = oocarr.open(path).store
    out = np.full((600, 128), -1.0)
    store.read_region((slice(300, 900), slice(0, 128)), out=out)
    np.testing.assert_array_equal(out, data[300:900])
    np.testing.assert_array_equal(store.read_region((slice(0, 1000), slice(0, 128))), data)


def test_create_over_existing(tmp_path):
    path = write(str(tmp_path / "a.zarr"), np.arange(4.0))
    with pytest.raises(AlreadyExistsError, match="overwrite=True"):
        oocarr.create(path, (2,), "f4")
    np.testing.assert_array_equal(read(path), np.arange(4.0))
    group = str(tmp_path / "g.zarr")
    write(group + "#/x", np.ones(2))
    with pytest.raises(AlreadyExistsError, match="group"):
        oocarr.create(group, (2,), "f4", overwrite=True)
    foreign = tmp_path / "f.zarr"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(AlreadyExistsError, match="notes.txt"):
        oocarr.create(str(foreign), (2,), "f4", overwrite=True)
    assert (foreign / "notes.txt").read_text() == "mine"


def test_failed_create_leaves_nothing(tmp_path):
    path = str(tmp_path / "new.zarr")
    with (
        pytest.raises(RuntimeError),
        oocarr.create(path + "#/g/x", (4, 4), "f4", chunks=(2, 2)) as x,
    ):
        x.store[...] = np.ones((4, 4))
        assert not ZarrArray.exists(x.store.locator)  # chunks are there, zarr.json is not
        raise RuntimeError("boom")
    assert not os.path.exists(path)
    with pytest.raises(NotFoundError):
        oocarr.open(path + "#/g/x")


def test_failed_overwrite_keeps_old_values(tmp_path):
    path = write(
        str(tmp_path / "a.zarr"), np.arange(6.0).reshape(2, 3), chunks=(1, 3), attrs={"v": 1}
    )
    with pytest.raises(RuntimeError), oocarr.create(path, (5,), "i2", overwrite=True) as x:
        x.store[...] = np.zeros(5, "i2")
        np.testing.assert_array_equal(read(path), np.arange(6.0).reshape(2, 3))
        raise RuntimeError("boom")
    np.testing.assert_array_equal(read(path), np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(
        zarr.open_array(path, mode="r")[...], np.arange(6.0).reshape(2, 3)
    )
    assert oocarr.open(path).store.attrs == {"v": 1}
    assert [p for p in os.listdir(tmp_path) if p != "a.zarr"] == []
    # and a successful overwrite replaces it entirely
    write(path, np.full(5, 3, "i2"), chunks=(2,), overwrite=True)
    np.testing.assert_array_equal(read(path), np.full(5, 3, "i2"))
    assert sorted(os.listdir(os.path.join(path, "c"))) == ["0", "1", "2"]
    assert [p for p in os.listdir(tmp_path) if p != "a.zarr"] == []


def test_leftovers_of_a_crashed_create_are_cleared(tmp_path):
    path = tmp_path / "a.zarr"
    (path / "c" / "9").mkdir(parents=True)
    (path / "c" / "9" / "9").write_bytes(b"stale")
    write(str(path), np.ones(3), chunks=(2,))
    assert not (path / "c" / "9").exists()
    np.testing.assert_array_equal(read(str(path)), np.ones(3))


def test_read_only_store_refuses_writes(tmp_path):
    path = write(str(tmp_path / "a.zarr"), np.ones(3))
    store = oocarr.open(path).store
    with pytest.raises(ReadOnlyError, match="a.zarr"):
        store[0] = 5
    with pytest.raises(ReadOnlyError):
        store.update_attrs({"a": 1})
    np.testing.assert_array_equal(read(path), np.ones(3))


def test_bad_create_arguments(tmp_path):
    with pytest.raises(UnsupportedCompressionError, match="lzf"):
        oocarr.create(str(tmp_path / "a.zarr"), (2,), "f4", compression="lzf")
    with pytest.raises(UnsupportedCompressionError, match="0..9"):
        oocarr.create(str(tmp_path / "a.zarr"), (2,), "f4", compression="gzip:12")
    with pytest.raises(InvalidArgumentError, match="driver options"):
        oocarr.open(str(tmp_path / "a.zarr"), shape=(2,))


# ----------------------------------------------------------------------
# Partial writes
# ----------------------------------------------------------------------
def test_partial_chunk_writes_keep_neighbours(tmp_path):
    path = str(tmp_path / "a.zarr")
    expect = np.zeros((10, 9), "int32")
    with oocarr.create(path, expect.shape, expect.dtype, chunks=(4, 4), compression="gzip") as x:
        for i, (r, c) in enumerate(
            [
                (slice(1, 7), slice(2, 9)),
                (slice(0, 10), slice(0, 1)),
                (slice(8, 10), slice(3, 5)),
                (slice(4, 8), slice(4, 8)),
            ]
        ):
            value = np.full((r.stop - r.start, c.stop - c.start), i + 1, "int32")
            x.store.write_region((r, c), value)
            expect[r, c] = value
        x.store[::3, 1] = -1
        expect[::3, 1] = -1
    np.testing.assert_array_equal(read(path), expect)
    np.testing.assert_array_equal(zarr.open_array(path, mode="r")[...], expect)


def test_concurrent_partial_writers(tmp_path):
    path = str(tmp_path / "a.zarr")
    store = oocarr.create(path, (4, 64), "int16", chunks=(4, 16)).store

    def fill(col):
        store.write_region((slice(0, 4), slice(col, col + 1)), np.full((4, 1), col, "int16"))

    threads = [threading.Thread(target=fill, args=(c,)) for c in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.close()
    np.testing.assert_array_equal(read(path), np.tile(np.arange(64, dtype="int16"), (4, 1)))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_handles_reopen_after_fork(tmp_path):
    path = write(str(tmp_path / "a.zarr"), np.arange(8.0), chunks=(3,))
    store = oocarr.open(path).store
    assert store[1] == 1.0  # the parent opened its filesystem handle
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        ok = np.array_equal(store[...], np.arange(8.0))
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0


@pytest.mark.parametrize("shards", [None, (8, 8)], ids=["chunks", "shards"])
def test_s3_reads_are_one_get_per_chunk_and_no_head(s3_server, shards):
    """A read costs one ranged GET per chunk (per shard index and run of inner chunks when
    sharded), never a HEAD first, and a missing chunk costs its GET alone."""
    import s3fs

    data = np.arange(16 * 16, dtype="f4").reshape(16, 16)
    url = f"s3://oocarr-test/{uuid.uuid4().hex}/a.zarr"
    store = oocarr.save(
        data, url, chunks=(4, 4), shards=shards, compression="zstd", storage_options=s3_server
    ).store
    store._fs()  # make the filesystem, then count what it sends
    calls: list[str] = []
    real = s3fs.S3FileSystem._call_s3

    async def counting(self, method, *args, **kwargs):
        calls.append(method)
        return await real(self, method, *args, **kwargs)

    with mock.patch.object(s3fs.S3FileSystem, "_call_s3", counting):
        np.testing.assert_array_equal(store[:], data)
        np.testing.assert_array_equal(store[1:3, 2:14], data[1:3, 2:14])
    assert "head_object" not in calls
    if shards is None:
        assert calls.count("get_object") == 16 + 4  # every chunk, then the 4 of the region
    else:
        # 4 shard indices, 4 whole-shard runs; the region: 2 runs (indices are kept)
        assert calls.count("get_object") == 4 + 4 + 2


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"chunks": (3, 3), "shards": (4, 4)}, "not a multiple of the chunks"),
        ({"shards": (4,)}, "do not match the array's 2 axes"),
        ({"shards": "x"}, "must be a shape of positive integers"),
        ({"zarr_format": 2, "shards": (4, 4)}, "Zarr v2 has no sharding"),
        ({"zarr_format": 4}, "must be 2 or 3"),
    ],
)
def test_bad_layout_options_are_refused(tmp_path, options, match):
    url = str(tmp_path / "a.zarr")
    with pytest.raises(InvalidArgumentError, match=match):
        oocarr.save(np.zeros((4, 4)), url, **options)
    assert not os.path.exists(url)


def test_zarr_v2_has_no_bfloat16(tmp_path):
    with pytest.raises(UnsupportedDtypeError, match="bfloat16"):
        oocarr.create(str(tmp_path / "b.zarr"), (2,), BFLOAT16, zarr_format=2)


def test_a_copy_into_a_sharded_array_writes_each_shard_once_and_whole(tmp_path):
    """``save`` tiles a sharded destination in whole shards (``write_chunks``): no shard is
    read back and rewritten, and each is stored exactly once."""
    from oocarr_drivers import zarr_fsspec

    data = np.arange(64 * 48, dtype="f4").reshape(64, 48)
    stored: list[str] = []
    real_store = zarr_fsspec._store

    def counting(fs, blobs):
        stored.extend(blobs)
        real_store(fs, blobs)

    url = str(tmp_path / "s.zarr")
    with (
        mock.patch.object(zarr_fsspec, "_store", counting),
        mock.patch.object(zarr_fsspec, "_fetch", side_effect=AssertionError("read back")),
        oocarr.memory_budget("64KB"),
    ):
        x = oocarr.save(data, url, chunks=(8, 8), shards=(16, 24), compression="zstd")
    assert x.store.write_chunks == (16, 24) and x.store.chunks == (8, 8)
    assert sorted(stored) == sorted(set(stored)) and len(stored) == 4 * 2
    np.testing.assert_array_equal(zarr.open_array(url)[:], data)
