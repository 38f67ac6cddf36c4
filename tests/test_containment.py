"""Writes stay inside the container the user named (issue 14, items 8 and 12).

A copy is refused when its destination lies inside its source's storage or holds it
(``convert a.zarr a.zarr/b.zarr``); a write is refused when it would go through a symbolic
link, an HDF5 external link or HDF5 external raw storage to a file outside the container;
``follow_external=False`` refuses reads through them too.  Stored data are made and checked
with NumPy, h5py, zarr-python and the raw bytes of the files, never with oocarr's readers.
"""

from __future__ import annotations

import os
import shutil

import h5py
import numpy as np
import pytest
import zarr
from click.testing import CliRunner

import oocarr
from oocarr.cli.errors import EXIT_USAGE
from oocarr.cli.main import main
from oocarr.errors import InvalidArgumentError, InvalidStoreError, ReadOnlyError
from oocarr.store.containment import check_apart
from oocarr.store.locator import Locator


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _zarr_values(path, **kwargs):
    return np.asarray(zarr.open_array(str(path), mode="r", **kwargs)[...])


# ----------------------------------------------------------------------
# Item 8: a destination inside (or holding) its source
# ----------------------------------------------------------------------
def test_convert_into_its_own_source_is_refused(tmp_path):
    outer = tmp_path / "outer.zarr"
    oocarr.save(np.arange(8.0), str(outer), chunks=(2,))
    before = sorted(os.listdir(outer / "c"))
    result = _cli("convert", outer, outer / "inner.zarr")
    assert result.exit_code == EXIT_USAGE, result.output
    assert str(outer) in result.output and str(outer / "inner.zarr") in result.output
    assert "Traceback" not in result.output
    assert not (outer / "inner.zarr").exists()
    assert sorted(os.listdir(outer / "c")) == before
    np.testing.assert_array_equal(_zarr_values(outer), np.arange(8.0))


def test_convert_over_a_container_of_the_source_is_refused(tmp_path):
    outer = tmp_path / "outer.zarr"
    oocarr.save(np.arange(4.0), str(outer), chunks=(2,))
    inner = outer / "inner.zarr"
    zarr.create_array(str(inner), data=np.arange(6.0), chunks=(3,), zarr_format=3)
    result = _cli("convert", inner, outer, "--overwrite")
    assert result.exit_code == EXIT_USAGE, result.output
    assert "contains the source" in result.output
    np.testing.assert_array_equal(_zarr_values(inner), np.arange(6.0))
    np.testing.assert_array_equal(_zarr_values(outer), np.arange(4.0))


def test_convert_through_a_symlink_to_the_source_is_refused(tmp_path):
    outer = tmp_path / "outer.zarr"
    oocarr.save(np.arange(4.0), str(outer), chunks=(2,))
    link = tmp_path / "link.zarr"
    os.symlink(outer, link)
    result = _cli("convert", link, outer / "x.zarr")
    assert result.exit_code == EXIT_USAGE, result.output
    assert not (outer / "x.zarr").exists()


@pytest.mark.parametrize(
    "src, dst",
    [
        ("a.zarr", "a.zarr/b.zarr"),
        ("a.zarr", "a.zarr#/g/x"),
        ("g.zarr#/x", "g.zarr#/x/y"),
        ("g.zarr#/x/y", "g.zarr#/x"),
        ("f.h5#/g", "f.h5#/g/x"),
        ("f.h5#/g/x", "f.h5#/g"),
        ("f.h5#/x", "f.h5#/x"),
        ("d/w.npy", "d/w.npy"),
        ("ck/slot0/params/w.npy", "ck"),
    ],
)
def test_api_save_refuses_nested_storage(tmp_path, src, dst):
    container, _, inner = src.partition("#")
    os.makedirs(tmp_path / os.path.dirname(container), exist_ok=True)
    url = str(tmp_path / src)
    if container.endswith(".h5"):
        with h5py.File(tmp_path / container, "a") as f:
            f.create_dataset(inner, data=np.arange(3.0))
    else:
        oocarr.save(np.arange(3.0), url)
    source = oocarr.open(url)
    driver = "fsspec" if dst == "ck" else None
    with pytest.raises(InvalidArgumentError) as err:
        oocarr.save(source, str(tmp_path / dst), overwrite=True, driver=driver)
    assert source.store.url in str(err.value)
    np.testing.assert_array_equal(np.asarray(source.store[:]), np.arange(3.0))


def test_api_save_into_a_sibling_in_the_same_file_or_group_works(tmp_path):
    h5 = tmp_path / "data.h5"
    with h5py.File(h5, "w") as f:
        f["a"] = np.arange(5.0)
    oocarr.save(oocarr.open(f"{h5}#/a"), f"{h5}#/b")
    with h5py.File(h5, "r") as f:
        np.testing.assert_array_equal(f["b"][...], np.arange(5.0))
    group = tmp_path / "g.zarr"
    oocarr.save(np.arange(4.0), f"{group}#/a", chunks=(2,))
    oocarr.save(oocarr.open(f"{group}#/a"), f"{group}#/b")
    np.testing.assert_array_equal(_zarr_values(group / "b"), np.arange(4.0))
    result = _cli("convert", f"{h5}#/a", f"{h5}#/c")
    assert result.exit_code == 0, result.output


def test_check_apart_compares_fsspec_paths_per_filesystem():
    a = Locator.make("fsspec", "memory://x/a.zarr")
    check_apart(a, Locator.make("fsspec", "memory://x/b.zarr"))
    check_apart(a, Locator.make("fsspec", "s3://x/a.zarr/b.zarr"))
    with pytest.raises(InvalidArgumentError, match="is inside"):
        check_apart(a, Locator.make("fsspec", "memory://x//a.zarr/./b.zarr"))
    bucket = Locator.make("fsspec", "s3://bkt/a.zarr", "", {"endpoint_url": "http://one"})
    check_apart(
        bucket, Locator.make("fsspec", "s3://bkt/a.zarr/b", "", {"endpoint_url": "http://2"})
    )
    with pytest.raises(InvalidArgumentError):
        check_apart(
            bucket, Locator.make("fsspec", "s3a://bkt/a.zarr/b", "", {"endpoint_url": "http://one"})
        )


def test_overwriting_an_array_that_holds_another_one_is_refused(tmp_path):
    outer = tmp_path / "outer.zarr"
    oocarr.save(np.arange(4.0), str(outer), chunks=(2,))
    inner = outer / "inner.zarr"
    zarr.create_array(str(inner), data=np.arange(6.0), chunks=(3,), zarr_format=3)
    with pytest.raises(InvalidArgumentError, match="inner.zarr"):
        oocarr.save(np.zeros(4), str(outer), overwrite=True)
    result = _cli("convert", f"{tmp_path / 'other.zarr'}", outer, "--overwrite")
    assert result.exit_code != 0
    other = tmp_path / "src.zarr"
    oocarr.save(np.ones(4), str(other))
    result = _cli("convert", other, outer, "--overwrite")
    assert result.exit_code == EXIT_USAGE and "inner.zarr" in result.output, result.output
    np.testing.assert_array_equal(_zarr_values(inner), np.arange(6.0))
    np.testing.assert_array_equal(_zarr_values(outer), np.arange(4.0))
    shutil.rmtree(inner)
    oocarr.save(np.zeros(4), str(outer), overwrite=True)  # nothing foreign left: replaced
    np.testing.assert_array_equal(_zarr_values(outer), np.zeros(4))


# ----------------------------------------------------------------------
# Item 12: links out of the container
# ----------------------------------------------------------------------
@pytest.fixture
def zarr_with_outside_chunk(tmp_path):
    path = tmp_path / "a.zarr"
    oocarr.save(np.arange(8.0), str(path), chunks=(2,))
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.move(path / "c" / "1", outside / "chunk1")
    os.symlink(outside / "chunk1", path / "c" / "1")
    return path, outside / "chunk1"


def test_zarr_write_through_a_chunk_symlink_is_refused(zarr_with_outside_chunk):
    path, target = zarr_with_outside_chunk
    before = target.read_bytes()
    x = oocarr.open(str(path), "r+")
    np.testing.assert_array_equal(x.store[:], np.arange(8.0))  # reads follow, as zarr does
    for key, value in [(slice(2, 3), 9.0), (slice(2, 4), [9.0, 9.0]), (slice(0, 8), np.zeros(8))]:
        with pytest.raises(ReadOnlyError) as err:
            x.store[key] = value
        assert str(path / "c" / "1") in str(err.value) and str(target) in str(err.value)
    assert target.read_bytes() == before
    assert os.path.islink(path / "c" / "1")
    np.testing.assert_array_equal(_zarr_values(path), np.arange(8.0))


def test_zarr_follow_external_false_refuses_reads_through_links(zarr_with_outside_chunk):
    path, target = zarr_with_outside_chunk
    x = oocarr.open(str(path), follow_external=False)
    np.testing.assert_array_equal(x.store[4:8], np.arange(4.0, 8.0))
    with pytest.raises(InvalidStoreError, match="follow_external"):
        x.store[0:4]
    with pytest.raises(InvalidArgumentError, match="follow_external"):
        oocarr.open(str(path), follow_external="no")


def test_zarr_write_through_a_symlinked_chunk_directory_is_refused(tmp_path):
    path = tmp_path / "b.zarr"
    oocarr.save(np.arange(8.0), str(path), chunks=(2,), compression="zstd")
    outside = tmp_path / "elsewhere"
    shutil.move(path / "c", outside)
    os.symlink(outside, path / "c")
    before = {n: (outside / n).read_bytes() for n in os.listdir(outside)}
    x = oocarr.open(str(path), "r+")
    with pytest.raises(ReadOnlyError, match="symbolic link"):
        x.store[0:2] = [5.0, 5.0]
    with pytest.raises(ReadOnlyError):
        x.store[7] = 1.0
    assert {n: (outside / n).read_bytes() for n in os.listdir(outside)} == before
    np.testing.assert_array_equal(_zarr_values(path), np.arange(8.0))


def test_zarr_update_replaces_the_link_not_its_target(zarr_with_outside_chunk):
    path, target = zarr_with_outside_chunk
    before = target.read_bytes()
    x = oocarr.open(str(path), "r+")
    x.update_(x + 1.0)
    assert target.read_bytes() == before
    np.testing.assert_array_equal(_zarr_values(path), np.arange(8.0) + 1)


@pytest.fixture
def h5_with_links(tmp_path):
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["y"] = np.arange(4.0)
    raw = tmp_path / "raw.bin"
    raw.write_bytes(np.arange(10.0, 14.0).tobytes())
    main_file = tmp_path / "main.h5"
    with h5py.File(main_file, "w") as f:
        f["x"] = h5py.ExternalLink(str(other), "/y")
        f["g"] = h5py.ExternalLink(str(other), "/")
        f.create_dataset("e", shape=(4,), dtype="f8", external=[(str(raw), 0, 32)])
    return main_file, other, raw


@pytest.mark.parametrize("name", ["x", "g/y", "e"])
def test_hdf5_write_outside_the_file_is_refused(h5_with_links, name):
    main_file, other, raw = h5_with_links
    before = other.read_bytes(), raw.read_bytes()
    url = f"{main_file}#/{name}"
    expected = np.arange(10.0, 14.0) if name == "e" else np.arange(4.0)
    np.testing.assert_array_equal(oocarr.to_numpy(oocarr.open(url)), expected)  # reads follow
    with pytest.raises(ReadOnlyError) as err:
        oocarr.open(url, "r+")
    assert str(main_file) in str(err.value)
    assert ("raw.bin" if name == "e" else "other.h5") in str(err.value)
    with pytest.raises(InvalidStoreError, match="follow_external"):
        oocarr.open(url, follow_external=False)
    assert (other.read_bytes(), raw.read_bytes()) == before


def test_hdf5_create_through_an_external_group_link_is_refused(h5_with_links):
    main_file, other, _ = h5_with_links
    before = other.read_bytes()
    with pytest.raises(ReadOnlyError, match="external link"):
        oocarr.save(np.zeros(3), f"{main_file}#/g/new")
    assert other.read_bytes() == before
    with h5py.File(other, "r") as f:
        assert list(f) == ["y"]


def test_hdf5_follow_external_false_reads_plain_datasets(tmp_path):
    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(3.0)
    x = oocarr.open(f"{path}#/x", follow_external=False)
    np.testing.assert_array_equal(x.store[:], np.arange(3.0))


def test_npy_symlink_is_read_through_but_never_written_through(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "real.npy"
    np.save(target, np.arange(6.0))
    before = target.read_bytes()
    link = tmp_path / "data" / "a.npy"
    link.parent.mkdir()
    os.symlink(target, link)

    np.testing.assert_array_equal(oocarr.to_numpy(oocarr.open(str(link))), np.arange(6.0))
    with pytest.raises(ReadOnlyError, match="symbolic link"):
        oocarr.open(str(link), mode="r+")
    with pytest.raises(InvalidStoreError, match="follow_external=False"):
        oocarr.open(str(link), follow_external=False)
    assert target.read_bytes() == before  # oracle: the outside file's own bytes
    np.testing.assert_array_equal(np.load(target), np.arange(6.0))
