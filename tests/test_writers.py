"""One writer per array at a time, across processes (issue 14, item 7).

A second process asking to write an array that another process holds open
for writing gets ``StorageBusyError`` naming the URL; readers are never
refused; the lock goes when the holder closes the array, drops it, exits or
is killed.  Within a process the same array may be opened for writing twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import oocarr
from oocarr.errors import StorageBusyError
from oocarr.store import locks

# A child that holds ``url`` open for writing on command; each command answers "ok".
HOLDER = textwrap.dedent(
    """
    import gc, sys
    import oocarr
    url, x = sys.argv[1], None
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "open":
            x = oocarr.open(url, mode="r+")
            x.update_(x + 1)
        elif cmd == "close":
            x.close()
        elif cmd == "drop":
            x = None
            gc.collect()
        print("ok", flush=True)
    """
)

# A writer that waits its turn, then adds 1 fifteen times.
LOOP = textwrap.dedent(
    """
    import sys, time
    import oocarr
    from oocarr.errors import StorageBusyError
    url = sys.argv[1]
    while True:
        try:
            x = oocarr.open(url, mode="r+")
            break
        except StorageBusyError:
            time.sleep(0.02)
    for _ in range(15):
        x.update_(x + 1)
    x.close()
    """
)

URLS = {
    "npy": "a.npy",
    "zarr": "a.zarr",
    "zarr-member": "g.zarr#/grp/x",
    "hdf5": "a.h5#/x",
}


def _env(tmp_path):
    env = dict(os.environ)
    env["OOCARR_SCRATCH_DIR"] = str(tmp_path / "child-scratch")
    env.pop("PYTEST_CURRENT_TEST", None)
    return env


class Holder:
    """A child process driven line by line."""

    def __init__(self, url: str, tmp_path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=_env(tmp_path),
        )
        assert self.proc.stdout.readline().strip() == "ready"

    def __call__(self, cmd: str) -> None:
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline().strip()
        assert line == "ok", f"child failed on {cmd!r} (exit {self.proc.poll()})"

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.proc.stdin.close()
        self.proc.stdout.close()

    def stop(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()


def _busy(url: str) -> None:
    with pytest.raises(StorageBusyError, match="another process") as info:
        oocarr.open(url, mode="r+")
    assert info.value.url == oocarr.open(url).url
    assert "close it there or wait" in str(info.value)


@pytest.mark.parametrize("kind", sorted(URLS))
def test_second_writer_is_refused_until_the_first_lets_go(tmp_path, kind):
    url = str(tmp_path / URLS[kind])
    oocarr.save(np.zeros(6, "f4"), url)
    child = Holder(url, tmp_path)
    try:
        child("open")  # holds the array for writing, after one update
        _busy(url)
        with pytest.raises(StorageBusyError):
            oocarr.create(url, (6,), "f4", overwrite=True)
        np.testing.assert_array_equal(np.asarray(oocarr.open(url)), np.zeros(6) + 1)

        child("close")  # closed: writable here
        oocarr.open(url, mode="r+").close()

        child("open")
        _busy(url)
        child("drop")  # garbage collected: writable here
        mine = oocarr.open(url, mode="r+")
        mine.close()

        child("open")
        child.kill()  # SIGKILL: the kernel drops the lock
        mine = oocarr.open(url, mode="r+")
        mine.update_(mine + 1)
        mine.close()
    finally:
        if child.proc.poll() is None:
            child.stop()
    np.testing.assert_array_equal(np.asarray(oocarr.open(url)), np.zeros(6) + 4)


def test_readers_are_never_refused(tmp_path):
    url = str(tmp_path / "r.zarr")
    oocarr.save(np.arange(5.0), url)
    child = Holder(url, tmp_path)
    try:
        child("open")
        for _ in range(3):
            np.testing.assert_array_equal(np.asarray(oocarr.open(url)), np.arange(5.0) + 1)
    finally:
        child.stop()


def test_two_writers_in_turn_lose_no_update(tmp_path):
    url = str(tmp_path / "count.npy")
    np.save(url, np.zeros(8, "f8"))
    procs = [
        subprocess.Popen([sys.executable, "-c", LOOP, url], env=_env(tmp_path)) for _ in range(2)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    np.testing.assert_array_equal(np.load(url), np.zeros(8) + 30)


def test_one_process_may_open_an_array_for_writing_twice(tmp_path):
    url = str(tmp_path / "twice.npy")
    np.save(url, np.zeros(3, "f4"))
    a = oocarr.open(url, mode="r+")
    b = oocarr.open(url, mode="r+")
    a.update_(a + 1)
    b.update_(b + 1)
    lock = locks.lock_path(a.locator)
    a.close()
    assert locks.is_locked(lock)  # b still holds it
    b.close()
    assert not locks.is_locked(lock) and not os.path.exists(lock)
    np.testing.assert_array_equal(np.load(url), np.zeros(3) + 2)


def test_lock_outlives_the_store_update_closes(tmp_path):
    """``update_`` closes the handle's store; the array stays locked while the handle lives."""
    url = str(tmp_path / "kept.npy")
    np.save(url, np.zeros(2))
    x = oocarr.open(url, mode="r+")
    y = x.update_(x + 1)
    del x
    lock = locks.lock_path(y.locator)
    assert locks.is_locked(lock)
    del y
    import gc

    gc.collect()
    assert not locks.is_locked(lock)


def test_created_array_is_locked_until_closed(tmp_path):
    url = str(tmp_path / "new.zarr")
    x = oocarr.create(url, (4,), "i2")
    lock = locks.lock_path(x.locator)
    assert locks.is_locked(lock)
    x.close()
    assert not locks.is_locked(lock)
    assert sorted(os.listdir(tmp_path)) == ["new.zarr"]


def test_scratch_and_readers_take_no_lock(tmp_path):
    url = str(tmp_path / "plain.npy")
    np.save(url, np.ones(3))
    r = oocarr.open(url)
    s = oocarr.from_numpy(np.ones(3), mode="r+")
    assert locks.lock_path(r.locator) and not os.path.exists(locks.lock_path(r.locator))
    assert not locks.holds(s.locator) and not locks.holds(r.locator)
    remote = oocarr.save(np.ones(2), "memory://nolock-test.zarr", overwrite=True, mode="r+")
    assert locks.lock_path(remote.locator) is None  # object stores have no lock to take


def test_dead_writers_temporaries_go_when_the_array_is_next_opened_for_writing(tmp_path):
    url = str(tmp_path / "t.npy")
    np.save(url, np.zeros(2))
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(dead.stdout)
    stale = tmp_path / f".t.npy.tmp-{pid}-0a1b2c3d"
    stale.write_bytes(b"x" * 4096)
    mine = tmp_path / f".t.npy.tmp-{os.getpid()}-0a1b2c3d"
    mine.write_bytes(b"y")
    other = tmp_path / f".other.npy.tmp-{pid}-0a1b2c3d"
    other.write_bytes(b"z")
    oocarr.open(url).close()
    assert stale.exists()  # a reader sweeps nothing
    x = oocarr.open(url, mode="r+")
    assert not stale.exists()
    assert mine.exists() and other.exists()  # ours, and another array's
    x.close()
    mine.unlink()
