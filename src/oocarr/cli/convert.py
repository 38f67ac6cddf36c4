"""``oocarr convert SRC DST``: copy an array from any driver to any driver, tile by tile."""

from __future__ import annotations

from typing import Any

import click

import oocarr
from oocarr.api.storage import copy_tiles
from oocarr.errors import AlreadyExistsError
from oocarr.store import BlockedArray
from oocarr.store.containment import check_apart

from .errors import EXIT_CODES_HELP, EXIT_USAGE, EXIT_WRITE, CommandError, writing
from .options import Settings, global_options, parse_chunks, parse_storage_options, pass_settings
from .output import fmt_dtype, fmt_shape, human_bytes
from .progress import Progress
from .streaming import COPY_SHARE, checksum, reading, tile_shape

__all__ = ["convert", "copy", "destination_chunks"]


def destination_chunks(
    spec: tuple[int, ...] | str, source: BlockedArray, target: type[BlockedArray]
) -> tuple[int, ...] | None:
    """The ``chunks=`` for ``create``: ``"source"`` keeps the source's where the destination is
    chunked, ``"auto"`` lets the destination driver choose, a tuple is taken as given.

    Examples
    --------
    >>> import numpy as np, oocarr, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "c.zarr")
    >>> src = oocarr.save(np.zeros((8, 2)), path, chunks=(4, 2)).store
    >>> destination_chunks("source", src, oocarr.get_driver("hdf5"))
    (4, 2)
    >>> destination_chunks("source", src, oocarr.get_driver("memmap")) is None
    True
    """
    if spec == "auto":
        return None
    if spec == "source":
        return source.chunks if target.supports_chunks else None
    assert not isinstance(spec, str)  # parse_chunks gives "auto", "source" or a shape
    return tuple(spec)


def copy(source: BlockedArray, target: BlockedArray, progress: Progress) -> None:
    """Copy ``source`` into ``target`` in tiles of whole chunks of both, under the budget."""
    copy_tiles(source, target, advance=progress.advance, remedy="with --memory")


def _verify(source: BlockedArray, target: BlockedArray, enabled: bool) -> str:
    """Checksums of both sides, re-read; raise when they differ (the copy is then deleted)."""
    tile = tile_shape(target, COPY_SHARE, source.chunks)
    with Progress("verifying", 2 * source.nbytes, enabled=enabled) as bar:
        want = checksum(source, tile, bar.advance)
        got = checksum(target, tile, bar.advance)
    if want != got:
        type(target).delete(target.locator)
        raise CommandError(
            f"{target.url} differs from {source.url} after the copy (BLAKE2b {got} != {want}); "
            "the copy was deleted. Check the destination storage and convert again",
            EXIT_WRITE,
        )
    return want


@click.command(
    epilog=EXIT_CODES_HELP,
    short_help="Copy an array to another URL, driver or format, tile by tile.",
)
@click.argument("src")
@click.argument("dst")
@click.option(
    "--chunks",
    metavar="SHAPE|source|auto",
    help="Destination chunks, e.g. 1000,64; 'source' (default) keeps the source's where the "
    "destination is chunked, 'auto' lets the destination driver choose.",
)
@click.option(
    "--compression",
    metavar="NAME[:LEVEL]",
    help="Destination compression, as the destination format offers it: gzip[:0-9] or lzf "
    "(HDF5); gzip, zstd, blosc, lz4, zlib or bz2 [:LEVEL] (Zarr). Default: none.",
)
@click.option(
    "--zarr-format",
    type=click.Choice(["2", "3"]),
    help="Zarr destinations: write Zarr v2 (.zarray) or v3 (zarr.json, the default).",
)
@click.option(
    "--shards",
    metavar="SHAPE|auto",
    help="Zarr v3 destinations: store the chunks in shards of this shape (whole chunks on "
    "every axis, e.g. 1024,64), or 'auto' for shards of about 32 MiB. Default: no sharding.",
)
@click.option("--overwrite", is_flag=True, help="Replace DST, once the new copy is complete.")
@click.option("--attrs/--no-attrs", default=True, help="Copy the attrs (default: copy).")
@click.option("--verify", is_flag=True, help="Re-read both sides and compare checksums.")
@click.option("--dst-driver", metavar="NAME", help="Driver for DST (default: from its suffix).")
@click.option(
    "--dst-storage-options",
    metavar="KEY=VALUE|JSON",
    multiple=True,
    help="fsspec storage options for DST (default: those of --storage-options when DST has a "
    "protocol).",
)
@global_options
@pass_settings
def convert(
    settings: Settings,
    src: str,
    dst: str,
    chunks: str | None,
    compression: str | None,
    zarr_format: str | None,
    shards: str | None,
    overwrite: bool,
    attrs: bool,
    verify: bool,
    dst_driver: str | None,
    dst_storage_options: tuple[str, ...],
) -> None:
    """Copy the array at SRC to DST, from any driver to any driver, a tile at a time within
    the memory budget.

    DST appears only when complete: a failure or Ctrl-C midway leaves
    nothing there (with --overwrite, the old array stays intact).  DST may
    not lie inside SRC's storage nor hold it (a.zarr to a.zarr/b.zarr);
    another array of the same file or group is fine (f.h5#/a to f.h5#/b).

    \b
    Examples:
      oocarr convert data.h5#/experiment/features features.zarr --compression zstd
      oocarr --memory 256MB convert features.zarr out.npy --verify
      oocarr convert a.npy s3://bucket/a.zarr -o anon=false --overwrite
      oocarr convert old.zarr new.zarr --shards 4096,64 --compression blosc
    """
    chunk_spec = parse_chunks(chunks)
    assert chunk_spec is not None  # parse_chunks gives "source" for no --chunks
    layout: dict[str, Any] = {}
    if zarr_format is not None:
        layout["zarr_format"] = int(zarr_format)
    if shards is not None:
        shape = parse_chunks(shards)
        layout["shards"] = "auto" if shape in ("auto", "source") else shape
    dst_options: Any = (
        parse_storage_options(dst_storage_options)
        if dst_storage_options
        else settings.options_for(dst)
    )
    with settings.session():
        source = settings.open(src)
        cls, locator = oocarr.resolve(
            dst, driver=dst_driver, storage_options=dst_options, driver_options=layout or None
        )
        check_apart(source.locator, locator)
        copied = source.attrs if attrs and cls.supports_attrs else {}
        progress = Progress("converting", source.nbytes, enabled=not settings.quiet)
        with writing(locator.full_url, replacing=overwrite and cls.exists(locator)), progress:
            try:
                target = cls.create(
                    locator,
                    source.shape,
                    source.dtype,
                    chunks=destination_chunks(chunk_spec, source, cls),
                    compression=compression,
                    attrs=copied,
                    overwrite=overwrite,
                )
            except AlreadyExistsError:
                raise CommandError(
                    f"{locator.full_url} already exists; pass --overwrite to replace it (the "
                    "old array is kept until the new copy is complete)",
                    EXIT_USAGE,
                ) from None
            with target, reading(source):
                target.set_dimension_names(source.dimension_names)
                copy(source, target, progress)
        digest = None
        if verify:
            with oocarr.open(locator).store as copied_store:
                digest = _verify(source, copied_store, not settings.quiet)
        source.close()
    if settings.quiet:
        return
    click.echo(
        f"{source.url} -> {locator.full_url}: {fmt_shape(source.shape)} "
        f"{fmt_dtype(source.dtype)}, {human_bytes(source.nbytes)} in {progress.seconds:.2f} s "
        f"({human_bytes(source.nbytes / progress.seconds)}/s)"
    )
    if digest is not None:
        click.echo(f"verified: both sides have BLAKE2b {digest}")
