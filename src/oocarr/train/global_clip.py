"""``clip_by_global_norm`` over stored gradients, exactly: a streamed pass for the norm first.

optax's ``clip_by_global_norm(max_norm)`` scales every gradient by
``max_norm / ‖g‖`` when the norm over all of them is at least ``max_norm``.
Tile by tile that norm would be a tile's, so :func:`oocarr.optim.blockwise`
splits a chain that starts with it: the sum of squares of each stored
gradient is one fused, streamed pass (``oocarr.sum(oocarr.square(g))``,
in-memory leaves with ``jnp``), then the scaled gradients (fused elementwise
arrays, evaluated tile by tile, never written) go through the rest of the
chain, blockwise.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from oocarr.jaxlayer.disk_array import is_disk
from oocarr.train.optax_parts import cells_of, members, name_of

__all__ = ["ClippedState", "clipped", "leading_clip"]


class ClippedState(NamedTuple):
    """The state of a chain that starts with ``clip_by_global_norm``: the clip has none,
    ``rest`` is the state of the rest of the chain."""

    rest: Any


def leading_clip(tx: Any) -> tuple[float, Any] | None:
    """``(max_norm, the rest of the chain)`` when ``tx`` is ``clip_by_global_norm`` or a
    chain that starts with it, else ``None``.

    Examples
    --------
    >>> import optax
    >>> max_norm, rest = leading_clip(optax.chain(optax.clip_by_global_norm(2.0), optax.sgd(1)))
    >>> max_norm, leading_clip(optax.sgd(1.0))
    (2.0, None)
    """
    import optax

    parts = members(tx)
    if not parts or name_of(parts[0]) != "clip_by_global_norm":
        return None
    update = parts[0].update
    for _ in range(8):  # through with_extra_args_support's wrapper
        cells = cells_of(update)
        if "max_norm" in cells:
            break
        if "tx" not in cells:
            return None
        update = cells["tx"].update
    else:
        return None
    rest = optax.chain(*parts[1:]) if len(parts) > 1 else optax.identity()
    return float(cells["max_norm"]), rest


def global_norm(updates: Any) -> jax.Array:
    """The norm over every leaf of ``updates``: one streamed pass per stored leaf.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> float(global_norm({"a": oocarr.from_numpy(np.full(4, 3.0)), "b": np.full(4, 4.0)}))
    10.0
    """
    import oocarr

    total = jnp.zeros((), jnp.float32)
    for g in jax.tree.leaves(updates):
        square = oocarr.square if is_disk(g) else jnp.square
        part = (oocarr.sum if is_disk(g) else jnp.sum)(square(g))
        total = total + jnp.asarray(part, jnp.float32)
    return jnp.sqrt(total)


def clipped(max_norm: float, rest: Any) -> Any:
    """``optax.chain(clip_by_global_norm(max_norm), rest)`` for stored gradients, where
    ``rest`` is already :func:`~oocarr.optim.blockwise`.

    Examples
    --------
    >>> import numpy as np, optax, oocarr
    >>> tx = oocarr.optim.blockwise(optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(1.0)))
    >>> w = oocarr.from_numpy(np.zeros(4, "f4"))
    >>> state = tx.init(w)
    >>> u, state = tx.update(oocarr.from_numpy(np.full(4, 3.0, "f4")), state, w)
    >>> np.asarray(u).round(3)  # scaled to norm 1, then sgd's -lr
    array([-0.5, -0.5, -0.5, -0.5], dtype=float32)
    """
    import optax

    def init_fn(params: Any) -> ClippedState:
        return ClippedState(rest.init(params))

    def update_fn(updates: Any, state: ClippedState, params: Any = None) -> tuple:
        g_norm = global_norm(updates)
        # optax's rule: unchanged below max_norm, else (t / g_norm) * max_norm
        factor = jnp.where(g_norm < max_norm, 1.0, max_norm / g_norm)

        def clip(t: Any) -> Any:
            if is_disk(t):
                return t * factor.astype(jax.typeof(t).dtype)
            return jnp.where(g_norm < max_norm, t, (t / g_norm.astype(t.dtype)) * max_norm)

        new, rest_state = rest.update(jax.tree.map(clip, updates), state.rest, params)
        return new, ClippedState(rest_state)

    return optax.GradientTransformation(init_fn, update_fn)
