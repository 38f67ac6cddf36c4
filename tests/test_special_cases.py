"""The Array API's special cases of elementwise functions, and floor division, on stored
arrays: against NumPy and ``jax.numpy``, eagerly and under ``jax.jit``, with Python scalars
on either side (issue 37).

Each check compares dtypes, values (NaNs equal) and the signs of zeros.
"""

from __future__ import annotations

import operator

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import oocarr

INF, NAN = np.inf, np.nan

#: NumPy warns of the invalid values these cases compute on purpose.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

#: Floats with every special value, signed zeros, halves and negative operands.
FLOATS = np.array([-0.0, 0.0, 0.5, -0.5, 1.5, -2.5, 7.0, -7.0, INF, -INF, NAN], np.float32)


@pytest.fixture(params=["from_numpy", "zarr"])
def store(request, tmp_path):
    """Stores a NumPy array: in memory (``oocarr.from_numpy``), or saved to zarr in chunks of
    three rows and read in several tiles (``oocarr.save`` under a small memory budget)."""
    if request.param == "from_numpy":
        yield oocarr.from_numpy
        return
    names = iter(range(1000))

    def save(a: np.ndarray) -> oocarr.DiskArray:
        chunks = tuple(max(1, min(3, n)) for n in a.shape)
        return oocarr.save(a, str(tmp_path / f"{next(names)}.zarr"), chunks=chunks)

    with oocarr.memory_budget(4096):
        yield save


@pytest.fixture
def in_memory():
    """Stores a NumPy array in memory (``oocarr.from_numpy``): for the unary cases and the
    promotions, where tiles do not matter."""
    return oocarr.from_numpy


def same(got, want, zero_signs: bool = True) -> None:
    """``got`` equals ``want``: dtype, values (NaNs equal) and, unless told not to, the signs
    of zeros."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)
    if zero_signs and want.dtype.kind == "f":
        zeros = want == 0
        np.testing.assert_array_equal(
            np.signbit(got[zeros]), np.signbit(want[zeros]), err_msg="the signs of zeros"
        )


def eager_and_jit(fn, *args) -> list:
    """``fn(*args)`` eagerly and under ``jax.jit``: the stored arrays are the jitted
    function's arguments, the scalars its constants (so elementwise chains fuse)."""
    stored = [i for i, a in enumerate(args) if isinstance(a, oocarr.DiskArray)]

    def jitted(*arrays):
        given = list(args)
        for i, a in zip(stored, arrays):
            given[i] = a
        return fn(*given)

    return [fn(*args), jax.jit(jitted)(*(args[i] for i in stored))]


def check(store, fn, *args, numpy=None, zero_signs: bool = True, jnp_zero_signs: bool = True):
    """``fn(oocarr, *args)`` with the arrays among ``args`` stored, eagerly and under jit,
    equals ``fn(np, *args)`` (or ``numpy``, when given) and ``fn(jnp, *args)``."""
    want = fn(np, *args) if numpy is None else numpy
    stored = [store(a) if isinstance(a, np.ndarray) else a for a in args]
    for got in eager_and_jit(lambda *a: fn(oocarr, *a), *stored):
        same(got, want, zero_signs)
    in_jax = [jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
    same(fn(jnp, *in_jax), want, zero_signs and jnp_zero_signs)


def named(name):
    return lambda xp, *args: getattr(xp, name)(*args)


def grid(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of ``values``: the first operand down the rows, the second across."""
    x1, x2 = np.meshgrid(values, values, indexing="ij")
    return np.ascontiguousarray(x1), np.ascontiguousarray(x2)


# ----------------------------------------------------------------------------
# add and subtract: signed zeros, which XLA folded away under jit (x + 0.0 was x)
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["add", "subtract"])
def test_add_and_subtract_of_signed_zeros(store, name):
    check(store, named(name), *grid(FLOATS))
    for scalar in (0.0, -0.0, 0):
        check(store, named(name), FLOATS, scalar)
        check(store, named(name), scalar, FLOATS)


def test_operators_with_zero_scalars_keep_signed_zeros(store):
    zeros = np.array([-0.0, 0.0, 3.0], np.float32)
    for fn in (
        lambda xp, x: x + 0.0,
        lambda xp, x: 0.0 + x,
        lambda xp, x: -0.0 + x,
        lambda xp, x: x + 0,
        lambda xp, x: x - -0.0,
        lambda xp, x: (x + 0.0) * 1.0,  # a fused chain
    ):
        check(store, fn, zeros)


def test_a_reduction_of_a_fused_chain_sees_the_sign_of_zero(store):
    x = store(np.array([-0.0, -0.0, 0.0, -1.0], np.float32))
    for total in eager_and_jit(lambda a: oocarr.sum(oocarr.signbit(a + 0.0)), x):
        assert int(total) == 1  # only -1.0 + 0.0 is negative


# ----------------------------------------------------------------------------
# pow with NaN
# ----------------------------------------------------------------------------
def test_pow_with_nan(store):
    values = np.array([NAN, 1.0, -1.0, 0.5, 2.0, 0.0, -0.0, INF, -INF], np.float32)
    check(store, named("pow"), *grid(values))
    nans = np.array([NAN, -NAN, 1.0, 2.0], np.float32)
    for scalar in (0, -0.0, 2, NAN):
        check(store, named("pow"), nans, scalar)
    for scalar in (1.0, NAN):
        check(store, named("pow"), scalar, nans)
    check(store, lambda xp, x: x**0, nans)
    check(store, lambda xp, x: 1.0**x, nans)


# ----------------------------------------------------------------------------
# Rounding, predicates and functions at infinities
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["int32", "int8", "uint8"])
def test_rounding_integers_gives_them_back_in_their_dtype(in_memory, dtype):
    info = np.iinfo(dtype)
    x = np.array([info.min, info.min + 1, 0, 1, 7, info.max], dtype)
    for name in ("ceil", "floor", "trunc", "round"):
        check(in_memory, named(name), x)
        assert np.dtype(getattr(oocarr, name)(in_memory(x)).dtype) == np.dtype(dtype)


def test_round_halves_to_even(in_memory):
    halves = np.array([0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, 0.0, -0.0, 2.4999998, INF, NAN])
    check(in_memory, named("round"), halves.astype(np.float32))
    check(in_memory, named("round"), np.arange(-4, 5, dtype=np.float32) + 0.5)


@pytest.mark.parametrize("dtype", ["float32", "int32", "int8", "uint8", "bool"])
def test_isfinite_isinf_isnan(in_memory, dtype):
    if dtype == "float32":
        x = np.array([0.0, -0.0, 1.0, -3e38, INF, -INF, NAN], np.float32)
    elif dtype == "bool":
        x = np.array([True, False])
    else:
        x = np.array([np.iinfo(dtype).min, 0, 1, np.iinfo(dtype).max], dtype)
    for name in ("isfinite", "isinf", "isnan"):
        check(in_memory, named(name), x)


@pytest.mark.parametrize(
    "name, values",
    [
        ("acosh", [INF, 1.0, 0.5, -INF, NAN]),
        ("asinh", [INF, -INF, 0.0, -0.0, NAN]),
        ("log", [INF, 1.0, 0.0, -0.0, -1.0, -INF, NAN]),
        ("tanh", [INF, -INF, 0.0, -0.0, NAN]),
    ],
)
def test_functions_at_infinities(in_memory, name, values):
    check(in_memory, named(name), np.array(values, np.float32))


# ----------------------------------------------------------------------------
# floor_divide and remainder
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["floor_divide", "remainder"])
def test_floor_divide_and_remainder_of_floats(store, name):
    """Negative operands, zero divisors, infinities and NaNs; a zero quotient signed as
    ``x1 / x2``, a zero remainder as ``x2`` (NumPy's and the standard's; ``jax.numpy``'s
    zeros differ, so only its values are compared)."""
    check(store, named(name), *grid(FLOATS), jnp_zero_signs=False)
    for scalar in (-3, 0.5, -0.0, INF):
        check(store, named(name), FLOATS, scalar, jnp_zero_signs=False)
        check(store, named(name), scalar, FLOATS, jnp_zero_signs=False)


def test_floor_division_operators_of_floats(store):
    for fn in (
        lambda xp, x: x // 2.0,
        lambda xp, x: -3.0 // x,
        lambda xp, x: x % -1.5,
        lambda xp, x: 7 % x,
    ):
        check(store, fn, FLOATS, jnp_zero_signs=False)
    q, r = divmod(store(FLOATS), -2.0)
    same(q, np.floor_divide(FLOATS, np.float32(-2.0)))
    same(r, np.remainder(FLOATS, np.float32(-2.0)))


def _integers(dtype: str) -> np.ndarray:
    info = np.iinfo(dtype)
    if info.min < 0:
        return np.array([0, 1, 3, 7, 9, -1, -7, -9, info.min + 1, info.max], dtype)
    return np.array([0, 1, 3, 7, 9, 200 % info.max, info.max, info.max - 1], dtype)


@pytest.mark.parametrize("dtype", ["int32", "int8", "uint8", "uint32"])
@pytest.mark.parametrize("name", ["floor_divide", "remainder"])
def test_floor_divide_and_remainder_of_integers(in_memory, dtype, name):
    """Against NumPy for nonzero divisors (negative operands too); a Python scalar takes the
    array's dtype, so ``uint32_array // 2`` divides in uint32 (it divided in int32)."""
    x = _integers(dtype)
    nonzero = x[x != 0]
    x1, x2 = np.meshgrid(x, nonzero, indexing="ij")
    check(in_memory, named(name), np.ascontiguousarray(x1), np.ascontiguousarray(x2))
    for scalar in (2, 3) + ((-3,) if dtype.startswith("int") else ()):
        check(in_memory, named(name), x, scalar)
        check(in_memory, named(name), scalar, nonzero)


@pytest.mark.parametrize("dtype", ["int32", "int8", "uint8"])
def test_integer_division_by_zero_as_jax_numpy(in_memory, dtype):
    """The standard leaves it to the library: oocarr gives what ``jax.numpy`` gives (NumPy
    gives 0), with a zero array or a Python zero, on either side."""
    x = _integers(dtype)
    zeros = np.zeros_like(x)
    for name in ("floor_divide", "remainder"):
        want = np.asarray(getattr(jnp, name)(jnp.asarray(x), jnp.asarray(zeros)))
        check(in_memory, named(name), x, zeros, numpy=want)
        check(in_memory, named(name), x, 0, numpy=want)
    check(in_memory, lambda xp, x: x // 0, x, numpy=np.asarray(jnp.asarray(x) // 0))


# ----------------------------------------------------------------------------
# Python scalars take the dtype JAX promotes them to
# ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "dtype, fn",
    [
        ("uint8", lambda xp, x: x + 300),  # wraps around, as JAX's cast of the scalar does
        ("uint8", lambda xp, x: xp.less(x, -1)),
        ("uint8", lambda xp, x: x // -1),
        ("uint8", lambda xp, x: x * 2.5),
        ("int8", lambda xp, x: 100 - x),
        ("int8", lambda xp, x: x**2),
        ("int32", lambda xp, x: x / 2),
        ("bool", lambda xp, x: x + 1),
        ("bool", lambda xp, x: x & True),
        ("float32", lambda xp, x: x**2),
        ("float32", lambda xp, x: 2**x),
    ],
)
def test_python_scalars_take_the_dtype_jax_gives_them(in_memory, dtype, fn):
    x = np.array([0, 1, 2, 5], dtype) if dtype != "bool" else np.array([True, False])
    want = np.asarray(fn(jnp, jnp.asarray(x)))
    check(in_memory, fn, x, numpy=want)


def test_numpy_scalars_keep_their_dtype_under_jit(store):
    """A strong scalar constant in a fused chain promotes as in the unfused op (it was a
    Python int there, so ``int8 + np.int32(5)`` wrapped around in int8)."""
    x = np.array([127, -128, 1], np.int8)
    want = np.asarray(jnp.asarray(x) + np.int32(5))
    assert want.dtype == np.int32
    check(store, lambda xp, x: x + np.int32(5), x, numpy=want)
    check(store, lambda xp, x: (x + np.int32(5)) * 2, x, numpy=want * 2)


def test_weak_jax_scalars_are_cast_like_python_scalars(in_memory):
    x = np.array([4294967295, 7], np.uint32)
    two = jnp.asarray(2)  # weakly typed, as JAX types a Python int
    assert jax.typeof(two).weak_type
    want = np.asarray(jnp.asarray(x) // two)
    for got in eager_and_jit(lambda a, b: oocarr.floor_divide(a, b), in_memory(x), two):
        same(got, want)
    got = jax.jit(lambda a, b: oocarr.floor_divide(a, b))(in_memory(x), two)  # b traced
    same(got, want)


def test_both_operands_scalars_or_arrays_are_left_alone():
    same(oocarr.add(2, 3), jnp.add(2, 3))
    a = oocarr.from_numpy(np.array([1, 2], np.uint8))
    same(oocarr.floor_divide(a, a), np.array([1, 1], np.uint8))
    same(operator.floordiv(a, np.uint8(2)), np.array([0, 1], np.uint8))
