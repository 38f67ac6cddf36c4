"""``oocarr ls URL``: the arrays (and groups) in a container, one line each."""

from __future__ import annotations

from typing import Any

import click
import numpy as np

from oocarr.store import BlockedArray
from oocarr.store.dtypes import byte_order
from oocarr.store.locator import split_url
from oocarr.store.registry import guess_driver, storage_driver
from oocarr.store.storage_errors import transport_failures

from .errors import EXIT_CODES_HELP
from .options import Settings, global_options, pass_settings
from .output import echo_json, fmt_dtype, fmt_shape

__all__ = ["ls", "listing_driver", "entry_json"]


def listing_driver(
    container: str, storage_options: dict[str, Any], name: str | None = None
) -> type[BlockedArray]:
    """The driver that lists ``container``: ``name`` when given, else the one that claims it.

    A driver claiming the container by its own suffix wins over one that
    claims it otherwise (a directory that is also a Zarr group).

    Examples
    --------
    >>> import tempfile
    >>> listing_driver(tempfile.mkdtemp(), {}).name
    'memmap'
    """
    if name is not None:
        return storage_driver(name)
    return guess_driver(container, "", storage_options, listing=True)


def entry_json(entry: dict[str, Any]) -> dict[str, Any]:
    """A ``list_arrays`` entry with stable keys and JSON types (dtype name plus byte order).

    Examples
    --------
    >>> entry_json({"path": "/x", "url": "a.h5#/x", "kind": "array", "shape": (2,),
    ...             "dtype": np.dtype(">f4"), "chunks": None})["byte_order"]
    'big'
    """
    dtype = entry.get("dtype")
    return {
        "path": entry["path"],
        "url": entry["url"],
        "kind": entry["kind"],
        "shape": None if entry.get("shape") is None else list(entry["shape"]),
        "dtype": dtype.name if isinstance(dtype, np.dtype) else dtype,
        "byte_order": byte_order(dtype) if isinstance(dtype, np.dtype) else None,
        "chunks": None if entry.get("chunks") is None else list(entry["chunks"]),
    }


def _tree_lines(entries: list[dict[str, Any]]) -> list[str]:
    depths = [len([p for p in e["path"].split("/") if p]) for e in entries]
    top = min(depths, default=0)
    names = [
        "  " * (d - top)
        + (e["path"].rstrip("/").rsplit("/", 1)[-1] or "/")
        + ("/" if e["kind"] == "group" else "")
        for e, d in zip(entries, depths)
    ]
    width = max((len(n) for n in names), default=0)
    shapes = [fmt_shape(e["shape"]) if e["kind"] == "array" else "" for e in entries]
    shape_width = max((len(s) for s in shapes), default=0)
    dtypes = [fmt_dtype(e["dtype"]) if e["kind"] == "array" else "" for e in entries]
    dtype_width = max((len(t) for t in dtypes), default=0)
    lines = []
    for entry, name, shape, dtype in zip(entries, names, shapes, dtypes):
        if entry["kind"] == "group":
            lines.append(name)
            continue
        chunks = "contiguous" if entry["chunks"] is None else f"chunks {fmt_shape(entry['chunks'])}"
        lines.append(f"{name:<{width}}  {shape:<{shape_width}}  {dtype:<{dtype_width}}  {chunks}")
    return lines


@click.command(epilog=EXIT_CODES_HELP, short_help="List the arrays and groups inside a container.")
@click.argument("url")
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON object (keys in docs/cli.md)."
)
@global_options
@pass_settings
def ls(settings: Settings, url: str, as_json: bool) -> None:
    """List the arrays inside a container: an HDF5 file's groups and datasets as a tree, a
    Zarr hierarchy, a directory of .npy files.

    Each array shows its shape, dtype and chunks. URL#/group lists one
    group only.

    \b
    Examples:
      oocarr ls data.h5
      oocarr ls --json s3://bucket/store.zarr -o anon=true
    """
    with settings.session():
        container, inner = split_url(url)
        options = settings.options_for(container) or {}
        with transport_failures("listing", url):
            driver = listing_driver(container, options, settings.driver)
            entries = driver.list_arrays(container, inner, options)
    if as_json:
        echo_json({"url": url, "driver": driver.name, "entries": [entry_json(e) for e in entries]})
    elif not entries:
        click.echo(f"no arrays in {url}", err=True)
    else:
        for line in _tree_lines(entries):
            click.echo(line.rstrip())
