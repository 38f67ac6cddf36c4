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

A loader's :meth:`Batches.state` resumes it at exactly the next batch
(``batches(..., state=...)``), and ``shard=`` gives each of several
processes its own contiguous, chunk-aligned range of the rows.

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
from collections.abc import Generator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypedDict

import jax
import numpy as np

from oocarr.engine import progress
from oocarr.engine.budget import memory_budget_bytes
from oocarr.engine.host_put import HostPut
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
from oocarr.jaxlayer.disk_array import AnyArray, DiskArray
from oocarr.store.blocked import BlockedArray
from oocarr.store.buffers import BufferPool, aligned_empty
from oocarr.store.pages import DEFAULT_CHUNK_BYTES, DEFAULT_PAGE_BYTES

__all__ = ["batches", "Batches", "Epoch", "EpochStats"]

#: What :meth:`Batches.state` returns is marked with this, and checked on resume.
STATE_FORMAT = "oocarr.batches/1"
STATE_KEYS = (
    "format",
    "shard",
    "seed",
    "epoch",
    "batch",
    "rows",
    "batch_size",
    "shuffle",
    "drop_last",
    "shuffle_buffer",
    "block_rows",
    "buffer_rows",
)

#: A shuffle buffer of at least this many blocks (and a batch) refills the rows each batch
#: draws from a staging block, one row write each, instead of moving its last rows into the
#: holes and appending whole blocks (a random read and a random write per row).  One epoch
#: of 4M×256 float32 HDF5 rows, 1024-row batches, a 480,678-row buffer: reader thread's hole
#: moves 1.45 s and whole-epoch 4.7-5.0 s before; see docs/performance.md for after.
STAGING_BLOCKS = 4
#: Largest ratio of bytes read to bytes used when picking the row-block unit: blocks
#: smaller than some input's chunks make that input's chunks be read more than once.
READ_OVERHEAD = 1.25
#: Bytes a shuffle-buffer row keeps for a resumed epoch, which replays the draws up to its
#: batch on row numbers (8 bytes a row) and then reads the rows in order (their order and
#: their sorted numbers, 8 bytes each).
REPLAY_BYTES = 24
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


class BatchesPlan(TypedDict):
    """What :meth:`Batches.plan` returns."""

    #: Rows per block read.
    block_rows: int
    #: Rows of the shuffle buffer.
    buffer_rows: int
    #: Bytes resident at once.
    resident_bytes: int
    #: Those bytes by what holds them.
    resident: dict[str, int]


@dataclass(frozen=True)
class _Plan:
    """Rows per block read, rows of shuffle buffer, and the bytes they and the batches take;
    ``piece_rows``: rows per read when a resumed epoch refills its buffer, in the room of the
    batches it does not hold yet."""

    block_rows: int
    buffer_rows: int
    resident_bytes: int
    batches_held: int
    projection: Projection
    unit: int = 1
    piece_rows: int = 1


class _Source:
    """One input: a stored array read in row blocks, or an in-memory array."""

    def __init__(self, value: Any, position: int) -> None:
        if isinstance(value, DiskArray):
            value = value.store
        self.store: BlockedArray | None = value if isinstance(value, BlockedArray) else None
        held = self.store if self.store is not None else np.asarray(value)
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
        # what rows are read from: the in-memory array, or the store (paged by ``pages``)
        self._rows: BlockedArray | np.ndarray = held

    def pages(self, block_rows: int) -> None:
        """Tell the store the block shape it will be read in (it sizes its caches from it)."""
        if self.store is not None:
            self._rows = self.store.with_pages((max(1, block_rows), *self.row_shape))

    def read(self, start: int, stop: int, out: np.ndarray, counts: IOCounts) -> None:
        """Fill ``out`` with rows ``start:stop``."""
        rows = self._rows
        if isinstance(rows, np.ndarray):  # in memory
            np.copyto(out, rows[start:stop])
            return
        region = (slice(start, stop), *(slice(0, n) for n in self.row_shape))
        rows.read_region(region, out=out)
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
    replay = REPLAY_BYTES if shuffle else 0
    if shuffle:  # each buffer row also keeps room for its row number in a resumed epoch
        free_rows = (usable - batches_bytes - unit * row_bytes) // (row_bytes + replay)
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
    overhead = _read_overhead(sources, block)
    projection = _projection(
        "batches", prefetch, batch_rows * row_bytes, buffer_rows, unit, row_bytes, overhead, replay
    )
    held = prefetch + EXTRA_BATCHES
    piece = max(1, min(unit, held * batch_rows))
    return _Plan(block, buffer_rows, projection.nbytes, held, projection, unit, piece)


def _read_overhead(sources: list[_Source], block: int) -> int:
    """Bytes the drivers hold besides the buffers while reading a block of ``block`` rows."""
    return sum(s.store.read_overhead((block, *s.row_shape)) for s in sources if s.store)


def _projection(
    name: str,
    prefetch: int,
    batch_bytes: int,
    buffer_rows: int,
    unit: int,
    row_bytes: int,
    overhead: int = 0,
    replay: int = 0,
) -> Projection:
    """What an epoch holds at once: batches queued and in hand, the shuffle buffer (and
    ``replay`` bytes a row of it for a resumed epoch's row numbers), and one block unit of
    driver cache (HDF5 keeps the chunks of the last block read)."""
    items = (
        Buffers("batches queued (prefetch)", prefetch, batch_bytes),
        Buffers("batches in hand, assembled, and their device copy", EXTRA_BATCHES, batch_bytes),
        Buffers("shuffle buffer", 1, buffer_rows * row_bytes),
        Buffers("row numbers of a resumed epoch's replay", 1, buffer_rows * replay),
        Buffers("driver cache of the last block read", 1, unit * row_bytes),
        Buffers("drivers' read buffers (encoded and decoding chunks)", 1, overhead),
    )
    return Projection(name, items)


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
    skip: int = 0,
    lo: int = 0,
    limit: int | None = None,
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

    With ``skip``, the epoch resumes at batch ``skip``.  In order, it starts at
    row ``skip * batch_size``.  Shuffled, the first ``skip`` batches are
    replayed on row numbers alone (the same draws, nothing read), then the
    rows the buffers hold at that point are read, a piece at a time in row
    order, and the epoch goes on as if it had never stopped.

    Only rows ``lo:rows`` are read (a shard's), and at most ``limit`` batches
    are made.
    """
    size, cap = plan.block_rows, plan.buffer_rows
    # in order, batch ``skip`` starts at row ``lo + skip * batch_size``: nothing to replay
    in_order = rng is None
    first_row = lo + skip * batch_size if in_order else lo
    drawn = skip if in_order else 0  # batches made, those resumed past included
    skip = 0 if in_order else skip
    starts = list(range(first_row, rows, size))
    order = rng.permutation(len(starts)) if rng is not None else range(len(starts))
    staged_rows = size if rng is not None and cap >= STAGING_BLOCKS * size + batch_size else 0
    cap -= 2 * staged_rows  # two staging blocks are carved out of the planned buffer

    def data(n: int) -> list[np.ndarray]:
        # mapped directly (from 1 MiB): unmapped when the epoch ends, not left in the heap
        return [aligned_empty((n, *s.row_shape), s.dtype) for s in sources]

    # While replaying, the buffers hold row numbers (``ids``, and ``id_stage`` of the staging
    # blocks) and no data: those are set exactly while ``replaying``.
    replaying = skip > 0
    ids = np.empty(cap, np.int64) if replaying else None
    id_stage = [np.empty(staged_rows, np.int64) if replaying else None for _ in "ab"]
    buffers = [] if replaying else data(cap)
    staging = [[] if replaying else data(staged_rows) for _ in "ab"]
    staged_block = [-1, -1]  # which block of ``order`` each staging block holds
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

    def read_block(block: int, into: list[np.ndarray], at: int, into_ids: Any = None) -> int:
        first = starts[order[block]]
        last = min(first + size, rows)
        if into_ids is not None:
            into_ids[at : at + last - first] = np.arange(first, last)
        for source, buf in zip(sources, into):
            source.read(first, last, buf[at : at + last - first], counts)
        return last - first

    def read_ahead() -> None:
        nonlocal ahead, next_block
        ahead = None
        other = 1 - current
        staged_block[other] = -1
        if next_block < len(starts):
            staged_block[other] = next_block
            assert reading is not None  # staging blocks are read ahead only with staged_rows
            ahead = reading.submit(read_block, next_block, staging[other], 0, id_stage[other])
            next_block += 1

    def next_staging() -> None:
        nonlocal staged, taken, current
        if ahead is None:
            read_ahead()
        # the callers check that a block is being read or is left to read
        assert ahead is not None
        staged, taken = ahead.result(), 0
        current = 1 - current
        read_ahead()

    def resume() -> None:
        """Read the data of every row the replay left in the buffers."""
        nonlocal buffers, staging, replaying, ids
        assert ids is not None  # replaying
        if ahead is not None:
            ahead.result()
        buffers = data(cap)
        staging = [data(staged_rows) for _ in "ab"]
        for k in (0, 1):
            if staged_block[k] >= 0:
                read_block(staged_block[k], staging[k], 0)
        held_ids = ids[begin : begin + count]
        _read_rows_at(sources, buffers, held_ids, begin, (lo, rows), plan.piece_rows, counts)
        replaying = False
        ids = None  # noqa: F841 (the row numbers are not needed any more)
        id_stage[:] = [None, None]

    try:
        while not stop.is_set():
            while next_block < len(starts) and count + size <= cap and ahead is None:
                first = starts[order[next_block]]
                last = min(first + size, rows)
                if begin + count + (last - first) > cap:  # in order: move the rest to the front
                    for buf in (*buffers, *([ids] if ids is not None else [])):
                        buf[:count] = buf[begin : begin + count]
                    begin = 0
                count += read_block(next_block, buffers, begin + count, ids if replaying else None)
                next_block += 1
                if stop.is_set():
                    return
            more = ahead is not None or next_block < len(starts)
            if staged_rows and taken == staged and more:
                next_staging()
            exhausted = taken == staged and ahead is None and next_block == len(starts)
            if count < batch_size and not (exhausted and count and not drop_last):
                return
            if limit is not None and drawn >= limit:
                return
            if replaying and drawn == skip:
                resume()
            held = [*buffers, *([ids] if ids is not None else [])]
            stage_ids = id_stage[current]
            stages = [*staging[current], *([stage_ids] if stage_ids is not None else [])]
            take = min(batch_size, count)
            batch = None
            if rng is None:
                front = slice(begin, begin + take)
                if not replaying:
                    batch = tuple(_copy_rows(b, front, pool) for b, pool in zip(buffers, pools))
                begin, count = (begin + take, count - take) if count > take else (0, 0)
            else:
                picked = rng.choice(count, size=take, replace=False)
                if not replaying:
                    batch = tuple(_copy_rows(b, picked, pool) for b, pool in zip(buffers, pools))
                refill = 0  # the staging block's next rows take the drawn rows' places
                while refill < take and staged_rows:
                    if taken == staged:
                        if ahead is None and next_block == len(starts):
                            break
                        next_staging()
                        stage_ids = id_stage[current]
                        stages = [
                            *staging[current],
                            *([stage_ids] if stage_ids is not None else []),
                        ]
                    n = min(take - refill, staged - taken)
                    for buf, stage in zip(held, stages):
                        buf[picked[refill : refill + n]] = stage[taken : taken + n]
                    refill, taken = refill + n, taken + n
                _fill_holes(held, picked[refill:], count)
                count -= take - refill
            drawn += 1
            if batch is not None:
                yield batch
            del batch
    finally:
        if reading is not None:
            # a read in flight finishes on its own (its buffers stay alive with it): waiting
            # could deadlock when a garbage collection closes this generator (see io.prefetched)
            reading.shutdown(wait=False, cancel_futures=True)


def _read_rows_at(
    sources: list[_Source],
    buffers: list[np.ndarray],
    row_ids: np.ndarray,
    first: int,
    span: tuple[int, int],
    piece_rows: int,
    counts: IOCounts,
) -> None:
    """Fill ``buffers[first + i]`` with row ``row_ids[i]`` for each ``i``, read in row order a
    piece of ``piece_rows`` rows at a time within rows ``span`` (pieces holding none of them
    are not read)."""
    if not len(row_ids):
        return
    positions = np.argsort(row_ids, kind="stable")
    row_ids = row_ids[positions]
    positions += first
    pieces = [aligned_empty((piece_rows, *s.row_shape), s.dtype) for s in sources]
    i = 0
    while i < len(row_ids):
        start = max(span[0], int(row_ids[i]) - int(row_ids[i]) % piece_rows)
        stop = min(start + piece_rows, span[1])
        j = int(np.searchsorted(row_ids, stop))
        for source, piece, buf in zip(sources, pieces, buffers):
            source.read(start, stop, piece[: stop - start], counts)
            buf[positions[i:j]] = piece[row_ids[i:j] - start]
        i = j


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
        self,
        batches_of: Generator[tuple[np.ndarray, ...]],
        stop: threading.Event,
        prefetch: int,
        put: HostPut,
    ) -> None:
        self.queue: queue.Queue = queue.Queue(maxsize=prefetch)
        self.stop = stop
        self._batches = batches_of
        self._put_on_device = put

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
                item = self._put_on_device(batch)
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
        position: dict[str, Any] | None = None,
        per_epoch: int = 0,
        on_close: Any = None,
        target: Any = None,
    ) -> None:
        self.stats = EpochStats()
        # the loader's state at this epoch's start (its "batch": where this epoch resumed)
        self._position = dict(position or {"epoch": 0, "batch": 0})
        self._per_epoch = per_epoch
        self._on_close = on_close
        # places each batch where jax.device_put(batch, target) would (a device, a sharding)
        self._put = HostPut(target)
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
        # one bar per epoch: the batches this iteration hands out
        label = f"{site} epoch {self._position['epoch']}"
        remaining = per_epoch - self._position["batch"] if per_epoch else None
        self._bar = progress.start(label, remaining, counts, unit="batch")

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
        if self._bar is not None:
            self._bar.advance()
        return item

    def state(self) -> dict[str, Any]:
        """Where this epoch stands, as a small JSON-able dict: the loader's
        :meth:`Batches.state` after the batches handed out so far.

        Examples
        --------
        >>> import numpy as np, oocarr
        >>> epoch = iter(oocarr.batches(np.arange(10), batch_size=4, seed=3))
        >>> _ = next(epoch)
        >>> s = epoch.state(); s["epoch"], s["batch"]
        (0, 1)
        """
        state = dict(self._position)
        state["batch"] += self.stats.batches
        if state["batch"] >= self._per_epoch:
            state["epoch"], state["batch"] = state["epoch"] + 1, 0
        return state

    def _next_inline(self) -> Any:
        try:
            batch = next(self._batches)
        except StopIteration:
            return _END
        except BaseException as err:
            return _Failure(err)
        return self._put(batch)

    def _next_queued(self) -> Any:
        reader, thread = self._reader, self._thread
        if reader is None or thread is None:  # both set by _start
            reader, thread = self._start()
        try:
            return reader.queue.get_nowait()
        except queue.Empty:
            pass
        waited = time.perf_counter()
        while True:
            try:
                item = reader.queue.get(timeout=_POLL_S)
                break
            except queue.Empty:
                if not thread.is_alive() and reader.queue.empty():
                    return _END
        if self.stats.batches and isinstance(item, tuple):
            self.stats.waits += 1
            self.stats.wait_seconds += time.perf_counter() - waited
        return item

    def _start(self) -> tuple[_Reader, threading.Thread]:
        reader = _Reader(self._batches, self._stop, self._prefetch, self._put)
        thread = threading.Thread(target=reader.run, name="oocarr-batches", daemon=True)
        self._reader, self._thread = reader, thread
        thread.start()
        self._finalizer = weakref.finalize(self, _stop_reader, reader, thread)
        return reader, thread

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
        if self._on_close is not None:
            self._on_close(self.state())
        self._counts.tiles = self.stats.batches
        self.stats.blocks_read = self._counts.pages_read
        self.stats.bytes_read = self._counts.bytes_read
        record(self._site, self._counts)
        if self._bar is not None:
            self._bar.close()

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
    shard : tuple of int
        ``(index, count)``: the shard of the rows this loader yields (``(0, 1)``: all).
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
        state: Mapping[str, Any] | None = None,
        shard: tuple[int, int] | str | None = None,
        device: Any = None,
        sharding: Any = None,
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
        if seed is None:
            entropy = np.random.SeedSequence().entropy
            # drawn, it is an int (NumPy's stubs type the entropy one may pass in)
            assert isinstance(entropy, int)
            self.seed = entropy
        else:
            self.seed = seed
        self._sources = [_Source(a, i) for i, a in enumerate(arrays)]
        rows = self._sources[0].shape[0]
        for s in self._sources[1:]:
            if s.shape[0] != rows:
                raise ShapeMismatchError(
                    f"batches: the arrays must share their leading axis, but "
                    f"{self._sources[0].name} has {rows} rows and {s.name} has {s.shape[0]}"
                )
        self.rows = rows
        self.shard = _shard(shard)
        self._bounds = _shard_bounds(
            rows, _shard_align(self._sources, rows, self.shard[1]), self.shard[1]
        )
        self._lo, self._hi = self._bounds[self.shard[0]], self._bounds[self.shard[0] + 1]
        self.epoch = 0
        self._target = _placement(device, sharding, self._sources, self._batch_sizes())
        self.stats: EpochStats | None = None
        self._skip = 0  # batches of the next epoch already handed out (a resumed state)
        self._fixed: tuple[int, int] | None = None  # block and buffer rows of a resumed state
        self._latest: weakref.ref[Epoch] | None = None
        self._closed_state: dict[str, Any] | None = None
        if state is not None:
            self._restore(state, seed)

    def _batch_sizes(self) -> set[int]:
        """The numbers of rows the batches of an epoch have."""
        own = self._hi - self._lo
        sizes = {self.batch_size} if own >= self.batch_size else set()
        if own % self.batch_size and not self.drop_last:
            sizes.add(own % self.batch_size)
        return sizes

    def __len__(self) -> int:
        """Batches per epoch (of this shard)."""
        if self.drop_last:  # every shard makes as many batches as the smallest can fill
            return min(b - a for a, b in zip(self._bounds, self._bounds[1:])) // self.batch_size
        return -(-(self._hi - self._lo) // self.batch_size)

    def plan(self) -> BatchesPlan:
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
        budget = memory_budget_bytes()
        args = (
            self._sources,
            self._hi - self._lo,
            self.batch_size,
            self.prefetch,
            self.shuffle,
            self.shuffle_buffer,
            budget,
        )
        plan = _plan(*args)
        overhead = plan.projection.items[-1].total
        # the drivers' read buffers of the blocks planned come out of the shuffle buffer's room
        plan = _plan(*args, overhead) if overhead else plan
        fixed = self._fixed
        return plan if fixed is None else self._fixed_plan(plan, budget, fixed)

    def _fixed_plan(self, plan: _Plan, budget: int, fixed: tuple[int, int]) -> _Plan:
        """The blocks and shuffle buffer of the state this loader resumed from (``fixed``: the
        shuffle depends on them), checked against ``budget``."""
        block, buffer_rows = fixed
        row_bytes = max(1, sum(s.row_bytes for s in self._sources))
        batch_bytes = min(self.batch_size, max(self._hi - self._lo, 1)) * row_bytes
        overhead = _read_overhead(self._sources, block)
        projection = _projection(
            f"batches resumed from a saved state, whose shuffle depends on its blocks of "
            f"{block} rows and shuffle buffer of {buffer_rows} rows",
            self.prefetch,
            batch_bytes,
            buffer_rows,
            plan.unit,
            row_bytes,
            overhead,
            REPLAY_BYTES,
        )
        require(
            projection,
            budget,
            remedy="with oocarr.set_memory_budget (the budget the state was saved under "
            "was large enough), or start the epoch afresh without state=",
        )
        return _Plan(
            block,
            buffer_rows,
            projection.nbytes,
            plan.batches_held,
            projection,
            plan.unit,
            plan.piece_rows,
        )

    def state(self) -> dict[str, Any]:
        """Where this loader stands, as a small JSON-able dict, for resuming with
        ``batches(..., state=...)`` at exactly the next batch.

        It holds the seed, the epoch and the batches of it already handed out
        (``batch``), and what the order depends on besides: ``rows``,
        ``batch_size``, ``shuffle``, ``drop_last``, ``shuffle_buffer`` and,
        when shuffled, the rows per block read and of the shuffle buffer the
        epoch runs with (``block_rows``, ``buffer_rows``; by default the memory
        budget sets them).  The order never depends on thread timing or
        ``prefetch``.

        Examples
        --------
        >>> import json, numpy as np, oocarr
        >>> loader = oocarr.batches(np.arange(10), batch_size=4, shuffle=True, seed=7)
        >>> for i, (b,) in enumerate(loader):
        ...     if i == 1:
        ...         saved = json.dumps(loader.state())
        ...         break
        >>> rest = [b.tolist() for (b,) in oocarr.batches(
        ...     np.arange(10), batch_size=4, shuffle=True, state=json.loads(saved))]
        >>> everything = [b.tolist() for (b,) in oocarr.batches(
        ...     np.arange(10), batch_size=4, shuffle=True, seed=7)]
        >>> rest == everything[2:]
        True
        """
        epoch = self._latest() if self._latest is not None else None
        if epoch is not None and not epoch._done:
            return epoch.state()
        if self._closed_state is not None:
            return dict(self._closed_state)
        if self._fixed is not None:
            return self._position(self.epoch, self._skip, *self._fixed)
        plan = self._plan()
        return self._position(self.epoch, self._skip, plan.block_rows, plan.buffer_rows)

    def _position(self, epoch: int, batch: int, block: int, buffer: int) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "seed": int(self.seed),
            "epoch": epoch,
            "batch": batch,
            "rows": self.rows,
            "batch_size": self.batch_size,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "shuffle_buffer": self.shuffle_buffer,
            "shard": list(self.shard),
            "block_rows": block if self.shuffle else None,
            "buffer_rows": buffer if self.shuffle else None,
        }

    def _restore(self, state: Mapping[str, Any], seed: int | None) -> None:
        """Take up ``state`` (what :meth:`state` returned), after checking it fits."""
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            raise InvalidArgumentError(
                f"batches: state= must be what Batches.state() returned (a dict with "
                f"format={STATE_FORMAT!r}), got {state!r:.200}"
            )
        missing = sorted(set(STATE_KEYS) - set(state))
        if missing:
            raise InvalidArgumentError(f"batches: state= lacks {', '.join(missing)}")
        mine = {
            "rows": self.rows,
            "batch_size": self.batch_size,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "shard": list(self.shard),
        }
        if seed is not None:
            mine["seed"] = seed
        if self.shuffle_buffer is not None:
            mine["shuffle_buffer"] = self.shuffle_buffer
        differ = [f"{k}={state[k]!r} there, {v!r} here" for k, v in mine.items() if state[k] != v]
        if differ:
            raise InvalidArgumentError(
                f"batches: state= was saved by a loader made differently ({'; '.join(differ)}); "
                f"make this one as that one was to resume its order"
            )
        self.seed = _positive("state['seed']", state["seed"], zero=True)
        self.shuffle_buffer = state["shuffle_buffer"]
        self.epoch = _positive("state['epoch']", state["epoch"], zero=True)
        self._skip = _positive("state['batch']", state["batch"], zero=True)
        if self._skip >= max(len(self), 1):
            raise InvalidArgumentError(
                f"batches: state['batch'] is {self._skip}, but an epoch has {len(self)} batches"
            )
        if self.shuffle:
            self._fixed = (
                _positive("state['block_rows']", state["block_rows"]),
                _positive("state['buffer_rows']", state["buffer_rows"]),
            )

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration run epoch ``epoch`` from its start (to replay or skip
        epochs; :meth:`state` resumes mid-epoch)."""
        self.epoch = _positive("epoch", epoch, zero=True)
        self._skip = 0
        self._latest = self._closed_state = None

    def _epoch_closed(self, state: dict[str, Any]) -> None:
        self._closed_state = state

    def __iter__(self) -> Epoch:
        plan = self._plan()
        site = call_site("batches")
        number, skip = self.epoch, self._skip
        rng = None
        if self.shuffle:
            # each shard shuffles its own rows; one shard keeps the unsharded order
            key = (number,) if self.shard[1] == 1 else (number, self.shard[0])
            rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=key))
        self.epoch, self._skip = number + 1, 0
        counts = IOCounts(calls=1)
        counts.project(plan.resident_bytes)
        stop = threading.Event()
        reading = _read_batches(
            self._sources,
            self._hi,
            plan,
            self.batch_size,
            self.drop_last,
            rng,
            counts,
            stop,
            skip,
            self._lo,
            len(self),
        )
        epoch = Epoch(
            reading,
            stop,
            self.prefetch,
            counts,
            site,
            self._position(number, skip, plan.block_rows, plan.buffer_rows),
            len(self),
            self._epoch_closed,
            self._target,
        )
        self.stats = epoch.stats
        self._latest, self._closed_state = weakref.ref(epoch), None
        return epoch

    def __repr__(self) -> str:
        names = ", ".join(s.name for s in self._sources)
        return (
            f"<Batches of {self.batch_size} rows from {names}: {len(self)} per epoch, "
            f"shuffle={self.shuffle}, drop_last={self.drop_last}, prefetch={self.prefetch}"
            + (f", shard={self.shard}>" if self.shard[1] > 1 else ">")
        )


def _placement(device: Any, sharding: Any, sources: list[_Source], sizes: set[int]) -> Any:
    """Where ``jax.device_put`` puts each batch: ``device``, ``sharding`` (checked to split
    every batch the epoch makes), or ``None`` (JAX's default device)."""
    if device is not None and sharding is not None:
        raise InvalidArgumentError("batches: give device= or sharding=, not both")
    if device is not None:
        if not isinstance(device, jax.Device):
            raise InvalidArgumentError(
                f"batches: device= must be a jax.Device (e.g. jax.devices()[0]), got {device!r}"
            )
        return device
    if sharding is None:
        return None
    if not isinstance(sharding, jax.sharding.Sharding):
        raise InvalidArgumentError(
            f"batches: sharding= must be a jax.sharding.Sharding (e.g. NamedSharding(mesh, "
            f"PartitionSpec('data'))), got {sharding!r}"
        )
    for rows in sorted(sizes):
        for s in sources:
            try:
                sharding.shard_shape((rows, *s.row_shape))
            except ValueError as err:
                raise InvalidArgumentError(
                    f"batches: a batch of {rows} rows of {s.name} cannot be split by "
                    f"sharding= ({err}); choose a batch_size the devices divide, and "
                    f"drop_last=True when the last batch is smaller"
                ) from None
    return sharding


def _shard(shard: tuple[int, int] | str | None) -> tuple[int, int]:
    """``(index, count)`` of ``shard=`` (``"jax"``: this JAX process among all of them)."""
    if shard is None:
        return (0, 1)
    if shard == "jax":
        return (jax.process_index(), jax.process_count())
    if (
        isinstance(shard, (tuple, list))
        and len(shard) == 2
        and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in shard)
        and 0 <= shard[0] < shard[1]
    ):
        return (int(shard[0]), int(shard[1]))
    raise InvalidArgumentError(
        f"batches: shard= must be (index, count) with 0 <= index < count, or 'jax' for "
        f"(jax.process_index(), jax.process_count()); got {shard!r}"
    )


def _shard_align(sources: list[_Source], rows: int, count: int) -> int:
    """Rows the shard boundaries are multiples of, so that no stored chunk is read by two
    shards: every input's row chunks where that leaves each shard some rows, else the
    chunks of the input with the most bytes a row, else single rows."""
    chunks = [s.chunk_rows for s in sources if s.chunk_rows]
    if count == 1 or not chunks:
        return 1
    every = math.lcm(*chunks)
    if every * count <= rows:
        return every
    chunked = [(s.row_bytes, s.chunk_rows) for s in sources if s.chunk_rows]
    _, heaviest = max(chunked, key=lambda c: c[0])
    return heaviest if heaviest * count <= rows else 1


def _shard_bounds(rows: int, align: int, count: int) -> list[int]:
    """The first row of each of ``count`` contiguous shards, and ``rows``: equal to within
    ``align`` rows, at multiples of it (the last shard takes what is left).

    Examples
    --------
    >>> _shard_bounds(100, 8, 3), _shard_bounds(10, 1, 4)
    ([0, 32, 64, 100], [0, 2, 5, 7, 10])
    """
    return [i * rows // count // align * align for i in range(count)] + [rows]


def _positive(name: str, value: Any, *, zero: bool = False) -> int:
    low = 0 if zero else 1
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise InvalidArgumentError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def batches(
    *arrays: AnyArray | BlockedArray,
    batch_size: int,
    shuffle: bool = False,
    seed: int | None = None,
    drop_last: bool = False,
    prefetch: int = 2,
    shuffle_buffer: int | None = None,
    state: Mapping[str, Any] | None = None,
    shard: tuple[int, int] | str | None = None,
    device: jax.Device | None = None,
    sharding: jax.sharding.Sharding | None = None,
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
    state : dict, optional
        What :meth:`Batches.state` returned (JSON-able): the loader resumes
        at exactly the batch after the last one handed out then, and the
        batches that follow are bitwise those of an uninterrupted run.  The
        arrays' rows and the other arguments must be as they were (the seed
        is taken from the state); a shuffled state also fixes the block and
        shuffle-buffer sizes, and a memory budget too small for them raises
        ``BudgetTooSmallError`` saying so.
    shard : (int, int) or "jax", optional
        ``(index, count)``: this loader yields shard ``index`` of ``count``,
        a contiguous range of rows whose ends are multiples of the inputs'
        row chunks (so no chunk is read by two shards), the ranges equal to
        within a chunk.  The shards of an epoch are disjoint and together hold
        every row once; each shuffles its own rows, with its own order per
        epoch.  With ``drop_last``, every shard makes the same number of
        batches, as many as the smallest shard fills, so that data-parallel
        processes take the same number of steps (the rows left over in each
        shard are dropped).  ``"jax"`` is ``(jax.process_index(),
        jax.process_count())``.
    device : jax.Device, optional
        Put every batch on this device (in the reading thread, ahead of the
        loop) instead of JAX's default one.
    sharding : jax.sharding.Sharding, optional
        Put every batch with this sharding, e.g. ``NamedSharding(mesh,
        PartitionSpec("data"))`` to split its rows over the local devices for
        data parallelism.  Every batch of an epoch must split evenly (use
        ``drop_last=True`` for a smaller last batch); the copies to the
        devices run in the reading thread, ``prefetch`` batches ahead.

    Returns
    -------
    Batches
        An iterable with ``len()`` (batches per epoch), ``set_epoch(k)``,
        ``plan()``, ``state()`` and ``stats`` (an :class:`EpochStats` of the
        latest epoch).

    Raises
    ------
    ShapeMismatchError
        When the arrays' leading axes differ (the message names them).
    BudgetTooSmallError
        When an epoch starts and the memory budget cannot hold
        ``prefetch + 3`` batches plus a block of rows (or, resuming a
        shuffled ``state``, its shuffle buffer).
    InvalidArgumentError
        When ``state`` is not a loader state, or was saved by a loader made
        with other arguments or arrays of another length.

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
        state=state,
        shard=shard,
        device=device,
        sharding=sharding,
    )
