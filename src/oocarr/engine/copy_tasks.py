"""A copy planned as tasks: each reads one tile of the source by locator and writes it,
whole write-units (chunks, shards) only, into the pending destination through the
destination's parallel writer.  Tiles do not overlap, so every chunk or shard has one writer,
and a task run twice (a retry after a worker died) writes the same bytes again.  The
destination is committed by its creator, in the calling process, after every task is done.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from oocarr.errors import InvalidArgumentError
from oocarr.store.blocked import BlockedArray
from oocarr.store.locator import Locator

from .executor import DaskExecutor
from .io import TASK_BUFFERS
from .op import Region
from .stats import IOCounts
from .tasks import opened

__all__ = ["CopyTask", "copy_on", "whole_units"]


@dataclass(frozen=True, eq=False)
class CopyTask:
    """One tile of a copy: ``source[region]`` written at ``region`` through ``writer``.

    Attributes
    ----------
    source : Locator
        The stored source, reopened where the task runs.
    writer : Any
        The destination's :meth:`~oocarr.store.blocked.BlockedArray.parallel_writer`.
    region : tuple of slice
        The tile, whole write-units of the destination.
    """

    source: Locator
    writer: Any
    region: Region

    def run(self, counts: IOCounts | None = None) -> int:
        """Copy the tile; the number of bytes written.

        Examples
        --------
        >>> import numpy as np, oocarr, os, tempfile
        >>> d = tempfile.mkdtemp()
        >>> src = oocarr.save(np.arange(8.0), os.path.join(d, "a.npy")).store
        >>> cls, loc = oocarr.resolve(os.path.join(d, "b.zarr"))
        >>> with cls.create(loc, (8,), "f8", chunks=(4,)) as dst:
        ...     for start in (0, 4):
        ...         tile = (slice(start, start + 4),)
        ...         _ = CopyTask(src.locator, dst.parallel_writer(), tile).run()
        >>> oocarr.to_numpy(oocarr.open(loc)).tolist()[:3]
        [0.0, 1.0, 2.0]
        """
        with opened((self.source,)) as (source,):
            block = source.read_view(self.region, TASK_BUFFERS.empty)
        if counts is not None:
            counts.count_read(block.nbytes)
        target = self.writer.open()
        try:
            target.write_region(self.region, block)
        finally:
            target.close()
        if counts is not None:
            counts.count_written(block.nbytes)
        return block.nbytes


def whole_units(region: Region, units: tuple[int, ...] | None, shape: tuple[int, ...]) -> bool:
    """Whether ``region`` is made of whole write units (chunks, shards) of an array of
    ``shape``, the last ones cut only by the array's edge (``units=None``: unchunked storage,
    written in place, where every region is).

    Examples
    --------
    >>> whole_units((slice(0, 8), slice(4, 10)), (4, 4), (10, 10))
    True
    >>> whole_units((slice(2, 6),), (4,), (10,))
    False
    """
    if units is None:
        return True
    return not any(
        r.start % u or (r.stop % u and r.stop != n) for r, u, n in zip(region, units, shape)
    )


def copy_on(
    cluster: DaskExecutor,
    source: BlockedArray,
    target: BlockedArray,
    regions: Sequence[Region],
    projected: int,
    counts: IOCounts,
    advance: Callable[[int], Any] | None = None,
    what: str = "copy",
) -> None:
    """Copy ``regions`` of ``source`` into the pending ``target`` as tasks on ``cluster``,
    checked against the workers' memory per task and reach before any runs; ``advance(nbytes)``
    after each tile is written.

    Examples
    --------
    >>> from distributed import Client, LocalCluster   # doctest: +SKIP
    >>> with LocalCluster(n_workers=2) as lc, Client(lc) as client:   # doctest: +SKIP
    ...     copy_on(DaskExecutor(client), src, dst, regions, 2**20, IOCounts())
    """
    writer = target.parallel_writer()
    units = target.write_chunks
    for region in regions:
        if not whole_units(region, units, target.shape):
            raise InvalidArgumentError(
                f"{what}: tile {region} of {target.url} cuts its write units {units}; a copy on "
                "a cluster writes whole chunks or shards only (one writer each)",
                url=target.url,
            )
    cluster.check_reachable((source.locator, target.locator), what)
    cluster.check_fits(projected, what)
    tasks = [CopyTask(source.locator, writer, region) for region in regions]
    for nbytes in cluster.map(tasks, counts, what):
        counts.tiles += 1
        if advance is not None:
            advance(nbytes)
