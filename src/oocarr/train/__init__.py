"""The training layer: ordinary JAX on top of the layers below.

- :mod:`~oocarr.train.full_batch`: ``stream_sum``, exact full-batch losses and gradients;
- :mod:`~oocarr.train.minibatches`: ``batches``, the chunk-shuffled minibatch loader;
- :mod:`~oocarr.train.optim`: the optax adapter for stored parameters;
- :mod:`~oocarr.train.checkpoint`: ``save_params`` / ``load_params``.
"""
