"""Where a fused array's leaves are read for one region of it, and whether it streams by rows.

A fused expression (:mod:`oocarr.engine.fused`) is a tree of op nodes over leaves.  An
elementwise node maps a region of its output to each argument by broadcasting; a *row-local*
node (``x @ w`` with ``w`` in memory, a softmax or a reduction along the axes after the first:
the op class says ``row_local``) maps only the node's ``lead`` axes and needs its first
argument whole along the others, and its other arguments (``w``) whole.  :func:`layout` walks
the tree for one region and gives each leaf's read region (the box around its uses) and the
*cuts*: what each use and each row-local node's result must be sliced to, where that is not
all of it.  :func:`row_roles` says whether the whole expression separates by rows: each stored
leaf's first axis is the result's first axis, so a reduction over every axis streams the
leaves' row tiles (:mod:`oocarr.jaxlayer.fused_sum`).
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Sequence
from typing import Any

from oocarr.errors import InvalidArgumentError
from oocarr.store.regions import broadcast_region

__all__ = [
    "computed_elements",
    "has_row_local",
    "layout",
    "op_class",
    "row_elements",
    "row_roles",
]

Region = tuple[slice, ...]
#: A slice of a block, relative to the block: ``(start, stop)`` per axis.
Cut = tuple[tuple[int, int], ...]


@functools.lru_cache(maxsize=256)
def op_class(path: str) -> type[Any]:  # loaded by name: any fusable op class
    """The op class a node names (``module:Class``); it must be fusable.

    Examples
    --------
    >>> op_class("oocarr.ops.elementwise:Exp").name
    'exp'
    """
    module, _, name = path.partition(":")
    cls = getattr(importlib.import_module(module), name)
    if not getattr(cls, "fusable", False):
        raise InvalidArgumentError(f"{path} is not an op a fused array can hold")
    return cls


def _is_row_local(node: dict[str, Any]) -> bool:
    return "op" in node and "vjp" not in node and getattr(op_class(node["op"]), "row_local", False)


def _shape(node: dict[str, Any], leaves: Sequence[dict[str, Any]]) -> tuple[int, ...]:
    return tuple(leaves[node["leaf"]]["shape"] if "leaf" in node else node["shape"])


def _whole(shape: Sequence[int]) -> Region:
    return tuple(slice(0, n) for n in shape)


def has_row_local(spec: dict[str, Any]) -> bool:
    """Whether a fused array's expression holds a row-local node.

    Examples
    --------
    >>> has_row_local({"expr": {"leaf": 0}, "leaves": [{"shape": [2]}]})
    False
    """

    def visit(node: dict[str, Any]) -> bool:
        if "leaf" in node:
            return False
        return _is_row_local(node) or any(visit(a) for a in node["args"])

    return visit(spec["expr"])


def _walk(spec: dict[str, Any], region: Region) -> tuple[list[list[Region]], list, int]:
    """Each leaf's uses, the evaluation's order of leaf uses (``("leaf", (i, region))``) and
    row-local nodes (``("node", cut)``), and the elements the row-local nodes compute."""
    leaves = spec["leaves"]
    uses: list[list[Region]] = [[] for _ in leaves]
    order: list[tuple[str, Any]] = []
    computed_elements = 0

    def visit(node: dict[str, Any], want: Region) -> None:
        nonlocal computed_elements
        if "leaf" in node:
            uses[node["leaf"]].append(want)
            order.append(("leaf", (node["leaf"], want)))
            return
        if _is_row_local(node):
            x, *rest = node["args"]
            x_shape, shape, lead = _shape(x, leaves), _shape(node, leaves), node["lead"]
            visit(x, (*want[:lead], *_whole(x_shape[lead:])))
            for w in rest:
                visit(w, _whole(_shape(w, leaves)))
            computed = (*want[:lead], *_whole(shape[lead:]))
            computed_elements += math.prod(r.stop - r.start for r in computed)
            order.append(("node", _relative(want, computed)))
            return
        for arg in node["args"]:
            visit(arg, broadcast_region(want, _shape(arg, leaves)))

    visit(spec["expr"], tuple(region))
    return uses, order, computed_elements


def layout(
    spec: dict[str, Any], region: Region
) -> tuple[list[Region], tuple[Cut | None, ...] | None]:
    """The region each leaf of ``spec`` is read at for ``region`` of the fused array, and the
    cuts the evaluation applies (``None`` when nothing is cut, the usual case).

    The cuts list one item per leaf use and per row-local node, in the order the evaluation
    meets them (each node's arguments first): ``None`` or a :data:`Cut` of that value.

    Examples
    --------
    >>> leaves = [{"shape": [6, 3]}, {"shape": [3, 2]}]
    >>> matmul = {"op": "oocarr.ops.matmul:RowMatmul", "args": [{"leaf": 0}, {"leaf": 1}],
    ...           "shape": [6, 2], "lead": 1}
    >>> layout({"expr": matmul, "leaves": leaves}, (slice(2, 4), slice(0, 2)))
    ([(slice(2, 4, None), slice(0, 3, None)), (slice(0, 3, None), slice(0, 2, None))], None)
    >>> layout({"expr": matmul, "leaves": leaves}, (slice(2, 4), slice(1, 2)))[1]
    (None, None, ((0, 2), (1, 2)))
    """
    uses, order, _ = _walk(spec, region)
    reads = [_box(u) if u else _whole(leaf["shape"]) for u, leaf in zip(uses, spec["leaves"])]
    cuts = tuple(cut if kind == "node" else _relative(cut[1], reads[cut[0]]) for kind, cut in order)
    return reads, (None if all(c is None for c in cuts) else cuts)


def computed_elements(spec: dict[str, Any], region: Region) -> int:
    """Elements the row-local nodes compute for ``region`` (whole rows: a cut is sliced from
    them).

    Examples
    --------
    >>> leaves = [{"shape": [6, 3]}, {"shape": [3, 2]}]
    >>> matmul = {"op": "oocarr.ops.matmul:RowMatmul", "args": [{"leaf": 0}, {"leaf": 1}],
    ...           "shape": [6, 2], "lead": 1}
    >>> computed_elements({"expr": matmul, "leaves": leaves}, (slice(0, 4), slice(1, 2)))
    8
    """
    return _walk(spec, region)[2]


def _box(regions: Sequence[Region]) -> Region:
    """The smallest region holding every one of ``regions``."""
    return tuple(
        slice(min(r.start for r in axis), max(r.stop for r in axis)) for axis in zip(*regions)
    )


def _relative(want: Region, held: Region) -> Cut | None:
    """``want`` as a slice of a block holding ``held`` (``None``: all of it)."""
    if tuple(want) == tuple(held):
        return None
    return tuple((w.start - h.start, w.stop - h.start) for w, h in zip(want, held))


def row_roles(spec: dict[str, Any]) -> list[str] | None:
    """Each leaf's role when the fused array streams by row tiles of its first axis: ``"rows"``
    (its first axis is the result's: read one row tile at a time) or ``"whole"`` (used whole
    by every tile); ``None`` when the expression does not separate so (a stored leaf used
    whole, or broadcast along the rows, would be read once per tile; an in-memory leaf
    aligned with the rows is as large as the data).

    Examples
    --------
    >>> leaves = [{"locator": {}, "shape": [6, 3]}, {"slot": "t", "shape": [3]}]
    >>> add = {"op": "oocarr.ops.elementwise:Add", "args": [{"leaf": 0}, {"leaf": 1}],
    ...        "shape": [6, 3]}
    >>> row_roles({"expr": add, "leaves": leaves})
    ['rows', 'whole']
    """
    leaves = spec["leaves"]
    root = _shape(spec["expr"], leaves)
    if not root:
        return None
    roles: list[str | None] = [None] * len(leaves)

    def visit(node: dict[str, Any], aligned: bool) -> bool:
        if "leaf" in node:
            i = node["leaf"]
            role = "rows" if aligned else "whole"
            if roles[i] not in (None, role) or (role == "rows") != ("locator" in leaves[i]):
                return False
            roles[i] = role
            return True
        if _is_row_local(node):
            x, *rest = node["args"]
            return visit(x, aligned) and all(visit(w, False) for w in rest)
        shape = _shape(node, leaves)
        for arg in node["args"]:
            s = _shape(arg, leaves)
            if not visit(arg, aligned and len(s) == len(shape) and s[0] == shape[0]):
                return False
        return True

    if not visit(spec["expr"], True) or "rows" not in roles:
        return None
    return [r or "whole" for r in roles]


def row_elements(spec: dict[str, Any]) -> int:
    """Elements per row (of the first axis) that evaluating the expression on a row tile
    holds besides its leaves: the result's and each row-local node's (XLA fuses elementwise
    chains into their consumers; a product is formed).

    Examples
    --------
    >>> leaves = [{"shape": [6, 3]}, {"shape": [3, 2]}]
    >>> matmul = {"op": "oocarr.ops.matmul:RowMatmul", "args": [{"leaf": 0}, {"leaf": 1}],
    ...           "shape": [6, 2], "lead": 1}
    >>> row_elements({"expr": matmul, "leaves": leaves})
    4
    """
    leaves = spec["leaves"]

    def per_row(shape: Sequence[int]) -> int:
        return math.prod(shape[1:])

    def visit(node: dict[str, Any]) -> int:
        if "leaf" in node:
            return 0
        own = per_row(node["shape"]) if _is_row_local(node) else 0
        return own + sum(visit(a) for a in node["args"])

    return per_row(_shape(spec["expr"], leaves)) + visit(spec["expr"])
