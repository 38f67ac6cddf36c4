"""The storage drivers shipped with oocarr: memmap, hdf5 and fsspec (Zarr v3).

Each module registers one :class:`oocarr.interface.BlockedArray` subclass
through the ``oocarr.drivers`` entry-point group and imports nothing of
oocarr but :mod:`oocarr.interface` and :mod:`oocarr.errors`.
"""
