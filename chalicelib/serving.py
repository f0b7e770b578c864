"""Serving a registered model: one request through its pipeline, whatever the pipeline.

The image classifier keeps its own :class:`~chalicelib.pipeline.Predictor`; the others
(``tensor``, ``sagemaker-tfs``, ``cortex``) run here. Every pipeline gets the same endpoint
client (retries, time budget, errors), the same answer record for logs and data capture, and
the same per-request options (variant, target model, custom attributes).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from chalicelib.endpoint import InvokeResult


@dataclasses.dataclass(frozen=True)
class Call:
    """One request to a model, as its pipeline sees it.

    Attributes:
        body: the raw request body.
        content_type: its bare media type (``application/json`` when the client sent none).
        accept: the client's Accept header, if any.
        custom_attributes: SageMaker CustomAttributes passed along (header or option).
        content_length: the body's length.
    """

    body: bytes
    content_type: str
    accept: str | None = None
    custom_attributes: str | None = None

    @property
    def content_length(self) -> int:
        """The body's length in bytes."""
        return len(self.body)


Invoke = Callable[[bytes, str, str], InvokeResult]
"""Calls the model's endpoint: ``invoke(body, content_type, accept)``, with the model's
endpoint, variant, target model, custom attributes, request id and time budget already bound.
Raises the endpoint's :class:`~chalicelib.errors.SagegateError` subclasses."""


@dataclasses.dataclass(frozen=True)
class Answer:
    """A pipeline's HTTP answer: a body and its media type."""

    body: bytes
    content_type: str

    @classmethod
    def json(cls, document: Any) -> Answer:
        """A JSON answer."""
        import json

        return cls(json.dumps(document, separators=(",", ":")).encode(), "application/json")
