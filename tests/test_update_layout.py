"""``update_`` (and the optimizers' in-place updates) change an array's values, never its layout.

Issue 14, item 6: after ``x.update_(x + 1)`` the stored array keeps its chunks, compression and
attributes, as zarr-python and h5py read them back.
"""

from __future__ import annotations

import json
import os

import h5py
import jax
import numpy as np
import pytest

import oocarr


def _zarr_layout(path: str) -> tuple[tuple[int, ...], list[str], dict]:
    zarr = pytest.importorskip("zarr")
    arr = zarr.open_array(path, mode="r")
    with open(os.path.join(path, "zarr.json"), encoding="utf-8") as f:
        codecs = [c["name"] for c in json.load(f)["codecs"]]
    return tuple(arr.chunks), codecs, dict(arr.attrs)


def test_zarr_update_keeps_chunks_compression_and_attrs(tmp_path):
    path = str(tmp_path / "a.zarr")
    data = np.arange(200_000, dtype="f4")
    oocarr.save(data, path, chunks=(65536,), compression="zstd", attrs={"units": "m"})
    before = _zarr_layout(path)
    assert before[0] == (65536,) and "zstd" in before[1]

    x = oocarr.open(path, mode="r+")
    x.update_(x + 1)
    x.update_(x * 2)

    assert _zarr_layout(path) == before
    np.testing.assert_array_equal(__import__("zarr").open_array(path, mode="r")[:], (data + 1) * 2)


def test_hdf5_update_keeps_chunks_filters_and_attrs(tmp_path):
    path = str(tmp_path / "a.h5")
    data = np.arange(30_000, dtype="f8").reshape(3000, 10)
    oocarr.save(data, path + "#/g/x", chunks=(500, 10), compression="gzip:3", attrs={"units": "s"})
    with h5py.File(path, "r") as f:
        ds = f["g/x"]
        before = (ds.chunks, ds.compression, ds.compression_opts, dict(ds.attrs))
    assert before[:3] == ((500, 10), "gzip", 3)

    x = oocarr.open(path + "#/g/x", mode="r+")
    jax.jit(lambda a: a.update_(a - 1.5))(x)

    with h5py.File(path, "r") as f:
        ds = f["g/x"]
        assert (ds.chunks, ds.compression, ds.compression_opts, dict(ds.attrs)) == before
        np.testing.assert_array_equal(ds[...], data - 1.5)


def test_npy_update_keeps_attrs(tmp_path):
    path = str(tmp_path / "a.npy")
    data = np.linspace(0, 1, 1000, dtype="f4")
    oocarr.save(data, path, attrs={"note": "kept"})
    x = oocarr.open(path, mode="r+")
    x.update_(x + 1)
    assert oocarr.open(path).attrs == {"note": "kept"}
    np.testing.assert_array_equal(np.load(path), data + 1)


def test_optimizer_in_place_update_keeps_the_parameters_layout(tmp_path):
    optax = pytest.importorskip("optax")
    path = str(tmp_path / "w.zarr")
    w0 = np.ones((4096, 4), "f4")
    oocarr.save(w0, path, chunks=(1024, 4), compression="zstd", attrs={"role": "weights"})
    before = _zarr_layout(path)
    w = oocarr.open(path, mode="r+")
    opt = oocarr.optim.blockwise(optax.sgd(0.5))
    state = opt.init(w)
    grad = oocarr.from_numpy(np.full((4096, 4), 2.0, "f4"))
    updates, state = opt.update(grad, state, w)
    oocarr.optim.apply_updates(w, updates)
    assert _zarr_layout(path) == before
    np.testing.assert_allclose(oocarr.to_numpy(oocarr.open(path)), w0 - 1.0)
