"""Errors raised in oocarr's callbacks under ``jax.jit``: kept, and given back as themselves.

XLA runs a staged ``io_callback`` inside the compiled program; when the
callback raises, XLA reports a ``JaxRuntimeError`` ("CpuCallback error")
whose message is the callback's formatted traceback, with nothing chained,
and JAX logs that traceback.  So a ``BudgetTooSmallError``, a corrupt
chunk's ``InvalidStoreError`` or a Ctrl-C inside ``jax.jit(f)(x)`` reaches
the caller of a plain ``jax.jit`` function as an untyped runtime error.

oocarr changes nothing of JAX for this.  :func:`guarded` wraps oocarr's own
callbacks: an exception one raises is kept here under a token and replaced
by a :class:`DeferredError` whose message names the original's class, its
message and the token, so the ``JaxRuntimeError`` names them too.  What
gives the original back:

- :func:`typed_errors` (and :func:`jit`, ``jax.jit`` wrapped in it): a
  wrapper around the user's function that replaces such a
  ``JaxRuntimeError`` by the kept exception, with its own traceback, cause
  and context (``KeyboardInterrupt`` included);
- :func:`original_error`: the kept exception a caught ``JaxRuntimeError``
  stands for.

JAX logs a failed callback's traceback (the ``jax._src.callback`` logger), as
it does for any callback; that logger is the user's to configure.
"""

from __future__ import annotations

import collections
import functools
import itertools
import re
import threading
from collections.abc import Callable
from typing import Any

import jax

__all__ = [
    "DeferredError",
    "guarded",
    "original_error",
    "typed_errors",
    "jit",
]

_TOKEN = "oocarr-deferred-error-"
_TOKEN_RE = re.compile(re.escape(_TOKEN) + r"(\d+)")
_INTERRUPT_RE = re.compile(r"^KeyboardInterrupt\b", re.MULTILINE)
# Errors whose runtime error was never given back (a user catching it without asking for the
# original) are dropped oldest first, so their tracebacks do not pile up.
_MAX_PENDING = 32
_pending: collections.OrderedDict[int, BaseException] = collections.OrderedDict()
_lock = threading.Lock()
_counter = itertools.count(1)


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


def _keep(error: BaseException) -> DeferredError:
    token = next(_counter)
    with _lock:
        _pending[token] = error
        while len(_pending) > _MAX_PENDING:
            _pending.popitem(last=False)
    return DeferredError(token, error)


def guarded(callback: Callable[..., Any]) -> Callable[..., Any]:
    """``callback``, its exceptions (``KeyboardInterrupt`` too) kept for :func:`original_error`.

    Examples
    --------
    >>> def bad():
    ...     raise ValueError("bad")
    >>> try:
    ...     guarded(bad)()
    ... except DeferredError as err:
    ...     type(original_error(err)).__name__
    'ValueError'
    """

    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return callback(*args, **kwargs)
        except BaseException as error:
            raise _keep(error) from None

    return run


def original_error(error: BaseException) -> BaseException | None:
    """The exception an oocarr callback raised that ``error`` stands for, or None.

    ``error`` is what a jitted call raised: a ``jax.errors.JaxRuntimeError``
    whose message names the tokens of the kept errors it carries (they are
    taken from the store, and the first is returned).  A runtime error whose
    callback was interrupted by Ctrl-C gives a fresh ``KeyboardInterrupt``.
    Each kept error is given back once.

    Examples
    --------
    >>> import jax, numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.ones(1000, "f4"))
    >>> try:
    ...     with oocarr.memory_budget(8):
    ...         jax.jit(oocarr.sum)(x)
    ... except jax.errors.JaxRuntimeError as err:
    ...     type(original_error(err)).__name__
    'BudgetTooSmallError'
    >>> original_error(RuntimeError("unrelated")) is None
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


class _Typed:
    """``fn`` whose ``JaxRuntimeError``s standing for oocarr errors are raised as those
    errors; every other attribute is ``fn``'s (``lower``, ``trace``... of a jitted ``fn``)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.__wrapped__ = fn
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.__wrapped__(*args, **kwargs)
        except jax.errors.JaxRuntimeError as err:
            original = original_error(err)
            if original is None:
                raise
        # Raised outside the handler, so the original keeps its own cause and context.
        raise original

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__wrapped__, name)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        return self if instance is None else functools.partial(self, instance)

    def __repr__(self) -> str:
        return f"oocarr.typed_errors({self.__wrapped__!r})"


def typed_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` raising the errors of oocarr's callbacks inside it as themselves.

    ``fn`` is typically a jitted function (``jax.jit(step)``): an oocarr
    error raised while XLA runs it, or a Ctrl-C, would reach its caller as a
    ``jax.errors.JaxRuntimeError``; called through this wrapper it is the
    ``oocarr.errors`` class itself (or ``KeyboardInterrupt``), with its
    message.  Other errors pass unchanged; the wrapper changes nothing else.

    Examples
    --------
    >>> import jax, numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.ones(1000, "f4"))
    >>> total = typed_errors(jax.jit(lambda x: oocarr.sum(x)))
    >>> try:
    ...     with oocarr.memory_budget(8):  # traced, and run, under a budget far too small
    ...         total(x)
    ... except oocarr.errors.BudgetTooSmallError as err:
    ...     print("budget too small")
    budget too small
    """
    return _Typed(fn)


def jit(fn: Callable[..., Any], **jit_kwargs: Any) -> Callable[..., Any]:
    """``jax.jit(fn, **jit_kwargs)`` raising oocarr's errors as themselves (:func:`typed_errors`).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> step = jit(lambda x: oocarr.sum(x * 2.0))
    >>> float(step(oocarr.from_numpy(np.ones(4, "f4"))))
    8.0
    """
    return typed_errors(jax.jit(fn, **jit_kwargs))
