"""Scratch storage: where arrays without a URL (``from_numpy(x)``, op outputs, gradients) live.

Scratch arrays are ``.npy`` files in one directory by default; they can
instead be any driver's arrays under any URL (``memory://scratch`` with
the ``fsspec`` driver, say).  The default directory is
``$OOCARR_SCRATCH_DIR`` when set, else ``oocarr-scratch-<user>`` in the
system temporary directory, else (when that is RAM-backed, as ``/tmp`` is
on some Linux systems) ``~/.cache/oocarr/scratch``.  A directory the user
names that is RAM-backed is refused unless they allow it, since spilling
to RAM defeats the purpose of out-of-core arrays.

Killed processes leave their scratch behind, so each process marks what it
writes: scratch names start with the process's *owner token*
(``p<pid>r<hex>_``), and the process holds an ``flock`` on the marker file
``.oocarr-owner-<token>.lock`` in each local scratch directory it uses while
any scratch array of it may exist there (so an unused directory is empty).
The first use of a directory in a process removes what dead owners left
there (their marker is no longer locked, which holds even when a pid is
reused), and the hidden ``.NAME.tmp-PID-HEX`` temporaries of dead
processes; :func:`scan` lists a directory and :func:`clean` sweeps one on
demand (``oocarr scratch --clean``).
"""

from __future__ import annotations

import atexit
import contextlib
import getpass
import os
import re
import shutil
import tempfile
import threading
import uuid
from dataclasses import dataclass
from typing import Any

from oocarr.errors import InvalidArgumentError

from . import locks

__all__ = [
    "scratch_dir",
    "scratch_driver",
    "scratch_locator",
    "set_scratch_dir",
    "scratch_path",
    "is_ram_backed",
    "track",
    "release",
    "remove_tracked",
    "resolve_scratch_dir",
    "is_scratch",
    "owner_token",
    "ScratchEntry",
    "scan",
    "clean",
]

_RAM_FILESYSTEMS = {"tmpfs", "ramfs"}
# Configuration, not driver knowledge: the drivers used when none is configured. Everything
# else about a scratch array (its address, layout, deletion) is asked of its driver.
DEFAULT_LOCAL_DRIVER = "memmap"
DEFAULT_URL_DRIVER = "fsspec"
# Re-entrant: release() runs from finalisers, which the collector may run in a thread that
# already holds these locks (a plain Lock would deadlock it).
_lock = threading.RLock()
_configured: tuple[str, bool, str] | None = None
_tracked: set[str] = set()
_tracked_locators: set[Any] = set()
#: Local containers (an HDF5 file, a Zarr group) made for one scratch array each, by locator.
_containers: dict[Any, str] = {}
_owner_pid = os.getpid()
_MARKER_PREFIX = ".oocarr-owner-"
_OWNED = re.compile(r"^\.?(p\d+r[0-9a-f]{6})_")
_MARKER = re.compile(r"^\.oocarr-owner-(p\d+r[0-9a-f]{6})\.lock$")
_LOCK_FILE = re.compile(r"^\..+\.lock$")


def _new_token() -> str:
    return f"p{os.getpid()}r{os.urandom(3).hex()}"


_token = _new_token()
#: Local scratch directories this process has used (and swept once).
_used: set[str] = set()
#: The owner markers this process holds now, by directory: the descriptor holding each.
_markers: dict[str, int] = {}
#: Scratch locators whose storage may exist, with their directory: a directory's marker is
#: held while it has any.
_live: dict[Any, str] = {}
#: Directories where :func:`scratch_path` handed out a path: their markers stay until exit.
_pinned: set[str] = set()


def is_ram_backed(path: str) -> bool:
    """True when ``path`` lies on a RAM filesystem (``tmpfs``/``ramfs``; Linux only).

    Examples
    --------
    >>> is_ram_backed("/proc/self") in (True, False)
    True
    """
    path = os.path.realpath(path)
    best, fstype = "", ""
    try:
        with open("/proc/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) < 3:
                    continue
                mount = fields[1].replace("\\040", " ")
                inside = path == mount or path.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best):
                    best, fstype = mount, fields[2]
    except OSError:
        return False
    return fstype in _RAM_FILESYSTEMS


def _is_url(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def set_scratch_dir(
    path: str | None, *, allow_ram: bool = False, driver: str | None = None
) -> None:
    """Use ``path`` for scratch arrays (``None`` restores the default).

    Parameters
    ----------
    path : str or None
        A local directory (created if missing), or a URL such as
        ``"memory://scratch"`` or ``"s3://bucket/scratch"``.
    allow_ram : bool
        Accept a RAM-backed directory (refused by default).
    driver : str, optional
        The driver scratch arrays are written with: ``"memmap"`` for a
        local directory, ``"fsspec"`` (Zarr) for a URL, unless named.

    Raises
    ------
    InvalidArgumentError
        When ``path`` is RAM-backed and ``allow_ram`` is false.
    UnknownDriverError
        When ``driver`` is not registered.

    Examples
    --------
    >>> import tempfile
    >>> set_scratch_dir(tempfile.mkdtemp(), allow_ram=True)
    >>> set_scratch_dir("memory://oocarr-doc-scratch")
    >>> scratch_driver()
    'fsspec'
    >>> set_scratch_dir(None)
    """
    global _configured
    if path is None:
        with _lock:
            _configured = None
        return
    if driver is not None:
        from .registry import storage_driver

        storage_driver(driver)
    if _is_url(path):
        path = path.rstrip("/")
        driver = driver or DEFAULT_URL_DRIVER
    else:
        path = os.path.abspath(os.path.expanduser(path))
        _check_dir(path, allow_ram)
        driver = driver or DEFAULT_LOCAL_DRIVER
    with _lock:
        _configured = (path, allow_ram, driver)


def _check_dir(path: str, allow_ram: bool) -> None:
    os.makedirs(path, exist_ok=True)
    if not allow_ram and is_ram_backed(path):
        raise InvalidArgumentError(
            f"scratch directory {path} is RAM-backed (tmpfs); out-of-core arrays would "
            "use memory. Point OOCARR_SCRATCH_DIR at a disk directory, or pass "
            "allow_ram=True (OOCARR_SCRATCH_ALLOW_RAM=1) to accept it",
            url=path,
        )


def scratch_dir() -> str:
    """The directory scratch arrays are written to (created on first use).

    The first call in a process for a local directory marks it as used by
    this process and removes what dead processes left there (see the
    module's docstring).

    Examples
    --------
    >>> import os
    >>> os.path.isdir(scratch_dir())
    True
    """
    path = resolve_scratch_dir()
    if path not in _used and not _is_url(path):
        _enter(path)
    return path


def resolve_scratch_dir() -> str:
    """The scratch directory :func:`scratch_dir` uses, without marking or sweeping it.

    Examples
    --------
    >>> resolve_scratch_dir() == scratch_dir()
    True
    """
    with _lock:
        configured = _configured
    if configured is not None:
        if not _is_url(configured[0]):
            _check_dir(*configured[:2])
        return configured[0]
    allow_ram = os.environ.get("OOCARR_SCRATCH_ALLOW_RAM", "") not in ("", "0")
    env = os.environ.get("OOCARR_SCRATCH_DIR")
    if env:
        path = os.path.abspath(os.path.expanduser(env))
        _check_dir(path, allow_ram)
        return path
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid()) if hasattr(os, "getuid") else "user"
    path = os.path.join(tempfile.gettempdir(), f"oocarr-scratch-{user}")
    os.makedirs(path, exist_ok=True)
    if is_ram_backed(path) and not allow_ram:
        path = os.path.join(os.path.expanduser("~"), ".cache", "oocarr", "scratch")
        _check_dir(path, allow_ram)
    return path


def scratch_driver() -> str:
    """The driver scratch arrays are written with (``"memmap"`` unless configured).

    Examples
    --------
    >>> scratch_driver()
    'memmap'
    """
    with _lock:
        configured = _configured
    return DEFAULT_LOCAL_DRIVER if configured is None else configured[2]


def scratch_path(suffix: str = ".npy") -> str:
    """A fresh, unused path in the scratch directory, removed when the process exits.

    Examples
    --------
    >>> scratch_path().endswith(".npy")
    True
    """
    directory = scratch_dir()
    with _enter_lock:
        _pinned.add(directory)
        _mark(directory)
    return track(os.path.join(directory, f"{_token}_{uuid.uuid4().hex}{suffix}"))


def scratch_locator(stem: str | None = None, shape: Any = None, dtype: Any = None) -> Any:
    """The locator of a scratch array named ``stem`` (fresh when not given), written with
    :func:`scratch_driver` and deleted at exit if still there.

    The driver picks the address (its ``scratch_locator``); ``shape`` and
    ``dtype`` let it choose a layout the array needs (bfloat16 on the memmap
    driver goes to a raw file whose locator holds the layout).

    Examples
    --------
    >>> loc = scratch_locator()
    >>> loc.driver, loc.url.endswith(".npy")
    ('memmap', True)
    >>> scratch_locator("grad-1") == scratch_locator("grad-1")
    True
    >>> scratch_locator("w", (2, 3), "bfloat16").url.endswith(".bin")
    True
    """
    from .locator import is_local
    from .registry import get_driver

    cls = get_driver(scratch_driver())
    stem = f"{_token}_{stem or uuid.uuid4().hex}"
    directory = scratch_dir()
    locator = cls.scratch_locator(directory, stem, shape, dtype)
    if not _is_url(directory):
        with _enter_lock:
            _live[locator] = directory  # first: a release() run by the collector keeps the marker
            _mark(directory)
    with _lock:
        _tracked_locators.add(locator)
        locks.make_private(locator)
        if locator.path and is_local(locator.url):
            _containers[locator] = locator.url
    return locator


def release(locator: Any) -> None:
    """Remove the container made for the scratch array at ``locator`` (once the array itself
    is deleted): an HDF5 file or Zarr group left empty would otherwise stay behind.

    Examples
    --------
    >>> release(scratch_locator())  # memmap scratch has no container: nothing to do
    """
    with _lock:
        container = _containers.get(locator)
    if container is not None:
        if os.path.isdir(container):
            shutil.rmtree(container, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.remove(container)
    with _enter_lock:
        directory = _live.pop(locator, None)
        idle = directory is not None and directory not in _live.values()
        if idle and directory is not None and directory not in _pinned:
            _drop_markers([directory])


def track(path: str) -> str:
    """Remove the file ``path`` when this process exits; returns ``path``.

    Examples
    --------
    >>> track(scratch_path(".tmp")).endswith(".tmp")
    True
    """
    with _lock:
        _tracked.add(path)
    return path


def remove_tracked() -> None:
    """Remove every scratch file this process made that still exists, and its owner markers.

    Run at exit; arrays garbage-collected earlier have removed theirs already.
    A later use of scratch marks the directory again.
    """
    if os.getpid() != _owner_pid:
        return
    with _lock:
        paths = list(_tracked)
        _tracked.clear()
        locators = list(_tracked_locators)
        _tracked_locators.clear()
    for locator in locators:
        from .registry import get_driver

        try:
            get_driver(locator.driver).delete(locator)
        except Exception:  # noqa: BLE001 - best effort at exit; the storage may be gone
            pass
        release(locator)
    for path in paths:
        with contextlib.suppress(OSError):
            os.remove(path)
    _release_markers()


def owner_token() -> str:
    """The prefix of this process's scratch names (``p<pid>r<hex>``).

    Examples
    --------
    >>> os.path.basename(scratch_path()).startswith(owner_token() + "_")
    True
    """
    return _token


def is_scratch(locator: Any) -> bool:
    """Whether ``locator`` is a scratch array (made here, or under a scratch directory this
    process uses): private to its process, so it needs no writer lock.

    Examples
    --------
    >>> from oocarr.store.locator import Locator
    >>> is_scratch(scratch_locator()), is_scratch(Locator.make("memmap", "/data/a.npy"))
    (True, False)
    """
    return locks.is_private(locator)


def _enter(path: str) -> None:
    """Sweep what dead processes left in ``path``, on this process's first use of it."""
    with _enter_lock:
        if path in _used:
            return
        _used.add(path)
        locks.make_private(directory=path)
    with contextlib.suppress(OSError):
        clean(path)


def _mark(path: str) -> None:
    """Hold this process's owner marker in ``path`` (caller holds ``_enter_lock``), before
    anything of the process is written there."""
    if path not in _markers:
        _markers[path] = _hold_marker(path)


def _drop_markers(paths: list[str] | None = None) -> None:
    """Let this process's markers in ``paths`` (all by default) go (caller holds
    ``_enter_lock``): it has no scratch left there."""
    for path in list(_markers) if paths is None else paths:
        fd = _markers.pop(path, -1)
        if fd >= 0:
            locks.unlock_and_remove(fd, os.path.join(path, f"{_MARKER_PREFIX}{_token}.lock"))


def _hold_marker(path: str) -> int:
    """Lock this process's owner marker in ``path`` (-1 when the directory takes no files).

    The marker is locked under a temporary name and renamed into place, so a
    marker that is visible is locked from its first moment.
    """
    marker = os.path.join(path, f"{_MARKER_PREFIX}{_token}.lock")
    tmp = f"{marker}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        fd = locks.try_flock(tmp)
    except OSError:
        return -1
    if fd is None:
        return -1
    try:
        os.replace(tmp, marker)
    except OSError:
        locks.unlock_and_remove(fd, tmp)
        return -1
    return fd


@dataclass(frozen=True)
class ScratchEntry:
    """One entry of a scratch (or user) directory as :func:`scan` sees it.

    ``state`` is ``"live"`` (a live process owns it), ``"stale"`` (its owner is
    dead: :func:`clean` removes it) or ``"unknown"`` (no owner recorded: kept).
    """

    path: str
    size: int
    state: str
    owner: str


def _classify(name: str, path: str, owners: dict[str, bool]) -> tuple[str, str]:
    """``(state, owner)`` of the directory entry ``name``; ``owners`` maps a token to
    whether its marker is locked."""
    marker = _MARKER.match(name)
    if marker:
        token = marker.group(1)
        return ("live" if owners.get(token) else "stale"), token
    owned = _OWNED.match(name)
    if owned:
        token = owned.group(1)
        return ("live" if token == _token or owners.get(token) else "stale"), token
    pid = locks.temp_pid(name)
    if pid is not None:
        alive = pid == os.getpid() or locks.pid_alive(pid)
        return ("live" if alive else "stale"), f"pid {pid}"
    if _LOCK_FILE.match(name) and _is_writer_lock(path):
        return ("live" if locks.is_locked(path) else "stale"), "writer lock"
    return "unknown", ""


def _is_writer_lock(path: str) -> bool:
    """A lock file as :mod:`oocarr.store.locks` writes them: empty or one pid."""
    try:
        if not os.path.isfile(path) or os.path.getsize(path) > 32:
            return False
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip().isdigit() or os.path.getsize(path) == 0
    except OSError:
        return False


def scan(directory: str | None = None) -> list[ScratchEntry]:
    """Every entry of ``directory`` (default: the scratch directory) with its owner's state.

    Entries are files or directories; sizes are bytes on disk.  A user's
    directory can be scanned too: there only hidden temporaries
    (``.NAME.tmp-PID-HEX``) and writer-lock files have an owner to check.

    Examples
    --------
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> open(os.path.join(d, ".a.npy.tmp-999999999-0a1b2c3d"), "w").close()
    >>> [(os.path.basename(e.path), e.state) for e in scan(d)]
    [('.a.npy.tmp-999999999-0a1b2c3d', 'stale')]
    """
    directory = resolve_scratch_dir() if directory is None else directory
    names = sorted(os.listdir(directory))
    owners = {}
    for name in names:
        marker = _MARKER.match(name)
        if marker:
            token = marker.group(1)
            owners[token] = token == _token or locks.is_locked(os.path.join(directory, name))
    entries = []
    for name in names:
        path = os.path.join(directory, name)
        state, owner = _classify(name, path, owners)
        entries.append(ScratchEntry(path, locks.entry_size(path), state, owner))
    return entries


def clean(directory: str | None = None) -> list[ScratchEntry]:
    """Remove what dead processes left in ``directory`` (default: the scratch directory).

    Only entries :func:`scan` calls stale go: files of owners whose marker
    no process holds, temporaries whose writer is dead, unheld writer-lock
    files.  Nothing of a live process is touched.  Returns what was removed.

    Examples
    --------
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> open(os.path.join(d, ".a.npy.tmp-999999999-0a1b2c3d"), "w").close()
    >>> [os.path.basename(e.path) for e in clean(d)], os.listdir(d)
    (['.a.npy.tmp-999999999-0a1b2c3d'], [])
    """
    stale = [e for e in scan(directory) if e.state == "stale"]
    # Owners' files before their markers, so what is left always has its marker.
    stale.sort(key=lambda e: _MARKER.match(os.path.basename(e.path)) is not None)
    removed = []
    for entry in stale:
        name = os.path.basename(entry.path)
        if _MARKER.match(name) or _LOCK_FILE.match(name):
            fd = locks.try_flock(entry.path) if os.path.exists(entry.path) else None
            if fd is None:
                continue
            locks.unlock_and_remove(fd, entry.path)
        else:
            with contextlib.suppress(OSError):
                locks.remove_entry(entry.path)
        removed.append(entry)
    return removed


def _release_markers() -> None:
    """Remove this process's owner markers at exit, once its scratch is gone."""
    with _enter_lock:
        _live.clear()
        _pinned.clear()
        _drop_markers()


def _after_fork_in_child() -> None:
    # A forked child writes scratch under its own token and marker; the parent keeps its own.
    global _token, _lock, _enter_lock
    _lock, _enter_lock = threading.RLock(), threading.RLock()
    for fd in _markers.values():
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
    _markers.clear()
    _live.clear()
    _pinned.clear()
    _token = _new_token()


_enter_lock = threading.RLock()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(remove_tracked)
