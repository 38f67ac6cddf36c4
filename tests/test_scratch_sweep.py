"""Scratch of killed processes is swept; a live process's scratch never is (issue 14, item 4).

Each process marks its scratch names with an owner token and holds a lock on
its owner marker in the directory; what a dead owner left is removed by the
next process that uses the directory, and by ``oocarr scratch --clean``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
from click.testing import CliRunner

import oocarr
from oocarr.cli.main import main
from oocarr.store import locks, scratch

# An update_ loop on a user array that runs until it is killed.
LOOP = textwrap.dedent(
    """
    import sys
    import numpy as np, oocarr
    x = oocarr.open(sys.argv[1], mode="r+")
    keep = [oocarr.from_numpy(np.ones(50_000)) for _ in range(3)]  # live scratch
    x.update_(x + 1)
    print("looping", flush=True)
    while True:
        x.update_(x + 1)
    """
)

# Holds scratch arrays and a temporary of its own until its stdin closes.
LIVE = textwrap.dedent(
    """
    import os, sys
    import numpy as np, oocarr
    from oocarr.store.scratch import scratch_dir
    x = oocarr.from_numpy(np.arange(1000.0))
    tmp = os.path.join(scratch_dir(), f".w.npy.tmp-{os.getpid()}-0a1b2c3d")
    open(tmp, "w").close()
    print(x.locator.url, tmp, flush=True)
    sys.stdin.read()
    print(float(np.asarray(x).sum()), os.path.exists(tmp), flush=True)
    os.remove(tmp)
    """
)


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _env(directory) -> dict[str, str]:
    env = dict(os.environ, OOCARR_SCRATCH_DIR=str(directory))
    env.pop("PYTEST_CURRENT_TEST", None)
    return env


def _sweep_as_a_new_user(directory) -> None:
    """Use ``directory`` for scratch here, as a new process would (its first use sweeps)."""
    scratch.set_scratch_dir(str(directory), allow_ram=True)
    try:
        scratch.scratch_dir()
    finally:
        scratch.set_scratch_dir(None)


def test_a_killed_update_loop_leaves_nothing_after_the_next_process(tmp_path):
    store = tmp_path / "scratch"
    store.mkdir()
    url = str(tmp_path / "a.npy")
    np.save(url, np.zeros(100_000))
    proc = subprocess.Popen(
        [sys.executable, "-c", LOOP, url], stdout=subprocess.PIPE, text=True, env=_env(store)
    )
    assert proc.stdout.readline().strip() == "looping"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    left = os.listdir(store)
    assert any(n.endswith(".npy") for n in left), left  # the killed loop's scratch arrays
    beside = tmp_path / f".a.npy.tmp-{proc.pid}-0a1b2c3d"
    beside.write_bytes(b"\0" * 8192)  # as if killed mid-commit

    _sweep_as_a_new_user(store)
    assert os.listdir(store) == []

    x = oocarr.open(url, mode="r+")  # the next writer sweeps beside the array
    assert not beside.exists()
    values = np.asarray(x)
    assert values.min() == values.max() >= 1  # whole updates only
    x.close()
    assert sorted(os.listdir(tmp_path)) == ["a.npy", "scratch"]


def test_a_live_process_scratch_survives_a_sweep(tmp_path):
    store = tmp_path / "scratch"
    store.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", LIVE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_env(store),
    )
    array, tmp = proc.stdout.readline().split()
    removed = scratch.clean(str(store))
    _sweep_as_a_new_user(store)
    assert removed == [] and os.path.exists(array) and os.path.exists(tmp)
    out, _ = proc.communicate("", timeout=60)
    assert out.split() == [str(float(np.arange(1000.0).sum())), "True"]
    assert proc.returncode == 0
    assert os.listdir(store) == []  # it removed its scratch and its marker when it exited


def _stale_and_live(directory) -> tuple[int, dict[str, str]]:
    """Entries of a dead owner, of a live one (this test holds its marker) and of nobody."""
    dead_pid = _dead_pid()
    names = {
        "dead_marker": ".oocarr-owner-p1r00beef.lock",
        "dead_array": "p1r00beef_0123.npy",
        "dead_temp": f".p1r00beef_0123.npy.tmp-{dead_pid}-0a1b2c3d",
        "orphan_temp": f".w.npy.tmp-{dead_pid}-0a1b2c3d",
        # the pid in a token is only a label: this one is ours, but its marker is not held
        "reused_pid": f"p{os.getpid()}r0dead0_0.npy",
        "live_marker": ".oocarr-owner-p2r00cafe.lock",
        "live_array": "p2r00cafe_4567.npy",
        "unknown": "notes.txt",
    }
    for name in names.values():
        (directory / name).write_bytes(b"\0" * 1000)
    fd = locks.try_flock(str(directory / names["live_marker"]))
    return fd, names


def test_scratch_command_lists_then_cleans(tmp_path):
    fd, names = _stale_and_live(tmp_path)
    try:
        runner = CliRunner()
        listed = runner.invoke(main, ["scratch", str(tmp_path)])
        assert listed.exit_code == 0, listed.output
        assert f"{tmp_path}: 8 entries" in listed.output
        assert "stale: 5 entries" in listed.output
        assert sorted(os.listdir(tmp_path)) == sorted(names.values())  # listing removes nothing

        cleaned = runner.invoke(main, ["scratch", "--clean", "--json", str(tmp_path)])
        assert cleaned.exit_code == 0, cleaned.output
        report = json.loads(cleaned.output)
        assert len(report["removed"]) == 5
        kept = {names["live_marker"], names["live_array"], names["unknown"]}
        assert set(os.listdir(tmp_path)) == kept
        states = {os.path.basename(e["path"]): e["state"] for e in report["entries"]}
        assert states == {
            names["live_marker"]: "live",
            names["live_array"]: "live",
            names["unknown"]: "unknown",
        }
    finally:
        os.close(fd)


def test_scratch_command_defaults_to_the_scratch_directory(tmp_path):
    (tmp_path / f".x.npy.tmp-{_dead_pid()}-0a1b2c3d").write_bytes(b"1")
    result = CliRunner().invoke(
        main, ["scratch", "--clean"], env={"OOCARR_SCRATCH_DIR": str(tmp_path)}
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"{tmp_path}: 0 entries")
    assert "removed 1 entry" in result.output
    assert os.listdir(tmp_path) == []


def test_scratch_command_on_a_missing_directory(tmp_path):
    result = CliRunner().invoke(main, ["scratch", str(tmp_path / "nope")])
    assert result.exit_code == 3
    assert "no directory at" in result.output


def test_scratch_names_carry_the_owner_token_and_the_marker_lives_with_them(tmp_path):
    import gc

    scratch.set_scratch_dir(str(tmp_path), allow_ram=True)
    try:
        x = oocarr.from_numpy(np.zeros(3))
        y = x + 1.0
        assert os.path.basename(x.locator.url).startswith(scratch.owner_token() + "_")
        marker = tmp_path / f".oocarr-owner-{scratch.owner_token()}.lock"
        assert locks.is_locked(str(marker))
        del x, y
        gc.collect()
        assert os.listdir(tmp_path) == []  # no scratch left: no marker either
    finally:
        scratch.set_scratch_dir(None)
