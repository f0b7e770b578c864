"""The record a Model Monitor record preprocessor receives, and the way the analyzer calls it.

Model Monitor's analyzer hands ``preprocess_handler`` a ``CapturedData`` (the class its
documentation prints in full, "Preprocessing and Postprocessing"): ``event_metadata``
(``event_id``, ``event_time``, ``custom_attribute``), ``endpoint_input`` / ``endpoint_output``
/ ``batch_transform_output`` / ``ground_truth`` (``encoding``, ``data``,
``observedContentType``, ``mode``), ``event_version`` and ``event_dict`` (the raw record); a
part the record lacks is None. Its preprocessor wrapper passes its logger as a second argument
when the handler has a parameter named ``logger``, and skips records whose
``eventMetadata.invocationSource`` is ``ShadowExperiment`` before calling the handler. The
classes here have exactly those attributes, so a handler that runs here runs there; reading
one they lack is an :class:`AttributeError` that lists the ones they have.

It lives in the monitor room because the scheduled monitor runs a model's
``preprocessor.py`` in Lambda; ``sagegate capture`` and ``sagegate monitor`` import it from
here, so the CLI runs a handler exactly as the scheduled function does.
"""
from __future__ import annotations

import importlib.util
import inspect
import logging
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from chalicelib.monitor.records import CACHE_HIT_KEY

_KEY_METADATA = "eventMetadata"
_KEY_CAPTURE = "captureData"
_INVOCATION_SOURCE = "invocationSource"
SHADOW_SOURCE = "ShadowExperiment"
LOGGER_NAME = "Preprocessing"  # the analyzer's name for the logger it hands handlers


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
        """The record, each captured side as :meth:`EventData.as_dict` (as the analyzer's)."""
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
    """Whether a record is of an answer sagegate served from its prediction cache."""
    metadata = event_dict.get(_KEY_METADATA)
    return isinstance(metadata, dict) and metadata.get(CACHE_HIT_KEY) is True


def is_shadow(event_dict: dict[str, Any]) -> bool:
    """Whether a record comes from a shadow variant (the analyzer skips those)."""
    metadata = event_dict.get(_KEY_METADATA)
    return isinstance(metadata, dict) and metadata.get(_INVOCATION_SOURCE) == SHADOW_SOURCE


class HandlerError(ValueError):
    """A record preprocessor file is missing, unimportable or lacks ``preprocess_handler``."""


class HandlerFailed(Exception):
    """The user's ``preprocess_handler`` raised or returned something that is not a row."""


class Preprocessor:
    """A Model Monitor record preprocessor file, called as the analyzer calls it.

    Args:
        path: the ``.py`` file defining ``preprocess_handler`` (and maybe
            ``postprocess_handler``).
        logger: what a ``logger`` parameter receives.

    Raises:
        HandlerError: the file is missing, fails to import, or has no preprocess_handler.
    """

    def __init__(self, path: str | Path, logger: logging.Logger | None = None) -> None:
        self.path = Path(path)
        self.module = _import(self.path)
        self._handler: Callable[..., Any] = self.module.preprocess_handler
        try:
            parameters = inspect.signature(self._handler).parameters
        except (TypeError, ValueError):
            parameters = {}  # type: ignore[assignment]  # a builtin: called with the record
        self._logger = (logger or logging.getLogger(LOGGER_NAME)) if "logger" in parameters \
            else None

    def __call__(self, record: CapturedData, where: str) -> dict[str, Any] | None:
        """The handler's row for ``record``, or None when it drops it (falsy result).

        Raises:
            HandlerFailed: the handler raised, or returned something other than a dict;
                the message names the file and the record.
        """
        try:
            if self._logger is not None:
                row = self._handler(record, self._logger)
            else:
                row = self._handler(record)
        except Exception as error:  # the user's code: one line, no traceback
            raise HandlerFailed(f"{self.path.name}: preprocess_handler failed on {where}: "
                                f"{type(error).__name__}: {error}") from None
        if not row:
            return None
        if not isinstance(row, dict):
            raise HandlerFailed(f"{self.path.name}: preprocess_handler returned "
                                f"{type(row).__name__}, not a dict, for {where}")
        return row

    def postprocess(self) -> None:
        """Run the file's ``postprocess_handler()`` if it has one.

        Raises:
            HandlerFailed: it raised.
        """
        handler = getattr(self.module, "postprocess_handler", None)
        if not callable(handler):
            return
        try:
            handler()
        except Exception as error:  # the user's code: one line, no traceback
            raise HandlerFailed(f"{self.path.name}: postprocess_handler failed: "
                                f"{type(error).__name__}: {error}") from None


def _import(path: Path, function: str = "preprocess_handler",
            call: str = "preprocess_handler(inference_record)") -> ModuleType:
    """Import a user's script (a preprocessor or a postprocessor) that must define ``function``.

    Raises:
        HandlerError: the file is missing, fails to import, or lacks ``function``.
    """
    if not path.is_file():
        raise HandlerError(f"{path}: no such file")
    spec = importlib.util.spec_from_file_location(function.removesuffix("_handler"), path)
    if spec is None or spec.loader is None:
        raise HandlerError(f"{path}: cannot be imported (not a Python file?)")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # the user's file: report it, do not crash on it
        raise HandlerError(f"{path}: importing it failed: {type(error).__name__}: "
                           f"{error}") from None
    if not callable(getattr(module, function, None)):
        raise HandlerError(f"{path}: has no {call}")
    return module


def load_postprocessor(path: str | Path) -> Callable[[], None]:
    """A postprocessing script's ``postprocess_handler()``, run after a successful analysis.

    Raises:
        HandlerError: the file is missing, fails to import, or has no postprocess_handler.
    """
    file = Path(path)
    handler = _import(file, "postprocess_handler", "postprocess_handler()").postprocess_handler

    def postprocess() -> None:
        try:
            handler()
        except Exception as error:  # the user's code: one line, no traceback
            raise HandlerFailed(f"{file.name}: postprocess_handler failed: "
                                f"{type(error).__name__}: {error}") from None

    return postprocess
