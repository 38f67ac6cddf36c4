"""The op contract: what an op tells the engine, and all of the engine an op may use.

An op class says what its output is, how an output tile maps to the input
tiles that contribute to it (``index_map``), how partial results combine,
and the math of one block forward and backward.  :func:`oocarr.make_op`
turns it into a differentiable function on ``DiskArray``s; the engine
(:mod:`oocarr.engine.run`) runs its loops.  An op that drives its own loops
(a :class:`CustomOp`) does so through the :class:`Run` protocol, and sees
nothing else of the engine.  Concrete ops (:mod:`oocarr.ops`) import this
module only.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol, TypeAlias

import jax
import numpy as np

from oocarr.store import pages
from oocarr.store.pages import grow_block
from oocarr.store.regions import broadcast_region

from .plan import INPUT_TILES, WRITE_BEHIND_TILES

__all__ = [
    "INPUT_TILES",
    "broadcast_region",
    "Op",
    "BlockParallelOp",
    "CustomOp",
    "HostBlock",
    "Plan",
    "Reader",
    "Region",
    "Run",
    "grow_block",
]

Region = tuple[slice, ...]


@dataclass(frozen=True)
class Plan:
    """Tile shapes chosen for one call: the output tile and any op-specific extents."""

    out_tile: tuple[int, ...]
    extra: dict[str, int] = field(default_factory=dict)
    #: Steps folded into one partial before partials merge, in order, into the tile's total
    #: (0: a tile's steps in one fold).  Set by the engine (:data:`~oocarr.engine.plan.
    #: FOLD_GROUP_BYTES`), the same for every executor.
    fold_steps: int = 0
    #: The forward pass folds with the op's :meth:`~BlockParallelOp.host_block` (NumPy, the host
    #: BLAS) instead of its jitted functions: set by the engine on the CPU backend where the op
    #: has one for the inputs' dtypes, so the op's ``plan`` and ``buffers`` count what it holds.
    host: bool = False


class Op:
    """What every op says about a call: its inputs' shapes, parameters and output shape.

    Parameters
    ----------
    *shapes : tuple of int
        Shapes of the inputs (``()`` for scalars).
    **params
        The op's static parameters (``axis=``, ``keepdims=`` ...).
    """

    #: Name used in error messages and I/O statistics.
    name: str = "op"
    #: Tile-sized buffers resident at once (inputs, partial, accumulator, output).
    residency: int = 3
    #: ``plan`` gets the whole budget (in elements) and fits the engine's prefetched inputs and
    #: write-behind tile in it itself, instead of one tile-sized buffer's share.
    whole_budget: bool = False
    #: The backward pass also reads the forward output (``(g, out, *blocks)`` for block ops).
    needs_output: bool = False
    #: Under ``jax.jit`` a call of this op on stored arrays writes nothing: its output is a
    #: fused array (:mod:`oocarr.engine.fused`) whose consumers evaluate the class's ``fn``
    #: on their tiles (elementwise ops; the row-local forms :meth:`fused_form` gives).
    fusable: bool = False
    #: A fusable op whose output rows each need only the same rows of its first input (read
    #: whole beyond its :meth:`fused_node`'s ``lead`` axes) and all of its other inputs: ``x @
    #: w`` with ``w`` in memory, a softmax or reduction along axes after the first, a ``take``
    #: along them.
    row_local: bool = False

    def __init__(self, *shapes: Sequence[int], **params: Any) -> None:
        self.in_shapes = tuple(tuple(int(n) for n in s) for s in shapes)
        self.params = params
        self.output_shape = self.compute_output_shape()

    def compute_output_shape(self) -> tuple[int, ...]:
        raise NotImplementedError

    def fused_form(self, stored: Sequence[bool]) -> Op | None:
        """The op a traced call with these inputs (``stored[i]``: input ``i`` is a stored
        array) fuses as, or ``None`` when it runs as a stored op.

        Examples
        --------
        >>> from oocarr.ops.elementwise import Add
        >>> op = Add((4,), (4,))
        >>> op.fused_form([True, False]) is op
        True
        """
        return self if self.fusable else None

    def fused_node(self) -> dict[str, Any]:
        """What a fused expression's node of this op holds besides its class, arguments and
        shape: for a row-local op, ``lead`` (how many leading axes its output shares with its
        first input, which is read whole along the others) and ``params`` (JSON: the keyword
        arguments of the class's ``fn``).

        Examples
        --------
        >>> from oocarr.ops.elementwise import Add
        >>> Add((4,), (4,)).fused_node()
        {}
        """
        return {}

    def tile_itemsize(self, dtypes: Sequence[np.dtype], plan: Plan | None = None) -> int:
        """Bytes each element of the forward pass's tile-sized buffers is counted at, for
        inputs of ``dtypes`` (and, once planned, tiles of ``plan``): the widest input's,
        and at least 4 (the float32 most ops compute in) by default.

        Examples
        --------
        >>> import numpy as np
        >>> from oocarr.ops.elementwise import Add
        >>> Add((4,), (4,)).tile_itemsize([np.dtype("u1"), np.dtype("f8")])
        8
        """
        return max([np.dtype(d).itemsize for d in dtypes] + [4])

    def min_tile_elems(self) -> int:
        """Elements in the smallest tile this op can run with (for the budget check)."""
        return 1

    def min_tile_label(self) -> str:
        """What the op's own tile-sized buffers hold at least, as the budget check's refusal
        names them: ``"op tiles"``, or what :meth:`min_tile_elems` stands for.

        Examples
        --------
        >>> from oocarr.ops.elementwise import UNARY
        >>> UNARY["exp"]((4,)).min_tile_label()
        'op tiles'
        """
        return "op tiles"

    #: Whether the block functions depend on the input shapes (not just on the blocks').
    shape_dependent: bool = False

    @property
    def key(self) -> tuple:
        """Identity of this op call (input shapes and parameters)."""
        return (type(self), self.in_shapes, tuple(sorted(self.params.items())))

    @property
    def block_key(self) -> tuple:
        """What the jitted block functions depend on; calls that share it share compilations."""
        # the inputs' ranks always count: an op's block functions use axes normalized by them
        # (softmax's default axis -1 is 1 of a matrix and 2 of a stack)
        shapes = self.in_shapes if self.shape_dependent else tuple(map(len, self.in_shapes))
        return (type(self), shapes, tuple(sorted(self.params.items())))


#: How a block is padded to the nominal tile (``np.pad``'s modes that oocarr's ops use).
PadMode: TypeAlias = Literal["constant", "edge"]

#: A block function's partial result: an array, or a tuple of them (``LogSumExp``'s running
#: maximum and sum).
Partial: TypeAlias = jax.Array | tuple[jax.Array, ...]


class HostBlock(NamedTuple):
    """A block-parallel op's forward and combine as functions of whole blocks (see
    :meth:`BlockParallelOp.host_block`): ``forward(*blocks)`` gives a partial result as an
    owned array, ``combine(acc, part)`` folds ``part`` into ``acc`` in place and returns it.
    Blocks are not padded to the nominal tile shape."""

    # NumPy functions of arrays, or (``compiled``) JAX functions that the engine compiles
    forward: Callable[..., Any]
    combine: Callable[[Any, Any], Any]
    #: ``fold(acc, *blocks)``: ``acc`` with one more step's blocks folded in, in place and
    #: returned (``None``: ``combine(acc, forward(*blocks))``, which holds a partial beside it).
    fold: Callable[..., Any] | None = None
    #: The three are JAX functions that the engine compiles for its device (once per block
    #: shape), donating the accumulator of ``fold`` and ``combine`` so XLA updates it in
    #: place; else they are NumPy's and run as they are.
    compiled: bool = False


class BlockParallelOp(Op):
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

    #: How edge blocks are padded to the full tile shape (``numpy.pad`` mode): zeros suit
    #: sums and products; elementwise ops repeat the edge so padding stays in their domain.
    pad_mode: PadMode = "constant"
    #: The value ``"constant"`` padding uses (``-inf`` suits a maximum).
    pad_value: float = 0.0
    #: Edge blocks are padded to the nominal tile shape (block functions compile once); an op
    #: whose padding would not be neutral leaves them as they are, each edge shape compiling
    #: its own block functions.
    pads_edge_blocks: bool = True
    #: Axes of the input blocks padded before their elements rather than after (and whose
    #: gradients are cropped from their end): a block function that reverses an axis.
    pad_front: tuple[int, ...] = ()

    # -- what subclasses define -------------------------------------------
    def index_map(self, out_region: Region, plan: Plan) -> Iterator[tuple[Region, ...]]:
        """For one output tile, the input regions of each contribution (one tuple per step)."""
        raise NotImplementedError

    # The block functions below take ``(*blocks: Any, **_: Any)``, which a type checker lets
    # each op's override narrow to its own arity and names; a partial result (what
    # ``forward_block`` returns and ``combine`` folds) is an array or a tuple of them.
    def forward_block(self, *blocks: Any, **_: Any) -> Any:
        """The output tile's partial result from one tuple of input blocks (pure ``jnp``)."""
        raise NotImplementedError

    def backward_block(self, g: jax.Array, *blocks: Any, **_: Any) -> tuple[Any, ...]:
        """Each input block's gradient contribution, given the output tile's cotangent."""
        _, vjp = jax.vjp(self.forward_block, *blocks)
        return vjp(g)

    def combine(self, acc: Any, part: Any) -> Any:
        """Fold one partial result into the accumulator."""
        return acc + part

    def cotangent_scale(self) -> float | None:
        """For a one-input op whose input's cotangent is the output's cotangent times a
        number, broadcast to the input's shape (a sum over every axis, or over axes it keeps):
        that number; ``None`` otherwise.  Under ``jax.jit`` such a cotangent of a fused array
        is computed where it is read instead of written.

        Examples
        --------
        >>> from oocarr.ops.elementwise import UNARY
        >>> UNARY["exp"]((3,)).cotangent_scale() is None
        True
        """
        return None

    def finish(self, acc: Any) -> jax.Array:
        """Turn the accumulator into the output tile (identity by default)."""
        return acc

    def result_dtype(self, *inputs: jax.ShapeDtypeStruct) -> np.dtype:
        """The output's dtype for inputs of these shapes and dtypes (traced from the block math)."""
        return np.dtype(
            jax.eval_shape(lambda *b: self.finish(self.forward_block(*b)), *inputs).dtype
        )

    def host_block(self, dtypes: Sequence[np.dtype]) -> HostBlock | None:
        """NumPy block functions for inputs of these dtypes, for ops XLA's CPU client computes
        far slower (``None``: the jitted functions are used).  Used on the CPU backend only, in
        every process that runs a plan's tiles, so every executor gives the same bits; integer
        results are exactly XLA's, floating ones may differ from XLA's in rounding.

        Examples
        --------
        >>> import numpy as np
        >>> from oocarr.ops.elementwise import UNARY
        >>> UNARY["exp"]((3,)).host_block([np.dtype("f4")]) is None
        True
        """
        return None

    def host_backward(
        self, dtypes: Sequence[np.dtype], wanted: Sequence[bool]
    ) -> Callable[..., list[np.ndarray]] | None:
        """A NumPy backward step for inputs of these dtypes, where XLA's CPU client is slower:
        ``backward(g, *blocks)`` gives the wanted inputs' gradient blocks (``None``: the
        jitted ``backward_block`` is used).  Used on the CPU backend only, by every executor.

        Examples
        --------
        >>> import numpy as np
        >>> from oocarr.ops.elementwise import UNARY
        >>> UNARY["exp"]((3,)).host_backward([np.dtype("f4")], [True]) is None
        True
        """
        return None

    # -- planning ---------------------------------------------------------
    def plan(self, budget_elems: int, chunks: tuple[int, ...] | None, host: bool = False) -> Plan:
        """Output tiles of whole chunks (when given) grown to the budget's share of one tile
        (``host``: the forward pass folds with :meth:`host_block`)."""
        per_tile = max(1, budget_elems // self.residency)
        if chunks is not None and len(chunks) != len(self.output_shape):
            chunks = None
        tile = pages.grow_block(self.output_shape, 1, per_tile, base=chunks)
        if math.prod(tile) > per_tile:
            tile = pages.grow_block(self.output_shape, 1, per_tile)
        return Plan(tile)

    def buffers(
        self,
        out_tile: tuple[int, ...],
        in_blocks: Sequence[tuple[int, ...]],
        stored: Sequence[bool],
        host: bool = False,
    ) -> list[tuple[str, int, int]]:
        """What one call holds at once for tiles of these shapes: ``(what, count, elements
        each)`` items, the engine's prefetch and write-behind included.

        The default counts ``residency`` buffers of the largest block, plus
        :data:`~oocarr.engine.plan.INPUT_TILES` blocks per stored input (read
        ahead, still held by XLA) and the tile written behind; an op whose
        ``plan`` spends the whole budget itself (``whole_budget``) overrides
        this with its own accounting.
        """
        largest = max([math.prod(out_tile), *(math.prod(b) for b in in_blocks)])
        items = [("op tiles (blocks in use, partials, accumulator)", self.residency, largest)]
        items += [
            (f"input {i} blocks read ahead or held by XLA", INPUT_TILES, math.prod(b))
            for i, (b, s) in enumerate(zip(in_blocks, stored))
            if s
        ]
        items.append(("finished tile written behind", WRITE_BEHIND_TILES, math.prod(out_tile)))
        return items

    def out_regions(self, plan: Plan) -> Iterator[Region]:
        """Every output tile's region, in C order."""
        return pages.tile_regions(self.output_shape, plan.out_tile)


class Reader(Protocol):
    """One array a :class:`Run` reads: an input, the cotangent ``g`` or the forward output."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> np.dtype: ...

    def read(self, region: Region) -> np.ndarray:
        """The block at ``region`` (the last block is kept: reading it again is free)."""
        ...


class Run(Protocol):
    """What a :class:`CustomOp` drives its loops with, for one call (the engine's
    :class:`~oocarr.engine.run.CustomRun` implements it).

    Tiles come from the memory budget (the op's ``residency`` tile-sized
    buffers plus the engine's prefetch and write-behind); blocks stream with
    the next one read ahead; finished tiles and gradient contributions are
    written behind, in order.
    """

    #: The inputs, in the op's argument order.
    inputs: Sequence[Reader]
    #: In :meth:`CustomOp.backward`: the output's cotangent.
    g: Reader | None
    #: In :meth:`CustomOp.backward` of an op that ``needs_output``: the forward output.
    out: Reader | None

    def tile_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """A tile of an array of ``shape``, sized from the budget."""
        ...

    def regions(self, shape: tuple[int, ...], tile: tuple[int, ...]) -> Iterator[Region]:
        """The regions of ``shape`` cut in ``tile``s, in C order."""
        ...

    def stream(
        self, regions: Iterable[Region], readers: Sequence[Reader]
    ) -> Iterator[tuple[Region, list[np.ndarray]]]:
        """``(region, [one block per reader])`` for each region, the next read ahead."""
        ...

    def jit(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` compiled once per op and parameters (keyed by its name)."""
        ...

    def put(self, value: Any) -> Any:
        """``value`` where the functions of :meth:`jit` compute, to pass to many calls."""
        ...

    def pad(self, block: np.ndarray, shape: tuple[int, ...], value: float = 0.0) -> np.ndarray:
        """``block`` padded with ``value`` to ``shape``."""
        ...

    def crop(self, array: Any, region: Region) -> np.ndarray:
        """``array`` cut back to the shape of ``region``."""
        ...

    def write(self, region: Region, tile: np.ndarray) -> None:
        """Write one finished output tile (behind, while the next computes)."""
        ...

    def written(self, region: Region) -> np.ndarray:
        """In :meth:`CustomOp.forward`, a region of the output already written (after the
        write behind finishes), read back."""
        ...

    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An uninitialised array of its own mapping (from 1 MiB), handed back to the system
        when it dies: a large block held for a while (a panel) that the heap would keep."""
        ...

    def release(self) -> None:
        """Hand the heap's freed memory back to the system now, before a large allocation."""
        ...

    def temporary(
        self, shape: tuple[int, ...], dtype: Any
    ) -> contextlib.AbstractContextManager[Any]:
        """A private scratch array (``read(region)``, ``write(region, value)``) for the
        intermediate results of a pass that do not fit the budget, removed after."""
        ...

    def wants_grad(self, i: int) -> bool:
        """Whether input ``i``'s gradient is needed."""
        ...

    def accumulate(self, i: int, region: Region, grad: np.ndarray) -> None:
        """Add ``grad`` to input ``i``'s gradient over ``region`` (behind, in order)."""
        ...


def cotangent(run: Run) -> Reader:
    """``run.g``, the output's cotangent, which the engine gives every backward pass."""
    if run.g is None:
        raise RuntimeError("the output's cotangent is read in a backward pass only")
    return run.g


def forward_output(run: Run) -> Reader:
    """``run.out``, the forward output, which the engine gives the backward pass of an op that
    ``needs_output``."""
    if run.out is None:
        raise RuntimeError("the forward output is read in the backward pass of an op that needs it")
    return run.out


class CustomOp(Op):
    """Base class of ops that are not block-parallel: they drive their own loops.

    A row softmax needs a whole row's statistics before it can write any of
    the row's outputs; an op like that subclasses ``CustomOp`` and writes
    :meth:`forward` and :meth:`backward` against a :class:`Run`, which hands
    out tiles sized from the budget (``residency`` tile-sized buffers, plus
    the engine's prefetch and write-behind), streams blocks with prefetch,
    writes tiles behind, accumulates gradients and compiles block functions
    once.  Everything else (eager and traced calls, gradients' storage,
    docstrings) is what :func:`oocarr.make_op` gives block-parallel ops.

    Examples
    --------
    >>> from oocarr.ops.softmax import Softmax
    >>> Softmax((4, 3), axis=-1).output_shape
    (4, 3)
    """

    name = "custom"

    def result_dtype(self, *inputs: jax.ShapeDtypeStruct) -> np.dtype:
        """The output's dtype: the inputs' promoted to a floating type by default."""
        dtype = jax.numpy.result_type(*(i.dtype for i in inputs))
        return np.dtype(jax.numpy.promote_types(dtype, jax.numpy.float32))

    def forward(self, run: Run) -> None:
        """Read ``run.inputs`` and write every output tile with ``run.write``."""
        raise NotImplementedError

    def parts(self, run: Run) -> list[Any] | None:
        """The independent parts (picklable) of the pass ``run`` drives, each written whole by
        :meth:`forward_part` (forward) or accumulated whole by :meth:`backward_part`
        (backward), so a cluster can run them as tasks; ``None`` (the default): the passes run
        only as a whole, in the calling process."""
        return None

    def part_regions(self, part: Any) -> list[Region]:
        """The output regions :meth:`forward_part` writes for ``part``."""
        raise NotImplementedError

    def forward_part(self, run: Run, part: Any) -> None:
        """Write the output tiles of one of :meth:`parts` (``forward`` is then every part in
        order)."""
        raise NotImplementedError

    def backward(self, run: Run) -> None:
        """Read ``run.g`` (and ``run.out`` when ``needs_output``) and the inputs, and add each
        input's gradient with ``run.accumulate``."""
        raise NotImplementedError

    def backward_part(self, run: Run, part: Any) -> None:
        """Accumulate the gradients of one of :meth:`parts` (``backward`` is then every part
        in order); only ops whose :meth:`parts` is not ``None`` need it."""
        raise NotImplementedError
