"""``cumulative_sum`` along one axis, streamed with a running carry.

Each panel (a tile's extent on the other axes) walks the axis's tiles in order; a tile's
output is the carry plus its own cumulative sum, and its last line is the next carry.  The
gradient is the reversed cumulative sum of the cotangent: the same walk backwards, the carry
holding the sum of the cotangent's later tiles.
"""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.engine.op import CustomOp, Region, Run, cotangent
from oocarr.errors import InvalidArgumentError
from oocarr.ops.prod import compute_dtype

__all__ = ["CumulativeSum"]


class CumulativeSum(CustomOp):
    """``cumulative_sum(x, axis=None, dtype=None, include_initial=False)``, as
    ``jax.numpy.cumulative_sum`` (``axis`` may be ``None`` only for a 1-d ``x``)."""

    name = "cumulative_sum"
    # the block as read, its padded copy, its cumulative sums (backward: the cotangent's), and
    # the panel's carry
    residency = 4

    def compute_output_shape(self) -> tuple[int, ...]:
        (shape,) = self.in_shapes
        axis = self.params.get("axis")
        if not shape:
            raise InvalidArgumentError("cumulative_sum needs an array of at least 1 axis, got 0-d")
        if axis is None:
            if len(shape) != 1:
                raise InvalidArgumentError(
                    f"cumulative_sum of an array of {len(shape)} axes needs axis=; it may be "
                    "omitted only for a 1-d array"
                )
            axis = 0
        if not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
            raise InvalidArgumentError(
                f"cumulative_sum axis {axis!r} is out of range for an array of {len(shape)} axes"
            )
        self.axis = axis % len(shape)
        self.initial = int(bool(self.params.get("include_initial", False)))
        return tuple(n + self.initial if a == self.axis else n for a, n in enumerate(shape))

    @property
    def block_key(self) -> tuple:
        """The block functions depend on the rank, the normalized axis and ``dtype`` only."""
        dtype = self.params.get("dtype")
        return (type(self), len(self.in_shapes[0]), self.axis, dtype)

    def result_dtype(self, *inputs: jax.ShapeDtypeStruct) -> np.dtype:
        dtype = self.params.get("dtype")
        like = jax.ShapeDtypeStruct((1,), inputs[0].dtype)
        return np.dtype(jax.eval_shape(lambda v: jnp.cumulative_sum(v, dtype=dtype), like).dtype)

    def _out_dtype(self, dtype: np.dtype) -> np.dtype:
        return self.result_dtype(jax.ShapeDtypeStruct((), dtype))

    def _columns(self, run: Run) -> Iterator[tuple[Region, list[Region], tuple[int, ...]]]:
        """Each panel (``slice(0, 1)`` on the axis), its regions along the axis in order, and
        the tile shape."""
        (shape,) = self.in_shapes
        axis = self.axis
        tile = run.tile_shape(shape)
        panel_shape = shape[:axis] + (1,) + shape[axis + 1 :]
        panel_tile = tile[:axis] + (1,) + tile[axis + 1 :]
        for panel in run.regions(panel_shape, panel_tile):
            yield (
                panel,
                [
                    (*panel[:axis], slice(s, min(s + tile[axis], shape[axis])), *panel[axis + 1 :])
                    for s in range(0, shape[axis], tile[axis])
                ],
                tile,
            )

    def _shifted(self, region: Region) -> Region:
        """The output region of an input region (one further along the axis when the output
        starts with the initial zero)."""
        s = region[self.axis]
        shifted = slice(s.start + self.initial, s.stop + self.initial)
        return (*region[: self.axis], shifted, *region[self.axis + 1 :])

    # -- block math (compiled once per op) ----------------------------------
    def _scan(self, carry: jax.Array, block: jax.Array) -> tuple[jax.Array, jax.Array]:
        out = self._out_dtype(block.dtype)
        sums = carry + jnp.cumsum(block.astype(out).astype(carry.dtype), axis=self.axis)
        last = jax.lax.index_in_dim(sums, sums.shape[self.axis] - 1, self.axis)
        return sums.astype(out), last

    def _reverse_scan(self, carry: jax.Array, g: jax.Array) -> tuple[jax.Array, jax.Array]:
        sums = carry + jax.lax.cumsum(g.astype(carry.dtype), axis=self.axis, reverse=True)
        return sums, jax.lax.index_in_dim(sums, 0, self.axis)

    # -- loops ------------------------------------------------------------
    def forward(self, run: Run) -> None:
        dtype = self._out_dtype(run.inputs[0].dtype)
        scan = run.jit(self._scan)
        for panel, column, tile in self._columns(run):
            carry = np.zeros(tile[: self.axis] + (1,) + tile[self.axis + 1 :], compute_dtype(dtype))
            if self.initial:
                run.write(panel, np.zeros(tuple(s.stop - s.start for s in panel), dtype))
            for region, (block,) in run.stream(column, run.inputs):
                sums, carry = scan(carry, run.pad(block, tile))
                run.write(self._shifted(region), run.crop(sums, region))

    def backward(self, run: Run) -> None:
        if not run.wants_grad(0):
            return
        dtype = np.result_type(cotangent(run).dtype, np.float32)
        reverse_scan = run.jit(self._reverse_scan)
        for _, column, tile in self._columns(run):
            carry = np.zeros(tile[: self.axis] + (1,) + tile[self.axis + 1 :], dtype)
            backwards = column[::-1]
            read = run.stream([self._shifted(r) for r in backwards], [cotangent(run)])
            for region, (_, (g,)) in zip(backwards, read):
                sums, carry = reverse_scan(carry, run.pad(g, tile))
                run.accumulate(0, region, run.crop(sums, region))
