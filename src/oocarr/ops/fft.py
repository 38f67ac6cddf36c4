"""One-dimensional discrete Fourier transforms along one axis, in tiles of whole lines.

A line (every element along the axis, the others fixed) is transformed in memory, so a tile
spans the whole axis and as many lines as the budget allows; a line longer than a tile of the
budget is refused by the engine's budget check, which names the line's length (see
:meth:`FFT.min_tile_label`).  The block function is ``jax.numpy.fft``'s (``fft``, ``ifft``,
``rfft``, ``irfft``, ``hfft`` or ``ihfft``) with the transform length ``n`` given, so padding
and cropping are JAX's; the output's line may be longer or shorter than the input's (``n``,
``n // 2 + 1`` for ``rfft`` and ``ihfft``).

The transforms are linear, so the backward block is ``jax.vjp`` of the forward block taken at
zeros of the input block's shape and dtype: the gradient streams the cotangent only, and is
what ``jax.grad`` of ``jax.numpy.fft`` gives (a real input's gradient is real).  Where the
transform reads only a prefix of the axis (``n`` shorter than the axis), only that prefix is
read, and the rest of the gradient stays zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from oocarr.engine.op import CustomOp, Plan, Region, Run, cotangent, grow_block
from oocarr.errors import InvalidArgumentError

__all__ = ["FFT", "KINDS", "NORMS"]

#: The one-dimensional transforms, by their ``jax.numpy.fft`` name.
KINDS = ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft")
#: The normalization modes of the Array API (and NumPy, and JAX).
NORMS = ("backward", "ortho", "forward")
#: Transforms whose output line holds ``n // 2 + 1`` elements (the non-negative frequencies).
_HALF_OUT = ("rfft", "ihfft")
#: Transforms that read ``n // 2 + 1`` elements of each input line (Hermitian half-spectra).
_HALF_IN = ("irfft", "hfft")


class FFT(CustomOp):
    """``jax.numpy.fft.<kind>(x, n=n, axis=axis, norm=norm)`` of a stored array, a tile of
    whole lines along ``axis`` at a time.

    Parameters
    ----------
    shape : tuple of int
        The input's shape (at least 1 axis).
    kind : str
        One of :data:`KINDS`.
    n : int, optional
        The transform's length (the output's length along ``axis``, or for ``rfft`` and
        ``ihfft`` the padded or cropped input's); by default the axis's length, or
        ``2 * (m - 1)`` for ``irfft`` and ``hfft`` of an axis of ``m``.
    axis : int, default -1
    norm : str, default "backward"
        One of :data:`NORMS`.

    Examples
    --------
    >>> FFT((4, 10), kind="rfft", axis=1).output_shape
    (4, 6)
    >>> FFT((4, 6), kind="irfft", axis=-1).output_shape
    (4, 10)
    >>> FFT((4, 10), kind="fft", n=16, axis=0).output_shape
    (16, 10)
    """

    name = "fft"
    # forward: the block in use, its padded copy, the transformed lines, XLA's working copy
    # of them and the cropped tile; backward: the cotangent in use, its padded copy, the
    # gradient, XLA's working copy and the cropped gradient
    residency = 5

    def compute_output_shape(self) -> tuple[int, ...]:
        (shape,) = self.in_shapes
        kind = self.params.get("kind", "fft")
        axis = self.params.get("axis", -1)
        n = self.params.get("n")
        norm = self.params.get("norm", "backward")
        if kind not in KINDS:
            raise InvalidArgumentError(f"unknown transform {kind!r}; one of {list(KINDS)}")
        self.name = kind
        if not shape:
            raise InvalidArgumentError(f"{kind} needs an array of at least 1 axis, got a 0-d one")
        if not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
            raise InvalidArgumentError(
                f"{kind} axis {axis!r} is out of range for an array of {len(shape)} axes"
            )
        if norm not in NORMS:
            raise InvalidArgumentError(f"{kind} norm must be one of {list(NORMS)}, got {norm!r}")
        self.axis = axis % len(shape)
        m = shape[self.axis]
        if n is None:
            n = 2 * (m - 1) if kind in _HALF_IN else m
            if n < 1:
                raise InvalidArgumentError(
                    f"{kind} along axis {self.axis} of length {m} has no default length "
                    f"({'2 * (m - 1)' if kind in _HALF_IN else 'the axis length'} is {n}); "
                    "give n >= 1"
                )
        elif not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise InvalidArgumentError(f"{kind} length n must be a positive int, got {n!r}")
        #: The transform's length, as passed to ``jax.numpy.fft``.
        self.length = n
        #: Elements of each input line the transform reads (a prefix of the axis).
        self.used = min(m, n // 2 + 1 if kind in _HALF_IN else n)
        #: Elements of each output line.
        self.out_len = n // 2 + 1 if kind in _HALF_OUT else n
        self.kind, self.norm = kind, norm
        return shape[: self.axis] + (self.out_len,) + shape[self.axis + 1 :]

    @property
    def block_key(self) -> tuple:
        """The block functions depend on the rank, the axis, the transform and its lengths,
        not on the other axes' lengths."""
        rank = len(self.in_shapes[0])
        return (type(self), rank, self.axis, self.kind, self.length, self.used, self.norm)

    def _line(self) -> int:
        """Elements of a line as the transform holds it: the transform's length ``n``, at
        least as long as an input line as read (padded to ``n``) and an output line."""
        return max(1, self.length)

    def min_tile_elems(self) -> int:
        return self._line()

    def min_tile_label(self) -> str:
        """Whole lines along the axis.

        Examples
        --------
        >>> FFT((4, 1000), kind="fft", axis=1).min_tile_label()
        'op tiles of whole lines of 1000 elements along axis 1'
        >>> FFT((4, 100), kind="rfft", n=300, axis=1).min_tile_label()
        'op tiles of whole lines of 300 elements along axis 1'
        """
        return f"op tiles of whole lines of {self._line()} elements along axis {self.axis}"

    def result_dtype(self, *inputs: jax.ShapeDtypeStruct) -> np.dtype:
        dtype = np.dtype(inputs[0].dtype)
        if self.kind in ("rfft", "ihfft") and jnp.issubdtype(dtype, jnp.complexfloating):
            raise InvalidArgumentError(
                f"{self.kind} needs a real-valued array, got {dtype} (use fft for complex input)"
            )
        shape = [1] * len(self.in_shapes[0])
        shape[self.axis] = max(1, self.used)
        like = jax.ShapeDtypeStruct(tuple(shape), dtype)
        return np.dtype(jax.eval_shape(self._transform, like).dtype)

    def tile_itemsize(self, dtypes: Sequence[np.dtype], plan: Plan | None = None) -> int:
        """The widest of the input's and the (complex) output's element, at least 4 bytes.

        Examples
        --------
        >>> import numpy as np
        >>> FFT((8,), kind="fft").tile_itemsize([np.dtype("f4")])
        8
        >>> FFT((8,), kind="irfft").tile_itemsize([np.dtype("c8")])
        8
        """
        out = self.result_dtype(*(jax.ShapeDtypeStruct((1,), d) for d in dtypes))
        return max([np.dtype(d).itemsize for d in dtypes] + [out.itemsize, 4])

    # -- tiles ------------------------------------------------------------
    def _others(self) -> tuple[int, ...]:
        shape = self.in_shapes[0]
        return shape[: self.axis] + shape[self.axis + 1 :]

    def _with_axis(self, region: Region, length: int) -> Region:
        """``region`` of the other axes, with the first ``length`` elements of the axis."""
        return (*region[: self.axis], slice(0, length), *region[self.axis :])

    def _tiles(self, run: Run) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """The other axes' tile, and the input and output tiles (whole lines along the axis),
        as many lines as one tile-sized buffer of the budget holds."""
        others = self._others()
        line = self._line()
        # a 1-d tile of every element: as many elements as one buffer of the budget holds (the
        # engine has refused a budget without room for one line: see ``min_tile_label``)
        (elems,) = run.tile_shape((math.prod(others) * line,))
        lines = max(1, elems // line)
        tile = grow_block(others, 1, lines)
        ax = self.axis
        return tile, (*tile[:ax], self.used, *tile[ax:]), (*tile[:ax], self.out_len, *tile[ax:])

    # -- block math (compiled once per op) ----------------------------------
    def _transform(self, block: jax.Array) -> jax.Array:
        fn = getattr(jnp.fft, self.kind)
        return fn(block, n=self.length, axis=self.axis, norm=self.norm)

    def _grad(self, g: jax.Array, like: jax.Array) -> jax.Array:
        """The input block's cotangent: ``jax.vjp`` of the (linear) transform, taken at zeros
        of the input block's shape and of ``like``'s dtype."""
        shape = list(g.shape)
        shape[self.axis] = self.used
        primal = jnp.zeros(shape, like.dtype)
        out, vjp = jax.vjp(self._transform, primal)
        (grad,) = vjp(g.astype(out.dtype))
        return grad

    # -- loops ------------------------------------------------------------
    def _empty(self) -> bool:
        """Whether the output is all zeros or has no elements (nothing to compute)."""
        return not (math.prod(self._others()) and self.used)

    def forward(self, run: Run) -> None:
        if self._empty():
            return  # new scratch storage reads as zeros: the transform of nothing
        tile, in_tile, _ = self._tiles(run)
        transform = run.jit(self._transform)
        regions = [self._with_axis(r, self.used) for r in run.regions(self._others(), tile)]
        for region, (block,) in run.stream(regions, run.inputs):
            out = self._with_axis(region[: self.axis] + region[self.axis + 1 :], self.out_len)
            run.write(out, run.crop(transform(run.pad(block, in_tile)), out))

    def backward(self, run: Run) -> None:
        if not run.wants_grad(0) or self._empty():
            return
        tile, _, out_tile = self._tiles(run)
        grad = run.jit(self._grad)
        like = np.zeros((), run.inputs[0].dtype)
        regions = [self._with_axis(r, self.out_len) for r in run.regions(self._others(), tile)]
        for region, (g,) in run.stream(regions, [cotangent(run)]):
            into = self._with_axis(region[: self.axis] + region[self.axis + 1 :], self.used)
            run.accumulate(0, into, run.crop(grad(run.pad(g, out_tile), like), into))
