"""Matrix product with NumPy's ``matmul`` rules: stacks of matrices broadcast over their batch
axes, and 1-d operands are vectors.  An output tile accumulates row-panel × column-panel
products over k."""

from __future__ import annotations

import math
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.engine.op import INPUT_TILES, BlockParallelOp, Plan, Region
from oocarr.errors import ShapeMismatchError

from .elementwise import broadcast_region

__all__ = ["Matmul"]


class Matmul(BlockParallelOp):
    """``a @ b``: ``(..., m, k) @ (..., k, n)``, with ``(k,)`` vectors on either side."""

    name = "matmul"
    residency = 5  # for the budget check: a panel, b panel, partial, accumulator, output tile
    whole_budget = True
    shape_dependent = True

    def compute_output_shape(self) -> tuple[int, ...]:
        a, b = self.in_shapes
        if not a or not b:
            raise ShapeMismatchError(f"matmul needs arrays of at least 1 axis, got {a} @ {b}")
        self.a_vec, self.b_vec = len(a) == 1, len(b) == 1
        pa = (1, *a) if self.a_vec else a
        pb = (*b, 1) if self.b_vec else b
        if pa[-1] != pb[-2]:
            raise ShapeMismatchError(
                f"matmul: the last axis of {a} does not match the contraction axis of {b}"
            )
        try:
            self.batch = tuple(np.broadcast_shapes(pa[:-2], pb[:-2]))
        except ValueError:
            raise ShapeMismatchError(
                f"matmul: batch axes of {a} and {b} do not broadcast"
            ) from None
        self.m, self.k, self.n = pa[-2], pa[-1], pb[-1]
        self.a_batch, self.b_batch = pa[:-2], pb[:-2]
        return (
            *self.batch,
            *(() if self.a_vec else (self.m,)),
            *(() if self.b_vec else (self.n,)),
        )

    def plan(self, budget_elems: int, chunks) -> Plan:
        """Output tiles as large as the budget allows, fed by thin k-panels of ``a`` and ``b``.

        Each input is read ``n / tn`` (``a``) or ``m / tm`` (``b``) times, so
        the output tile is what has to be large.  ``budget_elems`` is the whole
        budget (``whole_budget``): the accumulator (updated in place), the
        product being added to it and the finished tile waiting to be written
        take ``3 tm tn``; the panels of ``a`` and ``b``, ``INPUT_TILES + 1``
        each (the one in use, the next one read ahead, the previous one until
        XLA lets go of it), ``3 tk (tm + tn)``.  Square tiles with
        ``tk = side / 16`` spend it as ``3.375 side²``; a short side (a vector,
        a tall-skinny product) leaves room to lengthen the other.  Sides are
        balanced so that no edge tile is mostly padding.
        """
        total = max(1, budget_elems)
        m = 1 if self.a_vec else max(self.m, 1)
        n = 1 if self.b_vec else max(self.n, 1)
        k = max(self.k, 1)
        side = max(1, math.isqrt(total * 8 // 27))
        tm, tn = min(m, side), min(n, side)
        # Lengthening the long side only saves re-reads of the short operand, a fraction
        # short / long of the long one's bytes: beyond SHORT_SIDE_RATIO times, not worth memory.
        if tn < side and tn <= tm:
            longest = max(side, SHORT_SIDE_RATIO * tn)
            tm = min(m, longest, max(tm, (total - 3 * k * tn) // (3 * tn + 3 * k)))
        elif tm < side:
            longest = max(side, SHORT_SIDE_RATIO * tm)
            tn = min(n, longest, max(tn, (total - 3 * k * tm) // (3 * tm + 3 * k)))
        tm, tn = _balanced(m, tm), _balanced(n, tn)
        tk = _balanced(k, min(k, max(1, (total - 3 * tm * tn) // (3 * (tm + tn)))))
        tile = (
            *(1 for _ in self.batch),
            *(() if self.a_vec else (tm,)),
            *(() if self.b_vec else (tn,)),
        )
        return Plan(tile, {"k": tk})

    def buffers(self, out_tile, in_blocks, stored) -> list[tuple[str, int, int]]:
        """What :meth:`plan` counts: three output-tile buffers and three panels of each side."""
        panels = INPUT_TILES + 1
        return [
            ("accumulator, product and finished tile", 3, math.prod(out_tile)),
            ("a panels (in use, read ahead, held by XLA)", panels, math.prod(in_blocks[0])),
            ("b panels (in use, read ahead, held by XLA)", panels, math.prod(in_blocks[1])),
        ]

    def index_map(self, out_region: Region, plan: Plan) -> Iterator[tuple[Region, ...]]:
        nb = len(self.batch)
        batch, rest = out_region[:nb], list(out_region[nb:])
        rows = slice(0, 1) if self.a_vec else rest.pop(0)
        cols = slice(0, 1) if self.b_vec else rest.pop(0)
        a_batch = broadcast_region(batch, self.a_batch) if self.a_batch else ()
        b_batch = broadcast_region(batch, self.b_batch) if self.b_batch else ()
        step = plan.extra["k"]
        starts = range(0, self.k, step) if self.k else [0]
        for start in starts:
            ks = slice(start, min(start + step, self.k))
            a_region = (ks,) if self.a_vec else (*a_batch, rows, ks)
            b_region = (ks,) if self.b_vec else (*b_batch, ks, cols)
            yield a_region, b_region

    def forward_block(self, a: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.matmul(a, b)


#: How much longer than a short side (a vector, a narrow matrix) the other side of an output
#: tile grows, budget permitting.
SHORT_SIDE_RATIO = 64

#: Tile sides above this are rounded to a multiple of it where that fits: vector widths and
#: storage chunks are powers of two.
_ALIGN = 128


def _balanced(extent: int, most: int) -> int:
    """The tile side, at most ``most``, that cuts ``extent`` into the fewest, most equal parts.

    A multiple of :data:`_ALIGN` that divides ``extent`` exactly is preferred when one lies
    between ``most / 2`` and ``most``.

    >>> _balanced(4096, 2828), _balanced(8192, 1365), _balanced(1000, 300), _balanced(7, 3)
    (2048, 1024, 250, 3)
    """
    most = max(1, min(most, extent))
    for side in range(most - most % _ALIGN, most // 2, -_ALIGN):
        if side and extent % side == 0:
            return side
    parts = -(-extent // most)
    return -(-extent // parts)
