"""The out-of-core engine: tiled forward and backward loops over ``BlockedArray``s.

:class:`OOCAlgorithm` runs one op call: it plans tiles from the memory
budget, reads the input regions each output tile needs, applies the op's
jitted block function, folds partial results and writes each finished
tile.  Inputs may be stored (a :class:`~oocarr.blocked.BlockedArray`) or in
memory (a NumPy array, broadcast like any other input).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from .blocked import BlockedArray
from .config import memory_budget_bytes
from .errors import BudgetTooSmallError
from .malloc import fix_mmap_threshold
from .ops.base import BlockParallelOp, Plan, Region
from .stats import IOCounts, record

fix_mmap_threshold()

__all__ = ["OOCAlgorithm", "Operand"]


class Operand:
    """One input of an op call as the engine reads it: stored or in memory."""

    def __init__(self, value: BlockedArray | np.ndarray, counts: IOCounts | None = None) -> None:
        self.value = value
        self.stored = isinstance(value, BlockedArray)
        self.counts = counts

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.value.shape)

    def read(self, region: Region) -> np.ndarray:
        if self.stored:
            block = self.value.read_region(region)
            if self.counts is not None:
                self.counts.bytes_read += block.nbytes
                self.counts.pages_read += 1
            return block
        return np.asarray(self.value[region]) if region else np.asarray(self.value)


_JITTED: dict[tuple, tuple] = {}


def _jitted(op: BlockParallelOp) -> tuple:
    """Block functions compiled once per op and parameters, reused across calls."""
    fns = _JITTED.get(op.block_key)
    if fns is None:
        fns = jax.jit(op.forward_block), jax.jit(op.backward_block), jax.jit(op.combine)
        _JITTED[op.block_key] = fns
    return fns


class OOCAlgorithm:
    """The tiled forward and backward loops of one op.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.ops.reductions import Sum
    >>> x = oocarr.from_numpy(np.arange(10.0)).store
    >>> float(OOCAlgorithm(Sum((10,))).forward([Operand(x)]))
    45.0
    """

    def __init__(self, op: BlockParallelOp, site: str | None = None) -> None:
        self.op = op
        self.site = site or op.name
        self.counts = IOCounts(calls=1)
        self._forward, self._backward, self._combine = _jitted(op)

    def _counted(self, operands: list[Operand]) -> list[Operand]:
        return [Operand(o.value, self.counts) for o in operands]

    def plan(self, operands: list[Operand], itemsize: int) -> Plan:
        """Tiles for this call, from the budget, the op's residency and the inputs' chunks."""
        budget = memory_budget_bytes()
        need = self.op.residency * self.op.min_tile_elems() * itemsize
        if need > budget:
            raise BudgetTooSmallError(
                f"the memory budget of {budget} bytes cannot hold one tile of {self.op.name} "
                f"({need} bytes); raise it with oocarr.set_memory_budget"
            )
        chunks = next(
            (o.value.chunks for o in operands if o.stored and o.value.chunks is not None), None
        )
        return self.op.plan(budget // itemsize, chunks)

    def forward(
        self, operands: list[Operand], out: BlockedArray | np.ndarray | None = None
    ) -> np.ndarray | None:
        """Compute the output into ``out`` (a store or an array); 0-d outputs are returned."""
        operands = self._counted(operands)
        itemsize = max([o.value.dtype.itemsize for o in operands] + [4])
        plan = self.plan(operands, itemsize)
        nominal = _Nominal(self.op, plan)
        try:
            if isinstance(out, np.ndarray):
                for region in self.op.out_regions(plan):
                    out[region] = self._tile(operands, plan, nominal, region)
                return out
            for region in self.op.out_regions(plan):
                tile = self._tile(operands, plan, nominal, region)
                if out is None:
                    return tile
                self._write(out, region, tile.astype(out.dtype, copy=False))
            return None
        finally:
            record(self.site, self.counts)

    def _write(self, out: BlockedArray, region: Region, value: np.ndarray) -> None:
        out.write_region(region, value)
        self.counts.bytes_written += value.nbytes
        self.counts.pages_written += 1

    def _tile(self, operands: list[Operand], plan: Plan, nominal: _Nominal, region: Region):
        self.counts.tiles += 1
        acc = None
        for in_regions in self.op.index_map(region, plan):
            blocks = nominal.inputs([o.read(r) for o, r in zip(operands, in_regions)])
            part = self._forward(*blocks)
            acc = part if acc is None else self._combine(acc, part)
            # Dispatch is asynchronous: without waiting, the input blocks of many steps stay
            # alive in the queue and the tiles in memory are no longer bounded by the budget.
            jax.block_until_ready(acc)
        return nominal.crop(np.asarray(self.op.finish(acc)), region)

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
        plan = self.plan(operands, itemsize)
        nominal = _Nominal(self.op, plan)
        g = g if isinstance(g, Operand) else Operand(np.asarray(g))
        g_operand = Operand(g.value, self.counts)
        out = None if out is None else Operand(out.value, self.counts)
        try:
            self._backward_loop(operands, g_operand, targets, out, plan, nominal)
        finally:
            record(self.site + " (backward)", self.counts)

    def _backward_loop(self, operands, g_operand, targets, out, plan, nominal) -> None:
        for region in self.op.out_regions(plan):
            self.counts.tiles += 1
            g_tile = nominal.output(g_operand.read(region if g_operand.shape else ()))
            extra = () if out is None else (nominal.output(out.read(region if out.shape else ())),)
            for in_regions in self.op.index_map(region, plan):
                raw = [o.read(r) for o, r in zip(operands, in_regions)]
                grads = jax.block_until_ready(self._backward(g_tile, *extra, *nominal.inputs(raw)))
                for target, r, grad, block in zip(targets, in_regions, grads, raw):
                    if target is not None:
                        grad = _crop_to(np.asarray(grad), block.shape)
                        _accumulate(target, r, grad, self.counts)


class _Nominal:
    """Pads edge tiles to the shape of the first (full) tile, so each op's block functions
    compile once instead of once per edge shape; results are cropped back."""

    def __init__(self, op: BlockParallelOp, plan: Plan) -> None:
        self.op = op
        first = next(op.out_regions(plan), None)
        self.out_shape = () if first is None else tuple(r.stop - r.start for r in first)
        steps = () if first is None else next(iter(op.index_map(first, plan)), ())
        self.in_shapes = [tuple(r.stop - r.start for r in regions) for regions in steps]

    def inputs(self, blocks: list[np.ndarray]) -> list[np.ndarray]:
        op = self.op
        return [_pad(b, s, op.pad_mode, op.pad_value) for b, s in zip(blocks, self.in_shapes)]

    def output(self, tile: np.ndarray) -> np.ndarray:
        if tile.ndim != len(self.out_shape):
            return tile
        return _pad(tile, self.out_shape, "constant")

    def crop(self, tile: np.ndarray, region: Region) -> np.ndarray:
        return _crop_to(tile, tuple(r.stop - r.start for r in region))


def _pad(block: np.ndarray, shape: tuple[int, ...], mode: str, value: float = 0) -> np.ndarray:
    if block.shape == shape or block.ndim != len(shape):
        return block
    widths = [(0, max(0, s - b)) for b, s in zip(block.shape, shape)]
    if mode == "constant" or not block.size:
        return np.pad(block, widths, mode="constant", constant_values=value)
    return np.pad(block, widths, mode=mode)


def _crop_to(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if array.shape == shape or array.ndim != len(shape):
        return array
    return array[tuple(slice(0, n) for n in shape)]


def _accumulate(target: Any, region: Region, grad: np.ndarray, counts: IOCounts) -> None:
    if isinstance(target, BlockedArray):
        current = target.read_region(region)
        counts.bytes_read += current.nbytes
        counts.bytes_written += current.nbytes
        counts.pages_read += 1
        counts.pages_written += 1
        target.write_region(
            region, (current + grad.reshape(current.shape)).astype(target.dtype, copy=False)
        )
    else:
        view = target[region] if region else target
        view += grad.reshape(view.shape).astype(target.dtype, copy=False)
