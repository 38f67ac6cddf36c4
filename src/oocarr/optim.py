"""Public face of the optax adapter for stored parameters (:mod:`oocarr.train.optim`).

Examples
--------
>>> import oocarr, oocarr.train.optim
>>> oocarr.optim.blockwise is oocarr.train.optim.blockwise
True
"""

from oocarr.train.optim import BlockwiseState, apply_updates, blockwise

__all__ = ["BlockwiseState", "apply_updates", "blockwise"]
