"""Keeping writes inside the container the user named.

Two guards every writer shares:

- :func:`check_apart` refuses a copy whose destination lies inside its
  source's storage or holds it (``convert a.zarr a.zarr/b.zarr``): writing
  it would change, or on ``--overwrite`` delete, the source;
- :func:`check_within` refuses a path that leads out of a local container
  through a symbolic link (a chunk file or directory linked elsewhere).

An array's storage is taken to be its container plus its inner path: a
Zarr array ``c.zarr#/g/x`` is the directory ``c.zarr/g/x``, an HDF5
dataset ``f.h5#/g/x`` lives in the file ``f.h5`` under ``/g/x``, a ``.npy``
array is its file.  Local paths are compared after resolving symbolic links;
other URLs by their normalised path on the same filesystem (protocol and
endpoint).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from typing import Any

from oocarr.errors import (
    InvalidArgumentError,
    InvalidStoreError,
    ReadOnlyError,
)

from .locator import Locator, is_local

__all__ = [
    "FOLLOW_EXTERNAL",
    "storage_key",
    "check_apart",
    "check_within",
    "follow_external_option",
    "follows_external",
]

#: The open option that says whether reads may follow links out of the container.
FOLLOW_EXTERNAL = "follow_external"

#: fsspec protocols that name the same filesystem.
_ALIASES = {"s3a": "s3", "gcs": "gs", "abfs": "az", "abfss": "az", "adl": "az", "local": "file"}


def _endpoint(options: Mapping[str, Any]) -> Any:
    """What tells two object stores of one protocol apart (their endpoint), if given."""
    client = options.get("client_kwargs")
    nested = client.get("endpoint_url") if isinstance(client, Mapping) else None
    return options.get("endpoint_url", nested)


def storage_key(locator: Locator) -> tuple[tuple[Any, ...], tuple[str, ...]]:
    """``(filesystem, path parts)`` of the storage that holds the array at ``locator``.

    Examples
    --------
    >>> storage_key(Locator.make("fsspec", "s3://bucket/a.zarr/", "/g/x"))
    (('s3', '', None), ('bucket', 'a.zarr', 'g', 'x'))
    """
    inner = [p for p in locator.path.split("/") if p]
    url = locator.url
    if is_local(url):
        if url.startswith("file://"):
            url = url[len("file://") :]
        full = os.path.realpath(os.path.join(os.path.abspath(url), *inner))
        return ("local",), tuple(p for p in full.split(os.sep) if p)
    head, _, chain = url.partition("::")
    protocol, sep, path = head.partition("://")
    if not sep:
        protocol, path = "", head
    protocol = _ALIASES.get(protocol, protocol)
    parts = [p for p in posixpath.normpath("/" + path).split("/") if p]
    return (protocol, chain, _endpoint(locator.options)), (*parts, *inner)


def check_apart(source: Locator, target: Locator) -> None:
    """Refuse to write ``target`` when its storage is inside ``source``'s, holds it, or is it.

    Two arrays in one container are fine (``data.h5#/a`` to ``data.h5#/b``,
    ``g.zarr#/a`` to ``g.zarr#/b``); ``a.zarr`` to ``a.zarr/b.zarr`` is not
    (the copy would land inside the source, and replacing the source later
    would delete it), nor ``g.zarr#/b`` to ``g.zarr``.

    Raises
    ------
    InvalidArgumentError
        Naming both URLs.

    Examples
    --------
    >>> a = Locator.make("fsspec", "memory://a.zarr")
    >>> check_apart(a, Locator.make("fsspec", "memory://b.zarr"))
    >>> check_apart(a, Locator.make("fsspec", "memory://a.zarr/b.zarr"))
    Traceback (most recent call last):
    ...
    oocarr.errors.InvalidArgumentError: cannot write memory://a.zarr/b.zarr: it is inside ...
    """
    (src_fs, src), (dst_fs, dst) = storage_key(source), storage_key(target)
    if src_fs != dst_fs:
        return
    if src == dst:
        where = "is the same storage as"
    elif dst[: len(src)] == src:
        where = "is inside"
    elif src[: len(dst)] == dst:
        where = "contains"
    else:
        return
    raise InvalidArgumentError(
        f"cannot write {target.full_url}: it {where} the source {source.full_url}, so writing "
        "it would change or delete the source; write the copy somewhere outside the source",
        url=target.full_url,
    )


def check_within(path: str, root: str, url: str, *, writing: bool) -> None:
    """Refuse a local ``path`` that resolves outside the directory ``root`` (a symbolic link
    that leads out of the container ``url``).

    Raises
    ------
    ReadOnlyError
        When ``writing``: oocarr never writes outside the container named.
    oocarr.errors.InvalidStoreError
        When reading with ``follow_external=False``.

    Examples
    --------
    >>> import os, tempfile
    >>> root = tempfile.mkdtemp()
    >>> os.symlink("/etc/hostname", os.path.join(root, "c"))
    >>> check_within(os.path.join(root, "c"), root, "a.zarr", writing=True)
    Traceback (most recent call last):
    ...
    oocarr.errors.ReadOnlyError: cannot write a.zarr: .../c is a symbolic link to /etc/hostname, ...
    """
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep):
        return
    link = _outermost_link(path, root)
    detail = (
        f"{link} is a symbolic link to {os.path.realpath(link)}, outside the container {real_root}"
    )
    if writing:
        raise ReadOnlyError(
            f"cannot write {url}: {detail}; oocarr never writes outside the container it "
            "was given. Replace the link by a copy of its target, or write a copy of the array",
            url=url,
        )
    raise InvalidStoreError(
        f"cannot read {url} with follow_external=False: {detail}; open it with "
        "follow_external=True (the default) to read through links",
        url=url,
    )


def _outermost_link(path: str, root: str) -> str:
    """The first component of ``path`` below ``root`` that is a symbolic link (else ``path``)."""
    rel = os.path.relpath(path, root)
    current = root
    for part in rel.split(os.sep):
        current = os.path.join(current, part)
        if os.path.islink(current):
            return current
    return path


def follow_external_option(driver_options: Mapping[str, Any] | None, url: str) -> dict[str, Any]:
    """The locator's driver options for ``follow_external`` taken out of ``driver_options``
    (which is left with the others): ``{}`` for the default (follow), else ``{"follow_external":
    False}``.

    Raises
    ------
    InvalidArgumentError
        When the value is not a bool.

    Examples
    --------
    >>> options = {"follow_external": False}
    >>> follow_external_option(options, "a.zarr"), options
    ({'follow_external': False}, {})
    """
    if not driver_options or FOLLOW_EXTERNAL not in driver_options:
        return {}
    value = driver_options.pop(FOLLOW_EXTERNAL)  # type: ignore[attr-defined]
    if not isinstance(value, bool):
        raise InvalidArgumentError(
            f"{FOLLOW_EXTERNAL}={value!r} for {url} must be True or False", url=url
        )
    return {} if value else {FOLLOW_EXTERNAL: False}


def follows_external(locator: Locator) -> bool:
    """Whether reads of ``locator`` may follow links that lead out of its container.

    Examples
    --------
    >>> follows_external(Locator.make("fsspec", "a.zarr", "", None, {"follow_external": False}))
    False
    """
    return locator.driver_kwargs.get(FOLLOW_EXTERNAL, True) is not False
