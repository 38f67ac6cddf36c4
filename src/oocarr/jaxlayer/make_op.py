"""``make_op``: turn a block-level op into a differentiable function on ``DiskArray``s.

Each call builds a forward hijax primitive whose output type carries the
output's locator; its reverse-mode rule binds a separate backward
primitive whose outputs are typed at the inputs' gradient locators.  Both
expand to the engine's loop through :func:`~oocarr.jaxlayer.callbacks.call`:
run directly when nothing is traced, or inside an ``io_callback`` that takes
the inputs' markers (so XLA orders it after whatever wrote them) and returns
the output's marker.

Importing this module gives :class:`~oocarr.jaxlayer.disk_array.DiskArrayType`
its gradient arithmetic (:func:`zeros_at`, :func:`add_into`), which runs ops.
"""

from __future__ import annotations

import functools
import json
import math
import uuid
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as jax_core
from jax._src.interpreters import ad as jax_ad
from jax.experimental.hijax import ShapedArray, VJPHiPrimitive, Zero

from oocarr.engine import fused
from oocarr.engine.budget import memory_budget_bytes
from oocarr.engine.io import Operand
from oocarr.engine.op import BlockParallelOp, CustomOp, Op
from oocarr.engine.run import OOCAlgorithm
from oocarr.engine.stats import call_site
from oocarr.errors import ShapeMismatchError
from oocarr.ops.elementwise import BINARY, Identity
from oocarr.store.blocked import BlockedArray
from oocarr.store.locator import Locator
from oocarr.store.scratch import scratch_locator

from . import traced_leaves
from .callbacks import (
    call,
    check_writable,
    create_store,
    is_traced,
    least_read_bytes,
    marker,
    open_store,
    result_struct,
    scratch_takes_chunks,
)
from .disk_array import MARKER_DTYPE, DiskArray, DiskArrayType, is_disk, register_vspace

__all__ = ["make_op", "add_into", "zeros_at"]


def _new_op(op_class: type, shapes: tuple, params: tuple) -> BlockParallelOp | CustomOp:
    return op_class(*shapes, **dict(params))


#: An op instance per class, shapes and parameters (typed as ``_new_op``: lru_cache's wrapper
#: takes Hashable arguments, which mypy does not see an op class to be).
_op_instance: Callable[[type, tuple, tuple], BlockParallelOp | CustomOp] = functools.lru_cache(
    maxsize=1024
)(_new_op)


def _freeze_params(params: dict[str, Any]) -> tuple:
    def freeze(v: Any) -> Any:
        return tuple(freeze(x) for x in v) if isinstance(v, list) else v

    return tuple(sorted((k, freeze(v)) for k, v in params.items()))


def _scratch_locator(shape: tuple[int, ...], dtype: Any) -> Locator:
    return scratch_locator(None, shape, dtype)


def _stored_at(aval: DiskArrayType, value: Any) -> Locator:
    """Where the stored array of type ``aval`` whose marker is ``value`` is: its locator, or
    for a deferred cotangent the array its version (the marker) was registered as."""
    if fused.is_deferred(aval.locator):
        return fused.resolve(aval.locator, value)
    return aval.locator


def _operands(avals: Sequence[Any], values: Sequence[Any]) -> list[Operand]:
    return [
        Operand(open_store(_stored_at(a, v)))
        if isinstance(a, DiskArrayType)
        else Operand(np.asarray(v))
        for a, v in zip(avals, values)
    ]


def _leaf(aval: Any, value: Any, slots: list[Any], token: str) -> fused.Leaf:
    """A fused expression's leaf for an argument of type ``aval`` and value ``value`` (a
    marker for a stored array, a tracer while tracing); an in-memory value that is traced or
    too large for the locator becomes slot ``len(slots)`` of ``token``, appended to
    ``slots``.  A constant is strong, as the unfused op reads it (``Operand(np.asarray(v))``),
    so fused and unfused chains give the same bits."""
    if isinstance(aval, DiskArrayType):
        return fused.Leaf.stored(_stored_at(aval, value), aval.shape)
    if fused.Leaf.fits_locator(value, aval):
        return fused.Leaf.const(np.asarray(value, dtype=aval.dtype))
    slots.append(value)
    return fused.Leaf.slot(token, len(slots) - 1, aval.shape, aval.dtype)


def _sum_of(locators: Sequence[Locator], shape: tuple[int, ...], dtype: Any) -> Locator:
    """A fused array adding the arrays at ``locators``, in order."""
    total = locators[0]
    for other in locators[1:]:
        leaves = [fused.Leaf.stored(total, shape), fused.Leaf.stored(other, shape)]
        total = fused.fused_locator(BINARY["add"], leaves, shape, dtype)
    return total


class Forward(VJPHiPrimitive):
    """One call of an op: inputs of any kind, output a ``DiskArray`` (or a 0-d array)."""

    def __init__(
        self, op: BlockParallelOp | CustomOp, in_avals: tuple, out_aval: Any = None
    ) -> None:
        self.op = op
        self.in_avals = in_avals
        self.site = call_site(op.name)
        self.fresh_output = out_aval is None
        if out_aval is None:
            dtype = op.result_dtype(*map(_struct, in_avals))
            shape = op.output_shape
            out_aval = (
                ShapedArray(shape, dtype)
                if shape == ()
                else DiskArrayType(shape, np.dtype(dtype), _scratch_locator(shape, dtype))
            )
        self.out_aval = out_aval
        self.params = {"op_key": op.key, "out_type": out_aval}
        super().__init__()  # type: ignore[no-untyped-call]  # jax's hijax is unannotated

    @property
    def stored_output(self) -> bool:
        return isinstance(self.out_aval, DiskArrayType)

    def expand(self, *args: Any) -> Any:
        in_avals, out_aval, op, site = self.in_avals, self.out_aval, self.op, self.site

        deferred = isinstance(out_aval, DiskArrayType) and fused.is_deferred(out_aval.locator)

        def run(*values: Any) -> Any:
            if deferred:  # gradients of a fused array added up: one more fused array
                leaves = [_leaf(a, v, [], "") for a, v in zip(in_avals, values)]
                sum_of = fused.fused_locator(type(op), leaves, out_aval.shape, out_aval.dtype)
                return fused.register(out_aval.locator, sum_of)
            operands = _operands(in_avals, values)
            algo = OOCAlgorithm(op, site)
            if not isinstance(out_aval, DiskArrayType):
                if out_aval.shape == ():
                    return np.asarray(algo.forward(operands), dtype=out_aval.dtype)
                return algo.forward(operands, np.empty(out_aval.shape, out_aval.dtype))
            check_writable(out_aval)
            locator = out_aval.locator
            chunks = algo.output_tile(operands) if scratch_takes_chunks(locator) else None
            with create_store(out_aval.locator, out_aval.shape, out_aval.dtype, chunks) as out:
                algo.forward(operands, out)
            return marker()

        traced = is_traced(args)
        result = call(run, result_struct(out_aval), *args)
        if not self.stored_output:
            return result
        out = DiskArray._at(
            out_aval.locator,
            out_aval.shape,
            out_aval.dtype,
            result if traced or deferred else None,
            tangent=out_aval.tangent,
        )
        return out._own() if self.fresh_output and not traced else out

    def vjp_fwd(self, nzs_in: Any, *args: Any) -> tuple[Any, Any]:
        out = self(*args)
        return out, (args, out if self.op.needs_output else None)

    def vjp_bwd(self, res: tuple, g: Any, *accums: Any) -> None:
        if isinstance(g, Zero):
            return
        res, out = res
        needed = [
            not isinstance(a, jax_ad.NullAccum) and jnp.issubdtype(aval.dtype, jnp.inexact)
            for a, aval in zip(accums, self.in_avals)
        ]
        seen: dict[int, int] = {}
        owner = []
        for i, acc in enumerate(accums):
            owner.append(seen.setdefault(id(acc), i) if needed[i] else None)
        existing = []
        for i, acc in enumerate(accums):
            val = getattr(acc, "val", None) if owner[i] == i else None
            stored = isinstance(self.in_avals[i], DiskArrayType)
            if stored and isinstance(val, DiskArray | jax_core.Tracer):
                existing.append((i, val))
        bwd = Backward(self, jax.typeof(g), tuple(owner), tuple(i for i, _ in existing))
        extra = (out,) if self.op.needs_output else ()
        outs = bwd(*res, g, *(v for _, v in existing), *extra)
        has_existing = {i for i, _ in existing}
        for i, acc in enumerate(accums):
            if owner[i] != i:
                continue
            if i in has_existing:
                acc.val = outs[i]
            else:
                acc.accum(outs[i])


class FusedForward(Forward):
    """An elementwise call under a trace that writes nothing: its output is a fused array
    (:mod:`oocarr.engine.fused`) that its consumers compute on their tiles.

    ``slots`` are the positions of the in-memory arguments only known when the
    traced function runs; its callback hands their values over
    (:func:`~oocarr.engine.fused.deposit`) and returns the output's marker,
    which depends on the stored inputs' markers, so a consumer runs after
    whatever wrote them.  Gradients are :class:`Forward`'s.
    """

    def __init__(
        self,
        op: BlockParallelOp | CustomOp,
        in_avals: tuple,
        out_aval: DiskArrayType,
        slots: tuple,
        token: str,
    ) -> None:
        self.slots = slots
        self.token = token
        super().__init__(op, in_avals, out_aval)
        weakref.finalize(self, fused.forget, token)

    def expand(self, *args: Any) -> Any:
        out_aval, token, held = self.out_aval, self.token, self
        values = [args[i] for i in self.slots]
        stored = [a for a, aval in zip(args, self.in_avals) if isinstance(aval, DiskArrayType)]

        def run(*given: Any) -> Any:
            fused.deposit(token, given[: len(values)])
            return marker()

        traced = is_traced(args)
        result = call(run, result_struct(out_aval), *values, *stored)
        out = DiskArray._at(
            out_aval.locator, out_aval.shape, out_aval.dtype, result if traced else None
        )
        out._fused_by = held  # its slots live as long as this handle does
        return out


def _fused_call(op: Any, args: tuple, avals: tuple) -> FusedForward | None:
    """The fused primitive of a call on ``args`` (as the caller gave them: under ``jit``, a
    Python scalar is a constant, its ``jnp.asarray`` a tracer) of an op with a fused form
    (elementwise ops; the row-local ones: ``X @ w`` with ``w`` in memory, a softmax, a
    reduction or a ``take`` within rows), or ``None`` when it runs as a stored
    op: eagerly (nothing is traced), with no stored input, or a row-local op whose rows do
    not fit the budget.  Its traced leaves are remembered for a fused sum
    (:mod:`.fused_sum`)."""
    if not isinstance(op, Op) or op.output_shape == ():
        return None
    # an eager grad runs each op now and deletes its intermediates' gradients with them,
    # which a fused intermediate (no storage, no lifetime) would leak: staged traces only
    if not traced_leaves.staged():
        return None
    stored = [isinstance(a, DiskArrayType) for a in avals]
    op = op.fused_form(stored) if any(stored) else None
    if op is None or (op.row_local and not _rows_fit(op, avals)):
        return None
    token = uuid.uuid4().hex
    held: list[Any] = []  # the slots' values, in argument order
    leaves = [_leaf(aval, arg, held, token) for arg, aval in zip(args, avals)]
    slots = tuple(i for i, leaf in enumerate(leaves) if "slot" in leaf.spec)
    dtype = np.dtype(op.result_dtype(*map(_struct, avals)))
    locator = fused.fused_locator(type(op), leaves, op.output_shape, dtype, node=op.fused_node())
    out_aval = DiskArrayType(op.output_shape, dtype, locator)
    named = [
        (json.dumps(leaf.spec["locator"], sort_keys=True), arg)
        for arg, leaf in zip(args, leaves)
        if "locator" in leaf.spec and not fused.is_fused(Locator.from_dict(leaf.spec["locator"]))
    ]
    traced_leaves.remember(token, held, named)
    return FusedForward(op, avals, out_aval, slots, token)


def _rows_fit(op: Op, avals: tuple) -> bool:
    """Whether a row-local op's consumers can read it under the budget in force: its stored
    leaves' drivers' buffers for a chunk each, and a few rows of its input and output (a
    consumer reads whole rows of its input, where the stored op would cut them)."""
    locators = []
    for aval in avals:
        if not isinstance(aval, DiskArrayType):
            continue
        if not fused.is_fused(aval.locator):
            locators.append(aval.locator)
            continue
        spec = json.loads(aval.locator.url)
        locators += [
            Locator.from_dict(leaf["locator"]) for leaf in spec["leaves"] if "locator" in leaf
        ]
    buffers = least_read_bytes(c for c in locators if not fused.is_deferred(c))
    itemsize = max(np.dtype(a.dtype).itemsize for a in avals)
    row = (math.prod(op.in_shapes[0][1:]) + math.prod(op.output_shape[1:])) * itemsize
    return buffers + ROW_LOCAL_ROWS * row <= memory_budget_bytes()


#: Rows of a row-local op's input and output its consumers must hold at once, at least (the
#: tiles of a reduction's plan and the engine's read-ahead): below it, the op runs stored.
ROW_LOCAL_ROWS = 8


class Backward(VJPHiPrimitive):
    """The gradient of one ``Forward`` call, written at each input's gradient location.

    ``owner[i]`` is the input position whose gradient input ``i`` adds to
    (the same array passed twice shares one), or ``None`` when input ``i``
    needs no gradient; ``existing`` lists the positions whose gradient
    already holds earlier contributions, passed as extra inputs and added to
    in place.
    """

    def __init__(self, fwd: Forward, g_aval: Any, owner: tuple, existing: tuple) -> None:
        self.fwd = fwd
        self.owner = owner
        self.existing = existing
        self.in_avals = (
            *fwd.in_avals,
            g_aval,
            *(fwd.in_avals[i].to_tangent_aval() for i in existing),
            *((fwd.out_aval,) if fwd.op.needs_output else ()),
        )
        self.out_aval = tuple(
            a.to_tangent_aval() if o is not None else ShapedArray((), MARKER_DTYPE)
            for a, o in zip(fwd.in_avals, owner)
        )
        self.params = {"fwd": fwd, "owner": owner, "existing": existing}
        self.token = uuid.uuid4().hex
        super().__init__()  # type: ignore[no-untyped-call]  # jax's hijax is unannotated
        weakref.finalize(self, fused.forget, self.token)

    @functools.cached_property
    def lazy(self) -> frozenset[int]:
        """Inputs whose cotangent is a fused array (no loop, nothing written): fused arrays
        (their cotangents are deferred) of an elementwise op, of the output's shape (a
        broadcast input's cotangent is a reduction)."""
        fwd = self.fwd
        deferred = [
            self.owner[i] == i and isinstance(ct, DiskArrayType) and fused.is_deferred(ct.locator)
            for i, ct in enumerate(self.out_aval)
        ]
        if self._scale() is not None:
            return frozenset(i for i, d in enumerate(deferred) if d)
        if not getattr(fwd.op, "fusable", False) or not isinstance(fwd.out_aval, DiskArrayType):
            return frozenset()
        if fwd.op.row_local:  # an input's cotangent reads the output's rows whole: written
            return frozenset()
        return frozenset(
            i
            for i, (aval, d) in enumerate(zip(fwd.in_avals, deferred))
            if d and tuple(aval.shape) == tuple(fwd.out_aval.shape)
        )

    def _scale(self) -> float | None:
        """The op's :meth:`~oocarr.engine.op.BlockParallelOp.cotangent_scale` (one input)."""
        op = self.fwd.op
        scale = getattr(op, "cotangent_scale", None)
        return scale() if scale is not None and len(self.fwd.in_avals) == 1 else None

    def _fused_cotangents(self, values: Sequence[Any], earlier: dict[int, int]) -> dict:
        """Register each :attr:`lazy` input's cotangent, ``vjp`` of the op on the inputs and
        the output's cotangent (plus what it held before); their versions by input."""
        fwd, n = self.fwd, len(self.fwd.in_avals)
        lazy = self.lazy
        if not lazy:
            return {}
        slots: list[np.ndarray] = []
        leaves = [_leaf(a, v, slots, self.token) for a, v in zip(self.in_avals, values)]
        leaves = leaves[: n + 1]  # the op's inputs, then the output's cotangent
        fused.deposit(self.token, slots)
        versions = {}
        scale = self._scale()
        for i in sorted(lazy):
            ct = self.out_aval[i]
            if scale is not None:  # the output's cotangent times a number, broadcast
                factor = fused.Leaf.const(np.asarray(scale, ct.dtype))
                parts = [
                    fused.fused_locator(BINARY["multiply"], [leaves[n], factor], ct.shape, ct.dtype)
                ]
            else:
                parts = [
                    fused.fused_locator(type(fwd.op), leaves, ct.shape, ct.dtype, vjp=j)
                    for j in range(n)
                    if self.owner[j] == i
                ]
            if i in earlier:
                parts.insert(0, fused.resolve(ct.locator, values[earlier[i]]))
            versions[i] = fused.register(ct.locator, _sum_of(parts, ct.shape, ct.dtype))
        return versions

    def expand(self, *args: Any) -> tuple:
        n = len(self.fwd.in_avals)
        inputs = args[:n]
        fwd, owner, existing = self.fwd, self.owner, set(self.existing)
        in_avals, out_avals = fwd.in_avals, self.out_aval
        g_aval = self.in_avals[n]
        out_aval = fwd.out_aval if fwd.op.needs_output else None

        lazy = self.lazy
        earlier = {i: values_at for values_at, i in enumerate(self.existing, start=n + 1)}

        def run(*values: Any) -> tuple:
            versions = self._fused_cotangents(values, earlier)
            if all(owner[i] is None or i in lazy for i in range(n)):
                return tuple(versions.get(i, marker()) for i in range(n))
            operands = _operands(in_avals, values[:n])
            g_operand = _operands([g_aval], [values[n]])[0]
            out_operand = None if out_aval is None else _operands([out_aval], [values[-1]])[0]
            targets: list[Any] = [None] * n
            pending = []
            written: dict[int, Locator] = {}
            for i in range(n):
                if owner[i] is None or owner[i] in lazy:
                    continue
                if owner[i] != i:
                    targets[i] = targets[owner[i]]
                    continue
                ct = out_avals[i]
                if isinstance(ct, DiskArrayType) and fused.is_deferred(ct.locator):
                    written[i] = _deferred_scratch(ct.locator)
                    targets[i] = create_store(written[i], ct.shape, ct.dtype)
                    pending.append(targets[i])
                elif isinstance(ct, DiskArrayType):
                    if i in existing:
                        targets[i] = open_store(ct.locator, "r+")
                    else:
                        targets[i] = create_store(ct.locator, ct.shape, ct.dtype)
                        pending.append(targets[i])
                else:
                    targets[i] = np.zeros(ct.shape, ct.dtype)
            try:
                algo = OOCAlgorithm(fwd.op, fwd.site)
                algo.backward(operands, g_operand, targets, out_operand)
            except BaseException:
                for store in pending:
                    store.abort()
                raise
            results = []
            for i, ct in enumerate(out_avals):
                target = targets[i]
                if i in versions:
                    results.append(versions[i])
                elif i in written:  # a deferred cotangent that needed a loop: now stored
                    target.close()
                    parts = [written[i]]
                    if i in earlier:
                        parts.insert(0, fused.resolve(ct.locator, values[earlier[i]]))
                    results.append(fused.register(ct.locator, _sum_of(parts, ct.shape, ct.dtype)))
                elif isinstance(target, BlockedArray):
                    target.close()
                    results.append(marker())
                elif target is None:
                    results.append(marker())
                else:
                    results.append(np.asarray(target, dtype=ct.dtype))
            return tuple(results)

        def wrap(i: int, value: Any) -> Any:
            ct = out_avals[i]
            if not isinstance(ct, DiskArrayType):
                return value
            keep = traced or fused.is_deferred(ct.locator)  # a deferred value is its version
            out = DiskArray._at(
                ct.locator, ct.shape, ct.dtype, value if keep else None, tangent=ct.tangent
            )
            return out if traced else out._tied_to(inputs[i])

        traced = is_traced(args)
        results = call(run, tuple(result_struct(ct) for ct in out_avals), *args)
        return tuple(wrap(i, r) for i, r in enumerate(results))

    def vjp_fwd(self, nzs_in: Any, *args: Any) -> Any:
        raise NotImplementedError(
            "second-order gradients of oocarr ops are not supported; differentiate once, "
            "or materialize the inputs (oocarr.materialize) to use jax.numpy"
        )


def _struct(aval: Any) -> jax.ShapeDtypeStruct:
    """An input's type for working out an op's result dtype: a Python scalar's weak type kept,
    so ``uint8_array + 3`` stays uint8, as in JAX."""
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=getattr(aval, "weak_type", False))


def _as_argument(x: Any) -> Any:
    if is_disk(x) or isinstance(x, jax_core.Tracer | jax.Array):
        return x
    return jnp.asarray(x)


def make_op(
    op_class: type[BlockParallelOp | CustomOp], doc: str | None = None, *, in_memory: bool = False
) -> Callable[..., Any]:
    """Return the public, differentiable function of a block-level op.

    Parameters
    ----------
    op_class : type
        A :class:`~oocarr.engine.op.BlockParallelOp` subclass (block math only), or a
        :class:`~oocarr.engine.op.CustomOp` subclass (its own loops over a
        :class:`~oocarr.engine.run.CustomRun`).
    doc : str, optional
        The returned function's docstring.
    in_memory : bool
        Return the result as a ``jax.Array`` in memory (a small result of a large
        input: a factor, a statistic) instead of a ``DiskArray`` in scratch.

    Returns
    -------
    callable
        ``fn(*arrays, **params)``: arrays may be ``DiskArray``s, JAX or NumPy
        arrays, or scalars; works eagerly and under ``jax.jit``/``jax.grad``.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.ops.elementwise import BINARY
    >>> add = make_op(BINARY["add"])
    >>> np.asarray(add(oocarr.from_numpy(np.ones(3, "f4")), 2.0))
    array([3., 3., 3.], dtype=float32)
    """

    def public_fn(*given: Any, **params: Any) -> Any:
        args = tuple(_as_argument(a) for a in given)
        avals = tuple(jax.typeof(a) for a in args)
        op = _op_instance(op_class, tuple(a.shape for a in avals), _freeze_params(params))
        if in_memory:
            dtype = op.result_dtype(*map(_struct, avals))
            return Forward(op, avals, out_aval=ShapedArray(op.output_shape, dtype))(*args)
        primitive = _fused_call(op, given, avals) or Forward(op, avals)
        return primitive(*args)

    public_fn.__name__ = getattr(op_class, "name", op_class.__name__)
    public_fn.__qualname__ = public_fn.__name__
    public_fn.__doc__ = doc
    return public_fn


_DEFERRED_SCRATCH: dict[str, int] = {}


def _deferred_scratch(locator: Locator) -> Locator:
    """A scratch array for a value of the deferred cotangent at ``locator`` that a backward
    loop writes (a broadcast input's): one of a few per cotangent, in turn, so a jitted step
    reuses the same files."""
    turn = _DEFERRED_SCRATCH[locator.url] = (_DEFERRED_SCRATCH.get(locator.url, -1) + 1) % 8
    options = locator.driver_kwargs
    return scratch_locator(
        f"deferred-{locator.url}-{turn}", tuple(options["shape"]), options["dtype"]
    )


def zeros_at(aval: DiskArrayType) -> DiskArray:
    """A ``DiskArray`` of zeros at ``aval``'s locator (the zero of a gradient type).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.ones(3, "f4"))
    >>> np.asarray(zeros_at(x.aval.to_tangent_aval()))
    array([0., 0., 0.], dtype=float32)
    """
    if fused.is_deferred(aval.locator):  # version 0: nothing registered, zeros
        return DiskArray._at(aval.locator, aval.shape, aval.dtype, tangent=True)
    with create_store(aval.locator, aval.shape, aval.dtype):
        pass
    return DiskArray._at(aval.locator, aval.shape, aval.dtype, tangent=aval.tangent)


def add_into(aval: DiskArrayType, x: Any, y: Any) -> DiskArray:
    """``x + y`` written at ``aval``'s locator (how JAX adds two gradients).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.ones(3, "f4"))
    >>> np.asarray(add_into(x.aval.to_tangent_aval(), x, x))
    array([2., 2., 2.], dtype=float32)
    """
    avals = (jax.typeof(x), jax.typeof(y))
    op = _op_instance(BINARY["add"], tuple(a.shape for a in avals), ())
    return Forward(op, avals, out_aval=aval)(x, y)


def materialize(x: Any) -> jax.Array:
    """Read a stored array into memory as a differentiable ``jax.Array``.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> oocarr.materialize(oocarr.from_numpy(np.arange(3.0, dtype="f4")))
    Array([0., 1., 2.], dtype=float32)
    """
    x = _as_argument(x)
    aval = jax.typeof(x)
    if not isinstance(aval, DiskArrayType):
        return jnp.asarray(x)
    op = _op_instance(Identity, (aval.shape,), ())
    return Forward(op, (aval,), out_aval=ShapedArray(aval.shape, aval.dtype))(x)


def update(x: Any, new: Any) -> DiskArray:
    """Overwrite ``x``'s storage with ``new`` and return ``x`` (same locator, so same type).

    The write is all-or-nothing: the new values go to a temporary location
    that replaces the old one when complete.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> w = oocarr.from_numpy(np.zeros(3, "f4"))
    >>> np.asarray(oocarr.update(w, w + 1.0))
    array([1., 1., 1.], dtype=float32)
    """
    target = jax.typeof(x)
    new = _as_argument(new)
    source = jax.typeof(new)
    if not isinstance(target, DiskArrayType):
        raise TypeError(f"update_ needs a DiskArray to write into, got {target}")
    if tuple(source.shape) != tuple(target.shape):
        raise ShapeMismatchError(
            f"cannot update {target.locator.full_url} of shape {target.shape} with a value of "
            f"shape {source.shape}",
            url=target.locator.full_url,
        )
    check_writable(target)
    op = _op_instance(Identity, (source.shape,), ())
    result = Forward(op, (source,), out_aval=target)(new)
    if isinstance(x, DiskArray) and x._store is not None:
        x._store.close()
        x._store = None  # its handle may hold the replaced storage; reopen on next use
    return result


def materialize_fused(aval: DiskArrayType, done: Any) -> DiskArray:
    """A fused array that a jitted function returned, written to scratch storage once the
    call that fused it (``done``: its marker) has run.

    Examples
    --------
    >>> import jax, numpy as np, oocarr
    >>> y = jax.jit(lambda x: x * 2.0)(oocarr.from_numpy(np.ones(3, "f4")))
    >>> y.locator.driver, np.asarray(y)
    ('memmap', array([2., 2., 2.], dtype=float32))
    """
    jax.block_until_ready(done)
    op = _op_instance(Identity, (aval.shape,), ())
    return Forward(op, (aval,))(DiskArray._at(aval.locator, aval.shape, aval.dtype, done))


register_vspace(zeros_at, add_into, materialize_fused)
