"""The call contracts: what a pipeline is asked and what it answers, shared by every room above.

Plain dataclasses, light on purpose: the cache, the request options and every pipeline import
them, and none of them needs botocore, numpy or OpenCV to say what a call is.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class InvokeResult:
    """The endpoint's answer, as plain Python."""

    body: bytes
    content_type: str
    variant: str | None
    custom_attributes: str | None
    attempts: int


@dataclasses.dataclass(frozen=True)
class Call:
    """One request to a model, as its pipeline sees it.

    Attributes:
        body: the raw request body.
        content_type: its bare media type (``application/json`` when the client sent none).
        accept: the client's Accept header, if any.
        custom_attributes: SageMaker CustomAttributes passed along (header or option).
    """

    body: bytes
    content_type: str
    accept: str | None = None
    custom_attributes: str | None = None


Invoke = Callable[[bytes, str, str], InvokeResult]
"""Calls the model's endpoint: ``invoke(body, content_type, accept)``, with the model's
endpoint, variant, target model, custom attributes, request id and time budget already bound.
Raises the endpoint's :class:`~chalicelib.core.errors.SagegateError` subclasses."""


@dataclasses.dataclass(frozen=True)
class Answer:
    """A pipeline's HTTP answer: a body and its media type."""

    body: bytes
    content_type: str

    @classmethod
    def json(cls, document: Any) -> Answer:
        """A JSON answer."""
        return cls(json.dumps(document, separators=(",", ":")).encode(), "application/json")


@dataclasses.dataclass(frozen=True)
class ModelOptions:
    """A model request's options: from headers and the query string (the body is the model's).

    Attributes:
        k: top-k for models with labels (None: the model's default).
        variant: TargetVariant (None: the model's, if any).
        target_model: TargetModel for multi-model endpoints (None: the model's, if any).
        inference_component: InferenceComponentName for endpoints hosting inference
            components (None: the model's, if any).
        custom_attributes: CustomAttributes passed to the endpoint.
    """

    k: int | None = None
    variant: str | None = None
    target_model: str | None = None
    custom_attributes: str | None = None
    inference_component: str | None = None


@dataclasses.dataclass(frozen=True)
class PredictOptions:
    """A prediction's per-request options, as :func:`chalicelib.http.options.read_predict`
    validated them.

    Attributes:
        k: how many classes to answer (all of them when k is larger).
        variant: the production variant to invoke (``TargetVariant``), or None.
        custom_attributes: SageMaker ``CustomAttributes`` passed to the endpoint, or None.
        target_model: SageMaker ``TargetModel`` (a multi-model endpoint's model), or None.
        inference_component: SageMaker ``InferenceComponentName`` (the component of an
            endpoint that hosts several), or None.
    """

    k: int
    variant: str | None = None
    custom_attributes: str | None = None
    target_model: str | None = None
    inference_component: str | None = None
