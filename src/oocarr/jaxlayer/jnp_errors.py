"""A ``jax.numpy`` function given a ``DiskArray`` names the oocarr function to use instead.

``jnp.sum(x)`` on a ``DiskArray``, eagerly or under ``jax.jit``, would fail in
``jax.numpy``'s argument check with "sum requires ndarray or scalar arguments,
got DynamicJaxprTracer": true, but no help.  ``jax.numpy`` converts an
argument that is not an array through its ``__jax_array__`` protocol, which a
tracer asks of its type: ``DiskArrayType`` answers with
:func:`refuse_conversion` (a ``DiskArray`` given to ``jax.numpy`` outside a
trace is traced as one), which raises
:class:`~oocarr.errors.JaxNumpyArgumentError` (a ``TypeError``) saying which
oocarr function streams the same computation, or how to load the array.
Nothing of JAX is wrapped or replaced; a ``jax.numpy`` function that never
converts its arguments fails as JAX makes it fail.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from types import FrameType
from typing import Any

from jax._src import core as jax_core

from oocarr.errors import JaxNumpyArgumentError

from .disk_array import DiskArrayType

__all__ = ["install", "message", "operator_message", "refuse_conversion"]

#: The names of oocarr's functions, set by :func:`install`.
_ours: frozenset[str] = frozenset()
_NUMPY = "jax._src.numpy."
_OPERATOR_MODULE = "jax._src.numpy.array_methods"
#: Modules of jax.numpy whose functions convert other functions' arguments.
_HELPERS = frozenset({"jax._src.numpy.util", "jax._src.numpy.array_methods"})


def message(fun_name: str) -> str:
    """What to tell a user who gave ``jax.numpy.<fun_name>`` a ``DiskArray``.

    Examples
    --------
    >>> install(["sum"])
    >>> message("sum").split(":")[0]
    'jax.numpy.sum cannot read a DiskArray'
    """
    name = fun_name.rsplit(".", 1)[-1]
    if name in _ours:
        use = f"use oocarr.{name}(...), which streams it tile by tile"
    else:
        use = f"oocarr has no streamed {name}; see docs/array-api.md for what it has"
    return (
        f"jax.numpy.{name} cannot read a DiskArray: {use}, or load it into memory first "
        "with oocarr.materialize(x) (under jit) or oocarr.to_numpy(x)"
    )


#: JAX's binary operators (``jax._src.numpy.array_methods._operator_<name>``): the symbol and
#: the oocarr function of each.
_OPERATORS = {
    "add": ("+", "add"),
    "sub": ("-", "subtract"),
    "mul": ("*", "multiply"),
    "truediv": ("/", "divide"),
    "floordiv": ("//", "floor_divide"),
    "mod": ("%", "remainder"),
    "pow": ("**", "pow"),
    "matmul": ("@", "matmul"),
    "gt": (">", "greater"),
    "ge": (">=", "greater_equal"),
    "lt": ("<", "less"),
    "le": ("<=", "less_equal"),
    "eq": ("==", "equal"),
    "ne": ("!=", "not_equal"),
    "and": ("&", "bitwise_and"),
    "or": ("|", "bitwise_or"),
    "xor": ("^", "bitwise_xor"),
    "lshift": ("<<", "bitwise_left_shift"),
    "rshift": (">>", "bitwise_right_shift"),
}


def operator_message(name: str) -> str:
    """What to tell a user whose traced JAX array met a traced ``DiskArray`` as the right
    operand of JAX's operator ``name`` (``"mul"``).

    Examples
    --------
    >>> operator_message("mul").split(";")[0]
    'a * x under a JAX trace, with a a JAX array and x a DiskArray, cannot stream x'
    """
    symbol, function = _OPERATORS.get(name, (name, name))
    swap = f"x {symbol} a, or " if name in ("add", "mul", "eq", "ne", "and", "or", "xor") else ""
    return (
        f"a {symbol} x under a JAX trace, with a a JAX array and x a DiskArray, cannot stream "
        f"x; JAX's operator does not hand a DiskArray to oocarr, so write {swap}"
        f"oocarr.{function}(a, x)"
    )


def _converting() -> tuple[str, str | None]:
    """What in JAX is converting an argument now, from one walk up the stack:
    ``("operator", name)`` for JAX's binary operator ``_operator_<name>`` (its right operand),
    else ``("function", name)``: the ``fun_name`` that ``jax.numpy``'s argument helpers are
    given, or the outermost public function of ``jax.numpy``'s modules (None when none)."""
    frame: FrameType | None = sys._getframe(2)
    outermost = None
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("jax."):
            code = frame.f_code.co_name
            if outermost is None and module == _OPERATOR_MODULE and code.startswith("_operator_"):
                return "operator", code[len("_operator_") :]
            name = frame.f_locals.get("fun_name")
            if isinstance(name, str):
                return "function", name
            if module.startswith(_NUMPY) and module not in _HELPERS and not code.startswith("_"):
                outermost = code
        frame = frame.f_back
    return "function", outermost


def refuse_conversion(x: Any) -> Any:
    """``__jax_array__`` of the traced type of a ``DiskArray``: refuse to become a
    ``jax.Array`` silently, naming the oocarr function to use.

    Raises
    ------
    JaxNumpyArgumentError
        Always.

    Examples
    --------
    >>> import jax.numpy as jnp, numpy as np, oocarr
    >>> try:
    ...     jnp.sum(oocarr.from_numpy(np.ones(3)))
    ... except oocarr.errors.JaxNumpyArgumentError as err:
    ...     print(str(err).split(":")[0])
    jax.numpy.sum cannot read a DiskArray
    """
    kind, name = _converting()
    if kind == "operator" and name is not None:  # an operator always has its name
        raise JaxNumpyArgumentError(operator_message(name))
    if name is None:
        raise JaxNumpyArgumentError(
            "jax.numpy cannot read a DiskArray: use the oocarr function of the same name, "
            "which streams it tile by tile, or load it into memory first with "
            "oocarr.materialize(x) (under jit) or oocarr.to_numpy(x)"
        )
    raise JaxNumpyArgumentError(message(name))


def install(names: Iterable[str]) -> None:
    """Give ``DiskArrayType`` :func:`refuse_conversion` as ``__jax_array__``, naming oocarr's
    functions among ``names``.  Idempotent (later calls add names).

    The concrete ``DiskArray`` has no ``__jax_array__``: ``jnp.ones(3) + x`` then defers to
    ``x.__radd__`` (oocarr's add), and ``jnp.asarray(x)`` reads it through ``__array__``.

    Examples
    --------
    >>> install(["sum"])
    """
    global _ours
    _ours = frozenset(_ours | set(names))
    DiskArrayType.__jax_array__ = jax_core.aval_method(refuse_conversion)  # type: ignore[attr-defined]
