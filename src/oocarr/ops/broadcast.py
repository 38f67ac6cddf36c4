"""Broadcasting an array to a larger shape: a :class:`~oocarr.engine.op.CustomOp`.

Each output tile reads the input region NumPy broadcasting pairs with it
(see :func:`~oocarr.engine.op.broadcast_region`) and repeats it; an output
tile's shape is not a function of its input block, which is why this is not
a block-parallel op.  Output tiles are walked with the input's axes
outermost, so the tiles that share an input region come one after another:
the forward pass reads each input region once, and the gradient (the
cotangent summed over the broadcast axes) adds to each region of the
input's gradient once.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import numpy as np

from oocarr.engine.op import CustomOp, Region, Run, cotangent
from oocarr.errors import InvalidArgumentError, ShapeMismatchError

__all__ = ["BroadcastTo"]


def _extent(region: Region) -> tuple[int, ...]:
    return tuple(r.stop - r.start for r in region)


class BroadcastTo(CustomOp):
    """``broadcast_to(x, shape)``; with ``dims``, input axis ``k`` becomes output axis
    ``dims[k]`` (increasing) instead of NumPy's trailing alignment, as in
    ``jax.lax.broadcast_in_dim``."""

    name = "broadcast_to"
    residency = 3  # the tile written (or the cotangent tile), its sum, the running sum

    def compute_output_shape(self) -> tuple[int, ...]:
        (shape,) = self.in_shapes
        try:
            out = tuple(operator.index(n) for n in self.params["shape"])
        except TypeError:
            raise InvalidArgumentError(
                f"broadcast_to: shape must be a tuple of integers, got {self.params['shape']!r}"
            ) from None
        dims = self.params.get("dims")
        if dims is None:
            dims = tuple(range(len(out) - len(shape), len(out)))
        dims = tuple(dims)
        if (
            len(dims) != len(shape)
            or any(d < 0 or d >= len(out) for d in dims)
            or any(a >= b for a, b in zip(dims, dims[1:]))
            or any(n < 0 for n in out)
        ):
            raise ShapeMismatchError(
                f"broadcast_to: cannot broadcast an array of shape {shape} to shape {out}; "
                "the target needs at least as many axes and non-negative lengths"
            )
        for k, (n, d) in enumerate(zip(shape, dims)):
            if n not in (1, out[d]):
                raise ShapeMismatchError(
                    f"broadcast_to: cannot broadcast an array of shape {shape} to shape {out}: "
                    f"its axis {k} has length {n}, which is neither 1 nor {out[d]}"
                )
        self.dims = dims
        #: Output axes that repeat the input (new, or of length 1 in the input).
        self.spread = tuple(
            a for a in range(len(out)) if a not in dims or shape[dims.index(a)] != out[a]
        )
        return out

    def result_dtype(self, *inputs: jax.ShapeDtypeStruct) -> np.dtype:
        return np.dtype(inputs[0].dtype)

    def _source(self, out_region: Region) -> Region:
        """The input region paired with ``out_region``."""
        (shape,) = self.in_shapes
        return tuple(slice(0, 1) if n == 1 else out_region[d] for n, d in zip(shape, self.dims))

    def _lifted(self, extent: Sequence[int]) -> tuple[int, ...]:
        """An input block's shape with the output's axes, length 1 where it has none."""
        lifted = [1] * len(self.output_shape)
        for n, d in zip(extent, self.dims):
            lifted[d] = n
        return tuple(lifted)

    def forward(self, run: Run) -> None:
        out = self.output_shape
        if math.prod(out) == 0:
            return
        regions, paired = itertools.tee(self._grouped_regions(run))
        sources = (self._source(r) for r in paired)
        for (source, (block,)), region in zip(run.stream(sources, run.inputs), regions):
            block = np.asarray(block).reshape(self._lifted(_extent(source)))
            run.write(region, np.ascontiguousarray(np.broadcast_to(block, _extent(region))))

    def _grouped_regions(self, run: Run) -> Iterator[Region]:
        """Output tiles with the repeated axes innermost: those sharing an input region are
        consecutive."""
        out = self.output_shape
        tile = run.tile_shape(out)
        grid = [-(-n // t) for n, t in zip(out, tile)]
        kept = [a for a in range(len(out)) if a not in self.spread]
        order = kept + list(self.spread)
        for index in itertools.product(*(range(grid[a]) for a in order)):
            at = dict(zip(order, index))
            yield tuple(
                slice(at[a] * tile[a], min((at[a] + 1) * tile[a], out[a])) for a in range(len(out))
            )

    def backward(self, run: Run) -> None:
        if not run.wants_grad(0) or math.prod(self.output_shape) == 0:
            return
        dtype = np.result_type(cotangent(run).dtype, np.float32)
        total: Any = None
        current: Region | None = None
        for region, (g,) in run.stream(self._grouped_regions(run), [cotangent(run)]):
            source = self._source(region)
            if source != current:
                if current is not None:
                    run.accumulate(0, current, total)
                current, total = source, None
            part = np.asarray(g, dtype=dtype).reshape(_extent(region))
            if self.spread:
                part = part.sum(axis=self.spread, keepdims=True)
            part = part.reshape(_extent(source))
            total = part if total is None else total + part
        if current is not None:
            run.accumulate(0, current, total)
