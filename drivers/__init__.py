"""The storage drivers shipped with oocarr: memmap, hdf5 and fsspec (Zarr v3).

Each driver module holds one :class:`oocarr.store.BlockedArray` subclass and
imports nothing of oocarr but :mod:`oocarr.store` and :mod:`oocarr.errors`.
The ``oocarr.drivers`` entry points point at their specs in
:mod:`oocarr_drivers.claims`, which say which URLs each driver claims without
importing it (or h5py, or fsspec).
"""
