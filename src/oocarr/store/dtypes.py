"""Which dtypes oocarr stores, and how they are named in metadata and ``info()``."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from oocarr.errors import UnsupportedDtypeError

__all__ = ["as_dtype", "dtype_name", "dtype_token", "byte_order", "is_bfloat16", "BFLOAT16"]

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
_NAMED_EXTRA = {"bfloat16": BFLOAT16}


def is_bfloat16(dtype: np.dtype) -> bool:
    """True for ``ml_dtypes.bfloat16`` (the dtype JAX uses for ``jnp.bfloat16``).

    Examples
    --------
    >>> is_bfloat16(as_dtype("bfloat16")), is_bfloat16(np.dtype("f2"))
    (True, False)
    """
    return np.dtype(dtype) == BFLOAT16


def as_dtype(obj: Any, *, url: str | None = None) -> np.dtype:
    """Parse a dtype and check oocarr can store it.

    Accepted: bool, signed and unsigned integers, float16/32/64,
    complex64/128 in either byte order, and bfloat16 (by name or as
    ``jnp.bfloat16``).  Strings, objects, records and datetimes are refused.

    Examples
    --------
    >>> as_dtype("float32"), as_dtype(">i2"), as_dtype("bfloat16")
    (dtype('float32'), dtype('>i2'), dtype(bfloat16))
    >>> try:
    ...     as_dtype(("i4", -1))
    ... except UnsupportedDtypeError as err:
    ...     print(str(err)[:30])
    ('i4', -1) is not a dtype (inv
    """
    if isinstance(obj, str) and obj in _NAMED_EXTRA:
        return _NAMED_EXTRA[obj]
    try:
        dtype = np.dtype(obj)
    except (TypeError, ValueError, OverflowError) as err:
        raise UnsupportedDtypeError(
            f"{obj!r} is not a dtype ({err}); use a NumPy dtype such as 'float32'", url=url
        ) from None
    if is_bfloat16(dtype) or dtype.kind in "biufc":
        return dtype
    raise UnsupportedDtypeError(
        f"dtype {dtype} cannot be stored by oocarr"
        f"{' at ' + url if url else ''}: use a boolean, integer, float or complex dtype",
        url=url,
    )


def dtype_name(dtype: np.dtype) -> str:
    """The dtype's name without byte order: ``'float32'``, ``'bfloat16'``.

    Examples
    --------
    >>> dtype_name(np.dtype(">f4"))
    'float32'
    """
    return np.dtype(dtype).name


def byte_order(dtype: np.dtype) -> str:
    """``'little'``, ``'big'`` or ``'none'`` (single-byte types).

    Examples
    --------
    >>> byte_order(np.dtype(">f4")), byte_order(np.dtype("u1"))
    ('big', 'none')
    """
    dtype = np.dtype(dtype)
    if dtype.itemsize == 1 or dtype.byteorder == "|":
        return "none"
    if dtype.byteorder == "=":
        return "little" if np.little_endian else "big"
    return "little" if dtype.byteorder == "<" else "big"


def dtype_token(dtype: np.dtype) -> str:
    """A string that :func:`as_dtype` parses back to exactly ``dtype`` (byte order kept).

    Examples
    --------
    >>> dtype_token(np.dtype(">f4")), dtype_token(BFLOAT16)
    ('>f4', 'bfloat16')
    """
    dtype = np.dtype(dtype)
    return "bfloat16" if is_bfloat16(dtype) else dtype.str
