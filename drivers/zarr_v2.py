"""Zarr v2 metadata: ``.zarray``, ``.zattrs``, ``.zgroup`` and consolidated ``.zmetadata``.

A v2 array is the same grid of chunks as a v3 one under other names: the
dtype is a NumPy type string (``"<f4"``, ``">i2"``, ``"|u1"``), chunks
are stored in ``order`` C or F, encoded by ``filters`` then one
``compressor`` (numcodecs configurations), under keys ``0.1`` (or ``0/1``
with ``dimension_separator: "/"``).  Missing chunks read as
``fill_value`` (``null`` reads as zeros, as in zarr-python).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, overload

import numpy as np

from oocarr.store import Locator, check_layout, corrupt
from oocarr_drivers.zarr_codecs import CodecPipeline, parse_v2_codecs
from oocarr_drivers.zarr_meta import (
    DATA_TYPES,
    ArrayMeta,
    KeyEncoding,
    decode_fill_value,
    encode_fill_value,
    parse_dimension_names,
    zarr_type_name,
)

__all__ = [
    "ARRAY_KEY",
    "ATTRS_KEY",
    "CONSOLIDATED_KEY",
    "DIMENSIONS_ATTR",
    "GROUP_KEY",
    "array_document",
    "group_document",
    "parse_array",
    "parse_json",
]

ARRAY_KEY = ".zarray"
ATTRS_KEY = ".zattrs"
GROUP_KEY = ".zgroup"
CONSOLIDATED_KEY = ".zmetadata"
#: The attribute xarray keeps a v2 array's dimension names in.
DIMENSIONS_ATTR = "_ARRAY_DIMENSIONS"


@overload
def parse_json(raw: bytes, what: str, locator: Locator) -> dict[str, Any]: ...
@overload
def parse_json(raw: bytes | None, what: str, locator: Locator) -> dict[str, Any] | None: ...
def parse_json(raw: bytes | None, what: str, locator: Locator) -> dict[str, Any] | None:
    """A v2 metadata document (``None`` for absent bytes).

    Raises
    ------
    InvalidStoreError
        When it is not a UTF-8 JSON object.
    """
    if raw is None:
        return None
    try:
        doc = json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise corrupt(locator, f"{what} is not JSON ({err})") from None
    if not isinstance(doc, dict):
        raise corrupt(locator, f"{what} does not hold a JSON object")
    return doc


def _dtype(value: Any, locator: Locator) -> tuple[np.dtype, bool]:
    """The in-memory dtype of a v2 type string, and whether it is stored big endian."""
    if not isinstance(value, str):
        raise corrupt(
            locator,
            f".zarray dtype {value!r} is a structured type, which oocarr does not store; "
            "read it with zarr-python",
        )
    try:
        dtype = np.dtype(value)
    except TypeError:
        raise corrupt(locator, f".zarray dtype {value!r} is not a NumPy type string") from None
    name = zarr_type_name(dtype)
    if name is None:
        raise corrupt(
            locator,
            f".zarray dtype {value!r} ({dtype}) is not a numeric type oocarr stores; read it "
            "with zarr-python",
        )
    return DATA_TYPES[name], dtype.byteorder == ">" and dtype.itemsize > 1


def _fill_value(value: Any, dtype: np.dtype, locator: Locator) -> Any:
    if value is None:
        return dtype.type(0)
    if isinstance(value, str) and value not in ("NaN", "Infinity", "-Infinity"):
        try:
            raw = base64.standard_b64decode(value.encode("ascii"))
        except (binascii.Error, UnicodeEncodeError):
            raw = b""
        if len(raw) == dtype.itemsize:
            return np.frombuffer(raw, dtype)[0]
    try:
        return decode_fill_value(value, dtype)
    except (ValueError, OverflowError) as err:
        raise corrupt(locator, f".zarray fill_value {value!r} ({err})") from None


def _ints(value: Any, what: str, locator: Locator, minimum: int) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in value
    ):
        raise corrupt(locator, f".zarray {what} {value!r} is not a list of integers >= {minimum}")
    return tuple(value)


def parse_array(doc: dict[str, Any], attrs: dict[str, Any] | None, locator: Locator) -> ArrayMeta:
    """Interpret a ``.zarray`` document (and the array's ``.zattrs``).

    Raises
    ------
    InvalidStoreError
        When a field is missing or malformed.
    UnsupportedCompressionError
        When a filter or the compressor is not a numcodecs codec.

    Examples
    --------
    >>> doc = {"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": ">i2",
    ...        "compressor": None, "fill_value": None, "order": "C", "filters": None}
    >>> meta = parse_array(doc, {"_ARRAY_DIMENSIONS": ["x"]}, Locator.make("fsspec", "/a.zarr"))
    >>> meta.dtype, meta.codecs.big_endian, meta.key_encoding.key((1,)), meta.dimension_names
    (dtype('int16'), True, '1', ('x',))
    """
    if doc.get("zarr_format") != 2:
        raise corrupt(locator, f".zarray says zarr_format {doc.get('zarr_format')!r}, not 2")
    missing = [k for k in ("shape", "chunks", "dtype", "compressor", "fill_value") if k not in doc]
    if missing:
        raise corrupt(locator, f".zarray lacks the required field(s) {', '.join(missing)}")
    shape = _ints(doc["shape"], "shape", locator, 0)
    chunks = _ints(doc["chunks"], "chunks", locator, 1)
    if len(chunks) != len(shape):
        raise corrupt(locator, f".zarray chunks {list(chunks)} do not match shape {list(shape)}")
    dtype, big_endian = _dtype(doc["dtype"], locator)
    check_layout(shape, dtype.itemsize, chunks, locator.full_url)
    separator = doc.get("dimension_separator", ".")
    if separator not in (".", "/"):
        raise corrupt(locator, f".zarray dimension_separator {separator!r} is not '.' or '/'")
    codecs = parse_v2_codecs(
        doc["compressor"],
        doc.get("filters"),
        dtype,
        big_endian,
        doc.get("order", "C"),
        len(shape),
        locator,
    )
    attrs = dict(attrs or {})
    names = parse_dimension_names(attrs.pop(DIMENSIONS_ATTR, None), len(shape))
    return ArrayMeta(
        shape=shape,
        dtype=dtype,
        chunks=chunks,
        fill_value=_fill_value(doc["fill_value"], dtype, locator),
        key_encoding=KeyEncoding("v2", separator),
        codecs=codecs,
        attrs=attrs,
        document=doc,
        zarr_format=2,
        dimension_names=names,
    )


def array_document(
    shape: tuple[int, ...],
    dtype: np.dtype,
    chunks: tuple[int, ...],
    fill_value: Any,
    codecs: CodecPipeline,
    separator: str = ".",
) -> dict[str, Any]:
    """The ``.zarray`` of an array oocarr writes (C order, little endian).

    Examples
    --------
    >>> doc = array_document((4,), np.dtype("<f4"), (2,), np.nan, CodecPipeline(np.dtype("<f4")))
    >>> doc["dtype"], doc["fill_value"], doc["compressor"], doc["dimension_separator"]
    ('<f4', 'NaN', None, '.')
    """
    compressor, filters = codecs.v2_json()
    return {
        "zarr_format": 2,
        "shape": list(shape),
        "chunks": list(chunks),
        "dtype": dtype.str,
        "compressor": compressor,
        "fill_value": encode_fill_value(fill_value, dtype),
        "order": "C",
        "filters": filters,
        "dimension_separator": separator,
    }


def group_document() -> dict[str, Any]:
    """The ``.zgroup`` of a group."""
    return {"zarr_format": 2}
