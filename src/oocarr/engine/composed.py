"""Reductions of fused arrays in one kernel: the consumer's block function evaluates the chain.

A block-parallel op (a sum, a mean, a maximum) whose input is a fused array
(:mod:`oocarr.engine.fused`) runs as a :class:`ComposedOp`: it reads the fused
array's leaves' blocks and evaluates the chain inside its own jitted block
function, so XLA computes chain and reduction in one kernel per step and the
chain's output tile is never formed.  ``jax.jit(lambda a, b: oocarr.sum(((a -
b) * 2) ** 2))`` on 2 × 2 GiB ``.npy`` files: 1.94 s reading the fused array's
tiles, 0.28 s composed (``stream_sum`` of the same chain: 0.28 s).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from oocarr.store.dtypes import as_dtype, dtype_token
from oocarr.store.regions import broadcast_region

from .fused import FusedArray, expression
from .fused_layout import has_row_local
from .io import Operand
from .op import BlockParallelOp, Plan, Region

__all__ = ["ComposedOp", "composed"]


class ComposedOp(BlockParallelOp):
    """``op`` reading its fused inputs' leaves, each chain evaluated inside ``op``'s own block
    functions, so the chain's output tile is never formed (one kernel per step, as
    ``stream_sum`` runs).

    ``parts`` has one item per input of ``op``: ``None`` (read as it is) or ``(expression,
    leaf shapes, dtype)`` of a fused input, read as its leaves' blocks.  Edge blocks are not
    padded (the chain of padding is not ``op``'s padding value): an edge step compiles its
    own block function.

    Examples
    --------
    >>> import json, numpy as np
    >>> from oocarr.engine.fused import Leaf, fused_locator, program_of
    >>> from oocarr.ops.elementwise import UNARY
    >>> from oocarr.ops.reductions import Sum
    >>> from oocarr.store.locator import Locator
    >>> a = Leaf.stored(Locator.make("memmap", "/a.npy"), (6, 2))
    >>> spec = json.loads(fused_locator(UNARY["exp"], [a], (6, 2), "f4").url)
    >>> op = ComposedOp(Sum((6, 2)), [(program_of(spec), ((6, 2),), "float32")])
    >>> op.in_shapes, op.output_shape, float(op.forward_block(np.zeros((6, 2), "f4")))
    (((6, 2),), (), 12.0)
    """

    pads_edge_blocks = False

    def __init__(self, op: BlockParallelOp, parts: Sequence[tuple | None]) -> None:
        self.op = op
        self.parts = tuple(parts)
        self.name = op.name
        self.residency = op.residency + sum(len(p[1]) for p in self.parts if p is not None)
        shapes: list[tuple[int, ...]] = []
        for shape, part in zip(op.in_shapes, self.parts):
            shapes += [shape] if part is None else [tuple(s) for s in part[1]]
        super().__init__(*shapes)

    def compute_output_shape(self) -> tuple[int, ...]:
        return self.op.output_shape

    @property
    def key(self) -> tuple:
        return (type(self), self.op.key, self.parts)

    @property
    def block_key(self) -> tuple:
        return (type(self), self.op.block_key, self.in_shapes, self.parts)

    def _inner_dtypes(self, dtypes: Sequence[np.dtype]) -> list[np.dtype]:
        it = iter(dtypes)
        inner = []
        for part in self.parts:
            if part is None:
                inner.append(next(it))
                continue
            for _ in part[1]:
                next(it)
            inner.append(as_dtype(part[2]))
        return inner

    def tile_itemsize(self, dtypes: Sequence[np.dtype], plan: Plan | None = None) -> int:
        inner = self.op.tile_itemsize(self._inner_dtypes(dtypes), plan)
        return max([inner, *(np.dtype(d).itemsize for d in dtypes)])

    def min_tile_elems(self) -> int:
        return self.op.min_tile_elems()

    def min_tile_label(self) -> str:
        return self.op.min_tile_label()

    def plan(self, budget_elems: int, chunks: tuple[int, ...] | None, host: bool = False) -> Plan:
        """``op``'s plan, with its share of each tile-sized buffer scaled to the leaves'."""
        return self.op.plan(budget_elems * self.op.residency // self.residency, chunks)

    def index_map(self, out_region: Region, plan: Plan) -> Iterator[tuple[Region, ...]]:
        for regions in self.op.index_map(out_region, plan):
            flat: list[Region] = []
            for region, part in zip(regions, self.parts):
                if part is None:
                    flat.append(region)
                    continue
                flat += [broadcast_region(region, s) for s in part[1]]
            yield tuple(flat)

    def forward_block(self, *blocks: Any) -> Any:
        it = iter(blocks)
        inputs = []
        for region_shape, part in zip(self._block_shapes(blocks), self.parts):
            if part is None:
                inputs.append(next(it))
                continue
            expr, leaf_shapes, dtype = part
            value = expression(expr)(*(next(it) for _ in leaf_shapes))
            inputs.append(jnp.broadcast_to(value.astype(as_dtype(dtype)), region_shape))
        return self.op.forward_block(*inputs)

    def _block_shapes(self, blocks: Sequence[Any]) -> list[tuple[int, ...]]:
        """The shape of each of ``op``'s input blocks, from the leaves' blocks (NumPy
        broadcasting of a fused input's leaves)."""
        it = iter(blocks)
        shapes = []
        for part in self.parts:
            if part is None:
                shapes.append(tuple(next(it).shape))
                continue
            shapes.append(np.broadcast_shapes(*(tuple(next(it).shape) for _ in part[1])))
        return shapes

    def combine(self, acc: Any, part: Any) -> Any:
        return self.op.combine(acc, part)

    def finish(self, acc: Any) -> Any:
        return self.op.finish(acc)


def composed(op: BlockParallelOp, operands: Sequence[Operand]) -> tuple | None:
    """``(ComposedOp, operands)`` reading the leaves of ``op``'s fused inputs in place of their
    tiles, or ``None`` when ``op`` has no fused input or plans its own whole budget
    (``matmul``, whose host BLAS folds the blocks as they are read).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.engine import OOCAlgorithm
    >>> from oocarr.engine.fused import Leaf, fused_locator
    >>> from oocarr.ops.elementwise import UNARY
    >>> from oocarr.ops.reductions import Sum
    >>> x = oocarr.from_numpy(np.arange(4.0, dtype="f4"))
    >>> loc = fused_locator(UNARY["square"], [Leaf.stored(x.locator, (4,))], (4,), "f4")
    >>> with FusedArray._open(loc, "r") as squares:
    ...     op, operands = composed(Sum((4,)), [Operand(squares)])
    ...     float(OOCAlgorithm(op).forward(operands))
    14.0
    """
    fused_inputs = [isinstance(o.value, FusedArray) for o in operands]
    if not any(fused_inputs) or op.whole_budget or len(operands) != len(op.in_shapes):
        return None
    parts: list[tuple | None] = []
    flat: list[Operand] = []
    for operand in operands:
        array = operand.value
        if not isinstance(array, FusedArray):
            parts.append(None)
            flat.append(operand)
            continue
        if has_row_local(array.spec):  # its leaves' regions are not the op's broadcast ones
            return None
        program, shapes, holders = array.leaves_read()
        if not shapes:  # nothing read by region: the array's tiles give its shape
            return None
        parts.append((program, tuple(shapes), dtype_token(array.dtype)))
        flat += [Operand(holder, operand.counts) for holder in holders]
    return ComposedOp(op, parts), flat
