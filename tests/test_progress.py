"""Progress from Python: ``with oocarr.progress():`` counts every streamer's tiles, tasks or
batches done of the total and the bytes it moved, draws one bar at a time (tqdm where it is
installed, the CLI's click bar on a terminal, a line elsewhere), and draws nothing when off."""

from __future__ import annotations

import io
import math
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import oocarr
from oocarr.engine import progress as progress_module

ROWS, COLS = 1000, 10
BUDGET = "100KB"  # a stored (1000, 10) f4 array is several tiles


@pytest.fixture
def stored(tmp_path):
    a = (np.arange(ROWS * COLS).reshape(ROWS, COLS) / 7.0).astype("f4")
    return a, oocarr.save(a, str(tmp_path / "a.npy"))


@pytest.fixture
def no_tqdm(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)


@pytest.fixture
def at_once(monkeypatch):
    """Bars drawn from the first tile on."""
    monkeypatch.setattr(progress_module, "DELAY", 0.0)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _only(runs):
    (run,) = runs
    assert run.done == run.total
    return run


def test_off_by_default_draws_nothing_and_changes_nothing(stored, tmp_path, capfd, at_once):
    a, x = stored
    assert not progress_module.enabled() and oocarr.config()["progress"] is False
    with oocarr.memory_budget(BUDGET):
        total = float(oocarr.sum(x))
        y = oocarr.save(x, str(tmp_path / "b.npy"))
        epoch = [np.asarray(xb) for (xb,) in oocarr.batches(x, batch_size=100)]
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    assert total == pytest.approx(a.sum(dtype="f8"), rel=1e-6)
    np.testing.assert_array_equal(oocarr.to_numpy(y), a)
    np.testing.assert_array_equal(np.concatenate(epoch), a)


def test_a_sum_counts_its_tiles_and_bytes(stored):
    a, x = stored
    with oocarr.memory_budget(BUDGET), oocarr.io_stats() as stats, oocarr.progress() as runs:
        total = float(oocarr.sum(x))
    run = _only(runs)
    # one stored input: one page read per tile
    assert run.total == stats.total.pages_read > 1
    assert run.nbytes == a.nbytes and run.unit == "tile" and "sum" in run.label
    assert "test_progress.py:" in run.label  # the user's call site
    assert total == pytest.approx(a.sum(dtype="f8"), rel=1e-6)


def test_a_save_counts_its_tiles_and_the_bytes_copied(tmp_path):
    a = np.random.default_rng(0).random((ROWS, COLS))
    with oocarr.progress() as runs:
        y = oocarr.save(a, str(tmp_path / "b.npy"), tile_bytes=8000)
    run = _only(runs)
    assert run.total == math.ceil(a.nbytes / 8000) == 10
    assert run.nbytes == a.nbytes
    np.testing.assert_array_equal(oocarr.to_numpy(y), a)


def test_a_stream_sum_step_counts_its_row_tiles(stored):
    a, x = stored
    y = oocarr.from_numpy(np.ones(ROWS, "f4"))
    loss = oocarr.stream_sum(lambda w, xt, yt: jnp.sum((xt @ w - yt) ** 2), tile_rows=64)
    w = jnp.full(COLS, 0.01)
    with oocarr.progress() as runs:
        value, grad = jax.jit(jax.value_and_grad(loss))(w, x, y)
    run = _only(runs)
    assert run.total == math.ceil(ROWS / 64)
    assert run.nbytes == a.nbytes + ROWS * 4
    r = a @ np.asarray(w) - 1.0
    assert float(value) == pytest.approx(float(r @ r), rel=1e-5)
    np.testing.assert_allclose(grad, 2 * a.T @ r, rtol=1e-5)


def test_a_batches_epoch_is_one_bar_of_batches_and_ops_inside_draw_none(stored):
    a, x = stored
    loader = oocarr.batches(x, batch_size=300)
    with oocarr.memory_budget(BUDGET), oocarr.progress() as runs:
        rows = []
        for (xb,) in loader:
            rows.append(np.asarray(xb))
            oocarr.sum(x)  # inside the epoch's bar: counts towards nothing
    run = _only(runs)
    assert run.unit == "batch" and run.total == math.ceil(ROWS / 300) == len(loader)
    assert run.nbytes == a.nbytes and "epoch 0" in run.label
    np.testing.assert_array_equal(np.concatenate(rows), a)


def test_a_jitted_op_reports_from_jax_callback_threads(stored):
    a, x = stored
    f = jax.jit(lambda v: oocarr.sum(oocarr.exp(v * 0.001)))
    with oocarr.memory_budget(BUDGET):
        f(x)  # compiled outside the block
        with oocarr.progress() as runs:
            total = float(f(x))
    # exp fuses into the sum's loop: one run, in a callback thread of the compiled call
    assert runs and all(r.done == r.total > 1 for r in runs)
    assert total == pytest.approx(np.exp(a * 0.001).sum(dtype="f8"), rel=1e-5)


def test_a_gradient_and_a_custom_op_show_theirs(stored):
    a, x = stored
    with oocarr.memory_budget(BUDGET), oocarr.progress() as runs:
        g = jax.grad(lambda v: oocarr.sum(v * v))(x)
        s = oocarr.softmax(x, axis=1)
    backward = [r.label.split(" @ ")[0] for r in runs if r.label.endswith(" (backward)")]
    assert sorted(backward) == ["multiply", "sum"]
    assert all(r.done == r.total > 1 for r in runs if r.total is not None)
    (custom,) = [r for r in runs if r.total is None]  # softmax does not know its tiles ahead
    assert custom.done > 1
    np.testing.assert_allclose(oocarr.to_numpy(g), 2 * a)
    e = np.exp(a - a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(oocarr.to_numpy(s), e / e.sum(axis=1, keepdims=True), rtol=1e-5)


def test_a_line_on_a_stream_that_is_not_a_terminal(stored, no_tqdm, at_once):
    a, x = stored
    stream = io.StringIO()
    with oocarr.memory_budget(BUDGET), oocarr.progress(file=stream) as runs:
        oocarr.sum(x)
    run = _only(runs)
    shown = stream.getvalue()
    assert shown.endswith("\n") and "\n" not in shown[:-1]
    last = shown.strip().rsplit("\r", 1)[-1]
    assert last.startswith(run.label + f": {run.total}/{run.total} tiles (")
    assert "/s" in last


def test_the_click_bar_on_a_terminal(stored, no_tqdm, at_once):
    _, x = stored
    stream = Terminal()
    with oocarr.memory_budget(BUDGET), oocarr.progress(file=stream):
        oocarr.sum(x)
    shown = stream.getvalue()
    assert "sum @ test_progress.py:" in shown and "100%" in shown and "/s" in shown


def test_tqdm_where_it_is_installed(stored, monkeypatch, at_once):
    a, x = stored
    bars = []

    class FakeTqdm:
        def __init__(self, **kwargs):
            self.kwargs, self.n, self.postfix, self.closed = kwargs, 0, "", False
            bars.append(self)

        def update(self, n):
            self.n += n

        def set_postfix_str(self, text, refresh=True):
            self.postfix = text

        def close(self):
            self.closed = True

    auto = types.ModuleType("tqdm.auto")
    auto.tqdm = FakeTqdm
    monkeypatch.setitem(sys.modules, "tqdm", types.ModuleType("tqdm"))
    monkeypatch.setitem(sys.modules, "tqdm.auto", auto)
    stream = io.StringIO()
    with oocarr.memory_budget(BUDGET), oocarr.progress(file=stream) as runs:
        oocarr.sum(x)
    (bar,) = bars
    run = _only(runs)
    assert bar.closed and bar.n == bar.kwargs["total"] == run.total
    assert bar.kwargs["unit"] == "tile" and bar.kwargs["file"] is stream
    assert bar.postfix.endswith("/s") and stream.getvalue() == ""


def test_config_turns_it_on_for_the_process_and_off(stored):
    _, x = stored
    try:
        assert oocarr.config(progress=True)["progress"] is True
        with oocarr.progress() as runs:  # records what the process-wide setting shows
            with oocarr.progress(False):
                assert oocarr.config()["progress"] is False
                oocarr.sum(x)
            oocarr.sum(x)
        assert len(runs) == 1
    finally:
        oocarr.config(progress=False)
    assert not progress_module.enabled()


def test_counts_are_exact_when_many_threads_advance():
    import threading

    bar = progress_module.Bar("threads", 8000)
    threads = [
        threading.Thread(target=lambda: [bar.advance(1, 3) for _ in range(1000)]) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bar.close()
    assert (bar.done, bar.bytes_done()) == (8000, 24000)


def test_tasks_on_a_cluster_are_one_bar_of_tasks(stored):
    distributed = pytest.importorskip("distributed")
    a, x = stored
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
        oocarr.memory_budget(BUDGET),
    ):
        with oocarr.executor(client, progress=False), oocarr.progress() as shown:
            silent = oocarr.to_numpy(x * 2.0)  # the executor's progress=False wins
        with oocarr.executor(client), oocarr.progress() as runs:
            doubled = oocarr.to_numpy(x * 2.0)
    assert shown == []
    run = _only(runs)
    assert run.unit == "task" and run.total > 1 and run.nbytes >= a.nbytes
    np.testing.assert_array_equal(doubled, a * 2)
    np.testing.assert_array_equal(silent, a * 2)
