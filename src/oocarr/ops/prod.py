"""``prod`` over any axes with an exact gradient, and the panel walk of reductions that need
their own loops (:class:`ReducingOp`, which :mod:`oocarr.ops.searching` shares).

The forward pass multiplies the reduced blocks of each output panel (edge blocks padded with
ones).  The gradient of a product with respect to one factor is the product of the others,
which dividing the product by the factor gets wrong where the data hold zeros; so the backward
pass streams each panel's reduced blocks twice: once for the product of its non-zero elements
and its count of zeros, then to write ``g * (product of the others)``: ``p / x`` where the
slice holds no zero, ``p`` at the zero of a slice holding one, and zero everywhere else.
"""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.engine.op import CustomOp, Region, Run, cotangent
from oocarr.errors import InvalidArgumentError, NotSupportedError
from oocarr.ops.reductions import normalize_axes

__all__ = ["Prod", "ReducingOp", "compute_dtype"]


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a streamed reduction of ``dtype`` results accumulates in: float32 for the
    half-precision floats (one rounding at the end instead of one per block), else itself.

    Examples
    --------
    >>> compute_dtype(np.dtype("float16")), compute_dtype(np.dtype("int32"))
    (dtype('float32'), dtype('int32'))
    """
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.floating) and dtype.itemsize < 4:
        return np.dtype(np.float32)
    return dtype


class ReducingOp(CustomOp):
    """A reduction over ``axis`` (``None``, an int or a tuple) that drives its own loops: each
    output panel (a tile's extent on the kept axes) folds the tiles of the reduced axes in C
    order.  Subclasses write the folds; this class gives the shapes and the walk."""

    #: Whether ``axis`` may be a tuple of axes (``argmax`` takes one axis or ``None``).
    takes_tuple = True

    def compute_output_shape(self) -> tuple[int, ...]:
        (shape,) = self.in_shapes
        axis = self.params.get("axis")
        if isinstance(axis, tuple) and not self.takes_tuple:
            raise InvalidArgumentError(f"{self.name} takes one axis (an int) or None, got {axis!r}")
        if axis is not None and not isinstance(axis, int | tuple):
            raise InvalidArgumentError(
                f"{self.name} axis must be an int, a tuple of ints or None, got {axis!r}"
            )
        self.axes = normalize_axes(axis, len(shape))
        keep = bool(self.params.get("keepdims", False))
        return tuple(
            1 if a in self.axes else n for a, n in enumerate(shape) if keep or a not in self.axes
        )

    @property
    def block_key(self) -> tuple:
        """The block functions depend on the rank and the normalized axes (``axis=-1`` and
        ``axis=1`` of a 2-d array share them), not on ``keepdims`` (applied to finished tiles
        on the host) or the input's shape (each tile shape compiles its own anyway)."""
        rest = {k: v for k, v in self.params.items() if k not in ("axis", "keepdims")}
        return (type(self), len(self.in_shapes[0]), self.axes, tuple(sorted(rest.items())))

    def acc_shape(self, tile: tuple[int, ...]) -> tuple[int, ...]:
        """The accumulator of a panel of input ``tile``s: the tile, reduced axes kept as 1."""
        return tuple(1 if a in self.axes else t for a, t in enumerate(tile))

    def finished(
        self, run: Run, acc: jax.Array | np.ndarray, out: Region, panel: Region
    ) -> np.ndarray:
        """A panel's finished accumulator as the output tile at ``out``: cut to the panel, its
        reduced axes dropped unless ``keepdims``."""
        return run.crop(acc, panel).reshape(tuple(s.stop - s.start for s in out))

    def panels(self, run: Run) -> Iterator[tuple[Region, Region, tuple[int, ...]]]:
        """``(output region, panel, input tile)`` per output panel, in C order; the panel is
        the input region of its kept axes (``slice(0, 1)`` on the reduced ones)."""
        (shape,) = self.in_shapes
        tile = run.tile_shape(shape)
        panel_shape = tuple(1 if a in self.axes else n for a, n in enumerate(shape))
        panel_tile = self.acc_shape(tile)
        keep = self.params.get("keepdims", False)
        for panel in run.regions(panel_shape, panel_tile):
            out = tuple(s for a, s in enumerate(panel) if keep or a not in self.axes)
            yield out, panel, tile

    def steps(self, run: Run, panel: Region, tile: tuple[int, ...]) -> Iterator[Region]:
        """The input regions of one panel: the reduced axes' tiles, in C order."""
        (shape,) = self.in_shapes
        reduced = tuple(shape[a] for a in self.axes)
        for part in run.regions(reduced, tuple(tile[a] for a in self.axes)):
            region = list(panel)
            for a, s in zip(self.axes, part):
                region[a] = s
            yield tuple(region)

    def g_tile(self, run: Run, out: Region, panel: Region, tile: tuple[int, ...]) -> np.ndarray:
        """The output's cotangent over ``out``, shaped and padded as ``panel``'s accumulator."""
        g = np.asarray(cotangent(run).read(out)).reshape(tuple(s.stop - s.start for s in panel))
        return run.pad(g, self.acc_shape(tile))


class Prod(ReducingOp):
    """``prod(x, axis=None, dtype=None, keepdims=False)``, as ``jax.numpy.prod``."""

    name = "prod"
    # the block as read, its padded copy, its product (and, backward, the gradient block and
    # its where temporaries), with the panel's accumulators
    residency = 5

    def result_dtype(self, *inputs: jax.ShapeDtypeStruct) -> np.dtype:
        (x,) = inputs
        if jnp.issubdtype(x.dtype, jnp.complexfloating):
            raise NotSupportedError(
                "prod of complex arrays is not built for stored arrays; "
                "read them with oocarr.materialize and use jax.numpy.prod"
            )
        dtype = self.params.get("dtype")
        return np.dtype(jax.eval_shape(lambda v: jnp.prod(v, dtype=dtype), x).dtype)

    def _out_dtype(self, dtype: np.dtype) -> np.dtype:
        """The result's dtype for an input of ``dtype``."""
        return self.result_dtype(jax.ShapeDtypeStruct((), dtype))

    def _factors(self, block: jax.Array, dtype: np.dtype) -> jax.Array:
        """A block's elements as the factors of the product: cast to the result's dtype (as
        ``jax.numpy.prod`` casts them), held in the accumulators' ``dtype``."""
        return block.astype(self._out_dtype(block.dtype)).astype(dtype)

    # -- block math (compiled once per op) ----------------------------------
    def _fold(self, acc: jax.Array, block: jax.Array) -> jax.Array:
        return acc * jnp.prod(self._factors(block, acc.dtype), axis=self.axes, keepdims=True)

    def _nonzero_fold(self, p: jax.Array, zeros: jax.Array, block: jax.Array) -> tuple:
        x = self._factors(block, p.dtype)
        zero = x == 0
        p = p * jnp.prod(jnp.where(zero, 1, x), axis=self.axes, keepdims=True)
        return p, zeros + jnp.sum(zero, axis=self.axes, keepdims=True, dtype=jnp.int32)

    def _grad_block(
        self, g: jax.Array, p: jax.Array, zeros: jax.Array, block: jax.Array
    ) -> jax.Array:
        x = self._factors(block, p.dtype)
        zero = x == 0
        others = jnp.where(zeros == 0, p / jnp.where(zero, 1, x), jnp.where(zero, p, 0))
        return (g.astype(p.dtype) * jnp.where(zeros > 1, 0, others)).astype(block.dtype)

    # -- loops ------------------------------------------------------------
    def forward(self, run: Run) -> None:
        result = self._out_dtype(run.inputs[0].dtype)
        dtype = compute_dtype(result)
        fold = run.jit(self._fold)
        for out, panel, tile in self.panels(run):
            acc = np.ones(self.acc_shape(tile), dtype)
            for _, (block,) in run.stream(self.steps(run, panel, tile), run.inputs):
                acc = fold(acc, run.pad(block, tile, 1))
            run.write(out, self.finished(run, np.asarray(acc).astype(result), out, panel))

    def backward(self, run: Run) -> None:
        if not run.wants_grad(0):
            return
        dtype = compute_dtype(self._out_dtype(run.inputs[0].dtype))
        nonzero, grad = run.jit(self._nonzero_fold), run.jit(self._grad_block)
        for out, panel, tile in self.panels(run):
            p = np.ones(self.acc_shape(tile), dtype)
            zeros = np.zeros(self.acc_shape(tile), np.int32)
            for _, (block,) in run.stream(self.steps(run, panel, tile), run.inputs):
                p, zeros = nonzero(p, zeros, run.pad(block, tile, 1))
            g = self.g_tile(run, out, panel, tile)
            for region, (block,) in run.stream(self.steps(run, panel, tile), run.inputs):
                part = grad(g, p, zeros, run.pad(block, tile, 1))
                run.accumulate(0, region, run.crop(part, region))
