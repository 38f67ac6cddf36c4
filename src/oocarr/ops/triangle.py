"""``tril`` and ``triu``: a matrix's lower or upper triangle, over the last two axes.

A :class:`~oocarr.engine.op.CustomOp`, since whether an element is kept
depends on its global row and column, which a block-parallel op's block
function does not see.  Each output tile is its input tile masked by
``col - row <= k`` (lower) or ``>= k`` (upper), computed from the tile's
region; a tile wholly outside the triangle is written as zeros without
reading the input, and one wholly inside is copied.  The gradient is the
cotangent masked the same way (tiles outside contribute nothing).  Tiles
are independent: the parts a cluster runs are panels of tiles along the
last axis.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import jax
import numpy as np

from oocarr.engine.op import CustomOp, Region, Run, cotangent
from oocarr.errors import InvalidArgumentError

__all__ = ["Tril", "Triu"]

Part = tuple[Region, ...]


class _Triangle(CustomOp):
    """Elements on one side of the ``k``-th diagonal of the last two axes kept, others zero."""

    residency = 3  # the input tile, its mask, the output tile
    #: Whether the lower triangle (``col - row <= k``) is kept, else the upper one.
    lower = True

    def compute_output_shape(self) -> tuple[int, ...]:
        (shape,) = self.in_shapes
        if len(shape) < 2:
            raise InvalidArgumentError(
                f"{self.name} acts on the last two axes and needs an array of at least 2 axes, "
                f"got shape {shape}"
            )
        k = self.params.get("k", 0)
        if isinstance(k, bool) or not isinstance(k, int):
            raise InvalidArgumentError(f"{self.name}: k must be an int, got {k!r}")
        self.k = k
        return shape

    def result_dtype(self, *inputs: jax.ShapeDtypeStruct) -> np.dtype:
        """The input's dtype: masking changes no value."""
        return np.dtype(inputs[0].dtype)

    # -- masks -------------------------------------------------------------
    def _offsets(self, region: Region) -> tuple[int, int]:
        """The least and greatest ``col - row`` in the tile at ``region``."""
        rows, cols = region[-2], region[-1]
        return cols.start - (rows.stop - 1), (cols.stop - 1) - rows.start

    def _coverage(self, region: Region) -> str:
        """``"none"``, ``"all"`` or ``"some"`` of the tile's elements kept."""
        least, greatest = self._offsets(region)
        if self.lower:
            return "all" if greatest <= self.k else "none" if least > self.k else "some"
        return "all" if least >= self.k else "none" if greatest < self.k else "some"

    def _mask(self, region: Region) -> np.ndarray:
        rows, cols = region[-2], region[-1]
        offset = (
            np.arange(cols.start, cols.stop)[None, :] - np.arange(rows.start, rows.stop)[:, None]
        )
        return offset <= self.k if self.lower else offset >= self.k

    def _masked(self, block: np.ndarray, region: Region) -> np.ndarray:
        """A new array: ``block`` where kept, zero elsewhere (``block`` is the reader's buffer,
        reused for the next read while this tile is written behind)."""
        if self._coverage(region) == "all":
            return np.array(block)
        return np.where(self._mask(region), block, np.zeros((), block.dtype))

    # -- loops -------------------------------------------------------------
    def parts(self, run: Run) -> list[Part]:
        """Panels of tiles along the last axis: every tile is independent of the others."""
        shape = self.output_shape
        regions = run.regions(shape, run.tile_shape(shape))
        panels = itertools.groupby(regions, key=lambda r: tuple((s.start, s.stop) for s in r[:-1]))
        return [tuple(panel) for _, panel in panels]

    def part_regions(self, part: Part) -> list[Region]:
        return list(part)

    def forward(self, run: Run) -> None:
        self.forward_part(run, tuple(self._regions(run)))

    def _regions(self, run: Run) -> Iterator[Region]:
        shape = self.output_shape
        return run.regions(shape, run.tile_shape(shape))

    def forward_part(self, run: Run, part: Part) -> None:
        dtype = np.dtype(run.inputs[0].dtype)
        read = []
        for region in part:
            if self._coverage(region) == "none":
                run.write(region, np.zeros([s.stop - s.start for s in region], dtype))
            else:
                read.append(region)
        for region, (block,) in run.stream(read, run.inputs):
            run.write(region, self._masked(block, region))

    def backward(self, run: Run) -> None:
        self.backward_part(run, tuple(self._regions(run)))

    def backward_part(self, run: Run, part: Part) -> None:
        if not run.wants_grad(0):
            return
        read = [region for region in part if self._coverage(region) != "none"]
        for region, (g,) in run.stream(read, [cotangent(run)]):
            run.accumulate(0, region, self._masked(g, region))


class Tril(_Triangle):
    """``tril(x, k=0)``: elements with ``col - row <= k`` (on the last two axes) kept."""

    name = "tril"
    lower = True


class Triu(_Triangle):
    """``triu(x, k=0)``: elements with ``col - row >= k`` (on the last two axes) kept."""

    name = "triu"
    lower = False
