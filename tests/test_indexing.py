"""NumPy indexing on DiskArrays against NumPy: new axes (None), ellipsis, eagerly (views that
share the storage) and under jax.jit and jax.grad (a tile-by-tile copy), on every driver."""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import oocarr
from stored_arrays import skip_slow, stored
from subprocess_rss import run_script

BUDGET = 4 * 4 * 24

KEYS = [
    (slice(None), None),
    None,
    (None, Ellipsis, 2),
    (1, None, slice(2, 5)),
    (Ellipsis, None),
    (None, None, 0, slice(1, 3)),
    (slice(1, 3), None, Ellipsis, None),
    (Ellipsis, None, -1),
]


def test_new_axes_and_ellipsis_eager_and_traced(backend):
    skip_slow(backend)
    a = np.arange(7 * 6, dtype=np.float32).reshape(7, 6)
    x = stored(backend, a)
    with oocarr.memory_budget(BUDGET):
        for key in KEYS:
            want = a[key]
            view = x[key]
            assert isinstance(view, oocarr.DiskArray) and view.shape == want.shape, key
            np.testing.assert_array_equal(np.asarray(view), want)
            np.testing.assert_array_equal(view.store[...], want)
            traced = jax.jit(lambda u, key=key: u[key] * 2.0)(x)
            np.testing.assert_array_equal(np.asarray(traced), want * 2.0)


def test_a_column_vector_and_its_gradient():
    y = np.arange(9, dtype=np.float32)
    w = np.linspace(-1, 1, 3).astype(np.float32)
    x = oocarr.from_numpy(y)
    with oocarr.memory_budget(BUDGET):
        col = x[:, None]
        assert col.shape == (9, 1)
        np.testing.assert_array_equal(np.asarray(col * w), y[:, None] * w)
        grad = jax.grad(lambda u: oocarr.sum(oocarr.square(u[:, None] * w)))(x)
        want = jax.grad(lambda u: jnp.sum(jnp.square(u[:, None] * w)))(y)
        np.testing.assert_allclose(np.asarray(grad), np.asarray(want), rtol=1e-5)
        traced = jax.jit(jax.grad(lambda u: oocarr.sum(oocarr.square(u[None, :, None] * 1.5))))(x)
        np.testing.assert_allclose(np.asarray(traced), 2 * 1.5**2 * y, rtol=1e-5)


def test_writing_through_a_view_with_new_axes(tmp_path):
    x = oocarr.save(np.zeros((4, 3), np.float32), str(tmp_path / "x.npy"), mode="r+")
    view = x[None, 1:3, None]
    assert view.shape == (1, 2, 1, 3)
    view.store[...] = np.ones((1, 2, 1, 3), np.float32)
    want = np.zeros((4, 3), np.float32)
    want[1:3] = 1
    np.testing.assert_array_equal(np.asarray(x), want)


@pytest.mark.parametrize("key", [(Ellipsis, Ellipsis), (None, 0, 0, 0), (slice(None),) * 3])
def test_bad_keys_raise_like_numpy(key):
    x = oocarr.from_numpy(np.zeros((2, 3)))
    with pytest.raises(IndexError):
        x[key]


STRIDED = [
    slice(None, None, 2),
    slice(None, None, -1),
    (slice(1, 9, 3), slice(None, None, -2)),
    (Ellipsis, slice(3, 0, -2)),
    (slice(None, None, -3), 0),
    slice(8, 2, -1),
    (2, slice(None, None, 2)),
    (slice(None, None, 3), None),
    (slice(None, None, -1), slice(None, None, -1)),
    slice(5, 5, -1),
]


def test_steps_and_negative_steps_eager_traced_and_differentiated(backend):
    skip_slow(backend)
    a = np.arange(10 * 4, dtype=np.float32).reshape(10, 4)
    x = stored(backend, a)
    with oocarr.memory_budget(BUDGET):
        for key in STRIDED:
            want = a[key]
            view = x[key]
            assert view.shape == want.shape, key
            np.testing.assert_array_equal(np.asarray(view), want)
            traced = jax.jit(lambda u, key=key: u[key] * 1.0)(x)
            np.testing.assert_array_equal(np.asarray(traced), want)
            grad = jax.jit(jax.grad(lambda u, key=key: oocarr.sum(oocarr.square(u[key]))))(x)
            expected = jax.grad(lambda u, key=key: jnp.sum(jnp.square(u[key])))(a)
            np.testing.assert_array_equal(np.asarray(grad), np.asarray(expected))


def test_a_strided_view_is_read_only_and_a_zero_step_is_refused(tmp_path):
    x = oocarr.save(np.zeros((6, 2), np.float32), str(tmp_path / "x.npy"), mode="r+")
    with pytest.raises(oocarr.errors.InvalidArgumentError, match="strided view"):
        x[::2].store[...] = np.ones((3, 2), np.float32)
    with pytest.raises(oocarr.errors.InvalidArgumentError, match="step cannot be zero"):
        x[::0]


@pytest.mark.memory
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_a_strided_sum_stays_within_the_budget(tmp_path):
    path = str(tmp_path / "big.npy")
    big = np.lib.format.open_memmap(path, mode="w+", dtype="f4", shape=(64 * 1024, 256))
    for start in range(0, big.shape[0], 8192):
        big[start : start + 8192] = np.arange(start, start + 8192, dtype=np.float32)[:, None]
    big.flush()
    del big
    report = run_script(STRIDED_SUM, path, str(8 * 10**6))
    rows = np.arange(64 * 1024, dtype=np.float64)[::-3]
    assert report["total"] == pytest.approx(256 * rows.sum(), rel=1e-6)
    assert report["eager"] == pytest.approx(256 * rows.sum(), rel=1e-6)
    assert report["growth"] <= 1.25 * 8 * 10**6, f"peaked {report['growth'] / 1e6:.1f} MB"


STRIDED_SUM = """
import json, sys
import jax
import numpy as np
import oocarr
x = oocarr.open(sys.argv[1])
small = oocarr.from_numpy(np.ones((64, 8), "f4"))  # compiles the same kinds of programs
float(oocarr.sum(small[::-3]))
float(jax.jit(lambda u: oocarr.sum(u[::-3]))(small))
baseline = peak_rss()
with oocarr.memory_budget(int(sys.argv[2])):
    total = float(jax.jit(lambda u: oocarr.sum(u[::-3]))(x))
    eager = float(oocarr.sum(x[::-3]))
print(json.dumps({"total": total, "eager": eager, "growth": peak_rss() - baseline}))
"""
