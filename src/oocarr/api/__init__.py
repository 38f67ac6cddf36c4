"""The public API, one module per family; :mod:`oocarr` and :mod:`oocarr.array_api` re-export it.

- :mod:`~oocarr.api.storage`: ``open``, ``create``, ``save``, ``from_numpy``, ``to_numpy``;
- :mod:`~oocarr.api.elementwise`: elementwise functions, reductions, ``matmul`` and the
  operators of ``DiskArray``;
- :mod:`~oocarr.api.creation`, :mod:`~oocarr.api.manipulation`, :mod:`~oocarr.api.indexing`;
- :mod:`~oocarr.api.searching` (and sorting), :mod:`~oocarr.api.sets`,
  :mod:`~oocarr.api.statistics`;
- :mod:`~oocarr.api.contraction`: ``tensordot`` and ``einsum``;
- :mod:`~oocarr.api.xarray_backend`: xarray's ``engine="oocarr"`` (imports xarray; not
  imported here), with :mod:`~oocarr.api.xarray_cf` (lazy CF decoding),
  :mod:`~oocarr.api.deferred` (elementwise ops computed when read) and
  :mod:`~oocarr.api.numpy_reductions` (the namespace's reductions with NumPy's keywords).
"""
