"""The hdf5 driver on fsspec URLs (moto's S3 server and ``memory://``): read-only, checked
against h5py and NumPy reading the local original."""

from __future__ import annotations

import io
import json
import pickle
import re
import subprocess
import sys
import uuid

import fsspec
import h5py
import hdf5plugin
import numpy as np
import pytest
from click.testing import CliRunner

import oocarr
from oocarr import errors
from oocarr.cli.main import main
from oocarr.store import Locator
from oocarr.store.registry import get_driver, guess_driver

SHAPE = (300, 200)
#: Datasets of the original file: name -> create_dataset keywords.
LAYOUTS = {
    "gzip": {"chunks": (64, 48), "compression": "gzip", "shuffle": True},
    "blosc": {"chunks": (64, 48), **hdf5plugin.Blosc(cname="lz4")},
    "raw": {"chunks": (64, 48)},
    "contiguous": {},
    "bitshuffle": {"chunks": (64, 48), **hdf5plugin.Bitshuffle()},  # HDF5 decodes: file object
}
REGIONS = [
    (slice(None), slice(None)),
    (slice(5, 77), slice(13, 190)),
    (slice(64, 128), slice(0, 200)),
    (slice(299, 300), slice(199, 200)),
    (slice(100, 250), slice(47, 49)),
]


def _values() -> np.ndarray:
    rng = np.random.default_rng(16)
    return np.cumsum(rng.standard_normal(SHAPE), axis=1).astype("f4")


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> str:
    """The local HDF5 file the remote copies are made from."""
    path = str(tmp_path_factory.mktemp("hdf5-remote") / "data.h5")
    values = _values()
    with h5py.File(path, "w") as f:
        for name, layout in LAYOUTS.items():
            f.create_dataset(name, data=values, **layout)
        f.create_dataset("g/complex", data=(values + 2j * values).astype("c8"))
        f.create_dataset("scalar", data=np.float64(2.5))
        f["g/complex"].attrs["units"] = "m"
        sparse = f.create_dataset("sparse", shape=SHAPE, dtype="i4", chunks=(64, 48))
        sparse[70:80, 50:60] = 7  # other chunks never written: HDF5's fill value
        f.create_dataset("bigendian", data=values.astype(">f8"), chunks=(100, 100))
    return path


@pytest.fixture(scope="module")
def s3_file(original, s3_server) -> tuple[str, dict]:
    import s3fs

    key = f"oocarr-test/hdf5-remote-{uuid.uuid4().hex[:8]}/data.h5"
    s3fs.S3FileSystem(skip_instance_cache=True, **s3_server).put(original, key)
    return f"s3://{key}", s3_server


@pytest.fixture(scope="module")
def memory_file(original) -> tuple[str, dict]:
    path = f"/hdf5-remote-{uuid.uuid4().hex[:8]}/data.h5"
    fsspec.filesystem("memory").put(original, path)
    return f"memory://{path}", {}


@pytest.fixture(params=["s3", "memory"])
def remote(request) -> tuple[str, dict]:
    """``(container URL, storage_options)`` of a remote copy of the original."""
    return request.getfixturevalue(f"{request.param}_file")


def _open(remote, name: str, **kwargs):
    url, options = remote
    return oocarr.open(f"{url}#/{name}", storage_options=options or None, **kwargs)


def _local(original, name: str, region=()) -> np.ndarray:
    with h5py.File(original, "r") as f:
        return f[name][region]


# ----------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------
@pytest.mark.parametrize("name", [*LAYOUTS, "sparse", "bigendian", "g/complex"])
def test_reads_match_h5py(remote, original, name):
    store = _open(remote, name).store
    assert store.name == "hdf5" and store.readonly
    expected = _local(original, name)
    assert store.shape == expected.shape and store.dtype == expected.dtype
    for region in REGIONS:
        np.testing.assert_array_equal(store[region], expected[region])
    np.testing.assert_array_equal(oocarr.to_numpy(_open(remote, name)), expected)


def test_a_scalar_and_metadata(remote, original):
    assert _open(remote, "scalar").store[()] == 2.5
    store = _open(remote, "g/complex").store
    assert store.attrs == {"units": "m"}
    assert store.chunks is None and store.compression is None
    gz = _open(remote, "gzip").store
    local = oocarr.open(f"{original}#/gzip").store
    assert (gz.chunks, gz.compression, gz.stored_nbytes) == (
        local.chunks,
        local.compression,
        local.stored_nbytes,
    )
    assert gz.initialized_chunks() == local.initialized_chunks()


@pytest.mark.parametrize("name", ["gzip", "blosc", "contiguous", "bitshuffle"])
def test_sum_matches_the_local_file(remote, original, name):
    got = np.asarray(oocarr.sum(_open(remote, name)))
    local = np.asarray(oocarr.sum(oocarr.open(f"{original}#/{name}")))
    assert got == local
    np.testing.assert_allclose(got, _local(original, name).sum(dtype="f8"), rtol=1e-5)
    by_axis = np.asarray(oocarr.sum(_open(remote, name), axis=0))
    np.testing.assert_allclose(by_axis, _local(original, name).sum(axis=0), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(
    "name, fetched", [("gzip", True), ("raw", True), ("contiguous", True), ("bitshuffle", False)]
)
def test_stored_bytes_come_from_ranged_requests(memory_file, original, monkeypatch, name, fetched):
    """Chunks the driver decodes (or copies) and contiguous data are fetched with ranged
    requests; Bitshuffle chunks are read by HDF5 through the file object."""
    from oocarr_drivers import hdf5_remote

    seen = []
    real = hdf5_remote.RemoteFile.fetch_batches

    def spy(self, ranges):
        seen.append(len(ranges))
        return real(self, ranges)

    monkeypatch.setattr(hdf5_remote.RemoteFile, "fetch_batches", spy)
    store = _open(memory_file, name).store
    np.testing.assert_array_equal(store[:], _local(original, name))
    assert bool(seen) == fetched
    if name != "contiguous" and fetched:
        assert seen == [math_chunks(SHAPE, store.chunks)]


def math_chunks(shape, chunks) -> int:
    return int(np.prod([-(-s // c) for s, c in zip(shape, chunks)]))


def test_requests_are_merged_and_batched(monkeypatch):
    from fsspec.implementations.memory import MemoryFileSystem

    from oocarr_drivers import hdf5_remote

    monkeypatch.setattr(hdf5_remote, "FETCH_BATCH_BYTES", 100)
    monkeypatch.setattr(hdf5_remote, "MAX_GAP", 400)
    data = bytes(range(256)) * 4
    fs = fsspec.filesystem("memory")
    path = f"/hdf5-remote-{uuid.uuid4().hex[:8]}/blob.bin"
    fs.pipe_file(path, data)
    remote = hdf5_remote.RemoteFile(Locator.make("hdf5", f"memory://{path}", "/x"))
    requests = []
    real = MemoryFileSystem.cat_file

    def spy(self, path, start=None, end=None, **kwargs):
        requests.append((start, end))
        return real(self, path, start=start, end=end, **kwargs)

    monkeypatch.setattr(MemoryFileSystem, "cat_file", spy)
    ranges = [(900, 1000), (0, 10), (10, 20), (500, 530)]
    batches = list(remote.fetch_batches(ranges))
    got = {i: bytes(b) for batch in batches for i, b in batch}
    assert got == {i: data[a:b] for i, (a, b) in enumerate(ranges)}
    # neighbours under MAX_GAP apart share a request; a batch ends past FETCH_BATCH_BYTES
    assert requests == [(0, 20), (500, 1000)]
    assert [sorted(i for i, _ in batch) for batch in batches] == [[1, 2], [0, 3]]


# ----------------------------------------------------------------------
# Locators, pickling, other processes
# ----------------------------------------------------------------------
def test_the_locator_carries_the_storage_options(s3_file):
    url, options = s3_file
    store = oocarr.open(f"{url}#/gzip", storage_options=options).store
    loc = store.locator
    assert (loc.driver, loc.url, loc.path, loc.options) == ("hdf5", url, "/gzip", options)
    assert Locator.from_dict(json.loads(loc.to_json())) == loc
    again = oocarr.open(Locator.from_dict(loc.to_dict())).store
    np.testing.assert_array_equal(again[:5], store[:5])


def test_pickled_arrays_reopen(remote, original):
    x = _open(remote, "blosc")
    y = pickle.loads(pickle.dumps(x))
    assert y.store.locator == x.store.locator and y.store is not x.store
    np.testing.assert_array_equal(oocarr.to_numpy(y), _local(original, "blosc"))
    store = pickle.loads(pickle.dumps(_open(remote, "contiguous").store.with_pages((50, 200))))
    assert store.page_shape == (50, 200)
    np.testing.assert_array_equal(store.read_block((1, 0)), _local(original, "contiguous")[50:100])


CHILD = """
import pickle, sys
import numpy as np
store = pickle.loads(sys.stdin.buffer.read())
np.save(sys.stdout.buffer, store[:])
"""


def test_another_process_reopens_by_locator(s3_file, original):
    url, options = s3_file
    store = oocarr.open(f"{url}#/gzip", storage_options=options).store
    store[:1]  # this process's file object stays here
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        input=pickle.dumps(store),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    np.testing.assert_array_equal(np.load(io.BytesIO(done.stdout)), _local(original, "gzip"))


EXIT_WITHOUT_CLOSING = """
import sys, fsspec, numpy as np, h5py, oocarr
with open(sys.argv[1], "rb") as f:
    fsspec.filesystem("memory").pipe_file("/exit/data.h5", f.read())
x = oocarr.open("memory:///exit/data.h5#/bitshuffle")
assert x.store[:3, :3].shape == (3, 3)
print("read")
"""


def test_the_interpreter_exits_cleanly_with_remote_files_open(original):
    """A remote file left open at exit is closed by the driver before HDF5's own exit handler,
    which would call into the Python file object while the interpreter is torn down."""
    done = subprocess.run(
        [sys.executable, "-c", EXIT_WITHOUT_CLOSING, original],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, b"read"), done.stderr.decode()[-2000:]


# ----------------------------------------------------------------------
# Routing, inspect
# ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "url",
    ["s3://b/x.h5", "gcs://b/d/x.hdf5", "https://h/x.nc", "memory://x.h5ad", "s3://b/y.zarr/x.h5"],
)
def test_remote_hdf5_urls_go_to_the_hdf5_driver(url):
    assert guess_driver(url, "/ds").name == "hdf5"


def test_inspect_json(s3_file, original):
    url, options = s3_file
    result = CliRunner().invoke(
        main, ["inspect", "--json", f"{url}#/gzip", "-o", json.dumps(options)]
    )
    assert result.exit_code == 0, (result.output, result.exception)
    info = json.loads(result.stdout)
    local = json.loads(CliRunner().invoke(main, ["inspect", "--json", f"{original}#/gzip"]).stdout)
    shown = info["locator"]["storage_options"]
    assert info["locator"]["url"] == url
    assert shown["client_kwargs"] == options["client_kwargs"]  # credentials are masked
    for key in ("shape", "dtype", "chunks", "compression", "stored_nbytes"):
        assert info[key] == local[key], key


def test_listing_a_remote_file(remote):
    url, options = remote
    found = get_driver("hdf5").list_arrays(url, "/g", options or None)
    assert [(e["path"], e["kind"]) for e in found] == [("/g/complex", "array")]
    assert found[0]["url"] == f"{url}#/g/complex"


# ----------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------
def test_a_missing_file(remote):
    url, options = remote
    missing = url.replace("data.h5", "missing.h5")
    with pytest.raises(errors.NotFoundError, match=re.escape(f"no file at {missing}#/x")):
        oocarr.open(f"{missing}#/x", storage_options=options or None)


def test_a_missing_dataset_lists_the_file(remote):
    with pytest.raises(errors.NotFoundError, match="no dataset /nope in .*datasets in the file: "):
        _open(remote, "nope")


def test_an_object_that_is_not_hdf5(remote, tmp_path):
    url, options = remote
    fs, path = fsspec.core.url_to_fs(url, **options)
    text = path.replace("data.h5", "text.h5")
    fs.pipe_file(text, b"this is not an HDF5 file\n" * 100)
    local = tmp_path / "text.h5"
    local.write_bytes(b"this is not an HDF5 file\n" * 100)
    with pytest.raises(
        errors.InvalidStoreError, match="the file is not in HDF5 format"
    ) as remote_err:
        oocarr.open(url.replace("data.h5", "text.h5") + "#/x", storage_options=options or None)
    with pytest.raises(errors.InvalidStoreError) as local_err:
        oocarr.open(f"{local}#/x")
    assert str(remote_err.value).split(": ", 1)[1] == str(local_err.value).split(": ", 1)[1]


def test_a_netcdf3_object_says_so(memory_file):
    url, _ = memory_file
    fs, path = fsspec.core.url_to_fs(url)
    fs.pipe_file(path.replace("data.h5", "classic.nc"), b"CDF\x01" + bytes(100))
    with pytest.raises(errors.InvalidStoreError, match="netCDF-3"):
        oocarr.open(url.replace("data.h5", "classic.nc") + "#/t")


def test_writes_are_refused(remote):
    url, options = remote
    opts = options or None
    zarr_url = url.replace("data.h5", "data.zarr")
    with pytest.raises(
        errors.ReadOnlyError, match=f"{re.escape(url)}#/gzip.*{re.escape(zarr_url)}#/gzip"
    ):
        oocarr.open(f"{url}#/gzip", mode="r+", storage_options=opts)
    with pytest.raises(errors.ReadOnlyError, match="Write the HDF5 file locally"):
        oocarr.create(f"{url}#/new", (4,), "f4", storage_options=opts)
    with pytest.raises(errors.ReadOnlyError, match="create an array there"):
        oocarr.save(np.zeros(3), f"{url}#/gzip", overwrite=True, storage_options=opts)
    new = url.replace("data.h5", "new.h5")
    with pytest.raises(errors.ReadOnlyError, match=re.escape(new)):
        oocarr.save(np.zeros(3), f"{new}#/x", storage_options=opts)
    fs, path = fsspec.core.url_to_fs(url, **options)
    assert not fs.exists(path.replace("data.h5", "new.h5"))
    store = _open(remote, "gzip").store
    with pytest.raises(errors.ReadOnlyError):
        store[0, 0] = 1.0
    with pytest.raises(errors.ReadOnlyError, match="delete it"):
        get_driver("hdf5").delete(store.locator)
    assert store[0, 0] == _values()[0, 0]


def test_storage_errors_pass_as_fsspec_raises_them(memory_file, monkeypatch):
    """A failed request is the filesystem's error (as the fsspec driver lets it through), with
    a note naming the URL, not a damaged file."""
    from fsspec.implementations.memory import MemoryFile, MemoryFileSystem

    url, _ = memory_file
    chunked = _open(memory_file, "gzip").store
    chunked[:1]
    fresh = oocarr.open(f"{url}#/bitshuffle").store

    def refused(*args, **kwargs):
        raise ConnectionResetError("connection reset by peer")

    monkeypatch.setattr(MemoryFileSystem, "cat_file", refused)
    with pytest.raises(ConnectionResetError) as err:
        chunked[:]
    assert any(url in note for note in err.value.__notes__)
    # HDF5 reads Bitshuffle chunks through the file object: its failure passes through h5py
    monkeypatch.setattr(MemoryFile, "readinto", refused)
    monkeypatch.setattr(MemoryFile, "read", refused)
    with pytest.raises(ConnectionResetError):
        fresh[:]
    monkeypatch.setattr(MemoryFileSystem, "_open", refused)
    copy = url.replace("data.h5", "copy.h5")
    fsspec.filesystem("memory").copy(url, copy)
    with pytest.raises(ConnectionResetError):
        oocarr.open(f"{copy}#/raw")


def test_external_links_are_not_followed_out_of_a_remote_file(tmp_path):
    target = tmp_path / "target.h5"
    with h5py.File(target, "w") as f:
        f["x"] = np.arange(3.0)
    source = tmp_path / "links.h5"
    with h5py.File(source, "w") as f:
        f["ext"] = h5py.ExternalLink(str(target), "/x")
    path = f"/hdf5-remote-{uuid.uuid4().hex[:8]}/links.h5"
    fsspec.filesystem("memory").put(str(source), path)
    with pytest.raises(errors.InvalidStoreError, match="external link.*no data outside a remote"):
        oocarr.open(f"memory://{path}#/ext")


def test_local_files_still_refuse_storage_options(original):
    with pytest.raises(errors.InvalidArgumentError, match="storage_options"):
        oocarr.open(f"{original}#/gzip", storage_options={"anon": True})
