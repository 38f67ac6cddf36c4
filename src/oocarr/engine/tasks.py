"""The task seam: an op call planned as independent tile tasks, runnable in any process.

A :class:`TilePlan` is a list of :class:`TileTask` and a fixed combine
order: each task's tile is written at its region, in task order.  A task
holds only locators, regions, the op (its class, input shapes and
parameters) and in-memory inputs' values: it pickles, holds no open file
handle, and :meth:`TileTask.run` reopens its inputs by locator in whatever
process runs it.  Every executor computes a tile with the same
:class:`~oocarr.engine.tiles.TileFolder`, so a plan gives the same bytes
whichever runs it; the engine's local loop (:class:`~oocarr.engine.run.
OOCAlgorithm`) is the local executor, reading the next task's blocks ahead
and writing finished tiles behind.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from oocarr.store.blocked import BlockedArray
from oocarr.store.locator import Locator
from oocarr.store.registry import get_driver

from .io import TASK_BUFFERS, Operand
from .op import BlockParallelOp, Plan, Region
from .stats import IOCounts
from .tiles import StepGradient, TileFolder

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

__all__ = ["BackwardPlan", "BackwardTask", "TilePlan", "TileTask", "finished_tiles", "opened"]


@dataclass(frozen=True, eq=False)
class TileTask:
    """One output tile of one op call.

    Attributes
    ----------
    op : BlockParallelOp
        The op (class, input shapes and parameters).
    inputs : tuple
        A :class:`~oocarr.store.locator.Locator` per stored input, the array
        itself per in-memory input.
    dtypes : tuple of numpy.dtype
        The inputs' dtypes (the block functions are compiled for them).
    region : tuple of slice
        The output tile.
    steps : tuple
        The input regions of each step, in fold order.
    plan : Plan
        The call's tile plan (edge tiles are padded to its nominal shapes).
    """

    op: BlockParallelOp
    inputs: tuple[Locator | np.ndarray, ...]
    dtypes: tuple[np.dtype, ...]
    region: Region
    steps: tuple[tuple[Region, ...], ...]
    plan: Plan
    #: One fold group of a tile folded in several (``plan.fold_steps``): the task returns its
    #: unfinished partial, merged into the tile's total by :func:`finished_tiles`.
    partial: bool = False
    #: Whether the task's steps end its tile (the last group of a tile in several).
    last: bool = True
    #: The output's :meth:`~oocarr.store.blocked.BlockedArray.parallel_writer` when the task
    #: writes its finished tile itself (whole write units of the output): it returns ``None``.
    writer: Any = None

    def run(self, counts: IOCounts | None = None) -> np.ndarray | None:
        """Compute this tile: open the stored inputs by locator, fold every step, finish
        (reads counted into ``counts`` when given); ``None`` when the task wrote it itself
        (``writer``).

        Examples
        --------
        >>> import numpy as np, oocarr, pickle
        >>> from oocarr.engine import OOCAlgorithm, Operand
        >>> from oocarr.ops.reductions import Sum
        >>> x = oocarr.from_numpy(np.arange(6.0, dtype="f4"))
        >>> (task,) = OOCAlgorithm(Sum((6,))).tasks([Operand(x.store)]).tasks
        >>> float(pickle.loads(pickle.dumps(task)).run())
        15.0
        """
        with opened(self.inputs) as values:
            operands = [Operand(v, counts, TASK_BUFFERS) for v in values]
            folder = TileFolder(self.op, self.plan, self.dtypes)
            acc = None
            for regions in self.steps:
                acc = folder.fold(acc, [o.read(r) for o, r in zip(operands, regions)])
            if self.partial:
                return np.asarray(acc)
            tile = folder.finish(acc, self.region)
        if self.writer is None:
            return tile
        target = self.writer.open()
        try:
            value = tile.astype(target.dtype, copy=False)
            target.write_region(self.region, value)
        finally:
            target.close()
        if counts is not None:
            counts.count_written(value.nbytes)
        return None


def finished_tiles(
    tasks: Sequence[TileTask], results: Iterable[Any]
) -> Iterator[tuple[TileTask, np.ndarray]]:
    """``(task, finished tile)`` for each tile, in order, from the tasks' results in task
    order: a tile folded in groups has its partials merged into its total in group order,
    then finished, as the local loop does.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from dataclasses import replace
    >>> from oocarr.engine import OOCAlgorithm, Operand
    >>> from oocarr.ops.reductions import Sum
    >>> x = oocarr.from_numpy(np.arange(6.0, dtype="f4"))
    >>> algo = OOCAlgorithm(Sum((6,)))
    >>> with oocarr.memory_budget(28):  # a tile of one element: six steps
    ...     plan, _ = algo.forward_plan([Operand(x.store)])
    >>> tasks = algo.tasks([Operand(x.store)], replace(plan, fold_steps=2)).tasks
    >>> len(tasks), [float(t) for _, t in finished_tiles(tasks, (t.run() for t in tasks))]
    (3, [15.0])
    """
    folder = None
    total = None
    for task, result in zip(tasks, results):
        if not task.partial:
            yield task, result
            continue
        if total is None:
            total = result
        else:
            if folder is None:
                folder = TileFolder(task.op, task.plan, task.dtypes)
            total = folder.merge(total, result)
        if task.last:
            if folder is None:
                folder = TileFolder(task.op, task.plan, task.dtypes)
            yield task, folder.finish(total, task.region)
            total = None


@overload
def opened(refs: Sequence[Locator]) -> AbstractContextManager[Sequence[BlockedArray]]: ...
@overload
def opened(
    refs: Sequence[Locator | np.ndarray],
) -> AbstractContextManager[Sequence[BlockedArray | np.ndarray]]: ...
@contextlib.contextmanager
def opened(refs: Sequence[Locator | np.ndarray]) -> Iterator[list[Any]]:
    """Each stored ref opened read-only by its locator (in-memory values as they are), closed
    when the block ends: how every task reaches its inputs in whatever process runs it.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.arange(3.0))
    >>> with opened((x.locator, np.ones(2))) as (store, value):
    ...     store.shape, value.shape
    ((3,), (2,))
    """
    values: list[BlockedArray | np.ndarray] = []
    stores: list[BlockedArray] = []  # those opened here
    try:
        for ref in refs:
            if isinstance(ref, Locator):
                stores.append(get_driver(ref.driver).open(ref, "r"))
                values.append(stores[-1])
            else:
                values.append(ref)
        yield values
    finally:
        for store in stores:
            store.close()


@dataclass(frozen=True, eq=False)
class BackwardTask:
    """One step of one op call's backward pass: the wanted inputs' gradient contributions
    over the step's input regions.

    ``tiles`` are the output tile's cotangent (and the forward output when the
    op ``needs_output``), by locator or value like ``inputs``.
    """

    op: BlockParallelOp
    inputs: tuple[Locator | np.ndarray, ...]
    dtypes: tuple[np.dtype, ...]
    tiles: tuple[Locator | np.ndarray, ...]
    tile_dtypes: tuple[np.dtype, ...]
    tile_ndims: tuple[int, ...]
    region: Region
    in_regions: tuple[Region, ...]
    wanted: tuple[bool, ...]
    plan: Plan

    def run(self, counts: IOCounts | None = None) -> list[tuple[int, Region, np.ndarray]]:
        """``(input index, region, gradient)`` of each wanted input, in input order (reads
        counted into ``counts`` when given)."""
        with opened(self.inputs) as inputs, opened(self.tiles) as tiles:
            blocks = [
                Operand(v, counts, TASK_BUFFERS).read(r) for v, r in zip(inputs, self.in_regions)
            ]
            tile_blocks = [
                Operand(v, counts, TASK_BUFFERS).read(self.region if n else ())
                for v, n in zip(tiles, self.tile_ndims)
            ]
            gradient = StepGradient(
                self.op, self.plan, self.wanted, self.dtypes, self.tile_dtypes, self.tile_ndims
            )
            grads = gradient(tile_blocks, blocks)
        wanted = [i for i, w in enumerate(self.wanted) if w]
        return [(i, self.in_regions[i], g) for i, g in zip(wanted, grads)]


@dataclass(frozen=True, eq=False)
class BackwardPlan:
    """Every step task of one op call's backward pass; results combine by adding each
    gradient into its input's target, in task order."""

    tasks: tuple[BackwardTask, ...]
    wanted: tuple[bool, ...]

    def __iter__(self) -> Iterator[BackwardTask]:
        return iter(self.tasks)

    def combine(self, results: Iterator[list], targets: list[np.ndarray | None]) -> None:
        """Add every task's gradients (given in task order) into ``targets`` (in-memory
        arrays of the inputs' shapes; ``None`` where no gradient is wanted)."""
        for result in results:
            for i, region, grad in result:
                view = targets[i][region] if region else targets[i]
                view += grad.reshape(view.shape).astype(targets[i].dtype, copy=False)


@dataclass(frozen=True, eq=False)
class TilePlan:
    """Every tile task of one op call, and how their results combine: each task's tile is
    written at its region of an output of ``shape``, in task order."""

    tasks: tuple[TileTask, ...]
    shape: tuple[int, ...]

    def __iter__(self) -> Iterator[TileTask]:
        return iter(self.tasks)

    def combine(self, tiles: Iterator[np.ndarray], dtype: np.dtype) -> np.ndarray:
        """The whole (in-memory) output from the tasks' tiles, given in task order.

        Examples
        --------
        >>> import numpy as np, oocarr
        >>> from oocarr.engine import OOCAlgorithm, Operand
        >>> from oocarr.ops.elementwise import UNARY
        >>> x = oocarr.from_numpy(np.arange(4.0, dtype="f4"))
        >>> plan = OOCAlgorithm(UNARY["square"]((4,))).tasks([Operand(x.store)])
        >>> plan.combine((t.run() for t in plan), np.dtype("f4"))
        array([0., 1., 4., 9.], dtype=float32)
        """
        out = np.empty(self.shape, dtype)
        for task, tile in finished_tiles(self.tasks, tiles):
            if task.region:
                out[task.region] = tile
            else:
                out[...] = tile
        return out
