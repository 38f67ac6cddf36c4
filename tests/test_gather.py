"""Integer-array and boolean-mask indexing and ``take`` against NumPy (values) and jax.numpy
(gradients), eager and under jit; reads in sorted order; jax.numpy given a DiskArray."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import oocarr
from oocarr import errors
from stored_arrays import skip_slow, stored

BUDGET = 4 * 4 * 24

KEYS = [
    np.array([6, 0, 3, 3, -1]),
    [4, 0, 2],
    (slice(None), [4, 0, 2]),
    (..., np.array([3, 1])),
    (1, slice(None), [0, 3]),
    (slice(1, None, 2), None, [2, 2]),
    (slice(None), np.array([[1, 0], [4, 4]])),
    ([0, 2], 1),
]


def data(shape=(7, 5, 4)):
    return np.random.default_rng(0).normal(size=shape).astype(np.float32)


def test_integer_array_index_on_every_driver(backend):
    skip_slow(backend)
    a = data()
    x = stored(backend, a)
    with oocarr.memory_budget(BUDGET):
        for key in KEYS[:3]:
            np.testing.assert_array_equal(np.asarray(x[key]), a[key])


@pytest.mark.parametrize("key", KEYS, ids=range(len(KEYS)))
def test_integer_array_index_matches_numpy_eager_jit_and_grad(key):
    a = data()
    x = oocarr.from_numpy(a)
    want = a[tuple(key) if isinstance(key, tuple) else (key,)]
    with oocarr.memory_budget(BUDGET):
        got = x[key]
        assert got.shape == want.shape
        np.testing.assert_array_equal(np.asarray(got), want)
        np.testing.assert_array_equal(np.asarray(jax.jit(lambda x: x[key])(x)), want)
        grad = jax.grad(lambda x: oocarr.sum(x[key] * x[key]))(x)
    keys = key if isinstance(key, tuple) else (key,)
    jkey = tuple(np.array(k) if isinstance(k, list) else k for k in keys)  # jnp takes no lists
    want_grad = jax.grad(lambda x: jnp.sum(x[jkey] * x[jkey]))(jnp.asarray(a))
    np.testing.assert_allclose(np.asarray(grad), want_grad, rtol=1e-6)


def test_boolean_masks_match_numpy():
    a = data()
    x = oocarr.from_numpy(a)
    with oocarr.memory_budget(BUDGET):
        for mask in [a > 0, a[:, :, 0] > 0.3, a[0, :, 0] > 0]:
            key = mask if mask.ndim > 1 else (slice(None), mask)
            np.testing.assert_array_equal(np.asarray(x[key]), a[key])
            stored_mask = oocarr.from_numpy(mask)
            skey = stored_mask if mask.ndim > 1 else (slice(None), stored_mask)
            np.testing.assert_array_equal(np.asarray(x[skey]), a[key])
        # a mask known when tracing works under jit, with its gradient
        mask = a[:, :, 1] < 0
        np.testing.assert_array_equal(np.asarray(jax.jit(lambda x: x[mask])(x)), a[mask])
        grad = jax.grad(lambda x: oocarr.sum(x[mask]))(x)
    np.testing.assert_array_equal(np.asarray(grad), np.broadcast_to(mask[..., None], a.shape))


def test_zero_dimensional_masks_add_an_axis_as_in_numpy():
    a = data((2, 3))
    x = oocarr.from_numpy(a)
    for key in [np.True_, np.False_, (Ellipsis, np.True_), (0, np.False_), True, (0, True, 1)]:
        want = a[key]
        got = x[key]
        assert got.shape == want.shape
        np.testing.assert_array_equal(np.asarray(got), want)


def test_masks_under_jit_that_are_not_known_when_tracing_are_refused():
    x = oocarr.from_numpy(data())
    mask = oocarr.from_numpy(data() > 0)
    with pytest.raises(errors.NotSupportedError, match="oocarr.where"):
        jax.jit(lambda x, m: x[m])(x, mask)
    with pytest.raises(errors.NotSupportedError, match="oocarr.where"):
        jax.jit(lambda x, m: x[m])(x, jnp.asarray(data() > 0))


def test_bad_indices_raise_oocarr_errors():
    x = oocarr.from_numpy(data())
    with pytest.raises(errors.InvalidArgumentError, match="out of bounds"):
        np.asarray(x[[0, 7]])
    with pytest.raises(errors.ShapeMismatchError, match="does not match"):
        x[np.ones((7, 4), bool)]
    with pytest.raises(errors.NotSupportedError, match="one integer array"):
        x[[0, 1], [1, 2]]
    with pytest.raises(errors.InvalidArgumentError, match="integers or booleans"):
        x[np.array([0.5])]
    with pytest.raises(errors.InvalidArgumentError, match="axis= is required"):
        oocarr.take(x, [0])


def test_take_matches_numpy_and_reads_rows_in_sorted_runs():
    a = np.arange(4000, dtype=np.float32).reshape(1000, 4)
    x = oocarr.from_numpy(a)
    idx = np.array([999, 3, 500, 4, 3, 998, 5])
    with oocarr.memory_budget(64 * 1024), oocarr.io_stats() as stats:
        got = oocarr.take(x, idx, axis=0)
    np.testing.assert_array_equal(np.asarray(got), np.take(a, idx, axis=0))
    # three runs (3..5, 500, 998..999): 6 distinct rows of 16 bytes, and the indices
    assert stats.total.bytes_read <= 16 * 6 + idx.nbytes, stats.total.bytes_read
    np.testing.assert_array_equal(
        np.asarray(oocarr.take(x, np.array([1, -1]), axis=1)), a[:, [1, -1]]
    )


@pytest.mark.parametrize("call", ["sum", "exp", "mean"])
def test_jax_numpy_on_a_disk_array_names_the_oocarr_function(call):
    x = oocarr.from_numpy(data())
    fn = getattr(jnp, call)
    for run in (fn, jax.jit(fn)):
        with pytest.raises(errors.JaxNumpyArgumentError, match=f"oocarr.{call}"):
            run(x)
    with pytest.raises(TypeError, match="requires ndarray") as caught:
        jnp.add(None, 1)  # JAX's own errors stay JAX's
    assert not isinstance(caught.value, errors.OocarrError)
