"""xarray's ``engine="oocarr"``: netCDF-4/HDF5 files and Zarr stores as Datasets of DiskArrays.

``xr.open_dataset(path, engine="oocarr")`` gives a Dataset whose data variables hold
``DiskArray``\\ s: nothing is read when it opens, ``ds[v].mean(dim)``, ``std`` and
arithmetic stream under the memory budget, and ``oocarr.batches(ds[v].data, ...)`` trains
on a variable.  Dimension coordinates are read into memory (xarray indexes them, as with
its other engines).  CF decoding is xarray's (:mod:`oocarr.api.xarray_cf`): masks and
scales become deferred oocarr ops; a variable whose decoding needs more (times) is
decoded by xarray itself, lazily, and its data is not a ``DiskArray``.

The members of a group are found through the driver interface (``list_arrays``,
``group_attrs``, ``native_attrs``, ``dimension_names``, ``masked_fill_value``), so every
driver that lists containers serves the engine.  xarray is imported here only: oocarr
imports without it.
"""

from __future__ import annotations

import base64
import os
import struct
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

import numpy as np
import xarray as xr
from xarray.backends import BackendArray, BackendEntrypoint
from xarray.conventions import decode_cf_variables
from xarray.core import indexing

from oocarr.errors import (
    InvalidArgumentError,
    InvalidStoreError,
    NotFoundError,
    UnknownDriverError,
)
from oocarr.jaxlayer.disk_array import DiskArray
from oocarr.store.blocked import BlockedArray
from oocarr.store.locator import split_url
from oocarr.store.registry import guess_driver, storage_driver

from .storage import open as open_array
from .storage import to_numpy
from .xarray_cf import decode_stored

__all__ = ["OocarrBackendEntrypoint", "open_stored_dataset"]

#: Attributes netCDF-4 keeps for itself on HDF5 objects; netCDF readers do not show them.
_NETCDF_INTERNAL = frozenset(
    {"_Netcdf4Dimid", "_Netcdf4Coordinates", "_nc3_strict", "_NCProperties", "_IsNetcdf4"}
    | {"_SuperblockVersion", "DIMENSION_LIST", "REFERENCE_LIST"}
)
#: The ``NAME`` netCDF-4 gives a dimension that has no variable of its own.
_DIMENSION_ONLY = "This is a netCDF dimension but not a netCDF variable"


class StoredBackendArray(BackendArray):
    """A stored array as xarray's lazily indexed backend array, for the variables whose
    decoding xarray does itself (basic indexing, read on demand).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> a = StoredBackendArray(oocarr.from_numpy(np.arange(6).reshape(2, 3)).store)
    >>> a[indexing.BasicIndexer((1, slice(0, 2)))]
    array([3, 4])
    """

    def __init__(self, store: BlockedArray) -> None:
        self.store = store
        self.shape = store.shape
        self.dtype = np.dtype(store.dtype).newbyteorder("=")

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(
            key, self.shape, indexing.IndexingSupport.BASIC, self._read
        )

    def _read(self, key: tuple[Any, ...]) -> np.ndarray:
        return np.asarray(self.store[key], dtype=self.dtype)


class OocarrBackendEntrypoint(BackendEntrypoint):
    """The ``oocarr`` engine of ``xr.open_dataset`` (entry point ``xarray.backends``).

    Parameters beyond xarray's decoders: ``group`` (a group inside the file or store),
    ``driver`` (an oocarr driver name, when the suffix does not say) and
    ``storage_options`` (fsspec's).  It claims no path on its own (xarray's other engines
    keep theirs) except oocarr's ``container#/group`` URLs.

    Examples
    --------
    >>> OocarrBackendEntrypoint().guess_can_open("data.nc"), "group" in (
    ...     OocarrBackendEntrypoint.open_dataset_parameters)
    (False, True)
    """

    description = (
        "netCDF-4/HDF5 files and Zarr stores as Datasets of oocarr DiskArrays: streamed "
        "reductions and arithmetic, lazy CF decoding"
    )
    url = "docs/xarray.md (in oocarr's repository)"
    open_dataset_parameters = (
        "filename_or_obj",
        "mask_and_scale",
        "decode_times",
        "concat_characters",
        "decode_coords",
        "drop_variables",
        "use_cftime",
        "decode_timedelta",
        "group",
        "driver",
        "storage_options",
    )

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        """Only oocarr's own URLs (``container#/group``), whose container a driver claims."""
        if not isinstance(filename_or_obj, (str, os.PathLike)):
            return False
        try:
            container, inner = split_url(os.fspath(filename_or_obj))
            guess_driver(container, inner)
        except Exception:
            return False
        return bool(inner)

    def open_dataset(  # type: ignore[override]
        self,
        filename_or_obj: str | os.PathLike[str],
        *,
        mask_and_scale: bool | Mapping[str, bool] = True,
        decode_times: Any = True,
        concat_characters: bool | Mapping[str, bool] = True,
        decode_coords: Any = True,
        drop_variables: str | Iterable[Hashable] | None = None,
        use_cftime: Any = None,
        decode_timedelta: Any = None,
        group: str | None = None,
        driver: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> xr.Dataset:
        """See :func:`open_stored_dataset`."""
        return open_stored_dataset(
            filename_or_obj,
            group=group,
            drop_variables=drop_variables,
            driver=driver,
            storage_options=storage_options,
            mask_and_scale=mask_and_scale,
            decode_times=decode_times,
            concat_characters=concat_characters,
            decode_coords=decode_coords,
            use_cftime=use_cftime,
            decode_timedelta=decode_timedelta,
        )


def open_stored_dataset(
    url: str | os.PathLike[str],
    *,
    group: str | None = None,
    drop_variables: str | Iterable[Hashable] | None = None,
    driver: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    **decoders: Any,
) -> xr.Dataset:
    """The group of a netCDF-4/HDF5 file or Zarr store as a Dataset of ``DiskArray``\\ s.

    Parameters
    ----------
    url : str or path
        A file or store (``data.nc``, ``s3://bucket/store.zarr``), or ``container#/group``.
    group : str, optional
        The group to open (the root by default); not with a ``#/group`` URL.
    drop_variables : str or iterable, optional
        Variables left out (not opened).
    driver : str, optional
        The oocarr driver, when the suffix does not tell it (``"hdf5"``, ``"fsspec"``).
    storage_options : mapping, optional
        fsspec options (credentials, endpoints).
    **decoders
        xarray's: ``mask_and_scale``, ``decode_times``, ``concat_characters``,
        ``decode_coords``, ``use_cftime``, ``decode_timedelta``.

    Raises
    ------
    InvalidArgumentError
        When ``url`` is not a path or names an array, not a group.
    NotFoundError
        When the file, store or group does not exist.
    UnknownDriverError
        When no driver claims ``url``.

    Examples
    --------
    >>> import numpy as np, h5py, os, tempfile, oocarr
    >>> path = os.path.join(tempfile.mkdtemp(), "t.nc")
    >>> with h5py.File(path, "w") as f:
    ...     f["x"] = np.arange(4, dtype="i2")
    ...     f["x"].attrs["scale_factor"] = np.float32(0.5)
    >>> ds = open_stored_dataset(path)
    >>> type(ds["x"].data).__name__, ds["x"].dims, oocarr.to_numpy(ds["x"].data).tolist()
    ('DiskArray', ('phony_dim_0',), [0.0, 0.5, 1.0, 1.5])
    """
    if not isinstance(url, (str, os.PathLike)):
        raise InvalidArgumentError(
            f"engine='oocarr' opens a path or URL, not a {type(url).__name__} ({url!r}); "
            "pass the file's path or the store's URL"
        )
    container, inner = split_url(os.fspath(url))
    if group is not None and inner:
        raise InvalidArgumentError(
            f"{os.fspath(url)} names a group after '#' and group={group!r} names another; "
            "give one of them"
        )
    inner = _group_path(group if group is not None else inner)
    options = dict(storage_options or {})
    found = _listing_driver(container, inner, options, driver)
    entries = _group_members(found, container, inner, options)
    drop = {drop_variables} if isinstance(drop_variables, str) else set(drop_variables or ())
    variables: dict[Hashable, xr.Variable] = {}
    stores: list[BlockedArray] = []
    phony = _PhonyDims()
    for entry in entries:
        name = entry["path"].rsplit("/", 1)[-1]
        if name in drop or not isinstance(entry["dtype"], np.dtype):
            continue  # text and types oocarr cannot read are left out
        array = open_array(entry["url"], driver=found.name, storage_options=options)
        variable = _variable(name, array, phony, decoders)
        if variable is not None:
            variables[name] = variable
            stores.append(array.store)
    attrs = _visible(found.group_attrs(container, inner, options))
    attrs = {k: v for k, v in attrs.items() if not k.lower().startswith("_nc")}
    decoded, decoded_attrs, coord_names = decode_cf_variables(
        variables, attrs, drop_variables=drop, **decoders
    )
    dataset = xr.Dataset(decoded, attrs=decoded_attrs)
    dataset = dataset.set_coords(coord_names.intersection(decoded))
    dataset.set_close(_closer(stores))
    return dataset


def _group_path(group: str) -> str:
    parts = [p for p in group.split("/") if p]
    return "/" + "/".join(parts) if parts else ""


def _listing_driver(
    container: str, inner: str, options: dict[str, Any], name: str | None
) -> type[BlockedArray]:
    if name is not None:
        return storage_driver(name)
    try:
        return guess_driver(container, "", options, listing=True)
    except UnknownDriverError:
        raise UnknownDriverError(
            f"engine='oocarr' cannot tell the format of {container!r}: name a netCDF-4/HDF5 "
            "file (.nc, .h5 ...) or a Zarr store (.zarr), or pass driver='hdf5' or "
            "driver='fsspec' (backend_kwargs={'driver': ...})",
            url=container,
        ) from None


def _group_members(
    driver: type[BlockedArray], container: str, inner: str, options: dict[str, Any]
) -> list[dict[str, Any]]:
    """The ``list_arrays`` entries of the arrays directly inside group ``inner``."""
    try:
        entries = driver.list_arrays(container, inner, options)
    except NotFoundError as err:
        if not inner:
            raise
        raise NotFoundError(
            f"no group {inner} in {container} ({err}); pass group= naming one of its groups "
            f"({', '.join(_groups(driver, container, options)) or 'none but the root'})",
            url=container,
        ) from None
    except InvalidStoreError as err:
        raise InvalidStoreError(
            f"engine='oocarr' cannot open {container}: {err}. It opens netCDF-4/HDF5 files "
            "and Zarr v2/v3 stores; open other formats with xarray's own engines "
            "(netCDF-3: engine='scipy')",
            url=container,
        ) from None
    if any(e["path"] == inner and e["kind"] == "array" for e in entries):
        raise InvalidArgumentError(
            f"{container}#{inner} is an array, not a group: open it with "
            f"oocarr.open({container + '#' + inner!r}), or pass the group that holds it",
            url=container,
        )
    return [e for e in entries if e["kind"] == "array" and e["path"].rsplit("/", 1)[0] == inner]


def _groups(driver: type[BlockedArray], container: str, options: dict[str, Any]) -> list[str]:
    try:
        return [
            e["path"] for e in driver.list_arrays(container, "", options) if e["kind"] == "group"
        ]
    except Exception:
        return []


def _variable(
    name: str, array: DiskArray, phony: _PhonyDims, decoders: Mapping[str, Any]
) -> xr.Variable | None:
    """The variable ``name`` (its data ``array``), decoded where oocarr ops can decode it;
    ``None`` for a netCDF dimension that is no variable."""
    store = array.store
    raw = store.native_attrs
    if str(raw.get("NAME", "")).startswith(_DIMENSION_ONLY):
        return None
    attrs = _visible(raw)
    _fill_value(attrs, store)
    dims = phony.name(store.dimension_names, array.shape)
    encoding: dict[str, Any] = {"original_shape": array.shape}
    if store.chunks is not None:
        encoding["preferred_chunks"] = dict(zip(dims, store.chunks))
    if dims == (name,):  # a dimension coordinate: xarray indexes it, in memory
        return xr.Variable(dims, to_numpy(array), attrs, encoding)
    picked = {k: _pick(k, v, name) for k, v in decoders.items() if k != "decode_coords"}
    # oocarr's ops compute on native byte order only: a big-endian variable is xarray's to decode
    native = np.dtype(store.dtype).isnative
    variable = decode_stored(name, dims, array, attrs, **picked) if native else None
    if variable is None:
        data = indexing.LazilyIndexedArray(StoredBackendArray(store))
        return xr.Variable(dims, data, attrs, encoding)
    variable.encoding.update(encoding)
    return variable


#: What a decoder given as a mapping (one setting per variable) means for a variable it omits.
_DEFAULTS = {"mask_and_scale": True, "decode_times": True, "concat_characters": True}


def _pick(decoder: str, value: Any, name: str) -> Any:
    """A decoder's setting for variable ``name`` (xarray takes a mapping per variable)."""
    return value.get(name, _DEFAULTS.get(decoder)) if isinstance(value, Mapping) else value


def _visible(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes netCDF readers show (netCDF-4's own and dimension scales' hidden)."""
    scale = str(attrs.get("CLASS", "")) == "DIMENSION_SCALE"
    return {
        k: v
        for k, v in attrs.items()
        if k not in _NETCDF_INTERNAL and not (scale and k in ("CLASS", "NAME"))
    }


def _fill_value(attrs: dict[str, Any], store: BlockedArray) -> None:
    """``_FillValue`` as xarray's zarr engine reads it: Zarr v2's ``fill_value``, and the
    base64 text a Zarr v3 store's attribute holds for a floating value."""
    masked = store.masked_fill_value
    if masked is not None:
        attrs["_FillValue"] = masked
        return
    value = attrs.get("_FillValue")
    if isinstance(value, str) and np.dtype(store.dtype).kind == "f":
        try:
            attrs["_FillValue"] = struct.unpack("<d", base64.standard_b64decode(value))[0]
        except (ValueError, struct.error):
            pass


class _PhonyDims:
    """Names for axes the storage does not name: ``phony_dim_N``, one per length, as
    netCDF-C names them (two axes of one array get two)."""

    def __init__(self) -> None:
        self._by_length: dict[int, list[str]] = {}
        self._count = 0

    def name(self, names: tuple[str | None, ...] | None, shape: tuple[int, ...]) -> tuple[str, ...]:
        names = names or (None,) * len(shape)
        used: dict[int, int] = {}
        out = []
        for name, length in zip(names, shape):
            if name is None:
                known = self._by_length.setdefault(length, [])
                k = used.get(length, 0)
                if k == len(known):
                    known.append(f"phony_dim_{self._count}")
                    self._count += 1
                used[length] = k + 1
                name = known[k]
            out.append(name)
        return tuple(out)


def _closer(stores: list[BlockedArray]) -> Callable[[], None]:
    def close() -> None:
        for store in stores:
            store.close()

    return close
