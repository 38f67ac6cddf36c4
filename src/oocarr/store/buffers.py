"""Buffers that JAX can use without copying them.

XLA's CPU client takes a NumPy array as is only when its data is aligned to
64 bytes; NumPy's own large allocations are aligned to 16, so every block
handed to a jitted block function would be copied once more, a second
tile-sized buffer per input outside the planner's count.

Fresh tile-sized buffers cost a page fault per 4 KiB page on first touch,
which on a virtual machine can cost more than reading the tile from the page
cache; :class:`BufferPool` hands the same few buffers out again once
nothing (JAX included) still uses them.  Tile-sized buffers are mapped directly, so
they leave the process when freed.
"""

from __future__ import annotations

import math
import mmap
import queue
import threading
import weakref
from typing import Any

import numpy as np

__all__ = ["ALIGNMENT", "aligned_empty", "BufferPool"]

#: Byte alignment XLA's CPU client needs to use a host buffer without a copy.
ALIGNMENT = 64
#: Buffers of at least this many bytes are mapped directly, not taken from the heap.
MAPPED_BYTES = 1 << 20


def aligned_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a 64-byte boundary.

    From :data:`MAPPED_BYTES` on, the memory is an anonymous mapping of its own (page
    aligned), unmapped when the array dies: a freed tile goes back to the system, where
    glibc would keep it in a heap arena (oocarr changes no allocator setting).

    Examples
    --------
    >>> a = aligned_empty((3, 5), "float32")
    >>> a.shape, a.dtype, a.ctypes.data % ALIGNMENT, a.flags.c_contiguous
    ((3, 5), dtype('float32'), 0, True)
    """
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes >= MAPPED_BYTES:
        return np.frombuffer(_mapping(nbytes), dtype).reshape(shape)
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start : start + nbytes].view(dtype).reshape(shape)


_PRIVATE = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)


def _mapping(nbytes: int) -> mmap.mmap:
    """A private anonymous mapping of ``nbytes``, backed by huge pages where the kernel
    allows them.  A fresh 64 MiB buffer took 48 ms to fault in as a shared mapping of 4 KiB
    pages (Python's default for ``mmap.mmap(-1, n)``), 27 ms private, 3.4 ms in huge pages
    (2-core VM): NumPy's own large allocations ask for huge pages too."""
    mapping = mmap.mmap(-1, nbytes, flags=_PRIVATE) if _PRIVATE else mmap.mmap(-1, nbytes)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            mapping.madvise(mmap.MADV_HUGEPAGE)
        except OSError:  # a kernel without transparent huge pages
            pass
    return mapping


class _Lease:
    """The owner every array cut from one pooled buffer points to (NumPy collapses a view's
    ``base`` to it), so that it dies only when the last of them does; its death gives the
    buffer back to ``pool``."""

    __slots__ = ("__array_interface__", "_raw", "_pool")

    def __init__(self, raw: np.ndarray, address: int, pool: weakref.ref) -> None:
        self._raw = raw
        self._pool = pool
        self.__array_interface__: dict[str, Any] = {
            "shape": (raw.nbytes,),
            "typestr": "|u1",
            "data": (address, False),
            "version": 3,
        }

    def __del__(self) -> None:
        # The garbage collector may run this in any thread at any allocation, also in one
        # that holds the pool's lock, so it must never wait for that lock.
        pool = self._pool()
        if pool is not None:
            pool._returned.put((self._raw, self.__array_interface__["data"][0]))
            if pool._lock.acquire(blocking=False):
                try:
                    pool._take_returned()
                finally:
                    pool._lock.release()


class BufferPool:
    """Aligned buffers that come back for reuse once every array using one has died.

    :meth:`empty` returns an array like :func:`aligned_empty`; when it and
    every view of it are gone (a ``jax.Array`` that uses it without a copy
    keeps it alive), its memory goes back to the pool, which keeps at most
    ``keep`` free buffers.  The pool never holds more memory than the
    buffers that were in use at once, and frees its buffers when it is
    collected.  Thread-safe.

    Parameters
    ----------
    keep : int
        Most free buffers kept for reuse.

    Examples
    --------
    >>> pool = BufferPool(keep=2)
    >>> a = pool.empty((4, 4), "float32")
    >>> address = a.ctypes.data
    >>> del a
    >>> b = pool.empty((2, 8), "float32")  # the same memory again
    >>> b.ctypes.data == address, b.ctypes.data % ALIGNMENT
    (True, 0)
    """

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._free: list[tuple[np.ndarray, int]] = []  # buffers and their addresses
        self._lock = threading.Lock()
        #: Buffers given back by finalisers, moved to ``_free`` under the lock
        #: (``SimpleQueue.put`` is safe to call from a finaliser).
        self._returned: queue.SimpleQueue[tuple[np.ndarray, int]] = queue.SimpleQueue()
        self._ref = weakref.ref(self)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An uninitialised aligned C-contiguous array, in a reused buffer when one fits."""
        # Called once per array of every batch a loader makes: 27 µs a call before the
        # buffers' addresses were kept and ``__del__`` replaced ``weakref.finalize``, 13 µs after.
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        found = None
        with self._lock:
            self._take_returned()
            free = self._free
            for i, (raw, _) in enumerate(free):
                if raw.nbytes >= nbytes and (found is None or raw.nbytes < free[found][0].nbytes):
                    found = i
            if found is not None:
                raw, address = free.pop(found)
            else:  # smaller free buffers would only ever serve smaller requests
                free.clear()
        if found is None:
            raw = aligned_empty((max(nbytes, 1),), np.uint8)
            address = raw.__array_interface__["data"][0]
        lease = _Lease(raw, address, self._ref)
        return np.asarray(lease)[:nbytes].view(dtype).reshape(shape)

    def _take_returned(self) -> None:
        """Move given-back buffers to the free list, up to ``keep`` (call with the lock held)."""
        while True:
            try:
                entry = self._returned.get_nowait()
            except queue.Empty:
                return
            if len(self._free) < self.keep:
                self._free.append(entry)

    @property
    def free(self) -> int:
        """Free buffers held for reuse."""
        with self._lock:
            self._take_returned()
            return len(self._free)
