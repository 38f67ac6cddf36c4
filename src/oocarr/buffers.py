"""Buffers that JAX can use without copying them.

XLA's CPU client takes a NumPy array as is only when its data is aligned to
64 bytes; NumPy's own large allocations are aligned to 16, so every block
handed to a jitted block function would be copied once more, a second
tile-sized buffer per input outside the planner's count.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["ALIGNMENT", "aligned_empty"]

#: Byte alignment XLA's CPU client needs to use a host buffer without a copy.
ALIGNMENT = 64


def aligned_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a 64-byte boundary.

    Examples
    --------
    >>> a = aligned_empty((3, 5), "float32")
    >>> a.shape, a.dtype, a.ctypes.data % ALIGNMENT, a.flags.c_contiguous
    ((3, 5), dtype('float32'), 0, True)
    """
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start : start + nbytes].view(dtype).reshape(shape)
