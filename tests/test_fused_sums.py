"""Whole programs fuse under ``jax.jit``: ``X @ w`` with ``w`` in memory is a row-local node of
a fused array, and a sum or mean over every axis of a fused array that separates by rows runs
as one stream of its stored leaves, its value and its in-memory leaves' gradients in one pass.
Values and gradients are checked against ``jax.numpy`` on the same data in memory; reads are
counted with ``io_stats`` (each stored input read once a step)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import oocarr
from oocarr.engine import fused
from oocarr.engine.fused_layout import layout, row_roles

RNG = np.random.default_rng(38)
N, D, H = 3000, 12, 16
X = RNG.standard_normal((N, D)).astype("f4")
Y = (RNG.standard_normal((N, 1)) > 0).astype("f4")


def _least_squares(xp):
    return lambda w, x, y: xp.sum(xp.square(x @ w - y))


def _logistic(xp, softplus):
    return lambda w, x, y: xp.mean(softplus(x @ w) - y * (x @ w))


def _mlp(xp, relu, softplus):
    def loss(p, x, y):
        z = relu(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
        return xp.mean(softplus(z) - y * z)

    return loss


def _start(kind: str):
    if kind != "mlp":
        return jnp.full((D, 1), 0.05, jnp.float32)
    return {
        "w1": jnp.asarray(RNG.standard_normal((D, H)).astype("f4") / 4),
        "b1": jnp.full((H,), 0.1, jnp.float32),
        "w2": jnp.asarray(RNG.standard_normal((H, 1)).astype("f4") / 4),
        "b2": jnp.zeros((1,), jnp.float32),
    }


LOSSES = {
    "least squares": (_least_squares(oocarr), _least_squares(jnp)),
    "logistic": (_logistic(oocarr, oocarr.softplus), _logistic(jnp, jax.nn.softplus)),
    "mlp": (
        _mlp(oocarr, oocarr.relu, oocarr.softplus),
        _mlp(jnp, jax.nn.relu, jax.nn.softplus),
    ),
}


def _close(got, want, rtol=2e-5):
    """Equal to float32 rounding: sums of thousands of rows cancel, so an element near zero
    is compared at the scale of the largest one."""
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        w = np.asarray(w)
        scale = float(np.max(np.abs(w), initial=1.0))
        np.testing.assert_allclose(np.asarray(g), w, rtol=rtol, atol=rtol * scale)


@pytest.mark.parametrize("kind", list(LOSSES))
def test_value_and_grad_reads_each_input_once_and_matches_jax(kind, backend):
    x = oocarr.DiskArray(backend.store(X, chunks=(256, D)))
    y = oocarr.DiskArray(backend.store(Y, chunks=(256, 1)))
    ours, theirs = LOSSES[kind]
    params = _start(kind)
    with oocarr.memory_budget("256KB"), oocarr.io_stats() as stats:
        value, grad = jax.jit(jax.value_and_grad(ours))(params, x, y)
    want_value, want_grad = jax.value_and_grad(theirs)(params, jnp.asarray(X), jnp.asarray(Y))
    _close(value, want_value)
    _close(grad, want_grad, rtol=1e-4)
    assert stats.total.bytes_read == X.nbytes + Y.nbytes
    assert stats.total.bytes_written == 0
    assert stats.total.tiles > 1  # streamed in row tiles, not read whole


def test_the_fused_value_equals_the_op_by_op_value():
    """Eagerly nothing fuses: the same loss op by op, writing its intermediates."""
    x, y = oocarr.from_numpy(X), oocarr.from_numpy(Y)
    params = _start("mlp")
    ours = LOSSES["mlp"][0]
    fused_value = float(jax.jit(ours)(params, x, y))
    with oocarr.io_stats() as stats:
        eager_value = float(ours(params, x, y))
    assert stats.total.bytes_written > 0
    np.testing.assert_allclose(fused_value, eager_value, rtol=1e-5)


def test_a_stored_input_that_needs_its_gradient_takes_the_op_by_op_backward():
    x, y = oocarr.from_numpy(X), oocarr.from_numpy(Y)
    w = _start("least squares")
    ours, theirs = LOSSES["least squares"]
    gw, gx = jax.jit(jax.grad(ours, argnums=(0, 1)))(w, x, y)
    want_w, want_x = jax.grad(theirs, argnums=(0, 1))(w, jnp.asarray(X), jnp.asarray(Y))
    _close(gw, want_w, rtol=1e-4)
    _close(np.asarray(gx), want_x, rtol=1e-4)


def test_a_program_that_does_not_separate_by_rows_runs_op_by_op():
    """``mean(X, axis=0)`` is a stored leaf used whole by every row: not fused, same values."""
    x = oocarr.from_numpy(X)
    w = jnp.full((D,), 0.5, jnp.float32)

    def ours(w, x):
        return oocarr.sum(oocarr.square((x - oocarr.mean(x, axis=0)) @ w))

    def theirs(w, x):
        return jnp.sum(jnp.square((x - jnp.mean(x, axis=0)) @ w))

    value, grad = jax.jit(jax.value_and_grad(ours))(w, x)
    want_value, want_grad = jax.value_and_grad(theirs)(w, jnp.asarray(X))
    _close(value, want_value, rtol=1e-4)
    _close(grad, want_grad, rtol=1e-4)


def test_rows_too_wide_for_the_budget_fall_back_to_tiles_that_cut_them():
    stack = RNG.standard_normal((3, 400, D)).astype("f4")
    x = oocarr.from_numpy(stack)
    w = jnp.asarray(RNG.standard_normal((D, 50)).astype("f4"))
    ours = jax.jit(jax.value_and_grad(lambda w, x: oocarr.mean(oocarr.tanh(x @ w))))
    with oocarr.memory_budget("256KB"):
        value, grad = ours(w, x)
    want_value, want_grad = jax.value_and_grad(lambda w: jnp.mean(jnp.tanh(stack @ w)))(w)
    _close(value, want_value, rtol=1e-4)
    _close(grad, want_grad, rtol=1e-4)


def test_a_row_local_product_is_read_by_any_consumer():
    """Returned, sliced, reduced along one axis, differentiated through that reduction."""
    x = oocarr.from_numpy(X)
    w = jnp.asarray(RNG.standard_normal((D, 7)).astype("f4"))
    want = X @ np.asarray(w)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda w: x @ w)(w)), want, atol=1e-5)
    got = jax.jit(lambda w: (x @ w)[10:20, 2:5])(w)
    np.testing.assert_allclose(np.asarray(got), want[10:20, 2:5], atol=1e-5)
    got = jax.jit(lambda w: oocarr.sum(oocarr.tanh(x @ w), axis=0))(w)
    np.testing.assert_allclose(np.asarray(got), np.tanh(want).sum(0), rtol=1e-4, atol=1e-4)

    def ours(w):
        return jnp.sum(oocarr.materialize(oocarr.sum(oocarr.tanh(x @ w), axis=0)) ** 2)

    grad = jax.jit(jax.grad(ours))(w)
    want_grad = jax.grad(lambda w: jnp.sum(jnp.sum(jnp.tanh(jnp.asarray(X) @ w), 0) ** 2))(w)
    _close(grad, want_grad, rtol=1e-4)


def test_a_consumer_tile_narrower_than_a_product_row_is_cut_from_whole_rows():
    """Rows of ``x @ w`` wider than the budget's tiles: each tile computes whole rows of the
    product and keeps its columns."""
    wide = RNG.standard_normal((40, 6)).astype("f4")
    w = jnp.asarray(RNG.standard_normal((6, 5000)).astype("f4"))
    x = oocarr.from_numpy(wide)
    with oocarr.memory_budget("200KB"):
        got = np.asarray(jax.jit(lambda w: oocarr.exp(x @ w * 0.1) + x[:, :1])(w))
    want = np.exp(wide @ np.asarray(w) * np.float32(0.1)) + wide[:, :1]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_layout_reads_each_leaf_once_at_the_box_of_its_uses():
    a = fused.Leaf.stored(oocarr.from_numpy(X).locator, (N, D))
    w = fused.Leaf.slot("t", 0, (D, D), "f4")
    from oocarr.ops.elementwise import BINARY
    from oocarr.ops.matmul import RowMatmul

    node = RowMatmul((N, D), (D, D)).fused_node()
    product = fused.fused_locator(RowMatmul, [a, w], (N, D), "f4", node=node)
    spec_loc = fused.fused_locator(
        BINARY["subtract"], [fused.Leaf.stored(product, (N, D)), a], (N, D), "f4"
    )
    import json

    spec = json.loads(spec_loc.url)
    reads, cuts = layout(spec, (slice(5, 9), slice(0, D)))
    assert reads[0] == (slice(5, 9), slice(0, D)) and cuts is None
    reads, cuts = layout(spec, (slice(5, 9), slice(2, 4)))
    # x read at whole rows for the product; its own use is cut from that block
    assert reads[0] == (slice(5, 9), slice(0, D))
    assert cuts == (None, None, ((0, 4), (2, 4)), ((0, 4), (2, 4)))
    assert row_roles(spec) == ["rows", "whole"]


def _standardize(x):
    xp = x.__array_namespace__()
    return (x - xp.mean(x, axis=0)) / xp.std(x, axis=0, correction=1)


def test_standardize_reads_x_once_for_its_statistics_and_once_for_its_output(backend):
    data = (RNG.standard_normal((900, 7)) * 3 + 40).astype("f4")
    x = oocarr.DiskArray(backend.store(data, chunks=(128, 7)))
    with oocarr.memory_budget("64KB"), oocarr.io_stats() as stats:
        z = np.asarray(jax.jit(_standardize)(x))
    want = (data - data.mean(0, dtype=np.float64)) / data.std(0, ddof=1, dtype=np.float64)
    np.testing.assert_allclose(z, want, rtol=1e-4, atol=1e-4)
    # the moments pass, then the pass that computes z as it is written
    assert stats.total.bytes_read == 2 * data.nbytes
    assert stats.total.bytes_written == data.nbytes


@pytest.mark.parametrize("axis", [0, 1, (0, 1)])
def test_mean_var_and_std_under_jit_share_one_pass_and_match_numpy(axis):
    data = (RNG.standard_normal((500, 9)) * 5 - 1e3).astype("f4")
    x = oocarr.from_numpy(data)

    def stats(x):
        return oocarr.mean(x, axis=axis), oocarr.var(x, axis=axis), oocarr.std(x, axis=axis)

    with oocarr.memory_budget("256KB"), oocarr.io_stats() as io:
        mean, var, std = jax.jit(stats)(x)
    assert io.total.bytes_read == data.nbytes
    wide = data.astype(np.float64)
    np.testing.assert_allclose(np.asarray(mean), wide.mean(axis), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(var), wide.var(axis), rtol=1e-4)
    np.testing.assert_allclose(np.asarray(std), wide.std(axis), rtol=1e-4)


def test_the_statistics_gradients_are_jax_numpys():
    data = RNG.standard_normal((300, 5)).astype("f4")
    x = oocarr.from_numpy(data)

    def ours(x):
        return jnp.sum(oocarr.std(x, axis=0, correction=1)) + jnp.sum(oocarr.mean(x, axis=0) ** 2)

    def theirs(x):
        return jnp.sum(jnp.std(x, axis=0, ddof=1)) + jnp.sum(jnp.mean(x, axis=0) ** 2)

    grad = jax.jit(jax.grad(ours))(x)
    _close(np.asarray(grad), jax.grad(theirs)(jnp.asarray(data)), rtol=1e-4)
