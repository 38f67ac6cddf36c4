"""The Array API's creation functions, tril and triu (oocarr.api.creation), against NumPy (values)
and jax.numpy (default dtypes, gradients), eager and under jit, on shapes cut into several
tiles by a small memory budget."""

from __future__ import annotations

import gc
import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import oocarr
from oocarr import errors
from oocarr.api import creation as xc
from stored_arrays import same as same_within
from stored_arrays import skip_slow, stored

BUDGET = 4 * 4 * 24


def same(got, want, tol=0.0):
    """Shape, dtype and values, exactly unless told a tolerance."""
    same_within(got, want, tol)


def values(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


# ----------------------------------------------------------------------------
# tril / triu
# ----------------------------------------------------------------------------
def test_tril_triu_match_numpy_on_every_driver(backend):
    skip_slow(backend)
    a = values((2, 9, 6))
    x = stored(backend, a)
    with oocarr.memory_budget(BUDGET):
        for k in (-3, 0, 2):
            same(xc.tril(x, k=k), np.tril(a, k))
            same(xc.triu(x, k=k), np.triu(a, k))
        same(jax.jit(lambda x: xc.tril(x, k=1))(x), np.tril(a, 1))


@pytest.mark.parametrize(("fn", "k"), [("tril", -2), ("triu", 1)])
def test_tril_triu_gradients_match_jax_eager_and_under_jit(fn, k):
    a = values((3, 7, 5))
    w = values((3, 7, 5), seed=1)
    ours, theirs = getattr(xc, fn), getattr(jnp, fn)
    x = oocarr.from_numpy(a)

    def loss(x):
        return oocarr.sum(ours(x, k=k) * w)

    want = jax.grad(lambda a: jnp.sum(theirs(a, k) * w))(a)
    with oocarr.memory_budget(BUDGET):
        same(jax.grad(loss)(x), want, 1e-6)
        same(jax.jit(jax.grad(loss))(x), want, 1e-6)
        same(jax.jit(lambda x: ours(x, k=k) * 2.0)(x), theirs(a, k) * 2.0)


def test_tril_keeps_dtypes_and_takes_in_memory_arrays():
    with oocarr.memory_budget(BUDGET):
        ints = np.arange(7 * 8, dtype=np.int16).reshape(7, 8)
        same(xc.tril(oocarr.from_numpy(ints), k=-1), np.tril(ints, -1))
        flags = ints % 3 == 0
        same(xc.triu(oocarr.from_numpy(flags)), np.triu(flags))
        same(xc.tril(jnp.asarray(values((6, 4)))), np.tril(values((6, 4))))


def test_triu_writes_tiles_below_the_diagonal_without_reading_them():
    a = values((512, 16))
    x = oocarr.from_numpy(a)
    with oocarr.memory_budget("16KB"), oocarr.io_stats() as stats:
        out = xc.triu(x)
    same(out, np.triu(a))
    assert stats.total.bytes_read < a.nbytes / 4
    assert stats.total.bytes_written == a.nbytes


def test_tril_refuses_vectors_and_non_integer_k():
    x = oocarr.from_numpy(np.ones(4, "f4"))
    with pytest.raises(errors.InvalidArgumentError, match="at least 2 axes"):
        xc.tril(x)
    with pytest.raises(errors.InvalidArgumentError, match="k must be"):
        xc.triu(oocarr.from_numpy(np.ones((2, 2), "f4")), k=1.5)


# ----------------------------------------------------------------------------
# Filled arrays, ranges, eye
# ----------------------------------------------------------------------------
def test_filled_arrays_match_numpy_and_jax_defaults():
    with oocarr.memory_budget(BUDGET):
        same(xc.zeros((9, 7)), jnp.zeros((9, 7)))
        same(xc.ones((9, 7)), jnp.ones((9, 7)))
        same(xc.empty(5).shape, (5,))
        same(xc.ones(11, dtype="int8"), np.ones(11, "int8"))
        same(xc.full((7, 5), -0.0), np.full((7, 5), -0.0, "f4"))
        assert np.signbit(np.asarray(xc.full((3,), -0.0))).all()
        same(xc.full((6, 5), np.nan, dtype="float16"), np.full((6, 5), np.nan, "f2"))
        same(xc.full(4, 2 + 1j), jnp.full(4, 2 + 1j))
        for fill in (True, 3, 2.5, np.int8(3), np.float64(1.5)):
            assert xc.full((2,), fill).dtype == jnp.full((2,), fill).dtype, fill
        same(xc.full((3,), 2.7, dtype="int32"), np.full(3, 2.7).astype("int32"))
        same(xc.zeros(()), np.zeros((), "f4"))


def test_like_functions_take_shape_and_dtype_from_any_array():
    a = np.arange(24, dtype="int16").reshape(4, 6)
    with oocarr.memory_budget(BUDGET):
        for x in (a, oocarr.from_numpy(a), jnp.asarray(a)):
            same(xc.zeros_like(x), np.zeros_like(a))
            same(xc.ones_like(x, dtype="float32"), np.ones_like(a, "f4"))
            same(xc.full_like(x, 7.9), np.full_like(a, 7.9))
            assert xc.empty_like(x).shape == a.shape


@pytest.mark.parametrize(
    "args",
    [(10,), (3, 17), (17, 3, -2), (0,), (5, 2), (-4, 4, 3), (0.5, 4.0, 0.3), (1.0, 0.0, -0.25)],
)
def test_arange_matches_numpy(args):
    with oocarr.memory_budget(BUDGET):
        got = xc.arange(*args)
    want = jnp.arange(*args)
    assert got.dtype == want.dtype
    same(got, np.arange(*args).astype(want.dtype), 1e-6)


def test_arange_dtype_and_errors():
    same(xc.arange(2, 9, 2, dtype="float32"), np.arange(2, 9, 2, dtype="float32"))
    with pytest.raises(errors.InvalidArgumentError, match="step"):
        xc.arange(0, 3, 0)


@pytest.mark.parametrize(
    ("start", "stop", "num", "endpoint"),
    [(0, 1, 50, True), (-3.0, 7.5, 37, False), (2, 2, 5, True), (1, 5, 1, True), (0, 1, 0, True)],
)
def test_linspace_matches_numpy(start, stop, num, endpoint):
    with oocarr.memory_budget(BUDGET):
        got = xc.linspace(start, stop, num, endpoint=endpoint)
    assert got.dtype == jnp.linspace(start, stop, num, endpoint=endpoint).dtype
    want = np.linspace(start, stop, num, endpoint=endpoint)
    same(got, want.astype("f4"), 1e-6)


def test_linspace_complex_and_integer_dtypes():
    same(xc.linspace(0, 1 + 2j, 9), np.linspace(0, 1 + 2j, 9).astype("c8"), 1e-6)
    same(xc.linspace(-2, 3, 11, dtype="int32"), np.linspace(-2, 3, 11, dtype="int32"))
    with pytest.raises(errors.InvalidArgumentError, match="num"):
        xc.linspace(0, 1, -1)


@pytest.mark.parametrize(("n", "m", "k"), [(9, None, 0), (7, 11, 2), (11, 6, -3), (4, 4, 9)])
def test_eye_matches_numpy(n, m, k):
    with oocarr.memory_budget(BUDGET):
        same(xc.eye(n, m, k=k), np.eye(n, m, k=k, dtype="f4"))
    same(xc.eye(n, m, k=k, dtype="bool"), np.eye(n, m, k=k, dtype="bool"))


def test_default_dtypes_are_jax_numpys():
    assert xc.zeros(2).dtype == jnp.zeros(2).dtype
    assert xc.arange(3).dtype == jnp.arange(3).dtype
    assert xc.arange(3.0).dtype == jnp.arange(3.0).dtype
    assert xc.eye(2).dtype == jnp.eye(2).dtype
    assert xc.linspace(0, 1, 3).dtype == jnp.linspace(0, 1, 3).dtype
    for obj in (1, 1.5, True, 1j, [[1, 2]], [1.0, 2], [True]):
        assert xc.asarray(obj).dtype == jnp.asarray(obj).dtype, obj


# ----------------------------------------------------------------------------
# asarray
# ----------------------------------------------------------------------------
def test_asarray_passes_casts_and_copies_disk_arrays():
    a = values((7, 5))
    x = oocarr.from_numpy(a)
    assert xc.asarray(x) is x
    assert xc.asarray(x, dtype="float32", copy=None) is x
    copied = xc.asarray(x, copy=True)
    assert copied.locator != x.locator
    same(copied, a)
    same(xc.asarray(x, dtype="float16"), a.astype("f2"))
    with pytest.raises(errors.InvalidArgumentError, match="copy=False"):
        xc.asarray(x, dtype="float16", copy=False)


def test_a_stored_copy_keeps_the_dtype_and_bits():
    a = np.random.default_rng(3).standard_normal((9, 4))  # float64, also without x64
    x = oocarr.from_numpy(a)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no JAX warning about float64
        copies = [xc.asarray(x, copy=True), xc.asarray(x[2:, 1], copy=True)]
        zero_d = xc.asarray(x[3, 1], copy=True)
    for got, want in zip((*copies, zero_d), (a, a[2:, 1], a[3, 1])):
        assert isinstance(got, oocarr.DiskArray) and got.dtype == np.float64
        np.testing.assert_array_equal(np.asarray(got), want)
    assert all(c.locator != x.locator for c in (*copies, zero_d))
    cast = xc.asarray(x[3, 1], dtype="float32")  # a 0-d cast is stored too
    assert isinstance(cast, oocarr.DiskArray) and np.asarray(cast) == np.float32(a[3, 1])


def test_asarray_stores_in_memory_values():
    a = np.arange(12, dtype="int64").reshape(3, 4)
    same(xc.asarray(a), a)  # NumPy arrays keep their dtype
    same(xc.asarray(a, dtype="float32"), a.astype("f4"))
    same(xc.asarray(jnp.ones(3)), np.ones(3, "f4"))
    same(xc.asarray([[1.5, 2], [3, 4]]), np.array([[1.5, 2], [3, 4]], "f4"))
    assert isinstance(xc.asarray(2.0), oocarr.DiskArray)
    with pytest.raises(errors.InvalidArgumentError, match="copy=False"):
        xc.asarray(a, copy=False)
    with pytest.raises(errors.InvalidArgumentError):
        xc.asarray(["a", "b"])


def test_asarray_of_a_traced_array_is_written_when_the_jitted_function_runs():
    fn = jax.jit(lambda v: xc.asarray(v * 2.0))
    out = fn(jnp.arange(4.0))
    assert isinstance(out, oocarr.DiskArray)
    same(out, np.arange(4.0, dtype="f4") * 2)
    grad = jax.grad(lambda v: oocarr.sum(xc.asarray(v) * 3.0))(jnp.ones(3))
    same(grad, np.full(3, 3.0, "f4"))


def test_device_must_be_the_host():
    xc.zeros(2, device=jax.devices("cpu")[0])
    xc.ones(2, device="cpu")
    with pytest.raises(errors.InvalidArgumentError, match="device"):
        xc.zeros(2, device="gpu")
    with pytest.raises(errors.InvalidArgumentError, match="device"):
        xc.asarray([1.0], device=object())


# ----------------------------------------------------------------------------
# meshgrid
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("indexing", ["xy", "ij"])
def test_meshgrid_matches_numpy(indexing):
    inputs = [np.arange(7, dtype="f4"), np.linspace(-1, 1, 5).astype("f4"), np.arange(3)]
    with oocarr.memory_budget(BUDGET):
        for n in (1, 2, 3):
            arrays = [oocarr.from_numpy(a) if i % 2 else a for i, a in enumerate(inputs[:n])]
            got = xc.meshgrid(*arrays, indexing=indexing)
            want = jnp.meshgrid(*inputs[:n], indexing=indexing)
            assert len(got) == n
            for g, w in zip(got, want):
                same(g, w)
    assert xc.meshgrid() == []


def test_meshgrid_keeps_negative_zeros_and_refuses_bad_inputs():
    (grid, _) = xc.meshgrid(np.array([-0.0, 1.0], "f4"), np.zeros(3, "f4"))
    assert np.signbit(np.asarray(grid)[:, 0]).all()
    with pytest.raises(errors.InvalidArgumentError, match="1-d"):
        xc.meshgrid(np.zeros((2, 2)))
    with pytest.raises(errors.InvalidArgumentError, match="indexing"):
        xc.meshgrid(np.zeros(2), indexing="xyz")


def test_meshgrid_gradients_and_jit():
    a, b = values(6), values(4, seed=1)
    w = values((4, 6), seed=2)
    x, y = oocarr.from_numpy(a), oocarr.from_numpy(b)

    def loss(x, y):
        gx, gy = xc.meshgrid(x, y)
        return oocarr.sum((gx + gy * gy) * w)

    def want(a, b):
        ga, gb = jnp.meshgrid(a, b)
        return jnp.sum((ga + gb * gb) * w)

    with oocarr.memory_budget(BUDGET):
        for got in (jax.grad(loss, (0, 1))(x, y), jax.jit(jax.grad(loss, (0, 1)))(x, y)):
            for g, ref in zip(got, jax.grad(want, (0, 1))(a, b)):
                same(g, ref, 1e-5)
        gx, gy = jax.jit(lambda x, y: xc.meshgrid(x, y, indexing="ij"))(x, y)
        same(gy, np.meshgrid(a, b, indexing="ij")[1])


# ----------------------------------------------------------------------------
# Under jit, storage and tiles
# ----------------------------------------------------------------------------
def test_creation_under_jit_makes_the_array_when_traced():
    a = values((7, 5))
    x = oocarr.from_numpy(a)
    with oocarr.memory_budget(BUDGET):
        same(jax.jit(lambda x: x + xc.ones_like(x))(x), a + 1)
        same(jax.jit(lambda x: x * xc.eye(7, 5))(x), a * np.eye(7, 5, dtype="f4"))
        same(jax.jit(lambda: xc.arange(4.0))(), np.arange(4.0, dtype="f4"))
        same(jax.jit(lambda v: xc.full((7, 5), v))(2.5), np.full((7, 5), 2.5, "f4"))
        same(jax.jit(lambda x, v: xc.full_like(x, v) * x)(x, 2.0), a * 2)
        grad = jax.jit(jax.grad(lambda v: oocarr.sum(xc.full((7, 5), v) * a)))(1.0)
        same(grad, np.float32(a.sum()), 1e-5)


def test_traced_bounds_are_refused_clearly():
    with pytest.raises(errors.NotSupportedError, match="arange"):
        jax.jit(lambda n: xc.arange(n))(3)
    with pytest.raises(errors.NotSupportedError, match="linspace"):
        jax.jit(lambda s: xc.linspace(s, 1.0, 4))(0.0)
    with pytest.raises(errors.NotSupportedError, match="traced"):
        jax.jit(lambda n: xc.zeros((n, 2)))(3)


def test_creation_writes_tile_by_tile_under_the_budget():
    budget = 64 * 1024
    with oocarr.memory_budget(budget), oocarr.io_stats() as stats:
        x = xc.full((300_000,), 3.0)
    total = stats.total
    assert total.bytes_written == x.nbytes
    assert total.pages_written >= x.nbytes // budget
    assert 0 < total.projected_bytes <= budget
    assert np.asarray(x[::1000]).tolist() == [3.0] * 300


def test_zeros_writes_nothing_and_owns_its_storage():
    with oocarr.memory_budget("16MB"), oocarr.io_stats() as stats:
        x = xc.zeros((2**28,))
    assert stats.total.bytes_written == 0
    assert np.asarray(x[-4:]).tolist() == [0.0] * 4
    path = x.url
    assert os.path.exists(path)
    del x
    gc.collect()
    assert not os.path.exists(path)


def test_tril_tiles_run_as_tasks_on_a_cluster(tmp_path, monkeypatch):
    """tril's parts (panels of tiles) run as tasks, forward and backward, with the local bits."""
    distributed = pytest.importorskip("distributed")
    from oocarr.engine.run import OOCAlgorithm

    ran = []
    for method in ("_custom_on", "_custom_backward_on"):
        original = getattr(OOCAlgorithm, method)

        def spy(self, *args, original=original):
            ran.append(original(self, *args))
            return ran[-1]

        monkeypatch.setattr(OOCAlgorithm, method, spy)
    a = values((300, 40))
    c = values((300, 40), seed=1)
    x = oocarr.save(a, str(tmp_path / "a.zarr"), chunks=(32, 40))

    def run():
        y = np.asarray(xc.tril(x, k=-3))
        return y, np.asarray(jax.grad(lambda x: oocarr.sum(xc.tril(x, k=-3) * c))(x))

    with oocarr.memory_budget(16 * 1024):
        local = run()
        with (
            distributed.LocalCluster(
                n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
            ) as cluster,
            distributed.Client(cluster) as client,
        ):
            try:
                oocarr.set_scratch_dir(str(tmp_path / "scratch"), driver="fsspec")
                with oocarr.executor(client):
                    remote = run()
            finally:
                oocarr.set_scratch_dir(None)
    assert ran == [True, True, True]  # tril, then tril and its gradient under jax.grad
    same(remote[0], local[0])
    same(remote[1], local[1])
    same(local[0], np.tril(a, -3))
