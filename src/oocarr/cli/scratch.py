"""``oocarr scratch [PATH] [--clean]``: what the scratch directory holds, and sweeping what
killed processes left there."""

from __future__ import annotations

import os

import click

from oocarr.errors import InvalidArgumentError, NotFoundError
from oocarr.store.scratch import ScratchEntry, clean, resolve_scratch_dir, scan

from .errors import EXIT_CODES_HELP
from .options import Settings, global_options, pass_settings
from .output import echo_json, human_bytes

__all__ = ["scratch", "entry_line"]


def entry_line(entry: ScratchEntry) -> str:
    """One listing line: state, size on disk, name and owner.

    Examples
    --------
    >>> entry_line(ScratchEntry("/s/.a.npy.tmp-7-0a1b2c3d", 4096, "stale", "pid 7"))
    'stale       4.1 kB  .a.npy.tmp-7-0a1b2c3d  (pid 7)'
    """
    owner = f"  ({entry.owner})" if entry.owner else ""
    return f"{entry.state:<8} {human_bytes(entry.size):>9}  {os.path.basename(entry.path)}{owner}"


def _directory(path: str | None) -> str:
    directory = resolve_scratch_dir() if path is None else os.path.abspath(path)
    if "://" in directory:
        raise InvalidArgumentError(
            f"the scratch directory is {directory}, not a local directory; oocarr scratch "
            "lists local directories only (name one as PATH)",
            url=directory,
        )
    if not os.path.isdir(directory):
        raise NotFoundError(f"no directory at {directory}; check the path", url=directory)
    return directory


def _summary(entries: list[ScratchEntry]) -> str:
    count = f"{len(entries)} {'entry' if len(entries) == 1 else 'entries'}"
    return f"{count}, {human_bytes(sum(e.size for e in entries))}"


@click.command(
    epilog=EXIT_CODES_HELP, short_help="List the scratch directory; --clean sweeps dead processes'."
)
@click.argument("path", required=False, type=click.Path(file_okay=False))
@click.option(
    "--clean",
    "do_clean",
    is_flag=True,
    help="Remove what dead processes left (stale entries); never a live process's files.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@global_options
@pass_settings
def scratch(settings: Settings, path: str | None, do_clean: bool, as_json: bool) -> None:
    """List the scratch directory (default: the one oocarr uses, $OOCARR_SCRATCH_DIR or
    oocarr-scratch-USER in the temporary directory), its size and what is stale.

    Each entry is live (its process is running), stale (its process is dead:
    a killed op's output, the temporary of an interrupted write, an unheld
    lock file) or unknown (no owner recorded; kept). --clean removes the
    stale ones. PATH may also be a directory of your arrays: there the
    temporaries (.NAME.tmp-PID-HEX) of dead writers are stale.

    \b
    Examples:
      oocarr scratch
      oocarr scratch --clean
      oocarr scratch --clean ~/data
    """
    with settings.session():
        directory = _directory(path)
        removed = clean(directory) if do_clean else []
        entries = scan(directory)
    stale = [e for e in entries if e.state == "stale"]
    if as_json:
        echo_json(
            {
                "directory": directory,
                "size": sum(e.size for e in entries),
                "removed": [{"path": e.path, "size": e.size} for e in removed],
                "entries": [
                    {"path": e.path, "size": e.size, "state": e.state, "owner": e.owner}
                    for e in entries
                ],
            }
        )
        return
    click.echo(f"{directory}: {_summary(entries)}; stale: {_summary(stale)}")
    if do_clean:
        click.echo(f"removed {_summary(removed)}")
    for entry in entries:
        click.echo(entry_line(entry))
