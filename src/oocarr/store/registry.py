"""Driver discovery: the ``oocarr.drivers`` entry points, :func:`register_driver`, and the
one :func:`guess_driver` that picks the driver for a URL.

The core never imports a driver by name: it asks this registry, which
imports a driver's module only once a URL needs it, as fsspec's registry
does for filesystems.  A driver is registered in one of two forms::

    [project.entry-points."oocarr.drivers"]
    mydriver = "mypackage.store:MyStore"     # the class itself
    myother = "mypackage.claims:MYOTHER"     # a spec: a mapping, see below

A **spec** is a mapping that says which URLs the driver claims without
importing it (xarray's ``guess_can_open`` in the spirit of fsspec's lazy
registry)::

    MYOTHER = {
        "driver": "mypackage.store:MyOther",  # imported once a URL is claimed
        "suffixes": (".my",),                 # claimed by suffix (the default test)
        "can_open": my_can_open,              # optional: (container, inner, options) -> bool
        "can_list": my_can_list,              # optional: (container, options) -> bool
        "supports_listing": True,             # optional: default True when can_list is given
    }

A driver registered as a class (or a ``"pkg.mod:Cls"`` string) is imported
whenever a URL is guessed, so that its ``can_open`` can be asked.

Only storage drivers are drivers: :func:`available_drivers`, :func:`guess_driver`
and :func:`load_drivers` know nothing else.  The engine's own array kinds (``"view"``,
a region of a stored array; ``"fused"``, an elementwise expression computed on read)
have locators too, so a task pickled to another process reopens them with
:func:`get_driver`; they live in a separate, private table (see
:func:`register_array_kind`) that names each class as ``"package.module:Class"``, so
that a fresh process resolves them without having imported the engine.  Their names
are reserved: no storage driver can take them.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

from oocarr.errors import InvalidArgumentError, MissingDependencyError, UnknownDriverError
from oocarr.store.locator import option_mapping

if TYPE_CHECKING:
    from .blocked import BlockedArray

__all__ = [
    "ENTRY_POINT_GROUP",
    "DriverSpec",
    "available_drivers",
    "get_driver",
    "guess_driver",
    "load_drivers",
    "refresh",
    "register_array_kind",
    "register_driver",
    "storage_driver",
]

ENTRY_POINT_GROUP = "oocarr.drivers"

_SPEC_KEYS = frozenset({"driver", "suffixes", "can_open", "can_list", "supports_listing"})

_lock = threading.Lock()
_entry_points: dict[str, metadata.EntryPoint] | None = None
_specs: dict[str, DriverSpec] = {}
_loaded: dict[str, type[BlockedArray]] = {}
#: Drivers added with :func:`register_driver`: a class, "package.module:Class", or a spec.
_registered: dict[str, Any] = {}
#: Engine-internal array kinds (:func:`register_array_kind`): name -> "package.module:Class".
#: Not drivers: never listed, guessed or loaded, only resolved by name for their locators.
_array_kinds: dict[str, str] = {}


def _by_suffix(container: str, suffixes: tuple[str, ...]) -> bool:
    return container.rstrip("/").lower().endswith(suffixes)


@dataclass(frozen=True)
class DriverSpec:
    """What the registry knows of a driver before importing it.

    Parameters
    ----------
    name : str
        The driver's name.
    driver : type or str
        The ``BlockedArray`` subclass, or ``"package.module:Class"``.
    suffixes : tuple of str
        Suffixes claimed when no ``driver=`` is given.
    can_open : callable, optional
        ``(container, inner, storage_options) -> bool``; default: by suffix.
    can_list : callable, optional
        ``(container, storage_options) -> bool``; default: what ``can_open``
        claims, for a driver that supports listing.
    supports_listing : bool
        Whether the driver can list a container's arrays.

    Examples
    --------
    >>> spec = DriverSpec.from_mapping("x", {"driver": "m:X", "suffixes": (".x",)})
    >>> spec.claims("data/a.x", "", {}), spec.claims("data/a.y", "", {})
    (True, False)
    """

    name: str
    driver: Any
    suffixes: tuple[str, ...] = ()
    can_open: Callable[[str, str, Mapping[str, Any]], bool] | None = None
    can_list: Callable[[str, Mapping[str, Any]], bool] | None = None
    supports_listing: bool = False

    @classmethod
    def from_mapping(cls, name: str, spec: Mapping[str, Any]) -> DriverSpec:
        """The spec described by a mapping with the keys of this class's fields (but ``name``).

        Examples
        --------
        >>> DriverSpec.from_mapping("x", {"driver": "m:X", "can_list": bool}).supports_listing
        True
        """
        unknown = set(spec) - _SPEC_KEYS
        if unknown or not isinstance(spec.get("driver"), (str, type)):
            raise UnknownDriverError(
                f"driver {name!r} is registered with a spec that has no 'driver' "
                f'("package.module:Class") or has unknown keys {sorted(unknown)}; '
                f"a spec takes {sorted(_SPEC_KEYS)}"
            )
        can_list = spec.get("can_list")
        return cls(
            name,
            spec["driver"],
            tuple(spec.get("suffixes", ())),
            spec.get("can_open"),
            can_list,
            bool(spec.get("supports_listing", can_list is not None)),
        )

    @classmethod
    def from_class(cls, name: str, driver: type[BlockedArray]) -> DriverSpec:
        """The spec of an imported driver class: its own suffixes and claims.

        Examples
        --------
        >>> DriverSpec.from_class("memmap", get_driver("memmap")).suffixes
        ('.npy',)
        """
        return cls(
            name,
            driver,
            tuple(driver.suffixes),
            driver.can_open,
            driver.can_list,
            bool(driver.supports_listing),
        )

    def claims(
        self, container: str, inner: str, storage_options: Mapping[str, Any], listing: bool = False
    ) -> bool:
        """Whether the driver claims ``container#inner`` (for listing, when ``listing``).

        Examples
        --------
        >>> DriverSpec("x", "m:X", (".x",), supports_listing=True).claims("a.x", "", {}, True)
        True
        """
        if listing:
            if self.can_list is not None:
                return bool(self.can_list(container, storage_options))
            return self.supports_listing and self.claims(container, "", storage_options)
        if self.can_open is not None:
            return bool(self.can_open(container, inner, storage_options))
        return _by_suffix(container, self.suffixes)


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
        _specs.clear()
        _loaded.clear()


def _scan() -> dict[str, metadata.EntryPoint]:
    global _entry_points
    with _lock:
        if _entry_points is None:
            found: dict[str, metadata.EntryPoint] = {}
            for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
                if ep.name not in _array_kinds:  # a reserved name names the engine's kind
                    found.setdefault(ep.name, ep)
            _entry_points = found
        return _entry_points


def available_drivers() -> list[str]:
    """Names of every storage driver, from entry points and :func:`register_driver`, sorted.

    The engine's internal array kinds (``"view"``, ``"fused"``) are not storage a
    user can name, and are not listed.

    Examples
    --------
    >>> sorted(set(available_drivers()) & {"memmap", "hdf5", "fsspec", "view", "fused"})
    ['fsspec', 'hdf5', 'memmap']
    """
    return sorted(set(_scan()) | set(_registered))


@contextlib.contextmanager
def _loading(name: str) -> Iterator[None]:
    """Turn a failure to import driver ``name`` into an error that says what to do."""
    try:
        yield
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


def _import(name: str, target: str) -> Any:
    module, _, attr = target.partition(":")
    with _loading(name):
        obj: Any = importlib.import_module(module)
    for part in attr.split(".") if attr else ():
        obj = getattr(obj, part, None)
    if not attr or obj is None:
        raise UnknownDriverError(
            f"driver {name!r} is registered as {target!r}, which names no object; "
            "register it as 'package.module:Class'"
        )
    return obj


def _describe(name: str, obj: Any) -> DriverSpec:
    """The spec of a registered object: a spec mapping, a class, or a string naming either."""
    if isinstance(obj, str):
        obj = _import(name, obj)
    if isinstance(obj, Mapping):
        return DriverSpec.from_mapping(name, obj)
    if isinstance(obj, type):
        with _lock:
            _loaded[name] = obj
        return DriverSpec.from_class(name, obj)
    raise UnknownDriverError(
        f"driver {name!r} is registered as {obj!r}, neither a driver class nor a spec mapping"
    )


def _load_entry_point(name: str, ep: metadata.EntryPoint) -> Any:
    with _loading(name):
        return ep.load()


def _spec(name: str) -> DriverSpec:
    """The spec of driver ``name``; imports its spec module (or, lacking a spec, its class)."""
    if name in _specs:
        return _specs[name]
    if name in _registered:
        spec = _describe(name, _registered[name])
    else:
        eps = _scan()
        if name not in eps:
            refresh()
            eps = _scan()
        if name not in eps:
            raise UnknownDriverError(
                f"unknown driver {name!r}; installed drivers: "
                f"{', '.join(available_drivers()) or 'none'}. "
                f"Install the package that provides it or pick one of these."
            )
        spec = _describe(name, _load_entry_point(name, eps[name]))
    with _lock:
        _specs[name] = spec
    return spec


def storage_driver(name: str) -> type[BlockedArray]:
    """The storage driver a user names (``driver=``, ``--driver``): :func:`get_driver`, except
    that the engine's internal array kinds are no drivers to name.

    Raises
    ------
    UnknownDriverError
        When ``name`` is not a storage driver (an internal kind included); the
        message lists the storage drivers installed.
    MissingDependencyError
        When the driver's module needs a package that is not installed.

    Examples
    --------
    >>> storage_driver("hdf5").name
    'hdf5'
    >>> storage_driver("view")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    oocarr.errors.UnknownDriverError: unknown driver 'view'; installed drivers: ...
    """
    if name in _array_kinds:
        _spec(name)  # raises UnknownDriverError naming the storage drivers
    return get_driver(name)


def get_driver(name: str) -> type[BlockedArray]:
    """The driver class registered under ``name``, imported on first use.

    A locator's ``driver`` may also name one of the engine's internal array
    kinds (``"view"``, ``"fused"``): those resolve here too, so that an array
    pickled to another process reopens from its locator, but they are not
    storage drivers (:func:`available_drivers` does not list them).

    Parameters
    ----------
    name : str
        The driver's name, e.g. ``"hdf5"``, or an internal array kind's.

    Raises
    ------
    UnknownDriverError
        When no installed distribution or :func:`register_driver` call
        registers that name, or what it registers is not a driver; the
        message lists the storage drivers installed.
    MissingDependencyError
        When the driver's module needs a package that is not installed.

    Examples
    --------
    >>> get_driver("memmap").name
    'memmap'
    >>> get_driver("view").__name__
    'RegionView'
    """
    if name in _loaded:
        return _loaded[name]
    if name in _array_kinds:
        return _load_array_kind(name)
    spec = _spec(name)
    if name in _loaded:
        return _loaded[name]
    driver = spec.driver
    if isinstance(driver, str):
        driver = _import(name, driver)
    if not isinstance(driver, type):
        raise UnknownDriverError(
            f"driver {name!r}: its spec names {spec.driver!r}, which is not a driver class"
        )
    with _lock:
        _loaded[name] = driver
    return driver


def guess_driver(
    container: str,
    inner: str = "",
    storage_options: Mapping[str, Any] | None = None,
    *,
    listing: bool = False,
) -> type[BlockedArray]:
    """The driver that opens ``container#inner`` (or lists ``container``, when ``listing``).

    Every driver's spec is asked whether it claims the URL; only a driver
    that claims it is imported.  A driver claiming the URL by its own
    suffix wins over one that claims it otherwise (a ``.npy`` file inside a
    ``.zarr`` directory is still a ``.npy`` file); ties go by name.

    Parameters
    ----------
    container : str
        The container part of the URL (see :func:`oocarr.store.locator.split_url`).
    inner : str
        The path inside the container, ``""`` when none.
    storage_options : mapping, optional
        fsspec options, passed to the drivers' claims.
    listing : bool
        Pick the driver that lists the arrays in ``container`` instead.

    Raises
    ------
    UnknownDriverError
        When no driver claims the URL; the message lists the suffixes known
        (or, for ``listing``, the drivers that list containers).
    MissingDependencyError
        When the only drivers claiming the URL need a package that is not installed.

    Examples
    --------
    >>> guess_driver("data/run1.h5", "/train/x").name
    'hdf5'
    >>> guess_driver("s3://bucket/a.zarr").name
    'fsspec'
    """
    options = option_mapping(storage_options, "storage_options")
    specs = []
    for name in available_drivers():
        try:
            specs.append(_spec(name))
        except (MissingDependencyError, UnknownDriverError):
            continue  # a broken driver is reported when asked for by name, not here
    claims = [s for s in specs if s.claims(container, inner, options, listing)]
    if not claims:
        raise _unclaimed(container, inner, specs, listing)
    claims.sort(key=lambda s: not _by_suffix(container, s.suffixes))
    missing: MissingDependencyError | None = None
    for spec in claims:
        try:
            return get_driver(spec.name)
        except MissingDependencyError as err:
            missing = missing or err
        except UnknownDriverError:
            continue
    if missing is not None:
        raise missing
    raise _unclaimed(container, inner, specs, listing)


def _unclaimed(
    container: str, inner: str, specs: list[DriverSpec], listing: bool
) -> UnknownDriverError:
    if listing:
        able = ", ".join(s.name for s in specs if s.supports_listing)
        return UnknownDriverError(
            f"cannot tell which driver lists {container!r}; pass --driver NAME (drivers that "
            f"list containers: {able or 'none'})",
            url=container,
        )
    url = container + (f"#{inner}" if inner else "")
    known = ", ".join(f"{' '.join(s.suffixes)} ({s.name})" for s in specs if s.suffixes)
    return UnknownDriverError(
        f"cannot tell which driver opens {url!r}; known suffixes: {known}. "
        "Pass driver=NAME (or --driver NAME) to choose one",
        url=url,
    )


def load_drivers() -> dict[str, type[BlockedArray]]:
    """Every driver class that imports cleanly, by name (importing all of them).

    A driver whose dependencies are missing is left out here (and raises
    :class:`MissingDependencyError` when asked for by name).  To find the
    driver for a URL, use :func:`guess_driver`, which imports only that one.

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


def register_driver(name: str, driver: Any) -> None:
    """Add (or replace) the storage driver ``name`` for this process, without an installed
    distribution.

    Parameters
    ----------
    name : str
        The driver's name, as ``driver=`` and locators spell it; not the name
        of one of the engine's internal array kinds (``"view"``, ``"fused"``).
    driver : type, str or mapping
        A ``BlockedArray`` subclass; ``"package.module:Class"`` (imported
        when first needed: when asked for by name, or when a URL is
        guessed, to ask its ``can_open``); or a spec mapping (see the
        module's docstring), whose class is imported only once it claims a URL.

    Raises
    ------
    InvalidArgumentError
        When ``name`` is reserved for an internal array kind.

    Examples
    --------
    >>> register_driver("npy-again", "oocarr_drivers.memmap:MemmapArray")
    >>> get_driver("npy-again").__name__
    'MemmapArray'
    >>> register_driver("view", "oocarr_drivers.memmap:MemmapArray")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    oocarr.errors.InvalidArgumentError: 'view' is reserved for oocarr's internal array kind ...
    """
    with _lock:
        if name in _array_kinds:
            raise InvalidArgumentError(
                f"{name!r} is reserved for oocarr's internal array kind "
                f"{_array_kinds[name]!r}, not a storage driver name; register the driver "
                f"under another name (e.g. register_driver('my-{name}', ...))"
            )
        _registered[name] = driver
        _specs.pop(name, None)
        _loaded.pop(name, None)


def register_array_kind(name: str, target: str) -> None:
    """Register one of the engine's internal array kinds: not a storage driver, but a
    locator ``driver`` that :func:`get_driver` resolves (and nothing else lists or guesses).

    Nothing is imported here: ``target`` is imported when :func:`get_driver` is first
    asked for ``name``, so a process that unpickles such an array (a Dask worker)
    reopens it from its locator without having imported the engine first.  The name
    becomes reserved: :func:`register_driver` refuses it and an entry point with it is
    ignored.

    Parameters
    ----------
    name : str
        The kind's name, as its locators spell ``driver``.
    target : str
        Its ``BlockedArray`` subclass, as ``"package.module:Class"``.

    Raises
    ------
    InvalidArgumentError
        When ``target`` is not a ``"package.module:Class"`` string.

    Examples
    --------
    >>> register_array_kind("view", "oocarr.store.views:RegionView")
    >>> "view" in available_drivers(), get_driver("view").__name__
    (False, 'RegionView')
    """
    module, _, attr = target.partition(":") if isinstance(target, str) else ("", "", "")
    if not (module and attr):
        raise InvalidArgumentError(
            f"array kind {name!r} must be registered as 'package.module:Class' "
            f"(imported when first needed), not {target!r}"
        )
    with _lock:
        _array_kinds[name] = target
        _registered.pop(name, None)
        _specs.pop(name, None)
        _loaded.pop(name, None)
    refresh()  # entry points are re-scanned without the reserved name


def _load_array_kind(name: str) -> type[BlockedArray]:
    driver = _import(name, _array_kinds[name])
    if not isinstance(driver, type):
        raise UnknownDriverError(
            f"array kind {name!r} is registered as {_array_kinds[name]!r}, which is not a class"
        )
    with _lock:
        _loaded[name] = driver
    return driver


# The engine's internal array kinds, by string: the page-store layer imports no layer above it.
register_array_kind("view", "oocarr.store.views:RegionView")
register_array_kind("fused", "oocarr.engine.fused:FusedArray")
