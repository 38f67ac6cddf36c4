"""The Array API's elementwise functions and every Python operator on DiskArrays, against
NumPy (values) and jax.numpy (gradients), on every driver, eager and under jit, with shapes
cut into several uneven tiles."""

from __future__ import annotations

import operator

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import oocarr
from oocarr import errors
from oocarr.ops.elementwise import BITWISE, MATH, MATH_BINARY, PREDICATES
from stored_arrays import same, skip_slow, stored

BUDGET = 4 * 4 * 24

#: Inputs inside each function's domain (the gradient is compared there too).
DOMAIN = {
    "asin": (-0.9, 0.9),
    "acos": (-0.9, 0.9),
    "atanh": (-0.9, 0.9),
    "acosh": (1.1, 4.0),
    "log2": (0.2, 4.0),
    "log10": (0.2, 4.0),
    "reciprocal": (0.5, 3.0),
    "tan": (-1.2, 1.2),
}
#: Functions whose gradient JAX defines as zero or does not define away from the data.
NO_GRADIENT = {"floor", "ceil", "round", "trunc", "sign", "nextafter"}


def values(shape, name="", seed=0):
    lo, hi = DOMAIN.get(name, (-3.0, 3.0))
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(np.float32)


def test_unary_math_functions_match_numpy(backend):
    skip_slow(backend)
    with oocarr.memory_budget(BUDGET):
        for name in sorted(MATH):
            a = values((7, 5), name)
            want = np.positive(a) if name == "positive" else getattr(np, _numpy_name(name))(a)
            same(getattr(oocarr, name)(stored(backend, a)), want.astype(np.float32))


def _numpy_name(name):
    return {"asin": "arcsin", "acos": "arccos", "atan": "arctan", "asinh": "arcsinh"}.get(
        name, {"acosh": "arccosh", "atanh": "arctanh", "atan2": "arctan2"}.get(name, name)
    )


@pytest.mark.parametrize("name", sorted(MATH_BINARY))
def test_binary_math_functions_match_numpy_with_broadcasting(name, tmp_path):
    a = values((7, 5), name, 1)
    b = values((5,), name, 2)
    if name in ("floor_divide", "remainder"):
        b = np.where(np.abs(b) < 0.5, 1.5, b).astype(np.float32)
    x, y = oocarr.from_numpy(a), oocarr.from_numpy(b)
    with oocarr.memory_budget(BUDGET):
        got = getattr(oocarr, name)(x, y)
        jitted = jax.jit(getattr(oocarr, name))(x, y)
    want = getattr(np, _numpy_name(name))(a, b)
    same(got, want)
    same(jitted, want)


@pytest.mark.parametrize("name", sorted((set(MATH) | set(MATH_BINARY)) - NO_GRADIENT))
def test_gradients_match_jax_numpy(name, tmp_path):
    fn, ref = getattr(oocarr, name), getattr(jnp, name)
    a = values((6, 5), name, 3)
    if name in MATH_BINARY:
        b = values((6, 5), name, 4) + 4.0  # away from the kinks of floor_divide / remainder
        gx, gy = jax.grad(lambda u, v: oocarr.sum(fn(u, v)), argnums=(0, 1))(
            oocarr.from_numpy(a), oocarr.from_numpy(b)
        )
        rx, ry = jax.grad(lambda u, v: jnp.sum(ref(u, v)), argnums=(0, 1))(a, b)
        same(gx, rx, 1e-4)
        same(gy, ry, 1e-4)
    else:
        with oocarr.memory_budget(BUDGET):
            g = jax.jit(jax.grad(lambda v: oocarr.sum(fn(v))))(oocarr.from_numpy(a))
        same(g, jax.grad(lambda v: jnp.sum(ref(v)))(a), 1e-4)


def test_predicates_and_special_values(backend):
    skip_slow(backend)
    a = values((9, 4))
    a[0, :] = [np.nan, np.inf, -np.inf, -0.0]
    x = stored(backend, a)
    with oocarr.memory_budget(BUDGET):
        for name in sorted(PREDICATES):
            arg = stored(backend, a > 0) if name == "logical_not" else x
            want = np.logical_not(a > 0) if name == "logical_not" else getattr(np, name)(a)
            same(getattr(oocarr, name)(arg), want)


@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool"])
def test_logical_and_bitwise_functions_match_numpy(dtype, tmp_path):
    rng = np.random.default_rng(5)
    if dtype == "bool":
        a, b = rng.random((8, 3)) < 0.5, rng.random((8, 3)) < 0.5
    else:
        a = rng.integers(0, 100, (8, 3)).astype(dtype)
        b = rng.integers(0, 5, (8, 3)).astype(dtype)
    x, y = oocarr.from_numpy(a), oocarr.from_numpy(b)
    with oocarr.memory_budget(BUDGET):
        for name in sorted(BITWISE):
            if dtype == "bool" and "shift" in name:
                continue
            want = {
                "bitwise_invert": lambda u, v: np.invert(u),
                "bitwise_left_shift": np.left_shift,
                "bitwise_right_shift": np.right_shift,
            }.get(name, getattr(np, name, None))(a, b)
            fn = getattr(oocarr, name)
            got = fn(x) if name == "bitwise_invert" else fn(x, y)
            same(got, want)


OPERATORS = [
    operator.eq,
    operator.ne,
    operator.lt,
    operator.le,
    operator.gt,
    operator.ge,
    operator.add,
    operator.sub,
    operator.mul,
    operator.truediv,
    operator.floordiv,
    operator.mod,
    operator.pow,
]


@pytest.mark.parametrize("op", OPERATORS, ids=lambda f: f.__name__)
def test_operators_both_ways_with_scalars_and_arrays(op, backend):
    skip_slow(backend)
    a = np.random.default_rng(6).integers(1, 6, (7, 5)).astype(np.float32)
    b = np.random.default_rng(7).integers(1, 4, (5,)).astype(np.float32)
    x = stored(backend, a)
    with oocarr.memory_budget(BUDGET):
        for left, right, want in [
            (x, 2.0, op(a, np.float32(2.0))),
            (3.0, x, op(np.float32(3.0), a)),
            (x, b, op(a, b)),
            (b, x, op(b, a)),
            (x, x, op(a, a)),
        ]:
            got = op(left, right)
            assert isinstance(got, oocarr.DiskArray), (op, type(got))
            same(got, want, 1e-4)
        traced = jax.jit(lambda u, v: op(u, v))(x, b)
        same(traced, op(a, b), 1e-4)


def test_equality_is_elementwise_never_identity():
    x = oocarr.from_numpy(np.array([1, 2, 1], np.int32))
    for got, want in [(x == 1, [True, False, True]), (x != 1, [False, True, False])]:
        assert isinstance(got, oocarr.DiskArray)
        assert np.asarray(got).tolist() == want
    assert np.asarray(x == x).all() and not np.asarray(x != x).any()
    assert hash(x) == hash(x)  # handles stay hashable, by identity
    assert len({x, x}) == 1


def test_integer_and_bitwise_operators_and_divmod():
    a = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
    x = oocarr.from_numpy(a)
    pairs = [
        (abs(x), np.abs(a)),
        (-x, -a),
        (+x, +a),
        (~x, ~a),
        (x & 5, a & 5),
        (6 & x, 6 & a),
        (x | 2, a | 2),
        (2 | x, 2 | a),
        (x ^ 3, a ^ 3),
        (3 ^ x, 3 ^ a),
        (x << 2, a << 2),
        (1 << abs(x), 1 << np.abs(a)),
        (x >> 1, a >> 1),
        (64 >> abs(x), 64 >> np.abs(a)),
        (x // 4, a // 4),
        (7 // (abs(x) + 1), 7 // (np.abs(a) + 1)),
        (x % 4, a % 4),
        (7 % (abs(x) + 1), 7 % (np.abs(a) + 1)),
        (2 ** abs(x), 2 ** np.abs(a)),
    ]
    for got, want in pairs:
        same(got, want)
    quotient, remainder = divmod(x, 4)
    same(quotient, a // 4)
    same(remainder, a % 4)
    quotient, remainder = divmod(9, abs(x) + 1)
    same(quotient, 9 // (np.abs(a) + 1))
    same(remainder, 9 % (np.abs(a) + 1))
    mask = oocarr.from_numpy(a > 0)
    same(~mask, ~(a > 0))
    same(mask & (x < 4), (a > 0) & (a < 4))


def test_operators_under_jit_and_grad():
    a = np.random.default_rng(8).uniform(0.5, 3.0, (6, 4)).astype(np.float32)
    x = oocarr.from_numpy(a)

    def f(u):
        return oocarr.sum(abs(u - 2.0) + (u == 1.0) * 1.0 + u % 1.5 + (u >= 2.0) * u + 2.0**u)

    with oocarr.memory_budget(BUDGET):
        value, grad = jax.jit(jax.value_and_grad(f))(x)

    def ref(u):
        return jnp.sum(jnp.abs(u - 2.0) + (u == 1.0) * 1.0 + u % 1.5 + (u >= 2.0) * u + 2.0**u)

    rv, rg = jax.value_and_grad(ref)(a)
    np.testing.assert_allclose(float(value), float(rv), rtol=1e-5)
    same(grad, rg, 1e-4)
    lr = jnp.float32(2.0)
    traced = jax.jit(
        lambda u, s: [
            oocarr.equal(s, u),
            oocarr.not_equal(s, u),
            oocarr.floor_divide(s, u),
            oocarr.remainder(s, u),
            oocarr.pow(s, u),
            u * s,
        ]
    )(x, lr)
    for got, want in zip(traced, [a == 2.0, a != 2.0, 2.0 // a, 2.0 % a, 2.0**a, a * 2.0]):
        same(got, want.astype(np.asarray(got).dtype), 1e-5)


@pytest.mark.parametrize(
    ("expression", "function"),
    [
        (lambda u, s: s == u, "oocarr.equal"),
        (lambda u, s: s - u, "oocarr.subtract"),
        (lambda u, s: s * u, "oocarr.multiply"),
        (lambda u, s: s @ u, "oocarr.matmul"),
    ],
)
def test_a_traced_jax_array_on_the_left_of_a_disk_array_names_the_oocarr_function(
    expression, function
):
    # JAX's operators never defer to the right operand when both are tracers, and oocarr
    # patches no JAX function to make them: the error says what to write instead.
    x = oocarr.from_numpy(np.ones((4, 4), np.float32))
    with pytest.raises(errors.JaxNumpyArgumentError, match=function.replace(".", r"\.")):
        jax.jit(expression)(x, jnp.ones((4, 4), jnp.float32))


def test_methods_any_all_max_min():
    a = np.array([[0, 3, 0], [0, 0, 0], [1, 2, 5]], np.int32)
    x = oocarr.from_numpy(a)
    same(x.max(), np.int32(5))
    same(x.min(axis=1), a.min(axis=1))
    same(x.any(axis=1), a.any(axis=1))
    same(x.all(axis=0), a.all(axis=0))
    assert bool(oocarr.any(x)) and not bool(oocarr.all(x))
    same(oocarr.any(x > 4, axis=0, keepdims=True), (a > 4).any(axis=0, keepdims=True))


def test_truth_value_of_a_stored_array():
    assert bool(oocarr.from_numpy(np.array([3])) == 3)
    assert not bool(oocarr.from_numpy(np.array(0.0)))
    with pytest.raises(errors.InvalidArgumentError, match="ambiguous.*oocarr.any"):
        bool(oocarr.from_numpy(np.arange(3)) == 1)
