"""Exit codes, and turning exceptions into one-line messages that end the command.

A user error prints one line to standard error (``Error: ...``) that names
the URL involved and what to do about it, never a traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import click

from oocarr.errors import NotFoundError, OocarrError, WriteError

__all__ = [
    "EXIT_OK",
    "EXIT_UNEXPECTED",
    "EXIT_USAGE",
    "EXIT_NOT_FOUND",
    "EXIT_WRITE",
    "EXIT_INTERRUPTED",
    "EXIT_CODES_HELP",
    "CommandError",
    "exit_code_for",
    "reported",
    "writing",
]

EXIT_OK = 0
#: An error oocarr did not expect (a bug): Python prints its traceback.
EXIT_UNEXPECTED = 1
#: Invalid input or usage (click's own usage errors exit with 2 too).
EXIT_USAGE = 2
#: The file, container or array does not exist.
EXIT_NOT_FOUND = 3
#: Storage failed while the destination was written; nothing was left there.
EXIT_WRITE = 4
#: Interrupted (Ctrl-C); nothing was left at the destination.
EXIT_INTERRUPTED = 130

EXIT_CODES_HELP = f"""\b
Exit codes:
  {EXIT_OK}    success
  {EXIT_UNEXPECTED}    unexpected error (a bug: please report it with the traceback)
  {EXIT_USAGE}    invalid input or usage: bad option, unknown driver, corrupt or
       foreign file, unsupported dtype or compression, destination exists
       without --overwrite, memory budget too small for one chunk, the
       --executor scheduler unreachable or the cluster failed the run
  {EXIT_NOT_FOUND}    not found: file, container or array missing
  {EXIT_WRITE}    failed while writing: read-only destination, disk full, I/O error,
       copy differs on --verify (nothing left at the destination)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C): nothing left at the destination"""


class CommandError(click.ClickException):
    """A user error: click prints ``Error: <message>`` and exits with ``exit_code``.

    Examples
    --------
    >>> err = CommandError("no array at a.h5#/x", EXIT_NOT_FOUND)
    >>> err.exit_code, err.format_message()
    (3, 'no array at a.h5#/x')
    """

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(" ".join(str(message).split()))
        # click types exit_code a ClassVar; each CommandError carries its own
        self.exit_code = exit_code  # type: ignore[misc]


def _os_failure(err: BaseException | None) -> bool:
    """A storage failure (permission, disk, I/O, lock), as opposed to a missing or existing path."""
    return isinstance(err, OSError) and not isinstance(err, (FileNotFoundError, FileExistsError))


def exit_code_for(err: BaseException, *, writing: bool = False) -> int:
    """The exit code for ``err``; ``writing`` says it was raised while the destination was written.

    Examples
    --------
    >>> from oocarr.errors import NotFoundError, InvalidStoreError, ReadOnlyError
    >>> exit_code_for(NotFoundError("x")), exit_code_for(InvalidStoreError("x"))
    (3, 2)
    >>> exit_code_for(ReadOnlyError("x"), writing=True)
    4
    """
    if isinstance(err, (NotFoundError, FileNotFoundError)):
        return EXIT_NOT_FOUND
    if isinstance(err, WriteError):
        return EXIT_WRITE
    if writing and (_os_failure(err) or _os_failure(err.__cause__ or err.__context__)):
        return EXIT_WRITE
    return EXIT_USAGE


@contextlib.contextmanager
def reported() -> Iterator[None]:
    """Turn oocarr errors, storage errors and Ctrl-C raised inside into :class:`CommandError`.

    Examples
    --------
    >>> from oocarr.errors import NotFoundError
    >>> try:
    ...     with reported():
    ...         raise NotFoundError("no file at a.npy; check the path", url="a.npy")
    ... except CommandError as err:
    ...     err.exit_code
    3
    """
    try:
        yield
    except click.ClickException:
        raise
    except KeyboardInterrupt:
        raise CommandError("interrupted", EXIT_INTERRUPTED) from None
    except (OocarrError, OSError) as err:
        raise CommandError(str(err), exit_code_for(err)) from None


@contextlib.contextmanager
def writing(url: str, *, replacing: bool = False) -> Iterator[None]:
    """Mark the block that writes ``url``: storage failures there exit with :data:`EXIT_WRITE`.

    The block must leave nothing at ``url`` when it fails (``create`` and
    a ``with`` block on the new array do that); the messages say so.

    Examples
    --------
    >>> try:
    ...     with writing("out.h5#/x"):
    ...         raise PermissionError(13, "Permission denied")
    ... except CommandError as err:
    ...     err.exit_code, err.format_message()  # doctest: +ELLIPSIS
    (4, 'failed while writing out.h5#/x: [Errno 13] Permission denied; nothing was ...')
    """
    left = "the old array there is intact" if replacing else "nothing was left there"
    try:
        yield
    except click.ClickException:
        raise
    except KeyboardInterrupt:
        raise CommandError(f"interrupted while writing {url}; {left}", EXIT_INTERRUPTED) from None
    except (OocarrError, OSError) as err:
        code = exit_code_for(err, writing=True)
        if code != EXIT_WRITE:
            raise
        raise CommandError(
            f"failed while writing {url}: {err}; {left}. Check that the destination is "
            "writable and has space",
            code,
        ) from None
