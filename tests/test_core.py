"""Unit tests of the core's pure pieces: locators, URLs, shapes, keys, compression, errors."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import oocarr
from oocarr import errors
from oocarr.store import pages, registry
from oocarr.store.compression import Compression, parse_compression
from oocarr.store.dtypes import as_dtype, byte_order, dtype_token
from oocarr.store.locator import Locator, is_local, split_url
from oocarr.store.regions import check_region, parse_key


@pytest.mark.parametrize(
    "url, expected",
    [
        ("a.h5#/g/x", ("a.h5", "/g/x")),
        ("a.h5#g//x/", ("a.h5", "/g/x")),
        ("a.h5#/", ("a.h5", "")),
        ("s3://b/a.zarr", ("s3://b/a.zarr", "")),
        ("zip::file:///t/a.zip#/arr", ("zip::file:///t/a.zip", "/arr")),
    ],
)
def test_split_url(url, expected):
    assert split_url(url) == expected


@pytest.mark.parametrize("url", ["", "#/x", "a.h5#/../x"])
def test_split_url_refuses_bad_urls(url):
    with pytest.raises(errors.InvalidUrlError):
        split_url(url)


def test_locator_is_hashable_and_round_trips():
    loc = Locator.make(
        "fsspec",
        "s3://b/a.zarr",
        "/x",
        {"client_kwargs": {"endpoint_url": "http://127.0.0.1:1"}, "anon": False},
        {"shape": [2, 3]},
    )
    same = Locator.make(
        "fsspec",
        "s3://b/a.zarr",
        "/x",
        {"anon": False, "client_kwargs": {"endpoint_url": "http://127.0.0.1:1"}},
        {"shape": [2, 3]},
    )
    assert loc == same and hash(loc) == hash(same) and len({loc, same}) == 1
    assert Locator.from_dict(loc.to_dict()) == loc
    assert pickle.loads(pickle.dumps(loc)) == loc
    assert loc.options["client_kwargs"]["endpoint_url"] == "http://127.0.0.1:1"
    assert loc.driver_kwargs == {"shape": [2, 3]}


def test_is_local():
    assert is_local("/a/b.npy") and is_local("rel.h5") and is_local("file:///a.zarr")
    assert not is_local("s3://b/x") and not is_local("memory://x") and not is_local("zip::a")


@pytest.mark.parametrize(
    "shape, itemsize, target, base, expected",
    [
        ((1000, 512), 4, 2**20, None, (512, 512)),
        ((10, 10), 8, 10**6, None, (10, 10)),
        ((100, 100, 100), 4, 4 * 100 * 100 * 3, None, (3, 100, 100)),
        ((100, 100), 4, 400, (7, 7), (7, 14)),
        ((5, 5), 4, 1, (3, 3), (3, 3)),
        ((0, 7), 4, 100, None, (1, 7)),
        ((), 4, 100, None, ()),
    ],
)
def test_grow_block(shape, itemsize, target, base, expected):
    block = pages.grow_block(shape, itemsize, target, base)
    assert block == expected
    if base:
        assert all(b % c == 0 or b == s for b, c, s in zip(block, base, shape))


def test_common_block_keeps_both_chunkings_whole():
    block = pages.common_block((1000, 64), 4, 10_000, (6, 64), (4, 64))
    assert block == (36, 64)


@pytest.mark.parametrize(
    "key",
    [
        0,
        -1,
        slice(None),
        (slice(1, 4), 2),
        (Ellipsis, slice(None, None, -2)),
        (slice(9, 1, -3),),
        (slice(3, 3), Ellipsis),
        (),
    ],
    ids=str,
)
def test_parse_key_matches_numpy(key):
    a = np.arange(60).reshape(6, 10)
    sel = parse_key(key, a.shape)
    got = a[sel.bounds][sel.post]
    assert np.array_equal(got, a[key]) and got.shape == sel.shape


@pytest.mark.parametrize("key", [[0, 1], np.array([True] * 6), None, 1.5, (0, 0, 0)])
def test_parse_key_refuses_non_basic_indexing(key):
    with pytest.raises((errors.InvalidArgumentError, IndexError)):
        parse_key(key, (6, 10))


def test_parse_key_out_of_bounds():
    with pytest.raises(IndexError, match="out of bounds"):
        parse_key(6, (6, 10))


def test_check_region():
    assert check_region(None, (2, 3), "u") == (slice(0, 2), slice(0, 3))
    for bad in [(slice(0, 3), slice(0, 3)), (slice(0, 1, 2), slice(0, 1)), (slice(0, 1),)]:
        with pytest.raises(errors.InvalidArgumentError, match="u"):
            check_region(bad, (2, 3), "u")


def test_parse_compression():
    assert parse_compression("gzip:6", {"gzip"}) == Compression("gzip", 6)
    assert parse_compression(("zstd", 3), {"zstd"}) == Compression("zstd", 3)
    assert parse_compression({"name": "lzf"}, {"lzf"}) == Compression("lzf")
    assert parse_compression(None, set()) is None
    with pytest.raises(errors.UnsupportedCompressionError, match="offers: gzip, lzf"):
        parse_compression("blosc", {"gzip", "lzf"}, url="a.h5#/x")
    with pytest.raises(errors.UnsupportedCompressionError, match="uncompressed"):
        parse_compression("gzip", set(), url="a.npy")
    with pytest.raises(errors.UnsupportedCompressionError, match="integer"):
        parse_compression("gzip:high", {"gzip"})


def test_dtypes():
    assert as_dtype("bfloat16").name == "bfloat16"
    assert as_dtype(dtype_token(np.dtype(">i8"))) == np.dtype(">i8")
    assert byte_order(np.dtype("<f8")) == "little" and byte_order(np.dtype("?")) == "none"
    for bad in ["U5", object, "M8[s]", "V8", [("a", "f4")]]:
        with pytest.raises(errors.UnsupportedDtypeError):
            as_dtype(bad)


def test_errors_are_also_builtin_exceptions():
    assert issubclass(errors.NotFoundError, FileNotFoundError)
    assert issubclass(errors.ReadOnlyError, PermissionError)
    assert issubclass(errors.AlreadyExistsError, FileExistsError)
    assert issubclass(errors.ShapeMismatchError, ValueError)
    assert issubclass(errors.BudgetTooSmallError, errors.OocarrError)
    assert errors.InvalidStoreError("x", url="a.h5").url == "a.h5"


def test_unknown_driver_and_unclaimed_url(tmp_path):
    with pytest.raises(errors.UnknownDriverError, match="nosuchdriver.*installed drivers"):
        oocarr.open(str(tmp_path / "a.npy"), driver="nosuchdriver")
    with pytest.raises(errors.UnknownDriverError, match="driver=NAME"):
        oocarr.open(str(tmp_path / "a.weird"))
    with pytest.raises(errors.UnknownDriverError):
        oocarr.open("gopher://host/a.bin")


def test_drivers_are_found_through_entry_points():
    names = registry.available_drivers()
    assert {"memmap", "hdf5", "fsspec", "testmem"} <= set(names)
    assert registry.get_driver("testmem").__module__ == "mem_driver"
    cls, loc = oocarr.resolve("mem://bucket/x")
    assert cls.name == "testmem" and loc.url == "mem://bucket/x"


def test_a_broken_driver_does_not_break_the_others(tmp_path, monkeypatch):
    dist = tmp_path / "broken-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[oocarr.drivers]\nbroken = no_such_module:X\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.refresh()
    try:
        with pytest.raises(errors.MissingDependencyError, match="pip install"):
            registry.get_driver("broken")
        x = oocarr.save(np.arange(3), str(tmp_path / "ok.npy"))
        assert x.store.name == "memmap"
    finally:
        monkeypatch.undo()
        registry.refresh()
