"""``argmax`` and ``argmin`` (and the NaN-ignoring ``nanargmax``, ``nanargmin``), streamed
per output panel with a running ``(best value, index)`` over the reduced axis's tiles; and
``searchsorted`` of a stored array's values in a sorted 1-d array held in memory.

A block does not know where it lies in the array, so these are custom ops that know each
region's start: a block's candidate is the first (smallest global index) of its best valid
elements, and candidates merge by value, ties going to the smaller index, so tiles may come
in any order and the result is still the first occurrence (the flattened C-order index when
``axis`` is ``None``).  As in ``jax.numpy``, a NaN is the best value of ``argmax`` and
``argmin``; the ``nan`` variants skip NaNs and give -1 for a slice of nothing but NaNs.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.engine.op import CustomOp, Run
from oocarr.errors import InvalidArgumentError, NotSupportedError
from oocarr.ops.prod import ReducingOp

__all__ = [
    "ArgMax",
    "ArgMin",
    "NanArgMax",
    "NanArgMin",
    "SearchSorted",
    "refuse_complex",
]

_INDEX = np.dtype(np.int32)
_NOT_FOUND = np.iinfo(np.int32).max


def refuse_complex(name: str, dtype: np.dtype) -> None:
    """Raise :class:`~oocarr.errors.NotSupportedError` for a complex ``dtype``: ``name``
    orders its input's elements."""
    if jnp.issubdtype(dtype, jnp.complexfloating):
        raise NotSupportedError(
            f"{name} of complex arrays is not built for stored arrays (complex numbers have no "
            "order in the Array API); compare their real parts or absolute values instead"
        )


class ArgMax(ReducingOp):
    """``argmax(x, axis=None, keepdims=False)``: the index of the first maximal element (a NaN
    counts as maximal), int32 as in ``jax.numpy`` without x64."""

    name = "argmax"
    # the block as read, its padded copy, its global indices, the masked copy and the match
    # mask (XLA fuses some of them), with the panel's running values and indices
    residency = 5
    takes_tuple = False
    largest = True
    skip_nan = False

    def compute_output_shape(self) -> tuple[int, ...]:
        out = super().compute_output_shape()
        (shape,) = self.in_shapes
        reduced = tuple(shape[a] for a in self.axes)
        if 0 in reduced:
            raise InvalidArgumentError(
                f"{self.name} of an empty slice: the reduced axes of shape {shape} hold no "
                "element; reduce over a non-empty axis"
            )
        if math.prod(reduced) > _NOT_FOUND:
            raise NotSupportedError(
                f"{self.name} over {math.prod(reduced)} elements: its int32 index (jax.numpy's, "
                "without x64) cannot count them; reduce over one axis at a time"
            )
        return out

    def result_dtype(self, *inputs: jax.ShapeDtypeStruct) -> np.dtype:
        refuse_complex(self.name, np.dtype(inputs[0].dtype))
        return _INDEX

    def _worst(self, dtype: np.dtype) -> float | int:
        """A value no element loses to (the fold's starting value, and masked elements')."""
        if jnp.issubdtype(dtype, jnp.floating):
            return -np.inf if self.largest else np.inf
        info = jnp.iinfo(dtype)
        return info.min if self.largest else info.max

    def _values(self, block: jax.Array | np.ndarray) -> jax.Array | np.ndarray:
        return block.astype(jnp.int8) if block.dtype == jnp.bool_ else block

    # -- block math (compiled once per op) ----------------------------------
    def _fold(
        self,
        best: jax.Array,
        index: jax.Array,
        block: jax.Array,
        starts: jax.Array,
        extents: jax.Array,
        strides: jax.Array,
    ) -> tuple[jax.Array, jax.Array]:
        """``(best, index)`` with one block's candidates merged in: the block's region starts
        at ``starts`` and holds ``extents`` elements along the reduced axes, whose C-order
        ``strides`` give an element's index."""
        x = self._values(block)
        valid = jnp.ones(x.shape, bool)
        position = jnp.zeros(x.shape, jnp.int32)
        for k, a in enumerate(self.axes):
            iota = jax.lax.broadcasted_iota(jnp.int32, x.shape, a)
            valid = valid & (iota < extents[k])
            position = position + (starts[k] + iota) * strides[k]
        floating = jnp.issubdtype(x.dtype, jnp.floating)
        nan = jnp.isnan(x) & valid if floating else jnp.zeros(x.shape, bool)
        reduce = jnp.max if self.largest else jnp.min
        m = reduce(jnp.where(valid & ~nan, x, self._worst(x.dtype)), self.axes, keepdims=True)
        match = valid & ~nan & (x == m)
        if floating and not self.skip_nan:
            has_nan = jnp.any(nan, self.axes, keepdims=True)
            m = jnp.where(has_nan, jnp.nan, m)
            match = jnp.where(has_nan, nan, match)
        i = jnp.min(jnp.where(match, position, _NOT_FOUND), self.axes, keepdims=True)
        better = (m > best) if self.largest else (m < best)
        equal = m == best
        if floating:
            better = ~jnp.isnan(best) & (jnp.isnan(m) | better)
            equal = equal | (jnp.isnan(m) & jnp.isnan(best))
        take = better | (equal & (i < index))
        return jnp.where(take, m, best), jnp.where(take, i, index)

    # -- loops ------------------------------------------------------------
    def forward(self, run: Run) -> None:
        like = self._values(np.zeros((), run.inputs[0].dtype))
        fold = run.jit(self._fold)
        reduced = [self.in_shapes[0][a] for a in self.axes]
        strides = np.array([math.prod(reduced[k + 1 :]) for k in range(len(reduced))], _INDEX)
        for out, panel, tile in self.panels(run):
            best = np.full(self.acc_shape(tile), self._worst(like.dtype), like.dtype)
            index = np.full(self.acc_shape(tile), _NOT_FOUND, _INDEX)
            for region, (block,) in run.stream(self.steps(run, panel, tile), run.inputs):
                starts = np.array([region[a].start for a in self.axes], _INDEX)
                extents = np.array([region[a].stop - region[a].start for a in self.axes], _INDEX)
                best, index = fold(best, index, run.pad(block, tile), starts, extents, strides)
            index = np.asarray(index)
            run.write(out, self.finished(run, np.where(index == _NOT_FOUND, -1, index), out, panel))

    def backward(self, run: Run) -> None:
        """Nothing: an index has no gradient (JAX's is zero)."""


class ArgMin(ArgMax):
    """``argmin(x, axis=None, keepdims=False)``: the index of the first minimal element (a NaN
    counts as minimal), int32 as in ``jax.numpy`` without x64."""

    name = "argmin"
    largest = False


class NanArgMax(ArgMax):
    """``nanargmax(x, axis=None, keepdims=False)``: ``argmax`` ignoring NaNs; -1 for a slice of
    nothing but NaNs (as ``jax.numpy.nanargmax``)."""

    name = "nanargmax"
    skip_nan = True


class NanArgMin(ArgMin):
    """``nanargmin(x, axis=None, keepdims=False)``: ``argmin`` ignoring NaNs; -1 for a slice of
    nothing but NaNs (as ``jax.numpy.nanargmin``)."""

    name = "nanargmin"
    skip_nan = True


class SearchSorted(CustomOp):
    """``searchsorted(x1, x2, side='left'[, sorter])``: for each element of ``x2``, the index
    where inserting it into the sorted 1-d ``x1`` (or ``x1[sorter]``) keeps it sorted.

    ``x1`` (and ``sorter``) are read into memory whole, each in one tile-sized buffer of the
    budget (the op's smallest tile is as long as ``x1``); ``x2`` streams tile by tile.
    """

    name = "searchsorted"
    # x1 in sorted order (with a sorter) and on the device, x2's block in use, its padded copy
    # and the indices (x1 and the sorter as read are their readers' blocks)
    residency = 5
    shape_dependent = True

    def compute_output_shape(self) -> tuple[int, ...]:
        x1, x2, *sorter = self.in_shapes
        if len(x1) != 1:
            raise InvalidArgumentError(
                f"searchsorted needs a 1-d sorted array x1, got one of shape {x1}"
            )
        if sorter and tuple(sorter[0]) != tuple(x1):
            raise InvalidArgumentError(
                f"searchsorted: sorter must have x1's shape {x1}, got {tuple(sorter[0])}"
            )
        side = self.params.get("side", "left")
        if side not in ("left", "right"):
            raise InvalidArgumentError(f"searchsorted side must be 'left' or 'right', got {side!r}")
        return x2

    def min_tile_elems(self) -> int:
        return max(1, self.in_shapes[0][0])

    def min_tile_label(self) -> str:
        """The whole of ``x1``.

        Examples
        --------
        >>> SearchSorted((1000,), (7, 5)).min_tile_label()
        'op tiles holding the whole sorted array x1 of 1000 elements'
        """
        return f"op tiles holding the whole sorted array x1 of {self.in_shapes[0][0]} elements"

    def result_dtype(self, *inputs: jax.ShapeDtypeStruct) -> np.dtype:
        x1, x2, *sorter = inputs
        for x in (x1, x2):
            refuse_complex(self.name, np.dtype(x.dtype))
        if sorter and not jnp.issubdtype(sorter[0].dtype, jnp.integer):
            raise InvalidArgumentError(
                f"searchsorted: sorter must hold integer indices, got {sorter[0].dtype}"
            )
        return _INDEX

    def _search(self, x1: jax.Array, block: jax.Array) -> jax.Array:
        dtype = jnp.result_type(x1.dtype, block.dtype)
        side = self.params.get("side", "left")
        return jnp.searchsorted(x1.astype(dtype), block.astype(dtype), side=side).astype(_INDEX)

    def forward(self, run: Run) -> None:
        x2 = self.in_shapes[1]
        tile = run.tile_shape(x2)
        # read once and kept by its reader (no other region of x1 is read)
        x1 = run.inputs[0].read((slice(0, self.in_shapes[0][0]),))
        if len(run.inputs) > 2:
            order = np.asarray(run.inputs[2].read((slice(0, len(x1)),)))
            if len(x1) and (order.min() < -len(x1) or order.max() >= len(x1)):
                raise InvalidArgumentError(
                    f"searchsorted: sorter holds indices outside [0, {len(x1)}) for x1 of "
                    f"length {len(x1)}"
                )
            x1 = x1[order]
        x1 = run.put(x1)
        search = run.jit(self._search)
        for region, (block,) in run.stream(run.regions(x2, tile), run.inputs[1:2]):
            run.write(region, run.crop(search(x1, run.pad(block, tile)), region))

    def backward(self, run: Run) -> None:
        """Nothing: an index has no gradient (JAX's is zero)."""
