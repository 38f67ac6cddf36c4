"""The fsspec filesystem a locator names, with its failures as oocarr errors (shared by the
drivers that reach storage through fsspec: Zarr, and remote HDF5 files)."""

from __future__ import annotations

from typing import Any

from fsspec.core import url_to_fs

from oocarr.errors import InvalidUrlError, MissingDependencyError
from oocarr.store import Locator

__all__ = ["url_filesystem"]


def url_filesystem(locator: Locator, options: dict[str, Any] | None = None) -> tuple[Any, str]:
    """``url_to_fs(locator.url, **options)`` (the locator's storage options by default): the
    filesystem and the path in it.

    Raises
    ------
    MissingDependencyError
        When the protocol's fsspec backend is not installed (s3fs for ``s3://`` ...).
    InvalidUrlError
        When fsspec cannot make sense of the URL or the options.

    Examples
    --------
    >>> fs, path = url_filesystem(Locator.make("fsspec", "memory://a/b.zarr", ""))
    >>> type(fs).__name__, path
    ('MemoryFileSystem', '/a/b.zarr')
    """
    try:
        return url_to_fs(locator.url, **(locator.options if options is None else options))
    except ImportError as err:
        raise MissingDependencyError(
            f"cannot open {locator.full_url}: {err} (pip install the fsspec backend it names, "
            "e.g. s3fs for s3://)",
            url=locator.full_url,
        ) from err
    except (ValueError, TypeError) as err:
        raise InvalidUrlError(
            f"fsspec cannot open {locator.url!r} ({err}); check the protocol and the "
            "storage_options",
            url=locator.full_url,
        ) from None
