"""Row-local ops besides ``X @ w`` fuse under ``jax.jit``: a softmax, a logsumexp and the sum,
mean, maximum and minimum along axes after the first, and a ``take`` along them, of a stored
array.  Each is a node of a fused array computed on its consumer's row tiles, so a softmax
regression's loss reads ``X`` and its targets once a step and writes nothing.  Values and
gradients are checked against ``jax.numpy`` on the same data in memory; reads are counted with
``io_stats``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import oocarr
from oocarr.errors import InvalidArgumentError

RNG = np.random.default_rng(3801)
N, D, C = 2000, 10, 4
X = RNG.standard_normal((N, D)).astype("f4")
LABELS = RNG.integers(0, C, N)
Y = np.eye(C, dtype="f4")[LABELS]
W = (RNG.standard_normal((D, C)) / 3).astype("f4")


def _close(got, want, rtol=2e-5):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        w = np.asarray(w)
        scale = float(np.max(np.abs(w), initial=1.0))
        np.testing.assert_allclose(np.asarray(g), w, rtol=rtol, atol=rtol * scale)


def _cross_entropy(xp, logsumexp):
    return lambda w, x, y: xp.mean(logsumexp(x @ w, axis=1) - xp.sum((x @ w) * y, axis=1))


def _soft_targets(xp, softmax):
    return lambda w, x, y: xp.sum(xp.square(softmax(x @ w, axis=1) - y))


LOSSES = {
    "cross entropy": (
        _cross_entropy(oocarr, oocarr.logsumexp),
        _cross_entropy(jnp, jax.nn.logsumexp),
    ),
    "softmax squares": (_soft_targets(oocarr, oocarr.softmax), _soft_targets(jnp, jax.nn.softmax)),
}


@pytest.mark.parametrize("kind", list(LOSSES))
def test_a_softmax_regression_reads_each_input_once_and_matches_jax(kind, backend):
    x = oocarr.DiskArray(backend.store(X, chunks=(256, D)))
    y = oocarr.DiskArray(backend.store(Y, chunks=(256, C)))
    ours, theirs = LOSSES[kind]
    with oocarr.memory_budget("256KB"), oocarr.io_stats() as stats:
        value, grad = jax.jit(jax.value_and_grad(ours))(W, x, y)
    want_value, want_grad = jax.value_and_grad(theirs)(W, jnp.asarray(X), jnp.asarray(Y))
    _close(value, want_value)
    _close(grad, want_grad, rtol=1e-4)
    assert stats.total.bytes_read == X.nbytes + Y.nbytes
    assert stats.total.bytes_written == 0
    assert stats.total.tiles > 1


@pytest.mark.parametrize(
    "name, theirs",
    [
        ("sum", np.sum),
        ("mean", np.mean),
        ("max", np.max),
        ("min", np.min),
        ("logsumexp", lambda a, axis, keepdims: jax.nn.logsumexp(a, axis, keepdims=keepdims)),
    ],
)
@pytest.mark.parametrize("axis, keepdims", [(1, False), ((1, 2), False), (-1, True)])
def test_a_reduction_along_rows_under_jit_is_numpys_and_writes_only_its_result(
    name, theirs, axis, keepdims
):
    data = RNG.standard_normal((300, 5, 6)).astype("f4")
    x = oocarr.from_numpy(data)
    ours = getattr(oocarr, name)
    with oocarr.memory_budget("64KB"), oocarr.io_stats() as stats:
        got = np.asarray(jax.jit(lambda x: ours(x, axis=axis, keepdims=keepdims))(x))
    want = np.asarray(theirs(data, axis=axis, keepdims=keepdims))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert stats.total.bytes_read == data.nbytes
    # the result, once (a mean whose statistics fit in memory is held there: nothing)
    assert stats.total.bytes_written in ((0, want.nbytes) if name == "mean" else (want.nbytes,))


def test_reductions_along_rows_feeding_a_total_read_x_once():
    """``sum(max(x, 1) - mean(x, 1))``: both row reductions are nodes of one fused array."""
    x = oocarr.from_numpy(X)
    with oocarr.memory_budget("64KB"), oocarr.io_stats() as stats:
        got = float(
            jax.jit(lambda x: oocarr.sum(oocarr.max(x, axis=1) - oocarr.mean(x, axis=1)))(x)
        )
    np.testing.assert_allclose(got, np.sum(X.max(1) - X.mean(1)), rtol=1e-4)
    assert stats.total.bytes_read == X.nbytes
    assert stats.total.bytes_written == 0


def test_a_fused_softmax_is_returned_sliced_and_differentiated_in_x():
    x = oocarr.from_numpy(X)
    with oocarr.memory_budget("64KB"):
        got = np.asarray(jax.jit(lambda w: oocarr.softmax(x @ w, axis=1))(W))
        part = np.asarray(jax.jit(lambda w: oocarr.softmax(x @ w, axis=-1)[5:900, 1:3])(W))

        def ours(x):
            return oocarr.sum(oocarr.square(oocarr.softmax(x, axis=1)) * np.arange(D, dtype="f4"))

        grad = np.asarray(jax.jit(jax.grad(ours))(x))
    want = jax.nn.softmax(X @ W, axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(part, want[5:900, 1:3], rtol=1e-5, atol=1e-6)
    want_grad = jax.grad(
        lambda x: jnp.sum(jnp.square(jax.nn.softmax(x, axis=1)) * jnp.arange(D, dtype="f4"))
    )(jnp.asarray(X))
    _close(grad, want_grad, rtol=1e-4)


def test_a_softmax_along_the_first_axis_runs_as_a_stored_op_with_the_same_values():
    x = oocarr.from_numpy(X)
    with oocarr.io_stats() as stats:
        got = float(jax.jit(lambda x: oocarr.sum(oocarr.square(oocarr.softmax(x, axis=0))))(x))
    np.testing.assert_allclose(got, jnp.sum(jnp.square(jax.nn.softmax(X, axis=0))), rtol=1e-5)
    assert stats.total.bytes_written > 0  # the softmax's output reached scratch


def test_a_take_along_rows_fuses_and_its_weights_gradient_is_jaxs():
    x = oocarr.from_numpy(X)
    picked = np.array([7, 0, -1, 3, 3])

    def ours(w):
        return oocarr.sum(oocarr.square(oocarr.take(x, picked, axis=1) @ w))

    def theirs(w):
        return jnp.sum(jnp.square(jnp.take(jnp.asarray(X), picked, axis=1) @ w))

    w = W[:5]
    with oocarr.memory_budget("64KB"), oocarr.io_stats() as stats:
        value, grad = jax.jit(jax.value_and_grad(ours))(w)
    want_value, want_grad = jax.value_and_grad(theirs)(w)
    _close(value, want_value)
    _close(grad, want_grad, rtol=1e-4)
    assert stats.total.bytes_read == X.nbytes
    assert stats.total.bytes_written == 0


def test_a_take_along_rows_with_an_index_out_of_bounds_raises_under_jit_and_eagerly():
    x = oocarr.from_numpy(X)
    with pytest.raises(InvalidArgumentError, match="out of bounds"):
        jax.jit(lambda x: oocarr.sum(oocarr.take(x, np.array([1, D]), axis=1)))(x)
    with pytest.raises(InvalidArgumentError, match="out of bounds"):
        oocarr.take(x, np.array([-D - 1]), axis=1)


def test_a_take_along_rows_gives_x_the_gradient_of_jax():
    x = oocarr.from_numpy(X)
    picked = np.array([2, 2, 9])
    grad = np.asarray(
        jax.jit(jax.grad(lambda x: oocarr.sum(oocarr.take(x, picked, axis=1) ** 2)))(x)
    )
    want = jax.grad(lambda x: jnp.sum(jnp.take(x, picked, axis=1) ** 2))(jnp.asarray(X))
    _close(grad, want)


def test_rows_too_wide_for_the_budget_run_the_stored_ops():
    wide = RNG.standard_normal((64, 6000)).astype("f4")
    x = oocarr.from_numpy(wide)
    with oocarr.memory_budget("160KB"):
        got = np.asarray(jax.jit(lambda x: oocarr.logsumexp(x, axis=1))(x))
    np.testing.assert_allclose(got, jax.nn.logsumexp(wide, axis=1), rtol=1e-5)


def test_a_mean_within_the_rows_of_an_expression_stays_in_its_one_pass():
    """``mean(x @ w * y, axis=1)`` of a fused array is a row-local node, not a separate
    statistics pass: the whole loss reads ``x`` and ``y`` once."""
    x, y = oocarr.from_numpy(X), oocarr.from_numpy(Y)

    def ours(w):
        return oocarr.sum(oocarr.square(oocarr.mean((x @ w) * y, axis=1)))

    def theirs(w):
        return jnp.sum(jnp.square(jnp.mean((jnp.asarray(X) @ w) * Y, axis=1)))

    with oocarr.memory_budget("64KB"), oocarr.io_stats() as stats:
        value, grad = jax.jit(jax.value_and_grad(ours))(W)
    want_value, want_grad = jax.value_and_grad(theirs)(W)
    _close(value, want_value)
    _close(grad, want_grad, rtol=1e-4)
    assert stats.total.bytes_read == X.nbytes + Y.nbytes
    assert stats.total.bytes_written == 0
