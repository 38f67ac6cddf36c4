"""Parameter checkpoints: a pytree of arrays and scalars saved to any driver, atomically.

Layout of a checkpoint at ``URL`` (a container: ``ckpt.h5``, ``ckpt.zarr``,
a directory, or a group inside one, ``run.h5#/checkpoints``)::

    slot0/tree      the commit record: JSON (as uint8 data) with the tree's
                    structure, leaf dtypes and kinds, and a generation number
    slot0/members   JSON list of the arrays that may exist in the slot
    slot0/params/…  one array per array leaf, named after its path in the tree
    slot1/…         the same, for the other generation

Members are addressed through the driver (:meth:`BlockedArray.member_url`):
``ckpt.h5#/slot0/params/dense/w`` in HDF5 and Zarr, ``ckpt/slot0/params/dense/w.npy``
for a directory of ``.npy`` files.

A save writes into the slot that does not hold the latest checkpoint: it
first removes that slot's ``tree``, then writes the arrays (in place when a
member of the same shape and dtype is there from two saves ago), and
creates the new ``tree`` last.  Every driver creates an array atomically,
so the new checkpoint appears all at once, and a save that fails or is
interrupted leaves the previous checkpoint, in the other slot, untouched.
:func:`load_params` reads the slot whose ``tree`` has the highest generation.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Mapping
from typing import Any

import jax
import ml_dtypes
import numpy as np

from oocarr.api.storage import copy_tiles, save
from oocarr.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    InvalidStoreError,
    InvalidUrlError,
    NotFoundError,
    OocarrError,
    UnknownDriverError,
    UnsupportedDtypeError,
)
from oocarr.jaxlayer.disk_array import DiskArray
from oocarr.store import registry
from oocarr.store.blocked import BlockedArray
from oocarr.store.dtypes import as_dtype, dtype_token
from oocarr.store.locator import Locator, is_local, split_url
from oocarr.store.pages import DEFAULT_PAGE_BYTES
from oocarr.store.scratch import scratch_locator
from oocarr.store.storage_errors import storage_error

__all__ = ["save_params", "load_params"]

FORMAT = "oocarr.params"
VERSION = 1
SLOTS = ("slot0", "slot1")
_TREE, _MEMBERS, _PARAMS = "tree", "members", "params"
#: Fresh names tried for a leaf whose name is held by a group of an earlier tree.
_RENAMES = 8
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


# ----------------------------------------------------------------------
# The container and its members
# ----------------------------------------------------------------------
class _Root:
    """The container a checkpoint lives in, and its members by name."""

    def __init__(
        self,
        url: str | os.PathLike,
        driver: str | None,
        storage_options: Mapping[str, Any] | None,
    ) -> None:
        self.url = os.fspath(url)
        self.container, self.inner = split_url(self.url)
        self.options = dict(storage_options or {})
        self.cls = self._driver(driver)

    def _driver(self, name: str | None) -> type[BlockedArray]:
        """The named driver, else the one that claims the container (a driver claiming
        it by its own suffix first), else memmap for a local path and fsspec for a URL."""
        if name is not None:
            return registry.storage_driver(name)
        container, inner, options = self.container, self.inner, self.options
        for listing in (False, True):
            try:
                return registry.guess_driver(container, inner, options, listing=listing)
            except UnknownDriverError:
                continue
        # A container that does not exist yet and names no format: the scratch defaults.
        fallback = "memmap" if is_local(container) else "fsspec"
        try:
            return registry.get_driver(fallback)
        except UnknownDriverError:
            raise UnknownDriverError(
                f"cannot tell which driver stores a checkpoint at {self.url!r}; pass driver=NAME",
                url=self.url,
            ) from None

    def locator(self, name: str) -> Locator:
        container, inner = split_url(self.cls.member_url(self.container, self.inner, name))
        return self.cls.locate(container, inner, self.options)

    def exists(self, name: str) -> bool:
        return self.cls.exists(self.locator(name))

    def open(self, name: str, mode: str = "r") -> BlockedArray:
        return self.cls.open(self.locator(name), mode)

    def delete(self, name: str) -> None:
        self.cls.delete(self.locator(name))

    def read_json(self, name: str) -> Any:
        """The JSON document stored as the uint8 data of member ``name`` (``None`` if absent)."""
        if not self.exists(name):
            return None
        store = self.open(name)
        try:
            return json.loads(store.read_region(None).tobytes().decode("utf-8"))
        finally:
            store.close()

    def write_json(self, name: str, doc: Any) -> None:
        data = np.frombuffer(json.dumps(doc, allow_nan=True).encode("utf-8"), np.uint8)
        self.write(name, data, compression=None)

    def write(self, name: str, value: np.ndarray | BlockedArray, *, compression: Any) -> None:
        """Create member ``name`` holding ``value`` (replacing what is there on commit)."""
        locator = self.locator(name)
        self.cls.prepare_member(locator)
        store = self.cls.create(
            locator, value.shape, value.dtype, compression=compression, overwrite=True
        )
        with store:
            _fill(store, value)

    def overwrite(self, name: str, value: np.ndarray | BlockedArray, stored: np.dtype) -> bool:
        """Write ``value`` into member ``name`` in place when it exists with this shape and
        stored dtype (no new allocation: an HDF5 file does not grow); False otherwise."""
        locator = self.locator(name)
        if not self.cls.exists(locator):
            return False
        store = self.cls.open(locator, "r+")
        try:
            same = (store.dtype.name, store.dtype.itemsize) == (stored.name, stored.itemsize)
            if store.shape != tuple(value.shape) or not same:
                return False
            _fill(store, value)
        finally:
            store.close()
        return True


def _fill(store: BlockedArray, value: np.ndarray | BlockedArray) -> None:
    if isinstance(value, BlockedArray):
        copy_tiles(value, store, DEFAULT_PAGE_BYTES)
    else:
        store.write_region(None, value.astype(store.dtype, copy=False))


# ----------------------------------------------------------------------
# The tree as JSON
# ----------------------------------------------------------------------
def _token(dtype: np.dtype) -> str:
    """A name that :func:`_parse_token` turns back into ``dtype`` (byte order kept)."""
    try:
        return dtype_token(as_dtype(dtype))
    except UnsupportedDtypeError:
        if dtype.kind == "V" and getattr(ml_dtypes, dtype.name, None) is not None:
            return dtype.name  # float8_e4m3fn, int4 ...: ml_dtypes types JAX uses
        raise InvalidArgumentError(
            f"cannot save an array of dtype {dtype}: a checkpoint holds numbers "
            "(bool, integers, floats, complex, bfloat16 and the other ml_dtypes)"
        ) from None


def _parse_token(token: str) -> np.dtype:
    extra = getattr(ml_dtypes, token, None)
    return np.dtype(extra) if extra is not None else as_dtype(token)


class _Encoder:
    """Turns a pytree into JSON and a list of ``(member name, array)`` leaves (to be stored
    with ``compression``)."""

    def __init__(self, compression: Any = None) -> None:
        self.leaves: list[tuple[str, Any]] = []
        self.compression = compression

    def encode(self, node: Any, name: str, where: str) -> Any:
        if isinstance(node, (DiskArray, BlockedArray, jax.Array, np.ndarray, np.generic)):
            return self._leaf(node, name, where)
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, complex):
            return {"complex": [node.real, node.imag]}
        if isinstance(node, Mapping):
            keys = list(node)
            for key in keys:
                if isinstance(key, bool) or not isinstance(key, (str, int)):
                    raise InvalidArgumentError(
                        f"cannot save the dict at {where or 'the root'}: its key {key!r} is a "
                        f"{type(key).__name__}; checkpoints take str and int keys"
                    )
            parts = _member_names([str(k) for k in keys])
            return {
                "dict": [
                    [k, self.encode(node[k], f"{name}/{p}", f"{where}[{k!r}]")]
                    for k, p in zip(keys, parts)
                ]
            }
        if isinstance(node, (list, tuple)):
            fields = getattr(type(node), "_fields", None) if isinstance(node, tuple) else None
            members = _member_names(list(fields)) if fields is not None else range(len(node))
            items = [
                self.encode(v, f"{name}/{p}", f"{where}[{i}]")
                for i, (v, p) in enumerate(zip(node, members))
            ]
            if fields is not None:
                cls = type(node)
                return {
                    "namedtuple": f"{cls.__module__}:{cls.__qualname__}",
                    "fields": list(fields),
                    "items": items,
                }
            return {"tuple" if isinstance(node, tuple) else "list": items}
        raise InvalidArgumentError(
            f"cannot save {type(node).__name__} at {where or 'the root'}: a checkpoint holds "
            "dicts, lists, tuples and namedtuples of arrays, numbers, strings and None; "
            "convert it first (e.g. flax's serialization.to_state_dict)"
        )

    def _leaf(self, node: Any, name: str, where: str) -> dict[str, Any]:
        value: BlockedArray | np.ndarray
        if isinstance(node, DiskArray):
            kind, value = "disk", node.store
        elif isinstance(node, BlockedArray):
            kind, value = "disk", node
        elif isinstance(node, jax.Array):
            if isinstance(node, jax.core.Tracer):
                raise InvalidArgumentError(
                    f"cannot save the traced value at {where or 'the root'}: save_params "
                    "runs outside jax.jit"
                )
            kind, value = "jax", np.asarray(node)
        elif isinstance(node, np.generic):
            kind, value = "scalar", np.asarray(node)
        else:
            kind, value = "numpy", np.asarray(node)
            if not value.flags.c_contiguous:  # (ascontiguousarray would make 0-d arrays 1-d)
                value = np.ascontiguousarray(value)
        self.leaves.append((name, value))
        return {
            "array": name,
            "kind": kind,
            "dtype": _token(np.dtype(value.dtype)),
            "shape": list(value.shape),
        }


def _member_names(keys: list[str]) -> list[str]:
    """A storage-safe, distinct name per key: letters, digits, ``_`` and ``-`` only."""
    names: list[str] = []
    taken: set[str] = set()
    for key in keys:
        base = _UNSAFE.sub("_", key) or "_"
        name, n = base, 1
        while name in taken:
            name, n = f"{base}-{n}", n + 1
        taken.add(name)
        names.append(name)
    return names


def _decode(node: Any, read: Any) -> Any:
    if isinstance(node, dict):
        if "array" in node:
            return read(node)
        if "dict" in node:
            return {k: _decode(v, read) for k, v in node["dict"]}
        if "list" in node:
            return [_decode(v, read) for v in node["list"]]
        if "tuple" in node:
            return tuple(_decode(v, read) for v in node["tuple"])
        if "namedtuple" in node:
            items = [_decode(v, read) for v in node["items"]]
            return _namedtuple(node["namedtuple"], node["fields"])(*items)
        if "complex" in node:
            return complex(*node["complex"])
        raise InvalidStoreError(f"unknown checkpoint node {sorted(node)}")
    return node


def _namedtuple(path: str, fields: list[str]) -> type:
    """The namedtuple class saved (imported by module and name), or a stand-in with its
    name and fields when it cannot be imported."""
    import collections
    import importlib

    module, _, qualname = path.partition(":")
    try:
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        if list(getattr(cls, "_fields", ())) == fields:
            return cls
    except (ImportError, AttributeError):
        pass
    return collections.namedtuple(qualname.rsplit(".", 1)[-1], fields)


# ----------------------------------------------------------------------
# Slots
# ----------------------------------------------------------------------
def _slot_record(root: _Root, slot: str) -> dict[str, Any] | None:
    """The commit record of ``slot``, or ``None`` when it has none (or an unreadable one)."""
    try:
        doc = root.read_json(f"{slot}/{_TREE}")
    except (InvalidStoreError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return None
    return doc


def _latest(root: _Root) -> tuple[str, dict[str, Any]] | None:
    records = [(slot, _slot_record(root, slot)) for slot in SLOTS]
    valid = [(slot, doc) for slot, doc in records if doc is not None]
    return max(valid, key=lambda item: item[1]["generation"], default=None)


def _bits(dtype: np.dtype) -> np.dtype | None:
    """Unsigned integers of ``dtype``'s width (how a dtype a driver refuses is stored)."""
    return np.dtype(f"u{dtype.itemsize}") if dtype.itemsize in (1, 2, 4, 8) else None


def _write_leaf(
    root: _Root,
    slot: str,
    value: np.ndarray | BlockedArray,
    compression: Any,
    leaf: dict[str, Any],
    used: set[str],
) -> None:
    """Store one leaf, as raw bits of the same width when the driver refuses its dtype."""
    dtype = np.dtype(value.dtype)
    targets = [dtype]
    bits = _bits(dtype)
    if not isinstance(value, BlockedArray) and bits is not None:
        targets = [dtype, bits] if root.cls.supports_dtype(dtype) else [bits]
    for target in targets:
        data = value if target == dtype or isinstance(value, BlockedArray) else value.view(target)
        try:
            _write_member(root, slot, data, target, compression, leaf, used)
        except UnsupportedDtypeError:
            if target is targets[-1]:
                raise
            continue
        if target != dtype:
            leaf["stored"] = _token(target)
        return


def _write_member(
    root: _Root,
    slot: str,
    data: np.ndarray | BlockedArray,
    stored: np.dtype,
    compression: Any,
    leaf: dict[str, Any],
    used: set[str],
) -> None:
    """Write ``data`` at the leaf's member name, in place where it can; under a fresh name
    (recorded in ``leaf``) when an empty group left by an earlier tree holds the name."""
    base = name = leaf["array"]
    suffixes = itertools.count(1)
    for attempt in range(_RENAMES + 1):
        member = f"{slot}/{name}"
        try:
            if not root.overwrite(member, data, stored):
                root.write(member, data, compression=compression)
        except (InvalidUrlError, AlreadyExistsError):
            if attempt == _RENAMES:
                raise
            name = next(n for n in (f"{base}-{i}" for i in suffixes) if n not in used)
            used.add(name)
            continue
        leaf["array"] = name
        return


def save_params(
    params: Any,
    url: str | os.PathLike,
    *,
    driver: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    compression: Any = None,
) -> None:
    """Save a parameter pytree to ``url``, atomically.

    Parameters
    ----------
    params : pytree
        Nested dicts (str or int keys), lists, tuples and namedtuples whose
        leaves are arrays (JAX, NumPy, ``DiskArray``), NumPy scalars, Python
        numbers, strings or ``None``.  Any numeric dtype, bfloat16 included;
        where a driver cannot store a dtype (bfloat16 in HDF5 or ``.npy``)
        its bits are stored as unsigned integers of the same width.
    url : str
        The checkpoint's container: ``ckpt.h5``, ``run.h5#/checkpoints`` (a
        group of an HDF5 file), ``ckpt.zarr``, ``memory://ckpt.zarr``,
        ``s3://bucket/ckpt.zarr``, or a directory (``.npy`` files).
    driver : str, optional
        The driver; by default the one that claims ``url``, else memmap
        (``.npy`` files) for a local path and fsspec (Zarr) for a URL.
    storage_options : mapping, optional
        Passed to fsspec.
    compression : str, optional
        For the arrays, where the driver offers it (``"gzip"``, ``"zstd"``).

    Notes
    -----
    The checkpoint keeps two generations in two slots and overwrites the
    older one: a save that fails or is interrupted leaves the previous
    checkpoint readable, and the new one appears only once complete.
    Saves to one URL must not run concurrently.  HDF5 has no journal, so
    a process killed while it writes can damage the file (a raised error
    cannot); use a Zarr or ``.npy`` checkpoint where that matters.

    Examples
    --------
    >>> import tempfile, os, numpy as np, jax.numpy as jnp, oocarr
    >>> url = os.path.join(tempfile.mkdtemp(), "ckpt.h5")
    >>> params = {"dense": {"w": jnp.ones((3, 2), jnp.bfloat16), "b": np.zeros(2)}, "step": 7}
    >>> oocarr.save_params(params, url)
    >>> back = oocarr.load_params(url)
    >>> back["dense"]["w"].dtype, back["dense"]["b"].dtype, back["step"]
    (dtype(bfloat16), dtype('float64'), 7)
    """
    root = _Root(url, driver, storage_options)
    encoder = _Encoder(compression)
    tree = encoder.encode(params, _PARAMS, "")
    try:
        _save(root, encoder, tree)
    except OSError as err:
        if isinstance(err, OocarrError):
            raise
        raise storage_error("saving the checkpoint at", root.url, err) from err


def _save(root: _Root, encoder: _Encoder, tree: Any) -> None:
    """Write the encoded tree into the slot that does not hold the latest checkpoint."""
    compression = encoder.compression
    latest = _latest(root)
    generation = 1 if latest is None else int(latest[1]["generation"]) + 1
    slot = SLOTS[0] if latest is None or latest[0] == SLOTS[1] else SLOTS[1]
    new = [name for name, _ in encoder.leaves]
    try:
        old = root.read_json(f"{slot}/{_MEMBERS}")
    except (InvalidStoreError, ValueError, UnicodeDecodeError):
        old = None
    old = [n for n in old if isinstance(n, str)] if isinstance(old, list) else []
    root.delete(f"{slot}/{_TREE}")
    for name in sorted(set(old) - set(new)):
        root.delete(f"{slot}/{name}")
    root.write_json(f"{slot}/{_MEMBERS}", new)
    by_name, used = _leaf_records(tree), set(new)
    for name, value in encoder.leaves:
        _write_leaf(root, slot, value, compression, by_name[name], used)
    written = [by_name[name]["array"] for name in new]
    if written != new:  # leaves renamed around groups of an earlier tree
        root.write_json(f"{slot}/{_MEMBERS}", sorted(set(new) | set(written)))
    record = {"format": FORMAT, "version": VERSION, "generation": generation, "tree": tree}
    root.write_json(f"{slot}/{_TREE}", record)


def _leaf_records(node: Any) -> dict[str, dict]:
    """Every leaf record of an encoded tree, by member name."""
    found: dict[str, dict] = {}
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "array" in item:
                found[item["array"]] = item
            else:
                stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def load_params(
    url: str | os.PathLike,
    *,
    driver: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Any:
    """Read the latest checkpoint saved at ``url`` by :func:`save_params`.

    Returns
    -------
    pytree
        The same structure (dict key order, lists, tuples, namedtuples),
        with each leaf as what was saved: ``jax.Array`` for JAX arrays,
        NumPy arrays and scalars for NumPy ones, Python values as they were,
        and ``DiskArray`` leaves as new ``DiskArray``\\ s in scratch storage
        (copied tile by tile, never whole in memory).  Dtypes and values are
        exactly those saved.

    Raises
    ------
    NotFoundError
        When ``url`` holds no complete checkpoint.
    InvalidStoreError
        When the checkpoint's arrays are missing or do not match its record.

    Examples
    --------
    >>> import tempfile, os, numpy as np, oocarr
    >>> url = os.path.join(tempfile.mkdtemp(), "ckpt.zarr")
    >>> oocarr.save_params([np.arange(3), (1.5, None)], url)
    >>> oocarr.load_params(url)
    [array([0, 1, 2]), (1.5, None)]
    """
    root = _Root(url, driver, storage_options)
    latest = _latest(root)
    if latest is None:
        raise NotFoundError(
            f"no checkpoint at {root.url}: it has no complete slot record "
            f"({', '.join(s + '/' + _TREE for s in SLOTS)}); save one with oocarr.save_params",
            url=root.url,
        )
    slot, record = latest
    if record.get("version", 0) > VERSION:
        raise InvalidStoreError(
            f"the checkpoint at {root.url} has format version {record['version']}; this "
            f"oocarr reads up to {VERSION}: upgrade oocarr",
            url=root.url,
        )

    def read(leaf: dict[str, Any]) -> Any:
        return _read_leaf(root, slot, leaf)

    return _decode(record["tree"], read)


def _read_leaf(root: _Root, slot: str, leaf: dict[str, Any]) -> Any:
    name = f"{slot}/{leaf['array']}"
    dtype = _parse_token(leaf["dtype"])
    stored = _parse_token(leaf.get("stored", leaf["dtype"]))
    try:
        store = root.open(name)
    except NotFoundError:
        raise InvalidStoreError(
            f"the checkpoint at {root.url} lists {name} but it is missing; the checkpoint "
            "was damaged after it was saved",
            url=root.url,
        ) from None
    try:
        if store.shape != tuple(leaf["shape"]) or store.dtype.itemsize != stored.itemsize:
            raise InvalidStoreError(
                f"{store.url} has shape {store.shape} and dtype {store.dtype}, but the "
                f"checkpoint at {root.url} recorded {tuple(leaf['shape'])} and {stored}",
                url=root.url,
            )
        if leaf["kind"] == "disk":
            copy = save(store, scratch_locator())
            return DiskArray(copy.store, owned=True)
        data = store.read_region(None)
    finally:
        store.close()
    data = data.astype(stored, copy=False).view(dtype) if stored != dtype else data
    if data.dtype != dtype:
        data = data.astype(dtype)
    if leaf["kind"] == "jax":
        return jax.device_put(data)
    if leaf["kind"] == "scalar":
        return data[()]
    return data
