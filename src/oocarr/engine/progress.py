"""Progress of the engine's streamers: tiles done of total, bytes per second and time left.

Off by default.  ``with progress():`` (or ``set_progress(True)``, which
``oocarr.config(progress=True)`` calls) turns it on for the whole process: op loops run
in JAX's callback threads and the reader threads of ``batches``, where a context
variable would not reach, so the switch is module state guarded by a lock, like
:func:`~oocarr.engine.stats.io_stats`.

Each streamer that runs while no bar is open opens one (:func:`start`) and counts
its steps on it; a streamer started while another's bar is open counts nothing
of its own, so the user sees one bar at a time: one per top-level run.  A bar
appears after :data:`DELAY` seconds of work, drawn by ``tqdm.auto`` where tqdm is
installed (a widget in Jupyter), else by a ``click`` bar (the CLI's) on a
terminal, else as a line redrawn in place on the stream (a log file, a pipe):
the user asked for progress, so it is shown.  With progress off nothing is
drawn and a streamer pays one ``is None`` check per call, none per tile.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from .stats import IOCounts

__all__ = [
    "DELAY",
    "Bar",
    "ProgressRun",
    "counted",
    "enabled",
    "progress",
    "set_progress",
    "start",
    "tracking",
]

#: Seconds of work before a bar appears: quick calls draw none.
DELAY = 0.5
#: Seconds between redraws of a line (the click and tqdm bars pace themselves).
REDRAW_EVERY = 0.2


@dataclass
class ProgressRun:
    """One top-level run as its bar last counted it (what :func:`progress` yields, in order).

    Attributes
    ----------
    label : str
        The streamer and the user's call site (``"sum @ train.py:12"``).
    unit : str
        What is counted: ``"tile"``, ``"task"`` (on a cluster) or ``"batch"``.
    done, total : int
        Units done, and of how many (``total`` is ``None`` where a streamer
        cannot tell beforehand: the factorizations and other custom ops).
    nbytes : int
        Bytes read and written from storage (a copy: bytes copied).
    seconds : float
        From the start of the run to its end.
    """

    label: str
    unit: str
    done: int
    total: int | None
    nbytes: int
    seconds: float


@dataclass(frozen=True)
class _Settings:
    file: TextIO | None


_lock = threading.Lock()
#: The innermost ``progress()`` block wins; ``None`` in it means off.
_stack: list[tuple[_Settings | None, list[ProgressRun]]] = []
_global: _Settings | None = None
_open: Bar | None = None


def _settings() -> _Settings | None:
    return _stack[-1][0] if _stack else _global


def enabled() -> bool:
    """Whether streamers show their progress now (in any thread of the process).

    Examples
    --------
    >>> enabled()
    False
    >>> with progress():
    ...     enabled()
    True
    """
    return _settings() is not None


def set_progress(on: bool, *, file: TextIO | None = None) -> None:
    """Show every streamer's progress from now on (``False``: no more), outside any
    :func:`progress` block; ``file`` is where bars are drawn (default: standard error).

    Examples
    --------
    >>> set_progress(True)
    >>> enabled()
    True
    >>> set_progress(False)
    """
    global _global
    with _lock:
        _global = _Settings(file) if on else None


@contextlib.contextmanager
def progress(on: bool = True, *, file: TextIO | None = None) -> Iterator[list[ProgressRun]]:
    """Show the progress of every streamer run while the block is open: ops, ``save``,
    ``stream_sum``, ``batches`` epochs, tasks on a cluster.

    A bar appears once a run has taken half a second: tiles (or tasks, or batches) done of
    the total, bytes per second and the time left.  It is drawn by ``tqdm.auto`` when tqdm is
    installed (a widget in Jupyter), else by the same ``click`` bar as the command line on a
    terminal, else as a line redrawn in place, since the block asked for it.  One bar is
    shown at a time: a run started while another's bar is open (an op inside a ``batches``
    epoch, a jitted step's ops inside an epoch) counts towards nothing of its own.  The
    switch is process-wide, so the op loops of a jitted function called in the block, which
    run in JAX's callback threads, show theirs.

    Parameters
    ----------
    on : bool
        ``False`` turns progress off inside an enclosing block.
    file : file-like, optional
        Where bars are drawn (default: standard error at the time of drawing).

    Yields
    ------
    list of ProgressRun
        Each top-level run of the block as its bar counted it, appended as it ends (also the
        runs too short to draw a bar).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.ones((1000, 10), "f4"))
    >>> with oocarr.memory_budget("1MB"), oocarr.progress() as runs:
    ...     total = oocarr.sum(x)
    >>> run = runs[-1]
    >>> run.unit, run.done == run.total, run.nbytes
    ('tile', True, 40000)
    """
    runs: list[ProgressRun] = []
    entry = (_Settings(file) if on else None, runs)
    with _lock:
        _stack.append(entry)
    try:
        yield runs
    finally:
        with _lock:
            _stack.remove(entry)


def start(
    label: str,
    total: int | Callable[[], int | None] | None,
    counts: IOCounts | None = None,
    *,
    unit: str = "tile",
    show: bool | None = False,
    delay: float | None = None,
) -> Bar | None:
    """The bar of a run that starts now, or ``None`` (count nothing): progress is off, or
    another run's bar is open.  ``total`` may be a function, called only when a bar opens;
    with ``counts`` the bar's bytes are the bytes they have read and written.  ``show`` says
    what happens while progress is off: ``False`` nothing, ``None`` a bar on a terminal
    only, ``True`` a bar anyway.  Close the bar with :meth:`Bar.close` when the run ends.

    Examples
    --------
    >>> start("sum", 4) is None  # progress is off
    True
    >>> with progress():
    ...     bar = start("sum", lambda: 4)
    ...     bar.advance(4)
    ...     bar.close()
    >>> bar.done, bar.total
    (4, 4)
    """
    global _open
    settings = _settings()
    if settings is None and show is False:
        return None
    forced = settings is not None or show is True
    file = settings.file if settings is not None else None
    with _lock:
        if _open is not None:
            return None
        _open = bar = Bar(label, None, unit=unit, counts=counts, file=file, forced=forced)
        bar._on_close = _closed
        bar._runs = [runs for _, runs in _stack]
    if delay is not None:
        bar.delay = delay
    try:
        bar.total = total() if callable(total) else total
    except BaseException:
        bar.close()
        raise
    return bar


def _closed(bar: Bar) -> None:
    global _open
    run = ProgressRun(bar.label, bar.unit, bar.done, bar.total, bar.bytes_done(), bar.seconds)
    with _lock:
        if _open is bar:
            _open = None
        for runs in bar._runs:
            runs.append(run)


@contextlib.contextmanager
def tracking(
    label: str,
    total: int | Callable[[], int | None] | None,
    counts: IOCounts | None = None,
    **options: Any,
) -> Iterator[Bar | None]:
    """:func:`start` a bar for the block's run, closed when it ends.

    Examples
    --------
    >>> with progress() as runs, tracking("copy", 2) as bar:
    ...     bar.advance(2, nbytes=16)
    >>> runs[0].done, runs[0].nbytes
    (2, 16)
    """
    bar = start(label, total, counts, **options)
    try:
        yield bar
    finally:
        if bar is not None:
            bar.close()


def counted(items: Iterable[Any], bar: Bar | None) -> Iterable[Any]:
    """``items``, one unit counted on ``bar`` as each is handed out (``items`` itself when
    ``bar`` is ``None``: nothing added to a loop that shows no progress).

    Examples
    --------
    >>> with progress(), tracking("steps", 3) as bar:
    ...     list(counted(range(3), bar)), bar.done
    ([0, 1, 2], 3)
    """
    if bar is None:
        return items
    return _counting(items, bar)


def _counting(items: Iterable[Any], bar: Bar) -> Iterator[Any]:
    for item in items:
        bar.advance()
        yield item


class Bar:
    """Units done of ``total`` and bytes moved; drawn after ``delay`` seconds when
    ``forced`` or when ``file`` (standard error by default) is a terminal.  Safe to advance
    from any thread.

    Parameters
    ----------
    label : str
        Shown before the bar.
    total : int or None
        Units of the whole run (``None``: unknown, counted without an end).
    unit : str
        What a unit is (``"tile"``, ``"B"``...).
    counts : IOCounts, optional
        When given, the bar's bytes are what these have read and written; else the
        ``nbytes`` passed to :meth:`advance`.
    file : file-like, optional
        Where the bar is drawn (default: standard error at the time of drawing).
    forced : bool
        Draw it even when ``file`` is not a terminal.
    tqdm : bool
        Draw with ``tqdm.auto`` when tqdm is installed.

    Examples
    --------
    >>> bar = Bar("copy", 3, unit="tile")
    >>> bar.advance(nbytes=100); bar.advance(2, nbytes=200)
    >>> bar.close()
    >>> bar.done, bar.bytes_done(), bar.rate() > 0
    (3, 300, True)
    """

    def __init__(
        self,
        label: str,
        total: int | None,
        *,
        unit: str = "tile",
        counts: IOCounts | None = None,
        file: TextIO | None = None,
        forced: bool = False,
        tqdm: bool = True,
    ) -> None:
        self.label, self.total, self.unit = label, total, unit
        self.counts = counts
        self.file = file
        self.forced = forced
        self.tqdm = tqdm
        self.delay = DELAY
        self.done = 0
        self.nbytes = 0
        self.start = time.perf_counter()
        self.seconds = 0.0
        self._lock = threading.Lock()
        self._drawn: Any = None
        self._hidden = False
        self._closed = False
        self._on_close: Callable[[Bar], None] | None = None
        self._runs: list[list[ProgressRun]] = []

    def elapsed(self) -> float:
        """Seconds since the start (at least a microsecond)."""
        return max(1e-6, time.perf_counter() - self.start)

    def bytes_done(self) -> int:
        """Bytes read and written so far."""
        if self.counts is not None:
            return self.counts.bytes_read + self.counts.bytes_written
        return self.nbytes

    def rate(self) -> float:
        """Bytes per second so far."""
        return self.bytes_done() / self.elapsed()

    def throughput(self) -> str:
        """``'212.3 MB/s'``."""
        return f"{human_bytes(self.rate())}/s"

    def advance(self, n: int = 1, nbytes: int = 0) -> None:
        """Count ``n`` more units done, and ``nbytes`` more bytes (when the bar has no
        ``counts``)."""
        with self._lock:
            self.done += n
            self.nbytes += nbytes
            if self._drawn is not None:
                self._drawn.update(n, self)
            elif not self._hidden and not self._closed and self.elapsed() >= self.delay:
                self._draw_first()

    def close(self) -> None:
        """End the run: the bar's last state drawn and its line ended (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self.seconds = self.elapsed()
            if self._drawn is None and not self._hidden and self.seconds >= self.delay:
                # a run whose last unit came before the delay (its last writes did not)
                self._draw_first()
            self._closed = True
            if self._drawn is not None:
                self._drawn.close(self)
                self._drawn = None
        if self._on_close is not None:
            self._on_close(self)

    def _draw_first(self) -> None:
        file = self.file if self.file is not None else sys.stderr
        terminal = _is_terminal(file)
        if not (self.forced or terminal):
            self._hidden = True
            return
        tqdm = _tqdm_class() if self.tqdm else None
        if tqdm is not None:
            self._drawn = _TqdmDrawing(self, tqdm, file)
        elif terminal and self.total is not None:
            self._drawn = _ClickDrawing(self, file)
        else:
            self._drawn = _LineDrawing(self, file)


class _ClickDrawing:
    """The command line's bar: ``label [####----] 40%  00:00:03  212.3 MB/s``."""

    def __init__(self, bar: Bar, file: TextIO) -> None:
        import click

        self._bar = click.progressbar(
            length=bar.total,
            label=bar.label,
            file=file,
            show_eta=True,
            item_show_func=lambda text: text,
        )
        self._bar.__enter__()
        self._bar.update(bar.done, bar.throughput())

    def update(self, n: int, bar: Bar) -> None:
        self._bar.update(n, bar.throughput())

    def close(self, bar: Bar) -> None:
        self._bar.__exit__(None, None, None)


class _TqdmDrawing:
    """A ``tqdm.auto`` bar (a widget in Jupyter), the throughput as its postfix."""

    def __init__(self, bar: Bar, tqdm: Any, file: TextIO) -> None:
        self._bar = tqdm(total=bar.total, desc=bar.label, unit=bar.unit, file=file, leave=True)
        self._bar.update(bar.done)

    def update(self, n: int, bar: Bar) -> None:
        self._bar.set_postfix_str(bar.throughput(), refresh=False)
        self._bar.update(n)

    def close(self, bar: Bar) -> None:
        self._bar.set_postfix_str(bar.throughput(), refresh=False)
        self._bar.close()


class _LineDrawing:
    """``label: 12/40 tiles (3.1 s, 212.3 MB/s, 7.2 s left)`` redrawn in place with ``\\r``
    at most every :data:`REDRAW_EVERY` seconds, ended with a newline."""

    def __init__(self, bar: Bar, file: TextIO) -> None:
        self._file = file
        self._drawn = 0.0
        self._draw(bar)

    def update(self, n: int, bar: Bar) -> None:
        if time.perf_counter() - self._drawn >= REDRAW_EVERY or bar.done == bar.total:
            self._draw(bar)

    def close(self, bar: Bar) -> None:
        self._draw(bar)
        self._file.write("\n")
        self._file.flush()

    def _draw(self, bar: Bar) -> None:
        seconds = bar.elapsed()
        of = "" if bar.total is None else f"/{bar.total}"
        left = ""
        if bar.total is not None and 0 < bar.done < bar.total:
            left = f", {seconds * (bar.total - bar.done) / bar.done:.1f} s left"
        self._file.write(
            f"\r{bar.label}: {bar.done}{of} {bar.unit}s ({seconds:.1f} s, {bar.throughput()}{left})"
        )
        self._file.flush()
        self._drawn = time.perf_counter()


def _tqdm_class() -> Any:
    """``tqdm.auto.tqdm`` where tqdm is installed, else ``None``."""
    try:
        # tqdm is optional and ships no types (they are types-tqdm's, not installed with it)
        from tqdm.auto import tqdm  # type: ignore[import-untyped]
    except ImportError:
        return None
    return tqdm


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def human_bytes(nbytes: float | None) -> str:
    """Decimal units, as disks and networks count: ``'268.4 MB'``.

    Examples
    --------
    >>> human_bytes(268435456), human_bytes(512), human_bytes(None)
    ('268.4 MB', '512 B', 'unknown')
    """
    if nbytes is None:
        return "unknown"
    if nbytes < 1000:
        return f"{nbytes:.0f} B"
    for unit in ("kB", "MB", "GB", "TB"):
        nbytes /= 1000
        if nbytes < 1000 or unit == "TB":
            return f"{nbytes:.1f} {unit}"
    raise AssertionError("unreachable")
