"""The out-of-core engine: tiled forward and backward loops over ``BlockedArray``s.

:class:`OOCAlgorithm` runs one op call: it plans tiles from the memory
budget, reads the input regions each output tile needs, applies the op's
jitted block function, folds partial results and writes each finished
tile.  Inputs may be stored (a :class:`~oocarr.blocked.BlockedArray`) or in
memory (a NumPy array, broadcast like any other input).
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import jax
import numpy as np

from . import pages
from .blocked import BlockedArray
from .buffers import BufferPool
from .config import memory_budget_bytes
from .dispatch import use_synchronous_cpu_dispatch
from .errors import BudgetTooSmallError
from .malloc import fix_mmap_threshold, trim
from .ops.base import BlockParallelOp, CustomOp, Plan, Region
from .stats import IOCounts, record

fix_mmap_threshold()
use_synchronous_cpu_dispatch()

__all__ = ["OOCAlgorithm", "Operand", "CustomRun", "BlockFunction", "prefetched"]


class Operand:
    """One input of an op call as the engine reads it: stored or in memory.

    A reader keeps its last block: consecutive steps that need the same
    region (a row panel of ``A`` while a matmul walks ``B``, a broadcast
    input) read it once.
    """

    def __init__(self, value: BlockedArray | np.ndarray, counts: IOCounts | None = None) -> None:
        self.value = value
        self.stored = isinstance(value, BlockedArray)
        self.counts = counts
        self._last: tuple[Region, np.ndarray] | None = None
        # the planner counts INPUT_TILES blocks per stored input; the pool never holds more
        # than were in use at once
        self._buffers = BufferPool(keep=INPUT_TILES) if self.stored else None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.value.shape)

    def read(self, region: Region) -> np.ndarray:
        if not self.stored:
            return np.asarray(self.value[region]) if region else np.asarray(self.value)
        if self._last is not None and self._last[0] == region:
            return self._last[1]
        block = self.value.read_view(region, self._buffers.empty)
        if self.counts is not None:
            self.counts.count_read(block.nbytes)
        self._last = (region, block)
        return block


class BlockFunction:
    """A jitted block function, compiled ahead of time for each shape and dtype of its inputs.

    :meth:`prepare` compiles for the tiles of a call before any tile is read,
    so the compiler's scratch memory is never resident beside them, and hands
    the freed scratch back to the system (glibc would keep tens of megabytes
    of it resident, outside any budget).  Calling it with inputs it was not
    prepared for compiles them then.

    Examples
    --------
    >>> import jax, numpy as np
    >>> double = BlockFunction(lambda b: b * 2)
    >>> double.prepare(jax.ShapeDtypeStruct((3,), np.float32))
    >>> np.asarray(double(np.arange(3, dtype=np.float32)))
    array([0., 2., 4.], dtype=float32)
    """

    def __init__(self, fn: Callable[..., Any], donate_argnums: tuple[int, ...] = ()) -> None:
        self._jitted = jax.jit(fn, donate_argnums=donate_argnums)
        self._compiled: dict[tuple, Any] = {}

    def prepare(self, *specs: Any) -> None:
        """Compile for inputs like ``specs`` (arrays or ``jax.ShapeDtypeStruct``s) now."""
        self._executable(specs)

    def _executable(self, args: tuple) -> Any:
        leaves, tree = jax.tree.flatten(args)
        key = (tree, *(_aval_key(a) for a in leaves))
        executable = self._compiled.get(key)
        if executable is None:
            specs = [jax.ShapeDtypeStruct(k[0], k[1], weak_type=k[2]) for k in key[1:]]
            executable = self._jitted.lower(*jax.tree.unflatten(tree, specs)).compile()
            self._compiled[key] = executable
            trim()
        return executable

    def eval_shape(self, *specs: Any) -> Any:
        """The output's shape and dtype for inputs like ``specs``."""
        return jax.eval_shape(self._jitted, *specs)

    def __call__(self, *args: Any) -> Any:
        # Handed a NumPy array, jit keeps it alive in a reference cycle until its next call or
        # the garbage collector: one input tile more than the planner counts.  The same array
        # put on the device first (without a copy, when it is aligned) is let go on return.
        put = jax.tree.map(lambda a: a if isinstance(a, jax.Array) else jax.device_put(a), args)
        return jax.block_until_ready(self._executable(put)(*put))


def _aval_key(leaf: Any) -> tuple:
    """Shape, dtype (as JAX will hold it) and weak type of an input leaf."""
    if not hasattr(leaf, "dtype"):
        leaf = jax.typeof(leaf)  # a Python scalar
    weak = bool(getattr(leaf, "weak_type", False))
    return tuple(leaf.shape), jax.dtypes.canonicalize_dtype(leaf.dtype), weak


_JITTED: dict[tuple, Any] = {}


def _jitted(op: BlockParallelOp) -> tuple:
    """Block functions compiled once per op and parameters, reused across calls."""
    fns = _JITTED.get(op.block_key)
    if fns is None:

        def accumulate(acc, *blocks):
            return op.combine(acc, op.forward_block(*blocks))

        # The accumulator is donated: XLA updates it in place, with no second tile beside it.
        fns = (
            BlockFunction(op.forward_block),
            BlockFunction(accumulate, donate_argnums=(0,)),
        )
        _JITTED[op.block_key] = fns
    return fns


def _backward_of(op: BlockParallelOp, wanted: tuple[bool, ...]) -> BlockFunction:
    """The op's backward block function returning only the gradients ``wanted`` (XLA then
    skips computing the others: a data matrix's gradient is never formed)."""
    key = (op.block_key, "backward", wanted)
    fn = _JITTED.get(key)
    if fn is None:

        def backward(*args):
            grads = op.backward_block(*args)
            return tuple(g for g, w in zip(grads, wanted) if w)

        fn = _JITTED[key] = BlockFunction(backward)
    return fn


#: Tile-sized buffers the engine adds to an op's own residency: the write-behind tile
#: (prefetched input blocks are counted per input).
WRITE_BEHIND_TILES = 1
#: Tiles per stored input besides the op's own: read ahead, and still held by XLA.
INPUT_TILES = 2


class OOCAlgorithm:
    """The tiled forward and backward loops of one op.

    While a step computes, the next step's input blocks are read in a
    background thread (prefetch), and a finished output tile is written in
    another while the next tile computes (write-behind, one tile at a
    time, so each output block has one writer).  The planner counts both
    in the budget.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.ops.reductions import Sum
    >>> x = oocarr.from_numpy(np.arange(10.0)).store
    >>> float(OOCAlgorithm(Sum((10,))).forward([Operand(x)]))
    45.0
    """

    def __init__(self, op: BlockParallelOp | CustomOp, site: str | None = None) -> None:
        self.op = op
        self.site = site or op.name
        self.counts = IOCounts(calls=1)
        if not isinstance(op, CustomOp):
            self._forward, self._accumulate = _jitted(op)

    def _counted(self, operands: list[Operand]) -> list[Operand]:
        return [Operand(o.value, self.counts) for o in operands]

    def residency(self, operands: list[Operand]) -> int:
        """Tile-sized buffers resident at once: the op's own, plus prefetch and write-behind.

        Each stored input has two tiles besides the op's own: the one read
        ahead, and the one XLA's CPU client has used without a copy and lets
        go of in its own thread some time after the call returns.
        """
        prefetched = INPUT_TILES * sum(o.stored for o in operands)
        return self.op.residency + prefetched + WRITE_BEHIND_TILES

    def budget_elems(self, operands: list[Operand], itemsize: int) -> int:
        """Elements of one tile-sized buffer's share of the budget, scaled to the op's own
        residency (what its ``plan`` divides by); raises when one tile does not fit."""
        budget = memory_budget_bytes()
        total = self.residency(operands)
        need = total * self.op.min_tile_elems() * itemsize
        if need > budget:
            raise BudgetTooSmallError(
                f"the memory budget of {budget} bytes cannot hold one tile of {self.op.name} "
                f"({need} bytes with prefetch and write-behind); raise it to at least {need} "
                "bytes with oocarr.set_memory_budget"
            )
        if self.op.whole_budget:
            return budget // itemsize
        return budget // itemsize * self.op.residency // total

    def plan(self, operands: list[Operand], itemsize: int, share: int = 1) -> Plan:
        """Tiles for this call, from the budget (``1 / share`` of it), the residency and the
        inputs' chunks."""
        chunks = next(
            (o.value.chunks for o in operands if o.stored and o.value.chunks is not None), None
        )
        return self.op.plan(self.budget_elems(operands, itemsize) // share, chunks)

    def forward(
        self, operands: list[Operand], out: BlockedArray | np.ndarray | None = None
    ) -> np.ndarray | None:
        """Compute the output into ``out`` (a store or an array); 0-d outputs are returned."""
        operands = self._counted(operands)
        itemsize = max([o.value.dtype.itemsize for o in operands] + [4])
        try:
            if isinstance(self.op, CustomOp):
                run = CustomRun(self, operands, itemsize)
                return run.forward(out)
            plan = self.plan(operands, itemsize)
            return self._forward_loop(operands, plan, out)
        finally:
            record(self.site, self.counts)

    def _steps(self, plan: Plan) -> Iterator[tuple[Region, bool, tuple[Region, ...]]]:
        """Every step in order: its output tile, whether it ends the tile, its input regions."""
        for region in self.op.out_regions(plan):
            previous = None
            for in_regions in self.op.index_map(region, plan):
                if previous is not None:
                    yield region, False, previous
                previous = in_regions
            if previous is not None:
                yield region, True, previous

    def _forward_loop(self, operands: list[Operand], plan: Plan, out: Any) -> np.ndarray | None:
        nominal = _Nominal(self.op, plan)
        specs = nominal.specs([o.value.dtype for o in operands])
        if specs is not None:
            self._forward.prepare(*specs)
            if nominal.several_steps:
                self._accumulate.prepare(self._forward.eval_shape(*specs), *specs)

        def read(step):
            return [o.read(r) for o, r in zip(operands, step[2])]

        acc = None
        with _WriteBehind(self._write_tile, out) as writer:
            for (region, last, _), blocks in prefetched(self._steps(plan), read):
                inputs = nominal.inputs(blocks)
                acc = self._forward(*inputs) if acc is None else self._accumulate(acc, *inputs)
                del blocks, inputs
                if not last:
                    continue
                self.counts.tiles += 1
                tile = nominal.crop(np.asarray(self.op.finish(acc)), region)
                acc = None
                if out is None:
                    return tile
                writer.submit(region, tile)
        return out if isinstance(out, np.ndarray) else None

    def _write_tile(self, out: Any, region: Region, tile: np.ndarray) -> None:
        if isinstance(out, np.ndarray):
            out[region] = tile
            return
        value = tile.astype(out.dtype, copy=False)
        out.write_region(region, value)
        self.counts.count_written(value.nbytes)

    def backward(
        self,
        operands: list[Operand],
        g: Operand | np.ndarray,
        targets: list[Any],
        out: Operand | None = None,
    ) -> None:
        """Accumulate each input's gradient into its target (``None``: not needed).

        A target is a writable ``BlockedArray`` or an in-memory NumPy array of
        the input's shape; contributions are added to what it holds.  Ops that
        declare ``needs_output`` also get the forward output's tile (``out``).
        """
        operands = self._counted(operands)
        itemsize = max([o.value.dtype.itemsize for o in operands] + [4])
        g = g if isinstance(g, Operand) else Operand(np.asarray(g))
        g_operand = Operand(g.value, self.counts)
        out = None if out is None else Operand(out.value, self.counts)
        try:
            if isinstance(self.op, CustomOp):
                run = CustomRun(self, operands, itemsize, g_operand, out, targets)
                run.backward()
                return
            wanted = tuple(
                i < len(targets) and targets[i] is not None for i in range(len(operands))
            )
            # A whole-budget op planned its tiles for the forward pass; gradient panels written
            # to storage need as much room again as the input panels.
            share = (
                2
                if self.op.whole_budget and any(w and o.stored for w, o in zip(wanted, operands))
                else 1
            )
            plan = self.plan([*operands, g_operand], itemsize, share)
            self._backward_loop(operands, g_operand, targets, out, plan, wanted)
        finally:
            record(self.site + " (backward)", self.counts)

    def _backward_loop(self, operands, g_operand, targets, out, plan, wanted) -> None:
        nominal = _Nominal(self.op, plan)
        backward = _backward_of(self.op, wanted)
        targets = [t for t, w in zip(targets, wanted) if w]
        extra_operands = [] if out is None else [out]
        specs = nominal.specs([o.value.dtype for o in operands])
        if specs is not None:
            tile_specs = [
                jax.ShapeDtypeStruct(nominal.out_shape if o.shape else (), o.value.dtype)
                for o in (g_operand, *extra_operands)
            ]
            backward.prepare(*tile_specs, *specs)

        def read(step):
            region = step[0]
            tiles = [o.read(region if o.shape else ()) for o in (g_operand, *extra_operands)]
            return tiles, [o.read(r) for o, r in zip(operands, step[2])]

        def accumulate(_, step, grads, shapes):
            regions = [r for r, w in zip(step[2], wanted) if w]
            shapes = [s for s, w in zip(shapes, wanted) if w]
            for target, r, grad, shape in zip(targets, regions, grads, shapes):
                _accumulate(target, r, _crop_to(np.asarray(grad), shape), self.counts)

        with _WriteBehind(accumulate, None) as writer:
            for step, (tiles, raw) in prefetched(self._steps(plan), read):
                if step[1]:
                    self.counts.tiles += 1
                tiles = [nominal.output(t) for t in tiles]
                grads = backward(*tiles, *nominal.inputs(raw))
                writer.submit(step, grads, [b.shape for b in raw])
                del tiles, raw, grads


class CustomRun:
    """What a :class:`~oocarr.ops.base.CustomOp` drives its loops with, for one call.

    Attributes
    ----------
    inputs : list of Operand
        The inputs; ``inputs[i].read(region)`` reads a block (the last block
        of each input is kept, so reading the same region again is free).
    g, out : Operand or None
        In :meth:`~oocarr.ops.base.CustomOp.backward`: the output's
        cotangent, and the forward output when the op ``needs_output``.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.ops.softmax import Softmax
    >>> x = oocarr.from_numpy(np.zeros((2, 4), "f4")).store
    >>> out = np.empty((2, 4), "f4")
    >>> OOCAlgorithm(Softmax((2, 4))).forward([Operand(x)], out)[0]
    array([0.25, 0.25, 0.25, 0.25], dtype=float32)
    """

    def __init__(
        self,
        algo: OOCAlgorithm,
        inputs: list[Operand],
        itemsize: int,
        g: Operand | None = None,
        out: Operand | None = None,
        targets: list[Any] | None = None,
    ) -> None:
        self._algo = algo
        self.op = algo.op
        self.inputs = inputs
        self.itemsize = itemsize
        self.g = g
        self.out = out
        self._targets = targets or []
        self._writer: _WriteBehind | None = None

    # -- planning ---------------------------------------------------------
    def tile_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """A tile of an array of ``shape``: whole chunks of the first chunked input where they
        fit, grown last axis first to one buffer's share of the budget."""
        readers = [*self.inputs, *(o for o in (self.g, self.out) if o is not None)]
        elems = self._algo.budget_elems(readers, self.itemsize) // self.op.residency
        chunks = next(
            (o.value.chunks for o in self.inputs if o.stored and o.value.chunks is not None), None
        )
        if chunks is not None and len(chunks) == len(shape):
            tile = pages.grow_block(shape, 1, elems, base=chunks)
            if math.prod(tile) <= elems:
                return tile
        return pages.grow_block(shape, 1, max(1, elems))

    @staticmethod
    def regions(shape: tuple[int, ...], tile: tuple[int, ...]) -> Iterator[Region]:
        """The regions of ``shape`` cut in ``tile``s, in C order."""
        grid = pages.grid_shape(shape, tile)
        for index in np.ndindex(*grid) if grid else [()]:
            yield pages.block_region(index, tile, shape)

    # -- streaming ----------------------------------------------------------
    def stream(
        self, regions: Iterable[Region], operands: list[Operand]
    ) -> Iterator[tuple[Region, list[np.ndarray]]]:
        """``(region, [operand blocks])`` per region, the next region's blocks read in the
        background while the caller computes."""
        return prefetched(regions, lambda r: [o.read(r) for o in operands])

    def jit(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``jax.jit(fn)``, compiled once per op and parameters (keyed by ``fn``'s name)."""
        key = (self.op.block_key, fn.__name__)
        jitted = _JITTED.get(key)
        if jitted is None:
            jitted = _JITTED[key] = BlockFunction(fn)
        return jitted

    @staticmethod
    def pad(block: np.ndarray, shape: tuple[int, ...], value: float = 0.0) -> np.ndarray:
        """``block`` padded with ``value`` to ``shape`` (so edge tiles reuse one compilation)."""
        return _pad(block, tuple(shape), "constant", value)

    @staticmethod
    def crop(array: Any, region: Region) -> np.ndarray:
        """``array`` cut back to the shape of ``region``."""
        return _crop_to(np.asarray(array), tuple(r.stop - r.start for r in region))

    # -- output -----------------------------------------------------------
    def write(self, region: Region, tile: np.ndarray) -> None:
        """Write one finished output tile (behind, while the next computes)."""
        self._algo.counts.tiles += 1
        self._writer.submit(region, np.asarray(tile))

    def wants_grad(self, i: int) -> bool:
        """Whether input ``i``'s gradient is needed."""
        return i < len(self._targets) and self._targets[i] is not None

    def accumulate(self, i: int, region: Region, grad: np.ndarray) -> None:
        """Add ``grad`` to input ``i``'s gradient over ``region`` (behind, in order)."""
        if self.wants_grad(i):
            self._algo.counts.tiles += 1
            self._writer.submit(i, region, np.asarray(grad))

    def _add_grad(self, _: Any, i: int, region: Region, grad: np.ndarray) -> None:
        _accumulate(self._targets[i], region, grad, self._algo.counts)

    def forward(self, out: BlockedArray | np.ndarray | None) -> np.ndarray | None:
        """Run the op's forward loops, writing into ``out`` (a new array when ``None``)."""
        target = np.empty(self.op.output_shape, np.float64) if out is None else out
        with _WriteBehind(self._algo._write_tile, target) as self._writer:
            self.op.forward(self)
        self._writer = None
        if out is None:
            return target
        return out if isinstance(out, np.ndarray) else None

    def backward(self) -> None:
        """Run the op's backward loops, adding into the gradient targets."""
        with _WriteBehind(self._add_grad, None) as self._writer:
            self.op.backward(self)
        self._writer = None


_END = object()


def prefetched(items: Iterable[Any], read: Callable[[Any], Any]) -> Iterator[tuple[Any, Any]]:
    """``(item, read(item))`` for each item, reading the next item in a background thread
    while the caller works on the current one (inline when there is only one).

    Examples
    --------
    >>> [(i, v) for i, v in prefetched(range(3), lambda i: i * 10)]
    [(0, 0), (1, 10), (2, 20)]
    """
    items = iter(items)
    current = next(items, _END)
    if current is _END:
        return
    following = next(items, _END)
    if following is _END:
        yield current, read(current)
        return
    with ThreadPoolExecutor(1, thread_name_prefix="oocarr-read") as pool:
        future: Future | None = pool.submit(read, current)
        try:
            while True:
                value = future.result()
                future = None if following is _END else pool.submit(read, following)
                yield current, value
                del value
                if following is _END:
                    return
                current, following = following, next(items, _END)
        finally:
            if future is not None:
                future.cancel()
                with contextlib.suppress(BaseException):
                    future.result()


class _WriteBehind:
    """Runs ``write(target, *args)`` in a background thread, one call at a time: each call
    waits for the previous one, so at most one finished tile waits to be written."""

    def __init__(self, write: Callable[..., None], target: Any) -> None:
        self._write = write
        self._target = target
        self._pool: ThreadPoolExecutor | None = None
        self._pending: Future | None = None

    def submit(self, *args: Any) -> None:
        self.wait()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="oocarr-write")
        self._pending = self._pool.submit(self._write, self._target, *args)

    def wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def __enter__(self) -> _WriteBehind:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self.wait()
            else:
                with contextlib.suppress(BaseException):
                    self.wait()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)


class _Nominal:
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
        return [_pad(b, s, op.pad_mode, op.pad_value) for b, s in zip(blocks, self.in_shapes)]

    def output(self, tile: np.ndarray) -> np.ndarray:
        if tile.ndim != len(self.out_shape):
            return tile
        return _pad(tile, self.out_shape, "constant")

    def crop(self, tile: np.ndarray, region: Region) -> np.ndarray:
        return _crop_to(tile, tuple(r.stop - r.start for r in region))


def _pad(block: np.ndarray, shape: tuple[int, ...], mode: str, value: float = 0) -> np.ndarray:
    if block.shape == shape or block.ndim != len(shape):
        return block
    widths = [(0, max(0, s - b)) for b, s in zip(block.shape, shape)]
    if mode == "constant" or not block.size:
        return np.pad(block, widths, mode="constant", constant_values=value)
    return np.pad(block, widths, mode=mode)


def _crop_to(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if array.shape == shape or array.ndim != len(shape):
        return array
    return array[tuple(slice(0, n) for n in shape)]


def _accumulate(target: Any, region: Region, grad: np.ndarray, counts: IOCounts) -> None:
    if isinstance(target, BlockedArray):
        current = target.read_region(region)
        counts.count_read(current.nbytes)
        target.write_region(
            region, (current + grad.reshape(current.shape)).astype(target.dtype, copy=False)
        )
        counts.count_written(current.nbytes)
    else:
        view = target[region] if region else target
        view += grad.reshape(view.shape).astype(target.dtype, copy=False)
