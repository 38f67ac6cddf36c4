"""CF decoding of stored variables as oocarr ops: xarray's decoders decide, oocarr computes.

xarray's own coders (``decode_cf_variable``) run on a stand-in of the variable's shape and
dtype that holds no data; the steps they chain (``_Unsigned``, ``_FillValue`` and
``missing_value`` masks, ``scale_factor`` and ``add_offset``) are then replayed on the
``DiskArray`` as deferred elementwise ops (:mod:`oocarr.api.deferred`).  The attributes,
encoding and dtypes are xarray's, and nothing is read until the data is.  A variable whose
decoding has a step that is not one of those (times, timedeltas, characters) is left to
xarray: :func:`decode_stored` answers ``None``.

Without ``jax_enable_x64`` a decoding to ``float64`` computes in ``float32``, as every oocarr
op does.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr
from xarray.coding import common, variables
from xarray.conventions import decode_cf_variable
from xarray.core import indexing

from oocarr.jaxlayer.disk_array import DiskArray

from .deferred import deferred, deferred_cast

__all__ = ["decode_stored"]

Step = functools.partial
# xarray's private pieces this module recognises; one that a later xarray renames leaves its
# variables to xarray's own lazy decoding.
_LAZY = getattr(common, "_ElementwiseFunctionArray", None)
_MASK = getattr(variables, "_apply_mask", None)
_SCALE = getattr(variables, "_scale_offset_decoding", None)


def decode_stored(
    name: Hashable,
    dims: Sequence[Hashable],
    data: DiskArray,
    attrs: Mapping[str, Any],
    **decoders: Any,
) -> xr.Variable | None:
    """The variable ``data`` decoded as xarray's ``decode_cf_variable(**decoders)`` decodes
    it, its data a ``DiskArray`` of deferred ops; ``None`` when a step of the decoding is not
    elementwise masking, scaling or an unsigned view.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> x = oocarr.from_numpy(np.array([1, 2, -1], "i2"))
    >>> attrs = {"scale_factor": np.float32(0.5), "_FillValue": np.int16(-1), "units": "m"}
    >>> v = decode_stored("x", ("t",), x, attrs, mask_and_scale=True)
    >>> type(v.data).__name__, v.dtype, oocarr.to_numpy(v.data), v.attrs
    ('DiskArray', dtype('float32'), array([0.5, 1. , nan], dtype=float32), {'units': 'm'})
    >>> decode_stored("t", ("t",), x, {"units": "days since 2000-01-01"}) is None
    True
    """
    stand_in = np.broadcast_to(np.zeros((), data.dtype), data.shape)
    decoded = decode_cf_variable(name, xr.Variable(dims, stand_in, dict(attrs)), **decoders)
    steps = _steps(decoded._data, stand_in)
    if steps is None:
        return None
    out = data
    for step in reversed(steps):
        out = _replay(step, out)
    return xr.Variable(dims, out, decoded.attrs, decoded.encoding, fastpath=True)


def _steps(array: Any, stand_in: np.ndarray) -> list[Step] | None:
    """The elementwise steps wrapped around ``stand_in``, outermost first; ``None`` when
    something else is there (a step this module cannot replay, an indexing)."""
    steps = []
    while array is not stand_in:
        if _LAZY is not None and isinstance(array, _LAZY):
            if not (isinstance(array.func, Step) and _known(array.func)):
                return None
            steps.append(array.func)
        elif isinstance(array, indexing.LazilyIndexedArray):
            if not _whole(array.key, stand_in.ndim):
                return None
        elif not isinstance(array, indexing.NumpyIndexingAdapter):
            return None
        array = array.array
    return steps


def _whole(key: Any, ndim: int) -> bool:
    return len(key.tuple) == ndim and all(k == slice(None) for k in key.tuple)


def _known(step: Step) -> bool:
    if step.func in (_MASK, _SCALE):
        return step.func is not None
    return step.func is np.asarray and set(step.keywords) == {"dtype"}


def _replay(step: Step, x: DiskArray) -> DiskArray:
    """One of xarray's steps on ``x``, as deferred ops."""
    kw = step.keywords
    if step.func is np.asarray:  # the _Unsigned view: an integer cast wraps as NumPy's does
        return deferred_cast(x, kw["dtype"])
    x = deferred_cast(x, kw["dtype"])
    dtype = np.dtype(x.dtype)
    if step.func is _MASK:
        masked = None
        for value in kw["encoded_fill_values"]:
            hit = deferred("equal", x, np.asarray(value).astype(dtype)[()])
            masked = hit if masked is None else deferred("logical_or", masked, hit)
        if masked is None:
            return x
        return deferred("where", masked, np.asarray(kw["decoded_fill_value"], dtype)[()], x)
    if kw["scale_factor"] is not None:
        x = deferred("multiply", x, np.asarray(kw["scale_factor"], dtype)[()])
    if kw["add_offset"] is not None:
        x = deferred("add", x, np.asarray(kw["add_offset"], dtype)[()])
    return x
