"""Elementwise chains under ``jax.jit`` fuse: the consumer computes the chain on its own tiles,
so no intermediate reaches storage.  Every value is checked against NumPy or ``jax.numpy``."""

from __future__ import annotations

import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oocarr
from oocarr.engine import fused
from oocarr.engine.composed import ComposedOp, composed
from oocarr.errors import OocarrError, ReadOnlyError

RNG = np.random.default_rng(7)
A = RNG.standard_normal((300, 70)).astype("f4")
B = RNG.standard_normal((300, 70)).astype("f4")
ROW = RNG.standard_normal((1, 70)).astype("f4")


def _written(stats) -> int:
    return stats.total.bytes_written


def test_a_chain_reads_each_input_once_and_writes_nothing(backend):
    a = oocarr.DiskArray(backend.store(A, chunks=(64, 32)))
    b = oocarr.DiskArray(backend.store(B, chunks=(64, 32)))
    chain = jax.jit(lambda a, b: oocarr.sum(((a - b) * 2) ** 2))
    with oocarr.memory_budget("64KB"), oocarr.io_stats() as stats:
        got = float(chain(a, b))
    np.testing.assert_allclose(got, np.sum(((A - B) * 2) ** 2, dtype=np.float64), rtol=1e-5)
    assert _written(stats) == 0
    assert stats.total.bytes_read == A.nbytes + B.nbytes


def test_unfused_eager_chain_writes_its_intermediates():
    """The eager chain is the baseline the fused one saves: three intermediates written."""
    a, b = oocarr.from_numpy(A), oocarr.from_numpy(B)
    with oocarr.io_stats() as stats:
        got = float(oocarr.sum(((a - b) * 2) ** 2))
    np.testing.assert_allclose(got, np.sum(((A - B) * 2) ** 2, dtype=np.float64), rtol=1e-5)
    assert _written(stats) == 3 * A.nbytes


def test_broadcast_leaves_constants_and_traced_values():
    a, row = oocarr.from_numpy(A), oocarr.from_numpy(ROW)
    col = RNG.standard_normal((300, 1)).astype("f4")
    scale = RNG.standard_normal(70).astype("f4")  # over CONST_ELEMS: a slot

    def f(a, row, col, scale, t):
        y = oocarr.exp(oocarr.tanh(a * scale - row) / 3.0) + col * t
        return oocarr.sum(oocarr.maximum(y, 1.5)), oocarr.mean(oocarr.where(a > 0, y, -y))

    got = jax.jit(f)(a, row, jnp.asarray(col), jnp.asarray(scale), jnp.float32(0.25))
    y = np.exp(np.tanh(A * scale - ROW) / 3.0) + col * np.float32(0.25)
    np.testing.assert_allclose(float(got[0]), np.maximum(y, 1.5).sum(dtype=np.float64), rtol=1e-5)
    np.testing.assert_allclose(float(got[1]), np.where(A > 0, y, -y).mean(), rtol=1e-4, atol=1e-6)


def test_a_fused_chain_gives_the_unfused_chain_s_dtype_and_bits():
    half = oocarr.from_numpy(A.astype("f2"))
    eager = half * 2.0 + 1
    fused_out = jax.jit(lambda h: h * 2.0 + 1)(half)
    assert fused_out.dtype == eager.dtype
    np.testing.assert_array_equal(np.asarray(fused_out), np.asarray(eager))
    np.testing.assert_allclose(np.asarray(fused_out), A.astype("f2") * 2.0 + 1, rtol=1e-3)


def test_a_returned_chain_is_written_to_storage_and_keeps_its_values():
    a = oocarr.save(A, oocarr.scratch_dir() + "/fusion-src.npy", mode="r+")
    try:
        y = jax.jit(lambda a: oocarr.exp(a) * 0.5)(a)
        assert not fused.is_fused(y.locator)
        oocarr.update(a, a * 0.0)  # the source changes after the call
        np.testing.assert_allclose(np.asarray(y), np.exp(A) * 0.5, rtol=1e-6)
    finally:
        a.close()
        del a
        import os

        os.remove(oocarr.scratch_dir() + "/fusion-src.npy")


def test_matmul_and_softmax_read_a_fused_operand():
    a = oocarr.from_numpy(A)
    w = RNG.standard_normal((70, 5)).astype("f4")
    f = jax.jit(lambda a, w: (oocarr.sum((a * 2.0 - 1.0) @ w), oocarr.softmax(a * 3.0, axis=1)))
    with oocarr.memory_budget("128KB"), oocarr.io_stats() as stats:
        total, soft = f(a, jnp.asarray(w))
    np.testing.assert_allclose(float(total), ((A * 2 - 1) @ w).sum(dtype=np.float64), rtol=1e-4)
    np.testing.assert_allclose(np.asarray(soft), np.asarray(jax.nn.softmax(A * 3.0, axis=1)), 1e-5)
    # the matmul's output and the softmax's (returned) are the only writes
    assert _written(stats) <= (300 * 5 + A.size) * 4 + 4096


@pytest.mark.parametrize("stored_grad", [False, True])
def test_gradients_through_a_fused_chain_match_jax(stored_grad):
    a, row = oocarr.from_numpy(A), oocarr.from_numpy(ROW)

    def loss(a, w):
        return oocarr.mean(oocarr.square(oocarr.tanh(a * w - row) + a))

    def want(a, w):
        return jnp.mean(jnp.square(jnp.tanh(a * w - ROW) + a))

    w = jnp.asarray(RNG.standard_normal(70).astype("f4"))
    argnum = 0 if stored_grad else 1
    value, grad = jax.jit(jax.value_and_grad(loss, argnums=argnum))(a, w)
    want_value, want_grad = jax.value_and_grad(want, argnums=argnum)(jnp.asarray(A), w)
    np.testing.assert_allclose(float(value), float(want_value), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(grad), np.asarray(want_grad), rtol=1e-4, atol=1e-6)


def test_a_jitted_step_compiles_once_and_follows_new_values():
    a = oocarr.from_numpy(A)
    traces = []

    def step(a, t):
        traces.append(1)
        return oocarr.sum(oocarr.square(a - t))

    f = jax.jit(step)
    for t in (0.0, 1.0, -2.0):
        got = float(f(a, jnp.float32(t)))
        np.testing.assert_allclose(got, np.sum((A - t) ** 2, dtype=np.float64), rtol=1e-5)
    assert len(traces) == 1


def test_a_fused_array_is_read_only_and_pickles_with_its_slot_values():
    a = oocarr.from_numpy(A)
    leaves = [fused.Leaf.stored(a.locator, A.shape), fused.Leaf.slot("t", 0, (70,), "f4")]
    from oocarr.ops.elementwise import BINARY

    locator = fused.fused_locator(BINARY["add"], leaves, A.shape, "f4")
    fused.deposit("t", [ROW[0]])
    with _open(locator) as store:
        np.testing.assert_array_equal(store[10:20], A[10:20] + ROW[0])
        portable = store.portable_locator
        with pytest.raises(ReadOnlyError):
            _open(locator, "r+")
    fused.forget("t")
    with pytest.raises(OocarrError, match="outlived"):
        _open(locator)
    with pickle.loads(pickle.dumps(_open(portable))) as store:
        np.testing.assert_array_equal(store[:], A + ROW[0])


def _open(locator, mode="r"):
    from oocarr.store.registry import get_driver

    return get_driver(locator.driver).open(locator, mode)


REDUCTIONS = [
    ("sum", lambda v, **k: oocarr.sum(v, **k), np.sum),
    ("mean", lambda v, **k: oocarr.mean(v, **k), np.mean),
    ("max", lambda v, **k: oocarr.max(v, **k), np.max),
    ("min", lambda v, **k: oocarr.min(v, **k), np.min),
]


@pytest.mark.parametrize("name, reduce, want", REDUCTIONS, ids=[r[0] for r in REDUCTIONS])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_reductions_of_a_chain_over_edge_tiles_match_numpy(name, reduce, want, axis):
    """Tiles that do not divide the array: the edge blocks of the leaves are not padded, so
    the chain of padding never reaches the reduction (``exp`` of a zero pad would add 1 to a
    sum, and a max of ``-exp`` would see it)."""
    a, row = oocarr.from_numpy(A), oocarr.from_numpy(ROW)
    f = jax.jit(lambda a, row, t: reduce(-oocarr.exp(a * t - row) + 1.0, axis=axis))
    with oocarr.memory_budget("40KB"):
        got = np.asarray(f(a, row, jnp.float32(0.5)))
    expected = want((-np.exp(A * np.float32(0.5) - ROW) + 1).astype("f4"), axis=axis)
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=1e-5)


def test_a_reduction_computes_the_chain_in_its_own_block_function():
    from oocarr.engine import Operand
    from oocarr.ops.reductions import Sum

    a = oocarr.from_numpy(A)
    y = jax.jit(lambda a: oocarr.exp(a) * 2.0)  # returned, so written; its fused form:
    leaves = [fused.Leaf.stored(a.locator, A.shape), fused.Leaf.const(np.float32(2))]
    from oocarr.ops.elementwise import BINARY

    locator = fused.fused_locator(BINARY["multiply"], leaves, A.shape, "f4")
    with _open(locator) as store:
        op, operands = composed(Sum(A.shape), [Operand(store)])
        assert isinstance(op, ComposedOp)
        assert [o.value for o in operands] == [store._stores[0]]  # the constant is compiled in
    np.testing.assert_allclose(np.asarray(y(a)), np.exp(A) * 2, rtol=1e-6)


def test_a_small_array_constant_is_read_by_region():
    """A constant small enough to live in the locator, broadcast against a stored row, over
    tiles that split it: each tile reads its own rows of the constant."""
    row = oocarr.from_numpy(ROW)
    column = np.arange(6, dtype="f4").reshape(6, 1)  # 6 elements: written into the locator
    f = jax.jit(
        lambda row: (oocarr.sum(row * column, axis=1), oocarr.sum(oocarr.exp(row - column)))
    )
    with oocarr.memory_budget("2KB"):
        per_row, total = f(row)
    np.testing.assert_allclose(np.asarray(per_row), (ROW * column).sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(float(total), np.exp(ROW - column).sum(dtype=np.float64), rtol=1e-5)


def test_a_chain_s_gradient_writes_only_the_gradient():
    """Backward through a fused chain: each cotangent is itself a fused array, so the only
    array written is the stored input's gradient."""
    a = oocarr.from_numpy(A)
    loss = lambda a: oocarr.mean(oocarr.square(oocarr.tanh(a * 2.0) - 0.5))  # noqa: E731
    step = jax.jit(jax.grad(loss))
    step(a)
    with oocarr.io_stats() as stats:
        grad = step(a)
        got = np.asarray(grad)
    want = jax.grad(lambda a: jnp.mean(jnp.square(jnp.tanh(a * 2.0) - 0.5)))(jnp.asarray(A))
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-5, atol=1e-8)
    assert stats.total.bytes_written == A.nbytes


@pytest.mark.parametrize(
    "name",
    ["used-three-times", "broadcast-intermediate", "partial-sum", "mean-keepdims", "x-times-x"],
)
def test_gradients_of_fused_intermediates_match_jax(name):
    """Cotangents that add up (an intermediate used several times), that a loop must reduce (a
    broadcast intermediate), or that a reduction over some axes gives: against JAX."""
    a, row = oocarr.from_numpy(A), oocarr.from_numpy(ROW)

    def f(np_, a, row):
        if name == "used-three-times":
            y = np_.tanh(a * 2.0)
            return np_.sum(y * y + y)
        if name == "broadcast-intermediate":
            return np_.sum(np_.tanh(a + row * 2.0))
        if name == "partial-sum":
            return np_.sum(np_.sum(np_.exp(a * row), axis=0) * 0.5)
        if name == "mean-keepdims":
            return np_.sum(np_.mean(np_.square(a - row), axis=0, keepdims=True))
        return np_.sum((a - row) * (a - row))

    def ours(a, row):
        return f(_OocarrNames, a, row)

    def theirs(a, row):
        return f(jnp, a, row)

    with oocarr.memory_budget("64KB"):
        value, (ga, grow) = jax.jit(jax.value_and_grad(ours, argnums=(0, 1)))(a, row)
        ga, grow = np.asarray(ga), np.asarray(grow)
    want_value, (wa, wrow) = jax.value_and_grad(theirs, argnums=(0, 1))(
        jnp.asarray(A), jnp.asarray(ROW)
    )
    np.testing.assert_allclose(float(value), float(want_value), rtol=1e-5)
    np.testing.assert_allclose(ga, np.asarray(wa), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grow, np.asarray(wrow), rtol=1e-4, atol=1e-4)


class _OocarrNames:
    """``oocarr`` with ``jax.numpy``'s names, so one loss is written once for both."""

    tanh, exp, square = (
        staticmethod(oocarr.tanh),
        staticmethod(oocarr.exp),
        staticmethod(oocarr.square),
    )
    sum, mean = staticmethod(oocarr.sum), staticmethod(oocarr.mean)


UNARY_OPS = ["exp", "tanh", "square", "sigmoid", "softplus", "negative"]
BINARY_OPS = ["add", "subtract", "multiply", "maximum", "minimum"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    rows=st.integers(3, 40),
    cols=st.integers(1, 9),
    reduce_axis=st.sampled_from([None, 0, 1]),
)
def test_random_chains_and_their_gradients_match_jax(data, rows, cols, reduce_axis):
    """Chains of unary and binary ops over stored operands of broadcast shapes, in-memory
    and constant operands, reduced and differentiated under ``jit``, against ``jax.numpy``
    with tiles small enough to cut every axis."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    shapes = [(rows, cols), (1, cols), (rows, 1), (cols,)]
    stored = [rng.uniform(-1, 1, data.draw(st.sampled_from(shapes))).astype("f4") for _ in "ab"]
    stored[0] = rng.uniform(-1, 1, (rows, cols)).astype("f4")  # the result's full shape
    weight = rng.uniform(-1, 1, cols).astype("f4")
    steps = data.draw(
        st.lists(
            st.tuples(
                st.sampled_from(UNARY_OPS + BINARY_OPS),
                st.sampled_from(["a", "b", "w", "const"]),
            ),
            min_size=1,
            max_size=5,
        )
    )

    def chain(lib, ops, a, b, w):
        operands = {"a": a, "b": b, "w": w, "const": 0.5}
        value = a
        for name, other in steps:
            if name in UNARY_OPS:
                value = getattr(ops, name)(value)
            else:
                value = getattr(lib, name)(value, operands[other])
        return lib.sum(lib.square(value), axis=reduce_axis)

    def ours(a, b, w):
        return oocarr.sum(chain(oocarr, oocarr, a, b, w))

    def theirs(a, b, w):
        return jnp.sum(chain(jnp, _JaxNames, a, b, w))

    a, b = (oocarr.from_numpy(v) for v in stored)
    with oocarr.memory_budget("8KB"):
        value, grads = jax.jit(jax.value_and_grad(ours, argnums=(0, 1, 2)))(
            a, b, jnp.asarray(weight)
        )
        grads = [np.asarray(g) for g in grads]
    want_value, want = jax.value_and_grad(theirs, argnums=(0, 1, 2))(
        *(jnp.asarray(v) for v in stored), jnp.asarray(weight)
    )
    np.testing.assert_allclose(float(value), float(want_value), rtol=2e-4, atol=1e-5)
    for got, expected in zip(grads, want):
        np.testing.assert_allclose(got, np.asarray(expected), rtol=2e-3, atol=2e-4)


class _JaxNames:
    """``jax.numpy`` and ``jax.nn`` under oocarr's unary names."""

    exp, tanh, square, negative = jnp.exp, jnp.tanh, jnp.square, jnp.negative
    sigmoid, softplus = staticmethod(jax.nn.sigmoid), staticmethod(jax.nn.softplus)
