"""``BlockParallelOp``: the block-level math of an op, with no I/O and no JAX internals.

An op class says what its output is, how an output tile maps to the input
tiles that contribute to it (``index_map``), how partial results combine,
and the math of one block forward and backward.  :func:`oocarr.make_op`
turns it into a differentiable function on ``DiskArray``s; the engine
(:mod:`oocarr.engine`) runs its loops.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from .. import pages

__all__ = ["BlockParallelOp", "Plan", "Region"]

Region = tuple[slice, ...]


@dataclass(frozen=True)
class Plan:
    """Tile shapes chosen for one call: the output tile and any op-specific extents."""

    out_tile: tuple[int, ...]
    extra: dict[str, int] = field(default_factory=dict)


class BlockParallelOp:
    """Base class of ops whose output tiles are computed independently.

    Subclasses set ``name`` and ``residency`` and implement
    :meth:`output_shape`, :meth:`index_map` and :meth:`forward_block`;
    :meth:`backward_block` defaults to ``jax.vjp`` of :meth:`forward_block`,
    :meth:`combine` to addition and :meth:`plan` to output tiles grown to
    the budget.

    Parameters
    ----------
    *shapes : tuple of int
        Shapes of the inputs (``()`` for scalars).
    **params
        The op's static parameters (``axis=``, ``keepdims=`` ...).

    Examples
    --------
    >>> from oocarr.ops.elementwise import Add
    >>> Add((4, 3), (3,)).output_shape
    (4, 3)
    """

    #: Name used in error messages and I/O statistics.
    name: str = "op"
    #: Tile-sized buffers resident at once (inputs, partial, accumulator, output).
    residency: int = 3
    #: How edge blocks are padded to the full tile shape (``numpy.pad`` mode): zeros suit
    #: sums and products; elementwise ops repeat the edge so padding stays in their domain.
    pad_mode: str = "constant"
    #: The value ``"constant"`` padding uses (``-inf`` suits a maximum).
    pad_value: float = 0.0
    #: ``backward_block`` takes the forward output's tile after ``g``: ``(g, out, *blocks)``.
    needs_output: bool = False

    def __init__(self, *shapes: Sequence[int], **params: Any) -> None:
        self.in_shapes = tuple(tuple(int(n) for n in s) for s in shapes)
        self.params = params
        self.output_shape = self.compute_output_shape()

    # -- what subclasses define -------------------------------------------
    def compute_output_shape(self) -> tuple[int, ...]:
        raise NotImplementedError

    def index_map(self, out_region: Region, plan: Plan) -> Iterator[tuple[Region, ...]]:
        """For one output tile, the input regions of each contribution (one tuple per step)."""
        raise NotImplementedError

    def forward_block(self, *blocks: jax.Array) -> jax.Array:
        """The output tile's partial result from one tuple of input blocks (pure ``jnp``)."""
        raise NotImplementedError

    def backward_block(self, g: jax.Array, *blocks: jax.Array) -> tuple[jax.Array, ...]:
        """Each input block's gradient contribution, given the output tile's cotangent."""
        _, vjp = jax.vjp(self.forward_block, *blocks)
        return vjp(g)

    def combine(self, acc: jax.Array, part: jax.Array) -> jax.Array:
        """Fold one partial result into the accumulator."""
        return acc + part

    def finish(self, acc: jax.Array) -> jax.Array:
        """Turn the accumulator into the output tile (identity by default)."""
        return acc

    # -- planning ---------------------------------------------------------
    def plan(self, budget_elems: int, chunks: tuple[int, ...] | None) -> Plan:
        """Output tiles of whole chunks (when given) grown to the budget's share of one tile."""
        per_tile = max(1, budget_elems // self.residency)
        if chunks is not None and len(chunks) != len(self.output_shape):
            chunks = None
        tile = pages.grow_block(self.output_shape, 1, per_tile, base=chunks)
        if math.prod(tile) > per_tile:
            tile = pages.grow_block(self.output_shape, 1, per_tile)
        return Plan(tile)

    def out_regions(self, plan: Plan) -> Iterator[Region]:
        """Every output tile's region, in C order."""
        grid = pages.grid_shape(self.output_shape, plan.out_tile)
        for index in np.ndindex(*grid) if grid else [()]:
            yield pages.block_region(index, plan.out_tile, self.output_shape)

    def min_tile_elems(self) -> int:
        """Elements in the smallest tile this op can run with (for the budget check)."""
        return 1

    #: Whether the block functions depend on the input shapes (not just on the blocks').
    shape_dependent: bool = False

    @property
    def key(self) -> tuple:
        """Identity of this op call (input shapes and parameters)."""
        return (type(self), self.in_shapes, tuple(sorted(self.params.items())))

    @property
    def block_key(self) -> tuple:
        """What the jitted block functions depend on; calls that share it share compilations."""
        shapes = self.in_shapes if self.shape_dependent else ()
        return (type(self), shapes, tuple(sorted(self.params.items())))
