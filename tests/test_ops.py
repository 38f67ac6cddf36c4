"""Ops on DiskArrays against jax.numpy: forward values and gradients, eager and under jit, with
inputs on every driver and tiles that do not divide the shapes."""

from __future__ import annotations

import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import oocarr
from oocarr import errors
from oocarr.ops.elementwise import BINARY, UNARY
from stored_arrays import skip_slow

# small enough that every shape below is cut into several uneven tiles
BUDGET = 4 * 4 * 24


@pytest.fixture
def budget(backend):
    """The test budget; S3 round trips per tile are slow, so it gets fewer, larger tiles."""
    return BUDGET * 8 if backend.id == "fsspec-s3" else BUDGET


def data(shape, seed=0, positive=False):
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(shape).astype(np.float32)
    return np.abs(values) + 0.5 if positive else values


def stored(backend, array):
    return oocarr.DiskArray(backend.store(array, chunks=tuple(max(1, n // 2) for n in array.shape)))


def close(got, want, tol=1e-5):
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


POSITIVE = {"log", "sqrt", "log1p"}


def test_unary_forward_and_gradient(backend, budget):
    for name in sorted(UNARY):
        a = data((7, 5), positive=name in POSITIVE)
        x = stored(backend, a)
        fn = getattr(oocarr, name)
        ref = jax.nn.relu if name == "relu" else getattr(jnp, name, None) or getattr(jax.nn, name)
        with oocarr.memory_budget(budget):
            close(fn(x), ref(a))
            grad = jax.grad(lambda v, fn=fn: oocarr.sum(fn(v)))(x)
        assert isinstance(grad, oocarr.DiskArray), name
        close(grad, jax.grad(lambda v, ref=ref: jnp.sum(ref(v)))(a))


def skip_s3(backend):
    """Skip both S3 backends: the fsspec driver (sharded too) is covered on memory:// and
    local disk, and S3's round trips per tile took 11 s per reduction test here."""
    skip_slow(backend)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_forward_and_gradient_with_broadcasting(backend, budget, name):
    skip_s3(backend)
    fn, ref = getattr(oocarr, name), getattr(jnp, name)
    for shapes in [((7, 5), (7, 5)), ((7, 5), (5,)), ((6, 1, 4), (3, 1))]:
        a = data(shapes[0], 1, positive=name == "power")
        if name == "power":
            b = np.full(shapes[1], 1.5, np.float32)
        else:
            b = data(shapes[1], 2, positive=name == "divide")
        x, y = stored(backend, a), stored(backend, b)
        with oocarr.memory_budget(budget):
            close(fn(x, y), ref(a, b))
            gx, gy = jax.grad(lambda u, v: oocarr.sum(fn(u, v)), argnums=(0, 1))(x, y)
        rx, ry = jax.grad(lambda u, v: jnp.sum(ref(u, v)), argnums=(0, 1))(a, b)
        close(gx, rx, 1e-4)
        close(gy, ry, 1e-4)


REDUCTIONS = {
    "sum": jnp.sum,
    "mean": jnp.mean,
    "max": jnp.max,
    "min": jnp.min,
    "logsumexp": jax.scipy.special.logsumexp,
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions_over_axes(backend, budget, name):
    skip_s3(backend)
    a = data((5, 7, 3))
    x = stored(backend, a)
    fn, ref = getattr(oocarr, name), REDUCTIONS[name]
    for axis in [None, 0, 1, -1, (0, 2)]:
        for keepdims in (False, True):
            kw = {"axis": axis, "keepdims": keepdims}
            with oocarr.memory_budget(budget):
                close(fn(x, **kw), ref(a, **kw), 1e-4)
                grad = jax.grad(lambda v, kw=kw: oocarr.sum(oocarr.square(fn(v, **kw))))(x)
            want = jax.grad(lambda v, kw=kw: jnp.sum(jnp.square(ref(v, **kw))))(a)
            close(grad, want, 1e-4)


def test_where_and_comparisons(backend, budget):
    a, b = data((7, 5), 12), data((5,), 13)
    x, y = stored(backend, a), stored(backend, b)
    with oocarr.memory_budget(budget):
        for name in ("greater", "greater_equal", "less", "less_equal", "equal", "not_equal"):
            close(getattr(oocarr, name)(x, y), getattr(jnp, name)(a, b))
        close(oocarr.where(x > 0, x, y), np.where(a > 0, a, b))

        def f(u, v):
            return oocarr.sum(oocarr.where(u > v, u * 2.0, v))

        gx, gy = jax.jit(jax.grad(f, argnums=(0, 1)))(x, y)
    rx, ry = jax.grad(lambda u, v: jnp.sum(jnp.where(u > v, u * 2.0, v)), argnums=(0, 1))(a, b)
    close(gx, rx)
    close(gy, ry)


def test_transpose(backend, budget):
    a = data((4, 3, 5))
    x = stored(backend, a)
    with oocarr.memory_budget(budget):
        close(oocarr.transpose(x), a.T)
        close(oocarr.transpose(x, (1, 0, 2)), a.transpose(1, 0, 2))
        grad = jax.grad(lambda v: oocarr.sum(oocarr.transpose(v, (2, 0, 1)) * 2.0))(x)
    close(grad, np.full(a.shape, 2.0))


def test_matmul_stored_and_in_memory_operands(backend, budget):
    a, b = data((9, 7), 3), data((7, 5), 4)
    x, y = stored(backend, a), stored(backend, b)
    with oocarr.memory_budget(budget):
        close(oocarr.matmul(x, y), a @ b, 1e-4)
        close(x @ b, a @ b, 1e-4)
        close(a @ y, a @ b, 1e-4)
        gx, gy = jax.grad(lambda u, v: oocarr.sum(u @ v), argnums=(0, 1))(x, y)
        gw = jax.grad(lambda w: oocarr.sum(oocarr.square(x @ w)))(jnp.asarray(b))
    rx, ry = jax.grad(lambda u, v: jnp.sum(u @ v), argnums=(0, 1))(a, b)
    close(gx, rx, 1e-4)
    close(gy, ry, 1e-4)
    assert isinstance(gw, jax.Array) and not isinstance(gw, oocarr.DiskArray)
    close(gw, jax.grad(lambda w: jnp.sum(jnp.square(a @ w)))(b), 1e-3)


def loss(w, x, y):
    r = oocarr.matmul(x, w) - y
    return oocarr.mean(oocarr.square(r))


def ref_loss(w, x, y):
    return jnp.mean(jnp.square(x @ w - y))


@pytest.mark.parametrize(
    "transform",
    ["grad", "value_and_grad", "jit(grad)", "grad(jit)", "jit(value_and_grad)"],
)
def test_transforms_of_a_least_squares_loss(backend, budget, transform):
    Xa, ya, wa = data((23, 6), 5), data((23, 1), 6), data((6, 1), 7)
    X, y = stored(backend, Xa), stored(backend, ya)
    fn = {
        "grad": jax.grad(loss),
        "value_and_grad": jax.value_and_grad(loss),
        "jit(grad)": jax.jit(jax.grad(loss)),
        "grad(jit)": jax.grad(jax.jit(loss)),
        "jit(value_and_grad)": jax.jit(jax.value_and_grad(loss)),
    }[transform]
    want_v, want_g = jax.value_and_grad(ref_loss)(wa, Xa, ya)
    with oocarr.memory_budget(budget):
        out = fn(jnp.asarray(wa), X, y)
    value, grad = out if "value" in transform else (None, out)
    close(grad, want_g, 1e-4)
    if value is not None:
        close(value, want_v, 1e-5)


def test_gradients_of_stored_arguments_used_several_times(backend, budget):
    a = data((6, 4), 8)
    x = stored(backend, a)

    def f(v):
        return oocarr.sum(v * v) + oocarr.sum(oocarr.tanh(v)) + oocarr.mean(v @ v.T)

    def ref(v):
        return jnp.sum(v * v) + jnp.sum(jnp.tanh(v)) + jnp.mean(v @ v.T)

    with oocarr.memory_budget(budget):
        for g in (jax.grad(f)(x), jax.jit(jax.grad(f))(x)):
            close(g, jax.grad(ref)(a), 1e-4)


def test_gradient_location_is_deterministic_and_not_beside_user_data(tmp_path):
    x = oocarr.save(data((4, 3)), str(tmp_path / "user.h5#/x"))
    g1 = jax.grad(lambda v: oocarr.sum(v * 2.0))(x)
    g2 = jax.grad(lambda v: oocarr.sum(v * 3.0))(x)
    assert g1.locator == g2.locator
    assert g1.locator.url.startswith(oocarr.scratch_dir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["user.h5"]
    close(g2, np.full((4, 3), 3.0))


def test_scalars_python_and_traced_mix_with_stored_arrays(tmp_path):
    a = data((5, 3))
    x = oocarr.save(a, str(tmp_path / "a.npy"))
    close(x * 2.0 + 1, a * 2 + 1)
    close(2.0 - x, 2 - a)
    f = jax.jit(lambda v, s: oocarr.sum(v * s))
    close(f(x, 3.0), np.sum(a * 3), 1e-5)
    gs = jax.grad(lambda s: oocarr.sum(x * s))(2.0)
    close(gs, np.sum(a), 1e-4)


def test_jit_traces_once_per_locator(tmp_path):
    x = oocarr.save(data((8, 3)), str(tmp_path / "a.npy"))
    traces = []

    @jax.jit
    def step(v):
        traces.append(1)
        return oocarr.sum(oocarr.exp(v))

    for _ in range(5):
        step(x)
    assert len(traces) == 1


def test_second_order_gradients_raise():
    x = oocarr.from_numpy(data((3, 2)))
    with pytest.raises(NotImplementedError, match="second-order"):
        jax.grad(lambda s: oocarr.sum(jax.grad(lambda v: oocarr.sum(v * v * s))(x)))(1.0)


def test_a_budget_too_small_for_one_tile_names_the_op():
    x = oocarr.from_numpy(data((3, 2)))
    with oocarr.memory_budget(8), pytest.raises(errors.BudgetTooSmallError, match="sum"):
        oocarr.sum(x)


def test_operators_and_methods_on_disk_arrays():
    a, b = data((4, 3), 1), data((4, 3), 2, positive=True)
    x, y = oocarr.from_numpy(a), oocarr.from_numpy(b)
    close(-x, -a)
    close(x - y, a - b)
    close(x / y, a / b)
    close(x**2, a**2)
    close(x.sum(), a.sum(), 1e-5)
    close(x.mean(axis=0), a.mean(axis=0))
    f = jax.jit(lambda u, v: ((u * v) - u / v + (-u) ** 2).sum(axis=1))
    close(f(x, y), ((a * b) - a / b + a**2).sum(axis=1), 1e-4)


def test_a_traced_jax_value_on_the_left_of_a_stored_array():
    """``lr * g`` inside ``jit``: a traced JAX scalar or array on the left of a stored array,
    written with oocarr's functions (JAX's operators do not defer to a traced DiskArray, and
    oocarr patches none of them), against NumPy; JAX's own operands are left alone."""
    a = data((4, 3), 3, positive=True)
    x = oocarr.from_numpy(a)
    row = data((3,), 4, positive=True)

    def f(x, lr, r):
        values = (
            x * lr,
            x + lr,
            oocarr.subtract(lr, x),
            oocarr.divide(lr, x),
            oocarr.multiply(r, x),
            oocarr.subtract(r, x),
            (x > lr) * 1.0,
            oocarr.pow(lr, x),
        )
        return [oocarr.sum(v, axis=0) for v in values]

    got = jax.jit(f)(x, jnp.float32(1.5), jnp.asarray(row))
    lr = np.float32(1.5)
    want = [lr * a, lr + a, lr - a, lr / a, row * a, row - a, (lr < a) * 1.0, lr**a]
    for g, w in zip(got, want):
        close(g, w.sum(axis=0), 1e-5)
    assert float(jax.jit(lambda u, v: jnp.sum(u * v))(jnp.ones(3), jnp.ones(3))) == 3.0


def test_materialize_is_differentiable(backend, budget):
    a = data((6, 4), 9)
    x = stored(backend, a)
    with oocarr.memory_budget(budget):
        m = oocarr.materialize(x)
        g = jax.grad(lambda v: jnp.sum(jnp.sin(oocarr.materialize(v))))(x)
    assert isinstance(m, jax.Array)
    close(m, a)
    close(g, np.cos(a), 1e-5)


def test_update_in_a_jitted_training_step_compiles_once(tmp_path):
    xa = data((40, 3), 10)
    ya = data((40, 1), 11)
    x = oocarr.save(xa, str(tmp_path / "x.h5#/x"))
    y = oocarr.save(ya, str(tmp_path / "y.npy"))
    w = oocarr.save(np.zeros((3, 1), np.float32), str(tmp_path / "w.zarr"), mode="r+")
    traces = []

    @jax.jit
    def step(w, x, y):
        traces.append(1)
        value, g = jax.value_and_grad(loss)(w, x, y)
        return w.update_(w - 0.1 * g), value

    w_ref = jnp.zeros((3, 1))
    for _ in range(10):
        w, value = step(w, x, y)
        ref_value, g_ref = jax.value_and_grad(ref_loss)(w_ref, xa, ya)
        w_ref = w_ref - 0.1 * g_ref
        close(value, ref_value, 1e-5)
    assert len(traces) == 1
    assert w.locator.url == str(tmp_path / "w.zarr")
    close(oocarr.open(str(tmp_path / "w.zarr")), w_ref, 1e-5)


def test_update_refuses_arrays_not_opened_for_writing(tmp_path):
    a = data((4, 2))
    path = str(tmp_path / "a.h5#/a")
    oocarr.save(a, path)
    x = oocarr.open(path)
    with pytest.raises(errors.ReadOnlyError, match="r\\+"):
        x.update_(x * 2.0)
    with pytest.raises(errors.ShapeMismatchError):
        oocarr.open(path, "r+").update_(np.zeros(3, np.float32))
    close(oocarr.open(path), a)
    writable = oocarr.open(path, "r+")
    writable.update_(writable * 2.0)
    close(oocarr.open(path), a * 2)


def test_an_interrupted_update_leaves_the_old_values(tmp_path, monkeypatch):
    from oocarr import engine

    a = data((50, 4))
    w = oocarr.save(a, str(tmp_path / "w.npy"), mode="r+")
    calls = []
    original = engine.OOCAlgorithm._write_tile

    def failing(self, *args):
        calls.append(1)
        if len(calls) > 2:
            raise KeyboardInterrupt
        return original(self, *args)

    monkeypatch.setattr(engine.OOCAlgorithm, "_write_tile", failing)
    with oocarr.memory_budget(4 * 4 * 40), pytest.raises(KeyboardInterrupt):
        w.update_(w + 1.0)
    close(oocarr.open(str(tmp_path / "w.npy")), a)
    w.close()  # lets go of the writer lock (its hidden .lock file goes with it)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.npy"]


def test_io_stats_count_each_read_and_write(tmp_path):
    a = data((300, 20))
    x = oocarr.save(a, str(tmp_path / "x.h5#/x"), chunks=(64, 20))
    with oocarr.memory_budget("64KB"), oocarr.io_stats() as stats:
        oocarr.sum(x)
        y = x * 2.0
    sites = {site.split(" @ ")[0]: counts for site, counts in stats.by_site.items()}
    assert sites["sum"].bytes_read == a.nbytes
    assert sites["sum"].bytes_written == 0
    assert sites["multiply"].bytes_read == a.nbytes
    assert sites["multiply"].bytes_written == a.nbytes
    assert sites["multiply"].tiles == sites["multiply"].pages_written > 1
    assert all("test_ops.py" in site for site in stats.by_site)
    assert stats.total.calls == 2
    del y


def test_views_are_regions_of_the_same_storage(backend, budget):
    a = data((9, 6), 14)
    x = stored(backend, a)
    v, row = x[2:7, 1:5], x[3]
    assert v.shape == (4 * 1 + 1, 4) and row.shape == (6,)
    close(v, a[2:7, 1:5])
    close(row, a[3])
    close(v[1:, 2], a[3:7, 3])
    with oocarr.memory_budget(budget):
        close(oocarr.sum(v * v, axis=0), np.sum(a[2:7, 1:5] ** 2, axis=0), 1e-4)
        grad = jax.jit(jax.grad(lambda u, r: oocarr.sum(u * r)))(v, x[3, 1:5])
    close(grad, np.broadcast_to(a[3, 1:5], (5, 4)), 1e-5)
    assert grad.locator != x.locator
    assert pickle.loads(pickle.dumps(v.store)).locator == v.locator
    strided = x[::2, ::-1]  # strided views: tests/test_indexing.py
    assert pickle.loads(pickle.dumps(strided.store)).locator == strided.locator
    close(strided, a[::2, ::-1])


@pytest.mark.parametrize("key", [(slice(2, 8), 3), (slice(None), slice(1, 5)), 4, (-1,)])
def test_slicing_under_jit_and_grad(backend, budget, key):
    skip_s3(backend)
    a = data((9, 6), 15)
    x = stored(backend, a)

    def loss(u):
        return oocarr.sum(oocarr.square(u[key]) * 0.5)

    def ref(u):
        return jnp.sum(jnp.square(u[key]) * 0.5)

    with oocarr.memory_budget(budget):
        close(jax.jit(lambda u: u[key])(x), a[key])
        close(jax.jit(loss)(x), ref(a), 1e-4)
        grad = jax.jit(jax.grad(loss))(x)
        close(jax.grad(loss)(x), jax.grad(ref)(a))
    assert isinstance(grad, oocarr.DiskArray)
    close(grad, jax.grad(ref)(a))


@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_a_custom_op(backend, budget, axis):
    """Softmax runs through the CustomOp path: rows longer than a tile take two passes."""
    skip_s3(backend)
    a = data((9, 13), 16) * 4
    x = stored(backend, a)
    w = data((9, 13), 17)

    def loss(u):
        return oocarr.sum(oocarr.softmax(u, axis=axis) * w)

    def ref(u):
        return jnp.sum(jax.nn.softmax(u, axis=axis) * w)

    with oocarr.memory_budget(budget), oocarr.io_stats() as stats:
        close(oocarr.softmax(x, axis=axis), jax.nn.softmax(a, axis=axis))
        close(jax.jit(loss)(x), ref(a), 1e-4)
        grad = jax.jit(jax.grad(loss))(x)
        eager = jax.grad(loss)(x)
    close(grad, jax.grad(ref)(a))
    close(eager, jax.grad(ref)(a))
    softmax_sites = [c for site, c in stats.by_site.items() if site.startswith("softmax @")]
    assert softmax_sites and all(c.tiles > 1 for c in softmax_sites)
    with pytest.raises(errors.InvalidArgumentError, match="axis"):
        oocarr.softmax(x, axis=2)


def test_softmax_of_in_memory_and_extreme_values():
    a = np.array([[1e4, 0.0, -1e4], [-np.inf, 0.0, 1.0]], np.float32)
    close(oocarr.softmax(a), jax.nn.softmax(a))
    close(
        jax.grad(lambda u: oocarr.sum(oocarr.softmax(u) * a[1:].clip(-1)))(a[:1]),
        jax.grad(lambda u: jnp.sum(jax.nn.softmax(u) * a[1:].clip(-1)))(a[:1]),
    )


def test_writing_through_a_view(tmp_path):
    a = data((5, 4))
    path = str(tmp_path / "a.h5#/a")
    oocarr.save(a, path)
    with pytest.raises(errors.ReadOnlyError):
        oocarr.open(path)[1:3].store[:] = 0.0
    base = oocarr.open(path, "r+")
    base[1:3].store[:] = 0.0
    base.store.flush()
    expected = a.copy()
    expected[1:3] = 0.0
    close(oocarr.open(path), expected)


@pytest.mark.parametrize(
    "shapes",
    [((9, 7), (7,)), ((7,), (7, 5)), ((7,), (7,)), ((3, 9, 7), (7, 5)), ((2, 1, 9, 7), (3, 7, 5))],
    ids=str,
)
def test_matmul_batched_and_vectors(shapes, budget=BUDGET):
    a, b = data(shapes[0], 15), data(shapes[1], 16)
    x, y = oocarr.from_numpy(a), oocarr.from_numpy(b)
    with oocarr.memory_budget(budget):
        close(oocarr.matmul(x, y), jnp.matmul(a, b), 1e-4)
        gx, gy = jax.grad(lambda u, v: oocarr.sum(oocarr.square(u @ v)), argnums=(0, 1))(x, y)
        gw = jax.jit(jax.grad(lambda v: oocarr.sum(x @ v)))(jnp.asarray(b))
    rx, ry = jax.grad(lambda u, v: jnp.sum(jnp.square(u @ v)), argnums=(0, 1))(a, b)
    close(gx, rx, 1e-3)
    close(gy, ry, 1e-3)
    close(gw, jax.grad(lambda v: jnp.sum(a @ v))(b), 1e-4)


def test_matmul_shape_errors():
    x = oocarr.from_numpy(data((3, 4)))
    with pytest.raises(errors.ShapeMismatchError, match="contraction"):
        oocarr.matmul(x, np.ones((5, 2), np.float32))
    with pytest.raises(errors.ShapeMismatchError, match="batch"):
        oocarr.matmul(oocarr.from_numpy(data((2, 3, 4))), np.ones((3, 4, 2), np.float32))


def test_eager_gradients_of_intermediates_do_not_pile_up_in_scratch():
    import gc
    import os

    x = oocarr.from_numpy(data((6, 4), 18))
    before = set(os.listdir(oocarr.scratch_dir()))
    for _ in range(3):
        grad = jax.grad(lambda v: oocarr.sum(oocarr.exp(v * 2.0) * v))(x)
    gc.collect()
    assert len(set(os.listdir(oocarr.scratch_dir())) - before) == 1  # x's gradient only
    del x
    gc.collect()
    close(grad, jax.grad(lambda v: jnp.sum(jnp.exp(v * 2.0) * v))(data((6, 4), 18)), 1e-4)
    del grad
    gc.collect()
    assert set(os.listdir(oocarr.scratch_dir())) - before == set()


def test_bfloat16_values_and_gradients_on_the_default_scratch():
    values = data((5, 3), 21).astype(jnp.bfloat16)
    x = oocarr.from_numpy(values)

    def loss(v):
        return oocarr.sum(oocarr.tanh(v * v))

    def want_loss(v):
        return jnp.sum(jnp.tanh(v * v))

    product = x * x
    assert product.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(product), np.asarray(jnp.asarray(values) ** 2))
    want = jax.grad(want_loss)(jnp.asarray(values)).astype(np.float32)
    for grad in (jax.grad(loss)(x), jax.jit(jax.grad(loss))(x)):
        assert grad.dtype == jnp.bfloat16
        np.testing.assert_allclose(np.asarray(grad).astype(np.float32), want, rtol=2e-2, atol=1e-2)


@pytest.mark.parametrize("dtype", ["f4", "c8", "f2", "i4"])
def test_matmul_folded_on_the_host_and_by_xla_matches_numpy(dtype, tmp_path):
    """Many k-panels and edge tiles: float32 and complex64 fold in place strip by strip
    (``host_block``), float16 and int32 with XLA's block functions; every result is NumPy's
    product within rounding."""
    from oocarr.engine import OOCAlgorithm, Operand
    from oocarr.ops.matmul import Matmul

    rng = np.random.default_rng(7)
    a = rng.standard_normal((900, 2600))
    b = rng.standard_normal((2600, 700))
    if dtype == "c8":
        a, b = a + 1j * a[::-1], b - 0.5j * b[::-1]
    if dtype == "i4":
        a, b = np.round(a * 4), np.round(b * 4)
    a, b = a.astype(dtype), b.astype(dtype)
    x = oocarr.save(a, str(tmp_path / "a.npy"))
    y = oocarr.save(b, str(tmp_path / "b.npy"))
    with oocarr.memory_budget("2MB"):
        plan, _ = OOCAlgorithm(Matmul(a.shape, b.shape)).forward_plan(
            [Operand(x.store), Operand(y.store)]
        )
        got = oocarr.to_numpy(oocarr.matmul(x, y))
    assert plan.host == (dtype in ("f4", "c8"))
    assert plan.extra["k"] < 2600 and plan.out_tile != (900, 700)  # several steps and tiles
    want = np.matmul(a.astype(np.complex128 if dtype == "c8" else np.float64), b)
    assert got.dtype == np.dtype(dtype)
    tol = {"f4": 1e-4, "c8": 1e-4, "f2": 2e-2, "i4": 0}[dtype]
    np.testing.assert_allclose(got, want.astype(got.dtype), rtol=tol, atol=tol * 50)


def test_softmax_of_arrays_of_different_ranks_in_turn():
    """The default axis -1 is a different axis of a matrix and of a stack: block functions
    compiled for one are not reused for the other."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(4, 6)).astype(np.float32)
    b = rng.normal(size=(3, 4, 6)).astype(np.float32)
    with oocarr.memory_budget(4 * 4 * 24):
        first = oocarr.softmax(oocarr.from_numpy(a))
        second = oocarr.softmax(oocarr.from_numpy(b))
    np.testing.assert_allclose(np.asarray(first), jax.nn.softmax(a, axis=-1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(second), jax.nn.softmax(b, axis=-1), rtol=1e-5, atol=1e-6)
