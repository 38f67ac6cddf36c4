"""Tile memory handed back to the system while oocarr streams, without changing the allocator.

glibc serves a large allocation with ``mmap`` and unmaps it when it is
freed, but after such a free it raises its threshold, so later tile-sized
buffers come from its heap arenas, and stay resident after they are freed
(a freed chunk in the middle of a heap is only reused, never returned).
oocarr's own buffers are mapped directly (:mod:`oocarr.store.buffers`), but
XLA allocates a block function's outputs with ``malloc``; over a stream of
8 MB tiles the freed ones could then hold 1.5x the memory budget resident.

oocarr changes none of glibc's allocator settings.  Instead each oocarr
primitive's work runs :func:`watching` its budget: before a block function
runs and after a tile is written, :func:`release_if_over` compares the
process's resident size with where it stood when the work started, and when
it has grown past half the budget it asks glibc to give its free pages back
(``malloc_trim``, which changes no setting); when the work ends, what it left
resident is handed back the same way.  Half, because the trim only runs
between tiles: the tiles allocated until the next check must still fit (a
trigger at the whole budget let an eager chain of three elementwise ops peak
at 1.2x its budget, half keeps it near 0.9x).  Below that nothing is trimmed,
so a stream that keeps reusing the same freed chunks pays nothing for this.  Above it,
the heap is trimmed again only once the process has grown a megabyte past
where the last trim left it: an op that legitimately holds more than half its
budget (a blocked factorization) would otherwise trim before every block function for
nothing (an 8192² solve under 64 MiB: 1,293 trims, 1.4 s of 9.6).
Elsewhere than glibc, these are no-ops.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import itertools
import os
import sys
import threading
from collections.abc import Callable, Iterator

__all__ = ["trim", "resident_bytes", "watching", "release_if_over"]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
#: ``(pid, descriptor of /proc/self/statm)``, opened on first use in each process.
_statm: tuple[int, int] | None = None
#: Growth under this much (left behind by a finished piece of work, or since the last trim)
#: is not worth a trim.
_SLACK = 1 << 20


def _load_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):
        return None


_malloc_trim = _load_trim()


def trim() -> bool:
    """Give the heap's free memory back to the system (glibc's ``malloc_trim``).

    Changes no allocator setting: it only returns pages glibc holds free.
    True when memory was released.

    Examples
    --------
    >>> trim() in (True, False)
    True
    """
    return bool(_malloc_trim(0)) if _malloc_trim is not None else False


def resident_bytes() -> int | None:
    """This process's resident size now, in bytes (None where ``/proc`` has no ``statm``).

    Examples
    --------
    >>> resident_bytes() is None or resident_bytes() > 0
    True
    """
    global _statm
    try:
        if _statm is None or _statm[0] != os.getpid():  # a forked child reads its own
            _statm = (os.getpid(), os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC))
        # one pread of a kept descriptor: 1 µs, where opening the file each time took 50-70
        return int(os.pread(_statm[1], 128, 0).split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


_lock = threading.Lock()
_ids = itertools.count()
#: The resident size each running piece of work may reach, by id.
_limits: dict[int, int] = {}
#: The resident size the last trim left.
_settled = 0


@contextlib.contextmanager
def watching(allowance: int) -> Iterator[None]:
    """Work during which the resident size should stay within ``allowance`` bytes of now.

    Within the block, :func:`release_if_over` trims the heap when the
    process has grown past half of that (see the module's docstring); at its
    end, whatever growth is left is handed back.

    Examples
    --------
    >>> with watching(32 * 2**20):
    ...     trimmed = release_if_over()
    """
    global _settled
    base = resident_bytes() if _malloc_trim is not None else None
    if base is None:
        yield
        return
    key = next(_ids)
    with _lock:
        _settled = min(_settled, base)
        _limits[key] = base + allowance // 2
    try:
        yield
    finally:
        with _lock:
            del _limits[key]
        now = resident_bytes()
        if now is not None and now > base + _SLACK:
            trim()


def release_if_over() -> bool:
    """Trim the heap when the process has grown past what the work in progress allows.

    Cheap when there is nothing to do (one read of ``/proc/self/statm``);
    True when it trimmed.

    Examples
    --------
    >>> release_if_over()  # no work in progress
    False
    """
    global _settled
    if not _limits:
        return False
    with _lock:
        limit = min(_limits.values(), default=None)
    now = resident_bytes()
    if limit is None or now is None or now <= max(limit, _settled + _SLACK):
        return False
    released = trim()
    _settled = resident_bytes() or 0
    return released
