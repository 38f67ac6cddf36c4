"""The must-fit linalg functions (eigh, eigvalsh, pinv, matrix_rank, matrix_power) of stored
matrices and stacks against numpy.linalg's values and jax.numpy.linalg's gradients, eager and
under jit; a matrix larger than the budget refused before any I/O."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import oocarr
from oocarr import errors
from oocarr.api.linalg_fit import eigh, eigvalsh, matrix_power, matrix_rank, pinv

RNG = np.random.default_rng(20261208)
EPS32 = float(np.finfo(np.float32).eps)


def symmetric(*shape: int) -> np.ndarray:
    a = RNG.standard_normal(shape).astype(np.float32)
    return (a + np.swapaxes(a, -1, -2)) / 2


def stored(a: np.ndarray, tmp_path, name: str = "a") -> oocarr.DiskArray:
    return oocarr.save(a, str(tmp_path / f"{name}.npy"))


def test_eigh_and_eigvalsh_of_a_matrix_and_a_stack_are_numpys(tmp_path):
    for shape, name in (((6, 6), "matrix"), ((2, 3, 5, 5), "stack")):
        a = symmetric(*shape)
        x = stored(a, tmp_path, name)
        with oocarr.memory_budget("64KB"):
            w, v = eigh(x)
            values = eigvalsh(x)
        assert isinstance(w, jax.Array) and isinstance(v, jax.Array)
        want_w, want_v = np.linalg.eigh(a.astype(np.float64))
        np.testing.assert_allclose(np.asarray(w), want_w, atol=1e-5)
        np.testing.assert_allclose(np.asarray(values), want_w, atol=1e-5)
        np.testing.assert_allclose(np.abs(np.asarray(v)), np.abs(want_v), atol=1e-4)
        assert w.shape == want_w.shape and v.shape == want_v.shape


def test_pinv_is_numpys_and_stored(tmp_path):
    a = RNG.standard_normal((2, 7, 4)).astype(np.float32)
    a[1, :, 3] = a[1, :, 0]  # the second matrix has rank 3
    x = stored(a, tmp_path)
    with oocarr.memory_budget("64KB"):
        got = pinv(x)
        loose = pinv(x, rtol=1e-3)
    assert isinstance(got, oocarr.DiskArray) and got.shape == (2, 4, 7)
    want = np.linalg.pinv(a.astype(np.float64), rcond=7 * EPS32 * 10)
    np.testing.assert_allclose(np.asarray(got), want, atol=2e-4)
    np.testing.assert_allclose(
        np.asarray(loose), np.linalg.pinv(a.astype(np.float64), 1e-3), atol=2e-4
    )


def test_default_rtol_is_the_array_apis_max_m_n_times_eps(tmp_path):
    u, _ = np.linalg.qr(RNG.standard_normal((6, 4)))
    v, _ = np.linalg.qr(RNG.standard_normal((4, 4)))
    s = np.array([1.0, 0.5, 0.2, 3e-6])  # above 6·eps (7e-7), below jax.numpy's 10·6·eps
    a = ((u * s) @ v.T).astype(np.float32)
    x = stored(a, tmp_path)
    assert int(matrix_rank(x)) == np.linalg.matrix_rank(a.astype(np.float64), tol=6 * EPS32) == 4
    kept = np.linalg.norm(np.asarray(pinv(x)), 2)
    assert 1e5 < kept < 1e6  # 1 / 3e-6: the smallest singular value was inverted
    assert np.linalg.norm(np.asarray(jnp.linalg.pinv(a)), 2) < 10  # jax.numpy's default drops it


def test_matrix_rank_of_a_stack_with_a_tolerance_per_matrix(tmp_path):
    a = RNG.standard_normal((3, 5, 4)).astype(np.float32)
    a[0, :, 3] = a[0, :, 1] + a[0, :, 2]
    a[2] = 0.0
    x = stored(a, tmp_path)
    s = np.linalg.svd(a.astype(np.float64), compute_uv=False)
    got = matrix_rank(x)  # rtol 5·eps of float32, the matrices' dtype
    np.testing.assert_array_equal(np.asarray(got), np.sum(s > 5 * EPS32 * s[:, :1], axis=-1))
    assert np.asarray(got).tolist() == [3, 4, 0]
    rtol = np.array([0.5, 1e-6, 0.1], np.float32)
    want = np.sum(s > rtol[:, None] * s[:, :1], axis=-1)
    np.testing.assert_array_equal(np.asarray(matrix_rank(x, rtol=rtol)), want)
    np.testing.assert_array_equal(np.asarray(matrix_rank(a, rtol=rtol)), want)  # in memory
    assert np.asarray(jax.jit(matrix_rank)(x)).tolist() == [3, 4, 0]


@pytest.mark.parametrize("n", [0, 1, 3, -2])
def test_matrix_power_is_numpys_and_stored(n, tmp_path):
    a = (RNG.standard_normal((2, 1, 4, 4)) + 3 * np.eye(4)).astype(np.float32)
    got = matrix_power(stored(a, tmp_path), n)
    assert isinstance(got, oocarr.DiskArray) and got.shape == a.shape
    want = np.linalg.matrix_power(a.astype(np.float64), n)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)


def test_gradients_are_jax_numpys_eager_and_under_jit(tmp_path):
    a = symmetric(2, 4, 4) + 4 * np.eye(4, dtype=np.float32)
    weights = RNG.standard_normal((2, 4, 4)).astype(np.float32)
    x = stored(a, tmp_path)
    tol = 10 * 4 * EPS32

    def losses(total, eigh_, eigvalsh_, pinv_, power):
        return [
            lambda v: jnp.sum(eigh_(v)[0] ** 3) + jnp.sum(eigh_(v)[1] ** 2 * weights),
            lambda v: jnp.sum(jnp.sin(eigvalsh_(v))),
            lambda v: total(pinv_(v) ** 2 * weights),
            lambda v: total(power(v, 3) * weights) + total(power(v, -2) ** 2),
        ]

    ours = losses(oocarr.sum, eigh, eigvalsh, pinv, matrix_power)
    theirs = losses(
        jnp.sum,
        jnp.linalg.eigh,
        jnp.linalg.eigvalsh,
        lambda v: jnp.linalg.pinv(v, rtol=tol),
        jnp.linalg.matrix_power,
    )
    for mine, reference in zip(ours, theirs):
        want = np.asarray(jax.grad(reference)(jnp.asarray(a)))
        scale = np.abs(want).max()
        with oocarr.memory_budget("64KB"):
            got = np.asarray(jax.grad(mine)(x))
            jitted = np.asarray(jax.jit(jax.grad(mine))(x))
        np.testing.assert_allclose(got, want, atol=1e-4 * scale)
        np.testing.assert_allclose(jitted, want, atol=1e-4 * scale)


def test_a_matrix_larger_than_the_budget_is_refused_before_any_io(tmp_path):
    x = stored(symmetric(64, 64), tmp_path)  # 16384 bytes a matrix
    with oocarr.memory_budget("40KB"), oocarr.io_stats() as stats:
        with pytest.raises(errors.BudgetTooSmallError, match=r"64 x 64 matrix.*49152 bytes"):
            eigh(x)
        with pytest.raises(errors.BudgetTooSmallError, match="set_memory_budget"):
            pinv(x)
        with pytest.raises(errors.BudgetTooSmallError, match="65536 bytes"):
            matrix_power(x, -1)  # the inverse too: four matrices
        assert int(matrix_rank(x)) == np.linalg.matrix_rank(np.asarray(x))  # two matrices fit
    assert stats.total.bytes_read == 16384  # only the call that fits read the matrix
    big = stored(symmetric(2, 64, 64), tmp_path, "stack")
    with oocarr.memory_budget("60KB"), pytest.raises(errors.BudgetTooSmallError, match="results"):
        eigh(big)  # one matrix fits, but not the first matrix's eigenvectors beside it


def test_bad_inputs_and_arrays_in_memory(tmp_path):
    x = stored(np.zeros((3, 4), np.float32), tmp_path)
    with pytest.raises(errors.InvalidArgumentError, match="square"):
        eigh(x)
    with pytest.raises(errors.InvalidArgumentError, match="at least 2 axes"):
        pinv(stored(np.zeros(3, np.float32), tmp_path, "vector"))
    with pytest.raises(errors.InvalidArgumentError, match="integer"):
        matrix_power(stored(np.eye(2, dtype=np.float32), tmp_path, "eye"), 1.5)
    with pytest.raises(errors.InvalidArgumentError, match="rtol"):
        matrix_rank(stored(np.zeros((2, 3, 3), np.float32), tmp_path, "s"), rtol=np.ones(3))
    a = symmetric(3, 3)
    np.testing.assert_allclose(np.asarray(eigh(a).eigenvalues), np.linalg.eigh(a)[0], atol=1e-5)
    assert isinstance(matrix_power(a, 2), jax.Array)
    np.testing.assert_allclose(np.asarray(pinv(a)), np.linalg.pinv(a), atol=1e-4)
