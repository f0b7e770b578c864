"""Which handler file a model's pipeline runs: the TF Serving container's or Cortex's."""
from __future__ import annotations

from chalicelib.inference.userfiles.cortex import CortexHandler
from chalicelib.inference.userfiles.tfs import TfsHandler
from chalicelib.registry.specs import ModelSpec, Pipeline


def load_handler(model: ModelSpec) -> TfsHandler | CortexHandler | None:
    """The loaded handler file a model's pipeline runs, or None when it runs none."""
    if model.pipeline == Pipeline.SAGEMAKER_TFS:
        return TfsHandler.load(model)
    if model.pipeline == Pipeline.CORTEX:
        return CortexHandler.load(model)
    return None
