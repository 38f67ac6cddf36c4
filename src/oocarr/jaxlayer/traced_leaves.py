"""The values behind the leaves of the fused arrays of the trace being built.

A fused array's type holds its expression and its leaves' names (a stored array's locator, a
slot's token and index), not the values that were given for them: under ``jax.jit`` those are
tracers.  A reduction that runs the whole expression itself (:mod:`.fused_sum`) binds them as
its own inputs, so that JAX differentiates with respect to them and orders its callback after
whatever wrote them.  :func:`remember` keeps them, by name, while the trace that made them is
being built; an entry of a trace that has finished (its frame holds no more equations) is
dropped at the next call.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any

from jax._src import core as jax_core
from jax._src.interpreters import partial_eval as pe

__all__ = ["keep_result", "recall", "remember", "slot_value", "staged", "stored_value"]

#: ``name -> (frame, value)``: a slot as ``(token, index)``, a stored array by locator JSON.
_HELD: dict[Any, tuple[Any, Any]] = {}
_LOCK = threading.Lock()


def _frame() -> Any:
    """The frame of the innermost trace that stages a program (``None``: nothing is staged)."""
    trace = jax_core.trace_ctx.trace
    while trace is not None:
        if isinstance(trace, pe.DynamicJaxprTrace):
            return trace.frame
        trace = getattr(trace, "parent_trace", None)
    return None


def _building(frame: Any) -> bool:
    # a finished trace's frame has handed its equations over to its jaxpr
    return bool(getattr(frame, "tracing_eqns", None))


def remember(token: str, slots: Sequence[Any], stored: Sequence[tuple[str, Any]]) -> None:
    """Keep the values of the slots ``token`` names (in order) and of the stored arrays
    (``(locator JSON, value)``), for as long as the current trace is being built.

    Examples
    --------
    >>> remember("t", [1.0], [])  # outside a staged trace: nothing is kept
    >>> slot_value("t", 0) is None
    True
    """
    frame = _frame()
    if frame is None:
        return
    with _LOCK:
        for name in [n for n, (f, _) in _HELD.items() if not _building(f)]:
            del _HELD[name]
        for index, value in enumerate(slots):
            _HELD[(token, index)] = (frame, value)
        for locator_json, value in stored:
            _HELD[locator_json] = (frame, value)


def _get(name: Any) -> Any:
    with _LOCK:
        held = _HELD.get(name)
    if held is None or not _building(held[0]):
        return None
    return held[1]


def slot_value(token: str, index: int) -> Any:
    """The value given for slot ``index`` of ``token`` in the trace being built, or ``None``."""
    return _get((token, index))


def stored_value(locator_json: str) -> Any:
    """The stored array (a ``DiskArray`` or its tracer) given at ``locator_json`` in the trace
    being built, or ``None``."""
    return _get(locator_json)


def staged() -> bool:
    """Whether the current trace stages a program (``jit``, ``lax`` control flow), itself or
    below a ``grad``.

    Examples
    --------
    >>> staged()
    False
    """
    return _frame() is not None


def keep_result(key: Any, of: Any, value: Any) -> None:
    """Keep ``value``, computed from ``of`` (a traced value), under ``key`` while the current
    trace is being built, so that a later call on the same ``of`` reuses it
    (:func:`recall`)."""
    frame = _frame()
    if frame is None:
        return
    with _LOCK:
        _HELD[("result", key)] = (frame, (weakref.ref(of), value))


def recall(key: Any, of: Any) -> Any:
    """The value :func:`keep_result` kept under ``key`` for this very ``of`` in the trace
    being built, or ``None``."""
    held = _get(("result", key))
    if held is None or held[0]() is not of:
        return None
    return held[1]
