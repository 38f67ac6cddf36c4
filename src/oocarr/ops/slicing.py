"""Basic slicing under ``jax.jit`` and ``jax.grad``: ``x[2:10, 3]`` copied tile by tile.

Outside a transformation, slicing a ``DiskArray`` gives a view (no copy);
inside one, the slice is this op, whose output tile is the matching input
tile with the integer-indexed axes dropped, and whose gradient adds each
output tile back into its region of the input's (zero elsewhere).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.engine.op import BlockParallelOp, Plan, Region
from oocarr.errors import InvalidArgumentError

__all__ = ["Slice"]


def _bounds(r: tuple) -> tuple[int, int, int]:
    """``(start, stop, step)`` of one axis's entry of a region."""
    return r[0], r[1], r[3] if len(r) > 3 else 1


def _fits(r: tuple, n: int) -> bool:
    """Whether an axis's entry of a region selects within an axis of length ``n``."""
    start, stop, step = _bounds(r)
    if step == 1:
        return 0 <= start <= stop <= n
    picked = range(start, stop, step)
    return not picked or (min(picked[0], picked[-1]) >= 0 and max(picked[0], picked[-1]) < n)


class Slice(BlockParallelOp):
    """``x[region]``: ``region`` holds ``(start, stop, kept)`` per axis (``kept`` false for an
    integer index, whose axis is dropped), and ``None`` where a new axis of length one goes."""

    name = "getitem"
    residency = 3
    pad_mode = "edge"

    def compute_output_shape(self) -> tuple[int, ...]:
        (shape,) = self.in_shapes
        region = tuple(None if r is None else tuple(r) for r in self.params["region"])
        on_input = [r for r in region if r is not None]
        if len(on_input) != len(shape) or any(not _fits(r, n) for r, n in zip(on_input, shape)):
            raise InvalidArgumentError(f"region {region} does not fit an array of shape {shape}")
        self.region = region
        self.dropped = tuple(axis for axis, r in enumerate(on_input) if not r[2])
        self.steps = tuple(r[3] if len(r) > 3 else 1 for r in on_input)
        out = [r for r in region if r is None or r[2]]
        self.new_axes = tuple(axis for axis, r in enumerate(out) if r is None)
        # a negative step reverses its axis: the padding of an edge block must go first
        self.pad_front = tuple(axis for axis, step in enumerate(self.steps) if step < 0)
        # an input block covers the selected elements of a strided axis: |step| times the
        # output tile's extent, which the tiles' count of the budget must hold
        spread = math.prod(abs(step) for step in self.steps)
        if spread > 1:
            self.residency = type(self).residency + spread
        return tuple(1 if r is None else len(range(*_bounds(r))) for r in out)

    def index_map(self, out_region: Region, plan: Plan) -> Iterator[tuple[Region, ...]]:
        parts = iter(out_region)
        in_region = []
        for r in self.region:
            if r is None:  # a new axis: its part of the output tile has no input
                next(parts)
                continue
            start, stop, kept = r[:3]
            step = r[3] if len(r) > 3 else 1
            if not kept:
                in_region.append(slice(start, stop))
                continue
            part = next(parts)
            if step == 1:
                in_region.append(slice(start + part.start, start + part.stop))
            else:  # the range covering the part's elements, strided by forward_block
                first, last = start + step * part.start, start + step * (part.stop - 1)
                in_region.append(slice(min(first, last), max(first, last) + 1))
        yield (tuple(in_region),)

    def result_dtype(self, *inputs: jax.ShapeDtypeStruct) -> np.dtype:
        return np.dtype(inputs[0].dtype)

    def forward_block(self, block: jax.Array) -> jax.Array:
        if any(step != 1 for step in self.steps):
            block = block[tuple(slice(None, None, step) for step in self.steps)]
        block = jnp.squeeze(block, axis=self.dropped) if self.dropped else block
        return jnp.expand_dims(block, self.new_axes) if self.new_axes else block
