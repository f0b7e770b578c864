"""The record a Model Monitor record preprocessor receives: the analyzer's ``CapturedData``.

The analyzer hands ``preprocess_handler`` a ``CapturedData`` (printed in full in its
documentation, "Preprocessing and Postprocessing"): ``event_metadata`` (``event_id``,
``event_time``, ``custom_attribute``), ``endpoint_input`` / ``endpoint_output`` /
``batch_transform_output`` / ``ground_truth`` (``encoding``, ``data``, ``observedContentType``,
``mode``), ``event_version`` and ``event_dict``; a part the record lacks is None. The classes
here have exactly those attributes, so a handler that runs here runs there; reading another is an
:class:`AttributeError` listing the ones they have.
"""
from __future__ import annotations

from typing import Any, ClassVar

from chalicelib.monitor.records import CACHE_HIT_KEY, SHADOW_SOURCE

_KEY_METADATA = "eventMetadata"
_KEY_CAPTURE = "captureData"
_INVOCATION_SOURCE = "invocationSource"


class _Described:
    """Reading an attribute the analyzer's class does not have names the ones it has."""

    _ATTRIBUTES: tuple[str, ...] = ()

    def __getattr__(self, name: str) -> Any:  # only called when the attribute is missing
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"{type(self).__name__} has no attribute {name!r}; it has "
            f"{', '.join(self._ATTRIBUTES)} (Model Monitor's {type(self).__name__})")


class EventMetadata(_Described):
    """``eventMetadata``: the analyzer's three fields, None when the record lacks them."""

    _ATTRIBUTES = ("event_id", "event_time", "custom_attribute")

    def __init__(self, raw: dict[str, Any]) -> None:
        self.event_id: str | None = raw.get("eventId")
        self.event_time: str | None = raw.get("inferenceTime")
        self.custom_attribute: list[str] | None = raw.get("customAttributes")


class EventData(_Described):
    """One side of ``captureData`` (or ``groundTruthData``)."""

    _ATTRIBUTES = ("encoding", "data", "observedContentType", "mode", "as_dict()")

    def __init__(self, raw: dict[str, Any]) -> None:
        self.encoding: str | None = raw.get("encoding")
        self.data: str | None = raw.get("data")
        self.observedContentType: str | None = raw.get("observedContentType")
        self.mode: str | None = raw.get("mode")

    def as_dict(self) -> dict[str, Any]:
        """The analyzer's ``as_dict``: encoding, data and observedContentType."""
        return {"encoding": self.encoding, "data": self.data,
                "observedContentType": self.observedContentType}


def _side(parent: Any, key: str) -> EventData | None:
    value = parent.get(key) if isinstance(parent, dict) else None
    return EventData(value) if isinstance(value, dict) else None


class CapturedData(_Described):
    """What ``preprocess_handler(inference_record)`` receives: one capture record."""

    _ATTRIBUTES = ("event_metadata", "endpoint_input", "endpoint_output",
                   "batch_transform_output", "ground_truth", "event_version", "event_dict",
                   "as_dict()")
    _SIDES: ClassVar[dict[str, str]] = {
        "endpointInput": "endpoint_input", "endpointOutput": "endpoint_output",
        "batchTransformOutput": "batch_transform_output"}

    def __init__(self, event_dict: dict[str, Any]) -> None:
        self.event_dict = event_dict
        metadata = event_dict.get(_KEY_METADATA)
        self.event_metadata = EventMetadata(metadata) if isinstance(metadata, dict) else None
        capture = event_dict.get(_KEY_CAPTURE)
        self.endpoint_input = _side(capture, "endpointInput")
        self.endpoint_output = _side(capture, "endpointOutput")
        self.batch_transform_output = _side(capture, "batchTransformOutput")
        self.ground_truth = _side(event_dict, "groundTruthData")
        self.event_version: str | None = event_dict.get("eventVersion")

    def as_dict(self) -> dict[str, Any]:
        document = dict(self.event_dict)
        capture = document.get(_KEY_CAPTURE)
        if isinstance(capture, dict):
            capture = dict(capture)
            for key, attribute in self._SIDES.items():
                side = getattr(self, attribute)
                if key in capture and side is not None:
                    capture[key] = side.as_dict()
            document[_KEY_CAPTURE] = capture
        return document

    def __str__(self) -> str:
        return str(self.as_dict())


def is_cache_hit(event_dict: dict[str, Any]) -> bool:
    metadata = event_dict.get(_KEY_METADATA)
    return isinstance(metadata, dict) and metadata.get(CACHE_HIT_KEY) is True


def is_shadow(event_dict: dict[str, Any]) -> bool:
    """Whether a record comes from a shadow variant (the analyzer skips those)."""
    metadata = event_dict.get(_KEY_METADATA)
    return isinstance(metadata, dict) and metadata.get(_INVOCATION_SOURCE) == SHADOW_SOURCE
