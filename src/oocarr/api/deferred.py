"""Elementwise ops that compute nothing when called: their result reads its tiles on demand.

``deferred("multiply", x, np.float32(0.5))`` is a ``DiskArray`` whose storage is a fused
expression (see :mod:`oocarr.engine.fused`): a consumer (a reduction, ``batches``, an
indexing read, another op) reads the stored inputs' matching tiles and evaluates the chain
in one jitted function per tile.  Calling it reads and writes nothing, so a chain built when
a dataset is opened (the xarray backend's CF decoding) costs nothing until it is used.

The stored inputs must outlive the result: open them from storage (not eager results in
scratch, which are deleted with their ``DiskArray``).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from numpy.typing import DTypeLike

from oocarr.engine.fused import Leaf, fused_locator
from oocarr.errors import InvalidArgumentError
from oocarr.jaxlayer.disk_array import DiskArray
from oocarr.ops.elementwise import (
    BINARY,
    BITWISE,
    CASTS,
    COMPARISON,
    MATH,
    MATH_BINARY,
    PREDICATES,
    UNARY,
    Elementwise,
    Where,
)

from .storage import open as open_array

__all__ = ["deferred", "deferred_cast"]

_OPS: dict[str, type[Elementwise]] = {
    cls.name: cls
    for group in (UNARY, BINARY, COMPARISON, MATH, MATH_BINARY, PREDICATES, BITWISE, CASTS)
    for cls in group.values()
} | {"where": Where}


def deferred(op: str, *args: DiskArray | np.generic | np.ndarray) -> DiskArray:
    """``op`` applied elementwise to ``args`` (NumPy broadcasting), computed when read.

    Parameters
    ----------
    op : str
        An elementwise op's name: ``"multiply"``, ``"add"``, ``"equal"``, ``"where"``,
        ``"logical_or"``, ``"astype_float32"`` ...
    *args : DiskArray or NumPy scalar
        Stored arrays (opened from storage) and small constants; a constant's dtype
        takes part in the result's, as a NumPy array's would (pass ``np.float32(0.5)``,
        not ``0.5``, to keep ``float32``).

    Returns
    -------
    DiskArray
        Nothing is read or written until its tiles are.

    Raises
    ------
    InvalidArgumentError
        When ``op`` names no elementwise op, or no argument is a ``DiskArray``.

    Examples
    --------
    >>> import numpy as np, oocarr, os, tempfile
    >>> x = oocarr.save(np.array([1, 2, 7], "i2"), os.path.join(tempfile.mkdtemp(), "x.npy"))
    >>> with oocarr.io_stats() as stats:
    ...     y = deferred("multiply", deferred_cast(x, "float32"), np.float32(0.5))
    >>> stats.total.bytes_read, y.dtype, oocarr.to_numpy(y)
    (0, dtype('float32'), array([0.5, 1. , 3.5], dtype=float32))
    """
    cls = _OPS.get(op)
    if cls is None:
        raise InvalidArgumentError(
            f"{op!r} is not an elementwise op; use one of {', '.join(sorted(_OPS))}"
        )
    stored = [a for a in args if isinstance(a, DiskArray)]
    if not stored:
        raise InvalidArgumentError(
            f"deferred({op!r}, ...) needs a stored array among its arguments; call "
            f"oocarr.{op} on in-memory values"
        )
    shape = np.broadcast_shapes(*(np.shape(a) for a in args))
    leaves = [
        Leaf.stored(a.store.locator, a.shape) if isinstance(a, DiskArray) else Leaf.const(a)
        for a in args
    ]
    dtype = jax.eval_shape(cls.fn, *(_abstract(a) for a in args)).dtype
    return open_array(fused_locator(cls, leaves, shape, dtype))


def deferred_cast(x: DiskArray, dtype: DTypeLike) -> DiskArray:
    """``x`` cast to ``dtype`` when read (as :func:`oocarr.astype`, 64-bit types 32-bit
    without ``jax_enable_x64``); ``x`` itself when it has that dtype already.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.array([1, 2], "i2"))
    >>> deferred_cast(x, "float32").dtype, deferred_cast(x, "int16") is x
    (dtype('float32'), True)
    """
    target = np.dtype(jax.dtypes.canonicalize_dtype(np.dtype(dtype)))
    if np.dtype(x.dtype) == target:
        return x
    return deferred(f"astype_{target.name}", x)


def _abstract(value: Any) -> Any:
    if isinstance(value, DiskArray):
        return jax.ShapeDtypeStruct(value.shape, jax.dtypes.canonicalize_dtype(value.dtype))
    return np.asarray(value)
