"""oocarr.array_api: code written against the Array API standard runs on stored arrays and
gives what NumPy's own namespace (the oracle) gives for the same code."""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oocarr
from oocarr import errors
from stored_arrays import skip_slow, stored

BUDGET = 4 * 4 * 24


def standardize(x):
    """Array API code: the namespace comes from the array."""
    xp = x.__array_namespace__()
    centred = x - xp.mean(x, axis=0)
    scaled = centred / xp.std(x, axis=0, correction=1)
    return xp.sum(xp.where(xp.abs(scaled) > 1.5, scaled, 0.0), axis=1), xp.max(scaled, axis=1)


def summary(x):
    xp = x.__array_namespace__()
    pos = xp.clip(x, 0.0, None)
    return [
        xp.vecdot(x, x),
        xp.var(xp.log1p(pos), axis=1),
        xp.any(xp.isnan(xp.sqrt(x)), axis=0),
        xp.matrix_transpose(x),
        xp.permute_dims(x, (1, 0)),
        xp.astype(x > 0, xp.int32),
        xp.pow(pos, 2),
        xp.atan2(x, 1.0),
    ]


def test_standard_code_runs_on_stored_arrays_like_numpy(backend):
    skip_slow(backend)
    a = np.random.default_rng(0).standard_normal((13, 6)).astype(np.float32)
    x = stored(backend, a)
    with oocarr.memory_budget(BUDGET), np.errstate(invalid="ignore"):
        for got, want in zip((*standardize(x), *summary(x)), (*standardize(a), *summary(a))):
            got, want = np.asarray(got), np.asarray(want)
            assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_the_namespace_under_jit_and_grad():
    a = np.random.default_rng(1).standard_normal((9, 4)).astype(np.float32)
    x = oocarr.from_numpy(a)

    def loss(v):
        xp = v.__array_namespace__()
        return xp.sum(xp.square((v - xp.mean(v, axis=0)) / xp.std(v, axis=0)))

    with oocarr.memory_budget(BUDGET):
        value, grad = jax.jit(jax.value_and_grad(loss))(x)
    import jax.numpy as jnp

    def ref(v):
        return jnp.sum(jnp.square((v - jnp.mean(v, axis=0)) / jnp.std(v, axis=0)))

    rv, rg = jax.value_and_grad(ref)(a)
    np.testing.assert_allclose(float(value), float(rv), rtol=1e-4)
    np.testing.assert_allclose(np.asarray(grad), np.asarray(rg), rtol=1e-3, atol=1e-4)


def test_the_first_lines_of_an_analysis():
    a = np.random.default_rng(2).standard_normal((20, 3)).astype(np.float32) * 4 + 7
    x = oocarr.from_numpy(a)
    z = (x - x.mean(axis=0)) / x.std(axis=0)
    np.testing.assert_allclose(np.asarray(z), (a - a.mean(0)) / a.std(0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(x.max(0)), a.max(0))
    np.testing.assert_array_equal(np.asarray(x.mT), a.T)
    assert np.asarray(x == a[0, 0]).sum() == 1


def test_constants_dtypes_and_data_type_functions():
    xp = oocarr.array_api
    x = oocarr.from_numpy(np.zeros((2, 3), np.float32))
    assert x.__array_namespace__() is xp and xp.__array_api_version__ == "2023.12"
    assert x.__array_namespace__(api_version="2023.12") is xp
    with pytest.raises(errors.InvalidArgumentError, match="2023.12"):
        x.__array_namespace__(api_version="2021.12")
    assert x.dtype == xp.float32 and xp.newaxis is None and xp.pi == np.pi
    pairs = [(xp.int8, xp.uint8), (xp.float32, xp.int64), (xp.bool, xp.int16), (x, xp.float64)]
    for a, b in pairs:
        want = np.result_type(np.dtype(a.dtype if a is x else a), np.dtype(b))
        if want == np.float64 and not jax.config.jax_enable_x64:
            continue  # JAX without x64 keeps 32-bit results
        assert xp.result_type(a, b) == want
    assert xp.can_cast(xp.int8, xp.int32) and not xp.can_cast(xp.float64, xp.float32)
    assert xp.finfo(xp.float32).eps == np.finfo(np.float32).eps
    assert xp.iinfo(xp.uint16).max == 65535
    assert xp.isdtype(xp.float32, "real floating") and xp.isdtype(xp.uint8, "integral")
    assert not xp.isdtype(xp.int8, ("bool", "unsigned integer"))
    assert xp.isdtype(xp.complex64, "numeric") and xp.isdtype(xp.int8, xp.int8)
    info = xp.__array_namespace_info__()
    # the dtypes results have, as jax.numpy's namespace gives them (64-bit with x64 only)
    jax_info = jnp.__array_namespace_info__()
    for kind in (None, "integral", "real floating", "complex floating", "bool"):
        assert info.dtypes(kind=kind) == jax_info.dtypes(kind=kind), kind
    assert info.default_dtypes() == jax_info.default_dtypes()


def test_results_are_the_namespaces_arrays_outside_a_trace():
    """Outside a trace every result of the namespace's functions and of a DiskArray's operators
    is a DiskArray, so code that finds its namespace from the arrays it holds (as scikit-learn
    does) finds oocarr's; under a trace 0-d results stay JAX values, differentiable."""
    array_api_compat = pytest.importorskip("array_api_compat")
    xp = oocarr.array_api
    a = np.random.default_rng(5).standard_normal((30, 4)).astype(np.float32)
    x = oocarr.from_numpy(a)
    u, s, vh = xp.linalg.svd(x, full_matrices=False)
    first, second = x[0], x[1]
    found = {
        "mean": (xp.mean(x), np.mean(a)),
        "max": (xp.max(x), np.max(a)),
        "var": (xp.var(x, correction=1), np.var(a, ddof=1)),
        "argmax": (xp.argmax(xp.reshape(x, (-1,))), np.argmax(a)),
        "sqrt of a JAX value": (xp.sqrt(jnp.float32(4.0)), np.float32(2.0)),
        "s": (s, np.linalg.svd(a, compute_uv=False)),
        "vh @ vh.T": (vh @ xp.matrix_transpose(vh), np.eye(4, dtype=np.float32)),
        "vector @ vector": (first @ second, a[0] @ a[1]),
        "0-d - JAX value": (xp.mean(x) - jnp.float32(1.0), np.mean(a) - 1.0),
        "0-d comparison": (xp.mean(x) < 0.0, np.mean(a) < 0.0),
    }
    for name, (got, want) in found.items():
        assert isinstance(got, oocarr.DiskArray), name
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5, err_msg=name)
    everything = [x, u, s, vh, *(got for got, _ in found.values())]
    assert array_api_compat.array_namespace(*everything) is xp
    assert xp.linalg.svd is xp.linalg.svd and "svd" in dir(xp.linalg)
    assert hasattr(xp.linalg, "eigh") == hasattr(oocarr.linalg, "eigh")
    traced = jax.jit(lambda v: xp.mean(v) - 1.0)(x)
    assert isinstance(traced, jax.Array)
    np.testing.assert_allclose(float(traced), np.mean(a) - 1.0, rtol=1e-5)


def test_what_is_not_provided_is_named():
    with pytest.raises(errors.NotSupportedError, match="oocarr.array_api.from_dlpack is not"):
        oocarr.array_api.from_dlpack  # noqa: B018
    assert not hasattr(oocarr.array_api, "from_dlpack")  # an AttributeError too
    with pytest.raises(AttributeError, match="no attribute 'not_a_function'"):
        oocarr.array_api.not_a_function  # noqa: B018


#: Every function of the Array API standard 2023.12, by section of the specification.
STANDARD = {
    "elementwise": "abs acos acosh add asin asinh atan atan2 atanh bitwise_and "
    "bitwise_left_shift bitwise_invert bitwise_or bitwise_right_shift bitwise_xor ceil clip "
    "conj copysign cos cosh divide equal exp expm1 floor floor_divide greater greater_equal "
    "hypot imag isfinite isinf isnan less less_equal log log1p log2 log10 logaddexp "
    "logical_and logical_not logical_or logical_xor maximum minimum multiply negative "
    "not_equal positive pow real remainder round sign signbit sin sinh square sqrt subtract "
    "tan tanh trunc",
    "statistical": "cumulative_sum max mean min prod std sum var",
    "utility": "all any",
    "searching": "argmax argmin nonzero searchsorted where",
    "sorting": "argsort sort",
    "set": "unique_all unique_counts unique_inverse unique_values",
    "manipulation": "broadcast_arrays broadcast_to concat expand_dims flip moveaxis "
    "permute_dims repeat reshape roll squeeze stack tile unstack",
    "linear algebra": "matmul matrix_transpose tensordot vecdot",
    "data types": "astype can_cast finfo iinfo isdtype result_type",
    "creation": "arange asarray empty empty_like eye from_dlpack full full_like linspace "
    "meshgrid ones ones_like tril triu zeros zeros_like",
    "indexing": "take",
}


def test_every_standard_function_is_provided_or_refused_by_name():
    xp = oocarr.array_api
    for names in STANDARD.values():
        for name in names.split():
            if name in xp.NOT_PROVIDED:
                with pytest.raises(errors.NotSupportedError, match=name):
                    getattr(xp, name)
            else:
                assert callable(getattr(xp, name)), name


def test_the_docs_give_every_standard_function_its_real_status():
    doc = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "array-api.md").read_text()
    section = doc.split("## Status of every function", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("| ")]
    status = {name.strip().strip("`"): st.strip() for _, name, st, _ in rows[1:]}
    standard = {name for names in STANDARD.values() for name in names.split()}
    assert set(status) == standard
    for name, given_status in status.items():
        assert (given_status == "refused") == (name in oocarr.array_api.NOT_PROVIDED), name


_REDUCTIONS = {
    "sum": (np.sum, {}),
    "prod": (np.prod, {}),
    "max": (np.max, {}),
    "min": (np.min, {}),
    "mean": (np.mean, {}),
    "var": (np.var, {"correction": 1}),
    "argmax": (np.argmax, {}),
}


@st.composite
def _reduction_case(draw):
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    name = draw(st.sampled_from(sorted(_REDUCTIONS)))
    if name == "argmax":
        axis = draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    else:
        axes = draw(st.lists(st.integers(0, len(shape) - 1), unique=True, max_size=len(shape)))
        axis = draw(st.sampled_from([None, tuple(axes)])) if axes else None
    dtype = draw(st.sampled_from(["float32", "int16", "uint8"] if name != "var" else ["float32"]))
    keepdims = draw(st.booleans()) if name != "argmax" or axis is not None else False
    return shape, name, axis, dtype, keepdims


@settings(max_examples=25, deadline=None, derandomize=True)
@given(case=_reduction_case(), seed=st.integers(0, 2**16))
def test_reductions_over_any_shape_axes_and_dtype_match_numpy(case, seed):
    shape, name, axis, dtype, keepdims = case
    a = np.random.default_rng(seed).integers(1, 4, shape).astype(dtype)
    xp = oocarr.array_api
    reference, extra = _REDUCTIONS[name]
    with oocarr.memory_budget(4 * 4 * 24):
        got = np.asarray(
            getattr(xp, name)(oocarr.from_numpy(a), axis=axis, keepdims=keepdims, **extra)
        )
    numpy_extra = {"ddof": 1} if name == "var" else {}
    if name == "var" and (a.size if axis is None else np.prod([shape[i] for i in axis])) < 2:
        return  # NumPy warns and divides by zero or less
    want = reference(a, axis=axis, keepdims=keepdims, **numpy_extra)
    assert got.shape == np.shape(want)
    # compared as floats: a difference of unsigned integers would wrap around
    np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64), rtol=1e-5)


def test_python_scalars_are_weak_as_in_jax():
    u8 = oocarr.from_numpy(np.array([250, 2], "u1"))
    f16 = oocarr.from_numpy(np.array([1.5], "f2"))
    for got, want in [
        (u8 + 10, jnp.asarray(np.array([250, 2], "u1")) + 10),
        (u8 // 3, jnp.asarray(np.array([250, 2], "u1")) // 3),
        (f16 * 2.0, jnp.asarray(np.array([1.5], "f2")) * 2.0),
        (u8 * 2.5, jnp.asarray(np.array([250, 2], "u1")) * 2.5),
    ]:
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert jax.jit(lambda x: x + 10)(u8).dtype == np.uint8


def test_standard_signatures_and_results():
    xp = oocarr.array_api
    i8 = oocarr.from_numpy(np.array([-1, 5, 7], "i1"))
    assert xp.sum(i8, dtype=xp.uint16).dtype == np.uint16
    assert int(xp.sum(i8, dtype=xp.uint16)) == int(np.sum(np.array([-1, 5, 7], "i1"), dtype="u2"))
    u8 = oocarr.from_numpy(np.arange(6, dtype="u1").reshape(2, 3))
    assert xp.vecdot(u8, u8).dtype == np.uint8
    with pytest.raises(errors.ShapeMismatchError, match="does not broadcast"):
        xp.vecdot(u8, oocarr.from_numpy(np.ones((2, 1), "u1")))
    empty = xp.tensordot(oocarr.from_numpy(np.zeros((0, 3), "f4")), np.ones((3, 2), "f4"), axes=1)
    assert empty.shape == (0, 2)
    info = xp.finfo(xp.float32)
    assert isinstance(info.eps, float) and info.eps == np.finfo(np.float32).eps
    assert xp.finfo(xp.complex64).dtype == np.float32
    assert xp.expand_dims(u8, 1).shape == (2, 1, 3)  # axis positional, as 2023.12 has it


def test_comparing_with_none_is_identity_and_0d_results_slice():
    """``x == None`` is ``False`` as for NumPy and JAX arrays (not an elementwise error), so a
    slice whose bounds are the namespace's 0-d results is still recognised (array-api-tests'
    ``test_repeat`` slices with them)."""
    xp = oocarr.array_api
    data = np.arange(6, dtype="f4")
    x = xp.asarray(data)
    assert (x == None) is False  # noqa: E711
    assert (x != None) is True  # noqa: E711
    start = xp.sum(xp.asarray(np.array([1, 1], "int32")))
    np.testing.assert_array_equal(np.asarray(x[start : start + 2]), data[2:4])
    np.testing.assert_array_equal(np.asarray(xp.repeat(x, 2)), np.repeat(data, 2))
