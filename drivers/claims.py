"""Which URLs the built-in drivers claim, answered without importing a storage library.

The ``oocarr.drivers`` entry points point at the specs here (see
:mod:`oocarr.store.registry`): the registry asks them whether a URL is a
driver's and imports that driver (and h5py or fsspec with it) only once
it claims the URL.  The driver classes' ``can_open``/``can_list`` call
the same functions, so each claim is written once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from oocarr.store import is_local, normalize_container

__all__ = [
    "MEMMAP",
    "HDF5",
    "FSSPEC",
    "MEMMAP_SUFFIXES",
    "HDF5_SUFFIXES",
    "ZARR_SUFFIXES",
    "memmap_can_open",
    "memmap_can_list",
    "zarr_can_open",
]

MEMMAP_SUFFIXES = (".npy",)
#: HDF5 files by another name: netCDF-4 (``.nc``, ``.nc4``), AnnData (``.h5ad``), HDF-EOS5
#: (``.he5``) and ``.hdf``; the driver checks the HDF5 signature when it opens them.
HDF5_SUFFIXES = (".h5", ".hdf5", ".nc", ".nc4", ".h5ad", ".he5", ".hdf")
ZARR_SUFFIXES = (".zarr",)
#: Metadata files that make a local directory a Zarr array or group (v3, v2).
ZARR_METADATA = ("zarr.json", ".zarray")
#: Files of other formats: one of these inside a ``.zarr`` directory is not Zarr's.
NOT_ZARR = (".npy", ".h5", ".hdf5", ".he5", ".nc", ".zip")


def _has_suffix(container: str, suffixes: tuple[str, ...]) -> bool:
    return container.rstrip("/").lower().endswith(suffixes)


def memmap_can_open(container: str, inner: str, storage_options: Mapping[str, Any]) -> bool:
    """A local ``.npy`` file.

    Examples
    --------
    >>> memmap_can_open("/tmp/a.npy", "", {}), memmap_can_open("s3://b/a.npy", "", {})
    (True, False)
    """
    return is_local(container) and _has_suffix(container, MEMMAP_SUFFIXES)


def memmap_can_list(container: str, storage_options: Mapping[str, Any]) -> bool:
    """A local ``.npy`` file or a local directory (of ``.npy`` files).

    Examples
    --------
    >>> import tempfile
    >>> memmap_can_list(tempfile.mkdtemp(), {}), memmap_can_list("memory://d", {})
    (True, False)
    """
    if not is_local(container):
        return False
    return os.path.isdir(normalize_container(container)) or _has_suffix(container, MEMMAP_SUFFIXES)


def zarr_can_open(container: str, inner: str, storage_options: Mapping[str, Any]) -> bool:
    """A ``.zarr`` URL (any segment of a chained ``a::b`` URL), a path inside one that is not
    another format's file, a ``zarr.json`` URL, or a local directory holding Zarr metadata.

    Examples
    --------
    >>> zarr_can_open("memory://b/x.zarr", "", {}), zarr_can_open("/d/x.zarr/a.npy", "", {})
    (True, False)
    >>> zarr_can_open("zip://x.zarr::/tmp/a.zip", "", {})
    True
    """
    for segment in container.split("::"):
        low = segment.rstrip("/").lower()
        if low.endswith((".zarr", "/zarr.json")) or low == "zarr.json":
            return True
        if ".zarr/" in low:
            return not low.endswith(NOT_ZARR)
    if is_local(container):
        path = normalize_container(container)
        return any(os.path.isfile(os.path.join(path, key)) for key in ZARR_METADATA)
    return False


MEMMAP = {
    "driver": "oocarr_drivers.memmap:MemmapArray",
    "suffixes": MEMMAP_SUFFIXES,
    "can_open": memmap_can_open,
    "can_list": memmap_can_list,
}
HDF5 = {
    "driver": "oocarr_drivers.hdf5:HDF5Array",
    "suffixes": HDF5_SUFFIXES,
    "supports_listing": True,
}
FSSPEC = {
    "driver": "oocarr_drivers.zarr_fsspec:ZarrArray",
    "suffixes": ZARR_SUFFIXES,
    "can_open": zarr_can_open,
    "supports_listing": True,
}
