"""Placeholder replaced by the fsspec Zarr driver."""
