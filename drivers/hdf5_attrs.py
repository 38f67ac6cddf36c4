"""How the HDF5 driver stores a dataset's attributes, and reads back any file's.

Strings, numbers, booleans and rectangular lists of one of those types are
stored as native HDF5 attributes; dicts, ``None``, empty, mixed and ragged
lists are stored as JSON text and their names recorded in the attribute
:data:`JSON_ATTRS` so they read back as what was written.  Attributes that
other tools wrote read back as JSON values.

The attributes of HDF5's dimension-scale API (``DIMENSION_LIST``,
``DIMENSION_LABELS``, ``REFERENCE_LIST``) are no user attributes: they are
read and written as the dataset's dimension names
(:func:`load_dimension_names`, :func:`store_dimension_names`), and
replacing the attributes keeps them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

import h5py
import numpy as np

from oocarr.errors import InvalidArgumentError, OocarrError
from oocarr.store import Locator, jsonable_attrs

__all__ = [
    "JSON_ATTRS",
    "load_attrs",
    "load_dimension_names",
    "load_native_attrs",
    "store_attrs",
    "store_dimension_names",
]

#: Attribute listing the names of attributes stored as JSON text.
JSON_ATTRS = "_oocarr_json"

_INT64 = np.iinfo(np.int64)
#: Attributes HDF5's dimension-scale API keeps on a dataset.
DIMENSION_ATTRS = frozenset({"DIMENSION_LIST", "DIMENSION_LABELS", "REFERENCE_LIST"})
#: The names netCDF-C and h5netcdf give dimensions a file does not name.
_PHONY = re.compile(r"phony_dim_\d+")


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def _native_list(value: list) -> np.ndarray | None:
    """A list as an HDF5-native array when it is rectangular and of one scalar type."""
    leaves = list(_leaves(value))
    if not leaves:
        return None
    kinds = {type(v) for v in leaves}
    if kinds == {bool}:
        dtype: Any = np.bool_
    elif kinds == {int}:
        if not all(_INT64.min <= v <= _INT64.max for v in leaves):
            return None
        dtype = np.int64
    elif kinds == {float}:
        dtype = np.float64
    elif kinds == {str}:
        dtype = h5py.string_dtype()
    else:
        return None
    try:
        arr = np.array(value, dtype=dtype)
    except (ValueError, TypeError, OverflowError):
        return None
    return arr if arr.size == len(leaves) else None


def _encode_attr(value: Any) -> tuple[Any, bool]:
    """``(stored value, stored as JSON)`` for one JSON-able attribute value."""
    if isinstance(value, str):
        return value, False
    if isinstance(value, bool):
        return np.bool_(value), False
    if isinstance(value, int) and _INT64.min <= value <= _INT64.max:
        return np.int64(value), False
    if isinstance(value, float):
        return np.float64(value), False
    if isinstance(value, list):
        arr = _native_list(value)
        if arr is not None:
            return arr, False
    return json.dumps(value), True


def store_attrs(dset: h5py.Dataset, attrs: dict[str, Any], locator: Locator) -> None:
    """Replace ``dset``'s attributes by ``attrs``, natively where HDF5 can hold them, else as JSON.

    Examples
    --------
    >>> import h5py, numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "a.h5")
    >>> with h5py.File(path, "w") as f:
    ...     dset = f.create_dataset("x", data=np.arange(3))
    ...     attrs = {"axes": [1, 2], "meta": {"a": None}}
    ...     store_attrs(dset, attrs, Locator.make("hdf5", path, "/x"))
    ...     dset.attrs["axes"], dset.attrs["meta"], list(dset.attrs[JSON_ATTRS])
    (array([1, 2]), '{"a": null}', ['meta'])
    """
    if JSON_ATTRS in attrs:
        raise InvalidArgumentError(
            f"the attribute name {JSON_ATTRS!r} is reserved by the HDF5 driver "
            f"({locator.full_url}); rename it",
            url=locator.full_url,
        )
    for name in list(dset.attrs):
        if name not in DIMENSION_ATTRS:
            del dset.attrs[name]
    as_json = []
    for name, value in attrs.items():
        if name in DIMENSION_ATTRS:
            continue  # the dimension names are kept apart, by store_dimension_names
        stored, is_json = _encode_attr(value)
        dset.attrs[name] = stored
        if is_json:
            as_json.append(name)
    if as_json:
        dset.attrs[JSON_ATTRS] = np.array(as_json, dtype=h5py.string_dtype())


def load_attrs(dset: h5py.Dataset) -> dict[str, Any]:
    """``dset``'s attributes as JSON-able values, those stored as JSON decoded.

    Examples
    --------
    >>> import h5py, numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "a.h5")
    >>> with h5py.File(path, "w") as f:
    ...     dset = f.create_dataset("x", data=np.arange(3))
    ...     store_attrs(dset, {"meta": {"a": [1]}}, Locator.make("hdf5", path, "/x"))
    ...     dset.attrs["scale"] = np.float32(0.5)  # as another tool writes it
    ...     load_attrs(dset)
    {'meta': {'a': [1]}, 'scale': 0.5}
    """
    out: dict[str, Any] = {}
    for name, value, as_json in _stored_attrs(dset):
        if isinstance(value, h5py.Empty):
            value = None
        elif as_json and isinstance(value, (str, bytes)):
            try:
                value = json.loads(value)
            except ValueError:
                pass
        try:
            out[name] = _jsonable(name, value)
        except OocarrError:
            out[name] = str(value)
    return out


def load_native_attrs(obj: h5py.HLObject) -> dict[str, Any]:
    """The attributes of a dataset or group as netCDF readers give them: one-element arrays as
    NumPy scalars (``float32`` stays ``float32``), text as ``str``, other arrays as arrays;
    oocarr's JSON-stored attributes decoded, empty ones and the dimension-scale API's left out.

    Examples
    --------
    >>> import h5py, numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "a.h5")
    >>> with h5py.File(path, "w") as f:
    ...     f.attrs["title"] = b"run"
    ...     f.attrs["scale_factor"] = np.array([0.5], "f4")
    ...     f.attrs["valid_range"] = np.array([0, 9], "i2")
    ...     load_native_attrs(f)
    {'scale_factor': np.float32(0.5), 'title': 'run', 'valid_range': array([0, 9], dtype=int16)}
    """
    out: dict[str, Any] = {}
    for name, value, as_json in _stored_attrs(obj):
        if isinstance(value, h5py.Empty):
            continue
        value = _native(value)
        if as_json and isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                pass
        out[name] = value
    return out


def _stored_attrs(obj: h5py.HLObject) -> Iterator[tuple[str, Any, bool]]:
    """Each attribute of ``obj`` but the bookkeeping of oocarr's JSON marker and of the
    dimension-scale API: its name, its value (a message where it cannot be read), and whether
    oocarr stored it as JSON text."""
    attrs = obj.attrs
    try:
        marked = {str(n) for n in np.atleast_1d(attrs[JSON_ATTRS]).tolist()}
    except Exception:
        marked = set()
    for name in attrs:
        if name == JSON_ATTRS or name in DIMENSION_ATTRS:
            continue
        try:
            value = attrs[name]
        except Exception as err:
            yield name, f"<unreadable HDF5 attribute: {err}>", False
            continue
        yield name, value, name in marked


def _native(value: Any) -> Any:
    """One attribute value as netCDF4-python gives it."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "OSU":
            items = [_native(v) for v in value.ravel().tolist()]
            return items[0] if len(items) == 1 else items
        if value.size == 1:
            return value.reshape(()).item() if value.dtype.kind == "b" else value.ravel()[0]
    return value


def _jsonable(name: str, value: Any) -> Any:
    return jsonable_attrs({name: value})[name]


def load_dimension_names(dset: h5py.Dataset) -> tuple[str | None, ...] | None:
    """The name of each axis of ``dset``: for a netCDF-4 variable the dimension scale attached
    to it (its dataset's basename), else HDF5's dimension label; ``None`` for an axis with
    neither (or a netCDF "phony" dimension), and ``None`` for a scalar.

    Examples
    --------
    >>> import h5py, numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "d.h5")
    >>> with h5py.File(path, "w") as f:
    ...     x = f.create_dataset("x", data=np.zeros((2, 3)))
    ...     f["time"] = np.arange(2.0)
    ...     f["time"].make_scale()
    ...     x.dims[0].attach_scale(f["time"])
    ...     x.dims[1].label = "lat"
    ...     load_dimension_names(x), load_dimension_names(f["time"])
    (('time', 'lat'), ('time',))
    """
    if not dset.shape:
        return None
    attrs = dset.attrs
    scales = "DIMENSION_LIST" in attrs
    own = _is_scale(dset) and dset.ndim == 1 and not scales
    names = []
    for dim in dset.dims:
        name = _basename(dset.name) if own else _scale_name(dim) if scales else None
        if name is None:
            name = _label(dim)
        names.append(None if name is None or _PHONY.fullmatch(name) else name)
    return tuple(names)


def store_dimension_names(dset: h5py.Dataset, names: Sequence[str | None]) -> None:
    """Record ``names`` (one per axis, ``None`` for none) as ``dset``'s HDF5 dimension labels.

    Examples
    --------
    >>> import h5py, numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "d.h5")
    >>> with h5py.File(path, "w") as f:
    ...     x = f.create_dataset("x", data=np.zeros((2, 3)))
    ...     store_dimension_names(x, ("time", None))
    ...     [d.label for d in x.dims]
    ['time', '']
    """
    for dim, name in zip(dset.dims, names):
        dim.label = name or ""


def _is_scale(dset: h5py.Dataset) -> bool:
    try:
        value = dset.attrs.get("CLASS")
    except Exception:
        return False
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.item()
    return value in (b"DIMENSION_SCALE", "DIMENSION_SCALE")


def _basename(name: str | None) -> str | None:
    return name.rsplit("/", 1)[-1] or None if name else None


def _scale_name(dim: Any) -> str | None:
    """The basename of the first dimension scale attached to axis ``dim``, if any."""
    try:
        if len(dim) == 0:
            return None
        return _basename(dim[0].name)
    except Exception:  # a dangling or unreadable reference
        return None


def _label(dim: Any) -> str | None:
    try:
        label = dim.label
    except Exception:
        return None
    if isinstance(label, bytes):
        label = label.decode("utf-8", "replace")
    return label or None
