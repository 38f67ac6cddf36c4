"""Reshape in C order: a :class:`~oocarr.engine.op.CustomOp` copying contiguous runs.

Each output tile is a contiguous run of the flattened order (whole trailing
axes and part of one more), and the same run of the input is a few boxes
(at most ``2 * ndim - 1``: the rest of a row, whole rows, the start of a
row, axis by axis), read in turn and laid end to end.  The gradient is the
same copy the other way: each contiguous run of the input's shape read from
the cotangent as boxes of the output's shape.
"""

from __future__ import annotations

import collections
import math
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import numpy as np

from oocarr.engine.op import CustomOp, Reader, Region, Run, cotangent, grow_block
from oocarr.errors import InvalidArgumentError, ShapeMismatchError

__all__ = ["Reshape", "flat_boxes", "resolve_shape"]


def resolve_shape(size: int, shape: Any, what: str = "reshape") -> tuple[int, ...]:
    """``shape`` with its ``-1`` (at most one) worked out for an array of ``size`` elements.

    Raises
    ------
    InvalidArgumentError
        For a shape that is not integers, has a length below ``-1`` or more than one ``-1``.
    ShapeMismatchError
        When ``size`` elements do not fill the shape.

    Examples
    --------
    >>> resolve_shape(12, (3, -1)), resolve_shape(1, ())
    ((3, 4), ())
    """
    try:
        dims = (operator.index(shape),) if not isinstance(shape, Sequence) else tuple(shape)
        dims = tuple(operator.index(n) for n in dims)
    except TypeError:
        raise InvalidArgumentError(
            f"{what}: shape must be a tuple of integers, got {shape!r}"
        ) from None
    if any(n < -1 for n in dims) or dims.count(-1) > 1:
        raise InvalidArgumentError(
            f"{what}: shape {dims} may hold non-negative lengths and one -1 at most"
        )
    known = math.prod(n for n in dims if n != -1)
    if -1 in dims:
        if known == 0 or size % known:
            raise ShapeMismatchError(
                f"{what}: cannot fit an array of {size} elements into shape {dims}; "
                "give lengths whose product is the array's size"
            )
        dims = tuple(size // known if n == -1 else n for n in dims)
    elif known != size:
        raise ShapeMismatchError(
            f"{what}: cannot reshape an array of {size} elements into shape {dims} "
            f"({known} elements); give lengths whose product is {size}"
        )
    return dims


def flat_boxes(start: int, stop: int, shape: tuple[int, ...]) -> list[Region]:
    """The boxes of an array of ``shape`` that hold its C-order elements ``start:stop``, in
    order: at most ``2 * len(shape) - 1`` of them.

    Examples
    --------
    >>> flat_boxes(3, 11, (3, 4))
    [(slice(0, 1, None), slice(3, 4, None)), (slice(1, 2, None), slice(0, 4, None)), \
(slice(2, 3, None), slice(0, 3, None))]
    """
    if start >= stop:
        return []
    if not shape:
        return [()]
    inner = math.prod(shape[1:])
    first, head = divmod(start, inner)
    last, tail = divmod(stop, inner)
    if first == last:
        return [(slice(first, first + 1), *box) for box in flat_boxes(head, tail, shape[1:])]
    boxes = []
    if head:
        boxes += [(slice(first, first + 1), *box) for box in flat_boxes(head, inner, shape[1:])]
        first += 1
    if last > first:
        boxes.append((slice(first, last), *(slice(0, n) for n in shape[1:])))
    if tail:
        boxes += [(slice(last, last + 1), *box) for box in flat_boxes(0, tail, shape[1:])]
    return boxes


def _flat_start(region: Region, shape: tuple[int, ...]) -> int:
    """The C-order position of ``region``'s first element in an array of ``shape``."""
    start = 0
    for r, n in zip(region, shape):
        start = start * n + r.start
    return start


class Reshape(CustomOp):
    """``reshape(x, shape)`` in C order (``shape`` may hold one ``-1``)."""

    name = "reshape"
    residency = 3  # the boxes of one run, the run laid out as the tile, the tile being cropped

    def compute_output_shape(self) -> tuple[int, ...]:
        (shape,) = self.in_shapes
        return resolve_shape(math.prod(shape), self.params["shape"])

    def result_dtype(self, *inputs: jax.ShapeDtypeStruct) -> np.dtype:
        return np.dtype(inputs[0].dtype)

    def _copy_runs(
        self,
        run: Run,
        source: Reader,
        src_shape: tuple[int, ...],
        dst_shape: tuple[int, ...],
        emit: Callable[[Region, np.ndarray], None],
    ) -> None:
        """``emit(region, block)`` for each run of ``dst_shape`` in C order, its elements read
        from ``source`` (of ``src_shape``) box by box, the next box read ahead."""
        size = math.prod(dst_shape)
        if size == 0:
            return
        run_length = math.prod(run.tile_shape((size,)))
        tile = grow_block(dst_shape, 1, run_length)
        pending: collections.deque[tuple[Region, int]] = collections.deque()

        def boxes() -> Iterator[Region]:
            for region in run.regions(dst_shape, tile):
                start = _flat_start(region, dst_shape)
                count = math.prod(r.stop - r.start for r in region)
                found = flat_boxes(start, start + count, src_shape)
                pending.append((region, len(found)))
                yield from found

        parts: list[np.ndarray] = []
        for _, (block,) in run.stream(boxes(), [source]):
            parts.append(np.asarray(block).reshape(-1))
            region, count = pending[0]
            if len(parts) < count:
                continue
            pending.popleft()
            flat = parts[0] if count == 1 else np.concatenate(parts)
            parts = []
            emit(region, flat.reshape(tuple(r.stop - r.start for r in region)))

    def forward(self, run: Run) -> None:
        (shape,) = self.in_shapes
        self._copy_runs(run, run.inputs[0], shape, self.output_shape, run.write)

    def backward(self, run: Run) -> None:
        if not run.wants_grad(0):
            return
        (shape,) = self.in_shapes

        def add(region: Region, block: np.ndarray) -> None:
            run.accumulate(0, region, block)

        self._copy_runs(run, cotangent(run), self.output_shape, shape, add)
