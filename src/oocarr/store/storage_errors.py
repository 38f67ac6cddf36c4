"""Naming the array when storage fails: an ``OSError`` of the operating system (disk full,
read-only filesystem, permission lost) becomes the oocarr error that names the URL written."""

from __future__ import annotations

import contextlib
import errno
import re
from collections.abc import Iterator

from oocarr.errors import OocarrError, ReadOnlyError, StorageAccessError, WriteError

__all__ = ["storage_error", "transport_failures"]

#: Modules of the storage clients fsspec's backends use, whose errors are not ``OSError``s:
#: a missing credential or an unreachable endpoint raised from inside them names neither the
#: URL nor a fix, and escapes ``except OSError`` (the CLI printed a traceback).
_TRANSPORT_MODULES = (
    "botocore.",
    "aiobotocore.",
    "aiohttp.",
    "google.auth.",
    "google.api_core.",
    "azure.core.",
    "requests.",
    "urllib3.",
)


@contextlib.contextmanager
def transport_failures(action: str, url: str) -> Iterator[None]:
    """Turn an error of a storage client library (not an ``OSError``) raised inside the block
    into :class:`~oocarr.errors.StorageAccessError` naming ``url``.

    Examples
    --------
    >>> class NoCredentialsError(Exception):
    ...     pass
    >>> NoCredentialsError.__module__ = "botocore.exceptions"
    >>> try:
    ...     with transport_failures("reading", "s3://b/a.zarr"):
    ...         raise NoCredentialsError("Unable to locate credentials")
    ... except OSError as err:
    ...     print(type(err).__name__, str(err)[:50])
    StorageAccessError reading s3://b/a.zarr failed: Unable to locate cre
    """
    try:
        yield
    except (OocarrError, OSError):
        raise
    except Exception as err:
        module = type(err).__module__ + "."
        if not module.startswith(_TRANSPORT_MODULES):
            raise
        text = " ".join(str(err).split()) or type(err).__name__
        raise StorageAccessError(
            f"{action} {url} failed: {text} ({type(err).__name__}); check the endpoint, the "
            "network and the credentials (storage_options, or the client's own configuration)",
            url=url,
        ) from err


_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)
_ERRNO = re.compile(r"errno = (\d+)")


def storage_error(action: str, url: str, err: BaseException) -> OocarrError:
    """The oocarr error for an ``OSError`` raised while ``action`` (e.g. ``"writing"``) ``url``
    (or a library's error whose text carries ``errno = N``, as HDF5's do).

    A full disk or quota gives :class:`~oocarr.errors.WriteError`, a
    read-only filesystem or lost permission
    :class:`~oocarr.errors.ReadOnlyError`, anything else ``WriteError``;
    an oocarr error is returned as it is.

    Examples
    --------
    >>> import errno
    >>> err = storage_error("writing", "a.zarr", OSError(errno.ENOSPC, "No space left on device"))
    >>> type(err).__name__, str(err)  # doctest: +ELLIPSIS
    ('WriteError', 'writing a.zarr failed: no space left on the device ...')
    """
    if isinstance(err, OocarrError):
        return err
    text = " ".join(str(err).split())
    code = getattr(err, "errno", None)
    if code is None and (found := _ERRNO.search(text)):
        code = int(found.group(1))
    if code in _NO_SPACE or "No space left" in text or "Disk quota" in text:
        return WriteError(
            f"{action} {url} failed: no space left on the device ({text}); free some space "
            "or write elsewhere",
            url=url,
        )
    if code == errno.EROFS or "Read-only file system" in text:
        return ReadOnlyError(
            f"{action} {url} failed: the filesystem is mounted read-only ({text}); write to "
            "a writable location",
            url=url,
        )
    if code in _NOT_WRITABLE:
        return ReadOnlyError(
            f"{action} {url} failed: permission denied ({text}); check the permissions",
            url=url,
        )
    return WriteError(f"{action} {url} failed: {text}; check the storage", url=url)
