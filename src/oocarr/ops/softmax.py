"""Softmax over an axis: a :class:`~oocarr.engine.op.CustomOp`, since each output needs its whole
row's statistics.

Rows are walked in panels (a tile's extent on every other axis).  For each
panel, a first pass over the axis keeps a running maximum and sum of
exponentials, and a second pass writes ``exp(x - logsumexp)``; when a
whole row fits in one tile the second pass reuses the block the first
read.  The gradient is ``y * (g - sum(g * y))``, two passes over ``g`` and
the forward output ``y`` per panel.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.engine.op import CustomOp, Region, Run, cotangent, forward_output
from oocarr.errors import InvalidArgumentError

__all__ = ["RowSoftmax", "Softmax"]


class Softmax(CustomOp):
    """``softmax(x, axis=-1)``: ``exp(x) / sum(exp(x), axis)``, computed stably."""

    name = "softmax"
    residency = 4  # input tile, its exponentials, the output tile, the panel's statistics
    needs_output = True

    def compute_output_shape(self) -> tuple[int, ...]:
        (shape,) = self.in_shapes
        axis = self.params.get("axis", -1)
        if not shape:
            raise InvalidArgumentError("softmax needs an array of at least 1 axis, got a 0-d one")
        if not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
            raise InvalidArgumentError(
                f"softmax axis {axis!r} is out of range for an array of {len(shape)} axes"
            )
        self.axis = axis % len(shape)
        return shape

    def _panels(self, run: Run) -> Iterator[tuple[list[Region], tuple[int, ...]]]:
        """Each panel's regions along the axis, and the (nominal) tile shape."""
        shape, axis = self.output_shape, self.axis
        tile = run.tile_shape(shape)
        panel_shape = shape[:axis] + (1,) + shape[axis + 1 :]
        panel_tile = tile[:axis] + (1,) + tile[axis + 1 :]
        step = tile[axis]
        for panel in run.regions(panel_shape, panel_tile):
            yield (
                [
                    (
                        *panel[:axis],
                        slice(start, min(start + step, shape[axis])),
                        *panel[axis + 1 :],
                    )
                    for start in range(0, shape[axis], step)
                ],
                tile,
            )

    def fused_form(self, stored: Sequence[bool]) -> RowSoftmax | None:
        """Along an axis after the first, of a stored array, the call fuses as a
        :class:`RowSoftmax`; otherwise it runs as a stored op."""
        if list(stored) != [True] or self.axis == 0:
            return None
        return RowSoftmax(*self.in_shapes, **self.params)

    # -- block math (compiled once per op) ----------------------------------
    def _stats_block(self, m: jax.Array, s: jax.Array, block: jax.Array) -> tuple:
        x = block.astype(m.dtype)
        new_m = jnp.maximum(m, jnp.max(x, axis=self.axis, keepdims=True))
        safe = jnp.where(jnp.isfinite(new_m), new_m, 0)
        s = s * jnp.exp(m - safe) + jnp.sum(jnp.exp(x - safe), axis=self.axis, keepdims=True)
        return new_m, s

    def _normalize_block(self, block: jax.Array, m: jax.Array, s: jax.Array) -> jax.Array:
        safe = jnp.where(jnp.isfinite(m), m, 0)
        return jnp.exp(block.astype(m.dtype) - safe) / s

    def _dot_block(self, acc: jax.Array, g: jax.Array, y: jax.Array) -> jax.Array:
        return acc + jnp.sum(g.astype(acc.dtype) * y, axis=self.axis, keepdims=True)

    def _grad_block(self, g: jax.Array, y: jax.Array, acc: jax.Array) -> jax.Array:
        return y * (g.astype(acc.dtype) - acc)

    # -- loops ------------------------------------------------------------
    def _panel_buffer(self, tile: tuple[int, ...], dtype: np.dtype, value: float) -> np.ndarray:
        shape = tile[: self.axis] + (1,) + tile[self.axis + 1 :]
        return np.full(shape, value, dtype)

    def forward(self, run: Run) -> None:
        for panel in self._panels(run):
            self.forward_part(run, panel)

    def parts(self, run: Run) -> list[tuple[list[Region], tuple[int, ...]]]:
        """The row panels: each one's statistics and outputs need no other panel."""
        return list(self._panels(run))

    def part_regions(self, part: tuple[list[Region], tuple[int, ...]]) -> list[Region]:
        return part[0]

    def forward_part(self, run: Run, part: tuple[list[Region], tuple[int, ...]]) -> None:
        columns, tile = part
        dtype = np.result_type(run.inputs[0].dtype, np.float32)
        stats, normalize = run.jit(self._stats_block), run.jit(self._normalize_block)
        m = self._panel_buffer(tile, dtype, -np.inf)
        s = self._panel_buffer(tile, dtype, 0.0)
        for _, (block,) in run.stream(columns, run.inputs):
            m, s = jax.block_until_ready(stats(m, s, run.pad(block, tile, -np.inf)))
        for region, (block,) in run.stream(columns, run.inputs):
            y = normalize(run.pad(block, tile, -np.inf), m, s)
            run.write(region, run.crop(y, region))

    def backward(self, run: Run) -> None:
        if not run.wants_grad(0):
            return
        for panel in self._panels(run):
            self.backward_part(run, panel)

    def backward_part(self, run: Run, part: tuple[list[Region], tuple[int, ...]]) -> None:
        if not run.wants_grad(0):
            return
        columns, tile = part
        dtype = np.result_type(forward_output(run).dtype, np.float32)
        dot, grad = run.jit(self._dot_block), run.jit(self._grad_block)
        acc = self._panel_buffer(tile, dtype, 0.0)
        for _, (g, y) in run.stream(columns, [cotangent(run), forward_output(run)]):
            acc = jax.block_until_ready(dot(acc, run.pad(g, tile), run.pad(y, tile)))
        for region, (g, y) in run.stream(columns, [cotangent(run), forward_output(run)]):
            run.accumulate(
                0, region, run.crop(grad(run.pad(g, tile), run.pad(y, tile), acc), region)
            )


def _softmax_rows(x: jax.Array, axis: int) -> jax.Array:
    """:class:`Softmax`'s math on whole rows: ``exp(x - max) / sum(exp(x - max))``."""
    x = x.astype(jnp.promote_types(x.dtype, jnp.float32))
    m = jnp.max(x, axis=axis, keepdims=True)
    e = jnp.exp(x - jnp.where(jnp.isfinite(m), m, 0))
    return e / jnp.sum(e, axis=axis, keepdims=True)


class RowSoftmax(Softmax):
    """``softmax(x, axis)`` of a stored ``x`` along an axis after the first: each output row
    needs only the same row of ``x``, so under ``jax.jit`` the call fuses (a row-local node of
    a fused array, evaluated on its consumer's row tiles) instead of writing its result.  Its
    gradient is :class:`Softmax`'s.

    Examples
    --------
    >>> op = Softmax((100, 8), axis=-1).fused_form([True])
    >>> type(op).__name__, op.fused_node()
    ('RowSoftmax', {'lead': 1, 'params': {'axis': 1}})
    """

    fusable = True
    row_local = True
    fn = staticmethod(_softmax_rows)

    def fused_node(self) -> dict[str, Any]:
        return {"lead": self.axis, "params": {"axis": self.axis}}
