"""Keep freed tile buffers from piling up in glibc's heap.

glibc serves large allocations with ``mmap`` and returns them to the system
when freed, but after such a free it raises its ``mmap`` threshold, so later
tile-sized buffers come from the heap arenas of the threads that allocate them
(JAX's callback and compute threads) and stay resident after they are freed:
a stream of 8 MB tiles then holds several times the memory budget.  Fixing the
threshold at 1 MiB keeps every tile buffer on ``mmap``.  Set
``OOCARR_KEEP_MALLOC=1`` to leave the allocator alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

__all__ = ["fix_mmap_threshold", "trim"]

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
