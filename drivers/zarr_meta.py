"""Zarr v3 ``zarr.json`` metadata: parsing what any writer produced, writing what oocarr writes.

The parser accepts the parts of the Zarr v3 core specification that the
fsspec driver can serve (regular chunk grids, ``default`` and ``v2``
chunk key encodings, the data types :data:`DATA_TYPES` lists) and turns
everything else into an error that names the URL and the unsupported
feature.  The codec list is handed to :mod:`oocarr_drivers.zarr_codecs`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from oocarr.errors import InvalidStoreError
from oocarr.store import BFLOAT16, Locator, check_layout, corrupt, is_bfloat16
from oocarr_drivers.zarr_codecs import CodecPipeline, parse_codecs
from oocarr_drivers.zarr_shards import ShardLayout, parse_sharding

__all__ = [
    "DATA_TYPES",
    "ArrayMeta",
    "KeyEncoding",
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "array_document",
    "decode_fill_value",
    "encode_fill_value",
    "group_document",
    "parse_array",
    "parse_dimension_names",
    "parse_document",
    "read_document",
    "zarr_type_name",
]

#: Zarr v3 data type names and the (little-endian) NumPy dtype each is read as.
DATA_TYPES: dict[str, np.dtype] = {
    "bool": np.dtype("bool"),
    "int8": np.dtype("i1"),
    "int16": np.dtype("<i2"),
    "int32": np.dtype("<i4"),
    "int64": np.dtype("<i8"),
    "uint8": np.dtype("u1"),
    "uint16": np.dtype("<u2"),
    "uint32": np.dtype("<u4"),
    "uint64": np.dtype("<u8"),
    "float16": np.dtype("<f2"),
    "float32": np.dtype("<f4"),
    "float64": np.dtype("<f8"),
    "complex64": np.dtype("<c8"),
    "complex128": np.dtype("<c16"),
    "bfloat16": BFLOAT16,
}

#: Largest ``zarr.json`` read: metadata is small, and a larger file is corrupt or hostile.
MAX_DOCUMENT_BYTES = 16 * 2**20
#: Deepest nesting of lists and objects in ``zarr.json`` (attributes included).
MAX_DEPTH = 256

_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def zarr_type_name(dtype: np.dtype) -> str | None:
    """The Zarr v3 ``data_type`` for ``dtype`` (either byte order), or ``None``.

    Examples
    --------
    >>> zarr_type_name(np.dtype(">f4")), zarr_type_name(BFLOAT16), zarr_type_name(np.dtype("U3"))
    ('float32', 'bfloat16', None)
    """
    dtype = np.dtype(dtype)
    if is_bfloat16(dtype):
        return "bfloat16"
    if dtype.kind not in "biufc":
        return None
    name = dtype.newbyteorder("<").name
    return name if name in DATA_TYPES else None


@dataclass(frozen=True)
class KeyEncoding:
    """A chunk key encoding: ``default`` (``c/0/1``) or ``v2`` (``0.1``).

    Examples
    --------
    >>> KeyEncoding("default", "/").key((0, 1)), KeyEncoding("v2", ".").key((0, 1))
    ('c/0/1', '0.1')
    >>> KeyEncoding("default", "/").key(()), KeyEncoding("v2", ".").key(())
    ('c', '0')
    """

    name: str = "default"
    separator: str = "/"

    def key(self, index: tuple[int, ...]) -> str:
        """The store key (relative to the array's prefix) of chunk ``index``."""
        if self.name == "default":
            return self.separator.join(["c", *map(str, index)])
        return self.separator.join(map(str, index)) if index else "0"

    def to_json(self) -> dict[str, Any]:
        """The ``chunk_key_encoding`` entry of ``zarr.json``."""
        return {"name": self.name, "configuration": {"separator": self.separator}}


@dataclass
class ArrayMeta:
    """What the driver needs from an array's ``zarr.json``.

    ``document`` is the parsed JSON itself, kept so that rewriting
    ``zarr.json`` (to change attributes) preserves fields oocarr does not
    interpret, such as ``dimension_names``.
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    chunks: tuple[int, ...]
    fill_value: Any
    key_encoding: KeyEncoding
    codecs: CodecPipeline
    attrs: dict[str, Any]
    document: dict[str, Any] = field(default_factory=dict)
    #: 2 for ``.zarray`` arrays, 3 for ``zarr.json`` ones.
    zarr_format: int = 3
    #: The sharding layout (``chunks`` are then the inner chunks), or ``None``.
    shards: ShardLayout | None = None
    dimension_names: tuple[str | None, ...] | None = None

    @property
    def chunk_nbytes(self) -> int:
        """Decoded size of one (full) chunk in bytes (an inner chunk when sharded)."""
        return math.prod(self.chunks) * self.dtype.itemsize

    @property
    def grid_chunks(self) -> tuple[int, ...]:
        """The shape of one stored object: a shard when sharded, else a chunk."""
        return self.chunks if self.shards is None else self.shards.shard_shape


# ----------------------------------------------------------------------
# Fill values
# ----------------------------------------------------------------------
def _float_from_json(value: Any, dtype: np.dtype) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a float")
    if isinstance(value, (int, float)):
        with np.errstate(over="ignore"):
            out = dtype.type(value)
        if math.isfinite(value) and not np.isfinite(out):
            raise ValueError(f"{value!r} is out of range for {dtype.name}")
        return out
    if isinstance(value, str) and value in _SPECIAL_FLOATS:
        return dtype.type(_SPECIAL_FLOATS[value])
    if isinstance(value, str) and value.lower().startswith("0x"):
        bits = np.array(int(value, 16), dtype=f"<u{dtype.itemsize}")
        return bits.view(dtype)[()]
    raise ValueError(f"{value!r} is not a float")


def decode_fill_value(value: Any, dtype: np.dtype) -> Any:
    """Turn a ``fill_value`` from ``zarr.json`` into a NumPy scalar of ``dtype``.

    Raises
    ------
    ValueError
        When the value does not fit the data type.

    Examples
    --------
    >>> decode_fill_value("NaN", np.dtype("f4")), decode_fill_value("0x3f800000", np.dtype("f4"))
    (np.float32(nan), np.float32(1.0))
    >>> decode_fill_value([1.0, "-Infinity"], np.dtype("c8"))
    np.complex64(1-infj)
    """
    kind = dtype.kind
    if kind == "b":
        if isinstance(value, bool) or value in (0, 1):
            return np.bool_(bool(value))
        raise ValueError(f"{value!r} is not a boolean")
    if kind in "iu":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{value!r} is not an integer")
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise ValueError(f"{value} is out of range for {dtype.name}")
        return dtype.type(value)
    if kind == "c":
        if not isinstance(value, (list, tuple)) or len(value) != 2:
            raise ValueError(f"{value!r} is not a [real, imaginary] pair")
        part = np.dtype(f"<f{dtype.itemsize // 2}")
        re, im = (_float_from_json(v, part) for v in value)
        return dtype.type(complex(re, im))
    return _float_from_json(value, dtype)


def _float_to_json(value: float) -> Any:
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def encode_fill_value(value: Any, dtype: np.dtype) -> Any:
    """The JSON form of a fill value, as the Zarr v3 specification writes it.

    Examples
    --------
    >>> encode_fill_value(np.nan, np.dtype("f8")), encode_fill_value(3, np.dtype("u1"))
    ('NaN', 3)
    >>> encode_fill_value(1j, np.dtype("c8")), encode_fill_value(0, np.dtype("bool"))
    ([0.0, 1.0], False)
    """
    kind = dtype.kind
    if kind == "b":
        return bool(value)
    if kind in "iu":
        return int(value)
    if kind == "c":
        value = complex(value)
        return [_float_to_json(value.real), _float_to_json(value.imag)]
    return _float_to_json(value)


# ----------------------------------------------------------------------
# Parsing
# ----------------------------------------------------------------------
def _name_and_config(entry: Any, what: str, locator: Locator) -> tuple[str, dict[str, Any]]:
    """Split a Zarr extension-point entry (``"name"`` or ``{"name", "configuration"}``)."""
    if isinstance(entry, str):
        return entry, {}
    if isinstance(entry, dict) and isinstance(entry.get("name"), str):
        config = entry.get("configuration") or {}
        if not isinstance(config, dict):
            raise corrupt(locator, f"the {what} configuration {config!r} is not an object")
        return entry["name"], config
    raise corrupt(locator, f"the {what} entry {entry!r} has no name")


def _int_list(value: Any, what: str, locator: Locator, minimum: int) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in value
    ):
        raise corrupt(locator, f"{what} {value!r} is not a list of integers >= {minimum}")
    return tuple(value)


def _unsupported(locator: Locator, detail: str) -> InvalidStoreError:
    return InvalidStoreError(
        f"{locator.full_url} uses {detail}, which oocarr's fsspec driver does not read; "
        "rewrite the array without it (for example with zarr-python) to use it with oocarr",
        url=locator.full_url,
    )


def read_document(fs: Any, key: str, locator: Locator) -> bytes | None:
    """The bytes of the metadata document at ``key`` on fsspec filesystem ``fs``, ``None``
    when there is none; at most :data:`MAX_DOCUMENT_BYTES` are read.

    Raises
    ------
    InvalidStoreError
        When the document is larger than :data:`MAX_DOCUMENT_BYTES`.

    Examples
    --------
    >>> import fsspec
    >>> fs = fsspec.filesystem("memory")
    >>> fs.pipe_file("/doc-example/zarr.json", b"{}")
    >>> read_document(fs, "/doc-example/zarr.json", Locator.make("fsspec", "memory://x"))
    b'{}'
    >>> read_document(fs, "/doc-example/none.json", Locator.make("fsspec", "memory://x"))
    """
    try:
        raw = fs.cat_file(key, start=0, end=MAX_DOCUMENT_BYTES + 1)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise _too_large(locator)
    return raw


def _too_large(locator: Locator) -> InvalidStoreError:
    return corrupt(
        locator,
        f"its zarr.json is larger than {MAX_DOCUMENT_BYTES // 2**20} MiB, which no array's "
        "metadata needs (move large attributes into an array of their own)",
    )


def _depth_problem(doc: Any) -> bool:
    """Whether lists and objects nest deeper than :data:`MAX_DEPTH` (walked without recursion)."""
    pending = [(doc, 1)]
    while pending:
        value, depth = pending.pop()
        if depth > MAX_DEPTH:
            return True
        if isinstance(value, dict):
            pending.extend((v, depth + 1) for v in value.values() if isinstance(v, (dict, list)))
        elif isinstance(value, list):
            pending.extend((v, depth + 1) for v in value if isinstance(v, (dict, list)))
    return False


def parse_document(raw: bytes, locator: Locator) -> dict[str, Any]:
    """Decode ``zarr.json`` bytes into a Zarr v3 node document (array or group).

    Raises
    ------
    InvalidStoreError
        When the bytes are not a UTF-8 JSON object of Zarr v3 metadata, are larger than
        :data:`MAX_DOCUMENT_BYTES`, or nest deeper than :data:`MAX_DEPTH`.

    Examples
    --------
    >>> loc = Locator.make("fsspec", "/a.zarr")
    >>> parse_document(b'{"zarr_format": 3, "node_type": "group"}', loc)["node_type"]
    'group'
    >>> try:
    ...     parse_document(b"[" * 100_000, loc)
    ... except InvalidStoreError as err:
    ...     print(str(err)[:60])
    /a.zarr is not a valid fsspec array: zarr.json is not JSON (
    """
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise _too_large(locator)
    try:
        text = raw.decode("utf-8") if isinstance(raw, (bytes, bytearray, memoryview)) else raw
        doc = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        detail = "nesting too deep" if isinstance(err, RecursionError) else err
        raise corrupt(locator, f"zarr.json is not JSON ({detail})") from None
    if not isinstance(doc, dict):
        raise corrupt(locator, "zarr.json does not hold a JSON object")
    if _depth_problem(doc):
        raise corrupt(locator, f"zarr.json nests lists and objects over {MAX_DEPTH} deep")
    if "zarr_format" not in doc:
        raise corrupt(locator, "zarr.json has no 'zarr_format' field")
    if doc["zarr_format"] != 3 or isinstance(doc["zarr_format"], bool):
        raise corrupt(
            locator,
            f"zarr.json says zarr_format {doc['zarr_format']!r}; only Zarr v3 is supported",
        )
    if doc.get("node_type") not in ("array", "group"):
        raise corrupt(locator, f"zarr.json has node_type {doc.get('node_type')!r}")
    return doc


def parse_array(doc: dict[str, Any], locator: Locator) -> ArrayMeta:
    """Interpret an array node's document.

    Raises
    ------
    InvalidStoreError
        When a required field is missing or malformed, or a feature is not supported.
    UnsupportedCompressionError
        When a codec cannot be decoded.
    """
    if doc.get("node_type") != "array":
        raise InvalidStoreError(
            f"{locator.full_url} is a Zarr group, not an array; address an array inside it "
            "with URL#/name",
            url=locator.full_url,
        )
    missing = [
        k
        for k in ("shape", "data_type", "chunk_grid", "chunk_key_encoding", "fill_value", "codecs")
        if k not in doc
    ]
    if missing:
        raise corrupt(locator, f"zarr.json lacks the required field(s) {', '.join(missing)}")
    shape = _int_list(doc["shape"], "shape", locator, 0)

    type_name, _ = _name_and_config(doc["data_type"], "data_type", locator)
    if type_name not in DATA_TYPES:
        raise _unsupported(locator, f"data type {type_name!r}")
    dtype = DATA_TYPES[type_name]

    grid_name, grid_config = _name_and_config(doc["chunk_grid"], "chunk_grid", locator)
    if grid_name != "regular":
        raise _unsupported(locator, f"the chunk grid {grid_name!r}")
    chunks = _int_list(grid_config.get("chunk_shape"), "chunk_shape", locator, 1)
    if len(chunks) != len(shape):
        raise corrupt(locator, f"chunk_shape {list(chunks)} does not match shape {list(shape)}")
    check_layout(shape, dtype.itemsize, chunks, locator.full_url)

    enc_name, enc_config = _name_and_config(
        doc["chunk_key_encoding"], "chunk_key_encoding", locator
    )
    if enc_name not in ("default", "v2"):
        raise _unsupported(locator, f"the chunk key encoding {enc_name!r}")
    separator = enc_config.get("separator", "/" if enc_name == "default" else ".")
    if separator not in ("/", "."):
        raise corrupt(locator, f"chunk key separator {separator!r} is not '/' or '.'")

    if doc.get("storage_transformers"):
        raise _unsupported(locator, "storage transformers")

    try:
        fill_value = decode_fill_value(doc["fill_value"], dtype)
    except (ValueError, OverflowError) as err:
        raise corrupt(locator, f"fill_value {doc['fill_value']!r} ({err})") from None

    shards = None
    entries = doc["codecs"]
    if (
        isinstance(entries, list)
        and len(entries) == 1
        and isinstance(entries[0], dict)
        and entries[0].get("name") == "sharding_indexed"
    ):
        shards = parse_sharding(entries[0].get("configuration"), chunks, dtype, locator)
        codecs = shards.inner
        chunks = shards.chunk_shape
    else:
        codecs = parse_codecs(entries, dtype, len(shape), locator)
    attrs = doc.get("attributes", {})
    if not isinstance(attrs, dict):
        raise corrupt(locator, f"attributes {attrs!r} is not a JSON object")
    return ArrayMeta(
        shape=shape,
        dtype=dtype,
        chunks=chunks,
        fill_value=fill_value,
        key_encoding=KeyEncoding(enc_name, separator),
        codecs=codecs,
        attrs=dict(attrs),
        document=doc,
        shards=shards,
        dimension_names=parse_dimension_names(doc.get("dimension_names"), len(shape)),
    )


def parse_dimension_names(value: Any, ndim: int) -> tuple[str | None, ...] | None:
    """Axis names from ``dimension_names`` (v3) or ``_ARRAY_DIMENSIONS`` (v2, xarray's), or
    ``None`` when absent or not one string (or null) per axis.

    Examples
    --------
    >>> parse_dimension_names(["t", None], 2), parse_dimension_names(["t"], 2)
    (('t', None), None)
    """
    if (
        not isinstance(value, list)
        or len(value) != ndim
        or not all(v is None or isinstance(v, str) for v in value)
    ):
        return None
    return tuple(value)


# ----------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------
def array_document(
    shape: tuple[int, ...],
    dtype: np.dtype,
    chunks: tuple[int, ...],
    fill_value: Any,
    codecs: list[dict[str, Any]],
    attrs: dict[str, Any],
    dimension_names: tuple[str | None, ...] | None = None,
) -> dict[str, Any]:
    """The ``zarr.json`` document of an array oocarr writes (default keys, ``/`` separator).

    Examples
    --------
    >>> doc = array_document((4,), np.dtype("u1"), (2,), 0, [{"name": "bytes"}], {})
    >>> doc["data_type"], doc["chunk_grid"]["configuration"]["chunk_shape"]
    ('uint8', [2])
    """
    name = zarr_type_name(dtype)
    if name is None:  # supports_dtype refuses such a dtype before an array is created
        raise ValueError(f"Zarr v3 has no data type for {dtype}")
    extra = {} if dimension_names is None else {"dimension_names": list(dimension_names)}
    return extra | {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
        "chunk_key_encoding": KeyEncoding().to_json(),
        "fill_value": encode_fill_value(fill_value, DATA_TYPES[name]),
        "codecs": codecs,
        "attributes": dict(attrs),
    }


def group_document() -> dict[str, Any]:
    """The ``zarr.json`` of an empty group."""
    return {"zarr_format": 3, "node_type": "group", "attributes": {}}
