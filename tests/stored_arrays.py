"""Helpers for op tests: an array stored on a test backend in uneven chunks, and skipping S3."""

from __future__ import annotations

import numpy as np
import pytest

import oocarr


def stored(backend, array: np.ndarray) -> oocarr.DiskArray:
    """``array`` stored on ``backend`` in chunks of half of each axis."""
    return oocarr.DiskArray(backend.store(array, chunks=tuple(max(1, n // 2) for n in array.shape)))


def skip_slow(backend) -> None:
    """Skip the S3 backends, whose round trips per tile are slow here (the fsspec driver is
    covered on memory:// and local disk)."""
    if backend.id.startswith("fsspec-s3"):
        pytest.skip("the fsspec driver is covered on memory:// and local disk; S3 is slow here")


def same(got, want, tol: float = 1e-5) -> None:
    """``got`` has ``want``'s shape and dtype, and its values within ``tol`` (NaNs equal)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
