"""The exceptions oocarr raises for bad input and failed storage operations.

Every class derives from :class:`OocarrError` and from the built-in
exception a Python user would already catch for the same problem
(``FileNotFoundError``, ``ValueError``, ``PermissionError`` ...), so both
``except oocarr.errors.NotFoundError`` and ``except FileNotFoundError``
work.  Messages name the URL involved and say what to do about it.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "OocarrError",
    "NotFoundError",
    "AlreadyExistsError",
    "InvalidStoreError",
    "InvalidUrlError",
    "InvalidArgumentError",
    "UnknownDriverError",
    "ReadOnlyError",
    "UnsupportedDtypeError",
    "UnsupportedCompressionError",
    "ShapeMismatchError",
    "DtypeMismatchError",
    "BudgetTooSmallError",
    "MissingDependencyError",
    "StorageBusyError",
    "WriteError",
    "ExecutorError",
    "StorageAccessError",
    "UnsupportedTransformationError",
    "NotSupportedError",
    "JaxNumpyArgumentError",
    "NotProvidedError",
]


class OocarrError(Exception):
    """Base class of every error oocarr raises on purpose.

    Parameters
    ----------
    message : str
        What went wrong and what to do about it.
    url : str, optional
        The URL of the array or container involved, kept as ``.url``.

    Examples
    --------
    >>> try:
    ...     raise NotFoundError("no array here", url="data.h5#/x")
    ... except OocarrError as err:
    ...     err.url
    'data.h5#/x'
    """

    def __init__(self, message: str, *, url: str | None = None) -> None:
        super().__init__(message)
        self.url = url

    def __reduce__(self) -> tuple[Any, ...]:
        # raised on a cluster's worker and sent back: the class, the message and the URL
        return (type(self), self.args, {"url": self.url})


class NotFoundError(OocarrError, FileNotFoundError):
    """The file, container or array named by a URL does not exist."""


class AlreadyExistsError(OocarrError, FileExistsError):
    """``create`` was asked to write where an array exists, without ``overwrite=True``."""


class InvalidStoreError(OocarrError, ValueError):
    """The storage exists but is not a valid array of the expected format (corrupt or foreign)."""


class InvalidUrlError(OocarrError, ValueError):
    """A URL cannot be parsed, or names no array the driver can address."""


class InvalidArgumentError(OocarrError, ValueError):
    """An argument has a value oocarr cannot use (a bad mode, chunk shape, page shape ...)."""


class UnknownDriverError(OocarrError, ValueError):
    """No registered driver has the given name or can open the given URL."""


class ReadOnlyError(OocarrError, PermissionError):
    """A write was attempted on an array opened read-only."""


class UnsupportedDtypeError(OocarrError, TypeError):
    """The storage format cannot hold this dtype."""


class UnsupportedCompressionError(OocarrError, ValueError):
    """The storage format does not offer this compression."""


class ShapeMismatchError(OocarrError, ValueError):
    """A value or region does not have the shape the array expects."""


class DtypeMismatchError(OocarrError, TypeError):
    """A value's dtype cannot be stored in the array without losing information."""


class BudgetTooSmallError(OocarrError, MemoryError):
    """The memory budget cannot hold even one page of the work asked for."""


class UnsupportedTransformationError(OocarrError, ValueError):
    """An optax transformation that ``oocarr.optim.blockwise`` cannot apply exactly (it
    combines elements of a parameter or across parameters)."""


class NotSupportedError(OocarrError, NotImplementedError):
    """A function of the Array API standard (or of NumPy) that oocarr does not provide for
    stored arrays; the message says why and what to use instead."""


class NotProvidedError(NotSupportedError, AttributeError):
    """A function of the Array API standard that ``oocarr.array_api`` does not provide: raised
    when the namespace is asked for it, so ``hasattr(xp, name)`` is false, as the standard's
    tests expect of a missing function."""


class JaxNumpyArgumentError(OocarrError, TypeError):
    """A ``jax.numpy`` function was given a ``DiskArray``; the message names the oocarr
    function that streams the same computation."""


class MissingDependencyError(OocarrError, ImportError):
    """A driver needs a package that is not installed."""


class StorageBusyError(OocarrError, BlockingIOError):
    """The storage is locked by another process (e.g. an HDF5 file open for writing there)."""


class ExecutorError(OocarrError, RuntimeError):
    """The cluster running a plan failed it: the scheduler is gone, the computation was
    cancelled, or every worker that ran a task died.  Nothing was committed."""


class StorageAccessError(OocarrError, OSError):
    """The storage could not be reached or refused the request: no connection to the
    endpoint, missing or rejected credentials, a timeout (raised by the storage's own client
    library, e.g. botocore, and named here with the URL)."""


class WriteError(OocarrError, OSError):
    """Storage failed while data was being written (disk full, permission lost, I/O error)."""
