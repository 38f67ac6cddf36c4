"""Sums and means of fused arrays that separate by rows: the value and the gradients in one pass.

Under ``jax.jit``, ``oocarr.mean(oocarr.square(X @ w - y))`` builds a fused array (nothing is
written: :mod:`oocarr.engine.fused`) and reduces it.  When the reduction is over every axis
and the expression separates by rows (:func:`~oocarr.engine.fused_layout.row_roles`: each
stored leaf is read one row tile at a time, each in-memory leaf is used whole), the reduction
runs as :mod:`.row_sums`' stream over the stored leaves' row tiles, with the expression as the
per-tile kernel and the in-memory leaves (``w``) as its parameters.  Its VJP computes the value
and the gradients with respect to those leaves in one read of the data, as ``stream_sum``
does, and gives the fused array a zero cotangent: the parameters' gradients already hold every
path through the expression.  Where a stored leaf needs a gradient, the backward pass is the
op-by-op one (the sum's backward on the fused array).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.hijax import ShapedArray, VJPHiPrimitive, Zero

from oocarr.engine import fused
from oocarr.engine.fused_layout import row_elements, row_roles
from oocarr.engine.stats import call_site
from oocarr.ops.reductions import Sum, normalize_axes
from oocarr.store.dtypes import as_dtype

from . import traced_leaves
from .disk_array import DiskArrayType, is_disk
from .make_op import Forward, _op_instance
from .row_sums import Kernel, Spec, StreamSum, StreamValueAndGrad, fits_a_row, sources

__all__ = ["FusedSum", "fused_sum"]


class _ExpressionSum:
    """The per-tile kernel: a fused expression evaluated on one row tile and summed.

    ``blocks`` says, for each leaf the expression reads (in its order), where its block comes
    from: ``("tile", i)`` the ``i``-th row tile, ``("param", i)`` the ``i``-th parameter,
    ``("const", value)`` a constant.  Plain data, so a row task carries it to a worker.
    """

    def __init__(
        self, program: str, blocks: Sequence[tuple[str, Any]], shape: tuple, dtype: str
    ) -> None:
        self.program = program
        self.blocks = tuple(blocks)
        self.shape = tuple(shape)
        self.dtype = dtype

    def __call__(self, params: Sequence[Any], *tiles: Any) -> Any:
        given = [
            tiles[i] if kind == "tile" else params[i] if kind == "param" else i
            for kind, i in self.blocks
        ]
        value = fused.expression(self.program)(*given).astype(as_dtype(self.dtype))
        rows = tiles[0].shape[0]
        return jnp.sum(jnp.broadcast_to(value, (rows, *self.shape[1:])))


class FusedSum(StreamSum):
    """The sum of a fused array over row tiles: :class:`~.row_sums.StreamSum` of its
    expression, with the fused array itself as a last input (the op-by-op backward's)."""

    # the call's params, which the primitive reads as attributes (``spec`` as StreamSum's)
    fused_aval: DiskArrayType

    def __init__(self, spec: Spec, site: str, fused_aval: DiskArrayType) -> None:
        self.in_avals = (*spec.leaf_avals, *spec.dynamic_avals, fused_aval)
        self.out_aval = ShapedArray((), spec.out_dtype)
        self.params = {"spec": spec, "fused_aval": fused_aval}
        self.site = site
        VJPHiPrimitive.__init__(self)

    def expand(self, *args: Any) -> Any:
        return super().expand(*args[:-1])

    def _stored_tangents(self, nzs: Sequence[Any]) -> bool:
        return any(nzs[len(self.spec.leaf_avals) : -1])

    def vjp_fwd(self, nzs_in: Any, *args: Any) -> tuple[Any, Any]:
        if self._stored_tangents(nzs_in):  # a stored leaf's gradient: the op-by-op backward
            return self(*args), {"op-by-op": args[-1]}
        spec = self.spec
        k = len(spec.leaf_avals)
        wanted = tuple(
            bool(nz) and jnp.issubdtype(a.dtype, jnp.inexact)
            for nz, a in zip(nzs_in[:k], spec.leaf_avals)
        )
        if not any(wanted):
            return self(*args), None
        value, *grads = StreamValueAndGrad(spec, wanted, self.site)(*args[:-1])
        it = iter(grads)
        return value, [next(it) if w else None for w in wanted]

    def jvp(self, primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[Any, Any]:
        if self._stored_tangents([not isinstance(t, Zero) for t in tangents]):
            raise NotImplementedError(
                "forward-mode derivatives of an oocarr sum with respect to stored arrays are "
                "not supported; use reverse mode (jax.grad)"
            )
        return super().jvp(primals, tangents)

    def vjp_bwd(self, res: Any, g: Any, *accums: Any) -> None:
        if isinstance(res, dict):
            if not isinstance(g, Zero):
                _sum_forward(self.fused_aval, self.spec.out_dtype).vjp_bwd(
                    ((res["op-by-op"],), None), g, accums[-1]
                )
            return
        super().vjp_bwd(res, g, *accums[:-1])


def _sum_forward(aval: DiskArrayType, dtype: Any) -> Forward:
    """The op-by-op sum of the fused array of type ``aval`` over every axis."""
    op = _op_instance(Sum, (tuple(aval.shape),), (("axis", None), ("keepdims", False)))
    return Forward(op, (aval,), out_aval=ShapedArray((), dtype))


def fused_sum(x: Any, axis: Any, keepdims: bool, mean: bool) -> Any:
    """``sum`` (or ``mean``) of ``x`` over ``axis`` as one stream of its fused expression's
    leaves, when ``x`` is a fused array that separates by rows and every axis is reduced;
    ``None`` otherwise (the op-by-op reduction runs).

    Examples
    --------
    >>> import jax, numpy as np, oocarr
    >>> X = oocarr.from_numpy(np.ones((4, 2), "f4"))
    >>> float(jax.jit(lambda w: oocarr.sum(oocarr.square(X @ w)))(np.ones(2, "f4")))
    16.0
    """
    if keepdims or not is_disk(x):
        return None
    aval = jax.typeof(x)
    if not isinstance(aval, DiskArrayType) or not fused.is_fused(aval.locator):
        return None
    dtype = np.dtype(aval.dtype)
    if dtype.kind != "f" or len(normalize_axes(axis, len(aval.shape))) != len(aval.shape):
        return None
    spec = json.loads(aval.locator.url)
    roles = row_roles(spec)
    found = None if roles is None else _leaf_values(spec, roles)
    if found is None:
        return None
    blocks, params, arrays = found
    out_dtype = np.dtype(jax.eval_shape(jnp.sum, jax.ShapeDtypeStruct((1,), dtype)).dtype)
    kernel = _ExpressionSum(fused.program_of(spec), blocks, tuple(aval.shape), dtype.str)
    described, dynamic = sources(arrays)
    leaves, treedef = jax.tree.flatten(tuple(params))
    row_spec = Spec(
        Kernel(kernel),
        treedef,
        tuple(ShapedArray(p.shape, p.dtype) for p in leaves),
        tuple(described),
        weighted=False,
        per_row=False,
        out_dtype=out_dtype,
        mean=False,
        tile_rows=None,
        extra_row_bytes=row_elements(spec) * dtype.itemsize,
    )
    if not fits_a_row(row_spec):  # rows too wide to stream: the op-by-op tiles cut them
        return None
    site = call_site("mean" if mean else "sum")
    total = FusedSum(row_spec, site, aval)(*leaves, *dynamic, x)
    if not mean:
        return total
    wide = jnp.promote_types(out_dtype, jnp.float32)
    return (total.astype(wide) / math.prod(aval.shape)).astype(out_dtype)


def _leaf_values(
    spec: dict[str, Any], roles: Sequence[str]
) -> tuple[list[tuple[str, Any]], list[Any], list[Any]] | None:
    """Where each leaf the expression reads comes from (see :class:`_ExpressionSum`), the
    parameters (the slots' values) and the row-tiled arrays (the stored leaves' values), from
    the trace being built; ``None`` when one is not known there."""
    blocks: list[tuple[str, Any]] = []
    params: list[Any] = []
    arrays: list[Any] = []
    for leaf, role in zip(spec["leaves"], roles):
        if "const" in leaf:
            if leaf["shape"]:  # a scalar constant is in the program itself
                blocks.append(("const", fused.leaf_constant(leaf)))
            continue
        if "slot" in leaf:
            value = traced_leaves.slot_value(leaf["slot"], leaf["index"])
            if value is None:
                return None
            value = jnp.asarray(value)
            if value.dtype != as_dtype(leaf["dtype"]):
                value = value.astype(as_dtype(leaf["dtype"]))
            blocks.append(("param", len(params)))
            params.append(value)
            continue
        locator = json.dumps(leaf["locator"], sort_keys=True)
        value = traced_leaves.stored_value(locator)
        if value is None or role != "rows":
            return None
        blocks.append(("tile", len(arrays)))
        arrays.append(value)
    return blocks, params, arrays
