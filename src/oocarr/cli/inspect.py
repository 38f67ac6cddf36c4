"""``oocarr inspect URL``: what a stored array is, how it is stored, and its statistics."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import click

from oocarr.api.storage import tile_projection
from oocarr.config import memory_budget_bytes
from oocarr.engine.executor import DaskExecutor, current_executor
from oocarr.engine.stats import IOCounts, call_site, record
from oocarr.errors import BudgetTooSmallError
from oocarr.store import BlockedArray

from .errors import EXIT_CODES_HELP
from .options import Settings, global_options, pass_settings
from .output import echo_fields, echo_json, fmt_shape, human_bytes, plain
from .progress import Progress
from .streaming import COPY_SHARE, STATS_SHARE, read_tiles, tile_shape
from .summary import Summary, TileMoments, TileSummaryTask

__all__ = ["inspect", "describe", "array_stats"]


def describe(store: BlockedArray) -> dict[str, Any]:
    """``store.info()`` plus what the command adds: initialised chunks, budget and tile shape.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> report = describe(oocarr.from_numpy(np.zeros((4, 2), "f4")).store)
    >>> report["chunks_initialized"], report["tile_shape"]
    (None, [4, 2])
    """
    report = store.info()
    done = store.initialized_chunks()
    report["chunks_initialized"] = None if done is None else list(done)
    report["memory_budget"] = memory_budget_bytes()
    try:
        report["tile_shape"] = list(tile_shape(store, COPY_SHARE))
    except BudgetTooSmallError:
        report["tile_shape"] = None
    return report


def array_stats(store: BlockedArray, *, progress: bool = True) -> dict[str, Any]:
    """Min, max, mean, std, NaN and infinity counts, streamed under the memory budget.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> array_stats(oocarr.from_numpy(np.array([1, 2, 3, 6])).store, progress=False)["mean"]
    3.0
    """
    summary = Summary(store.dtype)
    tile, projected = tile_projection(store, STATS_SHARE, remedy="with --memory")
    cluster = current_executor()
    with Progress("reading", store.nbytes, enabled=progress) as bar:
        if cluster is None:
            for _region, values in read_tiles(store, tile):
                summary.add(values)
                bar.advance(values.nbytes)
        else:
            for moments, nbytes in _stats_on(cluster, store, tile, projected):
                summary.merge(moments)
                bar.advance(nbytes)
    return summary.result()


def _stats_on(
    cluster: DaskExecutor, store: BlockedArray, tile: tuple[int, ...], projected: int
) -> Iterator[tuple[TileMoments, int]]:
    """``(moments, bytes read)`` of each tile in C order, computed on the cluster's workers
    (folded in the same order as here, so the statistics have the same bits)."""
    site = call_site("stats")
    counts = IOCounts(calls=1)
    tiled = store.with_pages(tile)
    tasks = [TileSummaryTask(store.locator, tiled.block_region(i)) for i in tiled.block_grid()]
    cluster.check_reachable((store.locator,), site)
    cluster.check_fits(projected, site)
    try:
        for task, moments in zip(tasks, cluster.map(tasks, counts, site)):
            counts.tiles += 1
            yield moments, math.prod(s.stop - s.start for s in task.region) * store.itemsize
    finally:
        record(site, counts)


def _number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return f"{value[0]:.7g}{value[1]:+.7g}j"
    if isinstance(value, int):
        return str(value)
    return f"{value:.7g}"


def _rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    order = report["byte_order"]
    chunks = "contiguous" if report["chunks"] is None else fmt_shape(report["chunks"])
    if report["chunks_initialized"] is not None:
        done, total = report["chunks_initialized"]
        chunks += f", {done} of {total} initialised"
    itemsize = report["itemsize"]
    page = report["page_shape"]
    ratio = report["compression_ratio"]
    size = f"{human_bytes(report['nbytes'])} logical, {human_bytes(report['stored_nbytes'])} stored"
    if ratio:
        size += f" (ratio {ratio:.2f})"
    rows = [
        ("url", report["url"]),
        ("driver", report["driver"]),
        ("shape", fmt_shape(report["shape"])),
        ("dtype", report["dtype"] + ("" if order == "none" else f" ({order}-endian)")),
        ("chunks", chunks),
        ("page shape", f"{fmt_shape(page)}, {human_bytes(math.prod(page) * itemsize)}"),
    ]
    tile = report["tile_shape"]
    budget = human_bytes(report["memory_budget"])
    rows.append(
        (
            "tile shape",
            f"{fmt_shape(tile)}, {human_bytes(math.prod(tile) * itemsize)} "
            f"(streaming under the {budget} budget)"
            if tile is not None
            else f"none: one chunk exceeds the {budget} budget",
        )
    )
    rows += [
        ("compression", report["compression"] or "none"),
        ("size", size),
        ("attrs", "\n".join(f"{k}: {json.dumps(v)}" for k, v in report["attrs"].items()) or "-"),
        ("locator", json.dumps(plain(report["locator"]), sort_keys=True)),
    ]
    stats = report.get("stats")
    if stats is not None:
        rows += [
            ("min", _number(stats["min"])),
            ("max", _number(stats["max"])),
            ("mean", _number(stats["mean"])),
            ("std", _number(stats["std"])),
            ("finite", str(stats["count"])),
            ("NaN", str(stats["nan_count"])),
            ("infinite", str(stats["inf_count"])),
        ]
    return rows


@click.command(
    epilog=EXIT_CODES_HELP, short_help="Describe a stored array (add --stats for statistics)."
)
@click.argument("url")
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON object (keys in docs/cli.md)."
)
@click.option(
    "--stats",
    is_flag=True,
    help="Also stream the array under the memory budget for min, max, mean, std and the "
    "counts of NaN and infinite values.",
)
@global_options
@pass_settings
def inspect(settings: Settings, url: str, as_json: bool, stats: bool) -> None:
    """Describe the stored array at URL.

    Driver, locator, shape, dtype and byte order, chunks, the page and tile
    shapes, compression, logical and stored bytes, initialised chunks where
    the format can tell, and attrs.

    \b
    Examples:
      oocarr inspect data.h5#/experiment/features
      oocarr inspect --stats --json s3://bucket/x.zarr -o anon=true
    """
    with settings.session():
        store = settings.open(url)
        try:
            report = describe(store)
            if stats:
                report["stats"] = array_stats(store, progress=not settings.quiet)
        finally:
            store.close()
    if as_json:
        echo_json(report)
    else:
        echo_fields(_rows(report))
