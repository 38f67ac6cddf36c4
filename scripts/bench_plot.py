"""Charts of ``scripts/bench.py``'s results: one PNG per workload of oocarr's speed ratios.

Each chart has a group of horizontal bars per row of the results (operation, format, cache),
one bar per peer: oocarr's speed ÷ the peer's, on a log scale from 1, so that a bar to the
right means oocarr is faster and one to the left that the peer is.  A peer's target is a black
tick across its bar, and the figure at the end of a bar is the ratio (✓ or ✗: target met or
missed).  The title names the workload and the machine the results were measured on.

    python scripts/bench.py --plot charts/                          # after a run
    python scripts/bench.py --plot charts/ --from full.json rerun.json

Drawing uses matplotlib's ``Figure`` directly (the Agg canvas, no pyplot, no global state).
Workload 3's and 11's reads against the I/O bound are not peers and are not drawn.
"""

from __future__ import annotations

import io
import os
import textwrap
from collections.abc import Callable, Iterable
from typing import Any

#: Inches per bar and between two rows' groups of bars; the width fits a docs page at DPI.
BAR_INCHES, GAP_INCHES, WIDTH_INCHES, DPI = 0.16, 0.12, 8.0, 100
#: Colours of a chart's PNG: a palette keeps the tallest (workload 14's) under 100 KB.
PNG_COLOURS = 64
#: Peers' colours, the same in every chart (others take the next free one of ``PALETTE``).
COLOURS = {
    "Dask": "#4878d0",
    "loop": "#ee854a",
    "h5py": "#ee854a",
    "zarr-python": "#ee854a",
    "TensorStore": "#d65f5f",
    "NumPy in memory": "#6acc64",
    "JAX in memory": "#6acc64",
    "SciPy in memory": "#6acc64",
    "stream_sum": "#956cb4",
    "in order": "#956cb4",
    "never imported": "#6acc64",
    "local executor": "#956cb4",
    "dask.array on the cluster": "#4878d0",
}
PALETTE = ("#8c613c", "#dc7ec0", "#797979", "#d5bb67", "#82c6e2")
#: Ratio ticks of the log axis.
TICKS = (0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50)
MISSING = "matplotlib is needed to draw charts: pip install 'oocarr[bench]' (or matplotlib)"


def by_workload(reports: Iterable[dict[str, Any]]) -> dict[str, tuple[list[dict], dict]]:
    """Each workload's rows with peers, and the report they come from, in workload order.

    A later report's rows of a workload replace an earlier one's (a rerun of one workload).
    """
    found: dict[str, tuple[list[dict], dict]] = {}
    for report in reports:
        rows: dict[str, list[dict]] = {}
        for row in report["rows"]:
            if row["peers"]:
                rows.setdefault(row["workload"], []).append(row)
        found |= {name: (r, report) for name, r in rows.items()}
    return dict(sorted(found.items(), key=lambda item: item[1][0][0]["number"]))


def machine_text(report: dict[str, Any]) -> str:
    """The machine and the run in one line: CPU, cores, RAM, disk, sizes, repeats."""
    m = report["machine"]
    return (
        f"{m['cpu']}, {m['cores_usable']} cores, {m['ram_bytes'] / 2**30:.1f} GiB RAM, "
        f"{m['filesystem']['type']} on {m['filesystem']['device']}; {report['mode']} sizes, "
        f"median of {report['repeats']}"
    )


def row_labels(rows: list[dict], what: Callable[[dict], str]) -> list[str]:
    """Each row's label: its operation (``what``), size, format and cache, less those that
    every row of the chart shares (the operation stays when all are shared)."""
    fields = [(what(r), r.get("size", ""), r["format"], r["cache"]) for r in rows]
    varies = [len({f[i] for f in fields}) > 1 for i in range(4)]
    varies[0] = varies[0] or not any(varies)
    labels = [" · ".join(v for v, keep in zip(f, varies) if keep) for f in fields]
    return [textwrap.fill(t.replace("-to-", "→"), 44, break_on_hyphens=False) for t in labels]


def _colour(label: str, taken: dict[str, str]) -> str:
    if label not in taken:
        free = [c for c in PALETTE if c not in taken.values()]
        taken[label] = COLOURS.get(label) or (free or PALETTE)[0]
    return taken[label]


def draw(rows: list[dict], report: dict[str, Any], what: Callable[[dict], str]) -> Any:
    """The chart of one workload's ``rows`` (a ``matplotlib.figure.Figure``).

    Row ``i`` of ``rows`` is y tick ``i``, top down; its peers' bars lie within half a unit
    of it, one ``BarContainer`` per peer label, each bar from 1 to the ratio.
    """
    try:
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
    except ImportError as error:
        raise ImportError(MISSING) from error

    most = max(len(r["peers"]) for r in rows)
    slot = most * BAR_INCHES + GAP_INCHES  # inches per row
    height = most * BAR_INCHES / slot  # of a row's group, in y units
    fig = Figure(figsize=(WIDTH_INCHES, 1.6 + len(rows) * slot), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    colours: dict[str, str] = {}
    bars: dict[str, list[tuple[float, float]]] = {}
    ratios = [1.0]
    for i, row in enumerate(rows):
        for j, peer in enumerate(row["peers"]):
            y = i - height / 2 + (j + 0.5) * height / most
            bars.setdefault(peer["label"], []).append((y, peer["ratio"]))
            ratios.append(peer["ratio"])
            mark, right, at = "", peer["ratio"] >= 1, peer["ratio"]
            if "met" in peer:
                target = float(peer["target"].split()[-1])
                ratios.append(target)
                half = 0.5 * height / most
                ax.vlines(target, y - half, y + half, colors="black", linewidth=2, zorder=3)
                mark = " ✓" if peer["met"] else " ✗"
                if (target >= 1) == right:  # the figure goes beyond the tick, not across it
                    at = max(at, target) if right else min(at, target)
            ax.annotate(
                f"{peer['ratio']:.2f}×{mark}",
                (at, y),
                xytext=(4 if right else -4, 0),
                textcoords="offset points",
                ha="left" if right else "right",
                va="center",
                fontsize=7,
            )
    for label, ys in bars.items():
        ax.barh(
            [y for y, _ in ys],
            [r - 1 for _, r in ys],
            height=0.9 * height / most,
            left=1,
            color=_colour(label, colours),
            label=label,
        )
    ax.set_xscale("log")
    low, high = min(ratios) / 2.2, max(ratios) * 2.2  # room for the figures beside the bars
    ax.set_xlim(low, high)
    ticks = [t for t in TICKS if low <= t <= high]
    ax.set_xticks(ticks, [f"{t:g}×" for t in ticks])
    ax.minorticks_off()
    ax.axvline(1, color="black", linewidth=0.8)
    ax.set_yticks(range(len(rows)), row_labels(rows, what), fontsize=7.5)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.set_xlabel("oocarr's speed ÷ the peer's (log scale; > 1: oocarr is faster)", fontsize=8.5)
    first = rows[0]
    fig.suptitle(f"Workload {first['number']}, {first['workload']}: {first['title']}", size=11)
    sizes = {r.get("size", "") for r in rows}
    shared = f"{sizes.pop()}\n" if len(sizes) == 1 else ""
    ax.set_title(shared + machine_text(report), fontsize=8, color="#444444")
    handles, labels = ax.get_legend_handles_labels()
    if any("met" in p for r in rows for p in r["peers"]):
        handles.append(Line2D([], [], color="black", linewidth=2))
        labels.append("target")
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize=8)
    return fig


def file_name(row: dict[str, Any]) -> str:
    """``14-stream-sum.png`` for a row of workload 14, ``stream-sum``."""
    return f"{row['number']:02d}-{row['workload']}.png"


def plot(reports: Iterable[dict[str, Any]], out_dir: str, what: Callable[[dict], str]) -> list[str]:
    """Write one chart per workload of ``reports`` into ``out_dir``; their paths.

    ``what`` labels a row's operation (``bench.row_label``); of a workload found in several
    reports, the last one's rows are drawn.
    """
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for rows, report in by_workload(reports).values():
        path = os.path.join(out_dir, file_name(rows[0]))
        save(draw(rows, report, what), path)
        paths.append(path)
    return paths


def save(fig: Any, path: str) -> None:
    """Write ``fig`` to ``path`` as a PNG of ``PNG_COLOURS`` colours (Pillow comes with
    matplotlib)."""
    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    buffer.seek(0)
    with Image.open(buffer) as image:
        image.convert("RGB").quantize(PNG_COLOURS).save(path, optimize=True)
