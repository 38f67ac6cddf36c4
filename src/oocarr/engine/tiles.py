"""Tiles of one op call: edge tiles padded to one nominal shape (so block functions compile
once), cropped back, and the fold of one output tile's steps that every executor shares."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from .compile import backward_function, block_functions, cached
from .op import BlockParallelOp, HostBlock, PadMode, Plan, Region

__all__ = [
    "Nominal",
    "StepGradient",
    "TileFolder",
    "compiled_host",
    "crop_to",
    "folds_on_host",
    "pad",
]


def folds_on_host(op: BlockParallelOp, dtypes: Sequence[np.dtype]) -> bool:
    """Whether ``op``'s forward pass folds with its NumPy :meth:`~oocarr.engine.op.
    BlockParallelOp.host_block` for inputs of ``dtypes``: on the CPU backend, where it has one.

    Examples
    --------
    >>> import numpy as np
    >>> from oocarr.ops.reductions import Sum
    >>> folds_on_host(Sum((3,)), [np.dtype("u2")]), folds_on_host(Sum((3,)), [np.dtype("f2")])
    (True, False)
    """
    return jax.default_backend() == "cpu" and op.host_block(list(dtypes)) is not None


class Nominal:
    """Pads edge tiles to the shape of the first (full) tile, so each op's block functions
    compile once instead of once per edge shape; results are cropped back."""

    def __init__(self, op: BlockParallelOp, plan: Plan) -> None:
        self.op = op
        first = next(op.out_regions(plan), None)
        self.out_shape = () if first is None else tuple(r.stop - r.start for r in first)
        all_steps = [] if first is None else list(itertools.islice(op.index_map(first, plan), 2))
        steps = all_steps[0] if all_steps else ()
        self.in_shapes = [tuple(r.stop - r.start for r in regions) for regions in steps]
        self.several_steps = len(all_steps) > 1

    def specs(self, dtypes: list[np.dtype]) -> list[jax.ShapeDtypeStruct] | None:
        """The block functions' inputs for every step (``None`` when there is no step)."""
        if len(self.in_shapes) != len(dtypes):
            return None
        return [jax.ShapeDtypeStruct(s, d) for s, d in zip(self.in_shapes, dtypes)]

    def inputs(self, blocks: list[np.ndarray]) -> list[np.ndarray]:
        op = self.op
        if not op.pads_edge_blocks:
            return blocks
        return [
            pad(b, s, op.pad_mode, op.pad_value, op.pad_front)
            for b, s in zip(blocks, self.in_shapes)
        ]

    def output(self, tile: np.ndarray) -> np.ndarray:
        if tile.ndim != len(self.out_shape):
            return tile
        return pad(tile, self.out_shape, "constant")

    def crop(self, tile: np.ndarray, region: Region) -> np.ndarray:
        return crop_to(tile, tuple(r.stop - r.start for r in region))


def pad(
    block: np.ndarray,
    shape: tuple[int, ...],
    mode: PadMode,
    value: float = 0,
    front: tuple = (),
) -> np.ndarray:
    """``block`` padded to ``shape``: after its elements, or before them along the axes in
    ``front``."""
    if block.shape == shape or block.ndim != len(shape):
        return block
    widths = [
        (max(0, s - b), 0) if axis in front else (0, max(0, s - b))
        for axis, (b, s) in enumerate(zip(block.shape, shape))
    ]
    if mode == "constant" or not block.size:
        return np.pad(block, widths, mode="constant", constant_values=value)
    return np.pad(block, widths, mode=mode)


def crop_to(array: np.ndarray, shape: tuple[int, ...], front: tuple = ()) -> np.ndarray:
    """The first ``shape`` elements of ``array`` (the last along the axes in ``front``)."""
    if array.shape == shape or array.ndim != len(shape):
        return array
    return array[
        tuple(
            slice(m - n, m) if axis in front else slice(0, n)
            for axis, (m, n) in enumerate(zip(array.shape, shape))
        )
    ]


def compiled_host(op: BlockParallelOp, host: HostBlock) -> HostBlock:
    """``host`` with its functions compiled for the engine's device where it asks for it
    (``compiled``), the accumulator of ``fold`` and ``combine`` donated; else as it is."""
    if not host.compiled:
        return host
    key = (op.block_key, "host")
    return HostBlock(
        cached((*key, "forward"), host.forward),
        cached((*key, "combine"), host.combine, donate_argnums=(0,)),
        None if host.fold is None else cached((*key, "fold"), host.fold, donate_argnums=(0,)),
    )


class TileFolder:
    """Folds one output tile's steps into its accumulator with the op's block functions, and
    finishes the tile: the one computation of a tile, whichever executor runs it, so every
    executor gives the same bits.

    Examples
    --------
    >>> import numpy as np
    >>> from oocarr.ops.reductions import Sum
    >>> op = Sum((4,))
    >>> plan = op.plan(2, None)
    >>> folder = TileFolder(op, plan, [np.dtype("f4")])
    >>> acc = None
    >>> for block in (np.ones(2, "f4"), np.ones(2, "f4")):
    ...     acc = folder.fold(acc, [block])
    >>> float(folder.finish(acc, ()))
    4.0
    """

    def __init__(self, op: BlockParallelOp, plan: Plan, dtypes: Sequence[np.dtype]) -> None:
        self.op = op
        self.nominal = Nominal(op, plan)
        # The plan says whether its tiles fold on the host, so every executor's worker folds
        # them alike.
        self._host = op.host_block(list(dtypes)) if plan.host else None
        if self._host is not None:
            self._host = compiled_host(op, self._host)
            return
        self._forward, self._accumulate = block_functions(op)
        specs = self.nominal.specs(list(dtypes))
        if specs is not None:
            self._forward.prepare(*specs)
            if self.nominal.several_steps:
                self._accumulate.prepare(self._forward.eval_shape(*specs), *specs)

    def fold(self, acc: Any, blocks: list[np.ndarray]) -> Any:
        """``acc`` with one step's input blocks folded in (``None`` starts a tile)."""
        if self._host is not None:
            if acc is not None and self._host.fold is not None:
                return self._host.fold(acc, *blocks)
            part = self._host.forward(*blocks)
            return part if acc is None else self._host.combine(acc, part)
        inputs = self.nominal.inputs(blocks)
        return self._forward(*inputs) if acc is None else self._accumulate(acc, *inputs)

    def merge(self, total: Any, part: Any) -> Any:
        """``total`` with a fold group's partial ``part`` combined in (the op's ``combine``)."""
        if self._host is not None:
            return self._host.combine(total, part)
        return cached((self.op.block_key, "combine"), self.op.combine)(total, part)

    def finish(self, acc: Any, region: Region) -> np.ndarray:
        """The finished output tile of ``region`` from its accumulator."""
        return self.nominal.crop(np.asarray(self.op.finish(acc)), region)


class StepGradient:
    """The gradient contributions of one backward step: the wanted inputs' gradients over the
    step's input regions, from the output tile's cotangent (and the forward output's tile when
    the op ``needs_output``).  The one computation of a step, whichever executor runs it.

    Examples
    --------
    >>> import numpy as np
    >>> from oocarr.ops.reductions import Sum
    >>> op = Sum((4,))
    >>> step = StepGradient(op, op.plan(4, None), (True,), [np.dtype("f4")], [np.dtype("f4")])
    >>> step([np.float32(2.0)], [np.zeros(4, "f4")])[0]
    array([2., 2., 2., 2.], dtype=float32)
    """

    def __init__(
        self,
        op: BlockParallelOp,
        plan: Plan,
        wanted: tuple[bool, ...],
        dtypes: Sequence[np.dtype],
        tile_dtypes: Sequence[np.dtype],
        tile_ndims: Sequence[int] | None = None,
    ) -> None:
        self.nominal = Nominal(op, plan)
        self.wanted = wanted
        on_cpu = jax.default_backend() == "cpu"
        self._host = op.host_backward(list(dtypes), wanted) if on_cpu else None
        if self._host is not None:
            return
        self._backward = backward_function(op, wanted)
        specs = self.nominal.specs(list(dtypes))
        if specs is not None:
            ndims = tile_ndims or [len(self.nominal.out_shape)] * len(tile_dtypes)
            tile_specs = [
                jax.ShapeDtypeStruct(self.nominal.out_shape if n else (), d)
                for n, d in zip(ndims, tile_dtypes)
            ]
            self._backward.prepare(*tile_specs, *specs)

    def __call__(self, tiles: list[np.ndarray], blocks: list[np.ndarray]) -> list[np.ndarray]:
        """The wanted inputs' gradients, each cropped to its block's shape (in input order)."""
        if self._host is not None:
            return self._host(*tiles, *blocks)
        padded = [self.nominal.output(t) for t in tiles]
        grads = self._backward(*padded, *self.nominal.inputs(blocks))
        shapes = [b.shape for b, w in zip(blocks, self.wanted) if w]
        front = self.nominal.op.pad_front
        return [crop_to(np.asarray(g), s, front) for g, s in zip(grads, shapes)]
