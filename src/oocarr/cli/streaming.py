"""Reading a stored array tile by tile under the memory budget, and checksums of its values."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from oocarr.api.storage import read_tiles, tile_plan
from oocarr.errors import OocarrError
from oocarr.store import BlockedArray

from .errors import CommandError, exit_code_for

__all__ = ["COPY_SHARE", "STATS_SHARE", "tile_shape", "read_tiles", "checksum", "reading"]

#: Tile-sized buffers a copy holds (the memory model's count: :func:`oocarr.api.storage.tile_plan`).
COPY_SHARE = "copy"
#: Tile-sized buffers statistics hold.
STATS_SHARE = "stats"


def tile_shape(store: BlockedArray, share: str, *chunks: tuple[int, ...] | None) -> tuple[int, ...]:
    """:func:`oocarr.api.storage.tile_plan` for ``share`` (``"copy"`` or ``"stats"``), whose budget
    error tells a shell user to raise ``--memory``.

    Examples
    --------
    >>> import numpy as np, oocarr, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "t.zarr")
    >>> store = oocarr.save(np.zeros((64, 64), "f4"), path, chunks=(32, 32)).store
    >>> with oocarr.memory_budget(1000):
    ...     tile_shape(store, "stats")
    Traceback (most recent call last):
    ...
    oocarr.errors.BudgetTooSmallError: ...raise it to at least 4096 bytes with --memory
    """
    return tile_plan(store, share, *chunks, remedy="with --memory")


def checksum(
    store: BlockedArray, tile: tuple[int, ...], advance: Callable[[int], Any] | None = None
) -> str:
    """BLAKE2b of the values in C order, in native byte order (so byte order does not matter).

    ``advance(nbytes)`` is called after each tile (a progress bar).

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> a = oocarr.from_numpy(np.arange(6, dtype="<i4")).store
    >>> b = oocarr.from_numpy(np.arange(6, dtype=">i4")).store
    >>> checksum(a, (4,)) == checksum(b, (4,))
    True
    """
    digest = hashlib.blake2b(digest_size=16)
    native = store.dtype.newbyteorder("=")
    for _region, values in read_tiles(store, tile):
        # bytes, not ``.data``: the buffer protocol has no format for ml_dtypes' bfloat16
        # numpy's stubs give ndarray the buffer protocol's __buffer__ from Python 3.12 on only
        digest.update(np.ascontiguousarray(values, dtype=native).view(np.uint8))  # type: ignore[arg-type]
        if advance is not None:
            advance(values.nbytes)
    return digest.hexdigest()


@contextlib.contextmanager
def reading(source: BlockedArray) -> Iterator[None]:
    """Report an error of ``source`` raised inside (a corrupt chunk met while copying it) as the
    source's, with its own exit code, rather than as a failure to write the destination.

    Examples
    --------
    >>> import numpy as np, oocarr
    >>> from oocarr.errors import InvalidStoreError
    >>> source = oocarr.from_numpy(np.zeros(2)).store
    >>> try:
    ...     with reading(source):
    ...         raise InvalidStoreError("a chunk is corrupt", url=source.url)
    ... except CommandError as err:
    ...     err.exit_code, err.format_message()
    (2, 'a chunk is corrupt')
    """
    try:
        yield
    except OocarrError as err:
        if err.url not in (source.url, source.locator.full_url):
            raise
        raise CommandError(str(err), exit_code_for(err)) from None
