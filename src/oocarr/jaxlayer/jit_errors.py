"""Errors raised in oocarr's callbacks come out of a jitted call as themselves.

XLA runs a staged ``io_callback`` inside the compiled program; when the
callback raises, XLA reports a ``JaxRuntimeError`` ("CpuCallback error")
whose message is the callback's formatted traceback, with nothing chained,
and JAX logs that traceback to stderr.  So a ``BudgetTooSmallError``, a
corrupt chunk's ``InvalidStoreError`` or a Ctrl-C inside ``jax.jit(f)(x)``
would reach the caller as an untyped runtime error.

:func:`guarded` wraps a callback: an exception it raises is kept here under
a token and replaced by a short :class:`DeferredError` naming that token.
:func:`install` wraps the one Python function through which JAX runs every
compiled program with host callbacks (``pxla.ExecuteReplicated.__call__``:
programs with callbacks never take JAX's C++ fast path), so the
``JaxRuntimeError`` it raises is replaced by the kept exception, with its
own traceback, cause and context (the runtime error, whose message only
repeats that traceback, is dropped).  A
``KeyboardInterrupt`` that hit any host callback comes back as
``KeyboardInterrupt``.  A logging filter drops JAX's "jax.io_callback
failed" record for deferred errors; other callbacks' failures are still
logged.  ``OOCARR_KEEP_JAX_ERRORS=1`` leaves JAX alone.
"""

from __future__ import annotations

import collections
import functools
import itertools
import logging
import os
import re
import threading
import warnings
from collections.abc import Callable
from typing import Any

import jax

__all__ = ["DeferredError", "guarded", "claim", "install", "installed"]

_TOKEN = "oocarr-deferred-error-"
_TOKEN_RE = re.compile(re.escape(_TOKEN) + r"(\d+)")
_INTERRUPT_RE = re.compile(r"^KeyboardInterrupt\b", re.MULTILINE)
# Errors whose runtime error never reached a translated call (a user catching it inside
# another callback) are dropped oldest first, so their tracebacks do not pile up.
_MAX_PENDING = 32
_pending: collections.OrderedDict[int, BaseException] = collections.OrderedDict()
_lock = threading.Lock()
_counter = itertools.count(1)
_installed = False


class DeferredError(Exception):
    """Stands in, inside XLA, for an exception an oocarr callback raised.

    Examples
    --------
    >>> str(DeferredError(7, ValueError("bad")))
    'ValueError: bad [oocarr-deferred-error-7]'
    """

    def __init__(self, token: int, error: BaseException) -> None:
        super().__init__(f"{type(error).__name__}: {error} [{_TOKEN}{token}]")
        self.token = token


def installed() -> bool:
    """Whether errors of staged callbacks are translated back (:func:`install` succeeded).

    Examples
    --------
    >>> installed() in (True, False)
    True
    """
    return _installed


def _keep(error: BaseException) -> DeferredError:
    token = next(_counter)
    with _lock:
        _pending[token] = error
        while len(_pending) > _MAX_PENDING:
            _pending.popitem(last=False)
    return DeferredError(token, error)


def guarded(callback: Callable[..., Any]) -> Callable[..., Any]:
    """``callback``, its exceptions (``KeyboardInterrupt`` too) kept for :func:`claim`.

    Without :func:`install` (or when it failed) ``callback`` is returned as is.

    Examples
    --------
    >>> def bad():
    ...     raise ValueError("bad")
    >>> try:
    ...     guarded(bad)()
    ... except Exception as err:
    ...     type(claim(err) if installed() else err).__name__
    'ValueError'
    """
    if not _installed:
        return callback

    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return callback(*args, **kwargs)
        except BaseException as error:
            raise _keep(error) from None

    return run


def claim(error: BaseException) -> BaseException | None:
    """The exception a kept callback error (or a Ctrl-C) stands for, or None.

    ``error`` is a ``JaxRuntimeError`` (or a :class:`DeferredError`) whose
    message names the tokens of the kept errors it carries; they are removed
    from the store and the first is returned.  A runtime error whose
    callback was interrupted gives a fresh ``KeyboardInterrupt``.

    Examples
    --------
    >>> claim(RuntimeError("unrelated")) is None
    True
    """
    text = str(error)
    found = None
    with _lock:
        for token in _TOKEN_RE.findall(text):
            kept = _pending.pop(int(token), None)
            found = kept if found is None else found
    if found is None and _INTERRUPT_RE.search(text):
        return KeyboardInterrupt()
    return found


def _translating(execute: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(execute)
    def call(self: Any, *args: Any) -> Any:
        try:
            return execute(self, *args)
        except jax.errors.JaxRuntimeError as err:
            original = claim(err)
            if original is None:
                raise
        # Raised outside the handler, so the original keeps its own cause and context.
        raise original

    call.__oocarr_translating__ = True  # type: ignore[attr-defined]
    return call


class _DropDeferred(logging.Filter):
    """Drops JAX's log record of a callback failure that oocarr re-raises at the call site."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, DeferredError)


def _target() -> tuple[Any, Any] | None:
    """The class whose ``__call__`` runs compiled programs, and that ``__call__``."""
    try:
        from jax._src.interpreters import pxla
    except ImportError:
        return None
    cls = getattr(pxla, "ExecuteReplicated", None)
    execute = vars(cls).get("__call__") if isinstance(cls, type) else None
    if not callable(execute) or not hasattr(jax.errors, "JaxRuntimeError"):
        return None
    return cls, execute


def install() -> bool:
    """Translate errors of oocarr's staged callbacks back to themselves at the jitted call.

    Idempotent.  Returns True when installed; False when opted out
    (``OOCARR_KEEP_JAX_ERRORS=1``) or when this JAX lacks the internal
    function wrapped (with a ``RuntimeWarning``: errors then stay
    ``JaxRuntimeError``s, as JAX reports them).

    Examples
    --------
    >>> install() in (True, False)
    True
    """
    global _installed
    if _installed:
        return True
    if os.environ.get("OOCARR_KEEP_JAX_ERRORS"):
        return False
    target = _target()
    if target is None or jax.__version_info__[:2] != (0, 10):
        warnings.warn(
            f"oocarr cannot translate errors raised inside jitted oocarr ops with JAX "
            f"{jax.__version__} (it supports jax>=0.10,<0.11): they reach you as "
            "JaxRuntimeError, with the original error's traceback in the message",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    cls, execute = target
    if not getattr(execute, "__oocarr_translating__", False):
        cls.__call__ = _translating(execute)
    logging.getLogger("jax._src.callback").addFilter(_DropDeferred())
    _installed = True
    return True
