"""A ``jax.numpy`` function given a ``DiskArray`` names the oocarr function to use instead.

``jnp.sum(x)`` on a ``DiskArray``, eagerly or under ``jax.jit``, fails in ``jax.numpy``'s
argument check with "sum requires ndarray or scalar arguments, got DynamicJaxprTracer": true,
but no help.  :func:`install` wraps that check (``jax._src.numpy.util.check_arraylike``,
through which every ``jax.numpy`` function that takes arrays validates them; ``jax.numpy``'s
modules hold it by name, so each module's reference is replaced): when the check fails on a
``DiskArray`` or a traced one, :class:`~oocarr.errors.JaxNumpyArgumentError` (a ``TypeError``)
says which oocarr function streams the same computation, or how to load the array.  Any other
failure of the check is JAX's own.  ``OOCARR_KEEP_JNP_CHECKS=1`` leaves JAX alone.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from jax._src import core as jax_core

from oocarr.errors import JaxNumpyArgumentError

from .disk_array import DiskArray, DiskArrayType

__all__ = ["install", "message"]

_installed = False
#: The names of oocarr's functions, set by :func:`install`.
_ours: frozenset[str] = frozenset()


def _is_disk(value: Any) -> bool:
    if isinstance(value, DiskArray):
        return True
    return isinstance(value, jax_core.Tracer) and isinstance(value.aval, DiskArrayType)


def message(fun_name: str, position: int) -> str:
    """What to tell a user who gave ``jax.numpy.<fun_name>`` a ``DiskArray``.

    Examples
    --------
    >>> message("sum", 0).split(":")[0]
    'jax.numpy.sum cannot read a DiskArray (argument 0)'
    """
    name = fun_name.rsplit(".", 1)[-1]
    if name in _ours:
        use = f"use oocarr.{name}(...), which streams it tile by tile"
    else:
        use = f"oocarr has no streamed {name}; see docs/array-api.md for what it has"
    return (
        f"jax.numpy.{name} cannot read a DiskArray (argument {position}): {use}, or load it "
        "into memory first with oocarr.materialize(x) (under jit) or oocarr.to_numpy(x)"
    )


def _checking(check: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(check)
    def check_arraylike(fun_name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return check(fun_name, *args, **kwargs)
        except TypeError:
            at = next((i for i, a in enumerate(args) if _is_disk(a)), None)
            if at is None:
                raise
            raise JaxNumpyArgumentError(message(fun_name, at)) from None

    check_arraylike.__oocarr_wrapped__ = check  # type: ignore[attr-defined]
    return check_arraylike


def install(names: Iterable[str]) -> bool:
    """Make ``jax.numpy``'s argument check name the oocarr function among ``names`` when it
    is given a ``DiskArray``.  Idempotent (later calls update the names); False when opted
    out with ``OOCARR_KEEP_JNP_CHECKS=1`` or when this JAX has no such check.

    Examples
    --------
    >>> install(["sum"]) in (True, False)
    True
    """
    global _installed, _ours
    _ours = frozenset(_ours | set(names))
    if _installed:
        return True
    if os.environ.get("OOCARR_KEEP_JNP_CHECKS"):
        return False
    try:
        from jax._src.numpy import util
    except ImportError:
        return False
    original = getattr(util, "check_arraylike", None)
    if original is None:
        return False
    wrapped = _checking(original)
    for module in list(sys.modules.values()):
        if (getattr(module, "__name__", "") or "").startswith("jax._src") and getattr(
            module, "check_arraylike", None
        ) is original:
            module.check_arraylike = wrapped
    _installed = True
    return True
