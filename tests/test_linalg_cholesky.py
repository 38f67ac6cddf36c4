"""Out-of-core blocked Cholesky against numpy.linalg.cholesky, jax.numpy.linalg.cholesky and
jax.grad of jax.numpy code: in memory and over budgets that cut the matrix into column
blocks, float32 and float64, upper, stacks, under jit, and its read volume against the
formula of oocarr.ops.cholesky."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import oocarr
from oocarr import errors
from oocarr.api.linalg_cholesky import cholesky
from oocarr.ops.cholesky import Cholesky

RNG = np.random.default_rng(20261207)
N = 128


def spd(n: int = N, dtype: str = "f4") -> np.ndarray:
    a = RNG.standard_normal((n, n))
    return (a @ a.T / n + np.eye(n)).astype(dtype)


def stored(a: np.ndarray, tmp_path, name: str = "a") -> oocarr.DiskArray:
    return oocarr.save(a, str(tmp_path / f"{name}.npy"))


def quarter(a: np.ndarray) -> int:
    """A budget of a quarter of the matrix: the factor runs out of core."""
    return a[..., :, :].nbytes // 4


def test_in_memory_sized_matches_numpy_and_jax(tmp_path):
    a = spd(64)
    got = np.asarray(cholesky(stored(a, tmp_path)))
    np.testing.assert_allclose(got, np.linalg.cholesky(a.astype("f8")), atol=2e-5)
    np.testing.assert_allclose(got, np.asarray(jnp.linalg.cholesky(a)), atol=2e-5)
    assert got.dtype == np.float32 and not np.triu(got, 1).any()


@pytest.mark.parametrize("upper", [False, True])
def test_out_of_core_matches_numpy_and_runs_many_blocks(upper, tmp_path):
    a = spd()
    x = stored(a, tmp_path)
    with oocarr.memory_budget(quarter(a)), oocarr.io_stats() as stats:
        factor = cholesky(x, upper=upper)
    got = np.asarray(factor)
    want = np.linalg.cholesky(a.astype("f8"))
    np.testing.assert_allclose(got, want.T if upper else want, atol=3e-5)
    assert not (np.tril(got, -1) if upper else np.triu(got, 1)).any()
    # more than one column block: the finished columns were read back
    (site,) = [c for k, c in stats.by_site.items() if k.startswith("cholesky")]
    assert site.bytes_read > a.nbytes


def test_float64_stays_float64_and_matches_numpy_at_its_precision(tmp_path):
    a = spd(96, "f8")
    x = stored(a, tmp_path)
    with jax.enable_x64(True), oocarr.memory_budget(quarter(a)):
        got = np.asarray(cholesky(x))
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, np.linalg.cholesky(a), atol=1e-12)


def test_reads_the_formula_and_within_twice_the_optimum(tmp_path):
    """The bytes read, from io_stats, are the module's read-volume formula, worked out here from
    n, the budget and the itemsize; and at most twice the same algorithm's with the whole
    budget for its accumulator."""
    n, itemsize = 256, 4
    a = spd(n)
    x = stored(a, tmp_path)
    for fraction in (4, 8):
        budget = a.nbytes // fraction
        with oocarr.memory_budget(budget), oocarr.io_stats() as stats:
            factor = cholesky(x)
        read = sum(c.bytes_read for k, c in stats.by_site.items() if k.startswith("cholesky"))
        np.testing.assert_allclose(
            np.asarray(factor), np.linalg.cholesky(a.astype("f8")), atol=3e-5
        )
        # one buffer's elements: the budget (all of it tiles, under 1 MiB) shared by the op's
        # 24 buffers, 2 read ahead and 1 written behind
        buffers = Cholesky.residency
        buffer = budget // itemsize * buffers // (buffers + 3) // buffers
        own = (buffers - 4) * buffer
        plans = []
        for w in range(1, min(n, buffer) + 1):
            height = own // w - 2 * w
            if w > 1 and height < w:
                break
            plans.append(_reads_of_width(n, w, height))
        assert read == min(plans) * itemsize
        optimum = min(_reads_of_width(n, w, budget // itemsize // w) for w in range(1, n + 1))
        assert optimum * itemsize < read <= 2 * optimum * itemsize
        assert read > (n * (n + 1) // 2) * itemsize  # finished columns read back


def _reads_of_width(n: int, w: int, height: int) -> int:
    """Σ over column blocks [s, s+w) of m·w (x) + s·(m + (⌈m/h⌉ − 1)·w) (L read back)."""
    total = 0
    for s in range(0, n, w):
        m, width = n - s, min(w, n - s)
        h = max(1, min(height, m))
        total += m * width + s * (m + (math.ceil(m / h) - 1) * width)
    return total


def test_a_stack_is_factored_one_matrix_at_a_time(tmp_path):
    a = np.stack([spd(48), spd(48), spd(48)])
    got = cholesky(stored(a, tmp_path), upper=True)
    assert got.shape == a.shape
    want = np.linalg.cholesky(a.astype("f8")).transpose(0, 2, 1)
    np.testing.assert_allclose(np.asarray(got), want, atol=2e-5)


def test_under_jit_and_in_memory_inputs(tmp_path):
    a = spd()
    x = stored(a, tmp_path)
    with oocarr.memory_budget(quarter(a)):
        got = jax.jit(lambda v: cholesky(v))(x)
    np.testing.assert_allclose(np.asarray(got), np.linalg.cholesky(a.astype("f8")), atol=3e-5)
    inside = jax.jit(lambda v: cholesky(v, upper=True))(jnp.asarray(a))
    np.testing.assert_allclose(inside, jnp.linalg.cholesky(a, upper=True), atol=1e-6)


@pytest.mark.parametrize("upper", [False, True])
def test_gradient_is_jax_numpys_eager_and_jitted(upper, tmp_path):
    a = spd()
    weights = RNG.standard_normal(a.shape).astype(np.float32)

    def loss(v):
        return oocarr.sum(cholesky(v, upper=upper) * weights)

    want = jax.grad(lambda v: jnp.sum(jnp.linalg.cholesky(v, upper=upper) * weights))(a)
    with oocarr.memory_budget(quarter(a)), oocarr.io_stats() as stats:
        eager = np.asarray(jax.grad(loss)(stored(a, tmp_path)))
        jitted = np.asarray(jax.jit(jax.grad(loss))(stored(a, tmp_path, "b")))
    np.testing.assert_allclose(eager, want, atol=2e-5)
    np.testing.assert_allclose(jitted, want, atol=2e-5)
    backward = [c for k, c in stats.by_site.items() if k.startswith("cholesky @") and "back" in k]
    assert backward and all(c.bytes_written > 0 for c in backward)  # through the scratch X


def test_not_positive_definite_gives_nans_as_jax_numpy(tmp_path):
    a = spd()
    a[100, 100] = -50.0
    with oocarr.memory_budget(quarter(a)):
        got = np.asarray(cholesky(stored(a, tmp_path)))
    want = np.asarray(jnp.linalg.cholesky(a))
    assert np.isnan(want[np.tril_indices(N)]).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert not np.triu(got, 1).any()


def test_errors_name_the_shape_or_dtype_and_the_fix(tmp_path):
    with pytest.raises(errors.InvalidArgumentError, match=r"square.*\(4, 3\)"):
        cholesky(stored(np.zeros((4, 3), "f4"), tmp_path, "wide"))
    with pytest.raises(errors.InvalidArgumentError, match=r"\(5,\)"):
        cholesky(stored(np.zeros(5, "f4"), tmp_path, "vector"))
    with pytest.raises(errors.UnsupportedDtypeError, match="int32.*astype"):
        cholesky(stored(np.eye(3, dtype="i4"), tmp_path, "ints"))
    with oocarr.memory_budget("1KB"), pytest.raises(errors.BudgetTooSmallError, match="16 x 16"):
        cholesky(stored(np.eye(16, dtype="c8"), tmp_path, "complex"))  # complex: read whole
    with oocarr.memory_budget(2000), pytest.raises(errors.BudgetTooSmallError, match="cholesky"):
        cholesky(stored(spd(32), tmp_path, "tiny"))
