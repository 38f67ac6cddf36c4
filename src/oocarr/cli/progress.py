"""A byte-counting progress bar on standard error, shown only where it helps."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from .output import human_bytes

__all__ = ["Progress", "DELAY"]

#: Seconds of work before a bar appears: quick commands print none.
DELAY = 0.5


class Progress:
    """Count bytes done; after :data:`DELAY` seconds show a ``click`` bar with the throughput.

    The bar goes to standard error and is never shown when that is not a
    terminal or when ``enabled`` is false (``--quiet``).

    Examples
    --------
    >>> with Progress("copying", 100, enabled=False) as bar:
    ...     bar.advance(60)
    ...     bar.advance(40)
    >>> bar.done, bar.rate() > 0
    (100, True)
    """

    def __init__(self, label: str, total: int, *, enabled: bool = True) -> None:
        self.label = label
        self.total = total
        self.enabled = enabled and _is_terminal(sys.stderr)
        self.done = 0
        self.start = time.perf_counter()
        self._bar: Any = None

    def __enter__(self) -> Progress:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = self.elapsed()
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None

    def elapsed(self) -> float:
        """Seconds since the start (at least a microsecond)."""
        return max(1e-6, time.perf_counter() - self.start)

    def rate(self) -> float:
        """Bytes per second so far."""
        return self.done / self.elapsed()

    def advance(self, nbytes: int) -> None:
        """Count ``nbytes`` more done."""
        self.done += nbytes
        if self._bar is not None:
            self._bar.update(nbytes, self.throughput())
        elif self.enabled and self.elapsed() > DELAY:
            self._bar = click.progressbar(
                length=self.total,
                label=self.label,
                file=sys.stderr,
                show_eta=True,
                item_show_func=lambda text: text,
            )
            self._bar.__enter__()
            self._bar.update(self.done, self.throughput())

    def throughput(self) -> str:
        """``'212.3 MB/s'``."""
        return f"{human_bytes(self.rate())}/s"


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
