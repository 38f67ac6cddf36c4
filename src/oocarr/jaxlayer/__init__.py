"""The JAX layer: how a stored array travels through ``jit`` and ``grad``.

- :mod:`~oocarr.jaxlayer.disk_array`: ``DiskArray`` and its hijax type;
- :mod:`~oocarr.jaxlayer.callbacks`: the marker, ``io_callback`` and budget-carrying helpers
  every primitive uses;
- :mod:`~oocarr.jaxlayer.make_op`: a block-level op made a differentiable primitive.
"""

from . import make_op  # registers DiskArrayType's gradient arithmetic (register_vspace)

__all__ = ["make_op"]
