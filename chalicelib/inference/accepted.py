"""What each pipeline's route reads: the request content types a model takes, whether sent to
its synchronous route or uploaded for a job."""
from __future__ import annotations

from chalicelib.core.media import REQUEST_TYPES, MediaType, bare
from chalicelib.inference.tensors import READABLE_TYPES
from chalicelib.registry.specs import ModelSpec, Pipeline

# The handler decides beyond JSON for sagemaker-tfs, as the TF Serving container passes every
# type to input_handler.
ACCEPTED = {
    Pipeline.IMAGE_CLASSIFICATION: tuple(str(kind) for kind in REQUEST_TYPES),
    Pipeline.TENSOR: tuple(str(kind) for kind in READABLE_TYPES),
    Pipeline.SAGEMAKER_TFS: (MediaType.JSON, MediaType.JSONLINES, MediaType.CSV),
    Pipeline.CORTEX: (MediaType.JSON,),
}


def accepts(model: ModelSpec, content_type: str) -> bool:
    """Whether ``model`` reads a body of ``content_type`` (parameters ignored)."""
    return bare(content_type) in ACCEPTED[model.pipeline]
