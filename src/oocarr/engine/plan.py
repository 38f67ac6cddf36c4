"""The one memory model: what a streamer holds at once, projected before any I/O.

Every streamer (an op's forward and backward loops, ``stream_sum``,
``batches``, the optax adapter, ``save``/``convert`` copies, the CLI's
statistics) describes the buffers it will hold at once as a
:class:`Projection`, itemised (input tiles in flight, prefetch,
accumulators, write-behind, shuffle buffer ...), and hands it to
:func:`require` before it reads anything.  :func:`require` is the one place
:class:`~oocarr.errors.BudgetTooSmallError` is raised (for the other limits too: the
memory ``to_numpy`` may allocate, a Dask worker's memory per task); the projection of the
plan actually run is recorded with the call's I/O counters
(``io_stats().by_site[site].projected_bytes``), so a peak can be checked
against it.

The constants below are the engine's own buffers, counted per call.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from oocarr.errors import BudgetTooSmallError
from oocarr.store import pages

__all__ = [
    "BLOCK_SHARE",
    "COPY_TILES",
    "EXTRA_BATCHES",
    "FOLD_GROUP_BYTES",
    "INPUT_TILES",
    "MAX_READ_AHEAD",
    "STATS_TILES",
    "STREAM_SUM_TILES",
    "STREAM_SUM_TILE_BYTES",
    "WRITE_BEHIND_TILES",
    "RESERVED_BYTES",
    "RESERVE_FROM",
    "Buffers",
    "Projection",
    "chunk_tile",
    "least_read_buffers",
    "require",
    "reserved",
    "tile_budget",
    "tile_for",
]

#: Tile-sized buffers the engine adds to an op's own residency: the write-behind tile
#: (prefetched input blocks are counted per input).
WRITE_BEHIND_TILES = 1
#: Tiles per stored input besides the op's own: read ahead, and still held by XLA.
INPUT_TILES = 2
#: Most steps a streamer reads at once (see ``OOCAlgorithm.read_ahead``).
MAX_READ_AHEAD = 4
#: Bytes of a budget kept for what a call holds besides its planned buffers (the Python and
#: XLA working memory of a step, thread stacks, allocator granularity): Cubed's
#: ``reserved_mem``.  Tiles are sized from the rest.  A budget of at most
#: :data:`RESERVE_FROM` bytes (a test's, counting tiles) keeps nothing; above it a third of the
#: excess is kept, up to ``RESERVED_BYTES``.
RESERVED_BYTES = 8 * 2**20
RESERVE_FROM = 2**20
#: ``stream_sum``'s row tiles: the one computed, the next one read, JAX's own copy of the
#: current one, and one more for ``fn``'s intermediates (or the padded last tile).
STREAM_SUM_TILES = 4
#: ``stream_sum``'s row tiles hold at most this many bytes of rows, however large the budget:
#: a 1 GiB least squares ran in 130 ms with tiles of 2-12 MiB and 280 ms with 9 tiles of
#: 110 MiB (the first read and the last step not overlapped, fresh buffers faulted in).
STREAM_SUM_TILE_BYTES = 8 * 2**20
#: Input bytes of one fold group: a tile whose steps read more is folded in groups of steps
#: this size, each group's partial merged into the tile's total in order, so a reduction to one
#: tile is several tasks on a cluster (the local loop folds the same groups: the same bits).
#: 128 MiB: a 1 TiB sum is 8192 tasks, about 15 s of a Dask scheduler's time.
FOLD_GROUP_BYTES = 128 * 2**20
#: ``batches``: batch-sized buffers besides the ``prefetch`` queued ones: the batch the loop
#: holds, and the one the reader assembles (its NumPy buffer plus a device copy where JAX
#: does not use the buffer in place).
EXTRA_BATCHES = 3
#: ``batches``: at most this share of the budget goes to one chunk-aligned block of rows.
BLOCK_SHARE = 8
#: A copy (``save``, ``convert``) reads ahead and writes behind: it holds the tile read ahead,
#: the one handed to the writer, the one being written, the source's chunk cache (HDF5 keeps
#: two tiles' chunks) and the destination's encoded chunks with their encoding buffers (measured:
#: 7 tiles' worth converting chunked HDF5 to zstd Zarr).
COPY_TILES = 7
#: Statistics (``inspect --stats``) hold the tile, its float64 copy and temporaries of it.
STATS_TILES = 8


@dataclass(frozen=True)
class Buffers:
    """``count`` buffers of ``nbytes`` each, held at once for one purpose (``what``)."""

    what: str
    count: int
    nbytes: int

    @property
    def total(self) -> int:
        """Bytes of all ``count`` buffers."""
        return self.count * self.nbytes

    def __str__(self) -> str:
        return f"{self.count} x {self.nbytes} bytes of {self.what}"


@dataclass(frozen=True)
class Projection:
    """The buffers one streamer call holds at once, itemised.

    Examples
    --------
    >>> p = Projection("sum", (Buffers("op tiles", 3, 100), Buffers("read ahead", 2, 100)))
    >>> p.nbytes
    500
    >>> print(p)
    sum: 500 bytes = 3 x 100 bytes of op tiles + 2 x 100 bytes of read ahead
    """

    streamer: str
    items: tuple[Buffers, ...]

    @property
    def nbytes(self) -> int:
        """Projected resident bytes: every item's total."""
        return sum(b.total for b in self.items)

    @property
    def buffers(self) -> int:
        """How many buffers the items hold together."""
        return sum(b.count for b in self.items)

    def plus(self, *items: Buffers) -> Projection:
        """This projection with ``items`` added.

        Examples
        --------
        >>> Projection("sum", (Buffers("op tiles", 3, 100),)).plus(Buffers("x", 1, 7)).nbytes
        307
        """
        return Projection(self.streamer, (*self.items, *items))

    def scaled(self, nbytes_each: int) -> Projection:
        """The same buffers with every buffer ``nbytes_each`` bytes (a plan of uniform tiles)."""
        return Projection(
            self.streamer, tuple(Buffers(b.what, b.count, nbytes_each) for b in self.items)
        )

    def __str__(self) -> str:
        parts = " + ".join(str(b) for b in self.items if b.count)
        return f"{self.streamer}: {self.nbytes} bytes = {parts}"


def reserved(budget: int) -> int:
    """The part of ``budget`` kept out of tile sizing: :data:`RESERVED_BYTES`, or a third of
    what a small budget has above :data:`RESERVE_FROM`.

    Examples
    --------
    >>> reserved(512 * 2**20) == RESERVED_BYTES, reserved(24_000_000), reserved(4096)
    (True, 7650474, 0)
    """
    return min(RESERVED_BYTES, max(0, budget - RESERVE_FROM) // 3)


def tile_budget(budget: int, least: int = 0, overhead: int = 0) -> int:
    """The bytes a plan may spend on its tile buffers under ``budget``: all but :func:`reserved`
    and the drivers' read buffers (``overhead``), and at least ``least`` (the smallest plan,
    which :func:`require` already checked fits).  A budget of at most :data:`RESERVE_FROM`
    bytes is all tiles.

    Examples
    --------
    >>> tile_budget(64 * 2**20) == 56 * 2**20, tile_budget(64 * 2**20, overhead=2**20) // 2**20
    (True, 55)
    >>> tile_budget(30, least=28), tile_budget(4096, overhead=1000)
    (30, 4096)
    """
    if budget <= RESERVE_FROM:
        return max(least, budget)
    return max(least, budget - reserved(budget) - overhead)


def least_read_buffers(stores: Iterable[Any]) -> Buffers:
    """The drivers' read buffers of the smallest read of each of ``stores`` (one element).

    A compressed chunk is fetched and decoded whole however small the tile
    read from it, so a streamer adds this to the smallest plan it checks
    with :func:`require`: a storage chunk that does not fit the budget is
    refused before any I/O instead of being read over the budget.  Formats
    read in sub-chunk regions (uncompressed chunks, ``.npy``) report 0.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> least_read_buffers([oocarr.from_numpy(np.zeros((4, 4))).store]).nbytes
    0
    """
    nbytes = sum(s.read_overhead((1,) * len(s.shape)) for s in stores)
    return Buffers("drivers' read buffers for one stored chunk of each input", 1, nbytes)


def require(
    projection: Projection,
    budget: int,
    *,
    limit: str = "the memory budget",
    remedy: str = "with oocarr.set_memory_budget",
    url: str | None = None,
) -> None:
    """Raise :class:`~oocarr.errors.BudgetTooSmallError` when ``projection`` exceeds ``budget``.

    The one place that error is raised: every streamer projects the smallest
    plan it could run (or the plan it will run) and calls this before any I/O;
    so do the checks against other limits (the memory ``to_numpy`` may
    allocate, a Dask worker's memory per task), naming theirs in ``limit``.

    Parameters
    ----------
    projection : Projection
        What the streamer needs at least.
    budget : int
        The limit in force, in bytes.
    limit : str
        What ``budget`` is, as the message names it (``"the memory available"``).
    remedy : str
        How the user fixes it, following "raise it to at least ... bytes": how to raise the
        limit (``"with oocarr.set_memory_budget"``, the CLI's ``"with --memory"``) and any
        other way out.
    url : str, optional
        The array the error is about.

    Examples
    --------
    >>> require(Projection("sum", (Buffers("op tiles", 3, 4),)), 12)
    >>> require(Projection("sum", (Buffers("op tiles", 3, 4),)), 11)
    Traceback (most recent call last):
    ...
    oocarr.errors.BudgetTooSmallError: the memory budget of 11 bytes cannot hold sum: it needs \
at least 12 bytes (3 x 4 bytes of op tiles); raise it to at least 12 bytes with \
oocarr.set_memory_budget
    >>> whole = Projection("to_numpy", (Buffers("the whole array", 1, 800),))
    >>> require(whole, 100, limit="the memory available", remedy="by freeing memory", url="a.npy")
    Traceback (most recent call last):
    ...
    oocarr.errors.BudgetTooSmallError: the memory available of 100 bytes cannot hold to_numpy \
of a.npy: it needs at least 800 bytes (1 x 800 bytes of the whole array); raise it to at least \
800 bytes by freeing memory
    """
    need = projection.nbytes
    if need <= budget:
        return
    parts = " + ".join(str(b) for b in projection.items if b.count)
    what = projection.streamer if url is None else f"{projection.streamer} of {url}"
    raise BudgetTooSmallError(
        f"{limit} of {budget} bytes cannot hold {what}: it needs at "
        f"least {need} bytes ({parts}); raise it to at least {need} bytes {remedy}",
        url=url,
    )


def tile_for(
    shape: Sequence[int],
    itemsize: int,
    share: int,
    chunks: Sequence[int] | None = None,
) -> tuple[int, ...]:
    """The largest tile of ``shape`` within ``share`` bytes: whole ``chunks`` where one fits,
    grown last axis first (at least one element).

    Examples
    --------
    >>> tile_for((1000, 100), 4, 100_000)
    (250, 100)
    >>> tile_for((1000, 100), 4, 100_000, chunks=(64, 50))
    (192, 100)
    """
    if chunks is not None:
        whole = math.prod(min(max(1, c), max(1, s)) for c, s in zip(chunks, shape)) * itemsize
        if whole > share:
            chunks = None
    return pages.grow_block(tuple(shape), itemsize, max(itemsize, share), chunks)


def chunk_tile(
    streamer: str,
    shape: Sequence[int],
    itemsize: int,
    budget: int,
    buffers: int,
    *chunks: Sequence[int] | None,
    url: str | None = None,
    remedy: str = "with oocarr.set_memory_budget",
    most: int | None = None,
) -> tuple[tuple[int, ...], Projection]:
    """A tile of whole ``chunks`` (of every chunking given) for a streamer holding ``buffers``
    tile-sized buffers, sized to ``1 / buffers`` of ``budget`` (and at most ``most`` bytes),
    and its projection.

    Raises :class:`~oocarr.errors.BudgetTooSmallError` (through :func:`require`) when one tile
    of whole chunks is larger than the whole budget.

    Examples
    --------
    >>> tile, projection = chunk_tile("copy", (1000, 100), 4, 400_000, 4)
    >>> tile, projection.nbytes
    ((250, 100), 400000)
    """
    given = [tuple(c) for c in chunks if c is not None]
    share = max(1, tile_budget(budget) // buffers)
    if most is not None:
        share = min(share, most)
    tile = pages.common_block(tuple(shape), itemsize, share, *given)
    nbytes = math.prod(tile) * itemsize
    require(
        Projection(streamer, (Buffers("one tile of whole chunks", 1, nbytes),)),
        budget,
        remedy=remedy,
        url=url,
    )
    return tile, Projection(streamer, (Buffers("tiles (read, cached, encoded)", buffers, nbytes),))
