"""A tiny in-memory driver that lives outside oocarr, registered with ``register_driver`` in
conftest.

It proves a third-party driver works everywhere the built-in ones do:
it imports only ``oocarr.store`` (the interface) and ``oocarr.errors``.
"""

from __future__ import annotations

import threading

import numpy as np

from oocarr.store import BlockedArray, Locator, require_exists

_ARRAYS: dict[str, dict] = {}
_LOCK = threading.Lock()


class MemoryArray(BlockedArray):
    """Arrays held in a process-wide dict, addressed as ``mem://name``."""

    name = "testmem"
    compressions = frozenset()

    def __init__(self, locator, shape, dtype, chunks, *, mode, pending=False, key):
        super().__init__(locator, shape, dtype, chunks, mode=mode, pending=pending)
        self._key = key

    @classmethod
    def can_open(cls, container, inner, storage_options):
        return container.startswith("mem://")

    @classmethod
    def locate(cls, container, inner, storage_options=None, driver_options=None):
        return Locator.make(cls.name, container, inner, storage_options, driver_options)

    @staticmethod
    def _key_of(locator):
        return locator.full_url

    @classmethod
    def _open(cls, locator, mode):
        key = cls._key_of(locator)
        with _LOCK:
            entry = _ARRAYS.get(key)
        require_exists(entry is not None, locator)
        data = entry["data"]
        return cls(locator, data.shape, data.dtype, entry["chunks"], mode=mode, key=key)

    @classmethod
    def _create(cls, locator, shape, dtype, chunks, compression, attrs, overwrite):
        key = cls._key_of(locator) + "\0pending"
        if chunks is None:
            chunks = cls.default_chunks(shape, dtype)
        with _LOCK:
            _ARRAYS[key] = {"data": np.zeros(shape, dtype), "chunks": chunks, "attrs": attrs}
        return cls(locator, shape, dtype, chunks, mode="r+", pending=True, key=key)

    @classmethod
    def exists(cls, locator):
        return cls._key_of(locator) in _ARRAYS

    @classmethod
    def delete(cls, locator):
        _ARRAYS.pop(cls._key_of(locator), None)

    def _read(self, region, out):
        out[...] = _ARRAYS[self._key]["data"][region]

    def _write(self, region, value):
        _ARRAYS[self._key]["data"][region] = value

    def _read_attrs(self):
        return dict(_ARRAYS[self._key]["attrs"])

    def _write_attrs(self, attrs):
        _ARRAYS[self._key]["attrs"] = dict(attrs)

    def _commit(self):
        final = self._key_of(self.locator)
        with _LOCK:
            _ARRAYS[final] = _ARRAYS.pop(self._key)
        self._key = final

    def _abort(self):
        _ARRAYS.pop(self._key, None)

    supports_listing = True

    @classmethod
    def list_arrays(cls, container, inner="", storage_options=None):
        """The committed arrays whose URL starts with ``container`` (every array for ``mem://``)."""
        prefix = container.rstrip("/")
        with _LOCK:
            items = sorted((k, v) for k, v in _ARRAYS.items() if "\0" not in k)
        return [
            {
                "path": key[len(prefix) :] or "/",
                "url": key,
                "kind": "array",
                "shape": entry["data"].shape,
                "dtype": entry["data"].dtype,
                "chunks": entry["chunks"],
            }
            for key, entry in items
            if key == prefix or key.startswith(prefix + "/")
        ]
