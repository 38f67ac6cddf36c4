"""Minibatches from stored arrays: shuffled by storage chunk plus a buffer, read ahead.

:func:`batches` turns arrays that share their leading axis (``DiskArray``\\ s
on any driver, or in-memory arrays) into an iterable of minibatches, one
epoch per ``for`` loop.  Random single-row reads from chunked, compressed
storage are slow, so rows are never read one at a time: whole row blocks
aligned to the storage chunks are read, in a shuffled order, straight into
a shuffle buffer (``read_region(..., out=)``), and each batch is drawn at
random from the rows in the buffer.  A background thread does the reading
and keeps up to ``prefetch`` batches ready, so a training step that takes
longer than a read never waits for data.

Memory: the shuffle buffer, the prefetched batches, the batch the loop
holds, the one being assembled and one block of driver cache are all sized
from :func:`oocarr.engine.budget.memory_budget_bytes` when an epoch starts.
"""

from __future__ import annotations

import math
import queue
import threading
import time
import weakref
from collections.abc import Generator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from oocarr.engine.budget import memory_budget_bytes
from oocarr.engine.plan import (
    BLOCK_SHARE,
    EXTRA_BATCHES,
    Buffers,
    Projection,
    least_read_buffers,
    require,
    tile_budget,
)
from oocarr.engine.stats import IOCounts, call_site, record
from oocarr.errors import InvalidArgumentError, ShapeMismatchError
from oocarr.jaxlayer.disk_array import DiskArray
from oocarr.store.blocked import BlockedArray
from oocarr.store.buffers import BufferPool
from oocarr.store.pages import DEFAULT_CHUNK_BYTES, DEFAULT_PAGE_BYTES

__all__ = ["batches", "Batches", "Epoch", "EpochStats"]

#: A shuffle buffer of at least this many blocks (and a batch) refills the rows each batch
#: draws from a staging block, one row write each, instead of moving its last rows into the
#: holes and appending whole blocks (a random read and a random write per row).  One epoch
#: of 4M×256 float32 HDF5 rows, 1024-row batches, a 480,678-row buffer: reader thread's hole
#: moves 1.45 s and whole-epoch 4.7-5.0 s before; see docs/performance.md for after.
STAGING_BLOCKS = 4
#: Largest ratio of bytes read to bytes used when picking the row-block unit: blocks
#: smaller than some input's chunks make that input's chunks be read more than once.
READ_OVERHEAD = 1.25
_POLL_S = 0.05


@dataclass
class EpochStats:
    """What one epoch did, for telling whether training waits for data.

    Attributes
    ----------
    batches : int
        Batches handed to the loop.
    waits : int
        Times the loop asked for a batch that was not ready yet, not counting the
        first batch of the epoch (which waits for the shuffle buffer to fill).
    wait_seconds : float
        Time the loop spent in those waits.
    first_batch_seconds : float
        Time from the start of the epoch to the first batch.
    blocks_read : int
        Row blocks read from storage (one read per stored array per block).
    bytes_read : int
        Bytes read from storage.
    """

    batches: int = 0
    waits: int = 0
    wait_seconds: float = 0.0
    first_batch_seconds: float = 0.0
    blocks_read: int = 0
    bytes_read: int = 0


@dataclass(frozen=True)
class _Plan:
    """Rows per block read, rows of shuffle buffer, and the bytes they and the batches take."""

    block_rows: int
    buffer_rows: int
    resident_bytes: int
    batches_held: int
    projection: Projection


class _Source:
    """One input: a stored array read in row blocks, or an in-memory array."""

    def __init__(self, value: Any, position: int) -> None:
        if isinstance(value, DiskArray):
            value = value.store
        self.store: BlockedArray | None = value if isinstance(value, BlockedArray) else None
        self.array: np.ndarray | None = None
        if self.store is None:
            self.array = np.asarray(value)
        held = self.store if self.store is not None else self.array
        self.shape = tuple(held.shape)
        self.dtype = np.dtype(held.dtype)
        where = self.store.url if self.store is not None else f"in-memory {type(value).__name__}"
        self.name = f"array {position} ({where})"
        if not self.shape:
            raise InvalidArgumentError(
                f"batches: {self.name} is 0-d; every array needs a leading axis of rows"
            )
        self.row_shape = self.shape[1:]
        self.row_bytes = math.prod(self.row_shape) * self.dtype.itemsize
        chunks = self.store.chunks if self.store is not None else None
        self.chunk_rows = int(chunks[0]) if chunks else None
        self._paged: BlockedArray | None = None

    def pages(self, block_rows: int) -> None:
        """Tell the store the block shape it will be read in (it sizes its caches from it)."""
        if self.store is not None:
            self._paged = self.store.with_pages((max(1, block_rows), *self.row_shape))

    def read(self, start: int, stop: int, out: np.ndarray, counts: IOCounts) -> None:
        """Fill ``out`` with rows ``start:stop``."""
        if self.store is None:
            np.copyto(out, self.array[start:stop])
            return
        region = (slice(start, stop), *(slice(0, n) for n in self.row_shape))
        (self._paged or self.store).read_region(region, out=out)
        counts.count_read(out.nbytes)


def _read_rows(source: _Source, unit: int) -> float:
    """Rows of ``source`` a read of a block of ``unit`` rows costs: whole chunks are read
    (an aligned block reads exactly its rows; a block cutting chunks reads all it touches)."""
    chunk = source.chunk_rows or 1
    if unit % chunk == 0:
        return unit
    if chunk % unit == 0:
        return chunk
    return (unit // chunk + 2) * chunk


def _unit_rows(sources: list[_Source], rows: int, row_bytes: int, cap_bytes: int) -> int:
    """Rows per block unit: the smallest that keeps the bytes read within
    :data:`READ_OVERHEAD` of the bytes used (blocks aligned to the chunks of the inputs that
    matter), among chunk sizes and their power-of-two multiples up to ``cap_bytes``; the
    least wasteful one when none does."""
    chunks = {1, *(s.chunk_rows for s in sources if s.chunk_rows)}
    limit = max(1, min(rows, cap_bytes // row_bytes))
    candidates = sorted({c << k for c in chunks for k in range(64) if c << k <= limit} or {1})
    candidates = [min(c, rows) for c in candidates]

    def overhead(unit: int) -> float:
        read = sum(_read_rows(s, unit) * s.row_bytes for s in sources)
        return read / (unit * row_bytes)

    good = [u for u in candidates if overhead(u) <= READ_OVERHEAD]
    if good:
        return good[0]
    return min(candidates, key=lambda u: (overhead(u), u))


def _divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def _plan(
    sources: list[_Source],
    rows: int,
    batch_size: int,
    prefetch: int,
    shuffle: bool,
    shuffle_buffer: int | None,
    budget: int,
    overhead: int = 0,
) -> _Plan:
    """Block and buffer sizes for one epoch under ``budget`` bytes.

    Resident at once: ``prefetch + EXTRA_BATCHES`` batches, the shuffle
    buffer (at least one block plus one batch of rows) and one block of
    driver cache (HDF5 keeps the chunks of the last block read).
    """
    row_bytes = max(1, sum(s.row_bytes for s in sources))
    batch_rows = min(batch_size, max(rows, 1))
    batches_bytes = (prefetch + EXTRA_BATCHES) * batch_rows * row_bytes

    def fits(unit: int) -> bool:  # a buffer of one unit plus one batch, and a unit of cache
        return batches_bytes + (2 * unit + batch_rows - 1) * row_bytes <= budget

    unit = max(1, _unit_rows(sources, max(rows, 1), row_bytes, budget // BLOCK_SHARE))
    if not fits(unit):  # blocks that split each chunk evenly
        unit = max((d for d in _divisors(unit) if fits(d)), default=1)
    names = ", ".join(s.name for s in sources)
    smallest = _projection(
        f"batches of {batch_size} rows ({row_bytes} bytes a row across {names}) with "
        f"prefetch={prefetch}",
        prefetch,
        batch_rows * row_bytes,
        unit + batch_rows - 1,
        unit,
        row_bytes,
    )
    require(
        smallest.plus(least_read_buffers(s.store for s in sources if s.store is not None)),
        budget,
        remedy="with oocarr.set_memory_budget, or lower batch_size or prefetch",
    )
    least = batches_bytes + (2 * unit + batch_rows - 1) * row_bytes
    usable = tile_budget(budget, least=least, overhead=overhead)
    free_rows = (usable - batches_bytes) // row_bytes - unit
    whole = -(-max(rows, 1) // unit) * unit
    if shuffle:
        room = free_rows
        if shuffle_buffer is not None:
            room = min(room, max(shuffle_buffer, unit + batch_rows - 1))
        target = min(DEFAULT_CHUNK_BYTES // row_bytes, room // BLOCK_SHARE)
        block = min(max(unit, target // unit * unit), whole)
        block = max(unit, min(block, (room - batch_rows + 1) // unit * unit))
        buffer_rows = min(room, rows + block)
    else:
        target = min(DEFAULT_PAGE_BYTES // row_bytes, free_rows - batch_rows + 1)
        block = min(max(unit, target // unit * unit), whole)
        buffer_rows = min(block + batch_rows - 1, rows + block)
    overhead = sum(
        s.store.read_overhead((block, *s.row_shape)) for s in sources if s.store is not None
    )
    projection = _projection(
        "batches", prefetch, batch_rows * row_bytes, buffer_rows, unit, row_bytes, overhead
    )
    return _Plan(block, buffer_rows, projection.nbytes, prefetch + EXTRA_BATCHES, projection)


def _projection(
    name: str,
    prefetch: int,
    batch_bytes: int,
    buffer_rows: int,
    unit: int,
    row_bytes: int,
    overhead: int = 0,
) -> Projection:
    """What an epoch holds at once: batches queued and in hand, the shuffle buffer, and one
    block unit of driver cache (HDF5 keeps the chunks of the last block read)."""
    return Projection(
        name,
        (
            Buffers("batches queued (prefetch)", prefetch, batch_bytes),
            Buffers(
                "batches in hand, assembled, and their device copy", EXTRA_BATCHES, batch_bytes
            ),
            Buffers("shuffle buffer", 1, buffer_rows * row_bytes),
            Buffers("driver cache of the last block read", 1, unit * row_bytes),
            Buffers("drivers' read buffers (encoded and decoding chunks)", 1, overhead),
        ),
    )


class _Failure:
    """An exception raised in the reader thread, carried to the loop."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


_END = object()


def _read_batches(
    sources: list[_Source],
    rows: int,
    plan: _Plan,
    batch_size: int,
    drop_last: bool,
    rng: np.random.Generator | None,
    counts: IOCounts,
    stop: threading.Event,
) -> Generator[tuple[np.ndarray, ...]]:
    """One epoch of NumPy batches: blocks in (shuffled) order into the buffer, batches out.

    In shuffled order, a batch is drawn uniformly from the buffer once it
    cannot take another block (or every block is in).  With a buffer of
    several blocks, the rows drawn are replaced by the next rows of a
    *staging* block, so the buffer stays full and each row is written into
    it once; the next staging block is read in another thread meanwhile.
    Otherwise, and once every block is in, the last rows of the buffer move
    into the holes.  In order, batches are taken from the front.  Every row
    enters the buffer once and leaves it once.
    """
    size, cap = plan.block_rows, plan.buffer_rows
    starts = list(range(0, rows, size))
    order = rng.permutation(len(starts)) if rng is not None else range(len(starts))
    staged_rows = size if rng is not None and cap >= STAGING_BLOCKS * size + batch_size else 0
    cap -= 2 * staged_rows  # two staging blocks are carved out of the planned buffer
    buffers = [np.empty((cap, *s.row_shape), s.dtype) for s in sources]
    staging = [[np.empty((staged_rows, *s.row_shape), s.dtype) for s in sources] for _ in "ab"]
    # batches resident at once: the planner's prefetch + EXTRA_BATCHES, whose buffers come
    # back once JAX and the loop are done with them (fresh ones cost a page fault per page)
    pools = [BufferPool(keep=plan.batches_held) for _ in sources]
    for s in sources:
        s.pages(size)
    begin = count = 0
    next_block = 0
    staged = taken = 0  # rows in the staging block in use, and rows of it already drawn on
    current = 0  # which staging block is in use
    ahead: Future | None = None  # the other staging block being read
    reading = ThreadPoolExecutor(1, thread_name_prefix="oocarr-batches") if staged_rows else None

    def read_block(block: int, into: list[np.ndarray], at: int) -> int:
        first = starts[order[block]]
        last = min(first + size, rows)
        for source, buf in zip(sources, into):
            source.read(first, last, buf[at : at + last - first], counts)
        return last - first

    def read_ahead() -> None:
        nonlocal ahead, next_block
        ahead = None
        if next_block < len(starts):
            ahead = reading.submit(read_block, next_block, staging[1 - current], 0)
            next_block += 1

    def next_staging() -> None:
        nonlocal staged, taken, current
        if ahead is None:
            read_ahead()
        staged, taken = ahead.result(), 0
        current = 1 - current
        read_ahead()

    try:
        while not stop.is_set():
            while next_block < len(starts) and count + size <= cap and ahead is None:
                first = starts[order[next_block]]
                last = min(first + size, rows)
                if begin + count + (last - first) > cap:  # in order: move the rest to the front
                    for buf in buffers:
                        buf[:count] = buf[begin : begin + count]
                    begin = 0
                count += read_block(next_block, buffers, begin + count)
                next_block += 1
                if stop.is_set():
                    return
            more = ahead is not None or next_block < len(starts)
            if staged_rows and taken == staged and more:
                next_staging()
            exhausted = taken == staged and ahead is None and next_block == len(starts)
            if count < batch_size and not (exhausted and count and not drop_last):
                return
            take = min(batch_size, count)
            if rng is None:
                front = slice(begin, begin + take)
                batch = tuple(_copy_rows(buf, front, pool) for buf, pool in zip(buffers, pools))
                begin, count = (begin + take, count - take) if count > take else (0, 0)
            else:
                picked = rng.choice(count, size=take, replace=False)
                batch = tuple(_copy_rows(buf, picked, pool) for buf, pool in zip(buffers, pools))
                refill = 0  # the staging block's next rows take the drawn rows' places
                while refill < take and staged_rows:
                    if taken == staged:
                        if ahead is None and next_block == len(starts):
                            break
                        next_staging()
                    n = min(take - refill, staged - taken)
                    for buf, stage in zip(buffers, staging[current]):
                        buf[picked[refill : refill + n]] = stage[taken : taken + n]
                    refill, taken = refill + n, taken + n
                _fill_holes(buffers, picked[refill:], count)
                count -= take - refill
            yield batch
            del batch
    finally:
        if reading is not None:
            # a read in flight finishes on its own (its buffers stay alive with it): waiting
            # could deadlock when a garbage collection closes this generator (see io.prefetched)
            reading.shutdown(wait=False, cancel_futures=True)


def _copy_rows(buffer: np.ndarray, rows: slice | np.ndarray, pool: BufferPool) -> np.ndarray:
    """An (aligned) array of the buffer's ``rows`` from ``pool``, gathered in one copy."""
    if isinstance(rows, slice):
        out = pool.empty((rows.stop - rows.start, *buffer.shape[1:]), buffer.dtype)
        np.copyto(out, buffer[rows])
    else:
        out = pool.empty((len(rows), *buffer.shape[1:]), buffer.dtype)
        # "clip" (the rows are in range): "raise" with out= gathers through a temporary
        np.take(buffer, rows, axis=0, out=out, mode="clip")
    return out


def _fill_holes(buffers: list[np.ndarray], picked: np.ndarray, count: int) -> None:
    """After ``picked`` rows left the first ``count``, move the unpicked tail rows into
    the holes so that the rows still in the buffer are its first ``count - len(picked)``."""
    tail = count - len(picked)
    holes = picked[picked < tail]
    if not len(holes):
        return
    kept = np.ones(len(picked), bool)
    kept[picked[picked >= tail] - tail] = False
    movers = tail + np.flatnonzero(kept)
    for buf in buffers:
        buf[holes] = buf[movers]


class _Reader:
    """The reader thread's side: runs the epoch and hands batches over a bounded queue.

    It holds no reference to the loop's iterator, so dropping the iterator
    (breaking out of the loop) closes it and stops this thread.
    """

    def __init__(
        self, batches_of: Generator[tuple[np.ndarray, ...]], stop: threading.Event, prefetch: int
    ) -> None:
        self.queue: queue.Queue = queue.Queue(maxsize=prefetch)
        self.stop = stop
        self._batches = batches_of

    def _put(self, item: Any) -> bool:
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def run(self) -> None:
        try:
            for batch in self._batches:
                item = tuple(jax.device_put(batch))
                del batch
                if not self._put(item):
                    return
                del item
            self._put(_END)
        except BaseException as err:  # handed to the loop, which re-raises it
            self._put(_Failure(err))
        finally:
            self._batches.close()


class Epoch:
    """The iterator over one epoch's batches (what ``iter(loader)`` returns).

    Each item is a tuple with one ``jax.Array`` per input array.  Breaking
    out of the loop, :meth:`close`, or the end of a ``with`` block stops
    the reader thread.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> loader = oocarr.batches(np.arange(10), batch_size=4)
    >>> with iter(loader) as epoch:
    ...     [xb.tolist() for (xb,) in epoch]
    [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    >>> epoch.stats.batches
    3
    """

    def __init__(
        self,
        batches_of: Generator[tuple[np.ndarray, ...]],
        stop: threading.Event,
        prefetch: int,
        counts: IOCounts,
        site: str,
    ) -> None:
        self.stats = EpochStats()
        self._stop = stop
        self._counts = counts
        self._site = site
        self._batches = batches_of
        self._prefetch = prefetch
        self._reader: _Reader | None = None
        self._thread: threading.Thread | None = None
        self._finalizer: weakref.finalize | None = None
        self._started = time.perf_counter()
        self._done = False

    def __iter__(self) -> Epoch:
        return self

    def __next__(self) -> tuple[jax.Array, ...]:
        if self._done:
            raise StopIteration
        item = self._next_inline() if self._prefetch == 0 else self._next_queued()
        if item is _END:
            self.close()
            raise StopIteration
        if isinstance(item, _Failure):
            self.close()
            raise item.error
        if self.stats.batches == 0:
            self.stats.first_batch_seconds = time.perf_counter() - self._started
        self.stats.batches += 1
        return item

    def _next_inline(self) -> Any:
        try:
            batch = next(self._batches)
        except StopIteration:
            return _END
        except BaseException as err:
            return _Failure(err)
        return tuple(jax.device_put(batch))

    def _next_queued(self) -> Any:
        if self._thread is None:
            self._start()
        try:
            return self._reader.queue.get_nowait()
        except queue.Empty:
            pass
        waited = time.perf_counter()
        while True:
            try:
                item = self._reader.queue.get(timeout=_POLL_S)
                break
            except queue.Empty:
                if not self._thread.is_alive() and self._reader.queue.empty():
                    return _END
        if self.stats.batches and isinstance(item, tuple):
            self.stats.waits += 1
            self.stats.wait_seconds += time.perf_counter() - waited
        return item

    def _start(self) -> None:
        self._reader = _Reader(self._batches, self._stop, self._prefetch)
        self._thread = threading.Thread(target=self._reader.run, name="oocarr-batches", daemon=True)
        self._thread.start()
        self._finalizer = weakref.finalize(self, _stop_reader, self._reader, self._thread)

    @property
    def ready(self) -> int:
        """Batches read ahead and waiting in the queue."""
        if self._reader is None:
            return 0
        waiting = self._reader.queue
        with waiting.mutex:
            return sum(isinstance(item, tuple) for item in waiting.queue)

    def close(self) -> None:
        """Stop reading (the reader thread ends before this returns); idempotent."""
        if self._done:
            return
        self._done = True
        self._stop.set()
        if self._finalizer is not None:
            self._finalizer()
        else:
            self._batches.close()
        self._counts.tiles = self.stats.batches
        self.stats.blocks_read = self._counts.pages_read
        self.stats.bytes_read = self._counts.bytes_read
        record(self._site, self._counts)

    def __enter__(self) -> Epoch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _stop_reader(reader: _Reader, thread: threading.Thread) -> None:
    """Stop the reader thread and wait for it (also run when the iterator is collected)."""
    reader.stop.set()
    while thread.is_alive():
        try:
            while True:
                reader.queue.get_nowait()
        except queue.Empty:
            pass
        thread.join(_POLL_S)


class Batches:
    """Minibatches of arrays that share their leading axis; one epoch per iteration.

    Made by :func:`batches`; see there for the parameters.

    Attributes
    ----------
    epoch : int
        The epoch the next iteration runs (0 first); it sets the shuffle.
    stats : EpochStats or None
        The statistics of the latest epoch started.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> loader = oocarr.batches(np.arange(8), batch_size=3, shuffle=True, seed=0)
    >>> first = [b.tolist() for (b,) in loader]
    >>> loader.set_epoch(0)  # replay epoch 0
    >>> [b.tolist() for (b,) in loader] == first, loader.epoch
    (True, 1)
    """

    def __init__(
        self,
        arrays: tuple[Any, ...],
        batch_size: int,
        *,
        shuffle: bool = False,
        seed: int | None = None,
        drop_last: bool = False,
        prefetch: int = 2,
        shuffle_buffer: int | None = None,
    ) -> None:
        if not arrays:
            raise InvalidArgumentError("batches needs at least one array")
        self.batch_size = _positive("batch_size", batch_size)
        self.prefetch = _positive("prefetch", prefetch, zero=True)
        self.shuffle_buffer = (
            None if shuffle_buffer is None else _positive("shuffle_buffer", shuffle_buffer)
        )
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise InvalidArgumentError(f"seed must be a non-negative int or None, got {seed!r}")
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.seed = np.random.SeedSequence().entropy if seed is None else seed
        self._sources = [_Source(a, i) for i, a in enumerate(arrays)]
        rows = self._sources[0].shape[0]
        for s in self._sources[1:]:
            if s.shape[0] != rows:
                raise ShapeMismatchError(
                    f"batches: the arrays must share their leading axis, but "
                    f"{self._sources[0].name} has {rows} rows and {s.name} has {s.shape[0]}"
                )
        self.rows = rows
        self.epoch = 0
        self.stats: EpochStats | None = None

    def __len__(self) -> int:
        """Batches per epoch."""
        if self.drop_last:
            return self.rows // self.batch_size
        return -(-self.rows // self.batch_size)

    def plan(self) -> dict[str, int]:
        """Rows per block read, rows of shuffle buffer and bytes resident, under the budget
        in force in this thread (what the next epoch will use).

        Examples
        --------
        >>> import numpy as np, oocarr
        >>> loader = oocarr.batches(np.zeros((1000, 4), "f4"), batch_size=100)
        >>> loader.plan()["block_rows"] >= 1
        True
        """
        plan = self._plan()
        return {
            "block_rows": plan.block_rows,
            "buffer_rows": plan.buffer_rows,
            "resident_bytes": plan.resident_bytes,
            "resident": {b.what: b.total for b in plan.projection.items},
        }

    def _plan(self) -> _Plan:
        args = (
            self._sources,
            self.rows,
            self.batch_size,
            self.prefetch,
            self.shuffle,
            self.shuffle_buffer,
            memory_budget_bytes(),
        )
        plan = _plan(*args)
        overhead = plan.projection.items[-1].total
        # the drivers' read buffers of the blocks planned come out of the shuffle buffer's room
        return _plan(*args, overhead) if overhead else plan

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration run epoch ``epoch`` (to resume a run with its shuffles)."""
        self.epoch = _positive("epoch", epoch, zero=True)

    def __iter__(self) -> Epoch:
        plan = self._plan()
        site = call_site("batches")
        rng = None
        if self.shuffle:
            rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(self.epoch,)))
        self.epoch += 1
        counts = IOCounts(calls=1)
        counts.project(plan.resident_bytes)
        stop = threading.Event()
        reading = _read_batches(
            self._sources, self.rows, plan, self.batch_size, self.drop_last, rng, counts, stop
        )
        epoch = Epoch(reading, stop, self.prefetch, counts, site)
        self.stats = epoch.stats
        return epoch

    def __repr__(self) -> str:
        names = ", ".join(s.name for s in self._sources)
        return (
            f"<Batches of {self.batch_size} rows from {names}: {len(self)} per epoch, "
            f"shuffle={self.shuffle}, drop_last={self.drop_last}, prefetch={self.prefetch}>"
        )


def _positive(name: str, value: Any, *, zero: bool = False) -> int:
    low = 0 if zero else 1
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise InvalidArgumentError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def batches(
    *arrays: Any,
    batch_size: int,
    shuffle: bool = False,
    seed: int | None = None,
    drop_last: bool = False,
    prefetch: int = 2,
    shuffle_buffer: int | None = None,
) -> Batches:
    """Minibatches of stored (or in-memory) arrays, read ahead in a background thread.

    Iterating over the result runs one epoch: every row of the arrays
    exactly once (except the dropped remainder with ``drop_last``), in
    batches of ``batch_size`` rows.  Each item is a **tuple** of
    ``jax.Array``\\ s, one per input array and in their order, even for a
    single array (``for (xb,) in oocarr.batches(x, ...)``), like
    ``torch.utils.data.DataLoader`` over a ``TensorDataset``.

    Parameters
    ----------
    *arrays : DiskArray, BlockedArray or array-like
        Arrays with the same length of leading axis (rows), on any driver
        or in memory; the other axes may differ.
    batch_size : int
        Rows per batch.
    shuffle : bool
        Shuffle rows: the order of chunk-aligned row blocks is shuffled,
        and each batch is drawn at random from the rows of several blocks
        held in a shuffle buffer.  Rows are never read one at a time.
    seed : int, optional
        Makes the shuffles reproducible.  Epoch ``k`` uses
        ``np.random.SeedSequence(seed, spawn_key=(k,))``, so each epoch
        has its own order.  Without a seed one is drawn at random when the
        loader is made.
    drop_last : bool
        Leave out the last batch when it has fewer than ``batch_size`` rows
        (a step jitted for one batch shape then compiles once).
    prefetch : int
        Batches read ahead and queued; ``0`` reads in the loop's thread.
    shuffle_buffer : int, optional
        Most rows in the shuffle buffer; by default, what the memory budget
        leaves after the batches.

    Returns
    -------
    Batches
        An iterable with ``len()`` (batches per epoch), ``set_epoch(k)``,
        ``plan()`` and ``stats`` (an :class:`EpochStats` of the latest epoch).

    Raises
    ------
    ShapeMismatchError
        When the arrays' leading axes differ (the message names them).
    BudgetTooSmallError
        When an epoch starts and the memory budget cannot hold
        ``prefetch + 3`` batches plus a block of rows.

    Notes
    -----
    The memory budget in force where the ``for`` loop starts bounds the
    shuffle buffer, the queued batches, the batch the loop holds, the
    batch being assembled and one block of driver cache.  A larger buffer
    mixes rows from more blocks.  Reads are counted by
    :func:`oocarr.io_stats` under the loop's call site once the epoch ends
    (or the loop is left).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.arange(20.0).reshape(10, 2))
    >>> y = np.arange(10)
    >>> loader = oocarr.batches(x, y, batch_size=4, shuffle=True, seed=0)
    >>> len(loader)
    3
    >>> seen = []
    >>> for xb, yb in loader:
    ...     seen.extend(yb.tolist())
    ...     assert (np.asarray(xb)[:, 0] == 2 * np.asarray(yb)).all()
    >>> sorted(seen) == list(range(10))
    True
    """
    return Batches(
        arrays,
        batch_size,
        shuffle=shuffle,
        seed=seed,
        drop_last=drop_last,
        prefetch=prefetch,
        shuffle_buffer=shuffle_buffer,
    )
