"""What ``GET /health/details`` says: the configuration as loaded."""
from __future__ import annotations

from typing import Any

from chalicelib.core.config import Settings
from chalicelib.inference.predictions import load_labels


def health_details(settings: Settings) -> dict[str, Any]:
    """The endpoint, model input, resize rule and label count the settings describe."""
    labels = load_labels(settings.labels)
    return {
        "status": "ok",
        "endpoint": settings.endpoint_name,
        "model_input": {"width": settings.input_width, "height": settings.input_height},
        "resize": {"mode": settings.resize_mode, "shorter_side": settings.resize_shorter_side},
        "labels": len(labels) if labels is not None else 0,
    }
