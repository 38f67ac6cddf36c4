"""Driver discovery through the ``oocarr.drivers`` entry-point group.

The core never imports a driver by name: it asks this registry, which
reads the installed distributions' entry points and imports a driver's
module only when it is first used, as fsspec's registry does for
filesystems.  A package outside oocarr registers a driver with::

    [project.entry-points."oocarr.drivers"]
    mydriver = "mypackage.store:MyStore"
"""

from __future__ import annotations

import threading
from importlib import metadata
from typing import TYPE_CHECKING

from .errors import MissingDependencyError, UnknownDriverError

if TYPE_CHECKING:
    from .blocked import BlockedArray

__all__ = ["ENTRY_POINT_GROUP", "get_driver", "available_drivers", "load_drivers", "refresh"]

ENTRY_POINT_GROUP = "oocarr.drivers"

_lock = threading.Lock()
_entry_points: dict[str, metadata.EntryPoint] | None = None
_loaded: dict[str, type[BlockedArray]] = {}


def refresh() -> None:
    """Forget what was discovered, so newly installed drivers are seen.

    Examples
    --------
    >>> refresh()
    >>> "memmap" in available_drivers()
    True
    """
    global _entry_points
    with _lock:
        _entry_points = None
        _loaded.clear()


def _scan() -> dict[str, metadata.EntryPoint]:
    global _entry_points
    with _lock:
        if _entry_points is None:
            found: dict[str, metadata.EntryPoint] = {}
            for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
                found.setdefault(ep.name, ep)
            _entry_points = found
        return _entry_points


def available_drivers() -> list[str]:
    """Names of every registered driver, sorted.

    Examples
    --------
    >>> sorted(set(available_drivers()) & {"memmap", "hdf5", "fsspec"})
    ['fsspec', 'hdf5', 'memmap']
    """
    return sorted(_scan())


def get_driver(name: str) -> type[BlockedArray]:
    """The driver class registered under ``name``, imported on first use.

    Parameters
    ----------
    name : str
        Entry-point name, e.g. ``"hdf5"``.

    Raises
    ------
    UnknownDriverError
        When no installed distribution registers that name.
    MissingDependencyError
        When the driver's module needs a package that is not installed.

    Examples
    --------
    >>> get_driver("memmap").name
    'memmap'
    """
    if name in _loaded:
        return _loaded[name]
    eps = _scan()
    if name not in eps:
        refresh()
        eps = _scan()
    if name not in eps:
        raise UnknownDriverError(
            f"unknown driver {name!r}; installed drivers: {', '.join(sorted(eps)) or 'none'}. "
            f"Install the package that provides it or pick one of these."
        )
    try:
        cls = eps[name].load()
    except ImportError as err:
        raise MissingDependencyError(
            f"driver {name!r} could not be imported ({err}); install the package it needs "
            f"(pip install {getattr(err, 'name', None) or 'the missing module'})"
        ) from err
    except Exception as err:  # a broken third-party driver must not break the others
        raise UnknownDriverError(
            f"driver {name!r} is registered but failed to load ({type(err).__name__}: {err}); "
            "reinstall or fix the package that provides it"
        ) from err
    with _lock:
        _loaded[name] = cls
    return cls


def load_drivers() -> dict[str, type[BlockedArray]]:
    """Every registered driver class that imports cleanly, by name.

    A driver whose dependencies are missing is left out here (and raises
    :class:`MissingDependencyError` when asked for by name).

    Examples
    --------
    >>> "hdf5" in load_drivers()
    True
    """
    out = {}
    for name in available_drivers():
        try:
            out[name] = get_driver(name)
        except (MissingDependencyError, UnknownDriverError):
            continue
    return out
