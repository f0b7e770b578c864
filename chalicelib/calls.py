"""The call contracts: what a pipeline is asked and what it answers, shared by every room above.

Plain dataclasses, light on purpose: the cache, the request options and every pipeline import
them, and none of them needs botocore, numpy or OpenCV to say what a call is.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
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
    """One request to a model, as its pipeline sees it (``content_type`` the bare media type,
    ``application/json`` when the client sent none)."""

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
class CallOptions:
    """A model request's options, whatever its pipeline, as :mod:`chalicelib.reading`
    validated them (the JSON fields, the query string, then the headers). None is the model's
    own: its default ``k``, its ``TargetVariant``, ``TargetModel`` (a multi-model endpoint's
    model) and ``InferenceComponentName`` (of an endpoint that hosts several).
    """

    k: int | None = None
    variant: str | None = None
    custom_attributes: str | None = None
    target_model: str | None = None
    inference_component: str | None = None

    def as_query(self) -> dict[str, str]:
        """The options given, as a query string carries them (a reader that meets them with
        a body's own fields takes them so)."""
        return {field.name: str(value) for field in dataclasses.fields(self)
                if (value := getattr(self, field.name)) is not None}

    def to_record(self) -> dict[str, Any]:
        """The options given, as a job record keeps them (JSON, typed)."""
        return {field.name: value for field in dataclasses.fields(self)
                if (value := getattr(self, field.name)) is not None}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> CallOptions:
        """Options as :meth:`to_record` kept them (``k`` as text too: records made before
        options were kept typed held the query string's text).

        Raises:
            ValueError: a field that is no option, or a value of the wrong type.
        """
        unknown = set(record) - {field.name for field in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown option(s) {sorted(unknown)}")
        k = record.get("k")
        if isinstance(k, str):
            k = int(k)
        if k is not None and (isinstance(k, bool) or not isinstance(k, int)):
            raise ValueError("k is not a whole number")
        texts = {name: record.get(name) for name in ("variant", "custom_attributes",
                                                      "target_model", "inference_component")}
        if any(value is not None and not isinstance(value, str) for value in texts.values()):
            raise ValueError("an option that is text is not")
        return cls(k=k, **texts)


@dataclasses.dataclass(frozen=True)
class ModelRequest:
    """One model request, read once: its ``call`` (an image model's upload bytes, decoded from
    base64 when sent as JSON; the others' body as it came), and the validated options."""

    call: Call
    options: CallOptions


@dataclasses.dataclass(frozen=True)
class Usage:
    """A language model's token counts (None: its answer does not give one) and where each
    came from (``prompt``/``completion``: ``container``, or ``cached`` for a cache's answer)."""

    prompt_tokens: int | None
    completion_tokens: int | None
    source: dict[str, str]


@dataclasses.dataclass
class Served:
    """A pipeline's answer and the endpoint exchange behind it (for logs and data capture).

    Attributes:
        sent, sent_content_type: the last body sent to the endpoint.
        received, received_content_type: the endpoint's last answer, as it came.
        custom_attributes: the endpoint's CustomAttributes answer, passed back to the client.
        invoked: the endpoint answered this request (not the cache, nor a handler alone):
            an inference to capture.
        cached: the endpoint's answer came from the prediction cache (nothing reached the
            endpoint): captured too, marked as a cache hit, unless ``CAPTURE_CACHE_HITS`` is
            off. ``received`` is the cached answer; ``sent`` the body that would have been
            sent, or empty when the pipeline did not make it (an image hit decodes nothing).
        original, original_content_type: the client's input as captured next to it.
        variant_header: the answer's body does not name the variant, so a header does.
        image_in, image_out: an image pipeline's upload and endpoint image, for the log.
    """

    answer: Answer
    endpoint: str
    variant: str | None = None
    attempts: int = 0
    sent: bytes = b""
    sent_content_type: str = ""
    received: bytes = b""
    received_content_type: str = ""
    custom_attributes: str | None = None
    invoked: bool = False
    cached: bool = False
    original: bytes = b""
    original_content_type: str = ""
    variant_header: bool = True
    image_in: dict[str, Any] | None = None
    image_out: dict[str, Any] | None = None
    usage: Usage | None = None
    """A language model's token counts, as its container's answer gives them (for the log)."""

    def record(self, body: bytes, content_type: str, result: InvokeResult) -> None:
        """Note one endpoint exchange (the last one is what capture and logs see)."""
        self.sent, self.sent_content_type = body, content_type
        self.received, self.received_content_type = result.body, result.content_type
        self.variant, self.attempts = result.variant, self.attempts + result.attempts
        self.custom_attributes = result.custom_attributes
