"""A :class:`~oocarr.engine.op.CustomOp`'s forward pass as tasks: one per independent part
(:meth:`~oocarr.engine.op.CustomOp.parts`, a softmax's row panel), each reopening the inputs
by locator and writing its part's output tiles, whole chunks of a pending output that takes
parallel writers, itself.  The calling process commits the output when every part is done.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from oocarr.store.locator import Locator

from .compile import cached
from .io import TASK_BUFFERS, Operand, prefetched
from .op import CustomOp, Region
from .stats import IOCounts
from .tasks import opened
from .tiles import crop_to, pad

__all__ = ["CustomPartTask", "RunTools"]


@dataclass(frozen=True, eq=False)
class CustomPartTask:
    """One part of a custom op's forward pass, written through the output's parallel writer.

    Attributes
    ----------
    op : CustomOp
        The op (class, input shapes and parameters).
    inputs : tuple
        A :class:`~oocarr.store.locator.Locator` per stored input, the array per in-memory one.
    part : Any
        One of the op's :meth:`~oocarr.engine.op.CustomOp.parts`.
    writer : Any
        The output's :meth:`~oocarr.store.blocked.BlockedArray.parallel_writer`.
    """

    op: CustomOp
    inputs: tuple[Locator | np.ndarray, ...]
    part: Any
    writer: Any

    def run(self, counts: IOCounts | None = None) -> None:
        """Write the part's output tiles (inputs read by locator, reads and writes counted)."""
        with opened(self.inputs) as values:
            operands = [Operand(v, counts, TASK_BUFFERS) for v in values]
            target = self.writer.open()
            try:
                self.op.forward_part(_PartRun(self.op, operands, target, counts), self.part)
            finally:
                target.close()


class RunTools:
    """What every :class:`~oocarr.engine.op.Run` does the same way: stream blocks with the
    next region read ahead, compile block functions once per op, pad and crop edge tiles.
    Needs ``self.op``."""

    op: CustomOp

    def stream(
        self, regions: Iterable[Region], operands: list[Operand]
    ) -> Iterator[tuple[Region, list[np.ndarray]]]:
        """``(region, [operand blocks])`` per region, the next region's blocks read in the
        background while the caller computes."""
        return prefetched(regions, lambda r: [o.read(r) for o in operands])

    def jit(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``jax.jit(fn)``, compiled once per op and parameters (keyed by ``fn``'s name)."""
        return cached((self.op.block_key, fn.__name__), fn)

    @staticmethod
    def pad(block: np.ndarray, shape: tuple[int, ...], value: float = 0.0) -> np.ndarray:
        """``block`` padded with ``value`` to ``shape`` (so edge tiles reuse one compilation)."""
        return pad(block, tuple(shape), "constant", value)

    @staticmethod
    def crop(array: Any, region: Region) -> np.ndarray:
        """``array`` cut back to the shape of ``region``."""
        return crop_to(np.asarray(array), tuple(r.stop - r.start for r in region))


class _PartRun(RunTools):
    """The :class:`~oocarr.engine.op.Run` a part's task gives the op: tiles written at once."""

    def __init__(
        self, op: CustomOp, inputs: list[Operand], target: Any, counts: IOCounts | None
    ) -> None:
        self.op, self.inputs, self._target, self._counts = op, inputs, target, counts
        self.g = self.out = None

    def write(self, region: Region, tile: np.ndarray) -> None:
        value = np.asarray(tile).astype(self._target.dtype, copy=False)
        self._target.write_region(region, value)
        if self._counts is not None:
            self._counts.count_written(value.nbytes)

    def wants_grad(self, i: int) -> bool:
        return False
