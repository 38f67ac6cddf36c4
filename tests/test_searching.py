"""argmax/argmin (and the nan variants), prod, cumulative_sum, sort, argsort and searchsorted
over stored arrays, against NumPy (values), jax.numpy (dtypes) and jax.grad of jax.numpy
(gradients), eager and under jit, with shapes cut into several uneven tiles.  argmax and prod
run on every driver; the other cases on one."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import oocarr
from oocarr import errors
from oocarr.api import searching
from oocarr.ops.sorting import Sort
from stored_arrays import same, skip_slow, stored

#: Twelve float32 elements per tile for the reductions: (7, 5) and (9, 6, 5) span many tiles.
BUDGET = 4 * 4 * 24
#: Sort's tiles hold whole lines (and sort keeps more buffers): two or three lines a tile.
SORT_BUDGET = 1400
#: Each shape with the axes it is tested along: every axis of a 3-d array (tiles cut its
#: first two axes), and a row longer than a tile.
CASES = [((9, 6, 5), (None, 0, 1, 2, -1)), ((3, 29), (None, -1))]


def along(*, none=True):
    """``(shape, axis)`` pairs of :data:`CASES` (without ``axis=None`` unless ``none``)."""
    return [(s, a) for s, axes in CASES for a in axes if none or a is not None]


def reference_grad(f, a):
    """``jax.grad(f)(a)``, jitted (JAX's product gradient takes seconds op by op)."""
    return jax.jit(jax.grad(f))(jnp.asarray(a))


def ties(shape, seed=0, nans=True):
    """Small integers as float32 (many equal values), with NaNs in a few places."""
    a = np.random.default_rng(seed).integers(-3, 4, shape).astype(np.float32)
    if nans:
        a.flat[[4, 17]] = np.nan
    return a


def factors(shape, seed=0):
    """Values near one in size (products of many stay finite), with three zeros: the first
    element, and both ends of the last line along the last axis (a slice with two zeros)."""
    rng = np.random.default_rng(seed)
    a = (rng.uniform(0.7, 1.3, shape) * rng.choice([-1, 1], shape)).astype(np.float32)
    a[(0,) * len(shape)] = 0
    last = tuple(n - 1 for n in shape)
    a[last] = 0
    a[(*last[:-1], 0)] = 0
    return a


# -- argmax, argmin ---------------------------------------------------------------


def test_argmax_on_every_driver(backend):
    skip_slow(backend)
    a = ties((7, 5))
    x = stored(backend, a)
    with oocarr.memory_budget(BUDGET):
        for axis in (None, 0, 1):
            same(searching.argmax(x, axis=axis), np.argmax(a, axis=axis).astype(np.int32))
        b = ties((7, 5), nans=False)
        same(searching.argmin(stored(backend, b)), np.int32(np.argmin(b)))


def test_argmax_and_argmin_every_axis_with_ties_and_nans():
    with oocarr.memory_budget(BUDGET):
        for i, (shape, axis) in enumerate(along()):
            a = ties(shape)
            x = oocarr.from_numpy(a)
            for name in ("argmax", "argmin"):
                kw = {"axis": axis, "keepdims": i % 2 == 1}
                got = getattr(searching, name)(x, **kw)
                same(got, np.asarray(getattr(np, name)(a, **kw), np.int32))


def test_argmax_of_integer_and_boolean_dtypes():
    rng = np.random.default_rng(1)
    with oocarr.memory_budget(BUDGET):
        for dtype in ("int8", "uint16", "bool"):
            a = rng.integers(0, 3, (9, 6, 5)).astype(dtype)
            x = oocarr.from_numpy(a)
            for name, axis in (("argmax", None), ("argmin", 0)):
                got = getattr(searching, name)(x, axis=axis)
                assert got.dtype == getattr(jnp, name)(a, axis=axis).dtype == np.int32
                same(got, getattr(np, name)(a, axis=axis).astype(np.int32))
        # the dtype's extremes are ordinary values (not the fold's starting value)
        low = np.full((7, 5), np.iinfo(np.int32).min, np.int32)
        same(searching.argmax(oocarr.from_numpy(low), axis=0), np.zeros(5, np.int32))
        inf = np.full((7, 5), -np.inf, np.float32)
        same(searching.argmax(oocarr.from_numpy(inf)), np.int32(0))
        same(searching.argmax(np.float32(3.0)), np.int32(0))


def test_argmax_under_jit():
    a = ties((9, 6, 5))
    x = oocarr.from_numpy(a)
    with oocarr.memory_budget(BUDGET):
        f = jax.jit(lambda v: (searching.argmax(v, axis=1), searching.argmin(v * 2.0)))
        got_max, got_min = f(x)
    same(got_max, np.argmax(a, axis=1).astype(np.int32))
    same(got_min, np.int32(np.argmin(a)))


def test_argmax_refuses_empty_slices_tuples_and_complex():
    with pytest.raises(errors.InvalidArgumentError, match="empty"):
        searching.argmax(oocarr.from_numpy(np.zeros((3, 0), "f4")), axis=1)
    with pytest.raises(errors.InvalidArgumentError, match="one axis"):
        searching.argmax(oocarr.from_numpy(np.zeros((3, 2), "f4")), axis=(0, 1))
    with pytest.raises(errors.NotSupportedError, match="complex"):
        searching.argmax(oocarr.from_numpy(np.zeros(3, "c8")))


# -- nanargmax, nanargmin ---------------------------------------------------------


def test_nanargmax_and_nanargmin_skip_nans():
    a = ties((9, 6, 5), nans=False)
    a[0, 0, :4] = a[1, 2, :3] = a[4, 2, 1:] = np.nan  # no slice along any axis all NaN
    x = oocarr.from_numpy(a)
    with oocarr.memory_budget(BUDGET):
        for axis in (None, 0, -1):
            for name in ("nanargmax", "nanargmin"):
                got = getattr(searching, name)(x, axis=axis, keepdims=True)
                want = getattr(np, name)(a, axis=axis, keepdims=True)
                same(got, np.asarray(want, np.int32))


def test_all_nan_slice_raises_eagerly_and_gives_minus_one_under_jit():
    a = ties((7, 5), nans=False)
    a[:, 3] = np.nan
    x = oocarr.from_numpy(a)
    with oocarr.memory_budget(BUDGET):
        with pytest.raises(errors.InvalidArgumentError, match="NaN"):
            searching.nanargmax(x, axis=0)
        with pytest.raises(ValueError):
            searching.nanargmin(oocarr.from_numpy(np.full(4, np.nan, "f4")))
        got = jax.jit(lambda v: searching.nanargmax(v, axis=0))(x)
    same(got, jnp.nanargmax(a, axis=0))
    assert np.asarray(got)[3] == -1


# -- prod -------------------------------------------------------------------------


def test_prod_values_and_exact_gradient_on_every_driver(backend):
    skip_slow(backend)
    a = factors((7, 5))
    x = stored(backend, a)
    with oocarr.memory_budget(BUDGET):
        for axis in (None, 0, 1):
            same(searching.prod(x, axis=axis), np.prod(a, axis=axis))
        got = jax.grad(lambda v: oocarr.sum(searching.prod(v, axis=0)))(x)
    want = jax.grad(lambda v: jnp.sum(jnp.prod(v, axis=0)))(jnp.asarray(a))
    same(got, want)


def test_prod_every_axis_and_gradient_with_zeros():
    rng = np.random.default_rng(2)
    with oocarr.memory_budget(BUDGET):
        for shape, axis in [*along(), ((9, 6, 5), (0, -1))]:
            a = factors(shape)
            x = oocarr.from_numpy(a)
            for keepdims in (False, True):
                kw = {"axis": axis, "keepdims": keepdims}
                same(searching.prod(x, **kw), np.prod(a, **kw))
            if axis not in (None, -1, (0, -1)):
                continue  # axis 0's gradient is the every-driver test's, axis 1's the jit test's
            kw = {"axis": axis, "keepdims": isinstance(axis, tuple)}
            c = rng.standard_normal(np.prod(a, **kw).shape).astype(np.float32)
            got = jax.grad(lambda v, kw=kw, c=c: oocarr.sum(searching.prod(v, **kw) * c))(x)
            same(got, reference_grad(lambda v, kw=kw, c=c: jnp.sum(jnp.prod(v, **kw) * c), a))


def test_prod_gradient_counts_zeros_per_slice():
    a = np.full((7, 5), 1.5, np.float32)
    a[2, 0] = 0  # column 0: one zero
    a[1, 1] = a[5, 1] = 0  # column 1: two zeros
    with oocarr.memory_budget(BUDGET):
        got = np.asarray(jax.grad(lambda v: oocarr.sum(searching.prod(v, axis=0)))(a))
    assert got[2, 0] == np.float32(1.5**6) and np.count_nonzero(got[:, 0]) == 1
    assert not got[:, 1].any()
    same(got, jax.grad(lambda v: jnp.sum(jnp.prod(v, axis=0)))(jnp.asarray(a)))


def test_prod_dtypes_follow_jax_numpy():
    rng = np.random.default_rng(3)
    with oocarr.memory_budget(BUDGET):
        for dtype in ("int8", "uint8", "int32", "bool"):
            a = rng.integers(-3, 4, (9, 6, 5)).astype(dtype)
            x = oocarr.from_numpy(a)
            for axis in (None, 1):
                want = jnp.prod(a, axis=axis)  # integers wrap in int32 as jax.numpy's do
                same(searching.prod(x, axis=axis), want)
        a = factors((9, 6, 5))
        same(
            searching.prod(oocarr.from_numpy(a), axis=2, dtype="float16"),
            jnp.prod(a, 2, "f2"),
            1e-2,
        )
        b = rng.integers(1, 3, (7, 5)).astype("int8")
        same(searching.prod(oocarr.from_numpy(b), axis=0, dtype=jnp.float32), np.prod(b, 0, "f4"))


def test_prod_under_jit_and_jitted_gradient():
    a = factors((9, 6, 5))
    x = oocarr.from_numpy(a)
    with oocarr.memory_budget(BUDGET):
        value = jax.jit(lambda v: searching.prod(v * 1.0, axis=(0, 2)))(x)
        grad = jax.jit(jax.grad(lambda v: oocarr.sum(searching.prod(v, axis=1))))(x)
    same(value, np.prod(a, axis=(0, 2)))
    same(grad, jax.grad(lambda v: jnp.sum(jnp.prod(v, axis=1)))(jnp.asarray(a)))


# -- cumulative_sum ---------------------------------------------------------------


def test_cumulative_sum_every_axis_values_and_gradient():
    rng = np.random.default_rng(5)
    with oocarr.memory_budget(BUDGET):
        for i, (shape, axis) in enumerate(along(none=False)):
            a = rng.standard_normal(shape).astype(np.float32)
            kw = {"axis": axis, "include_initial": i % 2 == 1}
            want = jnp.cumulative_sum(a, **kw)
            same(searching.cumulative_sum(oocarr.from_numpy(a), **kw), want)
            c = rng.standard_normal(want.shape).astype(np.float32)
            ours = functools.partial(searching.cumulative_sum, **kw)
            theirs = functools.partial(jnp.cumulative_sum, **kw)
            got = jax.grad(lambda v, f=ours, c=c: oocarr.sum(f(v) * c))(oocarr.from_numpy(a))
            same(got, reference_grad(lambda v, f=theirs, c=c: jnp.sum(f(v) * c), a))


def test_cumulative_sum_dtypes_one_axis_and_jit():
    rng = np.random.default_rng(6)
    with oocarr.memory_budget(BUDGET):
        for dtype in ("int8", "bool"):  # widened to int32, as jax.numpy's are
            a = rng.integers(0, 100, (9, 6, 5)).astype(dtype)
            same(
                searching.cumulative_sum(oocarr.from_numpy(a), axis=0),
                jnp.cumulative_sum(a, axis=0),
            )
        b = rng.integers(-5, 5, 40).astype("int16")
        xb = oocarr.from_numpy(b)
        same(searching.cumulative_sum(xb), jnp.cumulative_sum(b))
        same(searching.cumulative_sum(xb, dtype="float32"), np.cumsum(b, dtype="f4"))
        with pytest.raises(errors.InvalidArgumentError, match="axis"):
            searching.cumulative_sum(oocarr.from_numpy(np.zeros((3, 4), "f4")))
        a = rng.standard_normal((7, 5)).astype(np.float32)
        f = jax.jit(lambda v: searching.cumulative_sum(v * 2.0, axis=0, include_initial=True))
        got = f(oocarr.from_numpy(a))
        g = jax.jit(jax.grad(lambda v: oocarr.sum(searching.cumulative_sum(v, axis=1) ** 2)))
        grad = g(oocarr.from_numpy(a))
    same(got, jnp.cumulative_sum(a * 2.0, axis=0, include_initial=True))
    same(grad, jax.grad(lambda v: jnp.sum(jnp.cumulative_sum(v, axis=1) ** 2))(a), 1e-4)


# -- sort, argsort ----------------------------------------------------------------


def test_sort_and_argsort_every_axis_with_ties_and_nans():
    rng = np.random.default_rng(7)
    with oocarr.memory_budget(SORT_BUDGET):
        for i, (shape, axis) in enumerate(along(none=False)):
            a = ties(shape)
            x = oocarr.from_numpy(a)
            c = rng.standard_normal(shape).astype(np.float32)
            for descending in (False, True):
                kw = {"axis": axis, "descending": descending}
                same(searching.sort(x, **kw), jnp.sort(a, **kw))
                got = np.asarray(searching.argsort(x, **kw))
                same(got, jnp.argsort(a, **kw))
                if not descending:
                    same(got, np.argsort(a, axis=axis, kind="stable").astype(np.int32))
                if descending != (i % 2 == 1):
                    continue  # each axis's gradient one way, ascending or descending
                ours = functools.partial(searching.sort, **kw)
                theirs = functools.partial(jnp.sort, **kw)
                grad = jax.grad(lambda v, f=ours, c=c: oocarr.sum(f(v) * c))(x)
                same(grad, reference_grad(lambda v, f=theirs, c=c: jnp.sum(f(v) * c), a))


def test_argsort_descending_keeps_equal_elements_in_order():
    a = np.array([[2, 1, 2, 0, 1, 2, 1]] * 3, "i4")
    with oocarr.memory_budget(SORT_BUDGET):
        got = np.asarray(searching.argsort(oocarr.from_numpy(a), descending=True))
    np.testing.assert_array_equal(got[0], [0, 2, 5, 1, 4, 6, 3])
    # the standard's stable descending order is NumPy's stable sort of the negated values
    np.testing.assert_array_equal(got, np.argsort(-a, axis=-1, kind="stable"))


def test_sort_integer_dtypes_jit_and_index_gradients_are_zero():
    rng = np.random.default_rng(8)
    with oocarr.memory_budget(SORT_BUDGET):
        for dtype in ("int8", "uint16", "int32", "bool"):
            a = rng.integers(0, 5, (9, 6, 5)).astype(dtype)
            same(searching.sort(oocarr.from_numpy(a), axis=1), np.sort(a, axis=1))
        a = ties((9, 6, 5))
        x = oocarr.from_numpy(a)
        value = jax.jit(lambda v: searching.sort(v + 1.0, axis=0, descending=True))(x)
        same(value, jnp.sort(a + 1.0, axis=0, descending=True))
        grad = jax.jit(jax.grad(lambda v: oocarr.sum(searching.sort(v, axis=0)[0] ** 2)))(x)
        same(grad, jax.grad(lambda v: jnp.sum(jnp.sort(v, axis=0)[0] ** 2))(a))

        def through_indices(v):  # the indices' own gradient is zero
            return oocarr.sum(oocarr.astype(searching.argsort(v), "float32") * v)

        same(jax.grad(through_indices)(x), jnp.argsort(a).astype(np.float32))


def test_sort_compiled_for_accelerators_matches(monkeypatch):
    """The compiled sort (what runs off the CPU backend) gives what NumPy's gives on it."""
    monkeypatch.setattr(Sort, "host", False)
    a = ties((9, 6, 5))
    x = oocarr.from_numpy(a)
    c = np.random.default_rng(10).standard_normal(a.shape).astype(np.float32)
    with oocarr.memory_budget(SORT_BUDGET):
        for axis, descending in ((0, True), (-1, False)):
            kw = {"axis": axis, "descending": descending}
            same(searching.sort(x, **kw), jnp.sort(a, **kw))
            same(searching.argsort(x, **kw), jnp.argsort(a, **kw))
            grad = jax.grad(lambda v, kw=kw: oocarr.sum(searching.sort(v, **kw) * c))(x)
            same(grad, reference_grad(lambda v, kw=kw: jnp.sum(jnp.sort(v, **kw) * c), a))


def test_sort_refuses_lines_longer_than_the_budget():
    x = oocarr.from_numpy(np.zeros((4, 1000), "f4"))
    with oocarr.memory_budget(4096):
        with pytest.raises(errors.BudgetTooSmallError, match="lines of 1000 elements along axis 1"):
            searching.sort(x)
        same(searching.sort(x, axis=0), np.zeros((4, 1000), "f4"))


# -- searchsorted -----------------------------------------------------------------


def test_searchsorted_matches_numpy():
    rng = np.random.default_rng(9)
    edges = np.sort(rng.integers(0, 10, 12)).astype(np.float32)
    values = rng.integers(-1, 12, (9, 6, 5)).astype(np.float32)
    values[0, 0, :2] = np.nan
    order = rng.permutation(12)
    shuffled = np.empty_like(edges)
    shuffled[order] = edges  # shuffled[order] is edges: order sorts shuffled
    x1, x2 = oocarr.from_numpy(edges), oocarr.from_numpy(values)
    with oocarr.memory_budget(2 * BUDGET):
        for side in ("left", "right"):
            want = np.searchsorted(edges, values, side=side).astype(np.int32)
            same(searching.searchsorted(x1, x2, side=side), want)
            got = searching.searchsorted(oocarr.from_numpy(shuffled), x2, side=side, sorter=order)
            same(got, want)
        same(searching.searchsorted(x1, np.float32(4.5)), np.int32(np.searchsorted(edges, 4.5)))
        ints = rng.integers(0, 12, (7, 5)).astype("i4")
        same(
            searching.searchsorted(x1, oocarr.from_numpy(ints)),
            np.searchsorted(edges, ints).astype("i4"),
        )
        got = jax.jit(lambda e, v: searching.searchsorted(e, v * 1.0, side="right"))(x1, x2)
    same(got, np.searchsorted(edges, values, side="right").astype(np.int32))


def test_searchsorted_refuses_what_it_cannot_hold():
    x1 = oocarr.from_numpy(np.arange(1000, dtype="f4"))
    x2 = oocarr.from_numpy(np.zeros((7, 5), "f4"))
    with oocarr.memory_budget(BUDGET):
        with pytest.raises(errors.BudgetTooSmallError, match="x1 of 1000 elements"):
            searching.searchsorted(x1, x2)
    with pytest.raises(errors.InvalidArgumentError, match="1-d"):
        searching.searchsorted(oocarr.from_numpy(np.zeros((2, 2), "f4")), x2)
    with pytest.raises(errors.InvalidArgumentError, match="side"):
        searching.searchsorted(x1, x2, side="middle")
