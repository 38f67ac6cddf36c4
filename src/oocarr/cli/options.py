"""Settings shared by every command: the memory budget, storage options, driver, quiet.

They are accepted before the command (``oocarr --memory 64MB convert ...``)
and after it (``oocarr convert --memory 64MB ...``); the later one wins.
"""

from __future__ import annotations

import contextlib
import json
import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

import click

import oocarr
from oocarr.config import parse_size
from oocarr.errors import InvalidArgumentError
from oocarr.store import BlockedArray
from oocarr.store.locator import is_local

from .errors import reported

__all__ = [
    "Settings",
    "global_options",
    "pass_settings",
    "parse_storage_options",
    "parse_chunks",
    "parse_driver_options",
]


@dataclass
class Settings:
    """What the global options set; one instance per invocation (``click``'s ``ctx.obj``).

    ``open`` opens a (source) URL with them.

    Examples
    --------
    >>> s = Settings(storage_options={"anon": True})
    >>> s.options_for("s3://bucket/a.zarr"), s.options_for("/tmp/a.zarr")
    ({'anon': True}, None)
    """

    memory: int | None = None
    storage_options: dict[str, Any] = field(default_factory=dict)
    driver: str | None = None
    driver_options: dict[str, Any] = field(default_factory=dict)
    quiet: bool = False
    executor: str | None = None

    def open(self, url: str) -> BlockedArray:
        """The array at ``url``, opened read-only with the driver, storage and driver options."""
        return oocarr.open(
            url,
            driver=self.driver,
            storage_options=self.options_for(url),
            **self.driver_options,
        ).store

    def options_for(self, url: str) -> dict[str, Any] | None:
        """The storage options for ``url``: the given ones for a URL with a protocol, else none."""
        if not self.storage_options or is_local(url.partition("#")[0]):
            return None
        return dict(self.storage_options)

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """Run a command body: errors become one-line messages, warnings ``note:`` lines; the
        budget and the executor are in force."""
        with reported(), contextlib.ExitStack() as stack:
            stack.enter_context(_notes())
            if self.executor is not None:
                # the commands draw their own progress bars
                stack.enter_context(oocarr.executor(self.executor, progress=False))
            if self.memory is not None:
                stack.enter_context(oocarr.memory_budget(self.memory))
            yield


@contextlib.contextmanager
def _notes() -> Iterator[None]:
    """Print the warnings oocarr gives while a command runs as one ``note:`` line each."""

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        click.echo(f"note: {message}", err=True)

    with warnings.catch_warnings():
        warnings.simplefilter("default", UserWarning)
        warnings.showwarning = show
        yield


#: Decorator passing the invocation's :class:`Settings` as the command's first argument.
pass_settings = click.make_pass_decorator(Settings, ensure=True)


def parse_storage_options(values: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """Merge ``key=value`` pairs and JSON objects into one dict (values read as JSON when they are).

    Examples
    --------
    >>> parse_storage_options(["anon=true", "client_kwargs={\\"region_name\\": \\"eu\\"}"])
    {'anon': True, 'client_kwargs': {'region_name': 'eu'}}
    >>> parse_storage_options(['{"key": "k", "secret": "s"}', "key=other"])
    {'key': 'other', 'secret': 's'}
    """
    out: dict[str, Any] = {}
    for text in values:
        text = text.strip()
        if text.startswith("{"):
            try:
                value = json.loads(text)
            except ValueError as err:
                raise click.BadParameter(f"{text!r} is not a JSON object ({err})") from None
            if not isinstance(value, dict):
                raise click.BadParameter(f"{text!r} is not a JSON object")
            out.update(value)
            continue
        key, sep, raw = text.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(
                f"{text!r} is neither KEY=VALUE nor a JSON object; write e.g. anon=true"
            )
        try:
            out[key.strip()] = json.loads(raw)
        except ValueError:
            out[key.strip()] = raw
    return out


def parse_chunks(text: str | None) -> tuple[int, ...] | str | None:
    """``--chunks``: ``None`` or ``"source"`` (keep the source's), ``"auto"``, or ``"64,128"``.

    Raises
    ------
    click.BadParameter
        For anything but positive integers whose chunk could exist (at most
        :data:`MAX_CHUNK_ELEMENTS` elements), ``source`` or ``auto``.

    Examples
    --------
    >>> parse_chunks("64,128"), parse_chunks("auto"), parse_chunks(None)
    ((64, 128), 'auto', 'source')
    >>> try:
    ...     parse_chunks("99999999999999999999,5")
    ... except click.BadParameter as err:
    ...     print(err.message[:50])
    '99999999999999999999,5' is a chunk of more than 2
    """
    if text is None or text.strip().lower() == "source":
        return "source"
    if text.strip().lower() == "auto":
        return "auto"
    try:
        chunks = tuple(int(part) for part in text.replace("x", ",").split(",") if part.strip())
    except ValueError:
        chunks = ()
    if not chunks or any(c < 1 for c in chunks):
        raise click.BadParameter(
            f"{text!r} is not a chunk shape; write positive integers like 1000,64, or "
            "'source' or 'auto'"
        )
    if math.prod(chunks) > MAX_CHUNK_ELEMENTS:
        raise click.BadParameter(
            f"{text!r} is a chunk of more than 2**59 elements; write a chunk shape that fits in "
            "memory, like 1000,64"
        )
    return chunks


def parse_driver_options(values: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``--driver-option`` pairs as :func:`parse_storage_options` reads them, refusing the
    names ``oocarr.open`` takes itself (``mode``, ``driver``, ``storage_options``, ``url``).

    Examples
    --------
    >>> parse_driver_options(["shape=[10,4]", "dtype=float32"])
    {'shape': [10, 4], 'dtype': 'float32'}
    >>> parse_driver_options(["driver=hdf5"])
    Traceback (most recent call last):
    ...
    click.exceptions.BadParameter: 'driver' is not a driver option; use --driver instead
    """
    options = parse_storage_options(values)
    for name, instead in _RESERVED.items():
        if name in options:
            raise click.BadParameter(f"{name!r} is not a driver option; {instead}")
    return options


#: The largest chunk ``--chunks`` accepts, in elements: 2**59 of 16 bytes fill a 64-bit size.
MAX_CHUNK_ELEMENTS = 2**59
_RESERVED = {
    "mode": "commands open sources read-only and create destinations themselves",
    "driver": "use --driver instead",
    "storage_options": "use --storage-options instead",
    "url": "give the URL as the argument",
}


def _setter(name: str, convert: Callable[[Any], Any]) -> Callable[..., None]:
    """An option callback that stores a given (non-default) value in the invocation's settings."""

    def store(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value is None or value == () or value is False:
            return
        settings = ctx.ensure_object(Settings)
        try:
            converted = convert(value)
        except InvalidArgumentError as err:
            raise click.BadParameter(str(err)) from None
        if name in ("storage_options", "driver_options"):
            getattr(settings, name).update(converted)
        else:
            setattr(settings, name, converted)

    return store


def _shared(
    field_name: str, convert: Callable[[Any], Any], *decls: str, **kwargs: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A global option: not passed to the command, stored in the settings when given."""
    return click.option(*decls, expose_value=False, callback=_setter(field_name, convert), **kwargs)


_OPTIONS = [
    _shared(
        "memory",
        parse_size,
        "--memory",
        "-m",
        metavar="SIZE",
        help="Memory budget for tiles, e.g. 256MB or 2GiB (default: 1/8 of available memory, "
        "64 MB to 2 GB).",
    ),
    _shared(
        "storage_options",
        parse_storage_options,
        "--storage-options",
        "-o",
        metavar="KEY=VALUE|JSON",
        multiple=True,
        help="fsspec storage options for URLs with a protocol (s3://, memory:// ...); "
        "repeat, or give one JSON object. Values are read as JSON when they parse.",
    ),
    _shared(
        "driver",
        str,
        "--driver",
        "-d",
        metavar="NAME",
        help="Driver to open the (source) URL with, instead of inferring it from the suffix.",
    ),
    _shared(
        "driver_options",
        parse_driver_options,
        "--driver-option",
        "-O",
        metavar="KEY=VALUE",
        multiple=True,
        help="Driver option for the (source) URL, e.g. shape=[1000,64] and dtype=float32 for "
        "a raw binary file; repeat for several.",
    ),
    _shared(
        "executor",
        str,
        "--executor",
        "-x",
        metavar="ADDRESS",
        help="Run the work on the Dask distributed cluster whose scheduler is at ADDRESS "
        "(tcp://host:8786); the memory budget is then per task. Needs oocarr[dask].",
    ),
    _shared(
        "quiet",
        bool,
        "--quiet",
        "-q",
        is_flag=True,
        default=False,
        help="No progress bar and no summary line.",
    ),
]


def global_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the shared options (``--memory``, ``--storage-options``, ``--driver``,
    ``--driver-option``, ``--executor``, ``--quiet``).

    Examples
    --------
    >>> @click.command()
    ... @global_options
    ... @pass_settings
    ... def show(settings):
    ...     click.echo(settings.memory)
    >>> from click.testing import CliRunner
    >>> CliRunner().invoke(show, ["--memory", "1MB"]).output
    '1000000\\n'
    """
    for option in reversed(_OPTIONS):
        command = option(command)
    return command
