"""Synchronous dispatch on JAX's CPU backend.

oocarr's callbacks run compiled block functions while the XLA program that
called them waits.  With the CPU client's asynchronous dispatch, a block
function dispatched from a callback can wait behind work that waits for the
callback, and a jitted training step interleaved with eager JAX work then
hangs.  Dispatching inline on the calling thread (as JAX did on CPU before
version 0.4.32) cannot.  The setting is read when the CPU backend starts, so
it is made when oocarr is imported; ``OOCARR_KEEP_ASYNC_DISPATCH=1`` leaves
JAX's setting alone.
"""

from __future__ import annotations

import os
import warnings

import jax
from jax._src import xla_bridge

__all__ = ["use_synchronous_cpu_dispatch"]

_FLAG = "jax_cpu_enable_async_dispatch"


def use_synchronous_cpu_dispatch() -> bool:
    """Turn off the CPU backend's asynchronous dispatch, if it has not started yet.

    Returns True when dispatch is (or will be) synchronous.  Warns when the
    backend already started with asynchronous dispatch, which oocarr cannot
    change any more.

    Examples
    --------
    >>> use_synchronous_cpu_dispatch() in (True, False)
    True
    """
    if os.environ.get("OOCARR_KEEP_ASYNC_DISPATCH"):
        return not jax.config.values[_FLAG]
    if not jax.config.values[_FLAG]:
        return True
    if not xla_bridge.backends_are_initialized():
        jax.config.update(_FLAG, False)
        return True
    warnings.warn(
        "JAX's CPU backend was started before oocarr was imported, with asynchronous dispatch; "
        "a jitted function whose oocarr ops interleave with other JAX work can then hang. "
        "Import oocarr before running JAX code, or set "
        "jax.config.update('jax_cpu_enable_async_dispatch', False) first",
        RuntimeWarning,
        stacklevel=3,
    )
    return False
