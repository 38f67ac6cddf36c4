"""Elementwise ops with NumPy broadcasting: each output tile reads the matching input tiles."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.engine.op import BlockParallelOp, Plan, Region, broadcast_region

__all__ = [
    "broadcast_region",
    "Elementwise",
    "UNARY",
    "BINARY",
    "COMPARISON",
    "MATH",
    "MATH_BINARY",
    "PREDICATES",
    "BITWISE",
    "CASTS",
    "Where",
    "Identity",
]


class Elementwise(BlockParallelOp):
    """Base of the elementwise ops: output tile ``i`` needs tile ``i`` of each input."""

    residency = 4
    pad_mode = "edge"
    #: Under ``jax.jit`` a call on stored arrays is a fused array (see
    #: :mod:`oocarr.engine.fused`): ``fn`` is evaluated on the consumer's tiles.
    fusable = True
    fn = staticmethod(jnp.add)

    def compute_output_shape(self) -> tuple[int, ...]:
        return tuple(np.broadcast_shapes(*self.in_shapes))

    def index_map(self, out_region: Region, plan: Plan) -> Iterator[tuple[Region, ...]]:
        yield tuple(broadcast_region(out_region, s) for s in self.in_shapes)

    def forward_block(self, *blocks: jax.Array) -> jax.Array:
        return type(self).fn(*blocks)


def _op(name: str, fn: Callable[..., Any]) -> type[Elementwise]:
    return type(
        name.title().replace("_", ""), (Elementwise,), {"name": name, "fn": staticmethod(fn)}
    )


def _relu(x: jax.Array) -> jax.Array:
    return jnp.maximum(x, 0)


UNARY = {
    name: _op(name, fn)
    for name, fn in {
        "negative": jnp.negative,
        "exp": jnp.exp,
        "log": jnp.log,
        "log1p": jnp.log1p,
        "tanh": jnp.tanh,
        "sigmoid": jax.nn.sigmoid,
        "relu": _relu,
        "softplus": jax.nn.softplus,
        "square": jnp.square,
        "sqrt": jnp.sqrt,
        "abs": jnp.abs,
    }.items()
}

_BINARY_FNS: dict[str, Callable[..., Any]] = {
    "add": jnp.add,
    "subtract": jnp.subtract,
    "multiply": jnp.multiply,
    "divide": jnp.divide,
    "maximum": jnp.maximum,
    "minimum": jnp.minimum,
    "power": jnp.power,
}
BINARY = {name: _op(name, fn) for name, fn in _BINARY_FNS.items()}

COMPARISON = {
    name: _op(name, getattr(jnp, name))
    for name in ("greater", "greater_equal", "less", "less_equal", "equal", "not_equal")
}

#: The Array API standard's other elementwise functions on real numbers, differentiable
#: where the math is (``floor``, ``sign`` ... have zero gradients, as in JAX).
MATH = {
    name: _op(name, getattr(jnp, name))
    for name in (
        "sin",
        "cos",
        "tan",
        "asin",
        "acos",
        "atan",
        "sinh",
        "cosh",
        "asinh",
        "acosh",
        "atanh",
        "expm1",
        "log2",
        "log10",
        "floor",
        "ceil",
        "round",
        "trunc",
        "sign",
        "positive",
        "reciprocal",
        "conj",
        "real",
        "imag",
    )
}


def _sign(x: jax.Array) -> jax.Array:
    """``jnp.sign`` with ``sign(-0.0) == +0.0``, as NumPy and the Array API give (XLA keeps
    the zero's sign)."""
    return jnp.where(x == 0, jnp.zeros((), x.dtype), jnp.sign(x))


MATH["sign"] = _op("sign", _sign)

MATH_BINARY = {
    name: _op(name, getattr(jnp, name))
    for name in (
        "floor_divide",
        "remainder",
        "atan2",
        "hypot",
        "copysign",
        "nextafter",
        "logaddexp",
    )
}


def _floor_divide(x1: jax.Array, x2: jax.Array) -> jax.Array:
    """``jnp.floor_divide``, with a zero quotient of floating operands signed as ``x1 / x2``
    is, as NumPy and the Array API give (``-0.0 // 3.0`` is ``-0.0``, ``0.0 // -3.0`` is
    ``-0.0``); ``jnp.floor_divide``'s zeros have the sign of its ``(x1 - x1 % x2) / x2``."""
    out = jnp.floor_divide(x1, x2)
    if not jnp.issubdtype(out.dtype, jnp.floating):
        return out
    zero = jnp.copysign(jnp.zeros((), out.dtype), jnp.true_divide(x1, x2).astype(out.dtype))
    return jnp.where(out == 0, zero, out)


def _remainder(x1: jax.Array, x2: jax.Array) -> jax.Array:
    """``jnp.remainder``, with a zero remainder of floating operands signed as ``x2``, as
    Python's ``%``, NumPy and the Array API give (``-0.0 % 3.0`` is ``0.0``, ``6.0 % -3.0`` is
    ``-0.0``); ``jnp.remainder`` gives zeros the sign of ``x1``."""
    out = jnp.remainder(x1, x2)
    if not jnp.issubdtype(out.dtype, jnp.floating):
        return out
    zero = jnp.copysign(jnp.zeros((), out.dtype), jnp.asarray(x2).astype(out.dtype))
    return jnp.where(out == 0, zero, out)


MATH_BINARY["floor_divide"] = _op("floor_divide", _floor_divide)
MATH_BINARY["remainder"] = _op("remainder", _remainder)

#: Functions with boolean results: no gradient flows through them.
PREDICATES = {
    name: _op(name, getattr(jnp, name))
    for name in ("isnan", "isinf", "isfinite", "signbit", "logical_not")
}

#: Logical functions of booleans and bitwise functions of integers (and booleans).
BITWISE = {
    name: _op(name, getattr(jnp, name))
    for name in (
        "logical_and",
        "logical_or",
        "logical_xor",
        "bitwise_and",
        "bitwise_or",
        "bitwise_xor",
        "bitwise_left_shift",
        "bitwise_right_shift",
        "bitwise_invert",
    )
}

#: The dtypes ``astype`` casts to, one op class each, so that a cast fuses under ``jax.jit``
#: like any elementwise op (a fused expression names its ops' classes).
CAST_DTYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
)


def _cast(dtype_name: str) -> type[Elementwise]:
    dtype = jnp.dtype(dtype_name)

    def cast(x: jax.Array) -> jax.Array:
        return x.astype(dtype)

    name = "As" + dtype_name.title().replace("_", "")
    return type(name, (Elementwise,), {"name": f"astype_{dtype_name}", "fn": staticmethod(cast)})


CASTS = {name: _cast(name) for name in CAST_DTYPES}

Where = _op("where", jnp.where)
Identity = _op("identity", lambda x: x)
Add = BINARY["add"]
# Each op class is a module attribute under its own name, so ops (and the engine's tile
# tasks holding them) pickle by reference.
globals().update(
    {
        cls.__name__: cls
        for group in (UNARY, BINARY, COMPARISON, MATH, MATH_BINARY, PREDICATES, BITWISE, CASTS)
        for cls in group.values()
    }
)
