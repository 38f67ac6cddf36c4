"""Optax on stored parameters: optimizer steps streamed tile by tile.

Optax's transformations cannot take ``DiskArray`` leaves (``optax.apply_updates``
materializes with ``jnp.asarray``; ``adam`` calls ``jnp.sqrt`` on its moments).
:func:`blockwise` wraps a transformation so that, for each stored parameter,
its state lives in scratch storage and ``update`` runs the *unchanged* optax
update on one tile at a time: read the gradient, parameter and state tiles,
apply the transformation's (jitted) update to them, write the update tile and
the new state tiles.  :func:`apply_updates` writes ``p + u`` back into each
stored parameter's own storage.  Both work eagerly and under ``jax.jit``
(the streaming runs in an ``io_callback``, ordered by markers like every
oocarr op), and a jitted training step compiles once: the state keeps its
locators from step to step.

Applying a transformation per leaf and per tile is exact for *elementwise*
transformations, whose output at an element depends only on the inputs at
that element and on scalar state such as the step count: ``sgd`` (with or
without momentum), ``adam``, ``adamw``, ``lion``, ``rmsprop``, ``adagrad``,
``adabelief``, ``scale_by_schedule``, chains of these ...  A chain is cut at
``clip_by_global_norm`` and ``scale_by_trust_ratio`` (``lamb``, ``lars``),
whose norms :mod:`oocarr.train.global_steps` computes in streamed passes of
their own.  Other transformations that combine elements (``adafactor``'s
factored moments, ``clip_by_block_rms``, ``centralize`` ...) are refused when
the state is made (a probe compares their result on parts of a tree with
their result on the whole): tile by tile they would use per-tile statistics.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as jax_core
from jax.experimental.hijax import ShapedArray, VJPHiPrimitive

from oocarr.engine.budget import memory_budget_bytes
from oocarr.engine.compile import BlockFunction
from oocarr.engine.io import Operand, WriteBehind, prefetched
from oocarr.engine.plan import (
    INPUT_TILES,
    WRITE_BEHIND_TILES,
    Buffers,
    Projection,
    least_read_buffers,
    require,
    tile_budget,
    tile_for,
)
from oocarr.engine.stats import IOCounts, call_site, record
from oocarr.errors import (
    InvalidArgumentError,
    ShapeMismatchError,
    UnsupportedTransformationError,
)
from oocarr.jaxlayer.callbacks import (
    call,
    check_writable,
    create_store,
    is_traced,
    marker,
    open_store,
    result_struct,
)
from oocarr.jaxlayer.disk_array import DiskArray, DiskArrayType, allow_writes, is_disk
from oocarr.jaxlayer.make_op import materialize
from oocarr.store import pages
from oocarr.store.blocked import BlockedArray
from oocarr.store.locator import Locator
from oocarr.store.scratch import scratch_locator
from oocarr.train.global_steps import flatten, global_step, segmented
from oocarr.train.optax_parts import not_elementwise, require_optax

__all__ = ["blockwise", "apply_updates", "BlockwiseState"]


class BlockwiseState(NamedTuple):
    """The state of a :func:`blockwise` transformation: one inner state per parameter leaf.

    ``per_leaf[i]`` is the wrapped transformation's state for the ``i``-th
    leaf of the parameters (in ``jax.tree.leaves`` order), with the same
    structure as ``tx.init(leaf)``; for a stored parameter its
    parameter-shaped leaves are ``DiskArray``s in scratch storage.

    Examples
    --------
    >>> import numpy as np, optax, oocarr
    >>> tx = oocarr.optim.blockwise(optax.adam(0.1))
    >>> state = tx.init({"w": oocarr.from_numpy(np.zeros((3, 2), "f4"))})
    >>> adam_state = state.per_leaf[0][0]
    >>> type(adam_state.mu).__name__, int(adam_state.count)
    ('DiskArray', 0)
    """

    per_leaf: tuple


# ----------------------------------------------------------------------------
# Scratch made by this module
#
# Every handle on owned storage shares its lifetime (``DiskArray._at`` finds
# it by locator).  Scratch made inside a compiled step has no handle yet when
# its type is raised, so outputs are typed ``_Kept``, whose ``raise_val``
# owns scratch made here with its first handle.
# ----------------------------------------------------------------------------

_made_here: set[Locator] = set()


def _adopt(x: DiskArray, *, eager: bool = False) -> DiskArray:
    """Own scratch made here with its first handle.

    A compiled function writes the same scratch at every call, so its
    locators stay known; an eager call's are forgotten once owned.
    """
    if x._finalizer is None and x.locator in _made_here:
        x._own()
        if eager:
            _made_here.discard(x.locator)
    return x


def _fresh_locator(shape: Sequence[int], dtype: Any) -> Locator:
    locator = scratch_locator(None, shape, dtype)
    _made_here.add(locator)
    allow_writes(locator)  # still writable if the scratch directory is moved later
    return locator


class _Kept(DiskArrayType):
    """A ``DiskArrayType`` whose values share the lifetime of the storage at their locator.

    Equal to (and hashed like) the plain type with the same fields, so a
    value returned by a jitted step has the type it came in with.
    """

    def raise_val(self, marker: Any) -> DiskArray:
        return _adopt(super().raise_val(marker))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DiskArrayType):
            return NotImplemented
        return (self.shape, self.dtype, self.locator, self.tangent) == (
            other.shape,
            other.dtype,
            other.locator,
            other.tangent,
        )

    __hash__ = DiskArrayType.__hash__


def _kept(shape: Sequence[int], dtype: Any, locator: Locator) -> _Kept:
    return _Kept(tuple(int(s) for s in shape), np.dtype(dtype), locator)


# ----------------------------------------------------------------------------
# The tiled primitive
# ----------------------------------------------------------------------------


class _Kernel:
    """A per-tile function ``fn(tiled_blocks, whole_values) -> (tiled_out, whole_out)``.

    Compiled once per tile shape (edge tiles are padded to the full tile
    shape).  Hashed by identity: one kernel per wrapped transformation and
    state layout.
    """

    def __init__(self, fn: Callable[[tuple, tuple], tuple[tuple, tuple]], name: str) -> None:
        self.fn = fn
        self.name = name
        self.jitted = BlockFunction(fn)

    def __repr__(self) -> str:
        return f"_Kernel({self.name})"


def _source(aval: Any, value: Any) -> BlockedArray | np.ndarray:
    return open_store(aval.locator) if isinstance(aval, DiskArrayType) else np.asarray(value)


def _pad_edge(block: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Pad an edge tile to the full tile shape by repeating its last elements (finite inputs
    stay finite, so no transformation sees a padded zero it would divide by)."""
    if block.shape == shape or not block.size:
        return block if block.shape == shape else np.zeros(shape, block.dtype)
    return np.pad(block, [(0, s - b) for b, s in zip(block.shape, shape)], mode="edge")


def _projection(name: str, sources: list[Any], n_targets: int, tile_bytes: int) -> Projection:
    """What one optimizer step holds at once with tiles of ``tile_bytes``: per stored input
    the block in use, the one read ahead and the one XLA still holds; per in-memory input the
    block in use and the one read ahead; per output the kernel's result and the tile written
    behind."""
    stored = sum(isinstance(s, BlockedArray) for s in sources)
    return Projection(
        name,
        (
            Buffers(
                "stored input blocks (in use, read ahead, held by XLA)",
                stored * (1 + INPUT_TILES),
                tile_bytes,
            ),
            Buffers(
                "in-memory input blocks (in use, read ahead)",
                (len(sources) - stored) * 2,
                tile_bytes,
            ),
            Buffers(
                "output tiles (computed, written behind)",
                n_targets * (1 + WRITE_BEHIND_TILES),
                tile_bytes,
            ),
        ),
    )


def _read_overhead(sources: list[Any], tile: tuple[int, ...]) -> int:
    """Bytes the drivers' reads of one tile of every stored input hold besides the tiles."""
    return sum(s.read_overhead(tile) for s in sources if isinstance(s, BlockedArray))


def _stream(
    kernel: _Kernel,
    shape: tuple[int, ...],
    sources: list[BlockedArray | np.ndarray],
    whole: list[np.ndarray],
    targets: list[BlockedArray],
    counts: IOCounts,
    budget: int,
) -> tuple:
    """Run ``kernel`` over every tile of ``shape`` on the engine's loop (the next tile read
    ahead, the last one written behind); returns the first tile's whole outputs."""
    dtypes = [s.dtype for s in sources] + [t.dtype for t in targets]
    itemsize = max([np.dtype(d).itemsize for d in dtypes] + [1])
    chunks = next(
        (
            s.chunks
            for s in (*targets, *sources)
            if isinstance(s, BlockedArray) and s.chunks is not None
        ),
        None,
    )
    projection = _projection(kernel.name, sources, len(targets), itemsize)
    stored = [s for s in sources if isinstance(s, BlockedArray)]
    require(projection.plus(least_read_buffers(stored)), budget)
    buffers = max(1, projection.buffers)
    tile = tile_for(shape, itemsize, tile_budget(budget, projection.nbytes) // buffers, chunks)
    overhead = _read_overhead(sources, tile)
    if overhead:  # the drivers' read buffers come out of the tiles' share
        usable = tile_budget(budget, projection.nbytes, overhead)
        tile = tile_for(shape, itemsize, usable // buffers, chunks)
        overhead = _read_overhead(sources, tile)
    counts.project(projection.scaled(math.prod(tile) * itemsize).nbytes + overhead)
    operands = [
        Operand(s, counts) if isinstance(s, BlockedArray) else Operand(np.broadcast_to(s, shape))
        for s in sources
    ]
    whole_in = tuple(whole)

    def read(region: tuple[slice, ...]) -> tuple[np.ndarray, ...]:
        return tuple(_pad_edge(o.read(region), tile) for o in operands)

    def write(_: Any, region: tuple[slice, ...], tiled_out: tuple) -> None:
        crop = tuple(slice(0, r.stop - r.start) for r in region)
        for target, out in zip(targets, tiled_out):
            value = np.asarray(out)[crop].astype(target.dtype, copy=False)
            target.write_region(region, value)
            counts.count_written(value.nbytes)

    regions = [
        pages.block_region(i, tile, shape) for i in np.ndindex(*pages.grid_shape(shape, tile))
    ]
    first = None
    with WriteBehind(write, None) as writer:
        for region, blocks in prefetched(regions, read):
            tiled_out, whole_out = jax.block_until_ready(kernel.jitted(blocks, whole_in))
            counts.tiles += 1
            writer.submit(region, tiled_out)
            if first is None:
                first = whole_out
            del blocks, tiled_out
    if first is None:  # an empty array: no tiles, but the whole outputs still need values
        empty = tuple(np.zeros(shape, s.dtype) for s in sources)
        first = kernel.jitted(empty, whole_in)[1]
    return tuple(np.asarray(w) for w in first)


class _Tiled(VJPHiPrimitive):
    """One call of a per-tile kernel over arrays of one shape.

    Inputs: ``n_tiled`` arrays of ``shape`` (stored or in memory), then
    in-memory *whole* values handed to every tile.  Outputs: stored arrays
    of ``shape`` (typed :class:`_Kept`; written all-or-nothing, each at its
    locator, which may be an input's: reading the old values while the new
    ones are pending is fine), then whole values taken from the first tile.
    """

    # the call's params, which the primitive reads as attributes
    kernel: _Kernel
    shape: tuple[int, ...]
    in_types: tuple
    n_tiled: int
    out_types: tuple
    n_stored: int

    def __init__(
        self,
        kernel: _Kernel,
        shape: tuple[int, ...],
        in_types: tuple,
        n_tiled: int,
        out_types: tuple,
        n_stored: int,
    ) -> None:
        self.in_avals = in_types
        self.out_aval = out_types
        self.site = call_site(kernel.name)
        self.params = {
            "kernel": kernel,
            "shape": shape,
            "in_types": in_types,
            "n_tiled": n_tiled,
            "out_types": out_types,
            "n_stored": n_stored,
        }
        super().__init__()  # type: ignore[no-untyped-call]  # jax's hijax is unannotated
        for aval in out_types[:n_stored]:
            check_writable(aval)

    def expand(self, *args: Any) -> tuple:
        kernel, shape, site = self.kernel, self.shape, self.site
        in_types, out_types = self.in_types, self.out_types
        n_tiled, n_stored = self.n_tiled, self.n_stored

        def run(*values: Any) -> tuple:
            counts = IOCounts(calls=1)
            sources = [_source(a, v) for a, v in zip(in_types[:n_tiled], values[:n_tiled])]
            whole = [np.asarray(v) for v in values[n_tiled:]]
            targets: list[BlockedArray] = []
            try:
                try:
                    for aval in out_types[:n_stored]:
                        targets.append(create_store(aval.locator, aval.shape, aval.dtype))
                    budget = memory_budget_bytes()  # the caller's, re-entered by call()
                    whole_out = _stream(kernel, shape, sources, whole, targets, counts, budget)
                except BaseException:
                    for target in targets:
                        target.abort()
                    raise
                for target in targets:
                    target.close()
            finally:
                record(site, counts)
                for source in sources:
                    if isinstance(source, BlockedArray):
                        source.close()
            markers = [marker() for _ in range(n_stored)]
            outputs = [
                np.asarray(w, dtype=a.dtype).reshape(a.shape)
                for w, a in zip(whole_out, out_types[n_stored:])
            ]
            return (*markers, *outputs)

        traced = is_traced(args)
        results = call(run, tuple(result_struct(a) for a in out_types), *args)
        if not traced:
            # Handles on rewritten storage may hold the replaced data; reopen on next use.
            written = {a.locator for a in out_types[:n_stored]}
            for x in args:
                if isinstance(x, DiskArray) and x.locator in written and x._store is not None:
                    x._store.close()
                    x._store = None
        outs = []
        for i, aval in enumerate(out_types):
            if i >= n_stored:
                outs.append(results[i])
                continue
            x = DiskArray._at(aval.locator, aval.shape, aval.dtype, results[i] if traced else None)
            outs.append(x if traced else _adopt(x, eager=True))
        return tuple(outs)

    def vjp_fwd(self, nzs_in: Any, *args: Any) -> Any:
        raise NotImplementedError(
            "oocarr.optim steps are not differentiable; call them outside jax.grad"
        )


def _split(leaves: Sequence[Any], tiled: Sequence[bool]) -> tuple[list, list]:
    return [x for x, t in zip(leaves, tiled) if t], [x for x, t in zip(leaves, tiled) if not t]


def _merge(tiled_vals: Sequence[Any], whole_vals: Sequence[Any], mask: Sequence[bool]) -> list:
    t, w = iter(tiled_vals), iter(whole_vals)
    return [next(t) if m else next(w) for m in mask]


def _as_value(x: Any) -> Any:
    return x if is_disk(x) or isinstance(x, jax.Array | jax_core.Tracer) else jnp.asarray(x)


# ----------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------


def blockwise(tx: Any) -> Any:
    """Wrap an optax transformation so that it updates ``DiskArray`` parameters tile by tile.

    The result is an ``optax.GradientTransformation`` used like any other:
    ``state = tx.init(params)``, ``updates, state = tx.update(grads, state,
    params)``, then :func:`apply_updates`.  Parameters may be any pytree
    mixing ``DiskArray``s and in-memory arrays.

    * **In-memory leaves** (JAX or NumPy arrays) use ``tx`` directly.
    * **Stored leaves** (``DiskArray``): the state is ``tx.init`` of that one
      leaf; its leaves with the parameter's shape (moments, traces) are
      ``DiskArray``s in scratch storage, deleted when no handle on them is
      left, while the others (the step ``count``, injected hyperparameters)
      stay in-memory JAX arrays.  ``update`` streams tiles sized from the
      memory budget (shared by the gradient, parameter, state and update
      tiles): each tile's ``tx.update`` is compiled once, the updates go to
      a new scratch ``DiskArray`` and the new state overwrites the old one
      at the same locators, all-or-nothing.  Scalar state comes from the
      first tile, so it must not depend on the values.

    Works eagerly and under ``jax.jit``; a jitted step that returns the new
    state and parameters compiles once.  Call ``init`` outside ``jax.jit``:
    under ``jit`` its scratch locations are fixed when traced, so every call
    of the compiled function would return the same storage.

    Parameters
    ----------
    tx : optax.GradientTransformation
        The transformation to apply per leaf and per tile.

    Returns
    -------
    optax.GradientTransformation
        With state :class:`BlockwiseState`.

    Raises
    ------
    MissingDependencyError
        When optax is not installed (``pip install optax``).
    UnsupportedTransformationError
        From ``init``, when ``tx`` (or a transformation in it) combines
        elements of a leaf or across leaves in a way not listed in the notes,
        naming it.

    Notes
    -----
    Per-leaf, per-tile application is exact for elementwise transformations
    (``sgd``, ``sgd(momentum=...)``, ``adam``, ``adamw``, ``rmsprop``,
    ``adagrad``, ``lion``, ``adabelief`` ...).  ``clip_by_global_norm`` and
    ``scale_by_trust_ratio`` (so ``lamb`` and ``lars``), anywhere in a chain,
    are exact too: their norms are streamed passes of their own
    (:mod:`oocarr.train.global_steps`).  Other transformations that combine
    elements (factored ``adafactor``, ``clip_by_block_rms``, ``centralize``)
    would compute their statistics per tile, so ``init`` refuses them: it
    runs two steps of ``tx`` on a small tree whole and in parts, once, and
    compares.  Optimizer steps cannot be differentiated.

    Examples
    --------
    >>> import jax, numpy as np, optax, oocarr
    >>> w = oocarr.from_numpy(np.ones((4, 3), "f4"))
    >>> tx = oocarr.optim.blockwise(optax.adam(0.1))
    >>> state = tx.init({"w": w})
    >>> grads = {"w": oocarr.from_numpy(np.full((4, 3), 2.0, "f4"))}
    >>> updates, state = tx.update(grads, state, {"w": w})
    >>> params = oocarr.optim.apply_updates({"w": w}, updates)
    >>> np.round(np.asarray(params["w"])[0], 4)  # adam's first step moves by the learning rate
    array([0.9, 0.9, 0.9], dtype=float32)
    """
    optax = require_optax()
    parts = flatten(tx)
    if any(global_step(part) is not None for part in parts):
        # norms in passes of their own, the elementwise stretches between them tile by tile
        return segmented(parts, blockwise)
    kernels: dict[tuple, _Kernel] = {}
    checked: list[bool] = []

    def check() -> None:
        """Refuse, once, a transformation whose tile-by-tile result would not be optax's."""
        if checked:
            return
        names = not_elementwise(tx)
        if names:
            raise UnsupportedTransformationError(
                f"oocarr.optim.blockwise cannot apply {', '.join(names)}: it combines elements "
                f"of a parameter (factored moments, block statistics, a mean), so tile by "
                f"tile it would not give optax's result. Use elementwise transformations "
                f"(sgd, adam, adamw, lion, rmsprop, adagrad ...); clip_by_global_norm and "
                f"scale_by_trust_ratio (lamb, lars) are supported anywhere in a chain"
            )
        checked.append(True)

    def layout(shape: tuple[int, ...], dtype: Any) -> tuple[Any, list, list[bool]]:
        """The state's structure and leaves for one parameter, and which leaves are tiled:
        those with the parameter's shape that follow it when it changes (a probe of another
        shape tells them apart from scalars when the parameter is a scalar)."""
        leaves, treedef = jax.tree.flatten(
            jax.eval_shape(tx.init, jax.ShapeDtypeStruct(shape, dtype))
        )
        probe = tuple(n + 1 for n in shape) or (2,)
        probed = jax.tree.leaves(jax.eval_shape(tx.init, jax.ShapeDtypeStruct(probe, dtype)))
        mask = [tuple(a.shape) == shape and tuple(b.shape) == probe for a, b in zip(leaves, probed)]
        return treedef, leaves, mask

    def init_kernel(treedef: Any, mask: tuple[bool, ...]) -> _Kernel:
        key = ("init", treedef, mask)
        if key not in kernels:

            def fn(tiled: tuple, whole: tuple) -> tuple:
                leaves = jax.tree.leaves(tx.init(tiled[0]))
                t, w = _split(leaves, mask)
                return tuple(t), tuple(w)

            kernels[key] = _Kernel(fn, "optim.init")
        return kernels[key]

    def update_kernel(treedef: Any, mask: tuple[bool, ...], has_params: bool) -> _Kernel:
        key = ("update", treedef, mask, has_params)
        if key not in kernels:

            def fn(tiled: tuple, whole: tuple) -> tuple:
                g = tiled[0]
                p = tiled[1] if has_params else None
                state_tiles = tiled[2 if has_params else 1 :]
                state = jax.tree.unflatten(treedef, _merge(state_tiles, whole, mask))
                u, new = tx.update(g, state, p)
                new_leaves, new_def = jax.tree.flatten(new)
                if new_def != treedef:
                    raise InvalidArgumentError(
                        f"the wrapped transformation changed its state's structure "
                        f"({treedef} -> {new_def}); oocarr.optim.blockwise needs a fixed one"
                    )
                t, w = _split(new_leaves, mask)
                return (u, *t), tuple(w)

            kernels[key] = _Kernel(fn, "optim.update")
        return kernels[key]

    def init_leaf(p: Any) -> Any:
        if not is_disk(p):
            return tx.init(p)
        aval = jax.typeof(p)
        shape = tuple(aval.shape)
        treedef, spec, mask = layout(shape, aval.dtype)
        stored = [
            _kept(shape, s.dtype, _fresh_locator(shape, s.dtype)) for s, m in zip(spec, mask) if m
        ]
        whole = [ShapedArray(tuple(s.shape), s.dtype) for s, m in zip(spec, mask) if not m]
        kernel = init_kernel(treedef, tuple(mask))
        prim = _Tiled(kernel, shape, (aval,), 1, (*stored, *whole), len(stored))
        outs = prim(p)
        return jax.tree.unflatten(treedef, _merge(outs[: len(stored)], outs[len(stored) :], mask))

    def update_leaf(g: Any, s: Any, p: Any) -> tuple[Any, Any]:
        s_leaves, s_def = jax.tree.flatten(s)
        stored_leaf = is_disk(p) or is_disk(g) or any(is_disk(x) for x in s_leaves)
        if not stored_leaf:
            return tx.update(g, s, p)
        if p is not None and not is_disk(p):
            # an in-memory parameter whose gradient or state was stored: bring them in
            g = materialize(g)
            s = jax.tree.map(materialize, s)
            return tx.update(g, s, p)
        ref = jax.typeof(p if p is not None else g)
        shape, dtype = tuple(ref.shape), ref.dtype
        treedef, spec, mask = layout(shape, dtype)
        if treedef != s_def:
            raise InvalidArgumentError(
                f"the optimizer state of a parameter of shape {shape} does not have the structure "
                f"of tx.init for it ({s_def} vs {treedef}); make it with the same tx.init"
            )
        g = _as_value(g)
        if tuple(jax.typeof(g).shape) != shape:
            raise ShapeMismatchError(
                f"a gradient of shape {jax.typeof(g).shape} does not match its parameter's "
                f"shape {shape}"
            )
        state_tiled, state_whole = _split([_as_value(x) for x in s_leaves], mask)
        tiled_in = [g, *([p] if p is not None else []), *state_tiled]
        in_types = tuple(jax.typeof(x) for x in (*tiled_in, *state_whole))
        kernel = update_kernel(treedef, tuple(mask), p is not None)
        structs = [jax.ShapeDtypeStruct(shape, a.dtype) for a in in_types[: len(tiled_in)]]
        wholes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in in_types[len(tiled_in) :]]
        tiled_spec, whole_spec = jax.eval_shape(kernel.fn, tuple(structs), tuple(wholes))
        for out in tiled_spec:
            if tuple(out.shape) != shape:
                raise InvalidArgumentError(
                    f"the wrapped transformation is not elementwise: it made an output of shape "
                    f"{out.shape} from a parameter of shape {shape}"
                )
        out_stored = [_kept(shape, tiled_spec[0].dtype, _fresh_locator(shape, tiled_spec[0].dtype))]
        for x, out in zip(state_tiled, tiled_spec[1:]):
            old = jax.typeof(x)
            # Rewritten in place, so the state keeps its type, unless the transformation changed
            # its dtype (as optax does for a moment of a low-precision parameter given
            # higher-precision gradients): then it moves, as its type changes anyway.
            same = isinstance(old, DiskArrayType) and np.dtype(old.dtype) == np.dtype(out.dtype)
            loc = old.locator if same else _fresh_locator(shape, out.dtype)
            out_stored.append(_kept(shape, out.dtype, loc))
        out_whole = [ShapedArray(tuple(w.shape), w.dtype) for w in whole_spec]
        prim = _Tiled(
            kernel, shape, in_types, len(tiled_in), (*out_stored, *out_whole), len(out_stored)
        )
        outs = prim(*tiled_in, *state_whole)
        n = len(out_stored)
        new_state = jax.tree.unflatten(treedef, _merge(outs[1:n], outs[n:], mask))
        return outs[0], new_state

    def init_fn(params: Any) -> BlockwiseState:
        check()
        return BlockwiseState(tuple(init_leaf(p) for p in jax.tree.leaves(params)))

    def update_fn(updates: Any, state: BlockwiseState, params: Any = None) -> tuple:
        g_leaves, treedef = jax.tree.flatten(updates)
        # jaxlib's PyTreeDef has no stub mypy resolves
        p_leaves = (
            [None] * len(g_leaves) if params is None else treedef.flatten_up_to(params)  # type: ignore[attr-defined]
        )
        if len(state.per_leaf) != len(g_leaves):
            raise InvalidArgumentError(
                f"the optimizer state has {len(state.per_leaf)} leaves but the gradients have "
                f"{len(g_leaves)}; make the state with tx.init of the same parameters"
            )
        results = [update_leaf(g, s, p) for g, s, p in zip(g_leaves, state.per_leaf, p_leaves)]
        new_updates = jax.tree.unflatten(treedef, [u for u, _ in results])
        return new_updates, BlockwiseState(tuple(s for _, s in results))

    return optax.GradientTransformation(init_fn, update_fn)


def _apply_kernel() -> _Kernel:
    global _APPLY
    if _APPLY is None:

        def fn(tiled: tuple, whole: tuple) -> tuple:
            p, u = tiled
            return (jnp.asarray(p + u).astype(p.dtype),), ()

        _APPLY = _Kernel(fn, "optim.apply_updates")
    return _APPLY


_APPLY: _Kernel | None = None


def _apply_leaf(p: Any, u: Any) -> Any:
    if p is None:
        return None
    if not is_disk(p):
        if is_disk(u):
            u = materialize(u)
        return jnp.asarray(p + u).astype(jnp.asarray(p).dtype)
    target = jax.typeof(p)
    u = _as_value(u)
    u_shape = tuple(jax.typeof(u).shape)
    if u_shape != tuple(target.shape):  # an in-memory update may broadcast (read per tile)
        try:
            fits = not is_disk(u) and np.broadcast_shapes(u_shape, target.shape) == target.shape
        except ValueError:
            fits = False
        if not fits:
            raise ShapeMismatchError(
                f"cannot apply an update of shape {u_shape} to {target.locator.full_url} of "
                f"shape {target.shape}",
                url=target.locator.full_url,
            )
    out = _kept(target.shape, target.dtype, target.locator)
    prim = _Tiled(_apply_kernel(), tuple(target.shape), (target, jax.typeof(u)), 2, (out,), 1)
    return prim(p, u)[0]


def apply_updates(params: Any, updates: Any) -> Any:
    """``optax.apply_updates`` for parameters that may be ``DiskArray``s.

    A stored parameter gets ``p + u`` (cast to its dtype) written back into
    its own storage, tile by tile and all-or-nothing (the new values replace
    the old ones when complete), and comes back as a ``DiskArray`` at the
    same locator — so a jitted step that returns it compiles once.  In-memory
    parameters are computed as optax does.  Does not need optax.

    Parameters
    ----------
    params : pytree
        Parameters: ``DiskArray``s, JAX or NumPy arrays (``None`` leaves stay ``None``).
    updates : pytree
        Updates with the structure of ``params`` (from a :func:`blockwise`
        transformation's ``update``); a stored parameter's update may be
        stored or in memory.

    Returns
    -------
    pytree
        The new parameters.

    Raises
    ------
    ReadOnlyError
        When a stored parameter was not opened for writing (open it with
        ``mode="r+"``).
    ShapeMismatchError
        When an update does not have its parameter's shape.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> params = {"w": oocarr.from_numpy(np.ones(3, "f4")), "b": np.float32(1.0)}
    >>> new = oocarr.optim.apply_updates(params, {"w": np.full(3, 0.5, "f4"), "b": 2.0})
    >>> np.asarray(new["w"]), float(new["b"])
    (array([1.5, 1.5, 1.5], dtype=float32), 3.0)
    """
    return jax.tree.map(_apply_leaf, params, updates, is_leaf=lambda x: x is None)
