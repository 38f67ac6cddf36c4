"""tensordot and einsum against NumPy (values) and jax.numpy (gradients), eager and under jit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import oocarr
from oocarr import errors
from stored_arrays import skip_slow, stored

BUDGET = 4 * 4 * 48

rng = np.random.default_rng(0)
A = rng.normal(size=(4, 3, 5)).astype(np.float32)
B = rng.normal(size=(3, 5, 6)).astype(np.float32)
C = rng.normal(size=(4, 5, 2)).astype(np.float32)

TENSORDOT = [
    (A, B, 2),
    (A, B, ([1], [0])),
    (A, C, ([0, 2], [0, 1])),
    (A, B, 0),
    (A, B, ([-1, 1], [1, 0])),
]

EINSUM = [
    ("ijk,jkl->il", A, B),
    ("ijk,ikl->ijl", A, C),  # a batch axis
    ("ijk,ikl->jl", A, C),
    ("ijk,lk->ijl", A, C[0].T.copy()),
    ("ijk,ikl", A, C),  # implicit output
    ("ijk->kj", A),
    ("ijk->", A),
    ("ijk,ikl->lji", A, C),
    ("ijk,jm->im", A, rng.normal(size=(3, 2)).astype(np.float32)),  # k summed alone
]


def test_tensordot_on_every_driver(backend):
    skip_slow(backend)
    with oocarr.memory_budget(BUDGET):
        got = oocarr.tensordot(stored(backend, A), stored(backend, B), axes=2)
        np.testing.assert_allclose(np.asarray(got), np.tensordot(A, B, 2), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", TENSORDOT, ids=range(len(TENSORDOT)))
def test_tensordot_matches_numpy_and_jax_gradients(case):
    a, b, axes = case
    x, y = oocarr.from_numpy(a), oocarr.from_numpy(b)
    with oocarr.memory_budget(BUDGET):
        got = oocarr.tensordot(x, y, axes=axes)
        jitted = jax.jit(lambda x, y: oocarr.tensordot(x, y, axes=axes))(x, y)
        ga, gb = jax.grad(lambda x, y: oocarr.sum(oocarr.tensordot(x, y, axes=axes) ** 2), (0, 1))(
            x, y
        )
    want = np.tensordot(a, b, axes)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(jitted), want, rtol=1e-4, atol=1e-4)
    wa, wb = jax.grad(lambda a, b: jnp.sum(jnp.tensordot(a, b, axes) ** 2), (0, 1))(a, b)
    np.testing.assert_allclose(np.asarray(ga), wa, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(np.asarray(gb), wb, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("case", EINSUM, ids=[c[0] for c in EINSUM])
def test_einsum_matches_numpy_and_jax_gradients(case):
    spec, *arrays = case
    disk = [oocarr.from_numpy(a) for a in arrays]
    with oocarr.memory_budget(BUDGET):
        got = oocarr.einsum(spec, *disk)
        grads = jax.grad(
            lambda *xs: oocarr.sum(oocarr.einsum(spec, *xs) ** 2), tuple(range(len(disk)))
        )(*disk)
    np.testing.assert_allclose(np.asarray(got), np.einsum(spec, *arrays), rtol=1e-4, atol=1e-4)
    want = jax.grad(lambda *xs: jnp.sum(jnp.einsum(spec, *xs) ** 2), tuple(range(len(arrays))))(
        *arrays
    )
    for g, w in zip(grads, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-3, atol=1e-3)


def test_contraction_errors_name_the_problem():
    x = oocarr.from_numpy(A)
    with pytest.raises(errors.NotSupportedError, match="diagonal"):
        oocarr.einsum("iik->k", oocarr.from_numpy(np.zeros((3, 3, 2), "f4")))
    with pytest.raises(errors.NotSupportedError, match="two at a time"):
        oocarr.einsum("i,i,i->", x[0, 0], x[0, 0], x[0, 0])
    with pytest.raises(errors.InvalidArgumentError, match="does not name"):
        oocarr.einsum("ij->i", x)
    with pytest.raises(errors.ShapeMismatchError, match="differ"):
        oocarr.tensordot(x, oocarr.from_numpy(C), axes=([1], [0]))


def test_products_with_no_elements_match_numpy():
    for a, b in [((0, 2), (2, 3)), ((2, 0), (0, 3)), ((1,), (1, 1, 0)), ((3, 2), (2, 0))]:
        x, y = np.ones(a, np.float32), np.ones(b, np.float32)
        got = oocarr.matmul(oocarr.from_numpy(x), oocarr.from_numpy(y))
        assert got.shape == np.matmul(x, y).shape
        np.testing.assert_array_equal(np.asarray(got), np.matmul(x, y))
