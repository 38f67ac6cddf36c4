"""The Array API's manipulation functions on DiskArrays, against NumPy (values) and jax.numpy
(gradients), eager and under jit, with shapes cut into several uneven tiles; reshape, concat
and broadcast_to on every driver, the rest on memmap-npy."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oocarr
from oocarr import errors
from oocarr.api import manipulation as mp
from stored_arrays import same, skip_slow, stored

BUDGET = 4 * 4 * 24


def values(shape, seed=0, dtype="f4"):
    return np.random.default_rng(seed).uniform(-3, 3, shape).astype(dtype)


# -- every driver: the three ops that copy ---------------------------------------------------


def test_reshape_on_every_driver(backend):
    skip_slow(backend)
    a = values((9, 6, 5))
    x = stored(backend, a)
    with oocarr.memory_budget(BUDGET):
        for shape in [(6, 45), (270,), (5, 3, 18), (2, -1, 3), (3, 3, 2, 3, 5)]:
            same(mp.reshape(x, shape), a.reshape(shape))
        same(jax.jit(lambda u: mp.reshape(u, (45, 6)))(x), a.reshape(45, 6))
        same(mp.reshape(x[1:8, 2], (5, 7)), a[1:8, 2].reshape(5, 7))


def test_concat_on_every_driver(backend):
    skip_slow(backend)
    a, b, c = values((7, 5), 1), values((3, 5), 2), values((7, 2), 3)
    x, z = stored(backend, a), stored(backend, c)
    with oocarr.memory_budget(BUDGET):
        same(mp.concat([x, b, x]), np.concatenate([a, b, a]))
        same(mp.concat([x, z], axis=-1), np.concatenate([a, c], axis=1))
        same(mp.concat([x, b], axis=None), np.concatenate([a.ravel(), b.ravel()]))
        same(jax.jit(lambda u, v: mp.concat([u, v], axis=1))(x, z), np.concatenate([a, c], 1))
        same(mp.stack([x, x[::-1]], axis=1), np.stack([a, a[::-1]], axis=1))


def test_broadcast_to_on_every_driver(backend):
    skip_slow(backend)
    a = values((7, 1))
    x = stored(backend, a)
    with oocarr.memory_budget(BUDGET):
        same(mp.broadcast_to(x, (3, 7, 5)), np.broadcast_to(a, (3, 7, 5)))
        same(jax.jit(lambda u: mp.broadcast_to(u, (7, 9)))(x), np.broadcast_to(a, (7, 9)))
        same(mp.broadcast_to(x[2:3, 0], (4, 6)), np.broadcast_to(a[2:3, 0], (4, 6)))


# -- every function: values eager and under jit, gradients eager and under jit -------------

Y = values((5, 4, 3), 7)

#: name -> (oocarr function, jax.numpy function, input shape)
CASES = {
    "reshape": (lambda u: mp.reshape(u, (4, 15)), lambda u: jnp.reshape(u, (4, 15)), (5, 4, 3)),
    "expand_dims": (
        lambda u: mp.expand_dims(u, axis=-2),
        lambda u: jnp.expand_dims(u, -2),
        (5, 4, 3),
    ),
    "squeeze": (lambda u: mp.squeeze(u, (1, 3)), lambda u: jnp.squeeze(u, (1, 3)), (5, 1, 3, 1)),
    "concat": (
        lambda u: mp.concat([u, Y[:, :1], u], axis=1),
        lambda u: jnp.concatenate([u, Y[:, :1], u], axis=1),
        (5, 4, 3),
    ),
    "stack": (
        lambda u: mp.stack([u, Y, u * 2.0], axis=-1),
        lambda u: jnp.stack([u, Y, u * 2.0], axis=-1),
        (5, 4, 3),
    ),
    "flip": (lambda u: mp.flip(u, axis=(0, 2)), lambda u: jnp.flip(u, (0, 2)), (5, 4, 3)),
    "flip_all": (mp.flip, jnp.flip, (5, 4, 3)),
    "moveaxis": (
        lambda u: mp.moveaxis(u, (0, 1), (-1, 0)),
        lambda u: jnp.moveaxis(u, (0, 1), (-1, 0)),
        (5, 4, 3),
    ),
    "broadcast_to": (
        lambda u: mp.broadcast_to(u, (2, 5, 4, 3)),
        lambda u: jnp.broadcast_to(u, (2, 5, 4, 3)),
        (5, 1, 3),
    ),
    "broadcast_arrays": (
        lambda u: mp.broadcast_arrays(u, Y)[0],
        lambda u: jnp.broadcast_arrays(u, Y)[0],
        (4, 1),
    ),
    "roll": (
        lambda u: mp.roll(u, (2, -1, 4), axis=(0, 2, 0)),
        lambda u: jnp.roll(u, (2, -1, 4), axis=(0, 2, 0)),
        (5, 4, 3),
    ),
    "roll_flat": (lambda u: mp.roll(u, 11), lambda u: jnp.roll(u, 11), (5, 4, 3)),
    "tile": (lambda u: mp.tile(u, (2, 1, 3)), lambda u: jnp.tile(u, (2, 1, 3)), (5, 3)),
    "tile_leading": (lambda u: mp.tile(u, (3, 1, 1)), lambda u: jnp.tile(u, (3, 1, 1)), (7, 3)),
    "repeat": (
        lambda u: mp.repeat(u, 3, axis=1),
        lambda u: jnp.repeat(u, 3, axis=1),
        (5, 4, 3),
    ),
    "repeat_counts": (
        lambda u: mp.repeat(u, np.array([2, 2, 0, 1, 3, 3, 1]), axis=0),
        lambda u: jnp.repeat(u, np.array([2, 2, 0, 1, 3, 3, 1]), axis=0),
        (7, 3),
    ),
    "repeat_flat": (lambda u: mp.repeat(u, 2), lambda u: jnp.repeat(u, 2), (7, 3)),
    "unstack": (
        lambda u: mp.stack(mp.unstack(u, axis=1)[::-1]),
        lambda u: jnp.stack(jnp.unstack(u, axis=1)[::-1]),
        (5, 4, 3),
    ),
}


def _case(name):
    """The case's input, its output (from jax.numpy), a weight per output element, the
    gradient of the weighted sum (``jax.grad`` of jax.numpy), and our weighted sum."""
    ours, ref, shape = CASES[name]
    a = values(shape, 11)
    want = np.asarray(jax.jit(ref)(a))
    w = values(want.shape, 12)
    reference = jax.jit(jax.grad(lambda u: jnp.sum(ref(u) * w)))(a)
    return a, want, reference, lambda u: oocarr.sum(ours(u) * w)


@pytest.mark.parametrize("name", sorted(CASES))
def test_function_values_and_gradients_under_jit(name):
    a, want, reference, loss = _case(name)
    x = oocarr.from_numpy(a)
    with oocarr.memory_budget(BUDGET):
        same(CASES[name][0](x), want)
        same(jax.jit(CASES[name][0])(x), want)
        same(jax.jit(jax.grad(loss))(x), reference, 1e-4)


@pytest.mark.parametrize("name", ["reshape", "concat", "broadcast_to", "flip", "unstack"])
def test_eager_gradients(name):
    a, _, reference, loss = _case(name)
    with oocarr.memory_budget(BUDGET):
        same(jax.grad(loss)(oocarr.from_numpy(a)), reference, 1e-4)


def test_concat_gradients_reach_every_input():
    a, b = values((7, 5), 1), values((4, 5), 2)
    w = values((18, 5), 3)
    c = values((7, 5), 4)

    def ours(u, v):
        return oocarr.sum(mp.concat([u, v, jnp.asarray(c)]) * w)

    def ref(u, v):
        return jnp.sum(jnp.concatenate([u, v, c]) * w)

    x, y = oocarr.from_numpy(a), oocarr.from_numpy(b)
    with oocarr.memory_budget(BUDGET):
        gx, gy = jax.jit(jax.grad(ours, argnums=(0, 1)))(x, y)
        gm = jax.grad(ours, argnums=1)(x, b)  # in memory: the gradient is in memory too
    rx, ry = jax.grad(ref, argnums=(0, 1))(a, b)
    same(gx, rx)
    same(gy, ry)
    same(gm, ry)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(
    st.lists(st.integers(1, 4), min_size=0, max_size=4),
    st.permutations([2, 3, 5, 1]),
    st.integers(0, 3),
)
def test_reshape_between_random_shapes(dims, factors, cut):
    a = np.arange(int(np.prod(dims, dtype=int)) * 30, dtype="f4").reshape((*dims, 30))
    target = (int(np.prod(factors[:cut], dtype=int)), -1, *factors[cut:])
    x = oocarr.from_numpy(a)
    with oocarr.memory_budget(BUDGET):
        same(mp.reshape(x, target), a.reshape(target))


# -- dtypes, in-memory inputs, inputs returned as they are -----------------------------------


def test_dtypes_are_kept_and_promoted():
    a = np.arange(35, dtype="i2").reshape(7, 5)
    x = oocarr.from_numpy(a)
    with oocarr.memory_budget(BUDGET):
        same(mp.reshape(x, (5, 7)), a.reshape(5, 7))
        same(mp.broadcast_to(x[:1], (3, 5)), np.broadcast_to(a[:1], (3, 5)))
        same(mp.tile(x > 3, (1, 2)), np.tile(a > 3, (1, 2)))
        same(mp.concat([x, x]), np.concatenate([a, a]))
        mixed = mp.concat([x, oocarr.from_numpy(a.astype("f4"))])
    assert mixed.dtype == np.dtype(jnp.result_type(jnp.int16, jnp.float32))
    same(mixed, np.concatenate([a, a]).astype(mixed.dtype))


def test_in_memory_inputs_give_stored_results():
    a = values((7, 5))
    with oocarr.memory_budget(BUDGET):
        for got, want in [
            (mp.reshape(a, (5, 7)), a.reshape(5, 7)),
            (mp.expand_dims(jnp.asarray(a), axis=0), a[None]),
            (mp.flip(a, axis=0), a[::-1]),
            (mp.broadcast_to(a, (2, 7, 5)), np.broadcast_to(a, (2, 7, 5))),
            (mp.concat([a, jnp.asarray(a)], axis=1), np.concatenate([a, a], 1)),
        ]:
            assert isinstance(got, oocarr.DiskArray)
            same(got, want)


def test_results_equal_to_the_input_are_the_input():
    x = oocarr.from_numpy(values((3, 1, 4)))
    assert mp.reshape(x, (3, 1, 4)) is x
    assert mp.reshape(x, (3, -1, 4), copy=False) is x
    assert mp.squeeze(x, ()) is x
    assert mp.broadcast_to(x, (3, 1, 4)) is x
    assert mp.moveaxis(x, 1, 1) is x
    assert mp.roll(x, 4, axis=2) is x
    assert mp.tile(x, (1, 1)) is x
    assert mp.repeat(x, 1, axis=0) is x
    assert mp.concat([x]) is x
    assert mp.flip(x, axis=()) is x
    copied = mp.reshape(x, (3, 1, 4), copy=True)
    assert copied is not x and copied.locator != x.locator
    same(copied, np.asarray(x))


def test_views_of_a_stored_array_copy_nothing():
    x = oocarr.from_numpy(values((7, 1, 5)))
    with oocarr.io_stats() as stats:
        views = [
            mp.expand_dims(x, axis=0),
            mp.squeeze(x, 1),
            mp.flip(x, axis=2),
            *mp.unstack(x, axis=2),
        ]
    assert stats.total.bytes_written == 0
    assert all(v.locator.driver == "view" for v in views)
    same(views[2], np.asarray(x)[:, :, ::-1])
    same(views[3], np.asarray(x)[:, :, 0])


def test_empty_and_zero_dimensional_arrays():
    a = values((0, 5))
    x = oocarr.from_numpy(a)
    s = oocarr.from_numpy(np.float32(2.5))
    with oocarr.memory_budget(BUDGET):
        same(mp.reshape(x, (5, 0, 3)), a.reshape(5, 0, 3))
        same(mp.concat([x, values((2, 5))]), np.concatenate([a, values((2, 5))]))
        same(mp.broadcast_to(s, (3, 2)), np.full((3, 2), 2.5, "f4"))
        same(mp.reshape(s, (1, 1)), np.full((1, 1), 2.5, "f4"))
        same(mp.reshape(mp.reshape(s, (1, 1)), ()), np.float32(2.5))
        same(mp.stack([s, s]), np.full(2, 2.5, "f4"))
        same(mp.tile(x, (2, 0)), np.tile(a, (2, 0)))
        same(mp.repeat(oocarr.from_numpy(values((3, 2))), [0, 0, 0], axis=0), values((0, 2)))


def test_copies_stream_tile_sized_pieces():
    a = values((64, 48))
    x = oocarr.from_numpy(a)
    with oocarr.memory_budget(BUDGET):
        for run, want in [
            (lambda: mp.reshape(x, (48, 64)), a.reshape(48, 64)),
            (lambda: mp.concat([x, x[:16]], axis=0), np.concatenate([a, a[:16]])),
        ]:
            with oocarr.io_stats() as stats:
                y = run()
            same(y, want)
            assert stats.total.bytes_read == want.nbytes  # each element read once
            assert stats.total.bytes_written == want.nbytes
            assert stats.total.pages_read >= want.nbytes // BUDGET
        with oocarr.io_stats() as stats:
            y = mp.broadcast_to(x[:1], (64, 48))
        assert stats.total.bytes_read == a[:1].nbytes  # the row read once, kept for each tile
        assert stats.total.pages_written >= a.nbytes // BUDGET
        same(y, np.broadcast_to(a[:1], (64, 48)))


# -- errors --------------------------------------------------------------------------------


def test_errors_name_the_problem():
    x = oocarr.from_numpy(values((7, 5)))
    with pytest.raises(errors.ShapeMismatchError, match="35 elements"):
        mp.reshape(x, (6, 6))
    with pytest.raises(errors.ShapeMismatchError):
        mp.reshape(x, (-1, 3))
    with pytest.raises(errors.InvalidArgumentError, match="one -1"):
        mp.reshape(x, (-1, -1))
    with pytest.raises(errors.InvalidArgumentError, match="copy=False"):
        mp.reshape(x, (5, 7), copy=False)
    with pytest.raises(errors.ShapeMismatchError, match="array 1 has shape"):
        mp.concat([x, values((7, 4))])
    with pytest.raises(errors.ShapeMismatchError):
        mp.stack([x, values((5, 7))])
    with pytest.raises(errors.InvalidArgumentError, match="length 7, not 1"):
        mp.squeeze(x, 0)
    with pytest.raises(errors.InvalidArgumentError, match="out of range"):
        mp.expand_dims(x, axis=3)
    with pytest.raises(errors.InvalidArgumentError, match="at least one"):
        mp.concat([])
    with pytest.raises(errors.ShapeMismatchError, match="neither 1 nor"):
        mp.broadcast_to(x, (7, 4))
    with pytest.raises(errors.ShapeMismatchError):
        mp.broadcast_to(x, (5,))
    with pytest.raises(errors.ShapeMismatchError, match="do not broadcast"):
        mp.broadcast_arrays(x, values((3,)))
    with pytest.raises(errors.InvalidArgumentError, match="repeated axis"):
        mp.moveaxis(x, (0, 0), (0, 1))
    with pytest.raises(errors.InvalidArgumentError, match="one shift per axis"):
        mp.roll(x, (1, 2, 3), axis=(0, 1))
    with pytest.raises(errors.InvalidArgumentError, match="counts for an axis"):
        mp.repeat(x, [1, 2], axis=0)
    with pytest.raises(errors.InvalidArgumentError, match="non-negative"):
        mp.tile(x, (-1, 2))
    with pytest.raises(errors.NotSupportedError, match="traced"):
        jax.jit(lambda u, r: mp.repeat(u, r, axis=0))(x, jnp.ones(7, "i4"))
