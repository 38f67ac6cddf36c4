"""The types of oocarr's public signatures, for annotating code that calls it.

``ArrayLike`` is what an op takes (a stored array, a JAX or NumPy array, a NumPy or Python
scalar), ``Result`` what most ops return: a ``DiskArray`` in scratch storage, or a ``jax.Array``
for a 0-d result and under ``jax.jit``/``jax.grad`` where a function returns a JAX value.

Examples
--------
>>> import numpy as np, oocarr
>>> from oocarr import ArrayLike, Result
>>> def double(x: ArrayLike) -> Result:
...     return oocarr.multiply(x, 2)
>>> np.asarray(double(oocarr.from_numpy(np.ones(2, "f4"))))
array([2., 2.], dtype=float32)
"""

from __future__ import annotations

from oocarr.jaxlayer.disk_array import (
    AnyArray,
    ArrayLike,
    DiskArray,
    DTypeLike,
    Result,
    Shape,
    ShapeLike,
)

__all__ = ["AnyArray", "ArrayLike", "DTypeLike", "DiskArray", "Result", "Shape", "ShapeLike"]
