"""2-d matrix product: an output tile accumulates row-panel × column-panel products over k."""

from __future__ import annotations

import math
from collections.abc import Iterator

import jax

from ..errors import ShapeMismatchError
from .base import BlockParallelOp, Plan, Region

__all__ = ["Matmul"]


class Matmul(BlockParallelOp):
    """``a @ b`` for 2-d ``a`` (m, k) and ``b`` (k, n)."""

    name = "matmul"
    residency = 5  # a tile, b tile, partial product, accumulator, output tile

    def compute_output_shape(self) -> tuple[int, ...]:
        a, b = self.in_shapes
        if len(a) != 2 or len(b) != 2 or a[1] != b[0]:
            raise ShapeMismatchError(f"matmul needs (m, k) @ (k, n) matrices, got {a} @ {b}")
        return (a[0], b[1])

    def plan(self, budget_elems: int, chunks) -> Plan:
        (m, k), (_, n) = self.in_shapes
        side = max(1, math.isqrt(max(1, budget_elems // self.residency)))
        tm, tn = min(max(m, 1), side), min(max(n, 1), side)
        tk = min(max(k, 1), max(1, budget_elems // self.residency // max(tm, tn)))
        return Plan((tm, tn), {"k": tk})

    def index_map(self, out_region: Region, plan: Plan) -> Iterator[tuple[Region, ...]]:
        rows, cols = out_region
        k = self.in_shapes[0][1]
        step = plan.extra["k"]
        for start in range(0, k, step):
            ks = slice(start, min(start + step, k))
            yield (rows, ks), (ks, cols)
        if k == 0:
            yield (rows, slice(0, 0)), (slice(0, 0), cols)

    def forward_block(self, a: jax.Array, b: jax.Array) -> jax.Array:
        return a @ b
