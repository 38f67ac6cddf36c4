"""Block-level op definitions: math only, no I/O and no JAX internals."""

from oocarr.engine.op import BlockParallelOp, Plan

__all__ = ["BlockParallelOp", "Plan"]
