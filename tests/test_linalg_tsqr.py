"""TSQR linear algebra (qr, svd, svdvals, lstsq of tall stored matrices and stacks) against
NumPy's and jax.numpy's values and gradients, eager and under jit, streamed under small budgets;
direct TSQR's Q orthonormal where x R⁻¹ is not."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import oocarr
from oocarr import errors
from oocarr.api.linalg_tsqr import lstsq, qr, r_factor, svd, svdvals

RNG = np.random.default_rng(20261207)


def tall(m: int = 400, n: int = 6, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal((m, n)) * scale).astype(np.float32)


def stored(a: np.ndarray, tmp_path, name: str = "a") -> oocarr.DiskArray:
    return oocarr.save(a, str(tmp_path / f"{name}.npy"))


def row_signs(r: np.ndarray) -> np.ndarray:
    return np.where(np.diagonal(r) < 0, -1.0, 1.0)[:, None]


#: budgets that cut the matrices below into many row panels
SMALL = ["24KB", "64KB", None]


@pytest.mark.parametrize("budget", SMALL)
def test_r_factor_is_numpys_up_to_row_signs(budget, tmp_path):
    a = tall()
    with oocarr.memory_budget(budget) if budget else oocarr.memory_budget("256MB"):
        with oocarr.io_stats() as stats:
            r = np.asarray(r_factor(stored(a, tmp_path)))
    want = np.linalg.qr(a.astype(np.float64), mode="r")
    np.testing.assert_allclose(r, want * row_signs(want), rtol=1e-4, atol=1e-4)
    assert np.all(np.diagonal(r) >= 0)
    assert stats.total.bytes_read == a.nbytes  # one pass over x


def test_the_same_r_whatever_the_panels(tmp_path):
    a = tall(1000, 5)
    x = stored(a, tmp_path)
    with oocarr.memory_budget("20KB"):
        small = np.asarray(r_factor(x))
    with oocarr.memory_budget("256MB"):
        big = np.asarray(r_factor(x))
    np.testing.assert_allclose(small, big, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("budget", ["24KB", "256MB"])
def test_qr_reconstructs_and_is_orthonormal(budget, tmp_path):
    a = tall(300, 4)
    with oocarr.memory_budget(budget):
        q, r = qr(stored(a, tmp_path))
        q = np.asarray(q)
    r = np.asarray(r)
    np.testing.assert_allclose(q @ r, a, atol=1e-4)
    np.testing.assert_allclose(q.T @ q, np.eye(4), atol=1e-4)
    q_np, r_np = np.linalg.qr(a.astype(np.float64))
    signs = row_signs(r_np)
    np.testing.assert_allclose(q, q_np * signs.T, atol=1e-4)


def test_svdvals_and_svd_match_numpy(tmp_path):
    a = tall(500, 7)
    x = stored(a, tmp_path)
    with oocarr.memory_budget("32KB"):
        s = np.asarray(svdvals(x))
        u, s2, vh = svd(x, full_matrices=False)
        u = np.asarray(u)
    want = np.linalg.svd(a.astype(np.float64), compute_uv=False)
    np.testing.assert_allclose(s, want, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(s2), want, rtol=1e-4)
    np.testing.assert_allclose((u * np.asarray(s2)) @ np.asarray(vh), a, atol=1e-4)
    np.testing.assert_allclose(u.T @ u, np.eye(7), atol=1e-4)


def test_svdvals_of_a_stack_is_numpys(tmp_path):
    a = RNG.standard_normal((3, 2, 30, 4)).astype(np.float32)
    got = np.asarray(svdvals(stored(a, tmp_path)))
    np.testing.assert_allclose(got, np.linalg.svd(a, compute_uv=False), rtol=1e-4)


def test_a_wide_matrix_goes_through_its_transpose(tmp_path):
    a = tall(40, 5).T.copy()  # 5 x 40
    x = stored(a, tmp_path)
    np.testing.assert_allclose(
        np.asarray(svdvals(x)), np.linalg.svd(a, compute_uv=False), rtol=1e-4
    )
    u, s, vh = svd(x, full_matrices=False)
    np.testing.assert_allclose((np.asarray(u) * np.asarray(s)) @ np.asarray(vh), a, atol=1e-4)


@pytest.mark.parametrize("columns", [None, 2])
def test_lstsq_matches_numpy(columns, tmp_path):
    a = tall(600, 5)
    shape = (600,) if columns is None else (600, columns)
    b = RNG.standard_normal(shape).astype(np.float32)
    with oocarr.memory_budget("40KB"):
        x, res, rank, s = lstsq(stored(a, tmp_path), stored(b, tmp_path, "b"))
    want = np.linalg.lstsq(a.astype(np.float64), b.astype(np.float64), rcond=None)
    np.testing.assert_allclose(np.asarray(x), want[0], rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(np.asarray(res), want[1], rtol=1e-3)
    assert int(rank) == want[2]
    np.testing.assert_allclose(np.asarray(s), want[3], rtol=1e-4)


def test_lstsq_of_a_rank_deficient_matrix_is_numpys_minimum_norm_solution(tmp_path):
    a = tall(200, 4)
    a[:, 3] = a[:, 0] + a[:, 1]  # rank 3
    b = RNG.standard_normal(200).astype(np.float32)
    x, res, rank, _ = lstsq(stored(a, tmp_path), b, rcond=1e-5)
    want = np.linalg.lstsq(a.astype(np.float64), b.astype(np.float64), rcond=1e-5)
    np.testing.assert_allclose(np.asarray(x), want[0], rtol=1e-3, atol=1e-3)
    assert int(rank) == want[2] == 3
    assert np.asarray(res).shape == want[1].shape == (0,)


def test_gradient_of_the_r_factor_is_jax_numpys(tmp_path):
    a = tall(300, 4)
    weights = RNG.standard_normal((4, 4)).astype(np.float32)

    def loss_r(r):  # invariant to the signs of R's rows, as the two R's differ by them
        return jnp.sum((r * r) @ weights)

    with oocarr.memory_budget("24KB"):
        got = jax.grad(lambda x: loss_r(r_factor(x)))(stored(a, tmp_path))
        jitted = jax.jit(jax.grad(lambda x: loss_r(r_factor(x))))(stored(a, tmp_path, "b"))
    want = jax.grad(lambda x: loss_r(jnp.linalg.qr(x, mode="r")))(jnp.asarray(a))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(np.asarray(jitted), want, rtol=1e-3, atol=1e-3)


def test_gradients_of_svdvals_and_lstsq_are_jax_numpys(tmp_path):  # qr: see below
    a = tall(250, 4)
    b = RNG.standard_normal(250).astype(np.float32)
    x = stored(a, tmp_path)

    cases = [
        (lambda v: jnp.sum(svdvals(v) ** 3), lambda v: jnp.sum(jnp.linalg.svdvals(v) ** 3)),
        (
            lambda v: jnp.sum(lstsq(v, b)[0] ** 2),
            lambda v: jnp.sum(jnp.linalg.lstsq(v, b)[0] ** 2),
        ),
    ]
    for ours, theirs in cases:
        with oocarr.memory_budget("32KB"):
            got = np.asarray(jax.grad(ours)(x))
        want = np.asarray(jax.grad(theirs)(jnp.asarray(a)))
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)


def test_under_jit(tmp_path):
    a = tall(200, 3)
    x = stored(a, tmp_path)
    s = jax.jit(svdvals)(x)
    np.testing.assert_allclose(np.asarray(s), np.linalg.svd(a, compute_uv=False), rtol=1e-4)
    sol = jax.jit(lambda v, w: lstsq(v, w)[0])(x, a @ np.ones(3, "f4"))
    np.testing.assert_allclose(np.asarray(sol), np.ones(3), rtol=1e-3)


def test_refusals_name_the_input_and_the_fix(tmp_path):
    x = stored(tall(20, 3), tmp_path)
    with pytest.raises(errors.NotSupportedError, match="full_matrices=False"):
        svd(x)
    with pytest.raises(errors.NotSupportedError, match="mode='reduced'"):
        qr(x, mode="complete")
    with pytest.raises(errors.NotSupportedError, match="x.mT"):
        qr(stored(tall(3, 20), tmp_path, "wide"))
    with pytest.raises(errors.NotSupportedError, match="x.mT"):
        qr(stored(np.zeros((2, 3, 5), "f4"), tmp_path, "wide_stack"))
    with pytest.raises(errors.NotSupportedError, match="stack of matrices"):
        r_factor(stored(np.zeros((2, 5, 3), "f4"), tmp_path, "stack"))
    big = stored(tall(64, 60), tmp_path, "big")
    with oocarr.memory_budget("8KB"), pytest.raises(errors.BudgetTooSmallError, match="60"):
        r_factor(big)


def ill_conditioned(m: int, n: int, condition: float) -> np.ndarray:
    """A float64 m × n matrix with singular values from 1 down to 1 / condition."""
    u, _ = np.linalg.qr(RNG.standard_normal((m, n)))
    v, _ = np.linalg.qr(RNG.standard_normal((n, n)))
    return (u * np.logspace(0, -np.log10(condition), n)) @ v.T


@pytest.mark.parametrize("budget", ["48KB", "256MB"])  # a tree of panels' factors, one panel
def test_direct_q_is_orthonormal_where_x_times_r_inverse_is_not(budget, tmp_path):
    a = ill_conditioned(1500, 8, 1e6)
    with jax.enable_x64(True), oocarr.memory_budget(budget):
        q, r = qr(stored(a, tmp_path))
        q, r = np.asarray(q), np.asarray(r)
    assert q.dtype == r.dtype == np.float64
    r_np = np.linalg.qr(a, mode="r")
    indirect = a @ np.linalg.inv(r_np)  # Q = x R⁻¹: orthonormal to ε·κ only
    eye = np.eye(8)
    assert np.linalg.norm(indirect.T @ indirect - eye) > 1e-12
    assert np.linalg.norm(q.T @ q - eye) < 1e-14
    assert np.linalg.norm(q @ r - a) < 1e-14 * np.linalg.norm(a)
    np.testing.assert_allclose(r, r_np * row_signs(r_np), rtol=1e-8, atol=1e-14)


def test_panels_are_capped_whatever_the_budget(tmp_path, monkeypatch):
    """A large budget still factors panels of at most PANEL_BYTES (many of them here), with
    NumPy's Q and R."""
    from oocarr.ops import tsqr

    monkeypatch.setattr(tsqr, "PANEL_BYTES", 40 * 6 * 4)  # panels of 40 rows
    a = tall(1000, 6)
    x = stored(a, tmp_path)
    with oocarr.memory_budget("256MB"), oocarr.io_stats() as stats:
        q, r = qr(x)
        q, r = np.asarray(q), np.asarray(r)
    (site,) = (v for k, v in stats.by_site.items() if k.startswith("tsqr_q"))
    assert site.tiles >= 2 * 25  # 25 panels written twice
    q_np, r_np = np.linalg.qr(a.astype(np.float64))
    signs = row_signs(r_np)
    np.testing.assert_allclose(r, r_np * signs, atol=1e-4)
    np.testing.assert_allclose(q, q_np * signs.T, atol=1e-4)


def test_direct_q_writes_q_twice_and_reads_x_twice(tmp_path):
    a = tall(600, 4)
    x = stored(a, tmp_path)
    with oocarr.memory_budget("24KB"):
        r = r_factor(x)
        with oocarr.io_stats() as stats:
            q = qr(x).Q
    (site,) = (v for k, v in stats.by_site.items() if k.startswith("tsqr_q"))
    assert site.bytes_written == 2 * a.nbytes  # each panel's Q_i, then Q_i times its factor
    assert site.bytes_read == 2 * a.nbytes  # x once, each Q_i read back once
    np.testing.assert_allclose(np.asarray(q) @ np.asarray(r), a, atol=1e-5)


def test_gradients_of_q_and_r_together_are_jax_numpys(tmp_path):
    a = tall(240, 4)
    weights_q = RNG.standard_normal((240, 4)).astype(np.float32)
    weights_r = RNG.standard_normal((4, 4)).astype(np.float32)
    coupling = RNG.standard_normal(4).astype(np.float32)

    def loss(q, r, total):  # invariant to the signs of Q's columns and R's rows, flipped together
        return (
            total(q**2 * weights_q) + jnp.sum(r**2 * weights_r) + total(coupling * q[0] * r[:, 3])
        )

    def ours(v):
        q, r = qr(v)
        return loss(q, r, oocarr.sum)

    x = stored(a, tmp_path)
    with oocarr.memory_budget("24KB"):
        got = np.asarray(jax.grad(ours)(x))
        jitted = np.asarray(jax.jit(jax.grad(ours))(x))
    want = jax.grad(lambda v: loss(*jnp.linalg.qr(v), jnp.sum))(jnp.asarray(a))
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(jitted, want, rtol=2e-3, atol=2e-3)


def test_gradient_through_svds_u_is_jax_numpys(tmp_path):
    a = tall(200, 3)
    weights = RNG.standard_normal((200, 3)).astype(np.float32)

    def ours(v):
        u, s, _ = svd(v, full_matrices=False)
        return oocarr.sum(u**2 * weights) + jnp.sum(s)

    with oocarr.memory_budget("24KB"):
        got = np.asarray(jax.grad(ours)(stored(a, tmp_path)))

    def theirs(v):
        u, s, _ = jnp.linalg.svd(v, full_matrices=False)
        return jnp.sum(u**2 * weights) + jnp.sum(s)

    want = jax.grad(theirs)(jnp.asarray(a))
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)


def test_qr_and_svd_of_stacks_are_numpys(tmp_path):
    a = RNG.standard_normal((2, 3, 40, 4)).astype(np.float32)
    x = stored(a, tmp_path)
    with oocarr.memory_budget("16KB"):
        q, r = qr(x)
        u, s, vh = svd(x, full_matrices=False)
        ut, st, vht = svd(
            stored(np.swapaxes(a, -1, -2).copy(), tmp_path, "wide"), full_matrices=False
        )
    assert all(isinstance(v, oocarr.DiskArray) for v in (q, u, vht))
    q, r, u, vht = (np.asarray(v) for v in (q, r, u, vht))
    assert q.shape == a.shape and r.shape == (2, 3, 4, 4)
    q_np, r_np = np.linalg.qr(a.astype(np.float64))
    signs = np.where(np.diagonal(r_np, axis1=-2, axis2=-1) < 0, -1.0, 1.0)
    np.testing.assert_allclose(r, r_np * signs[..., :, None], atol=1e-4)
    np.testing.assert_allclose(q, q_np * signs[..., None, :], atol=1e-4)
    s_np = np.linalg.svd(a.astype(np.float64), compute_uv=False)
    np.testing.assert_allclose(np.asarray(s), s_np, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(st), s_np, rtol=1e-4)
    np.testing.assert_allclose((u * np.asarray(s)[..., None, :]) @ np.asarray(vh), a, atol=1e-4)
    wide = np.swapaxes(a, -1, -2)
    np.testing.assert_allclose(
        (np.asarray(ut) * np.asarray(st)[..., None, :]) @ vht, wide, atol=1e-4
    )


def test_gradient_of_qr_of_a_stack_is_jax_numpys(tmp_path):
    a = RNG.standard_normal((2, 30, 3)).astype(np.float32)

    def loss(q, r, total):
        return total(q**2 * a) + jnp.sum(r**2)

    with oocarr.memory_budget("16KB"):
        got = jax.grad(lambda v: loss(*qr(v), oocarr.sum))(stored(a, tmp_path))
    want = jax.grad(lambda v: loss(*jnp.linalg.qr(v), jnp.sum))(jnp.asarray(a))
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-3, atol=2e-3)


def test_too_short_panels_for_the_tree_are_refused_before_any_io(tmp_path):
    x = stored(tall(3000, 40), tmp_path)
    with oocarr.memory_budget("60KB"), oocarr.io_stats() as stats:  # enough for R alone
        with pytest.raises(errors.BudgetTooSmallError, match="80 (whole )?rows of 40 columns"):
            qr(x)
    assert all(v.bytes_read == 0 for k, v in stats.by_site.items() if k.startswith("tsqr_q"))


def test_complex_matrices_are_read_whole_as_jax_numpy_computes_them():
    """TSQR is built for real matrices; a complex stack is read into memory (where it must
    fit) and gives jax.numpy.linalg's values and gradients, or is refused naming its size."""
    rng = np.random.default_rng(5)
    a = (rng.standard_normal((2, 6, 3)) + 1j * rng.standard_normal((2, 6, 3))).astype("c8")
    x = oocarr.from_numpy(a)
    np.testing.assert_allclose(
        np.asarray(svdvals(x)), np.linalg.svd(a, compute_uv=False), rtol=1e-5, atol=1e-5
    )
    q, r = qr(x)
    np.testing.assert_allclose(np.asarray(q) @ np.asarray(r), a, atol=1e-5)
    u, s, vh = svd(x, full_matrices=False)
    rebuilt = (np.asarray(u) * np.asarray(s)[..., None, :]) @ np.asarray(vh)
    np.testing.assert_allclose(rebuilt, a, atol=1e-5)
    got = jax.grad(lambda v: jnp.sum(svdvals(v)))(x)
    want = jax.grad(lambda v: jnp.sum(jnp.linalg.svdvals(v)))(jnp.asarray(a))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-4)
    big = oocarr.from_numpy(np.ones((256, 16), "c8"))
    with oocarr.memory_budget("64KB"), pytest.raises(errors.BudgetTooSmallError, match="256 x 16"):
        qr(big)
