"""Storage failures while writing: full disks, read-only filesystems, damaged stores
(issue 14, items 10 and 11).

Each failure gives a typed oocarr error naming the URL, leaves what was stored before readable
(checked with h5py, zarr-python and NumPy) and leaves no temporary behind.  Full and read-only
filesystems are small tmpfs mounts made by the test (skipped where mounting is not allowed);
the HDF5 cases run in a subprocess, so a crash of the interpreter fails the test.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest
import zarr
from click.testing import CliRunner

import oocarr
from oocarr.cli.errors import EXIT_USAGE
from oocarr.cli.main import main
from oocarr.errors import InvalidStoreError, OocarrError, ReadOnlyError, WriteError


def _mount(path: pathlib.Path, options: str) -> None:
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or 'not permitted'})")


def _unmount(path: pathlib.Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB filesystem of its own (a tmpfs), unmounted afterwards."""
    path = tmp_path / "mnt"
    _mount(path, "size=1m")
    yield path
    _unmount(path)


def _read_only(path: pathlib.Path) -> None:
    done = subprocess.run(["mount", "-o", "remount,ro", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip("cannot remount the tmpfs read-only here")


def _leftovers(path: pathlib.Path) -> list[str]:
    """Hidden files anywhere under ``path`` (temporaries, reserves)."""
    return sorted(
        os.path.relpath(os.path.join(root, n), path)
        for root, dirs, files in os.walk(path)
        for n in dirs + files
        if n.startswith(".") and ".tmp-" in n or ".reserve-" in n
    )


def _run(script: str, prelude: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", prelude + textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _fill_after_reserve(filler: pathlib.Path) -> str:
    """Script lines that let the HDF5 driver's space check pass, then fill the disk (as another
    process writing meanwhile would), so that HDF5 itself runs out of space."""
    return textwrap.dedent(
        f"""
        import os
        import oocarr_drivers.hdf5 as H
        reserve, check = H._reserve, H._require_space
        def reserve_then_fill(path, url):
            f = open({str(filler)!r}, "ab", buffering=0)
            reserve(path, url)
            try:
                while True:
                    f.write(b"x" * 4096)
            except OSError:
                f.close()
        def check_once(path, nbytes, url):
            if (os.getpid(), path) not in H._RESERVES:
                check(path, nbytes, url)
        def fill_the_disk_after_the_check():
            H._reserve, H._require_space = reserve_then_fill, check_once
            H.SPACE_MARGIN = 64 * 1024
        """
    )


def _h5_values(path, name):
    with h5py.File(path, "r") as f:
        return f[name][...]


# ----------------------------------------------------------------------
# Item 11: HDF5 on a full disk, retried
# ----------------------------------------------------------------------
def test_hdf5_save_params_retried_on_a_full_disk_never_crashes(tiny_disk):
    url = tiny_disk / "ckpt.h5"
    done = _run(
        f"""
        import numpy as np, oocarr
        from oocarr.errors import WriteError
        url = {str(url)!r}
        oocarr.save_params({{"w": np.arange(1000.0)}}, url)
        for attempt in range(3):
            try:
                oocarr.save_params({{"w": np.ones(200_000), "b": np.zeros(10)}}, url)
            except WriteError as err:
                assert url in str(err) and "no space left" in str(err), err
                print("refused")
        """
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["refused"] * 3
    np.testing.assert_array_equal(_h5_values(url, "slot0/params/w"), np.arange(1000.0))
    with h5py.File(url, "r") as f:
        f.visit(lambda name: None)  # the metadata is whole
        assert not [n for n in f if n.startswith(".")]
    np.testing.assert_array_equal(oocarr.load_params(str(url))["w"], np.arange(1000.0))
    assert not _leftovers(tiny_disk)


def test_hdf5_disk_filled_by_another_writer_midway(tiny_disk):
    """The disk fills up after the free-space check (another process wrote meanwhile): HDF5
    fails inside, the file is closed without crashing and the temporary dataset removed."""
    url = tiny_disk / "ckpt.h5"
    filler = tiny_disk / "filler"
    done = _run(
        f"""
        import numpy as np, oocarr
        from oocarr.errors import WriteError
        url = {str(url)!r}
        oocarr.save_params({{"w": np.arange(1000.0)}}, url)
        fill_the_disk_after_the_check()
        try:
            oocarr.save_params({{"w": np.full(5000, 2.0)}}, url)
        except WriteError as err:
            assert "no space left" in str(err) and url in str(err), err
            assert "refused" not in str(err), err  # HDF5 itself ran out of space
            print("failed cleanly")
        """,
        _fill_after_reserve(filler),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["failed", "cleanly"]
    with h5py.File(url, "r") as f:
        f.visit(lambda name: None)
        assert not [n for n in f if n.startswith(".")], list(f)
    np.testing.assert_array_equal(_h5_values(url, "slot0/params/w"), np.arange(1000.0))
    assert not _leftovers(tiny_disk)


def test_hdf5_in_place_write_when_the_disk_fills_midway(tiny_disk):
    """An array opened with mode='r+' whose writes need new space (compressed chunks) when
    another process fills the disk: a WriteError, no crash, the file whole afterwards."""
    url = tiny_disk / "r.h5"
    with h5py.File(url, "w") as f:
        f["a"] = np.arange(100.0)
        f.create_dataset("z", shape=(100_000,), dtype="f8", chunks=(1000,), compression="gzip")
    done = _run(
        f"""
        import numpy as np, oocarr
        from oocarr.errors import WriteError
        fill_the_disk_after_the_check()
        x = oocarr.open({str(url)!r} + "#/z", "r+")
        try:
            x.store[:] = np.random.default_rng(0).random(100_000)
        except WriteError as err:
            assert "no space left" in str(err) and "refused" not in str(err), err
            print("refused")
        x.store.close()
        print(x.store[:3])
        """,
        _fill_after_reserve(tiny_disk / "filler"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[0] == "refused"
    with h5py.File(url, "r") as f:
        f.visit(lambda name: None)
        np.testing.assert_array_equal(f["a"][...], np.arange(100.0))
    assert not _leftovers(tiny_disk)


def test_hdf5_dataset_into_a_full_file_is_refused_before_writing(tiny_disk):
    path = tiny_disk / "data.h5"
    with h5py.File(path, "w") as f:
        f["a"] = np.arange(100.0)
    with pytest.raises(WriteError, match="no space left") as err:
        oocarr.save(np.ones(300_000), f"{path}#/b")
    assert str(path) in str(err.value)
    with h5py.File(path, "r") as f:
        assert list(f) == ["a"]
        np.testing.assert_array_equal(f["a"][...], np.arange(100.0))
    assert not _leftovers(tiny_disk)


# ----------------------------------------------------------------------
# Item 10: Zarr and checkpoints on full and read-only filesystems
# ----------------------------------------------------------------------
def test_zarr_save_and_update_on_a_full_disk(tiny_disk):
    old = tiny_disk / "a.zarr"
    oocarr.save(np.arange(1000.0), str(old), chunks=(100,))
    with pytest.raises(WriteError, match="no space left") as err:
        oocarr.save(np.ones(300_000), str(tiny_disk / "big.zarr"), chunks=(10_000,))
    assert str(tiny_disk / "big.zarr") in str(err.value)
    with pytest.raises(WriteError, match="no space left"):
        oocarr.save(np.ones(300_000), str(old), chunks=(10_000,), overwrite=True)
    x = oocarr.open(str(old), "r+")
    big = oocarr.from_numpy(np.ones(1000))
    filler = tiny_disk / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"x" * 4096)
        except OSError:
            pass
    with pytest.raises(WriteError, match="no space left") as err:
        x.update_(big + 1.0)
    assert str(old) in str(err.value)
    np.testing.assert_array_equal(
        np.asarray(zarr.open_array(str(old), mode="r")[...]), np.arange(1000.0)
    )
    assert sorted(n for n in os.listdir(tiny_disk) if not n.endswith(".lock")) == [
        "a.zarr",
        "filler",
    ]
    assert not _leftovers(tiny_disk)


@pytest.mark.parametrize("name", ["ck.zarr", "ck", "ck.h5"])
def test_save_params_on_a_full_disk_names_the_url(tiny_disk, name):
    url = str(tiny_disk / name)
    oocarr.save_params({"w": np.arange(10.0)}, url)
    with pytest.raises(WriteError, match="(?i)no space left") as err:
        oocarr.save_params({"w": np.ones(300_000)}, url)
    assert url in str(err.value)
    np.testing.assert_array_equal(oocarr.load_params(url)["w"], np.arange(10.0))
    assert not _leftovers(tiny_disk)


def test_read_only_filesystem_gives_read_only_errors(tiny_disk):
    oocarr.save(np.arange(10.0), str(tiny_disk / "a.zarr"), chunks=(5,))
    for name in ("ck.zarr", "ck", "ck.h5"):
        oocarr.save_params({"w": np.arange(3.0)}, str(tiny_disk / name))
    _read_only(tiny_disk)
    with pytest.raises(ReadOnlyError, match="read-only") as err:
        oocarr.save(np.ones(10), str(tiny_disk / "b.zarr"))
    assert str(tiny_disk / "b.zarr") in str(err.value)
    x = oocarr.open(str(tiny_disk / "a.zarr"), "r+")
    with pytest.raises(ReadOnlyError, match=str(tiny_disk / "a.zarr")):
        x.store[0:5] = np.ones(5)
    with pytest.raises(ReadOnlyError, match=str(tiny_disk / "a.zarr")):
        x.update_(x + 1.0)
    for name in ("ck.zarr", "ck", "ck.h5"):
        with pytest.raises(ReadOnlyError) as err:
            oocarr.save_params({"w": np.ones(3)}, str(tiny_disk / name))
        assert str(tiny_disk / name) in str(err.value)
    np.testing.assert_array_equal(
        np.asarray(zarr.open_array(str(tiny_disk / "a.zarr"), mode="r")[...]), np.arange(10.0)
    )


def test_errors_of_the_os_become_oocarr_errors():
    assert issubclass(WriteError, OocarrError) and issubclass(ReadOnlyError, OocarrError)


# ----------------------------------------------------------------------
# Damaged stores
# ----------------------------------------------------------------------
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_zarr_chunk_that_is_a_directory_is_a_corrupt_chunk(tmp_path, compression):
    path = tmp_path / "a.zarr"
    oocarr.save(np.arange(8.0), str(path), chunks=(2,), compression=compression)
    os.remove(path / "c" / "1")
    (path / "c" / "1" / "x").mkdir(parents=True)
    with pytest.raises(InvalidStoreError, match="c/1"):
        oocarr.open(str(path)).store[:]
    x = oocarr.open(str(path), "r+")
    with pytest.raises(InvalidStoreError, match="c/1"):
        x.store[2] = 5.0
    with pytest.raises(InvalidStoreError, match="c/1"):
        x.store[2:4] = [5.0, 5.0]
    assert (path / "c" / "1" / "x").is_dir()


def test_convert_blames_a_corrupt_source_not_the_destination(tmp_path):
    src = tmp_path / "h.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("x", data=np.arange(40_000.0), chunks=(1000,), compression="gzip")
    with h5py.File(src, "r") as f:
        offset = f["x"].id.get_chunk_info(3).byte_offset
    with open(src, "r+b") as f:
        f.seek(offset)
        f.write(b"\xff" * 200)
    dst = tmp_path / "out.zarr"
    result = CliRunner().invoke(main, ["convert", f"{src}#/x", str(dst)])
    assert result.exit_code == EXIT_USAGE, result.output
    assert "failed while writing" not in result.output
    assert f"{src}#/x" in result.output
    assert not dst.exists()


def test_reserve_files_of_dead_processes_are_swept(tmp_path):
    path = tmp_path / "d.h5"
    oocarr.save(np.arange(3.0), f"{path}#/a")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    stale = tmp_path / f".d.h5.reserve-{int(dead.stdout)}"
    stale.write_bytes(b"\0" * 4096)
    oocarr.save(np.arange(4.0), f"{path}#/b")
    assert not stale.exists()
    assert not [n for n in os.listdir(tmp_path) if ".reserve-" in n]
    np.testing.assert_array_equal(_h5_values(path, "b"), np.arange(4.0))
