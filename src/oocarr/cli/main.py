"""The ``oocarr`` command group: global options, ``--version``, and the commands."""

from __future__ import annotations

import click

import oocarr

from .convert import convert
from .errors import EXIT_CODES_HELP
from .inspect import inspect
from .ls import ls
from .options import global_options
from .scratch import scratch

__all__ = ["main"]


@click.group(
    epilog=EXIT_CODES_HELP,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(
    oocarr.__version__, "--version", "-V", prog_name="oocarr", message="%(prog)s %(version)s"
)
@global_options
def main() -> None:
    """Inspect, list and convert arrays stored in .npy files, HDF5 datasets and Zarr v3
    arrays on any fsspec filesystem (and any other installed oocarr driver).

    URLs have the form PATH_OR_URL#/path/inside: data.npy, data.h5#/group/x,
    s3://bucket/store.zarr#/x. The global options can also follow the
    command name.

    \b
    Examples:
      oocarr inspect data.h5#/experiment/features
      oocarr ls data.h5
      oocarr --memory 256MB convert data.h5#/experiment/features features.zarr
    """


main.add_command(inspect)
main.add_command(ls)
main.add_command(convert)
main.add_command(scratch)
