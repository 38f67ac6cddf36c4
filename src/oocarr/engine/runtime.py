"""The process-wide settings oocarr makes, in one named place, each with its opt-out.

Importing oocarr calls :func:`configure` once, which makes exactly these two
changes to the process:

1. **glibc's mmap threshold is fixed at 1 MiB** (``OOCARR_KEEP_MALLOC=1``
   leaves the allocator alone).  glibc serves large allocations with
   ``mmap`` and returns them to the system when freed, but after such a free
   it raises its threshold, so later tile-sized buffers come from the heap
   arenas of the threads that allocate them (JAX's callback and compute
   threads) and stay resident after they are freed: a stream of 8 MB tiles
   then holds several times the memory budget.
2. **JAX's CPU backend dispatches synchronously**
   (``OOCARR_KEEP_ASYNC_DISPATCH=1`` leaves JAX's setting alone).  oocarr's
   callbacks run compiled block functions while the XLA program that called
   them waits; with asynchronous dispatch a block function dispatched from a
   callback can wait behind work that waits for the callback, and a jitted
   training step interleaved with eager JAX work hangs.  The setting is read
   when the CPU backend starts, so it is made at import.

Importing oocarr's JAX layer makes one more, in
:mod:`oocarr.jaxlayer.jit_errors` (the engine does not import that layer):

3. **Errors of oocarr's callbacks come out of a jitted call as themselves**
   (``OOCARR_KEEP_JAX_ERRORS=1`` leaves JAX alone).  XLA reports an
   exception raised in a host callback as an untyped ``JaxRuntimeError``
   and JAX logs its traceback; oocarr wraps ``ExecuteReplicated.__call__``
   (the Python function JAX runs every compiled program with host callbacks
   through) to re-raise the callback's own exception, or a
   ``KeyboardInterrupt``, and filters JAX's log record of those failures.
   Other callbacks' errors are left as JAX reports them.

And importing :mod:`oocarr` itself one more, in :mod:`oocarr.jaxlayer.jnp_errors`:

4. **jax.numpy's argument check names the oocarr function** (``OOCARR_KEEP_JNP_CHECKS=1``
   leaves JAX alone).  ``jnp.sum(x)`` on a ``DiskArray`` fails in JAX's check that arguments
   are arrays; the check is wrapped so that this failure, and only it, raises
   ``oocarr.errors.JaxNumpyArgumentError`` naming ``oocarr.sum``.

Nothing else oocarr does at import reaches outside the package.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import warnings

import jax
from jax._src import xla_bridge

__all__ = ["configure", "fix_mmap_threshold", "trim", "use_synchronous_cpu_dispatch"]

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
_THRESHOLD = 1 << 20


def _glibc(function: str, *args: int) -> bool:
    """Call one of glibc's allocator functions; False where there is none (or opted out)."""
    if not sys.platform.startswith("linux") or os.environ.get("OOCARR_KEEP_MALLOC"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(getattr(libc, function)(*args))
    except (OSError, AttributeError):
        return False


def trim() -> bool:
    """Give the heap's free memory back to the system (glibc's ``malloc_trim``).

    XLA's compiler frees tens of megabytes of scratch after each compile,
    which glibc otherwise keeps resident; the engine calls this once after a
    block function compiles.  True when memory was released.

    Examples
    --------
    >>> trim() in (True, False)
    True
    """
    return _glibc("malloc_trim", 0)


def fix_mmap_threshold() -> bool:
    """Set glibc's ``M_MMAP_THRESHOLD`` to 1 MiB; True when it was set.

    Examples
    --------
    >>> fix_mmap_threshold() in (True, False)
    True
    """
    return _glibc("mallopt", _M_MMAP_THRESHOLD, _THRESHOLD)


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


def configure() -> None:
    """Make the two process-wide settings this module documents (each has its opt-out).

    Called once when oocarr is imported; calling it again changes nothing.

    Examples
    --------
    >>> configure()
    """
    fix_mmap_threshold()
    use_synchronous_cpu_dispatch()
