"""The out-of-core engine: tiled forward and backward loops over ``BlockedArray``s.

:class:`OOCAlgorithm` runs one op call: it plans tiles from the memory
budget, reads the input regions each output tile needs, applies the op's
jitted block function, folds partial results and writes each finished
tile.  Inputs may be stored (a :class:`~oocarr.store.blocked.BlockedArray`) or in
memory (a NumPy array, broadcast like any other input).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from oocarr.store import pages
from oocarr.store.blocked import BlockedArray
from oocarr.store.registry import get_driver
from oocarr.store.scratch import release, scratch_locator

from . import progress
from .budget import memory_budget_bytes
from .compile import block_functions
from .composed import composed
from .copy_tasks import whole_units
from .custom_tasks import CustomGradTask, CustomPartTask, RunTools
from .executor import DaskExecutor, current_executor
from .io import Operand, WriteBehind, prefetched
from .op import BlockParallelOp, CustomOp, Plan, Region
from .plan import (
    FOLD_GROUP_BYTES,
    INPUT_TILES,
    MAX_READ_AHEAD,
    WRITE_BEHIND_TILES,
    Buffers,
    Projection,
    least_read_buffers,
    require,
    reserved,
    tile_budget,
)
from .stats import IOCounts, record
from .tasks import BackwardPlan, BackwardTask, TilePlan, TileTask, finished_tiles
from .tiles import Nominal, StepGradient, TileFolder, folds_on_host

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .op import Reader

__all__ = ["OOCAlgorithm", "CustomRun"]

#: One step of a tiled loop: its output tile, whether it ends the tile, its input regions.
_Step = tuple[Region, bool, tuple[Region, ...]]


def _cores() -> int:
    """The CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class OOCAlgorithm:
    """The tiled forward and backward loops of one op.

    While a step computes, the next step's input blocks are read in a
    background thread (prefetch), and a finished output tile is written in
    another while the next tile computes (write-behind, one tile at a
    time, so each output block has one writer).  The planner counts both
    in the budget.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.ops.reductions import Sum
    >>> x = oocarr.from_numpy(np.arange(10.0)).store
    >>> float(OOCAlgorithm(Sum((10,))).forward([Operand(x)]))
    45.0
    """

    #: The op by its kind, one of the two set: a block-parallel op, which the tiled loops
    #: below run, or a ``CustomOp``, which drives its own loops through a :class:`CustomRun`.
    _block: BlockParallelOp
    _custom: CustomOp

    def __init__(self, op: BlockParallelOp | CustomOp, site: str | None = None) -> None:
        self.op = op
        self.site = site or op.name
        self.counts = IOCounts(calls=1)
        if isinstance(op, CustomOp):
            self._custom = op
        else:
            self._block = op
            self._forward, self._accumulate = block_functions(op)

    def _counted(self, operands: list[Operand]) -> list[Operand]:
        return [Operand(o.value, self.counts) for o in operands]

    def residency(self, operands: list[Operand]) -> int:
        """Tile-sized buffers resident at once: the op's own, plus prefetch and write-behind.

        Each stored input has two tiles besides the op's own: the one read
        ahead, and the one XLA's CPU client has used without a copy and lets
        go of in its own thread some time after the call returns.
        """
        prefetched = INPUT_TILES * sum(o.stored for o in operands)
        return self.op.residency + prefetched + WRITE_BEHIND_TILES

    def budget_elems(self, operands: list[Operand], itemsize: int, overhead: int = 0) -> int:
        """Elements of one tile-sized buffer's share of the budget, scaled to the op's own
        residency (what its ``plan`` divides by), after ``overhead`` bytes of the drivers'
        read buffers; raises when one tile does not fit."""
        budget = memory_budget_bytes()
        total = self.residency(operands)
        smallest = self._smallest(total, itemsize)
        stores = [o.value for o in operands if isinstance(o.value, BlockedArray)]
        url = stores[0].url if stores else None
        require(smallest.plus(least_read_buffers(stores)), budget, url=url)
        # A storage chunk larger than the whole budget still gets tiles of the smallest size.
        usable = tile_budget(budget, least=smallest.nbytes, overhead=overhead)
        if self.op.whole_budget:
            return usable // itemsize
        return usable // itemsize * self.op.residency // total

    def _smallest(self, total: int, itemsize: int) -> Projection:
        """The projection of this call with tiles of the op's smallest size."""
        tile = self.op.min_tile_elems() * itemsize
        return Projection(
            self.op.name,
            (
                Buffers(self.op.min_tile_label(), self.op.residency, tile),
                Buffers(
                    "input tiles read ahead or held by XLA",
                    total - self.op.residency - WRITE_BEHIND_TILES,
                    tile,
                ),
                Buffers("tile written behind", WRITE_BEHIND_TILES, tile),
            ),
        )

    def _read_overhead(self, operands: list[Operand], plan: Plan) -> int:
        """Bytes the drivers' reads of one step's blocks hold besides the blocks."""
        shapes = Nominal(self._block, plan).in_shapes
        return sum(
            o.value.read_overhead(s)
            for o, s in zip(operands, shapes)
            if isinstance(o.value, BlockedArray)
        )

    def projection(
        self, operands: list[Operand], plan: Plan, itemsize: int, ahead: int = 1
    ) -> Projection:
        """What this call holds at once with ``plan``'s tiles, itemised (see
        :meth:`~oocarr.engine.op.BlockParallelOp.buffers`), reading ``ahead`` steps at once."""
        op = self._block
        nominal = Nominal(op, plan)
        stored = [o.stored for o in operands]
        shapes = (nominal.out_shape, nominal.in_shapes or [()], stored)
        # ``host`` only when set: ops written before it (``buffers(out, ins, stored)``) still work
        items = op.buffers(*shapes, host=True) if plan.host else op.buffers(*shapes)
        parallel = tuple(
            Buffers(f"input {i} blocks read ahead in parallel", ahead - 1, math.prod(s) * itemsize)
            for i, (o, s) in enumerate(zip(operands, nominal.in_shapes))
            if o.stored and ahead > 1
        )
        decoding = Buffers(
            "drivers' read buffers (encoded and decoding chunks)",
            ahead,
            self._read_overhead(operands, plan),
        )
        groups = (
            (Buffers("fold-group total", 1, math.prod(nominal.out_shape) * itemsize),)
            if plan.fold_steps
            else ()
        )
        return Projection(
            self.op.name,
            (
                *(Buffers(what, n, e * itemsize) for what, n, e in items),
                *parallel,
                decoding,
                *groups,
            ),
        )

    def read_ahead(self, operands: list[Operand], plan: Plan, itemsize: int) -> int:
        """Steps read at once: more than one when each stored input's read of a step keeps
        fewer threads busy than the machine has cores (a step of one compressed chunk) and
        the extra blocks fit the budget (less its :func:`~oocarr.engine.plan.reserved` part).
        A 1024³ uint16 zstd cube in 256³ chunks, summed a chunk a tile on 2 cores: 6.8 s
        reading one step ahead (one core decoding), 3.8 s reading two."""
        shapes = Nominal(self._block, plan).in_shapes
        threads = [
            o.value.read_threads(s)
            for o, s in zip(operands, shapes)
            if isinstance(o.value, BlockedArray)
        ]
        if not threads or min(threads) < 1:
            return 1
        ahead = min(MAX_READ_AHEAD, max(1, _cores() // max(threads)))
        budget = memory_budget_bytes()
        budget -= reserved(budget)
        while ahead > 1 and self.projection(operands, plan, itemsize, ahead).nbytes > budget:
            ahead -= 1
        return ahead

    def plan(
        self, operands: list[Operand], itemsize: int, share: int = 1, host: bool = False
    ) -> Plan:
        """Tiles for this call, from the budget (``1 / share`` of it), the residency, the
        drivers' read buffers and the inputs' chunks (``host``: a forward pass folding with
        the op's host block)."""
        chunks = _first_chunks(operands)
        op = self._block

        def planned(elems: int) -> Plan:
            # ``host`` only when set: ops written before it (``plan(elems, chunks)``) still work
            return op.plan(elems, chunks, host=True) if host else op.plan(elems, chunks)

        plan = planned(self.budget_elems(operands, itemsize) // share)
        overhead = self._read_overhead(operands, plan)
        if overhead:
            plan = planned(self.budget_elems(operands, itemsize, overhead) // share)
        return replace(plan, host=host)

    def forward_plan(self, operands: list[Operand]) -> tuple[Plan, int]:
        """The forward pass's tiles and the bytes an element of its tile-sized buffers is
        counted at (the op's :meth:`~oocarr.engine.op.Op.tile_itemsize` for those tiles:
        planned again, with smaller tiles, until the count holds for them)."""
        dtypes = [np.dtype(o.value.dtype) for o in operands]
        itemsize = self.op.tile_itemsize(dtypes)
        host = folds_on_host(self._block, dtypes)
        plan = self.plan(operands, itemsize, host=host)
        while (needed := self.op.tile_itemsize(dtypes, plan)) > itemsize:
            itemsize = needed
            plan = self.plan(operands, itemsize, host=host)
        return self._fold_groups(operands, plan, itemsize), itemsize

    def _fold_groups(self, operands: list[Operand], plan: Plan, itemsize: int) -> Plan:
        """``plan`` with tiles whose steps read more than :data:`~oocarr.engine.plan.
        FOLD_GROUP_BYTES` folded in groups of steps (tasks of their own on a cluster), where
        the budget holds the group total beside the accumulator."""
        op = self._block
        nominal = Nominal(op, plan)
        step_bytes = itemsize * sum(
            math.prod(s) for o, s in zip(operands, nominal.in_shapes or []) if o.stored
        )
        first = next(op.out_regions(plan), None)
        if not step_bytes or first is None:
            return plan
        fold = max(1, FOLD_GROUP_BYTES // step_bytes)
        if sum(1 for _ in op.index_map(first, plan)) <= fold:
            return plan
        grouped = replace(plan, fold_steps=fold)
        budget = memory_budget_bytes()
        if self.projection(operands, grouped, itemsize).nbytes > budget - reserved(budget):
            return plan
        return grouped

    def forward(
        self, operands: list[Operand], out: BlockedArray | np.ndarray | None = None
    ) -> np.ndarray | None:
        """Compute the output into ``out`` (a store or an array); 0-d outputs are returned."""
        operands = self._counted(operands)
        try:
            if isinstance(self.op, CustomOp):
                itemsize = self.op.tile_itemsize([np.dtype(o.value.dtype) for o in operands])
                run = CustomRun(self, operands, itemsize)
                cluster = current_executor()
                if cluster is not None and self._custom_on(cluster, run, operands, out):
                    return None
                return run.forward(out)
            reading_leaves = composed(self.op, operands)
            if reading_leaves is not None:
                op, leaves = reading_leaves
                return self._counted_with(op)._forward_pass(leaves, out)
            return self._forward_pass(operands, out)
        finally:
            record(self.site, self.counts)

    def _counted_with(self, op: BlockParallelOp) -> OOCAlgorithm:
        """This call run by ``op`` (a :class:`~oocarr.engine.fused.ComposedOp` of this one's
        op, reading its fused inputs' leaves), counted with this call."""
        algo = OOCAlgorithm(op, self.site)
        algo.counts = self.counts
        return algo

    def _forward_pass(self, operands: list[Operand], out: Any) -> np.ndarray | None:
        """A block-parallel op's forward pass: tile tasks on a cluster, else the loop."""
        plan, itemsize = self.forward_plan(operands)
        cluster = current_executor()
        if cluster is not None:
            return self._forward_on(cluster, operands, plan, itemsize, out)
        ahead = self.read_ahead(operands, plan, itemsize)
        self.counts.project(self.projection(operands, plan, itemsize, ahead).nbytes)
        return self._forward_loop(operands, plan, out, ahead)

    def _custom_on(
        self, cluster: DaskExecutor, run: CustomRun, operands: list[Operand], out: Any
    ) -> bool:
        """A custom op's forward pass as a task per part on ``cluster``, when the op has
        independent parts and the output takes their writes (whole chunks of a pending Zarr
        array); ``False`` (nothing run) otherwise."""
        writer = out.parallel_writer() if isinstance(out, BlockedArray) else None
        parts = None if writer is None else run.op.parts(run)
        if not parts:
            return False
        units, shape = out.write_chunks, tuple(out.shape)
        regions = (r for part in parts for r in run.op.part_regions(part))
        if not all(whole_units(r, units, shape) for r in regions):
            return False
        inputs = tuple(o.ref for o in operands)
        tasks = [CustomPartTask(run.op, inputs, part, writer) for part in parts]
        self._check_part_tasks(cluster, (*inputs, out.locator))
        for _ in cluster.map(tasks, self.counts, self.site):
            self.counts.tiles += 1
        return True

    def _check_part_tasks(self, cluster: DaskExecutor, refs: tuple[Any, ...]) -> None:
        """Before a custom op's part tasks run: every stored ref reachable by the workers, and
        the budget (a part's run sizes its tiles from it, so a task holds no more) within a
        worker's share of memory."""
        cluster.check_reachable(refs, self.site)
        budget = memory_budget_bytes()
        self.counts.project(budget)
        cluster.check_fits(budget, self.site)

    def _custom_backward_on(
        self, cluster: DaskExecutor, run: CustomRun, targets: list[Any]
    ) -> bool:
        """A custom op's backward pass as a task per part on ``cluster``, each returning its
        gradient blocks, added into ``targets`` here in part order (the order
        :meth:`CustomRun.backward` adds them in); ``False`` (nothing run) for an op without
        parts."""
        parts = run.op.parts(run)
        if not parts:
            return False
        wanted = tuple(run.wants_grad(i) for i in range(len(run.inputs)))
        inputs = tuple(o.ref for o in run.operands)
        readers = tuple(o.ref for o in run.readers)
        tasks = [CustomGradTask(run.op, inputs, readers, part, wanted) for part in parts]
        self._check_part_tasks(cluster, (*inputs, *readers))
        for result in cluster.map(tasks, self.counts, self.site):
            for i, region, grad in result:
                self.counts.tiles += 1
                _accumulate(targets[i], region, grad, self.counts)
        return True

    def output_tile(self, operands: list[Operand]) -> tuple[int, ...] | None:
        """The output tile :meth:`forward` will write (a ``CustomOp``'s run's tile): a stored
        output chunked by it is written in whole chunks.

        Examples
        --------
        >>> import numpy as np, oocarr
        >>> from oocarr.engine import OOCAlgorithm, Operand
        >>> from oocarr.ops.elementwise import UNARY
        >>> x = oocarr.from_numpy(np.zeros((1000, 10), "f4"))
        >>> with oocarr.memory_budget("1MB"):
        ...     OOCAlgorithm(UNARY["exp"]((1000, 10))).output_tile([Operand(x.store)])
        (1000, 10)
        """
        if isinstance(self.op, CustomOp):
            itemsize = self.op.tile_itemsize([np.dtype(o.value.dtype) for o in operands])
            return CustomRun(self, operands, itemsize).tile_shape(self.op.output_shape)
        return tuple(self.forward_plan(operands)[0].out_tile)

    def _forward_on(
        self, cluster: DaskExecutor, operands: list[Operand], plan: Plan, itemsize: int, out: Any
    ) -> np.ndarray | None:
        """The forward pass as tile tasks on ``cluster``: checked against the workers' memory
        per task and reach before any runs, tiles written here in task order as they come
        (the same bytes as :meth:`_forward_loop`)."""
        projection = self.projection(operands, plan, itemsize)
        self.counts.project(projection.nbytes)
        tasks = self._written_by_workers(self.tasks(operands, plan).tasks, out)
        if tasks:
            refs = (*tasks[0].inputs, *([out.locator] if tasks[0].writer is not None else []))
            cluster.check_reachable(refs, self.site)
        cluster.check_fits(projection, self.site)
        with WriteBehind(self._write_tile, out) as writer:
            for task, tile in finished_tiles(tasks, cluster.map(tasks, self.counts, self.site)):
                self.counts.tiles += 1
                if out is None:
                    return tile
                if tile is not None:  # else the worker wrote it
                    writer.submit(task.region, tile)
        return out if isinstance(out, np.ndarray) else None

    @staticmethod
    def _written_by_workers(tasks: tuple[TileTask, ...], out: Any) -> tuple[TileTask, ...]:
        """``tasks``, those whose tile is whole write units of a stored output that takes
        parallel writers (a pending Zarr array) told to write it themselves: an op's output then
        never passes through this process.  Tiles folded in groups are written here."""
        writer = out.parallel_writer() if isinstance(out, BlockedArray) else None
        if writer is None:
            return tasks
        units, shape = out.write_chunks, tuple(out.shape)
        return tuple(
            replace(task, writer=writer)
            if not task.partial and whole_units(task.region, units, shape)
            else task
            for task in tasks
        )

    def _steps(self, plan: Plan) -> Iterator[_Step]:
        """Every step in order: its output tile, whether it ends the tile, its input regions."""
        op = self._block
        for region in op.out_regions(plan):
            previous = None
            for in_regions in op.index_map(region, plan):
                if previous is not None:
                    yield region, False, previous
                previous = in_regions
            if previous is not None:
                yield region, True, previous

    def _forward_loop(
        self, operands: list[Operand], plan: Plan, out: Any, ahead: int = 1
    ) -> np.ndarray | None:
        folder = TileFolder(self._block, plan, [o.value.dtype for o in operands])

        def read(step: _Step) -> list[np.ndarray]:
            return [o.read(r) for o, r in zip(operands, step[2])]

        acc = total = None
        folded = 0  # steps of this tile's current fold group
        with (
            progress.tracking(self.site, lambda: _count(self._steps(plan)), self.counts) as bar,
            WriteBehind(self._write_tile, out) as writer,
        ):
            for (region, last, _), blocks in progress.counted(
                prefetched(self._steps(plan), read, ahead), bar
            ):
                acc = folder.fold(acc, blocks)
                del blocks
                folded += 1
                if plan.fold_steps and (folded == plan.fold_steps or (last and total is not None)):
                    # a group ends: its partial joins the tile's total, as finished_tiles does
                    part = np.asarray(acc) if total is None else acc
                    total = part if total is None else folder.merge(total, part)
                    acc, folded = None, 0
                if not last:
                    continue
                self.counts.tiles += 1
                tile = folder.finish(acc if total is None else total, region)
                acc = total = None
                folded = 0
                if out is None:
                    return tile
                writer.submit(region, tile)
        return out if isinstance(out, np.ndarray) else None

    def tasks(self, operands: list[Operand], plan: Plan | None = None) -> TilePlan:
        """This call's forward pass as independent tile tasks (see :mod:`oocarr.engine.tasks`),
        planned as :meth:`forward` plans it: running them and writing each result at its
        region, in order, gives the bytes :meth:`forward` writes."""
        if plan is None:
            plan, _ = self.forward_plan(operands)
        inputs = tuple(o.ref for o in operands)
        dtypes = tuple(np.dtype(o.value.dtype) for o in operands)
        op = self._block
        tasks = []
        for region in op.out_regions(plan):
            steps = tuple(op.index_map(region, plan))
            fold = plan.fold_steps
            if not fold or len(steps) <= fold:
                tasks.append(TileTask(op, inputs, dtypes, region, steps, plan))
                continue
            starts = range(0, len(steps), fold)
            tasks += [
                TileTask(
                    op,
                    inputs,
                    dtypes,
                    region,
                    steps[i : i + fold],
                    plan,
                    partial=True,
                    last=i == starts[-1],
                )
                for i in starts
            ]
        return TilePlan(tuple(tasks), op.output_shape)

    def _write_tile(self, out: Any, region: Region, tile: np.ndarray) -> None:
        if isinstance(out, np.ndarray):
            out[region] = tile
            return
        value = tile.astype(out.dtype, copy=False)
        out.write_region(region, value)
        self.counts.count_written(value.nbytes)

    def backward(
        self,
        operands: list[Operand],
        g: Operand | np.ndarray,
        targets: list[Any],
        out: Operand | None = None,
    ) -> None:
        """Accumulate each input's gradient into its target (``None``: not needed).

        A target is a writable ``BlockedArray`` or an in-memory NumPy array of
        the input's shape; contributions are added to what it holds.  Ops that
        declare ``needs_output`` also get the forward output's tile (``out``).
        """
        operands = self._counted(operands)
        itemsize = max([o.value.dtype.itemsize for o in operands] + [4])
        g = g if isinstance(g, Operand) else Operand(np.asarray(g))
        g_operand = Operand(g.value, self.counts)
        out = None if out is None else Operand(out.value, self.counts)
        try:
            if isinstance(self.op, CustomOp):
                run = CustomRun(self, operands, itemsize, g_operand, out, targets)
                cluster = current_executor()
                if cluster is None or not self._custom_backward_on(cluster, run, targets):
                    run.backward()
                return
            wanted = tuple(
                i < len(targets) and targets[i] is not None for i in range(len(operands))
            )
            # A whole-budget op planned its tiles for the forward pass; gradient panels written
            # to storage need as much room again as the input panels.
            share = (
                2
                if self.op.whole_budget and any(w and o.stored for w, o in zip(wanted, operands))
                else 1
            )
            plan = self.plan([*operands, g_operand], itemsize, share)
            projection = self.projection([*operands, g_operand], plan, itemsize)
            self.counts.project(projection.nbytes)
            cluster = current_executor()
            if cluster is not None:
                tasks = self.backward_tasks(operands, g_operand, wanted, out, plan).tasks
                if tasks:
                    cluster.check_reachable((*tasks[0].inputs, *tasks[0].tiles), self.site)
                cluster.check_fits(projection, self.site)
                for result in cluster.map(tasks, self.counts, self.site):
                    for i, region, grad in result:
                        _accumulate(targets[i], region, grad, self.counts)
                self.counts.tiles += len(tasks)
                return
            self._backward_loop(operands, g_operand, targets, out, plan, wanted)
        finally:
            record(self.site + " (backward)", self.counts)

    def _backward_loop(
        self,
        operands: list[Operand],
        g_operand: Operand,
        targets: list[Any],
        out: Operand | None,
        plan: Plan,
        wanted: tuple[bool, ...],
    ) -> None:
        extra = [] if out is None else [out]
        readers = [g_operand, *extra]
        gradient = StepGradient(
            self._block,
            plan,
            wanted,
            [o.value.dtype for o in operands],
            [o.value.dtype for o in readers],
            [len(o.shape) for o in readers],
        )
        targets = [t for t, w in zip(targets, wanted) if w]

        def read(step: _Step) -> tuple[list[np.ndarray], list[np.ndarray]]:
            region = step[0]
            tiles = [o.read(region if o.shape else ()) for o in readers]
            return tiles, [o.read(r) for o, r in zip(operands, step[2])]

        def accumulate(_: Any, step: _Step, grads: list[np.ndarray]) -> None:
            regions = [r for r, w in zip(step[2], wanted) if w]
            for target, r, grad in zip(targets, regions, grads):
                _accumulate(target, r, grad, self.counts)

        label = self.site + " (backward)"
        with (
            progress.tracking(label, lambda: _count(self._steps(plan)), self.counts) as bar,
            WriteBehind(accumulate, None) as writer,
        ):
            for step, (tiles, raw) in progress.counted(prefetched(self._steps(plan), read), bar):
                if step[1]:
                    self.counts.tiles += 1
                grads = gradient(tiles, raw)
                writer.submit(step, grads)
                del tiles, raw, grads

    def backward_tasks(
        self,
        operands: list[Operand],
        g: Operand,
        wanted: tuple[bool, ...],
        out: Operand | None = None,
        plan: Plan | None = None,
    ) -> BackwardPlan:
        """This call's backward pass as independent step tasks (see :mod:`oocarr.engine.tasks`),
        planned as :meth:`backward` plans it: adding each task's gradients into the targets,
        in task order, gives the bytes :meth:`backward` writes."""
        if plan is None:
            itemsize = max([o.value.dtype.itemsize for o in operands] + [4])
            share = (
                2
                if self.op.whole_budget and any(w and o.stored for w, o in zip(wanted, operands))
                else 1
            )
            plan = self.plan([*operands, g], itemsize, share)

        readers = [g, *([] if out is None else [out])]
        tasks = tuple(
            BackwardTask(
                self._block,
                tuple(o.ref for o in operands),
                tuple(np.dtype(o.value.dtype) for o in operands),
                tuple(o.ref for o in readers),
                tuple(np.dtype(o.value.dtype) for o in readers),
                tuple(len(o.shape) for o in readers),
                region,
                in_regions,
                wanted,
                plan,
            )
            for region, _, in_regions in self._steps(plan)
        )
        return BackwardPlan(tasks, wanted)


class CustomRun(RunTools):
    """What a :class:`~oocarr.engine.op.CustomOp` drives its loops with, for one call.

    Attributes
    ----------
    inputs : list of Operand
        The inputs; ``inputs[i].read(region)`` reads a block (the last block
        of each input is kept, so reading the same region again is free).
    g, out : Operand or None
        In :meth:`~oocarr.engine.op.CustomOp.backward`: the output's
        cotangent, and the forward output when the op ``needs_output``.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.ops.softmax import Softmax
    >>> x = oocarr.from_numpy(np.zeros((2, 4), "f4")).store
    >>> out = np.empty((2, 4), "f4")
    >>> OOCAlgorithm(Softmax((2, 4))).forward([Operand(x)], out)[0]
    array([0.25, 0.25, 0.25, 0.25], dtype=float32)
    """

    #: Writes tiles (forward) or gradients (backward) behind; set only while a pass runs.
    _writer: WriteBehind

    def __init__(
        self,
        algo: OOCAlgorithm,
        inputs: list[Operand],
        itemsize: int,
        g: Operand | None = None,
        out: Operand | None = None,
        targets: list[Any] | None = None,
    ) -> None:
        self._algo = algo
        self.op = algo._custom
        # what the op reads, as the Run protocol gives them
        self.inputs: Sequence[Reader] = inputs
        self.g: Reader | None = g
        self.out: Reader | None = out
        # the same, as the engine reads them: the inputs, then g and out where given
        self.operands = inputs
        self.readers = [o for o in (g, out) if o is not None]
        self.itemsize = itemsize
        self._targets = targets or []
        self._target: Any = None
        self._bar: progress.Bar | None = None

    # -- planning ---------------------------------------------------------
    def tile_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """A tile of an array of ``shape``: whole chunks of the first chunked input where they
        fit, grown last axis first to one buffer's share of the budget."""
        readers = [*self.operands, *self.readers]
        elems = self._algo.budget_elems(readers, self.itemsize) // self.op.residency
        chunks = _first_chunks(self.operands)
        if chunks is not None and len(chunks) == len(shape):
            tile = pages.grow_block(shape, 1, elems, base=chunks)
            if math.prod(tile) <= elems:
                return tile
        return pages.grow_block(shape, 1, max(1, elems))

    # -- output -----------------------------------------------------------
    def write(self, region: Region, tile: np.ndarray) -> None:
        """Write one finished output tile (behind, while the next computes)."""
        self._algo.counts.tiles += 1
        if self._bar is not None:
            self._bar.advance()
        self._writer.submit(region, np.asarray(tile))

    def written(self, region: Region) -> np.ndarray:
        """Read back a region of the output this forward pass already wrote (an out-of-core
        factorization reads its finished panels): waits for the write behind, counts the
        read."""
        self._writer.wait()
        target = self._target
        if isinstance(target, BlockedArray):
            block = target.read_region(region)
            self._algo.counts.count_read(block.nbytes)
            return block
        return np.array(target[region])

    @contextlib.contextmanager
    def temporary(self, shape: tuple[int, ...], dtype: Any) -> Iterator[Temporary]:
        """A private scratch array of ``shape`` and ``dtype`` for intermediate results that do
        not fit the budget (factors a later pass reads), removed when the block exits."""
        with temporary_store(shape, dtype) as store:
            yield Temporary(store, self._algo.counts)

    def wants_grad(self, i: int) -> bool:
        """Whether input ``i``'s gradient is needed."""
        return i < len(self._targets) and self._targets[i] is not None

    def accumulate(self, i: int, region: Region, grad: np.ndarray) -> None:
        """Add ``grad`` to input ``i``'s gradient over ``region`` (behind, in order)."""
        if self.wants_grad(i):
            self._algo.counts.tiles += 1
            if self._bar is not None:
                self._bar.advance()
            self._writer.submit(i, region, np.asarray(grad))

    def _add_grad(self, _: Any, i: int, region: Region, grad: np.ndarray) -> None:
        _accumulate(self._targets[i], region, grad, self._algo.counts)

    def forward(self, out: BlockedArray | np.ndarray | None) -> np.ndarray | None:
        """Run the op's forward loops, writing into ``out`` (a new array when ``None``)."""
        target = np.empty(self.op.output_shape, np.float64) if out is None else out
        self._target = target
        counts = self._algo.counts
        with (
            progress.tracking(self._algo.site, None, counts) as self._bar,
            WriteBehind(self._algo._write_tile, target) as self._writer,
        ):
            self.op.forward(self)
        self._bar = None
        del self._writer
        # a new array when ``out`` is None
        return target if isinstance(target, np.ndarray) else None

    def backward(self) -> None:
        """Run the op's backward loops, adding into the gradient targets."""
        label, counts = self._algo.site + " (backward)", self._algo.counts
        with (
            progress.tracking(label, None, counts) as self._bar,
            WriteBehind(self._add_grad, None) as self._writer,
        ):
            self.op.backward(self)
        self._bar = None
        del self._writer


class Temporary:
    """A scratch array a :class:`CustomRun` lends for one pass: ``read`` and ``write``
    regions, I/O counted with the op's."""

    def __init__(self, store: BlockedArray, counts: IOCounts) -> None:
        self.store = store
        self._counts = counts

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.store.shape)

    def read(self, region: Region) -> np.ndarray:
        block = self.store.read_region(region)
        self._counts.count_read(block.nbytes)
        return block

    def write(self, region: Region, value: np.ndarray) -> None:
        value = np.asarray(value, self.store.dtype)
        self.store.write_region(region, value)
        self._counts.count_written(value.nbytes)


@contextlib.contextmanager
def temporary_store(shape: tuple[int, ...], dtype: Any) -> Iterator[BlockedArray]:
    """A private, zero-filled scratch array, deleted (with its container) on exit."""
    locator = scratch_locator(None, shape, dtype)
    driver = get_driver(locator.driver)
    store = driver.create(locator, tuple(shape), np.dtype(dtype), overwrite=True)
    try:
        yield store
    finally:
        if store.pending:  # a driver that stages writes: drop them, nothing is published
            with contextlib.suppress(Exception):
                store.abort()
        with contextlib.suppress(OSError):
            driver.delete(locator)
        release(locator)


def _first_chunks(operands: Sequence[Operand]) -> tuple[int, ...] | None:
    """The chunks of the first stored operand that has them."""
    return next(
        (
            o.value.chunks
            for o in operands
            if isinstance(o.value, BlockedArray) and o.value.chunks is not None
        ),
        None,
    )


def _count(items: Iterator[Any]) -> int:
    return sum(1 for _ in items)


def _accumulate(target: Any, region: Region, grad: np.ndarray, counts: IOCounts) -> None:
    if isinstance(target, BlockedArray):
        current = target.read_region(region)
        counts.count_read(current.nbytes)
        target.write_region(
            region, (current + grad.reshape(current.shape)).astype(target.dtype, copy=False)
        )
        counts.count_written(current.nbytes)
    else:
        view = target[region] if region else target
        view += grad.reshape(view.shape).astype(target.dtype, copy=False)
