"""The Array API's set functions and nonzero (oocarr.api.sets) against NumPy, streamed over
inputs cut into several tiles by a small memory budget; eager only, refused under jit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oocarr
from oocarr import errors
from oocarr.api import sets as xs
from stored_arrays import same as same_within
from stored_arrays import skip_slow, stored

BUDGET = 4 * 4 * 24


def same(got, want, tol=0.0):
    """Shape, dtype and values, exactly unless told a tolerance."""
    same_within(got, want, tol)


def numpy_unique(a):
    """NumPy's unique_all, with each NaN apart as the standard says."""
    return np.unique(a, return_index=True, return_inverse=True, return_counts=True, equal_nan=False)


def with_nans(shape, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(-3, 4, shape).astype(np.float32)
    a.flat[rng.choice(a.size, 3, replace=False)] = np.nan
    a.flat[rng.choice(a.size, 2, replace=False)] = -0.0
    return a


def test_unique_values_matches_numpy_on_every_driver(backend):
    skip_slow(backend)
    ints = np.random.default_rng(1).integers(0, 9, (9, 6, 5)).astype(np.int32)
    floats = with_nans((7, 5))
    x, y = stored(backend, ints), stored(backend, floats)
    with oocarr.memory_budget(BUDGET):
        same(xs.unique_values(x), np.unique(ints))
        same(xs.unique_values(y), np.unique(floats, equal_nan=False))


@pytest.mark.parametrize(
    "a",
    [
        with_nans((9, 6, 5)),
        np.random.default_rng(2).integers(0, 50, (11, 7)).astype(np.int16),
        np.random.default_rng(3).normal(size=40).astype(np.float32),
        np.random.default_rng(4).integers(0, 2, (6, 5)).astype(bool),
        np.array([np.nan, np.nan, 1.0], np.float32),
    ],
    ids=["nans", "int16", "distinct", "bool", "only-nans"],
)
def test_unique_all_matches_numpy(a):
    values, indices, inverse, counts = numpy_unique(a)
    index = np.dtype(jnp.unique_all(jnp.zeros(2)).indices.dtype)
    with oocarr.memory_budget(BUDGET):
        x = oocarr.from_numpy(a)
        result = xs.unique_all(x)
        assert result._fields == ("values", "indices", "inverse_indices", "counts")
        same(result.values, values)
        same(result.indices, indices.astype(index))
        same(result.inverse_indices, inverse.reshape(a.shape).astype(index))
        same(result.counts, counts.astype(index))
        counted = xs.unique_counts(x)
        same(counted.values, values)
        same(counted.counts, counts.astype(index))
        inverted = xs.unique_inverse(x)
        same(inverted.values, values)
        same(inverted.inverse_indices, inverse.reshape(a.shape).astype(index))


def test_unique_takes_in_memory_and_chunked_inputs():
    a = with_nans((9, 8), seed=5)
    values, indices, inverse, counts = numpy_unique(a)
    chunked = oocarr.save(a, "memory://oocarr-sets-test/a.zarr", chunks=(4, 3))
    with oocarr.memory_budget(BUDGET):
        for x in (a, jnp.asarray(a), chunked):
            result = xs.unique_all(x)
            same(result.values, values)
            same(result.indices, indices.astype(np.int32))
            same(result.inverse_indices, inverse.reshape(a.shape).astype(np.int32))


def test_unique_of_empty_and_0d_arrays():
    empty = xs.unique_inverse(np.zeros((3, 0), np.float32))
    same(empty.values, np.zeros(0, np.float32))
    same(empty.inverse_indices, np.zeros((3, 0), np.int32))
    scalar = xs.unique_all(np.float32(2.5))
    same(scalar.values, np.array([2.5], np.float32))
    same(scalar.inverse_indices, np.array(0, np.int32))


@settings(max_examples=20, deadline=None, derandomize=True)
@given(
    shape=st.lists(st.integers(1, 7), min_size=1, max_size=3),
    density=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**16),
)
def test_nonzero_and_unique_inverse_match_numpy(shape, density, seed):
    rng = np.random.default_rng(seed)
    a = np.where(rng.random(shape) < density, rng.integers(1, 4, shape), 0).astype(np.float32)
    with oocarr.memory_budget(BUDGET):
        x = oocarr.from_numpy(a)
        got = xs.nonzero(x)
        assert len(got) == a.ndim
        for g, w in zip(got, np.nonzero(a)):
            same(g, w.astype(np.int32))
        same(
            xs.unique_inverse(x).inverse_indices,
            numpy_unique(a)[2].reshape(a.shape).astype(np.int32),
        )


def test_nonzero_of_chunked_bool_and_empty_arrays():
    flags = np.random.default_rng(6).random((9, 6, 5)) < 0.3
    chunked = oocarr.save(flags, "memory://oocarr-sets-test/flags.zarr", chunks=(4, 3, 2))
    with oocarr.memory_budget(BUDGET):
        for g, w in zip(xs.nonzero(chunked), np.nonzero(flags)):
            same(g, w.astype(np.int32))
        for g in xs.nonzero(np.zeros((4, 5))):
            same(g, np.zeros(0, np.int32))
        same(xs.nonzero(np.array([0.0, np.nan, -0.0, 2.0]))[0], np.array([1, 3], np.int32))


def test_nonzero_refuses_0d_arrays():
    with pytest.raises(errors.InvalidArgumentError, match="0-d"):
        xs.nonzero(oocarr.from_numpy(np.array(1.0)))


@pytest.mark.parametrize("name", ["unique_values", "unique_counts", "unique_all", "nonzero"])
def test_set_functions_refuse_jit_naming_the_function(name):
    x = oocarr.from_numpy(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    fn = getattr(xs, name)
    with pytest.raises(errors.NotSupportedError, match=f"{name}.*outside jit"):
        jax.jit(fn)(x)
    with pytest.raises(errors.NotSupportedError, match=name):
        jax.jit(lambda v: fn(v * 2.0))(jnp.ones(3))
    with pytest.raises(errors.NotSupportedError, match=name):
        jax.jit(lambda: fn(x))()


def test_unique_inverse_refuses_jit():
    x = oocarr.from_numpy(np.arange(4.0, dtype=np.float32))
    with pytest.raises(errors.NotSupportedError, match="unique_inverse"):
        jax.jit(xs.unique_inverse)(x)
