"""The public storage API: open, create, save, from_numpy, to_numpy and scratch storage."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

import oocarr
from oocarr import errors
from oocarr.store import scratch


def test_from_numpy_without_url_uses_scratch_and_cleans_up():
    x = oocarr.from_numpy(np.arange(10, dtype=np.int32))
    path = x.store.locator.url
    assert path.startswith(oocarr.scratch_dir()) and os.path.exists(path)
    assert np.array_equal(np.asarray(x), np.arange(10)) and np.asarray(x).dtype == np.int32
    assert np.array_equal(np.load(path), np.arange(10))
    del x
    gc.collect()
    assert not os.path.exists(path)


def test_from_numpy_to_a_url_keeps_the_file(tmp_path):
    url = str(tmp_path / "f.h5") + "#/a/b"
    x = oocarr.from_numpy(np.eye(3), url, compression="gzip")
    del x
    gc.collect()
    assert np.array_equal(oocarr.to_numpy(oocarr.open(url)), np.eye(3))


def test_to_numpy_accepts_every_kind_of_array(tmp_path):
    import jax.numpy as jnp

    data = np.arange(6.0).reshape(2, 3)
    x = oocarr.save(data, str(tmp_path / "a.npy"))
    for value in (x, x.store, data, jnp.asarray(data), data.tolist()):
        assert np.array_equal(oocarr.to_numpy(value), data)


def test_save_streams_tiles_and_keeps_chunks(tmp_path):
    src = oocarr.save(np.arange(1000.0).reshape(100, 10), str(tmp_path / "s.h5#/x"), chunks=(7, 10))
    out = oocarr.save(src, str(tmp_path / "d.zarr"), tile_bytes=800)
    assert out.chunks == (7, 10)
    assert np.array_equal(oocarr.to_numpy(out), np.arange(1000.0).reshape(100, 10))
    flat = oocarr.save(src, str(tmp_path / "d.npy"))
    assert flat.chunks is None
    with pytest.raises(errors.InvalidArgumentError, match="contiguously"):
        oocarr.save(src, str(tmp_path / "e.npy"), chunks=(5, 5))


def test_create_validates_arguments(tmp_path):
    url = str(tmp_path / "a.zarr")
    with pytest.raises(errors.InvalidArgumentError, match="negative"):
        oocarr.create(url, (-1, 2), "f4")
    with pytest.raises(errors.InvalidArgumentError, match="chunks"):
        oocarr.create(url, (4, 2), "f4", chunks=(2,))
    with pytest.raises(errors.UnsupportedDtypeError):
        oocarr.create(url, (4,), "U3")
    with pytest.raises(errors.UnsupportedCompressionError, match="gzip"):
        oocarr.create(str(tmp_path / "a.npy"), (4,), "f4", compression="gzip")
    with pytest.raises(errors.InvalidArgumentError, match="attrs"):
        oocarr.create(url, (4,), "f4", attrs={"bad": object()})
    with pytest.raises(errors.InvalidArgumentError, match="mode"):
        oocarr.open(url, mode="w")
    assert not os.path.exists(url)


def test_open_reports_the_url_of_what_is_missing(tmp_path):
    url = str(tmp_path / "nothing.npy")
    with pytest.raises(errors.NotFoundError, match="nothing.npy"):
        oocarr.open(url)


def test_ram_backed_scratch_is_refused_unless_allowed(monkeypatch, tmp_path):
    monkeypatch.setattr(scratch, "is_ram_backed", lambda path: True)
    with pytest.raises(errors.InvalidArgumentError, match="RAM-backed"):
        oocarr.set_scratch_dir(str(tmp_path))
    oocarr.set_scratch_dir(str(tmp_path), allow_ram=True)
    try:
        assert oocarr.scratch_dir() == str(tmp_path)
    finally:
        oocarr.set_scratch_dir(None)
    monkeypatch.setenv("OOCARR_SCRATCH_DIR", str(tmp_path / "env"))
    with pytest.raises(errors.InvalidArgumentError, match="OOCARR_SCRATCH_DIR"):
        oocarr.scratch_dir()


def test_ram_detection_reads_the_mount_table():
    if not os.path.exists("/proc/mounts"):
        pytest.skip("Linux only")
    with open("/proc/mounts") as f:
        mounts = [line.split() for line in f]
    ram = [m[1] for m in mounts if m[2] == "tmpfs" and os.path.isdir(m[1])]
    disk = [m[1] for m in mounts if m[2] in ("ext4", "xfs", "btrfs") and os.path.isdir(m[1])]
    if ram:
        assert scratch.is_ram_backed(ram[0])
    if disk:
        assert not scratch.is_ram_backed(disk[0])


def test_importing_oocarr_imports_no_storage_library():
    code = (
        "import sys, oocarr; "
        "print(sorted(m for m in ('h5py', 'fsspec', 'zarr') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_scratch_array_lives_as_long_as_its_store_or_views():
    store = oocarr.from_numpy(np.arange(6.0)).store
    view = store.with_pages((2,))
    path = store.locator.url
    gc.collect()
    assert np.array_equal(view.read_block((1,)), [2.0, 3.0])
    del store
    gc.collect()
    assert os.path.exists(path)
    del view
    gc.collect()
    assert not os.path.exists(path)


def test_an_owned_array_rebound_by_update_keeps_its_storage():
    w = oocarr.from_numpy(np.zeros(4, np.float32))
    path = w.locator.url
    for _ in range(3):
        w = oocarr.update(w, w + 1.0)  # the old handle is dropped here
        gc.collect()
    assert np.array_equal(np.asarray(w), np.full(4, 3.0, np.float32))
    step = jax.jit(lambda v: oocarr.update(v, v * 2.0))
    w = step(w)
    gc.collect()
    assert np.array_equal(np.asarray(w), np.full(4, 6.0, np.float32))
    del w
    gc.collect()
    assert not os.path.exists(path)


def test_reading_a_jitted_result_waits_for_its_callback(monkeypatch):
    import time

    from oocarr.engine import OOCAlgorithm

    slow_write = OOCAlgorithm._write_tile

    def write_later(self, *args, **kwargs):
        time.sleep(0.3)
        return slow_write(self, *args, **kwargs)

    monkeypatch.setattr(OOCAlgorithm, "_write_tile", write_later)
    x = oocarr.from_numpy(np.arange(8.0, dtype=np.float32))
    y = jax.jit(lambda v: v * 3.0)(x)
    assert np.array_equal(np.asarray(y), np.arange(8.0, dtype=np.float32) * 3.0)
