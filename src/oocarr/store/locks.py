"""One writer per stored array at a time: a lock file beside the array, held with ``flock``.

A process that opens an array with ``mode="r+"`` or creates one holds its
*writer lock* until it closes it (or drops it, or exits): a second process
that asks to write the same array gets :class:`~oocarr.errors.StorageBusyError`
at once, instead of the two interleaving read-then-write updates and losing
some.  Readers take no lock and are never refused.

The lock is ``fcntl.flock`` on a hidden file beside the array's container
(:func:`lock_path`): ``.a.npy.lock`` for ``a.npy``, ``.c.h5#g#x.lock`` for
the dataset ``c.h5#/g/x``, ``.s.zarr#x.lock`` for the Zarr array
``s.zarr#/x``.  It is never the data file, nor inside a Zarr hierarchy or a
directory that a commit replaces by rename.  Every writer must address an
array the same way (``s.zarr#/x``, not ``s.zarr/x``) for the lock to see
it.  The kernel drops an ``flock`` when its holder dies, so a killed writer
never leaves the array locked.  Within one process the lock is counted:
the same array may be opened for writing any number of times.  Only local
paths are locked; object stores (``s3://``, ``memory://``) have no lock to
take.  A writer that takes the lock first removes the temporaries that dead
writers left beside the array (:func:`sweep_temporaries`).

The same lock files back the scratch directory's per-process owner markers
(:mod:`oocarr.store.scratch`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from oocarr.errors import StorageBusyError

from .locator import Locator, is_local, normalize_container

__all__ = [
    "WriterLock",
    "acquire",
    "writer_lock",
    "make_private",
    "is_private",
    "released_on_error",
    "release_writer",
    "lock_path",
    "holds",
    "try_flock",
    "is_locked",
    "pid_alive",
    "temp_pid",
    "sweep_temporaries",
]

LOCK_SUFFIX = ".lock"
#: Names :func:`oocarr.store.blocked.temp_sibling` gives: ``.NAME.tmp-PID-HEX``.
_TEMP = re.compile(r"^\..+\.tmp-(\d+)-[0-9a-f]{8}$")
_ATTEMPTS = 8
_LONGEST_NAME = 200


@dataclass
class _Entry:
    fd: int
    count: int
    pid: int


# Re-entrant: _drop runs from finalisers, which the collector may run while this thread holds it.
_mutex = threading.RLock()
_entries: dict[str, _Entry] = {}
#: Arrays private to this process (its scratch: :mod:`oocarr.store.scratch` marks them), by
#: locator and by directory: nothing else writes them, so they take no writer lock.
_private_arrays: set[Locator] = set()
_private_dirs: set[str] = set()


def _container(locator: Locator) -> str | None:
    """The local path of ``locator``'s container, or ``None`` when it is not local."""
    url = locator.url
    if not is_local(url) or not (url.startswith("file://") or os.path.isabs(url)):
        return None
    path = normalize_container(url).rstrip(os.sep)
    return path if os.path.basename(path) else None


def lock_path(locator: Locator) -> str | None:
    """The writer-lock file of the array at ``locator``, or ``None`` where none applies.

    A hidden file beside the container, named after it and the inner path:
    derived from the locator alone, whether or not the container exists yet,
    and never inside a Zarr hierarchy (other readers would list it) nor
    inside a directory that a commit replaces.  Non-local URLs get ``None``.

    Examples
    --------
    >>> lock_path(Locator.make("memmap", "/data/a.npy"))
    '/data/.a.npy.lock'
    >>> lock_path(Locator.make("fsspec", "/data/s.zarr", "/g/x"))
    '/data/.s.zarr#g#x.lock'
    >>> lock_path(Locator.make("fsspec", "s3://bucket/a.zarr")) is None
    True
    """
    container = _container(locator)
    if container is None:
        return None
    head, name = os.path.split(container)
    parts = [p for p in locator.path.split("/") if p]
    if parts:
        name = "#".join([name, *parts])
    if len(name) > _LONGEST_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:16]
        name = f"{name[: _LONGEST_NAME - 17]}#{digest}"
    return os.path.join(head, f".{name}{LOCK_SUFFIX}")


def array_path(locator: Locator) -> str | None:
    """The local file or directory holding the array at ``locator`` (``None`` when not
    local): the container, or the array's directory inside a container directory.

    Examples
    --------
    >>> array_path(Locator.make("memmap", "/data/a.npy"))
    '/data/a.npy'
    """
    container = _container(locator)
    parts = [p for p in locator.path.split("/") if p]
    if container is not None and parts and os.path.isdir(container):
        return os.path.join(container, *parts)
    return container


def try_flock(path: str) -> int | None:
    """Open (creating) ``path`` and take an exclusive ``flock`` without waiting.

    Returns the open descriptor, or ``None`` when another open file holds
    the lock.  The file is checked to still be the one named ``path`` once
    locked (a releasing holder removes it), so two processes never both
    hold a lock through different files of the same name.

    Raises
    ------
    OSError
        When the file cannot be opened (missing directory, no permission).

    Examples
    --------
    >>> import tempfile, os
    >>> fd = try_flock(os.path.join(tempfile.mkdtemp(), ".x.lock"))
    >>> fd is not None
    True
    >>> os.close(fd)
    """
    for _ in range(_ATTEMPTS):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        if _same_file(fd, path):
            return fd
        os.close(fd)
    return None


def _same_file(fd: int, path: str) -> bool:
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)


def unlock_and_remove(fd: int, path: str) -> None:
    """Remove the lock file ``path`` held through ``fd`` (if it is still that file), then
    close ``fd``, which releases the lock."""
    with contextlib.suppress(OSError):
        if _same_file(fd, path):
            os.unlink(path)
    with contextlib.suppress(OSError):
        os.close(fd)


def is_locked(path: str) -> bool:
    """Whether a live process holds the ``flock`` on the file ``path``.

    Examples
    --------
    >>> import tempfile, os
    >>> is_locked(os.path.join(tempfile.mkdtemp(), "missing.lock"))
    False
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def _holder(path: str) -> str:
    """``" (process N)"`` from the pid the holder wrote into the lock file, or ``""``."""
    try:
        with open(path, encoding="ascii") as f:
            pid = int(f.read(32).strip())
    except (OSError, ValueError):
        return ""
    return f" (process {pid})"


def _write_pid(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


class WriterLock:
    """This process's hold on the writer lock of one array; :meth:`release` (or garbage
    collection, or exit) lets it go.  Holds are counted per process and lock file."""

    def __init__(self, path: str, url: str) -> None:
        self.path = path
        self.url = url
        self._finalizer = weakref.finalize(self, _drop, path, os.getpid())

    def share(self) -> WriterLock:
        """Another hold on the same lock (released independently of this one)."""
        with _mutex:
            entry = _entries.get(self.path)
            if entry is None or entry.pid != os.getpid() or not self.held:
                raise RuntimeError(f"the writer lock of {self.url} is no longer held")
            entry.count += 1
        return WriterLock(self.path, self.url)

    def release(self) -> None:
        """Let this hold go (once; later calls do nothing)."""
        self._finalizer()

    @property
    def held(self) -> bool:
        """Whether this hold is still in force."""
        return self._finalizer.alive

    def __repr__(self) -> str:
        return f"<WriterLock {self.path!r} {'held' if self.held else 'released'}>"


def _drop(path: str, pid: int) -> None:
    if pid != os.getpid():
        return
    with _mutex:
        entry = _entries.get(path)
        if entry is None or entry.pid != pid:
            return
        entry.count -= 1
        if entry.count > 0:
            return
        del _entries[path]
        unlock_and_remove(entry.fd, path)


def make_private(locator: Locator | None = None, directory: str | None = None) -> None:
    """Mark the array at ``locator``, or every array under ``directory``, as private to this
    process: :func:`writer_lock` takes no lock for it.

    Examples
    --------
    >>> loc = Locator.make("memmap", "/nowhere/private-example.npy")
    >>> is_private(loc)
    False
    >>> make_private(loc); is_private(loc)
    True
    """
    with _mutex:
        if locator is not None:
            _private_arrays.add(locator)
        if directory is not None:
            _private_dirs.add(directory.rstrip(os.sep) + os.sep)


def is_private(locator: Locator) -> bool:
    """Whether :func:`make_private` marked ``locator`` or a directory holding it.

    Examples
    --------
    >>> make_private(directory="/nowhere/private-dir")
    >>> is_private(Locator.make("memmap", "/nowhere/private-dir/a.npy"))
    True
    """
    with _mutex:
        if locator in _private_arrays:
            return True
        dirs = list(_private_dirs)
    url = getattr(locator, "url", "")
    return any(url.startswith(d) for d in dirs)


def writer_lock(locator: Locator, mode: str = "r+") -> WriterLock | None:
    """The writer lock an array opened with ``mode`` holds: none when read-only or private to
    this process (:func:`is_private`), else :func:`acquire`'s.

    Examples
    --------
    >>> import tempfile, os
    >>> loc = Locator.make("memmap", os.path.join(tempfile.mkdtemp(), "a.npy"))
    >>> writer_lock(loc, "r") is None
    True
    >>> lock = writer_lock(loc); holds(loc)
    True
    >>> lock.release()
    """
    if mode == "r" or is_private(locator):
        return None
    return acquire(locator)


def acquire(locator: Locator) -> WriterLock | None:
    """Hold the writer lock of the array at ``locator`` (``None`` where no lock applies).

    The first hold in this process also removes the temporaries that dead
    processes left beside the array (:func:`sweep_temporaries`): holding
    the lock, no live writer can own them.

    Raises
    ------
    StorageBusyError
        When another process holds the lock: it has the array open for writing.

    Examples
    --------
    >>> import tempfile, os
    >>> loc = Locator.make("memmap", os.path.join(tempfile.mkdtemp(), "a.npy"))
    >>> lock = acquire(loc)
    >>> os.path.exists(lock.path), holds(loc)
    (True, True)
    >>> lock.release(); holds(loc)
    False
    """
    path = lock_path(locator)
    if path is None:
        return None
    url = locator.full_url
    with _mutex:
        entry = _entries.get(path)
        if entry is not None and entry.pid == os.getpid():
            entry.count += 1
            return WriterLock(path, url)
        try:
            fd = try_flock(path)
        except OSError:
            return None  # no lock file possible here (read-only or missing directory)
        if fd is None:
            raise StorageBusyError(
                f"cannot open {url} for writing: another process{_holder(path)} has it open "
                f"for writing; close it there or wait, or open it with mode='r' to read "
                f"(writer lock {path})",
                url=url,
            )
        _write_pid(fd)
        _entries[path] = _Entry(fd, 1, os.getpid())
    target = array_path(locator)
    if target is not None:
        sweep_temporaries(target)
    return WriterLock(path, url)


@contextlib.contextmanager
def released_on_error(lock: WriterLock | None) -> Iterator[None]:
    """Release ``lock`` when the block raises (the array it guards was not opened).

    Examples
    --------
    >>> with released_on_error(None):
    ...     pass
    """
    try:
        yield
    except BaseException:
        if lock is not None:
            lock.release()
        raise


def release_writer(store: object) -> None:
    """Let go of the writer lock a store holds (its ``_writer_lock``), if any; what
    :meth:`~oocarr.store.blocked.BlockedArray.close` does.

    Examples
    --------
    >>> release_writer(object())  # holds none: nothing to do
    """
    lock = getattr(store, "_writer_lock", None)
    if lock is not None:
        lock.release()


def holds(locator: Locator) -> bool:
    """Whether this process holds the writer lock of the array at ``locator``."""
    path = lock_path(locator)
    with _mutex:
        entry = _entries.get(path) if path else None
        return entry is not None and entry.pid == os.getpid()


def pid_alive(pid: int) -> bool:
    """Whether a process with id ``pid`` exists (one of another user's counts as alive).

    Examples
    --------
    >>> pid_alive(os.getpid())
    True
    """
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def temp_pid(name: str) -> int | None:
    """The writer's pid in a temporary's name ``.NAME.tmp-PID-HEX``, else ``None``.

    Examples
    --------
    >>> temp_pid(".a.npy.tmp-4242-0a1b2c3d"), temp_pid("a.npy")
    (4242, None)
    """
    match = _TEMP.match(name)
    return int(match.group(1)) if match else None


def remove_entry(path: str) -> int:
    """Remove a file or directory tree; the bytes it held (0 when already gone)."""
    size = entry_size(path)
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        return 0
    return size


def entry_size(path: str) -> int:
    """Bytes of a file, or of every file under a directory (0 when it is gone)."""
    try:
        if not os.path.isdir(path) or os.path.islink(path):
            return os.lstat(path).st_blocks * 512
    except OSError:
        return 0
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def sweep_temporaries(path: str) -> list[str]:
    """Remove the temporaries that dead processes left beside the array at ``path``.

    A temporary is a hidden ``.NAME.tmp-PID-HEX`` entry (file or directory)
    beside the array (``NAME`` starting with the array's name), or inside
    the array's directory; it is removed when no process ``PID`` is alive.
    Returns the paths removed.

    Examples
    --------
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> open(os.path.join(d, ".a.npy.tmp-999999999-0a1b2c3d"), "w").close()
    >>> [os.path.basename(p) for p in sweep_temporaries(os.path.join(d, "a.npy"))]
    ['.a.npy.tmp-999999999-0a1b2c3d']
    """
    head, array = os.path.split(path.rstrip(os.sep))
    removed = _sweep_dir(head, lambda entry: entry.startswith(f".{array}."))
    if os.path.isdir(path):
        removed += _sweep_dir(path, lambda entry: True)
    return removed


def _sweep_dir(directory: str, belongs: Callable[[str], bool]) -> list[str]:
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed = []
    for name in names:
        pid = temp_pid(name)
        if pid is None or pid == os.getpid() or pid_alive(pid) or not belongs(name):
            continue
        path = os.path.join(directory, name)
        with contextlib.suppress(OSError):
            remove_entry(path)
            removed.append(path)
    return removed


def _after_fork_in_child() -> None:
    # The child shares the parent's locks through inherited descriptors; it closes its copies
    # (the parent keeps holding) and takes locks of its own when it writes.
    global _mutex
    _mutex = threading.RLock()
    for entry in _entries.values():
        with contextlib.suppress(OSError):
            os.close(entry.fd)
    _entries.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
