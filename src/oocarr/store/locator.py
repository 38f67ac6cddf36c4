"""Locators: the hashable, picklable address of one stored array.

A locator names a driver, the URL of the container (a file, a directory,
an object-store prefix), the path of the array inside that container, the
fsspec ``storage_options`` and any driver options needed to reopen the
array (a raw binary file's ``shape`` and ``dtype``).  It round-trips
through a plain JSON-able dict, which is how arrays travel to other
processes and what ``oocarr inspect --json`` prints.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from oocarr.errors import InvalidArgumentError, InvalidUrlError

__all__ = ["Locator", "split_url", "join_url", "is_local", "option_mapping"]


def _freeze(value: Any) -> Any:
    """Turn JSON-like data into a hashable equivalent (dicts to sorted item tuples)."""
    if isinstance(value, Mapping):
        return ("__dict__", tuple(sorted((str(k), _freeze(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("__list__", tuple(_freeze(v) for v in value))
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "__dict__":
        return {k: _thaw(v) for k, v in value[1]}
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "__list__":
        return [_thaw(v) for v in value[1]]
    return value


def option_mapping(value: Mapping[str, Any] | None, name: str) -> dict[str, Any]:
    """A fresh dict of ``value`` (``None`` is empty), refusing anything but a mapping with str keys.

    Parameters
    ----------
    value : mapping or None
        Options such as ``storage_options``.
    name : str
        The argument's name, for the error message.

    Raises
    ------
    InvalidArgumentError
        When ``value`` is not a mapping or has a key that is not a string.

    Examples
    --------
    >>> option_mapping({"anon": True}, "storage_options")
    {'anon': True}
    >>> try:
    ...     option_mapping("x", "storage_options")
    ... except InvalidArgumentError as err:
    ...     print(err)
    storage_options must be a mapping such as {'anon': True}, got str: 'x'
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        kind = type(value).__name__
        raise InvalidArgumentError(
            f"{name} must be a mapping such as {{'anon': True}}, got {kind}: {shown}"
        )
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise InvalidArgumentError(f"{name} keys must be strings, got {bad[0]!r}")
    return dict(value)


def split_url(url: str) -> tuple[str, str]:
    """Split ``PATH_OR_URL#/path/inside`` into the container URL and the inner path.

    Parameters
    ----------
    url : str
        A path or fsspec URL, optionally followed by ``#`` and the path of
        an array inside the container.

    Returns
    -------
    (container, inner) : tuple of str
        ``inner`` is normalised to start with ``/``, or is ``""`` when absent.

    Examples
    --------
    >>> split_url("data.h5#/group/x")
    ('data.h5', '/group/x')
    >>> split_url("s3://bucket/a.zarr")
    ('s3://bucket/a.zarr', '')
    """
    if not isinstance(url, (str, os.PathLike)):
        raise InvalidUrlError(
            f"expected a path or URL string, got {type(url).__name__}: {url!r}", url=str(url)
        )
    url = os.fspath(url)
    if not url:
        raise InvalidUrlError("empty URL: give a path such as 'data.h5#/x'", url=url)
    container, sep, inner = url.partition("#")
    if not container:
        raise InvalidUrlError(
            f"URL {url!r} has no container before '#': write 'file.h5#/dataset'", url=url
        )
    inner = inner.strip()
    if sep and inner.strip("/") == "":
        inner = ""
    elif inner:
        parts = [p for p in inner.split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise InvalidUrlError(
                f"inner path {inner!r} in {url!r} may not contain '.' or '..'", url=url
            )
        inner = "/" + "/".join(parts)
    return container, inner


def join_url(container: str, inner: str) -> str:
    """Inverse of :func:`split_url`.

    Examples
    --------
    >>> join_url("data.h5", "/x")
    'data.h5#/x'
    """
    return f"{container}#{inner}" if inner else container


def is_local(url: str) -> bool:
    """True when ``url`` is a plain local path or a ``file://`` URL.

    Examples
    --------
    >>> is_local("/tmp/a.npy"), is_local("s3://b/a.zarr"), is_local("zip::/tmp/a.zip")
    (True, False, False)
    """
    if url.startswith("file://"):
        return "::" not in url
    return "://" not in url and "::" not in url


def normalize_container(url: str) -> str:
    """Make a local container path absolute so that it reopens from any working directory."""
    if url.startswith("file://") and "::" not in url:
        url = url[len("file://") :]
    if is_local(url):
        return os.path.abspath(os.path.expanduser(url))
    return url


@dataclass(frozen=True)
class Locator:
    """The address of one stored array: enough to reopen it in any process.

    Parameters
    ----------
    driver : str
        Name of the driver in the ``oocarr.drivers`` entry-point group.
    url : str
        URL or absolute path of the container (file, directory, prefix).
    path : str
        Path of the array inside the container (``"/group/x"``), or ``""``.
    storage_options : tuple
        Frozen form of the fsspec ``storage_options`` mapping; build
        locators with :meth:`make` to pass a plain dict.
    driver_options : tuple
        Frozen form of driver options (e.g. a raw file's shape and dtype).

    Examples
    --------
    >>> loc = Locator.make("hdf5", "/data/a.h5", "/x")
    >>> loc.full_url
    '/data/a.h5#/x'
    >>> Locator.from_dict(loc.to_dict()) == loc
    True
    """

    driver: str
    url: str
    path: str = ""
    storage_options: tuple = field(default=())
    driver_options: tuple = field(default=())

    @classmethod
    def make(
        cls,
        driver: str,
        url: str,
        path: str = "",
        storage_options: Mapping[str, Any] | None = None,
        driver_options: Mapping[str, Any] | None = None,
    ) -> Locator:
        """Build a locator from plain mappings (frozen so the locator hashes)."""
        return cls(
            driver=driver,
            url=url,
            path=path,
            storage_options=_freeze(option_mapping(storage_options, "storage_options"))[1],
            driver_options=_freeze(option_mapping(driver_options, "driver_options"))[1],
        )

    @property
    def options(self) -> dict[str, Any]:
        """The fsspec storage options as a fresh dict."""
        return _thaw(("__dict__", self.storage_options))

    @property
    def driver_kwargs(self) -> dict[str, Any]:
        """The driver options as a fresh dict."""
        return _thaw(("__dict__", self.driver_options))

    @property
    def full_url(self) -> str:
        """The ``container#/inner`` form of this locator's address."""
        return join_url(self.url, self.path)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict that :meth:`from_dict` turns back into this locator."""
        return {
            "driver": self.driver,
            "url": self.url,
            "path": self.path,
            "storage_options": self.options,
            "driver_options": self.driver_kwargs,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Locator:
        """Rebuild a locator from :meth:`to_dict`'s output."""
        return cls.make(
            data["driver"],
            data["url"],
            data.get("path", ""),
            data.get("storage_options"),
            data.get("driver_options"),
        )

    def to_json(self) -> str:
        """Canonical JSON text of :meth:`to_dict` (sorted keys)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    def __str__(self) -> str:
        return self.full_url
