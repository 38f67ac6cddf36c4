"""``stream_sum`` as a map-reduce over row tiles: one tile's partial sum and gradient, the fixed
order partials combine in, and picklable row tasks that compute them in any process.

The local loop (:mod:`oocarr.jaxlayer.row_sums`, under ``stream_sum`` and fused sums) and a task run
elsewhere compute each tile with :func:`tile_partial` and fold the tiles in
row order with :class:`Sums`, so a sum and its gradient are the same bits
whichever runs them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from oocarr.engine.io import TASK_BUFFERS, Operand
from oocarr.engine.stats import IOCounts
from oocarr.jaxlayer.callbacks import open_store
from oocarr.store.blocked import BlockedArray
from oocarr.store.locator import Locator

if TYPE_CHECKING:
    from oocarr.engine.op import PadMode

__all__ = ["Partial", "RowPlan", "RowTask", "Sums", "pad_rows", "tile_partial"]


def pad_rows(block: np.ndarray, rows: int, mode: PadMode) -> np.ndarray:
    """``block`` padded to ``rows`` rows (``numpy.pad`` ``mode``).

    Examples
    --------
    >>> pad_rows(np.array([1.0, 2.0]), 3, "edge")
    array([1., 2., 2.])
    """
    if block.shape[0] == rows:
        return block
    widths = [(0, rows - block.shape[0])] + [(0, 0)] * (block.ndim - 1)
    return np.pad(block, widths, mode=mode)


@dataclass
class Partial:
    """One row tile's contribution: its loss sum, its weight sum and its gradients (float64)."""

    value: float
    weight: float
    grads: list[np.ndarray] = field(default_factory=list)


def tile_partial(
    spec: Any,
    wanted: tuple[bool, ...] | None,
    leaves: Sequence[Any],
    blocks: Sequence[np.ndarray],
    tile: int,
) -> Partial:
    """The partial of one row tile: ``blocks`` are the tile's rows of every array (the weights
    last when the call is weighted), padded to ``tile`` rows when ``fn`` is per row."""
    out_dtype = np.dtype(spec.out_dtype)
    blocks = list(blocks)
    rows = blocks[0].shape[0]
    weight = 0.0
    if spec.weighted:
        w = blocks.pop().astype(out_dtype)
        weight = float(np.sum(w, dtype=np.float64))
    if spec.per_row:
        if not spec.weighted:
            w = np.ones(rows, out_dtype)
        blocks = [pad_rows(b, tile, "edge") for b in blocks]
        blocks.insert(0, pad_rows(w, tile, "constant"))
    out = spec.kernel(spec.per_row, spec.treedef, wanted)(list(leaves), *blocks)
    value, grads = (out, ()) if wanted is None else out
    return Partial(float(value), weight, [np.asarray(g, np.float64) for g in grads])


class Sums:
    """The running sums of partials, folded in row order, and the call's results from them.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> spec = SimpleNamespace(rows=4, weighted=False, mean=True, out_dtype=np.float32,
    ...                        leaf_avals=())
    >>> sums = Sums(spec, None)
    >>> for v in (1.0, 3.0):
    ...     sums.add(Partial(v, 0.0))
    >>> sums.results()
    (array(1., dtype=float32),)
    """

    def __init__(self, spec: Any, wanted: tuple[bool, ...] | None) -> None:
        self.spec = spec
        self.targets = [] if wanted is None else [a for a, w in zip(spec.leaf_avals, wanted) if w]
        self.grads = [np.zeros(a.shape, np.float64) for a in self.targets]
        self.total = self.weight = 0.0

    def add(self, partial: Partial) -> None:
        """Fold in the next tile's partial."""
        self.total += partial.value
        self.weight += partial.weight
        for acc, g in zip(self.grads, partial.grads):
            acc += g

    def results(self) -> tuple[np.ndarray, ...]:
        """The (mean or weighted) sum, and the gradients of the wanted leaves."""
        spec = self.spec
        divisor = (self.weight if spec.weighted else float(spec.rows)) if spec.mean else 1.0
        out_dtype = np.dtype(spec.out_dtype)
        with np.errstate(divide="ignore", invalid="ignore"):
            results = [np.asarray(np.float64(self.total) / divisor, out_dtype)]
            results += [np.asarray(g / divisor, a.dtype) for g, a in zip(self.grads, self.targets)]
        return tuple(results)


@dataclass(frozen=True, eq=False)
class RowTask:
    """One row tile of one ``stream_sum`` call: the parameters' values, each array's locator
    (stored) or rows (in memory), and the rows ``start:stop``; no open handle."""

    spec: Any
    wanted: tuple[bool, ...] | None
    leaves: tuple[np.ndarray, ...]
    inputs: tuple[Locator | np.ndarray, ...]
    start: int
    stop: int
    tile: int

    def run(self, counts: IOCounts | None = None) -> Partial:
        """Read this tile's rows (reopening stored arrays by locator) and compute its partial
        (reads counted into ``counts`` when given)."""
        values = [open_store(i) if isinstance(i, Locator) else i for i in self.inputs]
        try:
            blocks = []
            for value in values:
                if not isinstance(value, BlockedArray):  # in memory: the tile's rows
                    blocks.append(value)
                    continue
                rows = (slice(self.start, self.stop), *(slice(0, d) for d in value.shape[1:]))
                blocks.append(Operand(value, counts, TASK_BUFFERS).read(rows))
            return tile_partial(self.spec, self.wanted, self.leaves, blocks, self.tile)
        finally:
            for value in values:
                if isinstance(value, BlockedArray):  # opened here
                    value.close()


@dataclass(frozen=True, eq=False)
class RowPlan:
    """Every row task of one ``stream_sum`` call, and how their partials combine: folded in
    task (row) order by :class:`Sums`."""

    tasks: tuple[RowTask, ...]
    spec: Any
    wanted: tuple[bool, ...] | None
    #: The resident bytes one task is planned to hold (its rows, reads and compute).
    projected: int = 0

    def __iter__(self) -> Iterator[RowTask]:
        return iter(self.tasks)

    def combine(self, partials: Iterable[Partial]) -> tuple[np.ndarray, ...]:
        """The call's results from the tasks' partials, given in task order."""
        sums = Sums(self.spec, self.wanted)
        for partial in partials:
            sums.add(partial)
        return sums.results()
