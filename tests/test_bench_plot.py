"""Charts: ``scripts/bench.py --plot`` (``scripts/bench_plot.py``) and ``train_hdf5.py --plot``.

The oracles are the results JSON and the losses the training script prints, read here
independently of the drawing code; the charts are inspected through matplotlib's artists.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import re
import subprocess
import sys

import pytest

pytest.importorskip("matplotlib")
from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.image import imread  # noqa: E402

ROOT = pathlib.Path(__file__).parents[1]
SCRIPTS = ROOT / "scripts"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _script(name: str):
    """``scripts/NAME.py`` as a module (under another name: ``bench`` may be a package)."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(f"oocarr_{name}_script", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _peer(label: str, ratio: float, target: float | None = None) -> dict:
    peer = {"label": label, "engine": label.lower(), "median": 1.0, "ratio": ratio}
    if target is not None:
        peer |= {"target": f">= {target}", "met": ratio >= target}
    return peer


def _row(workload: str, number: int, op: str, fmt: str, cache: str, peers, engine="oocarr"):
    return {
        "workload": workload,
        "number": number,
        "title": f"the {workload} workload",
        "oocarr_engine": engine,
        "op": op,
        "format": fmt,
        "cache": cache,
        "size": "64×8 (2.0 KiB)",
        "peers": peers,
    }


def _report(rows: list[dict]) -> dict:
    """A results file as ``bench.py --json`` writes it, with the fields the charts read."""
    machine = {
        "cpu": "Test CPU",
        "cores_usable": 2,
        "ram_bytes": 8 * 2**30,
        "filesystem": {"type": "ext4", "device": "/dev/test"},
    }
    return {"mode": "tiny", "repeats": 1, "machine": machine, "verified": True, "rows": rows}


REPORT = _report(
    [
        _row("sum", 1, "sum", "hdf5", "warm", [_peer("Dask", 1.95, 1.5), _peer("loop", 1.13, 0.9)]),
        _row("sum", 1, "sum", "npy", "cold", [_peer("Dask", 2.62, 1.5), _peer("loop", 0.94, 0.9)]),
        _row("sum", 1, "mean0", "zarr", "warm", [_peer("Dask", 0.5, 1.5), _peer("loop", 3.76)]),
        _row(
            "chain",
            2,
            "chain",
            "hdf5",
            "warm",
            [_peer("Dask", 1.23, 1.5), _peer("stream_sum", 1.33), _peer("loop", 1.69)],
            engine="oocarr-opbyop",
        ),
        _row("chain", 2, "chain", "npy", "cold", [_peer("Dask", 2.62, 1.5), _peer("loop", 0.61)]),
        _row("batches", 6, "in-order", "hdf5", "warm", [_peer("loop", 1.41, 1.0)]),
        _row(
            "batches",
            6,
            "shuffled",
            "hdf5",
            "warm",
            [_peer("loop", 0.56, 1.0), _peer("in order", 0.31, 0.9)],
        ),
    ]
)


def _bars(ax) -> dict[str, list[tuple[float, float]]]:
    """Each peer's bars as (y of the bar's middle, x of its far end)."""
    return {
        c.get_label(): [(p.get_y() + p.get_height() / 2, p.get_x() + p.get_width()) for p in c]
        for c in ax.containers
    }


def test_each_workloads_chart_draws_the_results_ratios_and_targets():
    bench = _script("bench")
    plot = bench.import_plotting()
    charts = plot.by_workload([REPORT])
    assert list(charts) == ["sum", "chain", "batches"]
    for name, (rows, report) in charts.items():
        want = [r for r in REPORT["rows"] if r["workload"] == name]
        assert rows == want and report is REPORT
        fig = plot.draw(rows, report, bench.row_label)
        (ax,) = fig.axes
        ticks = ax.get_yticks()
        assert len(ticks) == len(want) == len(ax.get_yticklabels())
        bars = _bars(ax)
        drawn = sum(len(b) for b in bars.values())
        assert drawn == sum(len(r["peers"]) for r in want)
        for tick, row in zip(ticks, want):
            for peer in row["peers"]:
                ends = [x for y, x in bars[peer["label"]] if abs(y - tick) < 0.5]
                assert ends == [pytest.approx(peer["ratio"], rel=1e-12)], (row, peer)
        targets = sorted(
            float(p["target"].split()[-1]) for r in want for p in r["peers"] if "target" in p
        )
        ticks_x = sorted(
            seg[0][0]
            for c in ax.collections
            if isinstance(c, LineCollection)
            for seg in c.get_segments()
        )
        assert ticks_x == pytest.approx(targets)
        assert f"Workload {want[0]['number']}, {name}" in fig.get_suptitle()
        assert "Test CPU, 2 cores, 8.0 GiB RAM" in ax.get_title()
        assert ax.get_xscale() == "log" and "oocarr is faster" in ax.get_xlabel()


def test_a_later_results_file_replaces_a_workloads_rows():
    plot = _script("bench").import_plotting()
    rerun = _report([_row("sum", 1, "sum", "hdf5", "warm", [_peer("Dask", 3.0)])])
    charts = plot.by_workload([REPORT, rerun])
    assert list(charts) == ["sum", "chain", "batches"]
    assert charts["sum"] == (rerun["rows"], rerun)
    assert charts["chain"][1] is REPORT


def test_bench_plot_from_results_files_writes_one_png_per_workload(tmp_path):
    first, rerun = tmp_path / "full.json", tmp_path / "rerun.json"
    first.write_text(json.dumps(REPORT))
    rerun.write_text(
        json.dumps(_report([_row("sum", 1, "sum", "npy", "warm", [_peer("loop", 2)])]))
    )
    out = tmp_path / "charts"
    command = [sys.executable, str(SCRIPTS / "bench.py"), "--plot", str(out)]
    done = subprocess.run(
        [*command, "--from", str(first), str(rerun)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    names = ["01-sum.png", "02-chain.png", "06-batches.png"]
    assert sorted(p.name for p in out.iterdir()) == names
    heights = {}
    for name in names:
        path = out / name
        assert path.read_bytes()[:8] == PNG_SIGNATURE
        assert 2_000 < path.stat().st_size < 100_000
        image = imread(path)
        assert image.shape[1] == 800  # 8 inches at 100 dpi
        heights[name] = image.shape[0]
    # the rerun left one row of workload 1: its chart is the shortest
    assert heights["01-sum.png"] < min(heights["02-chain.png"], heights["06-batches.png"])

    alone = subprocess.run(
        [sys.executable, str(SCRIPTS / "bench.py"), "--from", str(first)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert alone.returncode == 2 and "--from needs --plot DIR" in alone.stderr


def test_the_charts_in_the_docs_exist_and_are_small():
    text = (ROOT / "docs" / "performance.md").read_text()
    linked = re.findall(r"\]\((images/bench/[^)]+\.png)\)", text)
    assert len(linked) >= 13
    for link in linked:
        path = ROOT / "docs" / link
        assert path.read_bytes()[:8] == PNG_SIGNATURE, link
        assert path.stat().st_size < 100_000, link


def test_without_matplotlib_plotting_asks_for_the_bench_extra(monkeypatch):
    bench, train = _script("bench"), _script("train_hdf5")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises
    with pytest.raises(SystemExit, match=re.escape("oocarr[bench]")):
        bench.import_plotting()
    with pytest.raises(
        SystemExit, match=re.escape("--plot needs matplotlib: pip install 'oocarr[bench]'")
    ):
        train.main(["--plot", "never.png", "--data", "never.h5"])


def test_train_hdf5_plot_draws_the_losses_it_prints(tmp_path, monkeypatch, capsys):
    """Both models, trained in this process at a tiny size (~8 s on 2 cores)."""
    import oocarr

    train = _script("train_hdf5")
    figures = []
    draw = train.plot_losses
    monkeypatch.setattr(train, "plot_losses", lambda *a: figures.append(draw(*a)) or figures[-1])
    png = tmp_path / "losses.png"
    args = ["--rows", "3000", "--features", "4", "--budget", "1MB", "--epochs", "2"]
    args += ["--batch-size", "256", "--lbfgs-steps", "3", "--workdir", str(tmp_path)]
    budget = oocarr.config()["memory_budget"]
    try:
        train.main([*args, "--plot", str(png)])
    finally:
        oocarr.set_memory_budget(budget)
    out = capsys.readouterr().out

    assert png.read_bytes()[:8] == PNG_SIGNATURE and imread(png).ndim == 3
    (fig,) = figures
    assert len(fig.axes) == 2
    lines = {line.get_label(): line for ax in fig.axes for line in ax.get_lines()}
    steps = [m.groups() for m in re.finditer(r"step +(\d+)  loss (\S+)", out)]
    epochs = [float(v) for v in re.findall(r"epoch \d+  loss (\S+)", out)]
    assert len(epochs) == 2 and len(steps) == 3

    lbfgs = lines["full-batch objective"]
    assert list(lbfgs.get_xdata()) == [int(s) for s, _ in steps]
    assert [f"{v:.5f}" for v in lbfgs.get_ydata()] == [v for _, v in steps]
    epoch_line = lines["epoch mean, at its last step"]
    assert [f"{v:.6f}" for v in epoch_line.get_ydata()] == [f"{v:.6f}" for v in epochs]
    batch = lines["batch"]
    x, y = list(batch.get_xdata()), list(batch.get_ydata())
    assert x == list(range(1, len(x) + 1)) and len(x) % 2 == 0
    half = len(x) // 2  # drop_last: the two epochs have as many steps
    assert list(epoch_line.get_xdata()) == [half, 2 * half]
    for epoch, mean in enumerate(epochs):
        assert sum(y[epoch * half : (epoch + 1) * half]) / half == pytest.approx(mean, abs=1e-6)


def test_train_hdf5_plot_of_the_mlp_alone_has_one_panel(tmp_path, capsys):
    train = _script("train_hdf5")
    losses = train.Losses(
        batch=[(1, 0.9), (2, 0.7), (3, 0.6), (4, 0.5)], epoch=[(2, 0.8), (4, 0.55)]
    )
    fig = train.plot_losses(losses, str(tmp_path / "mlp.png"), "the MLP alone")
    (ax,) = fig.axes
    drawn = {line.get_label(): list(zip(line.get_xdata(), line.get_ydata())) for line in ax.lines}
    assert drawn == {"batch": losses.batch, "epoch mean, at its last step": losses.epoch}
    assert (tmp_path / "mlp.png").read_bytes()[:8] == PNG_SIGNATURE
    assert "drew the losses to" in capsys.readouterr().out
