"""Looking inside optax transformations: the members of a chain, the optax function that made
a transformation, and whether one is elementwise (what :func:`oocarr.optim.blockwise` needs).

optax builds transformations as closures; a chain keeps its members' ``init``/``update``
functions in the closure variables ``init_fns``/``update_fns``, ``masked`` its inner
transformation in ``inner``, and ``with_extra_args_support`` wraps an update in a function
whose closure holds ``tx``.  These are read, never changed.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from oocarr.errors import MissingDependencyError

__all__ = [
    "cells_of",
    "masked_parts",
    "members",
    "name_of",
    "not_elementwise",
    "own_update",
    "require_optax",
]


def require_optax() -> Any:
    """The ``optax`` module, or ``MissingDependencyError`` with the command that installs it.

    Examples
    --------
    >>> require_optax().__name__
    'optax'
    """
    try:
        import optax
    except ImportError as err:
        raise MissingDependencyError(
            "oocarr.optim needs optax, which is not installed: pip install optax"
        ) from err
    return optax


#: Shapes of the probe that tells elementwise transformations from the others: one leaf
#: large enough that adafactor factors it (both sides >= its default 128) even cut in four
#: tiles, and a second leaf.
_PROBE_LEAF, _PROBE_OTHER = (256, 256), (64,)


def _probe_values() -> tuple[dict, list[dict]]:
    """Parameters and two steps' gradients for the probe (large enough to be clipped)."""
    rng = np.random.default_rng(0)

    def tree(scale: float) -> dict:
        return {
            "a": (scale * rng.standard_normal(_PROBE_LEAF)).astype(np.float32),
            "b": (scale * rng.standard_normal(_PROBE_OTHER)).astype(np.float32),
        }

    return tree(1.0), [tree(10.0), tree(10.0)]


def _run_steps(tx: Any, params: Any, grads: list[Any]) -> list[Any]:
    state = tx.init(params)
    outs = []
    for g in grads:
        u, state = tx.update(g, state, params)
        outs.append(u)
        params = jax.tree.map(lambda p, d: p + d, params, u)
    return outs


def _elementwise(tx: Any) -> bool:
    """Whether ``tx`` on parts of the parameters (each leaf alone, a leaf cut in four tiles)
    gives what it gives on the whole tree, for two steps: what :func:`blockwise` needs."""
    params, grads = _probe_values()
    h = _PROBE_LEAF[0] // 2

    def parts(tree: dict) -> list[np.ndarray]:
        a = tree["a"]
        return [a[:h, :h], a[:h, h:], a[h:, :h], a[h:, h:], tree["b"]]

    try:
        with jax.ensure_compile_time_eval():
            whole = _run_steps(tx, params, grads)
            pieces = [
                _run_steps(tx, p, [parts(g)[i] for g in grads]) for i, p in enumerate(parts(params))
            ]
    except Exception:  # a transformation that cannot run on a lone array: not ours to judge
        return True
    for step, w in enumerate(whole):
        tiles = [np.asarray(p[step]) for p in pieces]
        joined = np.block([[tiles[0], tiles[1]], [tiles[2], tiles[3]]])
        for got, want in ((joined, w["a"]), (tiles[4], w["b"])):
            got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
            scale = max(float(np.max(np.abs(want), initial=0.0)), 1e-30)
            if not np.allclose(got, want, rtol=1e-4, atol=1e-5 * scale):
                return False
    return True


def cells_of(*fns: Any) -> dict[str, Any]:
    """The variables the closures ``fns`` captured, by name.

    Examples
    --------
    >>> def outer(scale):
    ...     return lambda x: x * scale
    >>> cells_of(outer(3))
    {'scale': 3}
    """
    cells: dict[str, Any] = {}
    for fn in fns:
        names = getattr(getattr(fn, "__code__", None), "co_freevars", ())
        cells.update(zip(names, (c.cell_contents for c in (fn.__closure__ or ()))))
    return cells


def members(tx: Any) -> list[Any]:
    """The transformations of an ``optax.chain`` (its ``init_fns``/``update_fns``), else
    ``[tx]``.

    Examples
    --------
    >>> import optax
    >>> [name_of(m) for m in members(optax.adamw(0.1))]
    ['scale_by_adam', 'add_decayed_weights', 'scale']
    """
    optax = require_optax()
    cells = cells_of(tx.init, tx.update)
    if "init_fns" in cells and "update_fns" in cells:
        return [
            optax.GradientTransformationExtraArgs(i, u)
            for i, u in zip(cells["init_fns"], cells["update_fns"])
        ]
    return [tx]


def masked_parts(tx: Any) -> tuple[Any, Any] | None:
    """``(inner, mask)`` of an ``optax.masked`` transformation, else ``None``.

    Examples
    --------
    >>> import optax
    >>> inner, mask = masked_parts(optax.masked(optax.sgd(1.0), True))
    >>> name_of(inner), mask, masked_parts(optax.sgd(1.0))
    ('chain', True, None)
    """
    cells = cells_of(tx.init, tx.update)
    inner = cells.get("inner")
    if "mask" in cells and hasattr(inner, "init") and hasattr(inner, "update"):
        return inner, cells["mask"]
    return None


def own_update(tx: Any) -> Any:
    """``tx``'s own update function, through ``with_extra_args_support``'s wrapper.

    Examples
    --------
    >>> import optax
    >>> own_update(optax.chain(optax.sgd(1.0))).__qualname__
    'chain.<locals>.update_fn'
    """
    update = tx.update
    for _ in range(8):
        inner = cells_of(update).get("tx")
        if _qualified(update) != "with_extra_args_support" or inner is None:
            return update
        update = inner.update
    return update


def _qualified(fn: Any) -> str:
    return getattr(fn, "__qualname__", repr(fn)).split(".<locals>")[0]


def name_of(tx: Any) -> str:
    """The optax function that made ``tx`` (``clip_by_global_norm``), from its ``update``'s
    qualified name.

    Examples
    --------
    >>> import optax
    >>> name_of(optax.clip_by_global_norm(1.0))
    'clip_by_global_norm'
    """
    return _qualified(own_update(tx))


def not_elementwise(tx: Any) -> list[str]:
    """The names of the innermost transformations in ``tx`` that are not elementwise: run on
    parts of a small tree (each leaf alone, a leaf cut in four), two of its steps do not give
    what they give on the whole tree.

    Examples
    --------
    >>> import optax
    >>> not_elementwise(optax.adam(0.1)), not_elementwise(optax.lamb(0.1))
    ([], ['scale_by_trust_ratio'])
    """
    if _elementwise(tx):
        return []
    masked = masked_parts(tx)
    parts = [masked[0]] if masked is not None else members(tx)
    if len(parts) == 1 and parts[0] is tx:
        return [name_of(tx)]
    found = [name for m in parts for name in not_elementwise(m)]
    return found or [name_of(tx)]
