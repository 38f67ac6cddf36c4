"""Placeholder replaced by the HDF5 driver."""
