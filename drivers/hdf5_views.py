"""Where a region of a local HDF5 dataset is one contiguous, aligned run of the file.

Such a region is handed to the engine as a mapping of the file (zero-copy, like a ``.npy``
file's) instead of a copy read through h5py: a region of a contiguous dataset that is one run
of it, or whole rows of a dataset chunked in bands of whole rows (``chunks[1:] ==
shape[1:]``) whose chunks lie one after the other in the file.  Only unfiltered data stored
as the array's dtype qualifies, and only where it starts
:data:`~oocarr_drivers.mapped_views.VIEW_ALIGNMENT`-aligned.

h5py places data wherever the file's free space is, so the chunks of a file it wrote with
its defaults start at addresses such as 4016 and are not aligned; oocarr writes its HDF5
files with an alignment of :data:`DATA_ALIGNMENT` for every object of at least
:data:`ALIGN_FROM` bytes, and so can map them.  Measured on a 2-core VM (least-squares
``value_and_grad`` through ``stream_sum``, 2M×128 float32 in 65536-row chunks, warm):
0.21-0.26 s mapped from an oocarr-written file, 0.35-0.40 s copied through h5py from an
h5py-written one, 0.18-0.28 s in memory.
"""

from __future__ import annotations

import math

import h5py
import numpy as np

from oocarr_drivers.mapped_views import VIEW_ALIGNMENT

__all__ = ["ALIGNED", "ALIGN_FROM", "DATA_ALIGNMENT", "view_start", "viewable"]

#: Alignment oocarr asks HDF5 for when it writes a file: the page size, so that a chunk can be
#: mapped on its own.
DATA_ALIGNMENT = 4096
#: Objects from this size on are aligned (smaller ones are metadata or chunks too small for a
#: view to matter): at most one page of padding each.
ALIGN_FROM = 64 * 1024
#: ``h5py.File``'s arguments for that alignment.
ALIGNED = {"alignment_threshold": ALIGN_FROM, "alignment_interval": DATA_ALIGNMENT}


def viewable(dset: h5py.Dataset, dtype: np.dtype) -> bool:
    """Whether ``dset``'s bytes are its values as ``dtype``, in a local file HDF5 reads with
    its default (``sec2``) driver: unfiltered, not converted (call with h5py's lock held).

    Examples
    --------
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "d.h5")
    >>> with h5py.File(path, "w") as f:
    ...     _ = f.create_dataset("x", data=np.zeros((8, 4), "f4"), chunks=(2, 4))
    ...     _ = f.create_dataset("z", data=np.zeros((8, 4), "f4"), chunks=(2, 4), compression=1)
    >>> with h5py.File(path, "r") as f:
    ...     viewable(f["x"], np.dtype("f4")), viewable(f["z"], np.dtype("f4"))
    (True, False)
    """
    if not dset.shape or dset.file.driver != "sec2":
        return False
    return not dset.id.get_create_plist().get_nfilters() and dset.id.get_type().dtype == dtype


def view_start(dset: h5py.Dataset, region: tuple[slice, ...], itemsize: int) -> int | None:
    """The byte offset in the file of ``region`` of a :func:`viewable` ``dset`` when it is one
    contiguous, :data:`~oocarr_drivers.mapped_views.VIEW_ALIGNMENT`-aligned run there, else
    ``None`` (call with h5py's lock held).  An unaligned start is known from the first chunk,
    before any other is looked up.

    Examples
    --------
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "d.h5")
    >>> with h5py.File(path, "w", alignment_threshold=1, alignment_interval=4096) as f:
    ...     d = f.create_dataset("x", (8, 16), "f4", chunks=(2, 16))
    ...     d[...] = np.arange(128).reshape(8, 16)
    >>> with h5py.File(path, "r") as f:
    ...     start = view_start(f["x"], (slice(3, 4), slice(0, 16)), 4)
    ...     cut = view_start(f["x"], (slice(3, 4), slice(0, 8)), 4)
    ...     apart = view_start(f["x"], (slice(1, 3), slice(0, 16)), 4)
    >>> start % 4096, cut, apart  # row 1 of chunk 1; columns cut; chunks 4096 bytes apart
    (64, None, None)
    """
    shape = dset.shape
    first, rest = region[0], region[1:]
    if dset.chunks is None:
        offset = dset.id.get_offset()
        if offset is None or not _one_run(shape, region):
            return None
        flat = sum(r.start * math.prod(shape[i + 1 :]) for i, r in enumerate(region))
        start = offset + flat * itemsize
        return None if start % VIEW_ALIGNMENT else start
    chunks = dset.chunks
    if chunks[1:] != shape[1:] or any(r.start or r.stop != n for r, n in zip(rest, shape[1:])):
        return None
    row_bytes = math.prod(shape[1:]) * itemsize
    chunk_bytes = chunks[0] * row_bytes
    start = previous = None
    for row in range(first.start - first.start % chunks[0], first.stop, chunks[0]):
        offset = dset.id.get_chunk_info_by_coord((row,) + (0,) * len(rest)).byte_offset
        if offset is None or (previous is not None and offset != previous + chunk_bytes):
            return None
        if start is None:
            start = offset + (first.start - row) * row_bytes
            if start % VIEW_ALIGNMENT:
                return None
        previous = offset
    return start


def _one_run(shape: tuple[int, ...], region: tuple[slice, ...]) -> bool:
    """Whether ``region`` of a C-ordered array of ``shape`` is one contiguous run."""
    axis = len(shape) - 1
    while axis > 0 and region[axis].start == 0 and region[axis].stop == shape[axis]:
        axis -= 1
    return all(r.stop - r.start == 1 for r in region[:axis])
