"""The public op functions and the operators of ``DiskArray``, built with :func:`make_op`."""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as jax_core

from oocarr.api import assignment
from oocarr.api.moments import moments
from oocarr.api.storage import from_numpy
from oocarr.errors import InvalidArgumentError
from oocarr.jaxlayer.disk_array import DiskArray, DiskArrayType, add_methods
from oocarr.jaxlayer.fused_sum import fused_sum
from oocarr.jaxlayer.make_op import make_op, materialize, update
from oocarr.ops.elementwise import (
    BINARY,
    BITWISE,
    CASTS,
    COMPARISON,
    MATH,
    MATH_BINARY,
    PREDICATES,
    UNARY,
    Where,
)
from oocarr.ops.matmul import Matmul
from oocarr.ops.reductions import LogSumExp, Max, Mean, Min, Sum, normalize_axes
from oocarr.ops.softmax import Softmax
from oocarr.ops.transpose import Transpose

if TYPE_CHECKING:
    from oocarr.jaxlayer.disk_array import AnyArray, ArrayLike, DTypeLike, Result

__all__ = [
    *UNARY,
    *BINARY,
    *COMPARISON,
    *MATH,
    *MATH_BINARY,
    *PREDICATES,
    *BITWISE,
    "pow",
    "sum",
    "mean",
    "max",
    "min",
    "any",
    "all",
    "astype",
    "logsumexp",
    "softmax",
    "where",
    "matmul",
    "transpose",
    "materialize",
    "update",
    "install_operators",
    "stored",
]


def _elementwise_doc(name: str, arity: int) -> str:
    args = "x" if arity == 1 else "x1, x2"
    example = '[1.0, 4.0], "f4"'
    if name.startswith("bitwise"):
        example = '[1, 4], "i4"'
    elif name.startswith("logical"):
        example = "[True, False]"
    return f"""Elementwise ``{name}`` of stored or in-memory arrays, streamed tile by tile.

    Follows ``jax.numpy.{name}`` (NumPy broadcasting); differentiable.

    Parameters
    ----------
    {args} : DiskArray, array-like or scalar

    Returns
    -------
    DiskArray
        In scratch storage (a 0-d result is a ``jax.Array``).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.array({example}))
    >>> np.asarray(oocarr.{name}({", ".join(["x"] * arity)})).shape
    (2,)
    """


#: Elementwise functions of one argument; the rest take two.
_ONE_ARGUMENT = {*UNARY, *MATH, *PREDICATES, "bitwise_invert"}

#: Python's scalar types, which JAX types weakly: ``uint8_array + 3`` is uint8, not int32.
_PYTHON_SCALARS = (bool, int, float, complex)


def _is_weak(x: Any) -> bool:
    if type(x) in _PYTHON_SCALARS:
        return True
    return isinstance(x, jax.Array | jax_core.Tracer) and getattr(jax.typeof(x), "weak_type", False)


def _dtype_of(x: Any) -> Any:
    """What :func:`jax.numpy.result_type` takes for an operand: a weak one itself, a strong
    one's dtype as JAX computes in it (a stored int64 array's ops compute in int32 without
    ``jax_enable_x64``)."""
    if _is_weak(x):
        return x
    return jax.dtypes.canonicalize_dtype(x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype)


def _cast_weak(x: Any, dtype: np.dtype) -> Any:
    """``x``, a weak operand, cast to ``dtype`` as JAX casts it: a Python int wraps around
    (``uint8_array // -1`` divides by 255); a Python int beyond 64 bits is left for
    ``jnp.asarray`` to refuse."""
    if type(x) not in _PYTHON_SCALARS:
        return x.astype(dtype)
    value = np.asarray(x)
    if value.dtype == object:
        return x
    with np.errstate(over="ignore", invalid="ignore"):
        return value.astype(dtype)


def _weak_operands_cast(fn: Callable[..., Any], keep_int_exponent: bool = False) -> Callable:
    """``fn`` with its weakly typed operands (Python scalars, weak JAX values) cast to the
    dtype JAX promotes the call to, as ``jax.numpy`` casts them before the op.

    The op's block function receives every in-memory operand as a strong array, so without
    the cast a Python int is an int32 array: ``uint32_array // 2`` divided in int32 (values
    from 2**31 on came out wrong) and ``uint8_array // 0`` floored a negative int32
    quotient; under ``jax.jit`` a Python int added to a float array was a constant XLA could
    fold. With ``keep_int_exponent`` a Python int second operand stays one, so ``x ** 2``
    multiplies, as JAX's does (``lax.integer_pow``).
    """

    @functools.wraps(fn)
    def cast_then_call(*args: Any, **params: Any) -> Any:
        weak = [_is_weak(a) for a in args]
        if builtins.all(weak) or not builtins.any(weak):
            return fn(*args, **params)
        dtype = np.dtype(jnp.result_type(*map(_dtype_of, args)))
        args = tuple(
            _cast_weak(a, dtype)
            if w and not (keep_int_exponent and i == 1 and type(a) is int)
            else a
            for i, (a, w) in enumerate(zip(args, weak))
        )
        return fn(*args, **params)

    return cast_then_call


if TYPE_CHECKING:  # the functions the loop below makes, as a type checker sees them

    def negative(x: ArrayLike, /) -> Result: ...
    def exp(x: ArrayLike, /) -> Result: ...
    def log(x: ArrayLike, /) -> Result: ...
    def log1p(x: ArrayLike, /) -> Result: ...
    def tanh(x: ArrayLike, /) -> Result: ...
    def sigmoid(x: ArrayLike, /) -> Result: ...
    def relu(x: ArrayLike, /) -> Result: ...
    def softplus(x: ArrayLike, /) -> Result: ...
    def square(x: ArrayLike, /) -> Result: ...
    def sqrt(x: ArrayLike, /) -> Result: ...
    def abs(x: ArrayLike, /) -> Result: ...
    def add(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def subtract(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def multiply(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def divide(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def maximum(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def minimum(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def power(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def greater(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def greater_equal(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def less(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def less_equal(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def equal(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def not_equal(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def sin(x: ArrayLike, /) -> Result: ...
    def cos(x: ArrayLike, /) -> Result: ...
    def tan(x: ArrayLike, /) -> Result: ...
    def asin(x: ArrayLike, /) -> Result: ...
    def acos(x: ArrayLike, /) -> Result: ...
    def atan(x: ArrayLike, /) -> Result: ...
    def sinh(x: ArrayLike, /) -> Result: ...
    def cosh(x: ArrayLike, /) -> Result: ...
    def asinh(x: ArrayLike, /) -> Result: ...
    def acosh(x: ArrayLike, /) -> Result: ...
    def atanh(x: ArrayLike, /) -> Result: ...
    def expm1(x: ArrayLike, /) -> Result: ...
    def log2(x: ArrayLike, /) -> Result: ...
    def log10(x: ArrayLike, /) -> Result: ...
    def floor(x: ArrayLike, /) -> Result: ...
    def ceil(x: ArrayLike, /) -> Result: ...
    def round(x: ArrayLike, /) -> Result: ...
    def trunc(x: ArrayLike, /) -> Result: ...
    def sign(x: ArrayLike, /) -> Result: ...
    def positive(x: ArrayLike, /) -> Result: ...
    def reciprocal(x: ArrayLike, /) -> Result: ...
    def conj(x: ArrayLike, /) -> Result: ...
    def real(x: ArrayLike, /) -> Result: ...
    def imag(x: ArrayLike, /) -> Result: ...
    def floor_divide(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def remainder(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def atan2(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def hypot(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def copysign(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def nextafter(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def logaddexp(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def isnan(x: ArrayLike, /) -> Result: ...
    def isinf(x: ArrayLike, /) -> Result: ...
    def isfinite(x: ArrayLike, /) -> Result: ...
    def signbit(x: ArrayLike, /) -> Result: ...
    def logical_not(x: ArrayLike, /) -> Result: ...
    def logical_and(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def logical_or(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def logical_xor(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def bitwise_and(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def bitwise_or(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def bitwise_xor(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def bitwise_left_shift(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def bitwise_right_shift(x1: ArrayLike, x2: ArrayLike, /) -> Result: ...
    def bitwise_invert(x: ArrayLike, /) -> Result: ...


_globals = globals()
for _group in (UNARY, BINARY, COMPARISON, MATH, MATH_BINARY, PREDICATES, BITWISE):
    for _name, _cls in _group.items():
        _arity = 1 if _name in _ONE_ARGUMENT else 2
        _fn = make_op(_cls, doc=_elementwise_doc(_name, _arity))
        if _arity == 2:
            _fn = _weak_operands_cast(_fn, keep_int_exponent=_name == "power")
        _globals[_name] = _fn
pow = power  # noqa: A001 (the Array API's name for ``power``)

_casts = {name: make_op(cls) for name, cls in CASTS.items()}


def astype(x: AnyArray, dtype: DTypeLike, /, *, copy: bool = True, device: Any = None) -> AnyArray:
    """``x`` cast to ``dtype`` elementwise, as ``jax.numpy``'s ``astype`` casts (the Array API's
    ``astype``); differentiable between floating types.

    Under ``jax.jit`` the cast fuses into the op that reads it, so float16 or integer storage
    is read as float32 tile by tile, with no stored copy. ``copy=False`` returns ``x`` itself
    when it already has ``dtype``; ``device`` must be ``None``.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.array([1.5, -2.5], "f2"))
    >>> y = oocarr.astype(x, "float32")
    >>> y.dtype, np.asarray(y).tolist(), oocarr.astype(x, "int32").dtype
    (dtype('float32'), [1.5, -2.5], dtype('int32'))
    """
    if device is not None:
        raise InvalidArgumentError(f"astype: device= must be None for a DiskArray, got {device!r}")
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    if name not in _casts:
        raise InvalidArgumentError(
            f"astype: cannot cast to {dtype!r}; the dtypes oocarr casts to are {', '.join(_casts)}"
        )
    if not copy and np.dtype(x.dtype) == np.dtype(dtype):
        return x
    return _casts[name](x)


_sum = make_op(Sum)
_mean = make_op(Mean)


def sum(x: ArrayLike, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Result:  # noqa: A001
    """Sum over ``axis`` (all axes by default), streaming the input tile by tile.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(oocarr.sum(oocarr.from_numpy(np.arange(5.0, dtype="f4"))))
    10.0
    """
    streamed = fused_sum(x, axis, keepdims, mean=False)
    return _sum(x, axis=axis, keepdims=keepdims) if streamed is None else streamed


def mean(x: AnyArray, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Result:
    """Mean over ``axis`` (all axes by default), streaming the input tile by tile.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(oocarr.mean(oocarr.from_numpy(np.arange(5.0, dtype="f4"))))
    2.0
    """
    streamed = fused_sum(x, axis, keepdims, mean=True)
    if streamed is not None:
        return streamed
    shared = moments(x, axis)  # under jit: one pass with var and std of the same x
    if shared is None:
        return _mean(x, axis=axis, keepdims=keepdims)
    mean = shared[0]
    return jnp.expand_dims(mean, normalize_axes(axis, len(x.shape))) if keepdims else mean


_max = make_op(Max)
_min = make_op(Min)
_logsumexp = make_op(LogSumExp)
_where = make_op(Where)


def max(x: ArrayLike, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Result:  # noqa: A001
    """Maximum over ``axis``; the gradient goes to the maximal elements.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(oocarr.max(oocarr.from_numpy(np.array([1.0, 5.0, 2.0], "f4"))))
    5.0
    """
    _check_not_empty("max", x, axis)
    return _max(x, axis=axis, keepdims=keepdims)


def min(x: ArrayLike, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Result:  # noqa: A001
    """Minimum over ``axis``; the gradient goes to the minimal elements.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(oocarr.min(oocarr.from_numpy(np.array([1.0, 5.0, 2.0], "f4"))))
    1.0
    """
    _check_not_empty("min", x, axis)
    return _min(x, axis=axis, keepdims=keepdims)


def _reduces_nothing(x: Any, axis: int | tuple[int, ...] | None) -> bool:
    """Whether a reduction of ``x`` over ``axis`` reduces no elements into each output."""
    axes = normalize_axes(axis, len(x.shape))
    return builtins.any(x.shape[a] == 0 for a in axes)


def _check_not_empty(name: str, x: Any, axis: int | tuple[int, ...] | None) -> None:
    if _reduces_nothing(x, axis):
        raise InvalidArgumentError(
            f"{name} of an array of shape {tuple(x.shape)} over axis {axis!r} reduces no "
            f"elements, and {name} has no identity"
        )


def logsumexp(
    x: ArrayLike, axis: int | tuple[int, ...] | None = None, keepdims: bool = False
) -> Result:
    """``log(sum(exp(x)))`` over ``axis``, computed stably in one streaming pass.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> print(f"{float(oocarr.logsumexp(oocarr.from_numpy(np.zeros(4, 'f4')))):.4f}")
    1.3863
    """
    return _logsumexp(x, axis=axis, keepdims=keepdims)


def any(x: ArrayLike, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Result:  # noqa: A001
    """Whether any element over ``axis`` (all axes by default) is true (non-zero), streamed.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.array([[0, 0, 3], [0, 0, 0]]))
    >>> bool(oocarr.any(x)), np.asarray(oocarr.any(x, axis=1)).tolist()
    (True, [True, False])
    """
    if _reduces_nothing(x, axis):  # a count of nothing: no overflow, and an identity
        return _globals["not_equal"](
            _sum(_globals["not_equal"](x, 0), axis=axis, keepdims=keepdims), 0
        )
    return _max(_globals["not_equal"](x, 0), axis=axis, keepdims=keepdims)


def all(x: ArrayLike, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Result:  # noqa: A001
    """Whether every element over ``axis`` (all axes by default) is true (non-zero), streamed.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.array([[1, 2, 3], [0, 5, 6]]))
    >>> bool(oocarr.all(x)), np.asarray(oocarr.all(x, axis=1)).tolist()
    (False, [True, False])
    """
    if _reduces_nothing(x, axis):
        count = _sum(_globals["equal"](x, 0), axis=axis, keepdims=keepdims)
        return _globals["equal"](count, 0)
    return _min(_globals["not_equal"](x, 0), axis=axis, keepdims=keepdims)


_softmax = make_op(Softmax)


def softmax(x: ArrayLike, axis: int = -1) -> Result:
    """``exp(x) / sum(exp(x), axis)``, like ``jax.nn.softmax``, streamed a panel of rows at a time.

    Rows longer than a tile are handled in two passes (statistics, then
    outputs); the gradient is exact.

    Parameters
    ----------
    x : DiskArray or array-like
        At least 1-d.
    axis : int, default -1
        The axis the probabilities sum to one over.

    Returns
    -------
    DiskArray
        In scratch storage, the shape of ``x``.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.log(np.array([[1.0, 3.0], [2.0, 2.0]], "f4")))
    >>> np.asarray(oocarr.softmax(x)).round(4)
    array([[0.25, 0.75],
           [0.5 , 0.5 ]], dtype=float32)
    """
    return _softmax(x, axis=axis)


def where(condition: ArrayLike, x: ArrayLike, y: ArrayLike) -> Result:
    """Elements of ``x`` where ``condition`` holds, else of ``y`` (NumPy broadcasting).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.array([-1.0, 2.0], "f4"))
    >>> np.asarray(oocarr.where(x > 0, x, 0.0))
    array([0., 2.], dtype=float32)
    """
    return _where(condition, x, y)


matmul = make_op(
    Matmul,
    doc="""Matrix product of 2-d arrays, stored or in memory, tile by tile.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> a = oocarr.from_numpy(np.eye(3, dtype="f4"))
    >>> np.asarray(oocarr.matmul(a, np.ones((3, 2), "f4")))[0]
    array([1., 1.], dtype=float32)
    """,
)


_transpose = make_op(Transpose)


def transpose(x: ArrayLike, axes: tuple[int, ...] | None = None) -> Result:
    """Permute the axes (reverse them by default), tile by tile.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> oocarr.transpose(oocarr.from_numpy(np.zeros((2, 3, 4))), (1, 0, 2)).shape
    (3, 2, 4)
    """
    return _transpose(x, axes=None if axes is None else tuple(axes))


def _swap(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    return lambda x, y: fn(y, x)


def _divmod(x: Any, y: Any) -> tuple[Any, Any]:
    """``divmod(x, y)``: ``(x // y, x % y)``, elementwise."""
    return _globals["floor_divide"](x, y), _globals["remainder"](x, y)


def _truth(self: DiskArray) -> bool:
    """``bool(x)`` of a one-element array (read from storage); ambiguous for any other."""
    if self.size != 1:
        raise InvalidArgumentError(
            f"the truth value of {self!r} with {self.size} elements is ambiguous: use "
            f"oocarr.any(...) or oocarr.all(...), or read it with oocarr.to_numpy first"
        )
    return bool(np.asarray(self).reshape(()))


def _scalar(self: DiskArray, convert: type) -> Any:
    """``int(x)``, ``float(x)``, ``complex(x)`` of a one-element array (read from storage)."""
    if self.size != 1:
        raise InvalidArgumentError(
            f"only a one-element array converts to a Python {convert.__name__}; {self!r} has "
            f"{self.size} elements"
        )
    return convert(np.asarray(self).reshape(()).item())


def _index(self: DiskArray) -> int:
    """``operator.index(x)`` of a one-element integer array, as NumPy's."""
    if np.dtype(self.dtype).kind not in "iu":
        raise TypeError(f"only integer arrays can be used as an index, got {self.dtype}")
    return _scalar(self, int)


def _setitem(self: DiskArray, key: Any, value: Any) -> None:
    """``x[key] = value`` outside a JAX trace, as NumPy assigns (basic keys, one boolean mask):
    into ``x``'s own scratch storage for arrays oocarr made, in place for storage the user
    opened for writing; see :func:`oocarr.api.assignment.setitem`."""
    assignment.setitem(self, key, value)


_OPERATORS = {
    "add": _globals["add"],
    "radd": _swap(_globals["add"]),
    "sub": _globals["subtract"],
    "rsub": _swap(_globals["subtract"]),
    "mul": _globals["multiply"],
    "rmul": _swap(_globals["multiply"]),
    "truediv": _globals["divide"],
    "rtruediv": _swap(_globals["divide"]),
    "matmul": matmul,
    "rmatmul": _swap(matmul),
    "pow": _globals["power"],
    "neg": _globals["negative"],
    "gt": _globals["greater"],
    "ge": _globals["greater_equal"],
    "lt": _globals["less"],
    "le": _globals["less_equal"],
    "eq": _globals["equal"],
    "ne": _globals["not_equal"],
    "rpow": _swap(_globals["power"]),
    "floordiv": _globals["floor_divide"],
    "rfloordiv": _swap(_globals["floor_divide"]),
    "mod": _globals["remainder"],
    "rmod": _swap(_globals["remainder"]),
    "divmod": _divmod,
    "rdivmod": _swap(_divmod),
    "and": _globals["bitwise_and"],
    "rand": _swap(_globals["bitwise_and"]),
    "or": _globals["bitwise_or"],
    "ror": _swap(_globals["bitwise_or"]),
    "xor": _globals["bitwise_xor"],
    "rxor": _swap(_globals["bitwise_xor"]),
    "lshift": _globals["bitwise_left_shift"],
    "rlshift": _swap(_globals["bitwise_left_shift"]),
    "rshift": _globals["bitwise_right_shift"],
    "rrshift": _swap(_globals["bitwise_right_shift"]),
    "abs": _globals["abs"],
    "pos": _globals["positive"],
    "invert": _globals["bitwise_invert"],
}


def stored(value: Any) -> Any:
    """``value`` with each concrete in-memory array in it (a 0-d reduction, a small factor such
    as ``svd``'s ``S`` and ``Vh``, a result computed from in-memory inputs) written to scratch
    storage as a ``DiskArray``, going through tuples (named too) and lists.

    What the namespace's functions (:mod:`oocarr.array_api`) and ``DiskArray``'s operators
    return: code written against the standard finds its namespace from the arrays it holds
    (``array_api_compat.array_namespace(*arrays)``, as scikit-learn and SciPy do), and refuses
    a mix of ``DiskArray`` and ``jax.Array``.  Traced values (under ``jax.jit`` or
    ``jax.grad``) are returned as they are: a stored copy would add a write to the compiled
    function, and a loss must stay a JAX scalar to be differentiated.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> type(stored((jnp.float32(2.0), 3))[0]).__name__, stored((jnp.float32(2.0), 3))[1]
    ('DiskArray', 3)
    """
    if isinstance(value, jax_core.Tracer):
        return value
    if isinstance(value, jax.Array | np.ndarray | np.generic):
        return from_numpy(np.asarray(value))
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*map(stored, value))
    if isinstance(value, tuple | list):
        return type(value)(map(stored, value))
    return value


def _operator(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``DiskArray``'s operator ``name``: ``fn``'s result, stored; ``x == None`` and
    ``x != None`` fall back to identity, as for NumPy and JAX arrays."""
    if name in ("eq", "ne"):

        def compare(self: Any, other: Any) -> Any:
            return NotImplemented if other is None else stored(fn(self, other))

        return compare
    return lambda self, *a: stored(fn(self, *a))


def install_operators() -> None:
    """Give ``DiskArray`` (and its traced type) its operators and methods: every arithmetic,
    comparison (elementwise ``==`` and ``!=`` included) and bitwise operator with its
    reflected form, ``abs``, ``divmod``, ``.sum()``, ``.mean()``, ``.max()``, ``.min()``,
    ``.any()``, ``.all()``, ``.astype()``, ``.T`` and ``.update_()``
    (:func:`oocarr.api.statistics.install_methods` adds ``.var()`` and ``.std()``).

    :mod:`oocarr` calls this once when it is imported; calling it again changes nothing.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> install_operators()
    >>> np.asarray(oocarr.from_numpy(np.ones(2, "f4")) + 1.0)
    array([2., 2.], dtype=float32)
    """
    for name, fn in _OPERATORS.items():
        setattr(DiskArray, f"__{name}__", _operator(name, fn))
        setattr(DiskArrayType, f"_{name}", staticmethod(fn))
    methods: dict[str, Callable[..., Any]] = {
        "sum": sum,
        "mean": mean,
        "max": max,
        "min": min,
        "any": any,
        "all": all,
        "astype": astype,
        "transpose": transpose,
        "update_": update,
    }
    add_methods(methods)
    # set by name: DiskArray declares them for type checkers only (under TYPE_CHECKING)
    protocol: dict[str, Any] = {
        "__bool__": _truth,
        "__setitem__": _setitem,
        "__int__": lambda self: _scalar(self, int),
        "__float__": lambda self: _scalar(self, float),
        "__complex__": lambda self: _scalar(self, complex),
        "__index__": _index,
        # defining __eq__ would otherwise leave the handle unhashable; handles are identities
        "__hash__": object.__hash__,
        "T": property(transpose),
    }
    for name, value in protocol.items():
        setattr(DiskArray, name, value)
    traced = {
        "_setitem": staticmethod(_setitem),  # a traced one: immutable, says how
        "T": jax_core.aval_property(transpose),
    }
    for name, value in traced.items():
        setattr(DiskArrayType, name, value)
