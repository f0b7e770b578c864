"""Job backends: one module per backend, each how a model's job is started, completed, leased
and bounded (:class:`~.base.JobBackend`). The registry lists them
(:data:`chalicelib.registry.kinds.BACKENDS`); :func:`~.base.backend_of` finds a model's."""
