"""Basic slicing under ``jax.jit`` and ``jax.grad``: ``x[2:10, 3]`` copied tile by tile.

Outside a transformation, slicing a ``DiskArray`` gives a view (no copy);
inside one, the slice is this op, whose output tile is the matching input
tile with the integer-indexed axes dropped, and whose gradient adds each
output tile back into its region of the input's (zero elsewhere).
"""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.engine.op import BlockParallelOp, Plan, Region
from oocarr.errors import InvalidArgumentError

__all__ = ["Slice"]


class Slice(BlockParallelOp):
    """``x[region]``: ``region`` holds ``(start, stop, kept)`` per axis (``kept`` false for an
    integer index, whose axis is dropped)."""

    name = "getitem"
    residency = 3
    pad_mode = "edge"

    def compute_output_shape(self) -> tuple[int, ...]:
        (shape,) = self.in_shapes
        region = tuple(tuple(r) for r in self.params["region"])
        if len(region) != len(shape) or any(
            not 0 <= start <= stop <= n for (start, stop, _), n in zip(region, shape)
        ):
            raise InvalidArgumentError(f"region {region} does not fit an array of shape {shape}")
        self.region = region
        self.dropped = tuple(axis for axis, (_, _, kept) in enumerate(region) if not kept)
        return tuple(stop - start for start, stop, kept in region if kept)

    def index_map(self, out_region: Region, plan: Plan) -> Iterator[tuple[Region, ...]]:
        parts = iter(out_region)
        in_region = []
        for start, stop, kept in self.region:
            if kept:
                r = next(parts)
                in_region.append(slice(start + r.start, start + r.stop))
            else:
                in_region.append(slice(start, stop))
        yield (tuple(in_region),)

    def result_dtype(self, *inputs: jax.ShapeDtypeStruct) -> np.dtype:
        return np.dtype(inputs[0].dtype)

    def forward_block(self, block: jax.Array) -> jax.Array:
        return jnp.squeeze(block, axis=self.dropped) if self.dropped else block
