"""The engine: the op contract, the memory model, the tiled loops and their I/O.

Layer rules (docs/architecture.md): the engine imports the page-store layer
(:mod:`oocarr.store`) and :mod:`oocarr.errors`, nothing above; ops import
:mod:`oocarr.engine.op` only.
"""

from .compile import BlockFunction
from .io import Operand, prefetched
from .op import BlockParallelOp, CustomOp, Plan, Run
from .run import CustomRun, OOCAlgorithm

__all__ = [
    "BlockFunction",
    "BlockParallelOp",
    "CustomOp",
    "CustomRun",
    "OOCAlgorithm",
    "Operand",
    "Plan",
    "Run",
    "prefetched",
]
