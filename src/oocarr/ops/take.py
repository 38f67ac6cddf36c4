"""Gathers: ``take(x, indices, axis)`` and the integer-array and boolean-mask indexing built on it.

The indices are an ``(m, k)`` array of integers: row ``j`` names one position on the ``k``
axes starting at ``axis`` (``k`` is 1 for ``take`` and an integer array index, the mask's
number of axes for a boolean mask).  The output has those ``k`` axes replaced by one of
length ``m``.  Each output tile reads only what it needs, in sorted order: its rows' distinct
positions, sorted, are cut into runs that fit a tile along the last gathered axis, one read
per run, so rows that share a chunk are read together (and a repeated row is read once).
The gradient adds each row's cotangent back at its position, duplicates summed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.engine.op import CustomOp, Region, Run, cotangent
from oocarr.errors import InvalidArgumentError, ShapeMismatchError

__all__ = ["RowTake", "Take", "checked_indices"]


def checked_indices(indices: np.ndarray, shape: Sequence[int], axis: int) -> np.ndarray:
    """``indices`` (``m × k`` integers) into the ``k`` axes of ``shape`` from ``axis``, bounds
    checked and made non-negative (``int64``, as NumPy holds an index).

    Examples
    --------
    >>> checked_indices(np.array([[-1], [0]]), (4, 3), 1).ravel().tolist()
    [2, 0]
    """
    if indices.dtype.kind not in "iu":
        raise InvalidArgumentError(f"take: indices must be integers, got {indices.dtype}")
    sizes = np.array(shape[axis : axis + indices.shape[1]])
    bad = (indices < -sizes) | (indices >= sizes)
    if bad.any():
        row = int(np.argwhere(bad.any(axis=1))[0, 0])
        raise InvalidArgumentError(
            f"index {indices[row].tolist()} is out of bounds for axes of size "
            f"{sizes.tolist()} (array of shape {tuple(shape)})"
        )
    return np.where(indices < 0, indices + sizes, indices).astype(np.int64)


class Take(CustomOp):
    """``take(x, indices, axis=a)`` with ``indices`` of shape ``(m, k)``: output
    ``x.shape[:a] + (m,) + x.shape[a + k:]``; negative indices count from the end."""

    name = "take"
    # the output tile, the distinct rows it gathers, one read block, the indices it uses
    residency = 4

    def compute_output_shape(self) -> tuple[int, ...]:
        shape, index_shape = self.in_shapes
        axis = self.params.get("axis", 0)
        if len(index_shape) != 2:
            raise ShapeMismatchError(f"take: indices must be (rows, axes), got {index_shape}")
        m, k = index_shape
        if not isinstance(axis, int) or axis < 0 or axis + k > len(shape) or k < 1:
            raise InvalidArgumentError(
                f"take: {k} gathered axes from axis {axis!r} do not fit an array of shape {shape}"
            )
        self.axis, self.depth = axis, k
        return shape[:axis] + (m,) + shape[axis + k :]

    def result_dtype(self, *inputs: jax.ShapeDtypeStruct) -> np.dtype:
        return np.dtype(inputs[0].dtype)

    def _indices(self, run: Run) -> np.ndarray:
        """The whole index array (``m × k`` integers, as NumPy holds an index), bounds checked
        and made non-negative."""
        reader = run.inputs[1]
        indices = np.asarray(reader.read(tuple(slice(0, n) for n in reader.shape)))
        return checked_indices(indices, self.in_shapes[0], self.axis)

    def fused_form(self, stored: Sequence[bool]) -> RowTake | None:
        """Along one axis after the first, of a stored array, with in-memory indices already
        checked (``checked=True``: :func:`checked_indices`), the call fuses as a
        :class:`RowTake`; otherwise it runs as a stored op."""
        if list(stored) != [True, False] or self.axis == 0 or self.depth != 1:
            return None
        if not self.params.get("checked", False):
            return None  # a traced index array is only checked when the stored op reads it
        return RowTake(*self.in_shapes, **self.params)

    def _runs(
        self, region: Region, rows: np.ndarray
    ) -> Iterator[tuple[Region, np.ndarray, np.ndarray]]:
        """For an output tile at ``region`` whose rows gather the distinct sorted positions
        ``rows`` (``u × k``): ``(input region, positions of the run in rows, their offsets
        along the last gathered axis)`` per read, a run no longer than the tile's rows."""
        before, after = region[: self.axis], region[self.axis + 1 :]
        span = max(1, region[self.axis].stop - region[self.axis].start)
        start = 0
        while start < len(rows):
            first = rows[start]
            stop = start + 1
            while (
                stop < len(rows)
                and (rows[stop, :-1] == first[:-1]).all()
                and rows[stop, -1] - first[-1] < span
            ):
                stop += 1
            lo, hi = int(first[-1]), int(rows[stop - 1, -1]) + 1
            gathered = tuple(slice(int(c), int(c) + 1) for c in first[:-1]) + (slice(lo, hi),)
            yield (*before, *gathered, *after), np.arange(start, stop), rows[start:stop, -1] - lo
            start = stop

    def _picked(self, block: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """The rows at ``offsets`` of a block read for one run, its unit axes dropped."""
        lead = block.shape[: self.axis]
        flat = block.reshape(*lead, block.shape[self.axis + self.depth - 1], -1)
        return np.take(flat, offsets, axis=self.axis)

    def forward(self, run: Run) -> None:
        indices = self._indices(run)
        out_shape, axis = self.output_shape, self.axis
        tile = run.tile_shape(out_shape)
        dtype = np.dtype(run.inputs[0].dtype)
        for region in run.regions(out_shape, tile):
            rows, inverse = np.unique(indices[region[axis]], axis=0, return_inverse=True)
            extent = [r.stop - r.start for r in region]
            extent[axis] = len(rows)
            distinct = np.empty(extent, dtype)
            flat = distinct.reshape(*extent[:axis], len(rows), -1)
            for read, where, offsets in self._runs(region, rows):
                picked = self._picked(run.inputs[0].read(read), offsets)
                flat[(slice(None),) * axis + (where,)] = picked
            run.write(region, np.take(distinct, inverse.reshape(-1), axis=axis))

    def backward(self, run: Run) -> None:
        if not run.wants_grad(0):
            return
        indices = self._indices(run)
        axis = self.axis
        tile = run.tile_shape(self.output_shape)
        for region in run.regions(self.output_shape, tile):
            rows, inverse = np.unique(indices[region[axis]], axis=0, return_inverse=True)
            g = np.moveaxis(np.asarray(cotangent(run).read(region)), axis, 0)
            summed = np.zeros((len(rows), *g.shape[1:]), g.dtype)
            np.add.at(summed, inverse.reshape(-1), g)
            summed = np.moveaxis(summed, 0, axis)
            for read, where, offsets in self._runs(region, rows):
                extent = [r.stop - r.start for r in read]
                grad = np.zeros(extent, summed.dtype)
                flat = grad.reshape(*extent[:axis], extent[axis + self.depth - 1], -1)
                part = np.take(summed, where, axis=axis)
                flat[(slice(None),) * axis + (offsets,)] = part.reshape(*part.shape[: axis + 1], -1)
                run.accumulate(0, read, grad)


def _take_rows(x: jax.Array, indices: jax.Array, axis: int) -> jax.Array:
    """:class:`Take` of one axis on whole rows, its indices checked (never clipped)."""
    return jnp.take(x, indices[:, 0], axis=axis, mode="clip")


class RowTake(Take):
    """``take(x, indices, axis)`` of a stored ``x`` along an axis after the first, with checked
    in-memory indices: each output row needs only the same row of ``x``, so under ``jax.jit``
    the call fuses (a row-local node of a fused array) instead of writing its result.  Its
    gradient is :class:`Take`'s.

    Examples
    --------
    >>> op = Take((100, 8), (3, 1), axis=1, checked=True).fused_form([True, False])
    >>> type(op).__name__, op.output_shape, op.fused_node()
    ('RowTake', (100, 3), {'lead': 1, 'params': {'axis': 1}})
    """

    fusable = True
    row_local = True
    fn = staticmethod(_take_rows)

    def fused_node(self) -> dict[str, Any]:
        return {"lead": self.axis, "params": {"axis": self.axis}}
