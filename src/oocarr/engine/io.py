"""The engine's I/O around a loop: operands read (and counted) by region, the next step's
blocks read ahead in background threads, finished tiles written behind in another."""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from oocarr.store.blocked import BlockedArray
from oocarr.store.buffers import BufferPool

from .heap import release_if_over
from .op import Region
from .plan import INPUT_TILES, MAX_READ_AHEAD
from .stats import IOCounts

__all__ = ["TASK_BUFFERS", "Operand", "WriteBehind", "prefetched", "stream_copy", "stream_read"]


class Operand:
    """One input of an op call as the engine reads it: stored or in memory.

    A reader keeps its last block: consecutive steps that need the same
    region (a row panel of ``A`` while a matmul walks ``B``, a broadcast
    input) read it once.  With ``views=False`` a block is always read into a
    pooled buffer, never mapped: for a stream of blocks read once each, a
    ``pread`` into a buffer used again is faster than mapping fresh pages
    (1 GiB ``.npy`` in 8 MiB tiles: 135 ms against 240 ms).
    """

    def __init__(
        self,
        value: BlockedArray | np.ndarray,
        counts: IOCounts | None = None,
        buffers: BufferPool | None = None,
        views: bool = True,
    ) -> None:
        self.value = value
        self._store = value if isinstance(value, BlockedArray) else None  # value, if stored
        self.stored = self._store is not None
        self.counts = counts
        self._views = views
        self._last: tuple[Region, np.ndarray] | None = None
        # the planner counts INPUT_TILES blocks per stored input, and more when steps are
        # read in parallel; the pool never holds more than were in use at once
        keep = INPUT_TILES + MAX_READ_AHEAD - 1
        self._buffers = (buffers or BufferPool(keep=keep)) if self.stored else None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.value.shape)

    @property
    def ref(self) -> Any:
        """What a task carries for this operand: its locator when stored (reopened where the
        task runs), its values when in memory."""
        return self._store.portable_locator if self._store is not None else np.asarray(self.value)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.value.dtype)

    def read(self, region: Region) -> np.ndarray:
        store, buffers = self._store, self._buffers
        if store is None or buffers is None:  # in memory (both are set for a stored one)
            return np.asarray(self.value[region]) if region else np.asarray(self.value)
        if self._last is not None and self._last[0] == region:
            return self._last[1]
        block = store.read_view(region, buffers.empty, mapped=self._views)
        if self.counts is not None:
            self.counts.count_read(store.read_bytes(block.shape))
        self._last = (region, block)
        return block


_END = object()

#: Read buffers shared by the tasks a process runs (a cluster's worker): a task reads into the
#: buffers the previous one used instead of touching fresh pages.  A 128 MiB sum task took
#: 33 ms with fresh buffers, about 20 ms of it first-touch page faults on this VM.  The pool
#: keeps at most this many free buffers, each no larger than one task's input block.
TASK_BUFFERS = BufferPool(keep=INPUT_TILES + MAX_READ_AHEAD - 1)


def prefetched(
    items: Iterable[Any], read: Callable[[Any], Any], ahead: int = 1
) -> Iterator[tuple[Any, Any]]:
    """``(item, read(item))`` for each item, in order, reading the next ``ahead`` items in
    background threads (one each) while the caller works on the current one (inline when
    there is only one item).

    A read that fails raises at the step that needs it.  Closing the iterator early (the
    caller stopped or raised) cancels the reads ahead and does not wait for those in flight.

    Examples
    --------
    >>> [(i, v) for i, v in prefetched(range(3), lambda i: i * 10)]
    [(0, 0), (1, 10), (2, 20)]
    >>> [v for _, v in prefetched(range(5), lambda i: i * 10, ahead=3)]
    [0, 10, 20, 30, 40]
    """
    items = iter(items)
    current = next(items, _END)
    if current is _END:
        return
    following = next(items, _END)
    if following is _END:
        yield current, read(current)
        return
    ahead = max(1, ahead)
    pool = ThreadPoolExecutor(ahead, thread_name_prefix="oocarr-read")
    pending: collections.deque[tuple[Any, Future]] = collections.deque()
    pending.append((current, pool.submit(read, current)))
    upcoming: Any = following
    try:
        while pending:
            # the step in use and ``ahead`` reads: at most ahead + 1 blocks at once
            while upcoming is not _END and len(pending) < ahead:
                pending.append((upcoming, pool.submit(read, upcoming)))
                upcoming = next(items, _END)
            item, future = pending[0]
            value = future.result()
            pending.popleft()
            if upcoming is not _END:
                pending.append((upcoming, pool.submit(read, upcoming)))
                upcoming = next(items, _END)
            yield item, value
            del value
    finally:
        _stop_readers(pool, [future for _, future in pending])


def _stop_readers(pool: ThreadPoolExecutor, futures: list[Future]) -> None:
    """Shut the read-ahead threads down; reads still running finish on their own and their
    results are dropped.

    Waiting for them could never end: the iterator may be closed by a garbage collection that
    runs in a thread holding a lock a read needs (a driver's, a buffer pool's), or by
    Ctrl-C while a read blocks.
    """
    running = [f for f in futures if not f.cancel() and not f.done()]
    pool.shutdown(wait=not running, cancel_futures=True)


def _written(write: Callable[..., None], target: Any, args: list[Any]) -> None:
    """``write(target, *args)``, then the written tile let go of and, when the process has
    grown past what the work in progress allows, the heap's free memory handed back."""
    write(target, *args)
    args.clear()
    release_if_over()


class WriteBehind:
    """Runs ``write(target, *args)`` in a background thread, one call at a time: each call
    waits for the previous one, so at most one finished tile waits to be written."""

    def __init__(self, write: Callable[..., None], target: Any) -> None:
        self._write = write
        self._target = target
        self._pool: ThreadPoolExecutor | None = None
        self._pending: Future | None = None

    def submit(self, *args: Any) -> None:
        self.wait()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="oocarr-write")
        self._pending = self._pool.submit(_written, self._write, self._target, list(args))

    def wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def __enter__(self) -> WriteBehind:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is None:
                self.wait()
            else:
                with contextlib.suppress(BaseException):
                    self.wait()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)


def stream_read(
    source: BlockedArray | np.ndarray, regions: Iterable[Region], counts: IOCounts | None = None
) -> Generator[tuple[Region, np.ndarray], None, None]:
    """``(region, block)`` for each region of ``source`` on the engine's loop: the next block
    read ahead into a reused buffer while the caller works on this one, reads counted.

    Examples
    --------
    >>> import numpy as np
    >>> [b.tolist() for _, b in stream_read(np.arange(5), [(slice(0, 2),), (slice(2, 5),)])]
    [[0, 1], [2, 3, 4]]
    """
    reader = Operand(source, counts)
    yield from prefetched(regions, reader.read)


def stream_copy(
    source: BlockedArray | np.ndarray,
    target: BlockedArray,
    regions: Iterable[Region],
    counts: IOCounts | None = None,
    advance: Callable[[int], Any] | None = None,
) -> None:
    """Copy each region of ``source`` into ``target`` on the engine's loop: the next region
    read ahead, each block written behind (one write at a time, in order), I/O counted;
    ``advance(nbytes)`` is called after each write.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> target = oocarr.from_numpy(np.zeros(4), mode="r+").store
    >>> stream_copy(np.arange(4.0), target, [(slice(0, 2),), (slice(2, 4),)])
    >>> target[:]
    array([0., 1., 2., 3.])
    """

    def write(_: Any, region: Region, block: np.ndarray) -> None:
        target.write_region(region, block)
        if counts is not None:
            counts.count_written(block.nbytes)
        if advance is not None:
            advance(block.nbytes)

    with (
        WriteBehind(write, None) as writer,
        contextlib.closing(stream_read(source, regions, counts)) as blocks,
    ):
        for region, block in blocks:
            writer.submit(region, block)
            del block
