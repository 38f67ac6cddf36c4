"""``sort`` and ``argsort`` along one axis, in tiles that hold whole lines along it.

A line (every element along the axis, the others fixed) is sorted in memory, so a tile
spans the whole axis and as many lines as the budget allows; a line longer than a tile of
the budget is refused.  The gradient of ``sort`` is the cotangent sent back through each
line's permutation: ``jax.vjp`` of the block's ``jax.numpy.sort`` (on the CPU backend, NumPy's
stable argsort, the same permutation), so ties go where ``jax.grad`` of ``jax.numpy.sort``
sends them.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.engine.op import CustomOp, Run, cotangent, grow_block
from oocarr.errors import InvalidArgumentError
from oocarr.ops.searching import refuse_complex

__all__ = ["Sort", "ArgSort"]


class Sort(CustomOp):
    """``sort(x, axis=-1, descending=False, stable=True)``, as ``jax.numpy.sort``."""

    name = "sort"
    # forward: the block in use, its padded copy, the sorted keys and the permutation (int64
    # on the host: two buffers), the output; backward: the block and the cotangent in use,
    # their padded copies, the permutation and the gradient
    residency = 7
    #: On the CPU backend, lines of NumPy's own dtypes are sorted by NumPy's stable sort, to the
    #: same result (NaNs last, ``-0.0`` equal to ``0.0``, descending as the reversed ascending
    #: order): XLA:CPU sorted 4000 lines of 2000 float32 in 2.1 s, NumPy in 0.54 s.
    host = True

    def compute_output_shape(self) -> tuple[int, ...]:
        (shape,) = self.in_shapes
        axis = self.params.get("axis", -1)
        if not shape:
            raise InvalidArgumentError(
                f"{self.name} needs an array of at least 1 axis, got a 0-d one"
            )
        if not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
            raise InvalidArgumentError(
                f"{self.name} axis {axis!r} is out of range for an array of {len(shape)} axes"
            )
        self.axis = axis % len(shape)
        return shape

    @property
    def block_key(self) -> tuple:
        """The block functions depend on the rank and the normalized axis, not on the shape."""
        rest = {k: v for k, v in self.params.items() if k != "axis"}
        return (type(self), len(self.in_shapes[0]), self.axis, tuple(sorted(rest.items())))

    def min_tile_elems(self) -> int:
        return max(1, self.in_shapes[0][self.axis])

    def min_tile_label(self) -> str:
        """Whole lines along the axis.

        Examples
        --------
        >>> Sort((4, 1000), axis=1).min_tile_label()
        'op tiles of whole lines of 1000 elements along axis 1'
        """
        n = self.in_shapes[0][self.axis]
        return f"op tiles of whole lines of {n} elements along axis {self.axis}"

    def result_dtype(self, *inputs: jax.ShapeDtypeStruct) -> np.dtype:
        refuse_complex(self.name, np.dtype(inputs[0].dtype))
        return np.dtype(inputs[0].dtype)

    def _tile(self, run: Run) -> tuple[int, ...]:
        """Whole lines along the axis, as many as one tile-sized buffer of the budget holds."""
        (shape,) = self.in_shapes
        n = shape[self.axis]
        # a 1-d tile of every element: as many elements as one buffer of the budget holds (the
        # engine has refused a budget without room for one line: see ``min_tile_label``)
        (elems,) = run.tile_shape((math.prod(shape),))
        lines = max(1, elems // max(1, n))  # 0 elements only where another axis is empty
        others = shape[: self.axis] + shape[self.axis + 1 :]
        grown = grow_block(others, 1, lines)
        return (*grown[: self.axis], n, *grown[self.axis :])

    def _functions(self, run: Run) -> tuple:
        """The forward and backward block functions: NumPy's on the CPU backend (see
        :attr:`host`), else compiled."""
        dtype = run.inputs[0].dtype
        if self.host and jax.default_backend() == "cpu" and np.dtype(dtype).kind in "biuf":
            return self._host_sort, self._host_grad
        return run.jit(self._sort), run.jit(self._grad)

    # -- block math (compiled once per op) ----------------------------------
    def _sort(self, block: jax.Array) -> jax.Array:
        stable, descending = self.params.get("stable", True), self.params.get("descending", False)
        return jnp.sort(block, axis=self.axis, stable=stable, descending=descending)

    def _grad(self, g: jax.Array, block: jax.Array) -> jax.Array:
        _, vjp = jax.vjp(self._sort, block)
        (grad,) = vjp(g.astype(block.dtype))
        return grad

    # -- the same on the host -----------------------------------------------
    def _host_order(self, block: np.ndarray) -> np.ndarray:
        """The permutation ``jax.numpy.sort`` applies: the stable ascending order, reversed
        when descending."""
        order = np.argsort(block, axis=self.axis, kind="stable")
        return np.flip(order, self.axis) if self.params.get("descending", False) else order

    def _host_sort(self, block: np.ndarray) -> np.ndarray:
        out = np.sort(block, axis=self.axis, kind="stable")
        return np.flip(out, self.axis) if self.params.get("descending", False) else out

    def _host_grad(self, g: np.ndarray, block: np.ndarray) -> np.ndarray:
        grad = np.empty(block.shape, block.dtype)
        g = g.astype(block.dtype, copy=False)
        np.put_along_axis(grad, self._host_order(block), g, self.axis)
        return grad

    # -- loops ------------------------------------------------------------
    def forward(self, run: Run) -> None:
        (shape,) = self.in_shapes
        if not math.prod(shape):
            return
        tile = self._tile(run)
        sort, _ = self._functions(run)
        for region, (block,) in run.stream(run.regions(shape, tile), run.inputs):
            run.write(region, run.crop(sort(run.pad(block, tile)), region))

    def backward(self, run: Run) -> None:
        (shape,) = self.in_shapes
        if not run.wants_grad(0) or not math.prod(shape):
            return
        tile = self._tile(run)
        _, grad = self._functions(run)
        for region, (g, block) in run.stream(
            run.regions(shape, tile), [cotangent(run), *run.inputs]
        ):
            part = grad(run.pad(g, tile), run.pad(block, tile))
            run.accumulate(0, region, run.crop(part, region))


class ArgSort(Sort):
    """``argsort(x, axis=-1, descending=False, stable=True)``: int32 indices (``jax.numpy``'s,
    without x64) that sort each line; equal elements keep their order, descending too."""

    name = "argsort"

    def result_dtype(self, *inputs: jax.ShapeDtypeStruct) -> np.dtype:
        super().result_dtype(*inputs)
        return np.dtype(np.int32)

    def _sort(self, block: jax.Array) -> jax.Array:
        stable, descending = self.params.get("stable", True), self.params.get("descending", False)
        order = jnp.argsort(block, axis=self.axis, stable=stable, descending=descending)
        return order.astype(jnp.int32)

    def _host_sort(self, block: np.ndarray) -> np.ndarray:
        if not self.params.get("descending", False):
            return np.argsort(block, axis=self.axis, kind="stable").astype(np.int32)
        # equal elements keep their order: sort the reversed line, then reverse back
        n = block.shape[self.axis]
        order = np.argsort(np.flip(block, self.axis), axis=self.axis, kind="stable")
        np.subtract(n - 1, order, out=order)
        return np.flip(order, self.axis).astype(np.int32)

    def backward(self, run: Run) -> None:
        """Nothing: indices have no gradient (JAX's is zero)."""
