"""Resources and life cycle: no leaked descriptors or deleted-but-held scratch, uncommitted
arrays discarded (with a ``ResourceWarning``) when dropped or left at exit, and the memmap
driver's typed errors for bad layouts and failing filesystems.

Oracles are independent of oocarr: ``/proc/self/fd`` entries and their link targets,
``os.listdir`` of the directory, ``numpy.load``, and the warnings and stderr of a subprocess.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import subprocess
import sys
import textwrap
import uuid
import warnings

import fsspec
import numpy as np
import pytest

import oocarr
from oocarr.errors import InvalidArgumentError, InvalidStoreError, ReadOnlyError, WriteError

pytestmark = pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc/self/fd (Linux)"
)


def _descriptors() -> list[str]:
    """What each open descriptor of this process points at."""
    out = []
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            out.append(os.readlink(f"/proc/self/fd/{name}"))
    return out


def _held_deleted() -> list[str]:
    return [target for target in _descriptors() if target.endswith("(deleted)")]


# ---------------------------------------------------------------------------
# Descriptors (issue 14 item 2)
# ---------------------------------------------------------------------------
def _npy(tmp_path):
    path = str(tmp_path / "a.npy")
    np.save(path, np.arange(64.0))
    return path, {}


def _raw(tmp_path):
    path = str(tmp_path / "a.bin")
    np.arange(64.0).tofile(path)
    return path, {"driver": "memmap", "shape": (64,), "dtype": "float64"}


def _h5(tmp_path):
    import h5py

    path = str(tmp_path / "a.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(64.0), chunks=(16,))
    return path + "#/x", {}


def _zarr(tmp_path):
    import zarr

    path = str(tmp_path / "a.zarr")
    zarr.create_array(path, shape=(64,), chunks=(16,), dtype="f8")[:] = np.arange(64.0)
    return path, {}


@pytest.mark.parametrize("make", [_npy, _raw, _h5, _zarr], ids=["npy", "raw", "hdf5", "zarr"])
@pytest.mark.parametrize("read", ["region", "view"])
def test_open_read_drop_leaks_no_descriptor(tmp_path, make, read):
    url, kwargs = make(tmp_path)
    gc.collect()
    before = len(_descriptors())
    for _ in range(100):
        x = oocarr.open(url, **kwargs)
        if read == "region":
            np.testing.assert_array_equal(x.store[0:2], [0.0, 1.0])
        else:
            np.testing.assert_array_equal(x.store.read_view((slice(0, 8),)), np.arange(8.0))
        del x
    gc.collect()
    assert len(_descriptors()) - before <= 2


def test_page_views_keep_the_descriptor_of_a_dropped_store(tmp_path):
    url, _ = _npy(tmp_path)
    view = oocarr.open(url).store.with_pages((8,))
    gc.collect()
    np.testing.assert_array_equal(view.read_block((1,)), np.arange(8.0, 16.0))
    del view
    gc.collect()
    assert not any(t == url for t in _descriptors())


def test_dropped_eager_outputs_free_their_scratch(tmp_path):
    x = oocarr.from_numpy(np.arange(4096.0))
    gc.collect()
    before = len(_held_deleted())
    for _ in range(20):
        y = x + 1
        assert float(np.asarray(y)[5]) == 6.0
        del y
    gc.collect()
    assert len(_held_deleted()) - before == 0


# ---------------------------------------------------------------------------
# Uncommitted arrays (issue 14 item 5)
# ---------------------------------------------------------------------------
def _existing_h5(directory) -> str:
    import h5py

    path = os.path.join(directory, "e.h5")
    with h5py.File(path, "w") as f:
        f.create_dataset("old", data=np.zeros(3))
    return path


PENDING_CASES = {
    "npy": lambda d: os.path.join(d, "c.npy"),
    "raw": lambda d: os.path.join(d, "c.bin"),
    "hdf5-new-file": lambda d: os.path.join(d, "c.h5") + "#/Z",
    "hdf5-existing-file": lambda d: _existing_h5(d) + "#/Z",
    "zarr-local": lambda d: os.path.join(d, "c.zarr"),
    "zarr-memory": lambda d: f"memory://pending-{uuid.uuid4().hex}/c.zarr",
}


def _exists(url: str) -> bool:
    container, _, inner = url.partition("#")
    if container.startswith("memory://"):
        return fsspec.filesystem("memory").exists(container[len("memory://") :])
    if not inner or not os.path.exists(container):
        return os.path.exists(container)
    import h5py

    with h5py.File(container, "r") as f:
        return inner in f


def _listing(directory: str, url: str) -> list[str]:
    if url.startswith("memory://"):
        root = url[len("memory://") :].split("/")[0]
        fs = fsspec.filesystem("memory")
        return fs.find(root) if fs.exists(root) else []
    return sorted(os.listdir(directory))


def _hdf5_members(url: str) -> list[str]:
    import h5py

    container = url.partition("#")[0]
    if not os.path.exists(container):
        return []
    with h5py.File(container, "r") as f:
        return sorted(f)


@pytest.mark.parametrize("case", list(PENDING_CASES))
def test_dropped_pending_array_is_discarded_with_a_warning(tmp_path, case):
    url = PENDING_CASES[case](str(tmp_path))
    kwargs = {"driver": "memmap"} if url.endswith(".bin") else {}
    listing, members = _listing(str(tmp_path), url), _hdf5_members(url)
    x = oocarr.create(url, (10,), "f4", **kwargs)
    x.store[:] = np.arange(10, dtype="f4")
    with pytest.warns(ResourceWarning, match=re.escape(url)):
        del x
        gc.collect()
    assert _listing(str(tmp_path), url) == listing
    assert _hdf5_members(url) == members
    assert not _exists(url)


def test_committed_array_does_not_warn(tmp_path):
    url = str(tmp_path / "c.npy")
    x = oocarr.create(url, (3,), "f4")
    x.store[:] = 1
    x.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        del x
        gc.collect()
    np.testing.assert_array_equal(np.load(url), np.ones(3, "f4"))


def test_page_view_keeps_a_pending_array(tmp_path):
    url = str(tmp_path / "c.npy")
    view = oocarr.create(url, (4,), "f4").store.with_pages((2,))
    gc.collect()  # the DiskArray and its store are gone; the view is not
    view.write_block((1,), np.ones(2, "f4"))
    view.close()
    np.testing.assert_array_equal(np.load(url), [0, 0, 1, 1])


def _run(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-W", "default", "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_pending_arrays_left_at_exit_are_discarded(tmp_path):
    cases = ["npy", "raw", "hdf5-new-file", "hdf5-existing-file", "zarr-local"]
    urls = [PENDING_CASES[case](str(tmp_path)) for case in cases]
    listing, members = _listing(str(tmp_path), urls[0]), _hdf5_members(urls[3])
    result = _run(
        f"""
        import numpy as np, oocarr
        kept = []
        for url in {urls!r}:
            raw = {{"driver": "memmap"}} if url.endswith(".bin") else {{}}
            x = oocarr.create(url, (10,), "f4", **raw)
            x.store[:] = np.arange(10, dtype="f4")
            kept += [x, x.store.with_pages((5,))]
        """
    )
    assert result.returncode == 0, result.stderr
    for url in urls:
        assert re.search(rf"ResourceWarning: {re.escape(url)} was created", result.stderr), url
        assert not _exists(url)
    assert "failed" not in result.stderr, result.stderr
    assert _listing(str(tmp_path), urls[0]) == listing
    assert _hdf5_members(urls[3]) == members


def test_forked_child_leaves_the_parents_pending_array_alone(tmp_path):
    url = str(tmp_path / "c.npy")
    result = _run(
        f"""
        import os, sys, numpy as np, oocarr
        x = oocarr.create({url!r}, (4,), "f4")
        x.store[:] = 7
        pid = os.fork()
        if pid == 0:
            del x
            sys.exit(0)  # runs the child's atexit hooks and collects its copy
        os.waitpid(pid, 0)
        x.close()
        """
    )
    assert result.returncode == 0, result.stderr
    assert "ResourceWarning" not in result.stderr, result.stderr
    np.testing.assert_array_equal(np.load(url), np.full(4, 7, "f4"))
    assert os.listdir(tmp_path) == ["c.npy"]


# ---------------------------------------------------------------------------
# Memmap layouts and failing filesystems (issue 14 item 10, memmap parts)
# ---------------------------------------------------------------------------
def _npy_with_header(path: str, shape: tuple[int, ...], data: bytes = bytes(64)) -> str:
    """A ``.npy`` file whose header claims ``shape`` (NumPy writes it; the data is ``data``)."""
    header = {"descr": "<f8", "fortran_order": False, "shape": shape}
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(data)
    return path


@pytest.mark.parametrize("shape", [(-5, 3), (3, -1), (2**62,), (2**62, 0), (0, 2**62)], ids=str)
def test_npy_header_with_impossible_shape_is_refused_at_open(tmp_path, shape):
    path = _npy_with_header(str(tmp_path / "h.npy"), shape)
    with pytest.raises(InvalidStoreError, match=re.escape(path)):
        oocarr.open(path)


@pytest.mark.parametrize(
    "options",
    [
        {"shape": "abc"},
        {"shape": -1},
        {"shape": (2, -1)},
        {"shape": True},
        {"shape": 8.5},
        {"shape": [[2]]},
        {"shape": (2**62, 2**62)},
        {"shape": 8, "offset": "x"},
        {"shape": 8, "offset": -3},
        {"shape": 8, "offset": (1, 2)},
    ],
    ids=repr,
)
def test_raw_layout_options_are_checked(tmp_path, options):
    path = str(tmp_path / "a.bin")
    np.arange(8.0).tofile(path)
    with pytest.raises(InvalidArgumentError, match=re.escape(path)):
        oocarr.open(path, driver="memmap", dtype="f8", **options)


@pytest.mark.parametrize("shape", ["2,4", "(2, 4)", "[2,4]", [2, 4], (np.int64(2), 4)])
def test_raw_shape_given_as_text_or_numbers(tmp_path, shape):
    path = str(tmp_path / "a.bin")
    np.arange(8.0).tofile(path)
    x = oocarr.open(path, driver="memmap", dtype="f8", shape=shape)
    np.testing.assert_array_equal(oocarr.to_numpy(x), np.fromfile(path).reshape(2, 4))


def test_cli_bad_raw_shape_is_a_usage_error(tmp_path):
    from click.testing import CliRunner

    from oocarr.cli.main import main

    path = str(tmp_path / "a.bin")
    np.arange(8.0).tofile(path)
    args = ["inspect", path, "--driver", "memmap", "-O", "shape=abc", "-O", "dtype=f8"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0
    assert isinstance(result.exception, SystemExit), result.exception  # a clean exit
    assert "shape='abc'" in result.output and path in result.output


def test_save_onto_a_directory_is_refused_before_copying(tmp_path, monkeypatch):
    source = oocarr.save(np.arange(1000.0), str(tmp_path / "src.npy")).store

    def no_copy(region, out):
        raise AssertionError("the source was read: the copy started")

    monkeypatch.setattr(source, "_read", no_copy)
    target = tmp_path / "x.npy"
    target.mkdir()
    before = sorted(os.listdir(tmp_path))
    for overwrite in (False, True):
        with pytest.raises(InvalidArgumentError, match=re.escape(str(target))):
            oocarr.save(source, str(target), overwrite=overwrite)
    assert sorted(os.listdir(tmp_path)) == before
    assert target.is_dir() and not os.listdir(target)


class SmallFs:
    """A 2 MiB tmpfs the test mounted; :meth:`read_only` remounts it read-only."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read_only(self) -> None:
        gc.collect()  # no descriptor open for writing may stay on it
        subprocess.run(["mount", "-o", "remount,ro", self.path], check=True)

    def temporaries(self) -> list[str]:
        return [n for n in os.listdir(self.path) if ".tmp-" in n]


@pytest.fixture
def small_fs(tmp_path):
    """A tiny filesystem to fill up or make read-only: mounting needs root, so the test is
    skipped where it is not permitted.

    (Helper 1's fixture; the lead may move it to conftest.py for other tests.)
    """
    mount_point = tmp_path / "fs"
    mount_point.mkdir()
    try:
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        pytest.skip(f"cannot mount a tmpfs to test full/read-only filesystems: {err}")
    if result.returncode != 0:
        pytest.skip(
            "cannot mount a tmpfs to test full/read-only filesystems (needs root): "
            + result.stderr.strip()
        )
    try:
        yield SmallFs(str(mount_point))
    finally:
        gc.collect()
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_full_disk_on_save_is_a_write_error_and_keeps_the_old_file(small_fs):
    path = os.path.join(small_fs.path, "a.npy")
    np.save(path, np.arange(1000.0))
    with pytest.raises(WriteError, match=re.escape(path)) as info:
        oocarr.save(np.ones(400_000), path, overwrite=True)
    assert "No space left" in str(info.value)
    np.testing.assert_array_equal(np.load(path), np.arange(1000.0))
    assert small_fs.temporaries() == []


def test_full_disk_on_update_is_a_write_error_and_keeps_the_old_values(small_fs):
    path = os.path.join(small_fs.path, "a.npy")
    np.save(path, np.arange(150_000.0))  # 1.2 MB: a second copy does not fit in 2 MiB
    x = oocarr.open(path, "r+")
    with pytest.raises(WriteError, match=re.escape(path)):
        oocarr.update(x, x + 1)
    np.testing.assert_array_equal(np.load(path), np.arange(150_000.0))
    assert small_fs.temporaries() == []


def test_read_only_filesystem_gives_read_only_errors_naming_the_url(small_fs):
    path = os.path.join(small_fs.path, "a.npy")
    np.save(path, np.arange(10.0))
    small_fs.read_only()
    attempts = {
        "save": lambda: oocarr.save(np.ones(3), os.path.join(small_fs.path, "b.npy")),
        "save overwrite": lambda: oocarr.save(np.ones(10), path, overwrite=True),
        "update": lambda: oocarr.update(oocarr.open(path, "r+"), oocarr.open(path) + 1),
        "attrs": lambda: oocarr.open(path, "r+").store.update_attrs({"units": "m"}),
    }
    for what, attempt in attempts.items():
        with pytest.raises(ReadOnlyError, match=re.escape(small_fs.path)):
            attempt()
        np.testing.assert_array_equal(np.load(path), np.arange(10.0), err_msg=what)
    assert sorted(n for n in os.listdir(small_fs.path) if not n.endswith(".lock")) == ["a.npy"]
