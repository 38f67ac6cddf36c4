"""A sum over the row tiles of row-aligned arrays, and its gradient, in one pass: the primitives
under :func:`oocarr.stream_sum` and the fused reductions of :mod:`.fused_sum`.

A call is described once (:class:`Spec`: a per-tile :class:`Kernel`, the parameters'
types and the row-aligned sources); its value is the sum of the kernel over row tiles read
under the memory budget, and its reverse-mode rule reads each tile once and computes the
tile's value and gradient with one compiled function.

Under tracing the sum is a hijax primitive whose work runs in an ``io_callback``: stored
arrays closed over by the caller are constants whose locators the callback reopens; traced
stored arrays contribute their marker, so XLA runs the callback after whatever wrote them.
"""

from __future__ import annotations

import collections
import math
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as jax_core
from jax._src.interpreters import ad as jax_ad
from jax.experimental.hijax import ShapedArray, VJPHiPrimitive, Zero

from oocarr.engine import device, progress
from oocarr.engine.budget import memory_budget_bytes
from oocarr.engine.compile import BlockFunction
from oocarr.engine.executor import DaskExecutor, current_executor
from oocarr.engine.io import Operand, prefetched
from oocarr.engine.plan import (
    STREAM_SUM_TILE_BYTES,
    STREAM_SUM_TILES,
    Buffers,
    Projection,
    least_read_buffers,
    require,
    tile_budget,
)
from oocarr.engine.stats import IOCounts, record
from oocarr.errors import InvalidArgumentError
from oocarr.store.blocked import BlockedArray
from oocarr.store.locator import Locator

from .callbacks import call, least_read_bytes, open_store, result_struct
from .disk_array import DiskArray, is_disk
from .row_tasks import RowPlan, RowTask, Sums, tile_partial

__all__ = [
    "Kernel",
    "Source",
    "Spec",
    "StreamSum",
    "StreamValueAndGrad",
    "fits_a_row",
    "row_plan",
    "source",
    "sources",
]


# ----------------------------------------------------------------------------
# What one call streams
# ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Source:
    """One row-aligned array of a call.

    ``locator`` is set for a stored array (``None``: in memory);
    ``dynamic`` says whether it is an argument of the primitive (an
    in-memory value, or the marker of a traced ``DiskArray``) rather than a
    constant the callback reopens by locator.
    """

    aval: Any
    locator: Locator | None
    dynamic: bool

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.aval.shape)

    @property
    def row_bytes(self) -> int:
        return math.prod(self.shape[1:]) * np.dtype(self.aval.dtype).itemsize


@dataclass(frozen=True)
class Spec:
    """Everything static about one call (hashable: it is the primitives' parameter)."""

    kernel: Kernel
    treedef: Any
    leaf_avals: tuple[Any, ...]
    sources: tuple[Source, ...]
    weighted: bool
    per_row: bool
    out_dtype: np.dtype
    mean: bool
    tile_rows: int | None
    #: Bytes per row the kernel holds besides its tiles (a fused expression's row-wide
    #: products), counted in the tile's size.
    extra_row_bytes: int = 0

    @property
    def rows(self) -> int:
        return self.sources[0].shape[0]

    @property
    def dynamic_avals(self) -> tuple[Any, ...]:
        return tuple(s.aval for s in self.sources if s.dynamic)


def source(x: Any) -> tuple[Source, Any]:
    """The description of one array argument, and its primitive argument (or ``None``)."""
    if isinstance(x, DiskArray) and not isinstance(x._marker, jax_core.Tracer):
        if x._marker is not None:
            jax.block_until_ready(x._marker)  # the eager call that wrote it has finished
        return Source(x.aval, x.locator, False), None
    if is_disk(x):
        aval = jax.typeof(x)
        return Source(aval, aval.locator, True), x
    value = x if isinstance(x, jax_core.Tracer | jax.Array) else jnp.asarray(x)
    return Source(jax.typeof(value), None, True), value


def sources(arrays: Sequence[Any]) -> tuple[list[Source], list[Any]]:
    """Each array's :class:`Source`, and the primitive arguments of the dynamic ones."""
    described, dynamic = [], []
    for x in arrays:
        src, value = source(x)
        described.append(src)
        if src.dynamic:
            dynamic.append(value)
    return described, dynamic


# ----------------------------------------------------------------------------
# The per-tile functions
# ----------------------------------------------------------------------------
_PROCESS_KERNELS: collections.OrderedDict[str, dict] = collections.OrderedDict()
_PROCESS_KERNELS_KEPT = 32
_process_kernels_lock = threading.Lock()


def _compiled_in_process(token: str) -> dict[tuple, Callable[..., Any]]:
    """The compilations this process keeps for the kernel ``token`` (the last few kernels)."""
    with _process_kernels_lock:
        compiled = _PROCESS_KERNELS.pop(token, None)
        if compiled is None:
            compiled = {}
        _PROCESS_KERNELS[token] = compiled
        while len(_PROCESS_KERNELS) > _PROCESS_KERNELS_KEPT:
            _PROCESS_KERNELS.popitem(last=False)
        return compiled


class Kernel:
    """The compiled per-tile functions of one ``fn``: the tile's value, or its value and its
    gradient with respect to the differentiable parameter leaves.

    With per-row losses every tile is padded to the first tile's rows (edge rows repeated, so
    ``fn`` stays finite on them) and masked by a zero weight, so one compilation serves all
    tiles; a scalar ``fn`` cannot be masked, so a shorter last tile compiles once more.
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.token = uuid.uuid4().hex
        self._compiled: dict[tuple, Callable[..., Any]] = {}

    def __getstate__(self) -> dict[str, Any]:
        # compiled executables do not travel: a process compiles its own, once per kernel
        return {"fn": self.fn, "token": self.token}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.fn = state["fn"]
        self.token = state["token"]
        # every task of every call of this kernel that a worker process runs shares its
        # compilations (a task used to compile again: 0.2 s a row task on a warm worker)
        self._compiled = _compiled_in_process(self.token)

    def __call__(self, per_row: bool, treedef: Any, wanted: tuple[bool, ...] | None) -> Any:
        key = (per_row, treedef, wanted)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compiled[key] = BlockFunction(self._build(per_row, treedef, wanted))
        return compiled

    def _build(self, per_row: bool, treedef: Any, wanted: tuple[bool, ...] | None) -> Any:
        fn = self.fn

        def tile_value(leaves: Sequence[Any], *rest: Any) -> Any:
            params = jax.tree.unflatten(treedef, leaves)
            if not per_row:
                return fn(params, *rest)
            w, *tiles = rest
            per = fn(params, *tiles)
            return jnp.sum(jnp.where(w != 0, per * w.astype(per.dtype), 0))

        if wanted is None:
            return tile_value

        def value_and_grad(leaves: Sequence[Any], *rest: Any) -> Any:
            def of(diff: list[Any]) -> Any:
                it = iter(diff)
                return tile_value([next(it) if w else x for x, w in zip(leaves, wanted)], *rest)

            return jax.value_and_grad(of)([x for x, w in zip(leaves, wanted) if w])

        return value_and_grad


# ----------------------------------------------------------------------------
# The streaming loop (runs in the callback, or directly when nothing is traced)
# ----------------------------------------------------------------------------
def _tile_rows(spec: Spec, operands: Sequence[Operand]) -> int:
    """Rows per tile: :data:`~oocarr.engine.plan.STREAM_SUM_TILES` row tiles of every array
    (and the weight or mask column) and the drivers' read buffers within the budget, in whole
    storage chunks where one fits, at most ``tile_rows``."""
    row_bytes = _row_bytes(spec)
    budget = memory_budget_bytes()
    smallest = _projection(row_bytes, 1)
    require(smallest.plus(least_read_buffers(o.value for o in operands if o.stored)), budget)
    rows = _rows_within(spec, operands, tile_budget(budget, least=smallest.nbytes), row_bytes)
    overhead = _read_overhead(operands, rows)
    if overhead:
        usable = tile_budget(budget, least=smallest.nbytes, overhead=overhead)
        rows = _rows_within(spec, operands, usable, row_bytes)
    return rows


def fits_a_row(spec: Spec) -> bool:
    """Whether :data:`~oocarr.engine.plan.STREAM_SUM_TILES` tiles of one row, and the stored
    sources' drivers' buffers for a chunk each, fit the memory budget in force."""
    located = (s.locator for s in spec.sources if s.locator is not None)
    buffers = least_read_bytes(located)
    return _projection(_row_bytes(spec), 1).nbytes + buffers <= memory_budget_bytes()


def _rows_within(spec: Spec, operands: Sequence[Operand], usable: int, row_bytes: int) -> int:
    # the cap is on the rows read (a fused sum's products are not read: its tiles are as long)
    rows = min(
        usable // STREAM_SUM_TILES // row_bytes,
        STREAM_SUM_TILE_BYTES // (row_bytes - spec.extra_row_bytes),
    )
    chunk = next(
        (
            o.value.chunks[0]
            for o in operands
            if isinstance(o.value, BlockedArray) and o.value.chunks is not None
        ),
        None,
    )
    if chunk is not None and chunk <= rows:
        rows -= rows % chunk
    if spec.tile_rows is not None:
        rows = min(rows, spec.tile_rows)
    return max(1, min(rows, spec.rows))


def _row_bytes(spec: Spec) -> int:
    own = np.dtype(spec.out_dtype).itemsize + spec.extra_row_bytes
    return sum(s.row_bytes for s in spec.sources) + own


def _read_overhead(operands: Sequence[Operand], rows: int) -> int:
    """Bytes the drivers' reads of one row tile hold besides the tile."""
    return sum(
        o.value.read_overhead((rows, *o.shape[1:]))
        for o in operands
        if isinstance(o.value, BlockedArray)
    )


def _projection(row_bytes: int, rows: int, overhead: int = 0) -> Projection:
    what = "row tiles (computed, read ahead, JAX's copy, fn's intermediates)"
    return Projection(
        "stream_sum",
        (
            Buffers(what, STREAM_SUM_TILES, rows * row_bytes),
            Buffers("drivers' read buffers (encoded and decoding chunks)", 1, overhead),
        ),
    )


def _stream(
    spec: Spec, site: str, wanted: tuple[bool, ...] | None, values: Sequence[Any]
) -> tuple[np.ndarray, ...]:
    """The (mean or weighted) sum over all row tiles, and the gradients of the ``wanted``
    leaves when ``wanted`` is given."""
    k = len(spec.leaf_avals)
    leaves, dynamic = values[:k], iter(values[k:])
    counts = IOCounts(calls=1)
    cluster = current_executor()
    if cluster is not None:
        try:
            return _stream_on(cluster, spec, site, wanted, values, counts)
        finally:
            record(site, counts)
    stores, operands = [], []
    try:
        for src in spec.sources:
            value = next(dynamic) if src.dynamic else None
            if src.locator is None:
                operands.append(Operand(np.asarray(value)))
            else:
                stores.append(open_store(src.locator))
                # each row tile is read once: into a reused buffer rather than mapped
                operands.append(Operand(stores[-1], counts, views=False))
        # put on the engine's device once, not once per tile
        leaves = [device.put(x) for x in leaves]
        return _loop(spec, wanted, leaves, operands, counts, site)
    finally:
        record(site, counts)
        for store in stores:
            store.close()


def _stream_on(
    cluster: DaskExecutor,
    spec: Spec,
    site: str,
    wanted: tuple[bool, ...] | None,
    values: Sequence[Any],
    counts: IOCounts,
) -> tuple[np.ndarray, ...]:
    """:func:`_stream` as row tasks on ``cluster``, their partials folded here in row order
    (the same bits as the local loop)."""
    plan = row_plan(spec, wanted, values)
    counts.project(plan.projected)
    if plan.tasks:
        cluster.check_reachable(plan.tasks[0].inputs, site)
    cluster.check_fits(plan.projected, site)
    partials = cluster.map(plan.tasks, counts, site)
    counts.tiles += len(plan.tasks)
    return plan.combine(partials)


def _loop(
    spec: Spec,
    wanted: tuple[bool, ...] | None,
    leaves: list[jax.Array],
    operands: list[Operand],
    counts: IOCounts,
    site: str = "stream_sum",
) -> tuple[np.ndarray, ...]:
    n = spec.rows
    tile = _tile_rows(spec, operands)
    counts.project(_projection(_row_bytes(spec), tile, _read_overhead(operands, tile)).nbytes)
    sums = Sums(spec, wanted)
    _compile_first(spec, wanted, leaves, tile)

    def read(start: int) -> list[np.ndarray]:
        stop = min(start + tile, n)
        return [o.read((slice(start, stop), *(slice(0, d) for d in o.shape[1:]))) for o in operands]

    with progress.tracking(site, -(-n // tile), counts) as bar:
        for _, blocks in progress.counted(prefetched(range(0, n, tile), read), bar):
            sums.add(tile_partial(spec, wanted, leaves, blocks, tile))
            counts.tiles += 1
            del blocks
    return sums.results()


def _compile_first(
    spec: Spec, wanted: tuple[bool, ...] | None, leaves: list[jax.Array], tile: int
) -> None:
    """Compile the tile functions before the first tile is read: XLA's working memory while
    compiling (several MB, kept resident by glibc until trimmed) then comes and goes before
    the tiles take the budget, not on top of them.  A 512 MiB least squares under 32 MB
    peaked 37-44 MB above its baseline on its first call, compiling beside its tiles."""
    n = spec.rows
    data = spec.sources[:-1] if spec.weighted else spec.sources
    if spec.per_row:
        weights = jax.ShapeDtypeStruct((tile,), spec.out_dtype)
        shapes = [(weights, *(_rows_of(s, tile) for s in data))]
    else:  # a scalar fn compiles for the first tile's rows and a shorter last tile's
        sizes = sorted({min(tile, n), n % tile or min(tile, n)})
        shapes = [tuple(_rows_of(s, rows) for s in data) for rows in sizes]
    compiled = spec.kernel(spec.per_row, spec.treedef, wanted)
    for blocks in shapes:
        compiled.prepare(list(leaves), *blocks)


def _rows_of(src: Source, rows: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct((rows, *src.shape[1:]), src.aval.dtype)


def row_plan(spec: Spec, wanted: tuple[bool, ...] | None, values: Sequence[Any]) -> RowPlan:
    """The call as row tasks, tiled as :func:`_stream` tiles it (see :mod:`.row_tasks`)."""
    k = len(spec.leaf_avals)
    leaves, dynamic = tuple(np.asarray(x) for x in values[:k]), iter(values[k:])
    stores: list[BlockedArray] = []
    inputs: list[Locator | np.ndarray] = []
    operands: list[Operand] = []
    try:
        for src in spec.sources:
            value = next(dynamic) if src.dynamic else None
            if src.locator is None:
                array = np.asarray(value)
                inputs.append(array)
                operands.append(Operand(array))
            else:
                stores.append(open_store(src.locator))
                inputs.append(src.locator)
                operands.append(Operand(stores[-1]))
        tile = _tile_rows(spec, operands)
        projected = _projection(_row_bytes(spec), tile, _read_overhead(operands, tile)).nbytes
    finally:
        for store in stores:
            store.close()
    tasks = []
    for start in range(0, spec.rows, tile):
        stop = min(start + tile, spec.rows)
        rows = tuple(i if isinstance(i, Locator) else i[start:stop] for i in inputs)
        tasks.append(RowTask(spec, wanted, leaves, rows, start, stop, tile))
    return RowPlan(tuple(tasks), spec, wanted, projected)


# ----------------------------------------------------------------------------
# The primitives
# ----------------------------------------------------------------------------
def _expand(
    spec: Spec, site: str, wanted: tuple[bool, ...] | None, out_avals: Sequence[Any], args: Any
) -> tuple[Any, ...]:
    def run(*values: Any) -> tuple[np.ndarray, ...]:
        return _stream(spec, site, wanted, values)

    return tuple(call(run, tuple(result_struct(a) for a in out_avals), *args))


class StreamSum(VJPHiPrimitive):
    """The sum over row tiles; its VJP reads the data once for the value and the gradient."""

    # the call's params, which the primitive reads as attributes
    spec: Spec

    def __init__(self, spec: Spec, site: str) -> None:
        self.in_avals = (*spec.leaf_avals, *spec.dynamic_avals)
        self.out_aval = ShapedArray((), spec.out_dtype)
        self.params = {"spec": spec}
        self.site = site
        super().__init__()  # type: ignore[no-untyped-call]  # jax's hijax is unannotated

    def expand(self, *args: Any) -> Any:
        return _expand(self.spec, self.site, None, [self.out_aval], args)[0]

    def vjp_fwd(self, nzs_in: Any, *args: Any) -> tuple[Any, Any]:
        spec = self.spec
        k = len(spec.leaf_avals)
        if any(nzs_in[k:]):
            raise InvalidArgumentError(
                "stream_sum differentiates with respect to params only; the data arrays are "
                "constants (wrap them in jax.lax.stop_gradient, or differentiate an oocarr op)"
            )
        wanted = tuple(
            bool(nz) and jnp.issubdtype(a.dtype, jnp.inexact)
            for nz, a in zip(nzs_in[:k], spec.leaf_avals)
        )
        if not any(wanted):
            return self(*args), None
        value, *grads = StreamValueAndGrad(spec, wanted, self.site)(*args)
        it = iter(grads)
        return value, [next(it) if w else None for w in wanted]

    def jvp(self, primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[Any, Any]:
        spec = self.spec
        k = len(spec.leaf_avals)
        nzs = [not isinstance(t, Zero) for t in tangents]
        value, res = self.vjp_fwd(nzs, *primals)
        out = jnp.zeros((), spec.out_dtype)
        for grad, t in zip(res or (), tangents[:k]):
            if grad is not None:
                out = out + jnp.sum(grad * t).astype(spec.out_dtype)
        return value, out

    def vjp_bwd(self, res: Any, g: Any, *accums: Any) -> None:
        if res is None or isinstance(g, Zero):
            return
        for acc, grad, aval in zip(accums, res, self.spec.leaf_avals):
            if grad is not None and not isinstance(acc, jax_ad.NullAccum):
                acc.accum((g * grad).astype(aval.dtype))


class StreamValueAndGrad(VJPHiPrimitive):
    """The sum and its gradient with respect to the ``wanted`` parameter leaves, one pass."""

    # the call's params, which the primitive reads as attributes
    spec: Spec
    wanted: tuple[bool, ...]

    def __init__(self, spec: Spec, wanted: tuple[bool, ...], site: str) -> None:
        self.in_avals = (*spec.leaf_avals, *spec.dynamic_avals)
        self.out_aval = (
            ShapedArray((), spec.out_dtype),
            *(ShapedArray(a.shape, a.dtype) for a, w in zip(spec.leaf_avals, wanted) if w),
        )
        self.params = {"spec": spec, "wanted": wanted}
        self.site = site
        super().__init__()  # type: ignore[no-untyped-call]  # jax's hijax is unannotated

    def expand(self, *args: Any) -> tuple[Any, ...]:
        return _expand(self.spec, self.site, self.wanted, self.out_aval, args)

    def vjp_fwd(self, nzs_in: Any, *args: Any) -> Any:
        raise NotImplementedError(_SECOND_ORDER)

    def jvp(self, primals: Any, tangents: Any) -> Any:
        raise NotImplementedError(_SECOND_ORDER)


_SECOND_ORDER = (
    "second-order derivatives of oocarr.stream_sum are not supported; differentiate once"
)
