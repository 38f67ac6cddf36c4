"""Reductions over any axes: each output tile folds the input tiles along the reduced axes."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.engine.op import BlockParallelOp, HostBlock, PadMode, Partial, Plan, Region, grow_block
from oocarr.errors import InvalidArgumentError

__all__ = [
    "Sum",
    "Mean",
    "Moments",
    "Max",
    "Min",
    "LogSumExp",
    "RowSum",
    "RowMean",
    "RowMax",
    "RowMin",
    "RowLogSumExp",
    "normalize_axes",
]


def normalize_axes(axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """``None``, an int or a tuple of ints as sorted non-negative axes.

    Examples
    --------
    >>> normalize_axes(-1, 3), normalize_axes(None, 2), normalize_axes((0, 2), 3)
    ((2,), (0, 1), (0, 2))
    """
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise InvalidArgumentError(f"axis {a} is out of bounds for an array of {ndim} axes")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise InvalidArgumentError(f"repeated axis in {axis!r}")
    return tuple(sorted(out))


class Sum(BlockParallelOp):
    """``sum(x, axis=None, keepdims=False)``."""

    name = "sum"
    residency = 4
    shape_dependent = True

    def compute_output_shape(self) -> tuple[int, ...]:
        (shape,) = self.in_shapes
        self.axes = normalize_axes(self.params.get("axis"), len(shape))
        return self._out_of(shape, fill=1)

    def plan(self, budget_elems: int, chunks: tuple[int, ...] | None, host: bool = False) -> Plan:
        (shape,) = self.in_shapes
        per_tile = max(1, budget_elems // self.residency)
        # the input tile is only reduced, so its chunks may lie anywhere in it: stacked along
        # the first axis, each is one contiguous run that the driver reads straight in
        # (contiguous storage, chunks None, wants whole trailing axes: one run of the file)
        in_tile = grow_block(shape, 1, per_tile, base=chunks, first_axis_first=chunks is not None)
        if math.prod(in_tile) > per_tile:
            in_tile = (
                grow_block(shape, 1, per_tile)
                if chunks is None
                else _within_chunk(shape, chunks, per_tile)
            )
        out_tile = self._out_of(in_tile, fill=1)
        return Plan(out_tile, {f"in{i}": n for i, n in enumerate(in_tile)})

    def tile_itemsize(self, dtypes: Sequence[np.dtype], plan: Plan | None = None) -> int:
        """The input's itemsize, once each tile reduces enough elements into one that the
        partial, accumulator and output tiles (of the wider result type) are no larger than
        the input tile: a uint16 tile is not counted at the uint32 sum's width, so a 32 MiB
        256³ chunk fits one tile of a 512 MB budget and is decoded once."""
        (dtype,) = (np.dtype(d) for d in dtypes)
        out = self.result_dtype(jax.ShapeDtypeStruct(self.in_shapes[0], dtype)).itemsize
        if plan is None:
            return dtype.itemsize
        reduced = math.prod(plan.extra[f"in{a}"] for a in self.axes)
        return max(dtype.itemsize, -(-out // max(1, reduced)))

    def _out_of(self, values: Sequence[int], fill: int) -> tuple[int, ...]:
        keep = self.params.get("keepdims", False)
        return tuple(
            fill if i in self.axes else v
            for i, v in enumerate(values)
            if keep or i not in self.axes
        )

    def index_map(self, out_region: Region, plan: Plan) -> Iterator[tuple[Region, ...]]:
        (shape,) = self.in_shapes
        keep = self.params.get("keepdims", False)
        in_tile = [plan.extra[f"in{i}"] for i in range(len(shape))]
        kept = iter(out_region)
        per_axis: list[tuple[slice, ...] | tuple[int, int]] = []
        for i, n in enumerate(shape):
            if i in self.axes:
                if keep:
                    next(kept)
                # an empty axis still makes one step (of an empty block), so the tile is
                # the reduction's identity, as NumPy's sum of nothing is zero
                per_axis.append((n, in_tile[i]) if n else (slice(0, 0),))
            else:
                per_axis.append((next(kept),))
        for region in _tiles(per_axis):
            yield (region,)

    def forward_block(self, block: jax.Array) -> Any:  # an array here, Moments' a triple
        return jnp.sum(block, axis=self.axes, keepdims=self.params.get("keepdims", False))

    def fused_form(self, stored: Sequence[bool]) -> BlockParallelOp | None:
        """Over axes after the first, of a stored array, a sum, mean, maximum, minimum or
        logsumexp fuses as its row-local form (:class:`RowSum` ...); otherwise it runs as a
        stored op."""
        row_form = _ROW_FORMS.get(type(self))
        if row_form is None or list(stored) != [True] or not self.axes or 0 in self.axes:
            return None
        return row_form(*self.in_shapes, **self.params)

    def cotangent_scale(self) -> float | None:
        """1 where the output's cotangent broadcasts against the input (every axis summed, or
        the summed axes kept); ``None`` otherwise."""
        (shape,) = self.in_shapes
        if len(self.axes) == len(shape) or self.params.get("keepdims", False):
            return 1.0
        return None

    #: The NumPy ufunc whose ``reduce`` is this op's exact block function on integers and
    #: booleans (``None``: not exact, or not faster).
    host_ufunc: np.ufunc | None = np.add

    def host_block(self, dtypes: Sequence[np.dtype]) -> HostBlock | None:
        """NumPy's reduction for integer and boolean inputs, in jax.numpy's result type (a
        uint16 sum accumulates in uint32 without x64, wrapping as XLA's does).  XLA:CPU
        reduces a 64 MiB uint16 block at about 1 GB/s, NumPy at 7 GB/s (uint8 0.6 against
        4 GB/s, a uint16 maximum 3.3 against 26 GB/s): it was most of a stored sum's time.

        Examples
        --------
        >>> import numpy as np
        >>> host = Sum((3,)).host_block([np.dtype("u2")])
        >>> host.forward(np.array([65535, 65535, 2], "u2"))
        array(131072, dtype=uint32)
        """
        ufunc = type(self).host_ufunc
        (dtype,) = (np.dtype(d) for d in dtypes)
        if ufunc is None or dtype.kind not in "biu":
            return None
        if jax.dtypes.canonicalize_dtype(dtype) != dtype:
            return None  # JAX would first narrow each element (int64 without x64)
        out = self.result_dtype(jax.ShapeDtypeStruct(self.in_shapes[0], dtype))
        axes, keep = self.axes, self.params.get("keepdims", False)
        # A reduction along no axis is the identity, which ufunc.reduce does not copy.
        copy = not axes

        def forward(block: np.ndarray) -> np.ndarray:
            part = ufunc.reduce(block, axis=axes, dtype=out, keepdims=keep)
            return np.array(part, dtype=out) if copy else np.asarray(part, dtype=out)

        def combine(acc: np.ndarray, part: np.ndarray) -> np.ndarray:
            return ufunc(acc, part, out=acc)

        return HostBlock(forward, combine)


def _within_chunk(
    shape: tuple[int, ...], chunks: tuple[int, ...], per_tile: int
) -> tuple[int, ...]:
    """A tile of at most ``per_tile`` elements for a chunk that is larger: the chunk cut into
    as few pieces as fit, first axis first, so that a compressed chunk (decoded whole for any
    part of it) is decoded as few times as the budget allows.  Rows of whole chunks across
    the array (what tiles of contiguous storage are) would decode each chunk once per row
    slab: a 1024³ uint16 zstd array in 256³ chunks took 64 s to sum that way, 16x its read.

    Examples
    --------
    >>> _within_chunk((1024, 1024, 1024), (256, 256, 256), 14_000_000)
    (128, 256, 256)
    """
    tile = [max(1, min(c, n)) for c, n in zip(chunks, shape)]
    for axis in range(len(tile)):
        if math.prod(tile) <= per_tile:
            break
        pieces = -(-math.prod(tile) // per_tile)
        tile[axis] = max(1, -(-tile[axis] // pieces))
    return tuple(tile)


def _tiles(per_axis: list) -> Iterator[tuple[slice, ...]]:
    """Every combination, in C order, of one slice per axis: an axis is a fixed ``(slice,)``
    or ``(length, tile)``, walked lazily (``itertools.product`` would first build every tile
    of an axis, which for metadata claiming 2**62 rows never ends)."""
    if not per_axis:
        yield ()
        return
    first, rest = per_axis[0], per_axis[1:]
    if isinstance(first[0], slice):
        heads: Iterator[slice] = iter(first)
    else:
        n, tile = first
        heads = (slice(s, min(s + tile, n)) for s in range(0, n, tile))
    for head in heads:
        for tail in _tiles(rest):
            yield (head, *tail)


class Mean(Sum):
    """``mean(x, axis=None, keepdims=False)``: the sum of each block divided by the count."""

    name = "mean"
    host_ufunc = None

    def forward_block(self, block: jax.Array) -> jax.Array:
        count = math.prod(self.in_shapes[0][a] for a in self.axes)
        return super().forward_block(block) / count

    def cotangent_scale(self) -> float | None:
        scale = super().cotangent_scale()
        return None if scale is None else scale / math.prod(self.in_shapes[0][a] for a in self.axes)


class Moments(Sum):
    """The mean and the sum of squared deviations from it over ``axis``, in one pass: output
    ``(2, *kept)``, ``[mean, m2]`` (the variance is ``m2 / (count - correction)``).

    Each block contributes its count, mean and ``m2``; partials combine by Chan's parallel
    formula, as exact as the two-pass one, so ``mean`` and ``var`` of the same array read it
    once.  The gradient is ``g_mean / count + 2 g_m2 (x - mean)``.

    Examples
    --------
    >>> import numpy as np
    >>> op = Moments((4, 2), axis=0)
    >>> x = np.array([[1.0, 2.0], [3.0, 2.0], [5.0, 2.0], [7.0, 2.0]], "f4")
    >>> np.asarray(op.finish(op.forward_block(x))).tolist()
    [[4.0, 2.0], [20.0, 0.0]]
    """

    name = "moments"
    host_ufunc = None
    needs_output = True
    pads_edge_blocks = False  # no padding leaves a block's moments unchanged
    tile_itemsize = BlockParallelOp.tile_itemsize

    def compute_output_shape(self) -> tuple[int, ...]:
        self.params["keepdims"] = False
        return (2, *super().compute_output_shape())

    def plan(self, budget_elems: int, chunks: tuple[int, ...] | None, host: bool = False) -> Plan:
        inner = super().plan(budget_elems, chunks, host)
        return Plan((2, *inner.out_tile), inner.extra)

    def index_map(self, out_region: Region, plan: Plan) -> Iterator[tuple[Region, ...]]:
        return super().index_map(out_region[1:], plan)

    def cotangent_scale(self) -> float | None:
        return None

    def _count(self) -> int:
        return math.prod(self.in_shapes[0][a] for a in self.axes)

    def forward_block(self, block: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        count = math.prod(block.shape[a] for a in self.axes)
        mean = jnp.mean(block, axis=self.axes, keepdims=True)
        m2 = jnp.sum(jnp.square(block - mean), axis=self.axes)
        return jnp.asarray(count, mean.dtype), jnp.squeeze(mean, self.axes), m2

    def combine(self, acc: tuple, part: tuple) -> tuple:
        (n1, mean1, m21), (n2, mean2, m22) = acc, part
        n = n1 + n2
        delta = mean2 - mean1
        return n, mean1 + delta * (n2 / n), m21 + m22 + jnp.square(delta) * (n1 * n2 / n)

    def finish(self, acc: tuple) -> jax.Array:
        _, mean, m2 = acc
        return jnp.stack([mean, m2])

    def backward_block(self, g: jax.Array, out: jax.Array, block: jax.Array) -> tuple:
        g_mean, g_m2, mean = (jnp.expand_dims(v, self.axes) for v in (g[0], g[1], out[0]))
        grad = g_mean / self._count() + 2 * g_m2 * (block - mean)
        return (grad.astype(block.dtype),)


class Max(Sum):
    """``max(x, axis=None, keepdims=False)``; the gradient goes to the maximal elements."""

    name = "max"
    pad_mode: PadMode = "edge"
    needs_output = True
    reduce = staticmethod(jnp.max)

    def cotangent_scale(self) -> float | None:
        return None

    pick = staticmethod(jnp.maximum)
    host_ufunc: np.ufunc | None = np.maximum

    def forward_block(self, block: jax.Array) -> Partial:
        return type(self).reduce(block, axis=self.axes, keepdims=self.params.get("keepdims", False))

    def combine(self, acc: Any, part: Any) -> Any:  # LogSumExp's are pairs
        return type(self).pick(acc, part)

    def _expand(self, value: jax.Array) -> jax.Array:
        return value if self.params.get("keepdims", False) else jnp.expand_dims(value, self.axes)

    def backward_block(self, g: jax.Array, out: jax.Array, block: jax.Array) -> tuple:
        mask = block == self._expand(out)
        return (jnp.where(mask, self._expand(g), 0).astype(block.dtype),)


class Min(Max):
    """``min(x, axis=None, keepdims=False)``; the gradient goes to the minimal elements."""

    name = "min"
    reduce = staticmethod(jnp.min)
    pick = staticmethod(jnp.minimum)
    host_ufunc = np.minimum


class LogSumExp(Max):
    """``logsumexp(x, axis=None, keepdims=False)``, streamed with a running maximum.

    Each block contributes ``(m, s)``: its maximum and the sum of ``exp(x - m)``;
    pairs combine by rescaling to the larger maximum, and the result is
    ``m + log(s)``.  The gradient is ``g * exp(x - logsumexp)``.
    """

    name = "logsumexp"
    pad_mode = "constant"
    pad_value = -np.inf
    host_ufunc = None
    tile_itemsize = BlockParallelOp.tile_itemsize

    def forward_block(self, block: jax.Array) -> tuple[jax.Array, jax.Array]:
        # the shift's own gradient cancels: held constant, as jax.nn.logsumexp holds it, a
        # fused row's backward pass is the softmax alone, not also a maximum's mask (2-class
        # softmax regression value_and_grad, 4194304 rows, HDF5 warm: 0.84x stream_sum with
        # the mask, 1.04x without; medians of 8 interleaved calls)
        m = jax.lax.stop_gradient(jnp.max(block, axis=self.axes, keepdims=True))
        m = jnp.where(jnp.isfinite(m), m, 0)
        s = jnp.sum(jnp.exp(block - m), axis=self.axes, keepdims=True)
        return m, s

    def combine(self, acc: tuple, part: tuple) -> tuple:
        (m1, s1), (m2, s2) = acc, part
        m = jnp.maximum(m1, m2)
        return m, s1 * jnp.exp(m1 - m) + s2 * jnp.exp(m2 - m)

    def finish(self, acc: tuple) -> jax.Array:
        m, s = acc
        out = m + jnp.log(s)
        return out if self.params.get("keepdims", False) else jnp.squeeze(out, self.axes)

    def backward_block(self, g: jax.Array, out: jax.Array, block: jax.Array) -> tuple:
        return ((self._expand(g) * jnp.exp(block - self._expand(out))).astype(block.dtype),)


class _RowReduction(Sum):
    """The row-local form of a reduction over axes after the first: each output row needs only
    the same row of its input, so under ``jax.jit`` the call fuses (a row-local node of a fused
    array, evaluated on its consumer's row tiles) instead of writing its result.  Its math on a
    whole row is the reduction's own block math; its gradient is the reduction's."""

    fusable = True
    row_local = True

    @classmethod
    def fn(cls, x: jax.Array, axis: tuple[int, ...], keepdims: bool) -> jax.Array:
        op = cls(x.shape, axis=axis, keepdims=keepdims)
        return op.finish(op.forward_block(x))

    def fused_node(self) -> dict[str, Any]:
        params = {"axis": list(self.axes), "keepdims": bool(self.params.get("keepdims", False))}
        return {"lead": self.axes[0], "params": params}


class RowSum(_RowReduction, Sum):
    """:class:`Sum` over axes after the first, fused by rows.

    Examples
    --------
    >>> op = Sum((100, 8), axis=-1).fused_form([True])
    >>> type(op).__name__, op.fused_node()
    ('RowSum', {'lead': 1, 'params': {'axis': [1], 'keepdims': False}})
    """


class RowMean(_RowReduction, Mean):
    """:class:`Mean` over axes after the first, fused by rows."""


class RowMax(_RowReduction, Max):
    """:class:`Max` over axes after the first, fused by rows."""


class RowMin(_RowReduction, Min):
    """:class:`Min` over axes after the first, fused by rows."""


class RowLogSumExp(_RowReduction, LogSumExp):
    """:class:`LogSumExp` over axes after the first, fused by rows."""


_ROW_FORMS: dict[type, type] = {
    Sum: RowSum,
    Mean: RowMean,
    Max: RowMax,
    Min: RowMin,
    LogSumExp: RowLogSumExp,
}
