"""The optax transformations that need a norm, exactly, over stored updates: a streamed pass
for the norms first, then the scaling as a fused elementwise op.

Tile by tile, a transformation that scales by a norm would use a tile's norm.
:func:`oocarr.optim.blockwise` cuts a chain at each of the ones below, runs the elementwise
stretches between them tile by tile (their updates written to scratch), and runs these on
whole leaves: each norm of a stored leaf is one fused, streamed pass
(``oocarr.sum(oocarr.square(u))``, nothing written), an in-memory leaf's is ``jnp``'s, and
the scaled update is a fused array that the next stretch reads tile by tile.

* ``clip_by_global_norm(max_norm)``: the norm over every leaf;
* ``scale_by_trust_ratio(min_norm, trust_coefficient, eps)`` (in ``lamb``, and in ``lars``
  under ``masked``): the norms of each parameter and of its update.

Each is optax's own formula on the norms, so the result is optax's to float rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from oocarr.api import elementwise
from oocarr.errors import InvalidArgumentError
from oocarr.jaxlayer.disk_array import is_disk
from oocarr.train.optax_parts import (
    cells_of,
    masked_parts,
    members,
    name_of,
    own_update,
    require_optax,
)

__all__ = ["SegmentsState", "flatten", "global_step", "norm_of", "segmented"]


class SegmentsState(NamedTuple):
    """The state of a chain cut at its norm-taking transformations: one per stretch."""

    parts: tuple


def flatten(tx: Any) -> list[Any]:
    """The transformations of ``tx`` with every nested ``optax.chain`` opened.

    Examples
    --------
    >>> import optax
    >>> [name_of(m) for m in flatten(optax.chain(optax.clip(1.0), optax.adamw(0.1)))]
    ['clip', 'scale_by_adam', 'add_decayed_weights', 'scale']
    """
    parts = members(tx)
    if len(parts) == 1 and parts[0] is tx:
        return [tx]
    return [leaf for m in parts for leaf in flatten(m)]


def norm_of(u: Any) -> jax.Array:
    """The 2-norm of one leaf, stored (a streamed pass) or in memory, as float32.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(norm_of(oocarr.from_numpy(np.full(4, 3.0)))), float(norm_of(np.full(4, 4.0)))
    (6.0, 8.0)
    """
    if is_disk(u):
        return jnp.sqrt(jnp.asarray(elementwise.sum(elementwise.square(u)), jnp.float32))
    return jnp.sqrt(jnp.sum(jnp.square(jnp.asarray(u, jnp.float32))))


def _scaled(u: Any, factor: jax.Array) -> Any:
    return u * factor.astype(jax.typeof(u).dtype)


def _global_clip(max_norm: float) -> Any:
    optax = require_optax()

    def update_fn(updates: Any, state: Any, params: Any = None) -> tuple:
        leaves = jax.tree.leaves(updates)
        g_norm = jnp.sqrt(sum((norm_of(u) ** 2 for u in leaves), jnp.zeros((), jnp.float32)))
        # optax's rule: unchanged below max_norm, else (t / g_norm) * max_norm
        factor = jnp.where(g_norm < max_norm, 1.0, max_norm / g_norm)

        def clip(t: Any) -> Any:
            if is_disk(t):
                return _scaled(t, factor)
            return jnp.where(g_norm < max_norm, t, (t / g_norm.astype(t.dtype)) * max_norm)

        return jax.tree.map(clip, updates), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)


def _trust_ratio(min_norm: Any, trust_coefficient: Any, eps: Any, mask: Any) -> Any:
    """optax's ``scale_by_trust_ratio`` (under ``masked(mask)`` unless ``mask is True``)."""
    optax = require_optax()

    def scale(update: Any, param: Any) -> Any:
        param_norm = jnp.where((n := norm_of(param)) <= min_norm, min_norm, n)
        update_norm = jnp.where((n := norm_of(update)) <= min_norm, min_norm, n)
        ratio = trust_coefficient * param_norm / (update_norm + eps)
        zero = jnp.logical_or(param_norm == 0.0, update_norm == 0.0)
        ratio = jnp.where(zero, 1.0, ratio)
        if is_disk(update):
            return _scaled(update, ratio)
        return update * ratio.astype(update.dtype)

    def update_fn(updates: Any, state: Any, params: Any = None) -> tuple:
        if params is None:
            raise InvalidArgumentError(
                "scale_by_trust_ratio needs the parameters: tx.update(grads, state, params)"
            )
        chosen = mask(params) if callable(mask) else mask
        if chosen is True:
            return jax.tree.map(scale, updates, params), state
        return (
            jax.tree.map(lambda u, p, m: scale(u, p) if m else u, updates, params, chosen),
            state,
        )

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update_fn)


def global_step(tx: Any) -> Any | None:
    """The exact, leaf-at-a-time version of ``tx`` when it is a norm-taking transformation
    this module knows, else ``None``.

    Examples
    --------
    >>> import optax
    >>> global_step(optax.clip_by_global_norm(1.0)) is not None, global_step(optax.sgd(1.0))
    (True, None)
    """
    masked = masked_parts(tx)
    mask: Any = True
    if masked is not None:
        tx, mask = masked
    name = name_of(tx)
    cells = cells_of(own_update(tx))
    if name == "clip_by_global_norm" and masked is None and "max_norm" in cells:
        return _global_clip(float(cells["max_norm"]))
    if name == "scale_by_trust_ratio" and {"min_norm", "trust_coefficient", "eps"} <= set(cells):
        return _trust_ratio(cells["min_norm"], cells["trust_coefficient"], cells["eps"], mask)
    return None


def segmented(parts: list[Any], elementwise: Callable[[Any], Any]) -> Any:
    """A chain of ``parts`` (each a transformation), the stretches between the norm-taking
    ones made with ``elementwise`` (:func:`oocarr.optim.blockwise`'s tile-by-tile form)."""
    optax = require_optax()

    steps, run = [], []
    for part in parts:
        step = global_step(part)
        if step is None:
            run.append(part)
            continue
        if run:
            steps.append(elementwise(optax.chain(*run)))
            run = []
        steps.append(step)
    if run:
        steps.append(elementwise(optax.chain(*run)))

    def init_fn(params: Any) -> SegmentsState:
        return SegmentsState(tuple(s.init(params) for s in steps))

    def update_fn(updates: Any, state: SegmentsState, params: Any = None) -> tuple:
        new = []
        for step, s in zip(steps, state.parts, strict=True):
            updates, s = step.update(updates, s, params)
            new.append(s)
        return updates, SegmentsState(tuple(new))

    return optax.GradientTransformation(init_fn, update_fn)
