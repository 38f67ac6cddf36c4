"""``diagonal``: the ``offset``-th diagonal of each matrix of a stack (its last two axes).

A :class:`~oocarr.engine.op.CustomOp`: an output tile ``(batch..., d0:d1)`` gathers the
diagonal of the squares ``rows r0+d : r0+d+s``, ``cols c0+d : c0+d+s`` of its batch
matrices (``r0, c0`` the offset's first element), ``s`` chosen so that one square block of the
batch tile holds no more than one tile of elements.  So it reads only blocks on the diagonal
(``k s`` elements per matrix, not the whole matrix a flatten-and-stride would copy), under
the memory budget.  The gradient is the cotangent placed on the same diagonal blocks (zeros
elsewhere, which a new gradient already is).  Output tiles are independent: the parts a
cluster runs are panels of them along the last axis.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import jax
import numpy as np

from oocarr.engine.op import CustomOp, Region, Run, cotangent
from oocarr.errors import InvalidArgumentError

__all__ = ["Diagonal", "diagonal_length"]

Part = tuple[Region, ...]


def diagonal_length(n: int, m: int, offset: int) -> int:
    """Elements of the ``offset``-th diagonal of an ``(n, m)`` matrix.

    Examples
    --------
    >>> diagonal_length(3, 4, 0), diagonal_length(3, 4, 2), diagonal_length(3, 4, -3)
    (3, 2, 0)
    """
    return max(0, min(n - max(-offset, 0), m - max(offset, 0)))


class Diagonal(CustomOp):
    """``diagonal(x, offset=0)`` over the last two axes: shape ``(*batch, k)``."""

    name = "diagonal"
    #: One square input block, the pieces of the tile gathered from it, the output tile (in
    #: the backward pass: the cotangent tile and the gradient block built from it).
    residency = 4

    def compute_output_shape(self) -> tuple[int, ...]:
        (shape,) = self.in_shapes
        if len(shape) < 2:
            raise InvalidArgumentError(
                f"diagonal acts on the last two axes and needs an array of at least 2 axes, "
                f"got shape {shape}"
            )
        offset = self.params.get("offset", 0)
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise InvalidArgumentError(f"diagonal: offset must be an int, got {offset!r}")
        n, m = shape[-2:]
        self.row0, self.col0 = max(-offset, 0), max(offset, 0)
        return (*shape[:-2], diagonal_length(n, m, offset))

    def result_dtype(self, *inputs: jax.ShapeDtypeStruct) -> np.dtype:
        """The input's dtype: gathering changes no value."""
        return np.dtype(inputs[0].dtype)

    # -- geometry ------------------------------------------------------------
    def _tiles(self, run: Run) -> tuple[tuple[int, ...], int]:
        """The output tile and the side of the square blocks read for it."""
        tile = run.tile_shape(self.output_shape)
        batch = math.prod(tile[:-1])
        return tile, max(1, min(tile[-1], math.isqrt(max(1, math.prod(tile) // batch))))

    def _squares(self, region: Region, side: int) -> list[tuple[Region, slice]]:
        """The input blocks on the diagonal for the output tile at ``region``, each with the
        part of the tile's last axis its diagonal fills."""
        *batch, diag = region
        found = []
        for d in range(diag.start, diag.stop, side):
            e = min(d + side, diag.stop)
            rows = slice(self.row0 + d, self.row0 + e)
            cols = slice(self.col0 + d, self.col0 + e)
            found.append(((*batch, rows, cols), slice(d - diag.start, e - diag.start)))
        return found

    def parts(self, run: Run) -> list[Part]:
        """Panels of output tiles along the last axis: every tile is independent."""
        if 0 in self.output_shape:
            return []
        tile, _ = self._tiles(run)
        regions = run.regions(self.output_shape, tile)
        panels = itertools.groupby(regions, key=lambda r: tuple((s.start, s.stop) for s in r[:-1]))
        return [tuple(panel) for _, panel in panels]

    def part_regions(self, part: Part) -> list[Region]:
        return list(part)

    def _all(self, run: Run) -> Part:
        if 0 in self.output_shape:
            return ()
        tile, _ = self._tiles(run)
        return tuple(run.regions(self.output_shape, tile))

    # -- loops -----------------------------------------------------------------
    def forward(self, run: Run) -> None:
        self.forward_part(run, self._all(run))

    def forward_part(self, run: Run, part: Part) -> None:
        _, side = self._tiles(run)
        plan = [(region, self._squares(region, side)) for region in part]
        blocks: Iterator[Region] = (box for _, squares in plan for box, _ in squares)
        stream = run.stream(blocks, run.inputs)
        dtype = np.dtype(run.inputs[0].dtype)
        for region, squares in plan:
            tile = np.empty([r.stop - r.start for r in region], dtype)
            for _, fill in squares:
                _, (block,) = next(stream)
                tile[..., fill] = np.diagonal(block, axis1=-2, axis2=-1)
            run.write(region, tile)

    def backward(self, run: Run) -> None:
        self.backward_part(run, self._all(run))

    def backward_part(self, run: Run, part: Part) -> None:
        if not run.wants_grad(0):
            return
        _, side = self._tiles(run)
        dtype = np.dtype(cotangent(run).dtype)
        for region, (g,) in run.stream(part, [cotangent(run)]):
            for box, fill in self._squares(region, side):
                shape = [r.stop - r.start for r in box]
                grad = np.zeros(shape, dtype)
                np.einsum("...ii->...i", grad)[...] = g[..., fill]
                run.accumulate(0, box, grad)
