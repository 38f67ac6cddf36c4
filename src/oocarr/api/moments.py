"""The mean and the variance of a stored array in one pass, under ``jax.jit``.

Inside a jitted function ``mean(x, axis)``, ``var`` and ``std`` of the same ``x`` over the
same axes share one :class:`~oocarr.ops.reductions.Moments` pass (Chan's parallel formula, as
exact as the two-pass one): the first call computes both, the others reuse them, so
``(x - mean(x, axis=0)) / std(x, axis=0)`` reads ``x`` once for its statistics and once for
its output.  The statistics are small (the kept axes), so they are in memory.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

from oocarr.engine import fused
from oocarr.engine.budget import memory_budget_bytes
from oocarr.jaxlayer import traced_leaves
from oocarr.jaxlayer.disk_array import DiskArrayType, is_disk
from oocarr.jaxlayer.make_op import make_op
from oocarr.ops.reductions import Moments, normalize_axes

__all__ = ["moments", "IN_MEMORY_SHARE"]

#: The statistics are kept in memory when both take at most this share of the budget.
IN_MEMORY_SHARE = 16

_moments = make_op(Moments, in_memory=True)


def moments(x: Any, axis: Any) -> tuple[Any, Any] | None:
    """``(mean, m2)`` of ``x`` over ``axis`` (the mean, and the sum of squared deviations from
    it) from one pass shared by every call on this ``x`` and axes in the jitted function being
    traced; ``None`` outside a staged trace, for an array that is not stored and floating, for
    statistics within the rows of a fused array (they fuse into it as a row-local node), or
    for statistics too large to hold in memory.

    Examples
    --------
    >>> import jax, numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.array([[1.0, 2.0], [3.0, 6.0]], "f4"))
    >>> mean, m2 = jax.jit(lambda x: moments(x, 0))(x)
    >>> mean.tolist(), m2.tolist()
    ([2.0, 4.0], [2.0, 8.0])
    """
    if not traced_leaves.staged() or not is_disk(x):
        return None
    aval = jax.typeof(x)
    if not isinstance(aval, DiskArrayType) or np.dtype(aval.dtype).kind != "f":
        return None
    axes = normalize_axes(axis, len(aval.shape))
    if 0 not in axes and fused.is_fused(aval.locator):
        return None  # statistics within rows of an expression fuse into it (a row-local node)
    kept = math.prod(n for i, n in enumerate(aval.shape) if i not in axes)
    if 2 * kept * np.dtype(aval.dtype).itemsize > memory_budget_bytes() // IN_MEMORY_SHARE:
        return None
    key = ("moments", id(x), axes)
    found = traced_leaves.recall(key, x)
    if found is None:
        out = _moments(x, axis=axes)
        found = (out[0], out[1])
        traced_leaves.keep_result(key, x, found)
    return found
