"""Block-level op definitions: math only, no I/O and no JAX internals."""

from .base import BlockParallelOp, Plan

__all__ = ["BlockParallelOp", "Plan"]
