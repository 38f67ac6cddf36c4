"""Block functions compiled once: ahead of time for each input shape, cached per op."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from . import device
from .heap import release_if_over, trim
from .op import BlockParallelOp

__all__ = ["BlockFunction", "block_functions", "backward_function", "cached"]


class BlockFunction:
    """A jitted block function, compiled ahead of time for each shape and dtype of its inputs,
    for the engine's own device (:mod:`~oocarr.engine.device`), where it runs synchronously.

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
            on = device.sharding()
            specs = [jax.ShapeDtypeStruct(k[0], k[1], weak_type=k[2], sharding=on) for k in key[1:]]
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
        put = jax.tree.map(device.put, args)
        release_if_over()  # XLA allocates the outputs with malloc: freed tiles handed back first
        return jax.block_until_ready(self._executable(put)(*put))


def _aval_key(leaf: Any) -> tuple:
    """Shape, dtype (as JAX will hold it) and weak type of an input leaf."""
    if not hasattr(leaf, "dtype"):
        leaf = jax.typeof(leaf)  # a Python scalar
    weak = bool(getattr(leaf, "weak_type", False))
    return tuple(leaf.shape), jax.dtypes.canonicalize_dtype(leaf.dtype), weak


_JITTED: dict[tuple, Any] = {}


def block_functions(op: BlockParallelOp) -> tuple:
    """Block functions compiled once per op and parameters, reused across calls."""
    fns = _JITTED.get(op.block_key)
    if fns is None:

        def accumulate(acc: Any, *blocks: jax.Array) -> Any:
            return op.combine(acc, op.forward_block(*blocks))

        # The accumulator is donated: XLA updates it in place, with no second tile beside it.
        fns = (
            BlockFunction(op.forward_block),
            BlockFunction(accumulate, donate_argnums=(0,)),
        )
        _JITTED[op.block_key] = fns
    return fns


def backward_function(op: BlockParallelOp, wanted: tuple[bool, ...]) -> BlockFunction:
    """The op's backward block function returning only the gradients ``wanted`` (XLA then
    skips computing the others: a data matrix's gradient is never formed)."""
    key = (op.block_key, "backward", wanted)
    fn = _JITTED.get(key)
    if fn is None:

        def backward(*args: jax.Array) -> tuple[jax.Array, ...]:
            grads = op.backward_block(*args)
            return tuple(g for g, w in zip(grads, wanted) if w)

        fn = _JITTED[key] = BlockFunction(backward)
    return fn


def cached(
    key: tuple, fn: Callable[..., Any], donate_argnums: tuple[int, ...] = ()
) -> BlockFunction:
    """The :class:`BlockFunction` of ``fn`` cached under ``key`` (made on first use), donating
    the arguments ``donate_argnums``."""
    jitted = _JITTED.get(key)
    if jitted is None:
        jitted = _JITTED[key] = BlockFunction(fn, donate_argnums=donate_argnums)
    return jitted
