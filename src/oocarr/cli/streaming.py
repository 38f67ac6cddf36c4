"""Reading a stored array tile by tile under the memory budget, and checksums of its values."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator

import numpy as np

from oocarr.config import memory_budget_bytes
from oocarr.errors import BudgetTooSmallError
from oocarr.interface import BlockedArray
from oocarr.pages import common_block

from .output import human_bytes

__all__ = ["COPY_SHARE", "STATS_SHARE", "tile_shape", "read_tiles", "checksum"]

#: A copy holds up to four tiles at once: the read buffer, the source's chunk cache (HDF5
#: keeps two tiles' chunks) and the destination's encoded chunks.
COPY_SHARE = 4
#: Statistics hold the tile, its float64 copy and temporaries of that copy.
STATS_SHARE = 8


def tile_shape(store: BlockedArray, share: int, *chunks: tuple[int, ...] | None) -> tuple[int, ...]:
    """The tile for streaming ``store``: whole chunks of ``store`` and of ``chunks``, sized to
    ``1/share`` of the memory budget in force.

    Raises
    ------
    BudgetTooSmallError
        When one tile of whole chunks is larger than the whole budget.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> store = oocarr.from_numpy(np.zeros((1000, 100), "f4")).store
    >>> with oocarr.memory_budget("400KB"):
    ...     tile_shape(store, 4)
    (250, 100)
    """
    budget = memory_budget_bytes()
    given = [c for c in (*chunks, store.chunks) if c is not None]
    tile = common_block(store.shape, store.itemsize, max(1, budget // share), *given)
    nbytes = math.prod(tile) * store.itemsize
    if nbytes > budget:
        raise BudgetTooSmallError(
            f"the memory budget of {human_bytes(budget)} cannot hold one tile of whole chunks "
            f"{tile} ({human_bytes(nbytes)}) of {store.url}; raise it with --memory",
            url=store.url,
        )
    return tile


def read_tiles(
    store: BlockedArray, tile: tuple[int, ...]
) -> Iterator[tuple[tuple[slice, ...], np.ndarray]]:
    """``(region, values)`` for every tile of ``store`` in C order, reusing one buffer.

    Each ``values`` is overwritten by the next step: use it before advancing.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> store = oocarr.from_numpy(np.arange(5)).store
    >>> [(r[0].start, v.tolist()) for r, v in read_tiles(store, (2,))]
    [(0, [0, 1]), (2, [2, 3]), (4, [4])]
    """
    tiled = store.with_pages(tile)
    buffer = np.empty(math.prod(tile), dtype=store.dtype)
    for index in tiled.block_grid():
        region = tiled.block_region(index)
        shape = tuple(r.stop - r.start for r in region)
        yield region, tiled.read_region(region, out=buffer[: math.prod(shape)].reshape(shape))


def checksum(store: BlockedArray, tile: tuple[int, ...], advance=None) -> str:
    """BLAKE2b of the values in C order, in native byte order (so byte order does not matter).

    ``advance(nbytes)`` is called after each tile (a progress bar).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> a = oocarr.from_numpy(np.arange(6, dtype="<i4")).store
    >>> b = oocarr.from_numpy(np.arange(6, dtype=">i4")).store
    >>> checksum(a, (4,)) == checksum(b, (4,))
    True
    """
    digest = hashlib.blake2b(digest_size=16)
    native = store.dtype.newbyteorder("=")
    for _region, values in read_tiles(store, tile):
        digest.update(np.ascontiguousarray(values, dtype=native).data)
        if advance is not None:
            advance(values.nbytes)
    return digest.hexdigest()
