"""A :class:`~oocarr.engine.op.CustomOp`'s passes as tasks: one per independent part
(:meth:`~oocarr.engine.op.CustomOp.parts`, a softmax's row panel), each reopening the inputs
by locator.  A forward part writes its output tiles, whole chunks of a pending output that
takes parallel writers, itself (the calling process commits the output when every part is
done); a backward part returns its gradient blocks, added into the targets in part order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from oocarr.store import pages
from oocarr.store.buffers import aligned_empty
from oocarr.store.locator import Locator

from . import device
from .compile import cached
from .heap import trim
from .io import TASK_BUFFERS, Operand, prefetched
from .op import CustomOp, Region
from .stats import IOCounts
from .tasks import opened
from .tiles import crop_to, pad

if TYPE_CHECKING:
    from collections.abc import Sequence
    from contextlib import AbstractContextManager

    from .op import Reader

__all__ = ["CustomGradTask", "CustomPartTask", "RunTools"]


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


@dataclass(frozen=True, eq=False)
class CustomGradTask:
    """One part of a custom op's backward pass: the gradient blocks of its regions.

    Attributes
    ----------
    op : CustomOp
        The op (class, input shapes and parameters).
    inputs : tuple
        A :class:`~oocarr.store.locator.Locator` per stored input, the array per in-memory one.
    readers : tuple
        The output's cotangent, then the forward output when the op ``needs_output``, each
        by locator or value as ``inputs``.
    part : Any
        One of the op's :meth:`~oocarr.engine.op.CustomOp.parts`, planned for the backward pass.
    wanted : tuple of bool
        Whether each input's gradient is needed.
    """

    op: CustomOp
    inputs: tuple[Locator | np.ndarray, ...]
    readers: tuple[Locator | np.ndarray, ...]
    part: Any
    wanted: tuple[bool, ...]

    def run(self, counts: IOCounts | None = None) -> list[tuple[int, Region, np.ndarray]]:
        """``(input index, region, gradient)`` in the order the op accumulates them."""
        with opened(self.inputs) as values, opened(self.readers) as readers:
            operands = [Operand(v, counts, TASK_BUFFERS) for v in values]
            g, *out = (Operand(v, counts, TASK_BUFFERS) for v in readers)
            run = _PartRun(self.op, operands, None, counts, self.wanted)
            run.g, run.out = g, (out[0] if out else None)
            self.op.backward_part(run, self.part)
        return run.grads


class RunTools:
    """What every :class:`~oocarr.engine.op.Run` does the same way: stream blocks with the
    next region read ahead, compile block functions once per op, pad and crop edge tiles.
    Needs ``self.op``."""

    op: CustomOp

    def stream(
        self, regions: Iterable[Region], operands: Sequence[Reader]
    ) -> Iterator[tuple[Region, list[np.ndarray]]]:
        """``(region, [operand blocks])`` per region, the next region's blocks read in the
        background while the caller computes."""
        return prefetched(regions, lambda r: [o.read(r) for o in operands])

    @staticmethod
    def regions(shape: tuple[int, ...], tile: tuple[int, ...]) -> Iterator[Region]:
        """The regions of ``shape`` cut in ``tile``s, in C order."""
        return pages.tile_regions(shape, tile)

    def jit(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``jax.jit(fn)``, compiled once per op and parameters (keyed by ``fn``'s name)."""
        return cached((self.op.block_key, fn.__name__), fn)

    @staticmethod
    def put(value: Any) -> Any:
        """``value`` on the engine's device, where the functions of :meth:`jit` compute."""
        return device.put(value)

    @staticmethod
    def empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An uninitialised array of its own mapping from 1 MiB (:func:`aligned_empty`)."""
        return aligned_empty(tuple(shape), dtype)

    @staticmethod
    def release() -> None:
        """The heap's freed memory handed back to the system (``malloc_trim``)."""
        trim()

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
        self,
        op: CustomOp,
        inputs: list[Operand],
        target: Any,
        counts: IOCounts | None,
        wanted: tuple[bool, ...] = (),
    ) -> None:
        self.op, self._target, self._counts = op, target, counts
        self.inputs: Sequence[Reader] = inputs
        self.g: Reader | None = None
        self.out: Reader | None = None
        self._wanted = wanted
        self.grads: list[tuple[int, Region, np.ndarray]] = []

    def write(self, region: Region, tile: np.ndarray) -> None:
        value = np.asarray(tile).astype(self._target.dtype, copy=False)
        self._target.write_region(region, value)
        if self._counts is not None:
            self._counts.count_written(value.nbytes)

    def wants_grad(self, i: int) -> bool:
        return i < len(self._wanted) and self._wanted[i]

    # The calling process planned the part (its tiles sized from the budget there), and its
    # output tiles go to a parallel writer: what needs either is not a part's to give.
    def tile_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        raise _not_in_part("tile_shape")

    def written(self, region: Region) -> np.ndarray:
        raise _not_in_part("written")

    def temporary(self, shape: tuple[int, ...], dtype: Any) -> AbstractContextManager[Any]:
        raise _not_in_part("temporary")

    def accumulate(self, i: int, region: Region, grad: np.ndarray) -> None:
        if self.wants_grad(i):
            self.grads.append((i, region, np.asarray(grad)))


def _not_in_part(member: str) -> NotImplementedError:
    return NotImplementedError(
        f"run.{member} is not available to forward_part/backward_part (a part runs as a task: "
        "plan it in parts, in the calling process)"
    )
