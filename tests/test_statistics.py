"""var, std, count_nonzero, the nan-reductions and astype against NumPy (values) and
jax.numpy (gradients), on every driver, with shapes cut into several uneven tiles."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import oocarr
from oocarr import errors
from stored_arrays import skip_slow, stored

BUDGET = 4 * 4 * 24
AXES = [None, 0, 1, (0, 1), -1]


def axes_for(backend):
    """Every axis choice on one driver; on the others, the ones that cut tiles differently
    (the reductions are the engine's, tested on every driver in test_ops.py)."""
    return AXES if backend.id == "memmap-npy" else [None, 0]


def same(got, want, tol=1e-5):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def features(shape=(13, 6), seed=0, nans=False):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 3 + 50
    if nans:
        a[2, 1] = a[5, :2] = np.nan
        a[:, 4] = np.nan  # a column with nothing but NaNs
    return a


def test_var_and_std_match_numpy(backend):
    skip_slow(backend)
    a = features()
    x = stored(backend, a)
    with oocarr.memory_budget(BUDGET):
        for axis in axes_for(backend):
            for correction in (0, 1):
                for keepdims in (False, True):
                    kw = {"axis": axis, "keepdims": keepdims}
                    same(oocarr.var(x, correction=correction, **kw), a.var(ddof=correction, **kw))
                    same(oocarr.std(x, correction=correction, **kw), a.std(ddof=correction, **kw))
        same(x.var(axis=0), a.var(axis=0))
        same(x.std(), a.std())


def test_nan_reductions_match_numpy(backend):
    skip_slow(backend)
    a = features(nans=True)
    x = stored(backend, a)
    with oocarr.memory_budget(BUDGET), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's all-NaN slices
        for axis in axes_for(backend):
            for name in ("nansum", "nanmean", "nanmax", "nanmin"):
                same(getattr(oocarr, name)(x, axis=axis), getattr(np, name)(a, axis=axis))
            for name in ("nanvar", "nanstd"):
                same(
                    getattr(oocarr, name)(x, axis=axis, correction=1, keepdims=True),
                    getattr(np, name)(a, axis=axis, ddof=1, keepdims=True),
                )


def test_integer_inputs_and_count_nonzero(backend):
    skip_slow(backend)
    a = np.random.default_rng(1).integers(-2, 3, (11, 5)).astype(np.int32)
    x = stored(backend, a)
    with oocarr.memory_budget(BUDGET):
        for axis in axes_for(backend):
            same(oocarr.count_nonzero(x, axis=axis), np.count_nonzero(a, axis=axis))
            same(oocarr.var(x, axis=axis), a.astype(np.float32).var(axis=axis))
            same(oocarr.nanmax(x, axis=axis), np.nanmax(a, axis=axis))
            same(oocarr.nansum(x, axis=axis), np.nansum(a, axis=axis))
        same(oocarr.count_nonzero(x > 0, axis=1, keepdims=True), (a > 0).sum(1, keepdims=True))


def test_gradients_match_jax_numpy():
    a = features((9, 5), seed=2)
    a_nan = features((9, 5), seed=3)
    a_nan[1, 1] = a_nan[4, 3] = np.nan
    x, y = oocarr.from_numpy(a), oocarr.from_numpy(a_nan)
    cases = [
        (lambda v: oocarr.sum(oocarr.var(v, axis=0)), lambda v: jnp.sum(jnp.var(v, axis=0)), x, a),
        (lambda v: oocarr.std(v, correction=1), lambda v: jnp.std(v, ddof=1), x, a),
        (lambda v: oocarr.nansum(v), jnp.nansum, y, a_nan),
        (
            lambda v: oocarr.sum(oocarr.nanmean(v, axis=1)),
            lambda v: jnp.sum(jnp.nanmean(v, axis=1)),
            y,
            a_nan,
        ),
        (lambda v: oocarr.nanvar(v), jnp.nanvar, y, a_nan),
    ]
    with oocarr.memory_budget(BUDGET):
        for ours, theirs, stored_value, value in cases:
            want = np.asarray(jax.grad(theirs)(value))
            assert not np.isnan(want).any()
            for transform in (jax.grad, lambda f: jax.jit(jax.grad(f))):
                got = np.asarray(transform(ours)(stored_value))
                assert not np.isnan(got).any()
                same(got, want, 1e-4)


@pytest.mark.parametrize("source", ["float16", "int16", "uint8", "bool", "float32"])
def test_astype_matches_numpy(source, backend):
    skip_slow(backend)
    a = (np.random.default_rng(4).standard_normal((10, 7)) * 20).astype(source)
    x = stored(backend, a)
    with oocarr.memory_budget(BUDGET):
        for target in ("float32", "int32", "bool", "float16", "uint8"):
            got = oocarr.astype(x, target)
            want = np.asarray(jnp.asarray(a).astype(target))
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(np.asarray(got), want)
        assert x.astype(source, copy=False) is x
        assert x.astype(source) is not x


def test_astype_fuses_under_jit_and_writes_nothing(tmp_path):
    a = np.random.default_rng(5).standard_normal((40, 8)).astype(np.float16)
    x = oocarr.save(a, str(tmp_path / "half.npy"))

    def loss(w):
        return oocarr.sum(oocarr.square(x.astype("float32") * w))

    with oocarr.memory_budget(BUDGET), oocarr.io_stats() as stats:
        value, grad = jax.jit(jax.value_and_grad(loss))(jnp.float32(0.5))
    wide = a.astype(np.float32)
    np.testing.assert_allclose(float(value), float(np.sum((wide * 0.5) ** 2)), rtol=1e-4)
    np.testing.assert_allclose(float(grad), float(np.sum(2 * 0.5 * wide**2)), rtol=1e-4)
    assert stats.total.bytes_written == 0
    g = jax.grad(lambda v: oocarr.sum(v.astype("float32") * 2.0))(oocarr.from_numpy(a))
    assert g.dtype == np.float16 and np.all(np.asarray(g) == 2.0)


def test_bad_arguments_are_named():
    x = oocarr.from_numpy(np.ones((3, 2), np.float32))
    with pytest.raises(errors.InvalidArgumentError, match="correction"):
        oocarr.var(x, correction=-1)
    with pytest.raises(errors.InvalidArgumentError, match="cannot cast to 'object'"):
        oocarr.astype(x, "object")
    with pytest.raises(errors.InvalidArgumentError, match="device"):
        oocarr.astype(x, "float32", device="cpu")
    with pytest.raises(errors.InvalidArgumentError, match="axis 2 is out of bounds"):
        oocarr.std(x, axis=2)
