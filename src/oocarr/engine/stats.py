"""I/O statistics: bytes and pages read and written and tiles computed, per op call site.

Counting is on while an :func:`io_stats` block is open (in any thread of the
process: op loops run in JAX's callback threads).

Examples
--------
>>> import numpy as np, oocarr
>>> x = oocarr.from_numpy(np.ones((100, 10), "f4"))
>>> with oocarr.io_stats() as stats:
...     total = oocarr.sum(x)
>>> stats.total.bytes_read
4000
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import FrameType

__all__ = ["IOCounts", "IOStats", "io_stats", "record", "call_site"]


_counts_lock = threading.Lock()


@dataclass
class IOCounts:
    """Counters of one call site (or of everything, in :attr:`IOStats.total`)."""

    bytes_read: int = 0
    bytes_written: int = 0
    pages_read: int = 0
    pages_written: int = 0
    tiles: int = 0
    calls: int = 0
    #: The largest resident bytes a call's plan projected (:mod:`oocarr.engine.plan`).
    projected_bytes: int = 0
    #: The most resident memory one task added on a cluster's worker, measured there
    #: (0 when no task ran on a cluster, or the platform cannot measure it).
    peak_task_bytes: int = 0

    def count_read(self, nbytes: int) -> None:
        """Count one page of ``nbytes`` read (safe from the engine's reader and writer threads)."""
        with _counts_lock:
            self.bytes_read += nbytes
            self.pages_read += 1

    def count_written(self, nbytes: int) -> None:
        """Count one page of ``nbytes`` written."""
        with _counts_lock:
            self.bytes_written += nbytes
            self.pages_written += 1

    def add(self, other: IOCounts) -> None:
        """Add ``other``'s counts to these (projections and peaks: the larger of the two)."""
        for name in self.__dataclass_fields__:
            if name in _PEAKS:
                setattr(self, name, max(getattr(self, name), getattr(other, name)))
            else:
                setattr(self, name, getattr(self, name) + getattr(other, name))

    def project(self, nbytes: int) -> None:
        """Record a plan's projected resident bytes (the largest one counts)."""
        with _counts_lock:
            self.projected_bytes = max(self.projected_bytes, nbytes)


_PEAKS = ("projected_bytes", "peak_task_bytes")


@dataclass
class IOStats:
    """What an :func:`io_stats` block saw: per call site (``"op @ file:line"``) and in total."""

    by_site: dict[str, IOCounts] = field(default_factory=dict)

    @property
    def total(self) -> IOCounts:
        total = IOCounts()
        for counts in self.by_site.values():
            total.add(counts)
        return total

    def __str__(self) -> str:
        lines = [f"{'call site':60s} {'read MB':>9s} {'written MB':>10s} {'tiles':>7s}"]
        for site, c in sorted(self.by_site.items()):
            lines.append(
                f"{site[:60]:60s} {c.bytes_read / 1e6:9.2f} {c.bytes_written / 1e6:10.2f} "
                f"{c.tiles:7d}"
            )
        return "\n".join(lines)


_lock = threading.Lock()
_active: list[IOStats] = []


@contextlib.contextmanager
def io_stats() -> Iterator[IOStats]:
    """Count the I/O of every op call made while the block is open.

    Yields
    ------
    IOStats
        Filled in as ops run; read it after the block.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.ones((10, 10), "f4"))
    >>> with oocarr.io_stats() as stats:
    ...     y = x * 2.0
    >>> stats.total.bytes_read, stats.total.bytes_written
    (400, 400)
    """
    stats = IOStats()
    with _lock:
        _active.append(stats)
    try:
        yield stats
    finally:
        with _lock:
            _active.remove(stats)


def record(site: str, counts: IOCounts) -> None:
    """Add one op call's counts to every open :func:`io_stats` block."""
    with _lock:
        for stats in _active:
            stats.by_site.setdefault(site, IOCounts()).add(counts)


#: The oocarr package's folder: frames under it are not the user's.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def call_site(name: str) -> str:
    """``"name @ file:line"`` of the first caller outside oocarr and JAX."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if not path.startswith(_PACKAGE) and f"{os.sep}jax{os.sep}" not in path:
            return f"{name} @ {os.path.basename(path)}:{frame.f_lineno}"
        frame = frame.f_back
    return name
