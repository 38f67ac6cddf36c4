"""Matrix product with NumPy's ``matmul`` rules: stacks of matrices broadcast over their batch
axes, and 1-d operands are vectors.  An output tile accumulates row-panel × column-panel
products over k."""

from __future__ import annotations

import math
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import ShapeMismatchError
from .base import BlockParallelOp, Plan, Region
from .elementwise import broadcast_region

__all__ = ["Matmul"]


class Matmul(BlockParallelOp):
    """``a @ b``: ``(..., m, k) @ (..., k, n)``, with ``(k,)`` vectors on either side."""

    name = "matmul"
    residency = 5  # a tile, b tile, partial product, accumulator, output tile
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
        per = max(1, budget_elems // self.residency)
        side = max(1, math.isqrt(per))
        tm = 1 if self.a_vec else min(max(self.m, 1), side)
        tn = 1 if self.b_vec else min(max(self.n, 1), side)
        tk = min(max(self.k, 1), max(1, per // max(tm, tn)))
        tile = (
            *(1 for _ in self.batch),
            *(() if self.a_vec else (tm,)),
            *(() if self.b_vec else (tn,)),
        )
        return Plan(tile, {"k": tk})

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
