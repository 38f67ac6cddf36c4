"""Out-of-core LU linear algebra (solve, inv, det, slogdet of square stored matrices) against
numpy.linalg's and jax.numpy.linalg's values and jax.grad of jax.numpy code, eager and under
jit, with budgets that cut the matrices into several column panels."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import oocarr
from oocarr import errors
from oocarr.api.linalg_lu import det, inv, slogdet, solve
from oocarr.ops import lu as lu_module

RNG = np.random.default_rng(20261207)
N = 192  # f32: 147 KB; a quarter of it holds 4 column panels' worth of plan


def square(n: int = N, dtype: str = "float32") -> np.ndarray:
    """A well-conditioned matrix whose first pivot must come from below: a[0, 0] = 0."""
    a = RNG.standard_normal((n, n)) + n**0.5 * np.eye(n)[::-1]
    a[0, 0] = 0.0
    return a.astype(dtype)


def stored(a: np.ndarray, tmp_path, name: str = "a") -> oocarr.DiskArray:
    return oocarr.save(a, str(tmp_path / f"{name}.npy"))


def panel_reads(n: int, w: int) -> int:
    """Elements of earlier panels a left-looking LU with panels of width w reads."""
    return sum((n - k * w) * w for j in range(-(-n // w)) for k in range(j))


def plan_width(n: int, share: int, beside: int = 0) -> int:
    """The panel width of a share of ``share`` elements, as the module's docstring states: a
    panel of n rows beside ``beside`` right-hand-side columns, and beside it 4 n-long vectors,
    the in-panel LU (2 n at least), three w × w blocks and six one-row blocks; panels of 64
    columns or more are 4 columns narrower, for LAPACK's copy of the panel beside the vectors."""
    w = min(n, share // n - beside)
    while w > 1 and 6 * n + 3 * w * w + 6 * w > share:
        w -= 1
    whole = min(w, (share - 4 * n) // n - beside)
    return whole if whole >= 64 else w


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("columns", [None, 40])  # 40: more than a panel's width, in 2 blocks
def test_solve_out_of_core_is_numpys(dtype, columns, tmp_path):
    a = square(dtype=dtype)
    b = RNG.standard_normal((N,) if columns is None else (N, columns)).astype(dtype)
    with oocarr.memory_budget(a.nbytes // 4), oocarr.io_stats() as stats:
        x = np.asarray(solve(stored(a, tmp_path), stored(b, tmp_path, "b")))
    assert stats.total.bytes_read > 2 * a.nbytes  # many panels: earlier ones read again
    want = np.linalg.solve(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(x, want, rtol=1e-4, atol=1e-4)
    assert x.dtype == jnp.linalg.solve(a, b).dtype  # float32 unless JAX has x64 enabled


def test_inv_det_slogdet_out_of_core_are_numpys(tmp_path):
    a = square()
    x = stored(a, tmp_path)
    with oocarr.memory_budget(a.nbytes // 4):
        got_inv = np.asarray(inv(x))
        scale = np.exp(-np.linalg.slogdet(a.astype(np.float64))[1] / N)  # |det| near 1
        got_det = float(det(x * scale))
        sign, logabsdet = slogdet(x)
    a64 = a.astype(np.float64)
    np.testing.assert_allclose(got_inv, np.linalg.inv(a64), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got_det, np.linalg.det(a64 * scale), rtol=1e-3)
    want_sign, want_log = np.linalg.slogdet(a64)
    assert float(sign) == want_sign
    np.testing.assert_allclose(float(logabsdet), want_log, rtol=1e-5)


def test_slogdet_does_not_overflow_where_det_does(tmp_path):
    a = square() * 1e3  # |det| ~ 1e560
    with oocarr.memory_budget(a.nbytes // 4):
        x = stored(a, tmp_path)
        sign, logabsdet = slogdet(x)
        assert np.isinf(float(det(x))) and np.isinf(float(jnp.linalg.det(a)))
    want_sign, want_log = np.linalg.slogdet(a.astype(np.float64))
    assert float(sign) == want_sign
    np.testing.assert_allclose(float(logabsdet), want_log, rtol=1e-5)


def test_a_matrix_that_fits_is_one_panel(tmp_path):
    a = square(40)
    b = RNG.standard_normal((40, 2)).astype(np.float32)
    x = stored(a, tmp_path)
    with oocarr.io_stats() as stats:
        got = np.asarray(solve(x, b))
    assert stats.total.bytes_read == 2 * a.nbytes  # the matrix, then the factor once
    np.testing.assert_allclose(got, np.linalg.solve(a, b), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(inv(x)), np.linalg.inv(a), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(float(det(x)), np.linalg.det(a), rtol=1e-4)


def test_every_row_interchange_is_needed(tmp_path):
    # the reversed identity: each column's only nonzero is on the anti-diagonal
    a = (np.eye(N)[::-1] * np.arange(1, N + 1)).astype(np.float32)
    b = np.arange(N, dtype=np.float32)
    x = stored(a, tmp_path)
    with oocarr.memory_budget(a.nbytes // 4):
        np.testing.assert_allclose(np.asarray(solve(x, b)), np.linalg.solve(a, b), rtol=1e-6)
        sign, logabsdet = slogdet(x)
    want_sign, want_log = np.linalg.slogdet(a.astype(np.float64))
    assert float(sign) == want_sign
    np.testing.assert_allclose(float(logabsdet), want_log, rtol=1e-5)


def test_stacks_one_matrix_at_a_time(tmp_path):
    a = np.stack([square(24), square(24) + 1.0])  # (2, 24, 24)
    b = RNG.standard_normal((2, 1, 24, 2)).astype(np.float32)  # batch broadcasts to (2, 2)
    v = RNG.standard_normal(24).astype(np.float32)
    x = stored(a, tmp_path)
    got = solve(x, stored(b, tmp_path, "b"))
    assert got.shape == (2, 2, 24, 2)
    np.testing.assert_allclose(np.asarray(got), jnp.linalg.solve(a, b), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(solve(x, v)), jnp.linalg.solve(a, v), rtol=1e-4)
    np.testing.assert_allclose(np.asarray(inv(x)), np.linalg.inv(a), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(det(x)), np.linalg.det(a), rtol=1e-4)
    sign, logabsdet = slogdet(x)
    want = np.linalg.slogdet(a)
    np.testing.assert_array_equal(np.asarray(sign), want[0])
    np.testing.assert_allclose(np.asarray(logabsdet), want[1], rtol=1e-5)


def test_under_jit(tmp_path):
    a = square()
    b = RNG.standard_normal((N, 2)).astype(np.float32)
    x, y = stored(a, tmp_path), stored(b, tmp_path, "b")
    with oocarr.memory_budget(a.nbytes // 4):
        got = jax.jit(lambda p, q: solve(p, q) * 2.0)(x, y)
        sign, logabsdet = jax.jit(slogdet)(x)
    np.testing.assert_allclose(np.asarray(got), 2 * np.linalg.solve(a, b), rtol=1e-4, atol=1e-4)
    want = np.linalg.slogdet(a.astype(np.float64))
    assert float(sign) == want[0]
    np.testing.assert_allclose(float(logabsdet), want[1], rtol=1e-5)


def test_empty_matrices_are_jax_numpys(tmp_path):
    x = stored(np.zeros((0, 0), np.float32), tmp_path)
    assert float(det(x)) == float(jnp.linalg.det(np.zeros((0, 0), np.float32))) == 1.0
    assert np.asarray(inv(x)).shape == (0, 0)
    assert solve(stored(square(4), tmp_path, "b"), np.zeros((4, 0), np.float32)).shape == (4, 0)


def test_arrays_in_memory_are_jax_numpys():
    a = square(8)
    b = RNG.standard_normal(8).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(solve(a, b)), jnp.linalg.solve(a, b))
    np.testing.assert_array_equal(np.asarray(inv(a)), jnp.linalg.inv(a))
    assert float(det(a)) == float(jnp.linalg.det(a))
    assert tuple(map(float, slogdet(a))) == tuple(map(float, jnp.linalg.slogdet(a)))


#: Gradients: a 128 × 128 matrix (64 KB) under 36 KB, panels of at most 32 columns (the
#: backward pass also reads the cotangent and the output: the smallest plan needs 34 KB).
GRAD_N, GRAD_BUDGET = 128, 36_000


@pytest.mark.parametrize("jit", [False, True])
def test_gradient_of_solve_is_jax_numpys(jit, tmp_path):
    a, b = square(GRAD_N), RNG.standard_normal((GRAD_N, 2)).astype(np.float32)
    weights = RNG.standard_normal((GRAD_N, 2)).astype(np.float32)

    def loss(p, q, linalg):
        return (linalg.solve(p, q) * weights).sum()

    grad = jax.grad(lambda p, q: oocarr.sum(solve(p, q) * weights), argnums=(0, 1))
    grad = jax.jit(grad) if jit else grad
    with oocarr.memory_budget(GRAD_BUDGET):
        ga, gb = grad(stored(a, tmp_path), stored(b, tmp_path, "b"))
        ga, gb = np.asarray(ga), np.asarray(gb)
    want_a, want_b = jax.grad(lambda p, q: loss(p, q, jnp.linalg), argnums=(0, 1))(a, b)
    np.testing.assert_allclose(ga, want_a, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(gb, want_b, rtol=1e-3, atol=1e-4)


def test_gradient_of_solve_with_a_vector_in_memory(tmp_path):
    a, v = square(GRAD_N), RNG.standard_normal(GRAD_N).astype(np.float32)
    weights = RNG.standard_normal(GRAD_N).astype(np.float32)
    with oocarr.memory_budget(GRAD_BUDGET):
        ga, gv = jax.grad(lambda p, q: oocarr.sum(solve(p, q) * weights), argnums=(0, 1))(
            stored(a, tmp_path), jnp.asarray(v)
        )
    want = jax.grad(lambda p, q: jnp.sum(jnp.linalg.solve(p, q) * weights), argnums=(0, 1))(a, v)
    np.testing.assert_allclose(np.asarray(ga), want[0], rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(np.asarray(gv), want[1], rtol=1e-3, atol=1e-4)


def test_gradients_of_inv_det_and_slogdet_are_jax_numpys(tmp_path):
    a = square(GRAD_N)
    weights = RNG.standard_normal((GRAD_N, GRAD_N)).astype(np.float32)
    scale = float(np.exp(-np.linalg.slogdet(a.astype(np.float64))[1] / GRAD_N))  # |det| near 1
    x = stored(a, tmp_path)
    cases = [
        (lambda p: oocarr.sum(inv(p) * weights), lambda p: jnp.sum(jnp.linalg.inv(p) * weights)),
        (lambda p: slogdet(p).logabsdet * 3.0, lambda p: jnp.linalg.slogdet(p)[1] * 3.0),
        (lambda p: det(p * scale), lambda p: jnp.linalg.det(p * scale)),
    ]
    for i, (ours, theirs) in enumerate(cases):
        grad = jax.jit(jax.grad(ours)) if i == 1 else jax.grad(ours)  # slogdet's under jit
        with oocarr.memory_budget(GRAD_BUDGET):
            got = np.asarray(grad(x))
        want = np.asarray(jax.grad(theirs)(jnp.asarray(a)))
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3 * np.abs(want).max())


def test_a_singular_matrix_gives_what_jax_numpy_gives(tmp_path):
    a = square(128)
    a[:, 5] = 0.0  # an exactly zero column: exactly zero pivot
    b = RNG.standard_normal(128).astype(np.float32)
    x = stored(a, tmp_path)
    with oocarr.memory_budget(a.nbytes // 4):
        got = np.asarray(solve(x, b))
        inverse = np.asarray(inv(x))
        sign, logabsdet = slogdet(x)
        determinant = float(det(x))
    assert not np.isfinite(np.asarray(jnp.linalg.solve(a, b))).all()
    assert not np.isfinite(got).all() and not np.isfinite(inverse).all()
    assert determinant == float(jnp.linalg.det(a)) == 0.0
    assert (float(sign), float(logabsdet)) == (0.0, -np.inf)
    assert tuple(map(float, jnp.linalg.slogdet(a))) == (0.0, -np.inf)


@pytest.mark.parametrize(
    ("n", "fraction"),
    [(256, 4), (256, 8), (1024, 4)],  # 1024: panels of 124 columns, each factored by LAPACK
)
def test_bytes_read_are_the_formula_and_within_twice_the_optimum(n, fraction, tmp_path):
    itemsize = 4
    a = RNG.standard_normal((n, n)).astype(np.float32)
    budget = a.nbytes // fraction
    x = stored(a, tmp_path)
    with oocarr.memory_budget(budget), oocarr.io_stats() as stats:
        slogdet(x)
    w = plan_width(n, budget // itemsize // 2)
    formula = n * n * itemsize + itemsize * panel_reads(n, w)
    assert stats.total.bytes_read == formula
    optimum = n * n * itemsize + itemsize * panel_reads(n, budget // (n * itemsize))
    assert 1.0 < stats.total.bytes_read / optimum < 2.0


def test_bytes_read_by_solve_are_the_formula(tmp_path):
    n, itemsize = 256, 4
    a = square(n)
    b = RNG.standard_normal(n).astype(np.float32)
    budget = a.nbytes // 4
    x, y = stored(a, tmp_path), stored(b, tmp_path, "b")
    with oocarr.memory_budget(budget), oocarr.io_stats() as stats:
        solve(x, y)
    share = budget // itemsize // 2
    w = plan_width(n, share, beside=1)  # one right-hand side rides along the factorization
    widths = [min(w, n - s) for s in range(0, n, w)]
    back = sum((k * w + width) * width for k, width in enumerate(widths))
    formula = itemsize * (n * n + panel_reads(n, w) + n + back)
    assert stats.total.bytes_read == formula
    best = budget // (n * itemsize)
    best_widths = [min(best, n - s) for s in range(0, n, best)]
    best_back = sum((k * best + width) * width for k, width in enumerate(best_widths))
    optimum = itemsize * (n * n + panel_reads(n, best) + n + best_back)
    assert stats.total.bytes_read / optimum < 2.0


def test_panels_factored_whole_by_lapack_are_numpys(tmp_path):
    n = 768  # under a quarter of its size: 6 panels of 124 columns, each one LAPACK getrf
    a = square(n)
    assert lu_module.panel_plan(n, a.nbytes // 4 // 4 // 2).whole
    a[:, 300] = 0.0  # singular: an exactly zero pivot inside a panel, as jax.numpy gives it
    b = RNG.standard_normal((n, 3)).astype(np.float32)
    x = stored(a, tmp_path)
    with oocarr.memory_budget(a.nbytes // 4):
        assert float(det(x)) == float(jnp.linalg.det(a)) == 0.0
        assert not np.isfinite(np.asarray(solve(x, b))).all()
    a[:, 300] = RNG.standard_normal(n)
    x = stored(a, tmp_path, "regular")
    with oocarr.memory_budget(a.nbytes // 4):
        got = np.asarray(solve(x, b))
        sign, logabsdet = slogdet(x)
    a64 = a.astype(np.float64)
    np.testing.assert_allclose(got, np.linalg.solve(a64, b), rtol=1e-3, atol=1e-3)
    want_sign, want_log = np.linalg.slogdet(a64)
    assert float(sign) == want_sign
    np.testing.assert_allclose(float(logabsdet), want_log, rtol=1e-5)


def test_compiled_block_functions_give_the_same_results(tmp_path, monkeypatch):
    monkeypatch.setattr(lu_module, "HOST_BELOW", 0)  # every block through run.jit
    a = square(64)
    b = RNG.standard_normal((64, 2)).astype(np.float32)
    with oocarr.memory_budget(a.nbytes // 2), oocarr.io_stats() as stats:
        got = np.asarray(solve(stored(a, tmp_path), b))
    assert stats.total.bytes_read > 2 * a.nbytes  # several panels
    np.testing.assert_allclose(got, np.linalg.solve(a, b), rtol=1e-4, atol=1e-4)


def test_bad_input_is_refused_naming_it(tmp_path):
    x = stored(square(6), tmp_path)
    with pytest.raises(errors.ShapeMismatchError, match=r"square.*\(6, 5\)"):
        solve(stored(np.ones((6, 5), "f4"), tmp_path, "r"), np.ones(6, "f4"))
    with pytest.raises(errors.ShapeMismatchError, match=r"\(5,\).*6"):
        solve(x, np.ones(5, "f4"))
    with pytest.raises(errors.ShapeMismatchError, match=r"\(6, 5, 2\).*\(\.\.\., 6, K\)"):
        solve(x, np.ones((6, 5, 2), "f4"))
    with pytest.raises(errors.InvalidArgumentError, match=r"\(6,\)"):
        det(stored(np.ones(6, "f4"), tmp_path, "v"))
    with pytest.raises(errors.NotSupportedError, match="int32.*astype"):
        inv(stored(np.eye(6, dtype="i4"), tmp_path, "i"))
    with oocarr.memory_budget("1KB"), pytest.raises(errors.BudgetTooSmallError, match="6 x 6"):
        slogdet(stored(np.eye(6, dtype="c8"), tmp_path, "c"))  # complex: read whole
    with pytest.raises(errors.NotSupportedError, match="int32"):
        solve(x, np.ones(6, "i4"))
    with pytest.raises(errors.BudgetTooSmallError, match="det"):
        with oocarr.memory_budget(2000):
            det(stored(square(64), tmp_path, "big"))


def test_complex_matrices_are_read_whole_as_jax_numpy_computes_them():
    """The out-of-core LU and Cholesky are built for real matrices: a complex stored matrix is
    read into memory and gives jax.numpy.linalg's results."""
    rng = np.random.default_rng(7)
    a = (rng.standard_normal((4, 4)) + 1j * rng.standard_normal((4, 4))).astype("c8")
    a += 4 * np.eye(4, dtype="c8")
    b = (rng.standard_normal(4) + 1j * rng.standard_normal(4)).astype("c8")
    x = oocarr.from_numpy(a)
    tol = {"rtol": 1e-4, "atol": 1e-5}
    np.testing.assert_allclose(np.asarray(oocarr.linalg.solve(x, b)), np.linalg.solve(a, b), **tol)
    np.testing.assert_allclose(np.asarray(oocarr.linalg.inv(x)), np.linalg.inv(a), **tol)
    np.testing.assert_allclose(complex(oocarr.linalg.det(x)), np.linalg.det(a), **tol)
    sign, logabsdet = oocarr.linalg.slogdet(x)
    want_sign, want_log = np.linalg.slogdet(a)
    np.testing.assert_allclose(complex(sign), want_sign, **tol)
    np.testing.assert_allclose(float(logabsdet), want_log, **tol)
    hpd = a @ a.conj().T
    np.testing.assert_allclose(
        np.asarray(oocarr.linalg.cholesky(oocarr.from_numpy(hpd))), np.linalg.cholesky(hpd), **tol
    )
