"""Axis permutation: an output tile is the permuted input tile."""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp

from oocarr.engine.op import BlockParallelOp, Plan, Region
from oocarr.errors import InvalidArgumentError

__all__ = ["Transpose"]


class Transpose(BlockParallelOp):
    """``transpose(x, axes=None)``: reverse the axes, or permute them as ``axes`` says."""

    name = "transpose"
    residency = 3
    shape_dependent = True

    def compute_output_shape(self) -> tuple[int, ...]:
        (shape,) = self.in_shapes
        axes = self.params.get("axes")
        axes = tuple(reversed(range(len(shape)))) if axes is None else tuple(axes)
        if sorted(a % max(1, len(shape)) for a in axes) != list(range(len(shape))):
            raise InvalidArgumentError(f"axes {axes} are not a permutation of {len(shape)} axes")
        self.axes = tuple(a % len(shape) for a in axes)
        return tuple(shape[a] for a in self.axes)

    def index_map(self, out_region: Region, plan: Plan) -> Iterator[tuple[Region, ...]]:
        region = [slice(0, 0)] * len(self.axes)
        for out_axis, in_axis in enumerate(self.axes):
            region[in_axis] = out_region[out_axis]
        yield (tuple(region),)

    def forward_block(self, block: jax.Array) -> jax.Array:
        return jnp.transpose(block, self.axes)
