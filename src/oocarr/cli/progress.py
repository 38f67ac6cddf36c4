"""A byte-counting progress bar on standard error, shown only where it helps: the engine's
bar (:class:`oocarr.engine.progress.Bar`), counting bytes, on a terminal only."""

from __future__ import annotations

import time

from oocarr.engine.progress import DELAY, Bar

__all__ = ["Progress", "DELAY"]


class Progress(Bar):
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
        super().__init__(label, total, unit="B", tqdm=False)
        self.enabled = enabled
        self._hidden = not enabled

    def __enter__(self) -> Progress:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def advance(self, nbytes: int) -> None:  # type: ignore[override]
        """Count ``nbytes`` more done."""
        super().advance(nbytes, nbytes)
