"""Joining arrays along an axis (``concat``) or a new one (``stack``): a
:class:`~oocarr.engine.op.CustomOp` that copies each input tile by tile to its offset.

Each input is cut in tiles of its own shape and each tile is written at
the input's place in the output; the gradient of input ``i`` is its region
of the cotangent, read in the same tiles.
"""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.engine.op import CustomOp, Region, Run, cotangent
from oocarr.errors import InvalidArgumentError, ShapeMismatchError

__all__ = ["Concat"]


class Concat(CustomOp):
    """``concat(arrays, axis)``, or ``stack(arrays, axis)`` with ``stack=True`` (a new axis
    at ``axis`` of the output, each input at one index of it)."""

    name = "concat"
    residency = 2  # the tile read, the tile handed to the writer

    def compute_output_shape(self) -> tuple[int, ...]:
        shapes = self.in_shapes
        stack = bool(self.params.get("stack", False))
        axis = self.params.get("axis", 0)
        what = "stack" if stack else "concat"
        if not shapes:
            raise InvalidArgumentError(f"{what} needs at least one array, got none")
        ndim = len(shapes[0]) + stack
        if not isinstance(axis, int) or not -ndim <= axis < ndim:
            raise InvalidArgumentError(
                f"{what}: axis {axis!r} is out of range for a result of {ndim} axes; "
                f"give an integer in [{-ndim}, {ndim - 1}]"
            )
        self.axis = axis % ndim
        self.stack = stack
        first = shapes[0]
        for i, shape in enumerate(shapes[1:], start=1):
            same = shape == first if stack else _same_but(shape, first, self.axis)
            if not same:
                rule = "the same shape" if stack else f"the same shape except on axis {self.axis}"
                raise ShapeMismatchError(
                    f"{what}: array {i} has shape {shape} but array 0 has shape {first}; "
                    f"the arrays must have {rule}"
                )
        if stack:
            return (*first[: self.axis], len(shapes), *first[self.axis :])
        total = sum(shape[self.axis] for shape in shapes)
        return (*first[: self.axis], total, *first[self.axis + 1 :])

    def result_dtype(self, *inputs: jax.ShapeDtypeStruct) -> np.dtype:
        dtypes = {np.dtype(i.dtype) for i in inputs}
        if len(dtypes) == 1:
            return dtypes.pop()
        return np.dtype(jnp.result_type(*(i.dtype for i in inputs)))

    def _placed(self, i: int, offset: int, region: Region) -> Region:
        """Where ``region`` of input ``i`` (at ``offset`` along the axis) goes in the output."""
        axis = self.axis
        if self.stack:
            return (*region[:axis], slice(i, i + 1), *region[axis:])
        moved = slice(region[axis].start + offset, region[axis].stop + offset)
        return (*region[:axis], moved, *region[axis + 1 :])

    def _taken(self, offset: int, out: Region) -> Region:
        """The region of an input (at ``offset`` along the axis) placed at ``out``."""
        axis = self.axis
        if self.stack:
            return (*out[:axis], *out[axis + 1 :])
        moved = slice(out[axis].start - offset, out[axis].stop - offset)
        return (*out[:axis], moved, *out[axis + 1 :])

    def _inputs(self) -> Iterator[tuple[int, tuple[int, ...], int]]:
        """``(index, shape, offset along the axis)`` of every input with elements."""
        offset = 0
        for i, shape in enumerate(self.in_shapes):
            if 0 not in shape:
                yield i, shape, offset
            offset += 1 if self.stack else shape[self.axis]

    def forward(self, run: Run) -> None:
        for i, shape, offset in self._inputs():
            regions = run.regions(shape, run.tile_shape(shape))
            for region, (block,) in run.stream(regions, [run.inputs[i]]):
                out = self._placed(i, offset, region)
                run.write(out, np.asarray(block).reshape(_extent(out)))

    def backward(self, run: Run) -> None:
        for i, shape, offset in self._inputs():
            if not run.wants_grad(i):
                continue
            tile = run.tile_shape(shape)
            placed = (self._placed(i, offset, r) for r in run.regions(shape, tile))
            for out, (block,) in run.stream(placed, [cotangent(run)]):
                region = self._taken(offset, out)
                run.accumulate(i, region, np.asarray(block).reshape(_extent(region)))


def _extent(region: Region) -> tuple[int, ...]:
    return tuple(r.stop - r.start for r in region)


def _same_but(shape: tuple[int, ...], other: tuple[int, ...], axis: int) -> bool:
    """Whether two shapes have the same number of axes and lengths everywhere but ``axis``."""
    return len(shape) == len(other) and all(
        a == b for k, (a, b) in enumerate(zip(shape, other)) if k != axis
    )
