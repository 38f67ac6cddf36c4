"""oocarr.linalg (the Array API's linalg extension): the functions that stream, against NumPy's
``numpy.linalg`` (values) and ``jax.numpy.linalg`` (gradients), on stored arrays, 2-d and
batched, eagerly, under ``jax.jit`` and under a memory budget several times smaller than the
arrays."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import oocarr
import oocarr.linalg as la
from oocarr import errors
from stored_arrays import same, skip_slow, stored

#: A budget that cuts the arrays below into many tiles.
BUDGET = 4 * 4 * 24
INF = math.inf
VECTOR_ORDS = [2, 1, INF, -INF, 0, 3, 0.5, -1, -2.5]
MATRIX_ORDS = ["fro", 1, -1, INF, -INF]
SVD_ORDS = [2, -2, "nuc"]


def values(shape, seed=0, lo=-3.0, hi=3.0):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(np.float32)


def saved(tmp_path, array, name="a"):
    return oocarr.save(array, str(tmp_path / f"{name}.npy"))


def test_the_face_re_exports_the_public_functions():
    from oocarr.api import linalg as api
    from oocarr.api import linalg_tsqr as tsqr

    exported = {n for n in tsqr.__all__ if not n[0].isupper() and n != "r_factor"}
    # the other linalg functions live in modules of their own, re-exported as these are
    assert set(api.__all__) | exported <= set(la.__all__)
    assert all(callable(getattr(la, name)) for name in la.__all__)
    assert all(getattr(la, name) is getattr(api, name) for name in api.__all__)
    assert all(getattr(la, name) is getattr(tsqr, name) for name in exported)


# ----------------------------------------------------------------------------
# values against numpy.linalg
# ----------------------------------------------------------------------------
def test_products_and_transpose_match_numpy(tmp_path):
    a, b = values((3, 5, 4), 1), values((3, 4, 6), 2)
    x, y = saved(tmp_path, a, "a"), saved(tmp_path, b, "b")
    with oocarr.memory_budget(BUDGET):
        same(la.matmul(x, y), np.linalg.matmul(a, b))
        same(la.matmul(x[0], y[0]), np.linalg.matmul(a[0], b[0]))
        same(la.matmul(x, b[0, :, 0]), np.linalg.matmul(a, b[0, :, 0]))
        same(
            la.tensordot(x, y, axes=([0, 2], [0, 1])),
            np.linalg.tensordot(a, b, axes=([0, 2], [0, 1])),
        )
        same(la.tensordot(x[0], y[0], axes=1), np.linalg.tensordot(a[0], b[0], axes=1))
        same(la.tensordot(x, b[0], axes=1), np.linalg.tensordot(a, b[0], axes=1))
        same(la.matrix_transpose(x), np.linalg.matrix_transpose(a))
        same(la.matrix_transpose(x[1]), np.linalg.matrix_transpose(a[1]))
    with pytest.raises(errors.InvalidArgumentError, match="at least 2 axes"):
        la.matrix_transpose(x[0, 0])


def test_vecdot_matches_numpy(tmp_path):
    a, b = values((4, 3, 5), 3), values((3, 5), 4)
    x = saved(tmp_path, a)
    with oocarr.memory_budget(BUDGET):
        same(la.vecdot(x, b), np.linalg.vecdot(a, b))
        same(la.vecdot(x, b, axis=-2), np.linalg.vecdot(a, b, axis=-2))
        same(la.vecdot(x, x, axis=-3), np.linalg.vecdot(a, a, axis=-3))
    with pytest.raises(errors.InvalidArgumentError, match="negative"):
        la.vecdot(x, b, axis=0)
    with pytest.raises(errors.ShapeMismatchError, match="must be equal"):
        la.vecdot(x, b[:, :4])


def test_outer_matches_numpy(tmp_path):
    u, v = values(7, 5), values(6, 6)
    x = saved(tmp_path, u)
    with oocarr.memory_budget(BUDGET):
        same(la.outer(x, v), np.linalg.outer(u, v))
        same(la.outer(v, x), np.linalg.outer(v, u))
    with pytest.raises(errors.InvalidArgumentError, match="1-d"):
        la.outer(x, np.ones((2, 2), "f4"))


def test_cross_matches_numpy(tmp_path):
    a, b = values((4, 5, 3), 7), values((5, 3), 8)
    x = saved(tmp_path, a)
    with oocarr.memory_budget(BUDGET):
        same(la.cross(x, b), np.linalg.cross(a, b))
        same(la.cross(b, x), np.linalg.cross(b, a))
        t = np.swapaxes(a, -1, -2)
        same(la.cross(saved(tmp_path, t, "t"), t[::-1], axis=-2), np.cross(t, t[::-1], axis=-2))
    with pytest.raises(errors.ShapeMismatchError, match="3 elements"):
        la.cross(x, b, axis=-2)
    with pytest.raises(errors.InvalidArgumentError, match="negative"):
        la.cross(x, b, axis=2)


@pytest.mark.parametrize("shape", [(5, 7), (3, 6, 4)])
def test_diagonal_and_trace_match_numpy(tmp_path, shape):
    a = values(shape, 9)
    x = saved(tmp_path, a)
    with oocarr.memory_budget(BUDGET):
        for offset in (0, 1, -1, 3, -4, shape[-1] - 1, shape[-1], -shape[-2], 99):
            same(la.diagonal(x, offset=offset), np.linalg.diagonal(a, offset=offset))
            same(la.trace(x, offset=offset), np.linalg.trace(a, offset=offset, dtype="f4"))
    with pytest.raises(errors.InvalidArgumentError, match="int"):
        la.diagonal(x, offset=1.0)
    with pytest.raises(errors.InvalidArgumentError, match="at least 2 axes"):
        la.trace(np.ones(3, "f4"))


def test_diagonal_and_norms_on_every_driver(backend):
    skip_slow(backend)
    a = values((2, 9, 7), 50)
    x = stored(backend, a)  # chunks of half of each axis
    with oocarr.memory_budget(BUDGET):
        same(la.diagonal(x, offset=-2), np.linalg.diagonal(a, offset=-2))
        same(la.trace(x, offset=1), np.linalg.trace(a, offset=1, dtype="f4"), 1e-4)
        same(la.matrix_norm(x, ord=-INF), np.linalg.matrix_norm(a, ord=-INF), 1e-4)
        same(la.vector_norm(x, axis=-2, ord=3), np.linalg.vector_norm(a, axis=-2, ord=3), 1e-4)


def test_trace_dtype():
    a = np.arange(16, dtype="i2").reshape(4, 4)
    x = oocarr.from_numpy(a)
    same(la.trace(x, dtype="float32"), np.linalg.trace(a, dtype="f4"))
    same(la.trace(x, dtype="int16"), np.linalg.trace(a, dtype="i2"))
    same(la.trace(oocarr.from_numpy(a[None])), np.linalg.trace(a[None], dtype="i4"))


@pytest.mark.parametrize("ord", VECTOR_ORDS)
def test_vector_norm_matches_numpy(tmp_path, ord):
    a = values((3, 6, 5), 10)
    a[0, 0, :2] = 0.0  # some zeros for ord=0
    x = saved(tmp_path, a)
    with oocarr.memory_budget(BUDGET):
        for axis in (None, -1, 1, (0, -1), (-1, 0, 1)):
            for keepdims in (False, True):
                got = la.vector_norm(x, axis=axis, keepdims=keepdims, ord=ord)
                with np.errstate(divide="ignore"):  # NumPy's negative orders of zeros
                    want = np.linalg.vector_norm(a, axis=axis, keepdims=keepdims, ord=ord)
                same(got, want.astype("f4"), 1e-4)
        same(la.vector_norm(x[1, 2], ord=ord), np.linalg.vector_norm(a[1, 2], ord=ord), 1e-4)


def test_vector_norm_promotes_integers_and_refuses_bad_arguments():
    a = np.arange(-4, 8, dtype="i4").reshape(3, 4)
    got = la.vector_norm(oocarr.from_numpy(a), axis=0)
    same(got, np.asarray(jnp.linalg.vector_norm(a, axis=0)))
    x = oocarr.from_numpy(a.astype("f4"))
    with pytest.raises(errors.InvalidArgumentError, match="ord"):
        la.vector_norm(x, ord="fro")
    with pytest.raises(errors.InvalidArgumentError, match="repeated"):
        la.vector_norm(x, axis=(0, -2))
    with pytest.raises(errors.InvalidArgumentError, match="out of range"):
        la.vector_norm(x, axis=2)


@pytest.mark.parametrize("ord", MATRIX_ORDS)
def test_matrix_norm_matches_numpy(tmp_path, ord):
    a = values((4, 6, 5), 11)
    x = saved(tmp_path, a)
    with oocarr.memory_budget(BUDGET):
        for keepdims in (False, True):
            got = la.matrix_norm(x, keepdims=keepdims, ord=ord)
            same(got, np.linalg.matrix_norm(a, keepdims=keepdims, ord=ord), 1e-4)
            got = la.matrix_norm(x[2], keepdims=keepdims, ord=ord)
            same(got, np.linalg.matrix_norm(a[2], keepdims=keepdims, ord=ord), 1e-4)


def test_matrix_norm_refuses_bad_arguments():
    x = oocarr.from_numpy(values((3, 3)))
    for ord in (3, 0, "max", None, True):
        with pytest.raises(errors.InvalidArgumentError, match="ord"):
            la.matrix_norm(x, ord=ord)
    with pytest.raises(errors.InvalidArgumentError, match="at least 2 axes"):
        la.matrix_norm(x[0])


@pytest.mark.parametrize("ord", SVD_ORDS)
def test_matrix_norm_svd_ords_match_numpy(tmp_path, ord):
    pytest.importorskip("oocarr.api.linalg_tsqr")
    a = values((3, 9, 4), 12)
    x = saved(tmp_path, a)
    with oocarr.memory_budget(BUDGET):
        for keepdims in (False, True):
            got = la.matrix_norm(x, keepdims=keepdims, ord=ord)
            same(got, np.linalg.matrix_norm(a, keepdims=keepdims, ord=ord), 1e-4)
        wide = np.ascontiguousarray(a[1].T)
        same(
            la.matrix_norm(saved(tmp_path, wide, "w"), ord=ord),
            np.linalg.matrix_norm(wide, ord=ord),
            1e-4,
        )
        jitted = jax.jit(lambda u: la.matrix_norm(u, ord=ord))(x)
        same(jitted, np.linalg.matrix_norm(a, ord=ord), 1e-4)
        grad = jax.grad(lambda u: oocarr.sum(la.matrix_norm(u, ord=ord)))(x)
    want = jax.grad(lambda u: jnp.sum(jnp.linalg.matrix_norm(u, ord=ord)))(a)
    same(grad, want, 1e-3)


@pytest.mark.parametrize("ord", SVD_ORDS)
def test_matrix_norm_svd_ords_of_complex_matrices_match_numpy(tmp_path, ord):
    pytest.importorskip("oocarr.api.linalg_tsqr")
    a = (values((2, 7, 3), 13) + 1j * values((2, 7, 3), 14)).astype(np.complex64)
    x = saved(tmp_path, a)
    want = np.linalg.matrix_norm(a.astype(np.complex128), ord=ord).astype(np.float32)
    with oocarr.memory_budget(BUDGET * 4):
        same(la.matrix_norm(x, ord=ord), want, 1e-4)
        same(la.matrix_norm(x[0].mT, ord=ord, keepdims=True), want[0][None, None], 1e-4)
        grad = jax.grad(lambda u: oocarr.sum(la.matrix_norm(u, ord=ord)))(x)
    expected = jax.grad(lambda u: jnp.sum(jnp.linalg.matrix_norm(u, ord=ord)))(a)
    same(grad, expected, 1e-3)


# ----------------------------------------------------------------------------
# gradients against jax.numpy.linalg, and jax.jit
# ----------------------------------------------------------------------------
#: (name, oocarr function, jax.numpy.linalg function, input shapes): each a scalar loss's
#: gradient with respect to every input.
GRADIENT_CASES = [
    ("matmul", la.matmul, jnp.linalg.matmul, [(2, 5, 4), (2, 4, 3)]),
    (
        "tensordot",
        lambda u, v: la.tensordot(u, v, axes=([1], [0])),
        lambda u, v: jnp.linalg.tensordot(u, v, axes=([1], [0])),
        [(5, 4), (4, 3)],
    ),
    ("matrix_transpose", la.matrix_transpose, jnp.linalg.matrix_transpose, [(2, 5, 3)]),
    ("vecdot", la.vecdot, jnp.linalg.vecdot, [(4, 6), (6,)]),
    (
        "vecdot-2",
        lambda u, v: la.vecdot(u, v, axis=-2),
        lambda u, v: jnp.linalg.vecdot(u, v, axis=-2),
        [(2, 6, 3), (6, 3)],
    ),
    ("outer", la.outer, jnp.linalg.outer, [(7,), (5,)]),
    ("cross", la.cross, jnp.linalg.cross, [(4, 3), (4, 3)]),
    (
        "cross-2",
        lambda u, v: la.cross(u, v, axis=-2),
        lambda u, v: jnp.linalg.cross(u, v, axis=-2),
        [(2, 3, 4), (3, 4)],
    ),
    (
        "diagonal",
        lambda u: la.diagonal(u, offset=1),
        lambda u: jnp.linalg.diagonal(u, offset=1),
        [(3, 5, 6)],
    ),
    (
        "trace",
        lambda u: la.trace(u, offset=-1),
        lambda u: jnp.linalg.trace(u, offset=-1),
        [(3, 5, 6)],
    ),
    *(
        (
            f"vector_norm-{ord}",
            lambda u, ord=ord: la.vector_norm(u, axis=-1, ord=ord),
            lambda u, ord=ord: jnp.linalg.vector_norm(u, axis=-1, ord=ord),
            [(4, 7)],
        )
        for ord in VECTOR_ORDS
    ),
    (
        "vector_norm-all",
        lambda u: la.vector_norm(u, keepdims=True),
        lambda u: jnp.linalg.vector_norm(u, keepdims=True),
        [(3, 4, 5)],
    ),
    *(
        (
            f"matrix_norm-{ord}",
            lambda u, ord=ord: la.matrix_norm(u, ord=ord),
            lambda u, ord=ord: jnp.linalg.matrix_norm(u, ord=ord),
            [(3, 5, 4)],
        )
        for ord in MATRIX_ORDS
    ),
]


def _weights(shape):
    return values(shape, 99, 0.5, 1.5)


@pytest.mark.parametrize("case", GRADIENT_CASES, ids=[c[0] for c in GRADIENT_CASES])
def test_gradients_match_jax_numpy_linalg(tmp_path, case):
    name, fn, ref, shapes = case
    arrays = [
        values(s, i + 20, 0.2, 2.0) * np.where(np.arange(s[-1]) % 2, -1, 1)
        for i, s in enumerate(shapes)
    ]
    arrays = [a.astype("f4") for a in arrays]
    inputs = [saved(tmp_path, a, f"in{i}") for i, a in enumerate(arrays)]
    out_shape = jax.eval_shape(ref, *arrays).shape
    w = _weights(out_shape)
    argnums = tuple(range(len(arrays)))

    def loss(*u):
        return oocarr.sum(fn(*u) * w)

    def want_loss(*u):
        return jnp.sum(ref(*u) * w)

    want = jax.grad(want_loss, argnums=argnums)(*arrays)
    with oocarr.memory_budget(BUDGET):
        got = jax.grad(loss, argnums=argnums)(*inputs)
    for g, r, s in zip(got, want, inputs):
        assert isinstance(g, oocarr.DiskArray) and g.shape == s.shape
        same(g, r, 1e-4)
    np.testing.assert_allclose(float(loss(*inputs)), float(want_loss(*arrays)), rtol=1e-5)


def test_under_jit(tmp_path):
    a, b = values((3, 5, 4), 30), values((3, 4, 3), 31)
    x, y = saved(tmp_path, a, "a"), saved(tmp_path, b, "b")

    def everything(u, v):
        return [
            la.matmul(u, v),
            la.tensordot(u, v, axes=([0, 2], [0, 1])),
            la.matrix_transpose(u),
            la.vecdot(u, u, axis=-2),
            la.outer(u[0, 0], v[0, 0]),
            la.cross(v, v[::-1]),
            la.diagonal(u, offset=1),
            la.trace(u),
            la.vector_norm(u, axis=(0, 2), ord=3),
            la.vector_norm(u, ord=-INF),
            la.matrix_norm(u, ord=1, keepdims=True),
            la.matrix_norm(u),
        ]

    want = [
        np.linalg.matmul(a, b),
        np.linalg.tensordot(a, b, axes=([0, 2], [0, 1])),
        np.linalg.matrix_transpose(a),
        np.linalg.vecdot(a, a, axis=-2),
        np.linalg.outer(a[0, 0], b[0, 0]),
        np.linalg.cross(b, b[::-1]),
        np.linalg.diagonal(a, offset=1),
        np.linalg.trace(a, dtype="f4"),
        np.linalg.vector_norm(a, axis=(0, 2), ord=3),
        np.linalg.vector_norm(a, ord=-INF),
        np.linalg.matrix_norm(a, ord=1, keepdims=True),
        np.linalg.matrix_norm(a),
    ]
    with oocarr.memory_budget(BUDGET):
        got = jax.jit(everything)(x, y)
    for g, w in zip(got, want):
        same(g, w, 1e-4)


def test_gradient_under_jit(tmp_path):
    a = values((2, 6, 5), 32)
    x = saved(tmp_path, a)

    def loss(u):
        return (
            la.matrix_norm(u, ord=INF)[0]
            + oocarr.sum(la.vector_norm(u, axis=-2, ord=1.5))
            + oocarr.sum(la.trace(u, offset=2))
            + oocarr.sum(la.diagonal(u) * la.diagonal(u, offset=-1)[..., :5])
        )

    def want_loss(u):
        return (
            jnp.linalg.matrix_norm(u, ord=INF)[0]
            + jnp.sum(jnp.linalg.vector_norm(u, axis=-2, ord=1.5))
            + jnp.sum(jnp.linalg.trace(u, offset=2))
            + jnp.sum(jnp.linalg.diagonal(u) * jnp.linalg.diagonal(u, offset=-1)[..., :5])
        )

    with oocarr.memory_budget(BUDGET):
        value, grad = jax.jit(jax.value_and_grad(loss))(x)
    want_value, want_grad = jax.value_and_grad(want_loss)(a)
    np.testing.assert_allclose(float(value), float(want_value), rtol=1e-5)
    same(grad, want_grad, 1e-4)


# ----------------------------------------------------------------------------
# streaming under the memory budget
# ----------------------------------------------------------------------------
def test_stacks_several_times_the_budget_stream_within_it(tmp_path):
    a = values((3, 40, 32), 40)  # 15 KiB, the budget 2 KiB
    b = values((3, 32, 3), 41)
    x, y = saved(tmp_path, a, "a"), saved(tmp_path, b, "b")
    budget = 2048
    with oocarr.memory_budget(budget), oocarr.io_stats() as stats:
        same(la.diagonal(x, offset=-3), np.linalg.diagonal(a, offset=-3))
        same(la.trace(x, offset=2), np.linalg.trace(a, offset=2, dtype="f4"), 1e-4)
        same(la.vector_norm(x, axis=(-2, -1)), np.linalg.vector_norm(a, axis=(-2, -1)), 1e-4)
        same(la.vector_norm(x, ord=0.5), np.linalg.vector_norm(a, ord=0.5), 1e-4)
        for ord in MATRIX_ORDS:
            same(la.matrix_norm(x, ord=ord), np.linalg.matrix_norm(a, ord=ord), 1e-4)
        same(la.vecdot(x, x[0]), np.linalg.vecdot(a, a[0]), 1e-4)
        same(la.matmul(x, y), np.linalg.matmul(a, b), 1e-4)
        same(la.cross(y, y[::-1]), np.linalg.cross(b, b[::-1]), 1e-4)
        same(la.outer(x[0, 0], x[1, :, 1]), np.linalg.outer(a[0, 0], a[1, :, 1]))
    assert stats.total.tiles > 50
    assert 0 < stats.total.projected_bytes <= budget, str(stats)


def test_diagonal_reads_only_blocks_on_the_diagonal(tmp_path):
    n = 256
    a = values((n, n), 42)  # 256 KiB
    x = saved(tmp_path, a)
    budget = 16 * 1024
    with oocarr.memory_budget(budget), oocarr.io_stats() as stats:
        got = la.diagonal(x, offset=5)
    same(got, np.linalg.diagonal(a, offset=5))
    assert stats.total.projected_bytes <= budget
    assert stats.total.bytes_read < a.nbytes / 8, str(stats)
    with oocarr.memory_budget(budget), oocarr.io_stats() as stats:
        grad = jax.grad(lambda u: oocarr.sum(la.diagonal(u, offset=5)))(x)
    same(grad, np.eye(n, k=5, dtype="f4"))
    assert stats.total.projected_bytes <= budget
