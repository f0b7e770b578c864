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

import contextlib
import importlib.util
import inspect
import json
import logging
import numbers
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any, ClassVar, TextIO

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


LOG_FORMAT = "preprocess_handler %(levelname)s: %(message)s"
_LOG_HANDLER = "sagegate-preprocess-handler"
_MESSAGE_CHARS = 500  # of a handler's exception message, so a failure stays one line
_SCALARS = (str, int, float, bool, type(None))
_SCALAR_TYPES = frozenset(_SCALARS)
_KEY_TYPES = frozenset((str, int))
_FALSY_CHECKED = (list, tuple, str, bytes, int, float, bool, set, frozenset)
"""Built-in types whose falsy values drop a record: their truth is read without running any of
the handler's code (an object's own ``__bool__`` might raise, or exit)."""


def handler_logger(stream: TextIO) -> logging.Logger:
    """The logger a ``preprocess_handler(inference_record, logger)`` gets on the command line
    (``sagegate capture`` and ``sagegate monitor``): its lines on ``stream`` as
    ``preprocess_handler LEVEL: message``, from INFO up (the analyzer sends them to the job's
    log). Each call replaces the handler an earlier call added (bound to the stream of its
    time, which a test may have swapped since).
    """
    logger = logging.getLogger(LOGGER_NAME)
    for old in [h for h in logger.handlers if h.get_name() == _LOG_HANDLER]:
        logger.removeHandler(old)
    handler = logging.StreamHandler(stream)
    handler.set_name(_LOG_HANDLER)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # once: not again through the root logger's handlers
    return logger


class _Interrupts:
    """SIGINTs received while :func:`watching_interrupts` is on."""

    received = 0

    @classmethod
    def on_sigint(cls, signum: int, frame: FrameType | None) -> None:
        cls.received += 1
        raise KeyboardInterrupt


@contextlib.contextmanager
def watching_interrupts() -> Iterator[None]:
    """Count the user's Ctrl-C (SIGINT) before it raises :class:`KeyboardInterrupt`.

    A handler's call then tells the two apart: a KeyboardInterrupt with a SIGINT counted during
    the call is the user's, and stops the run; one without is the handler's own ``raise``, its
    failure like any other exception. Without the watch (the scheduled function, or a thread
    other than the main one, where signals cannot be handled) every KeyboardInterrupt out of a
    handler is the handler's failure: the run stops either way.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _Interrupts.on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _run_user_code(call: Callable[[], Any], failed: Callable[[str], HandlerFailed]) -> Any:
    """``call()``'s result; whatever it raises (an exit or a KeyboardInterrupt included, but
    not the user's Ctrl-C) is ``failed(description)``."""
    before = _Interrupts.received
    try:
        return call()
    except KeyboardInterrupt:
        if _Interrupts.received != before:
            raise  # the user pressed Ctrl-C: the run stops as they asked
        raise failed("KeyboardInterrupt raised by the handler's code") from None
    except BaseException as error:  # the user's code: one line, never a traceback or an exit
        raise failed(describe(error)) from None


def describe(error: BaseException) -> str:
    """An exception of the user's code as one line: ``Type: message`` (cut to 500
    characters), or what a ``sys.exit()`` call means here."""
    if isinstance(error, SystemExit):
        return (f"it called sys.exit({_quoted(error.code)}) (a handler returns; only the "
                f"monitor ends the run)")
    try:
        text = " ".join(str(error).split())
    except Exception:  # its __str__ is the user's code too
        text = "(its message cannot be printed)"
    if len(text) > _MESSAGE_CHARS:
        text = text[:_MESSAGE_CHARS] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _quoted(value: Any) -> str:
    if value is None or type(value) in (int, bool):
        return str(value)
    if type(value) is str:
        return json.dumps(" ".join(value.split())[:80])
    return type(value).__name__


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
        except Exception:  # a builtin (or an object of the user's): called with the record
            parameters = {}  # type: ignore[assignment]
        self._logger = (logger or logging.getLogger(LOGGER_NAME)) if "logger" in parameters \
            else None

    def __call__(self, record: CapturedData, where: str) -> dict[str, Any] | None:
        """The handler's row for ``record``, or None when it drops it (falsy result).

        Raises:
            HandlerFailed: the handler raised (or exited), or returned something other than a
                dict of features (JSON scalars by name); the message names the file and the
                record.
        """
        def failed(detail: str) -> HandlerFailed:
            return HandlerFailed(f"{self.path.name}: preprocess_handler failed on {where}: "
                                 f"{detail}")

        if self._logger is not None:
            logger = self._logger
            row = _run_user_code(lambda: self._handler(record, logger), failed)
        else:
            row = _run_user_code(lambda: self._handler(record), failed)
        return checked_row(row, lambda what, detail: HandlerFailed(
            f"{self.path.name}: preprocess_handler returned {what} for the record on {where}: "
            f"{detail}"))

    def postprocess(self) -> None:
        """Run the file's ``postprocess_handler()`` if it has one.

        Raises:
            HandlerFailed: it raised or exited.
        """
        handler = _lookup(self.module, "postprocess_handler")
        if callable(handler):
            _postprocess(handler, self.path)


BadRow = Callable[[str, str], HandlerFailed]
"""Makes the error of a bad row: (what was returned, what is wrong with it)."""


def checked_row(row: Any, bad: BadRow) -> dict[str, Any] | None:
    """A handler's result as a row: a plain dict of JSON scalars (a number or a string of a
    subclass, numpy's included, made the plain type), or None for a falsy result.

    Raises:
        HandlerFailed: ``bad(what, detail)``: not a dict, a key that is not a string (or an
            int), a value that is not a JSON scalar (a nested dict or list is not a feature:
            the handler flattens it).
    """
    if row is None or (type(row) in _FALSY_CHECKED and not row):
        return None
    if type(row) is dict and _KEY_TYPES.issuperset(map(type, row)) \
            and _SCALAR_TYPES.issuperset(map(type, row.values())):
        return row or None  # the common row, checked at C speed: every record pays this
    if not isinstance(row, dict):
        raise bad(f"{type(row).__name__}, not a dict,",
                  "a row is a dict of features (or [] drops the record)")
    items = list(dict.items(row))  # dict's own: a subclass's overrides are the user's code
    if not items:
        return None
    clean = type(row) is dict
    for index, (key, value) in enumerate(items):
        if type(key) not in (str, int) or type(value) not in _SCALARS:
            items[index] = (_feature_key(key, bad), _feature_value(key, value, bad))
            clean = False
    return row if clean else dict(items)


def _feature_key(key: Any, bad: BadRow) -> str | int:
    if type(key) in (str, int):
        return key
    if isinstance(key, str):
        return str.__str__(key)  # the plain string, without the subclass's methods
    raise bad("a bad row", f"a key is {type(key).__name__}, not a string (a feature's name)")


def _feature_value(key: Any, value: Any, bad: BadRow) -> Any:
    if type(value) in _SCALARS:
        return value
    name = json.dumps(key[:80]) if isinstance(key, str) else str(key)
    if isinstance(value, dict | list | tuple | set | frozenset):
        raise bad("a bad row", f"the value of {name} is a {type(value).__name__}: a feature "
                  f"is one value (a string, a number, a boolean or None); flatten it into "
                  f"several keys")
    converted = _plain(value)
    if converted is None:
        raise bad("a bad row", f"the value of {name} is {type(value).__name__}: a feature "
                  f"is a string, a number, a boolean or None")
    return converted


def _plain(value: Any) -> str | int | float | None:
    """A string or number of another type (a subclass, numpy's scalars) as the plain one;
    None when it is neither."""
    try:
        if isinstance(value, str):
            return str.__str__(value)
        if isinstance(value, int):
            return int.__int__(value)
        if isinstance(value, float):
            return float.__float__(value)
        if isinstance(value, numbers.Integral):
            return int(value)
        if isinstance(value, numbers.Real):
            return float(value)
    except Exception:  # a numeric type of the user's whose conversion fails: not a number
        return None
    return None


def _postprocess(handler: Callable[[], Any], path: Path) -> None:
    _run_user_code(handler, lambda detail: HandlerFailed(
        f"{path.name}: postprocess_handler failed: {detail}"))


def _import(path: Path, function: str = "preprocess_handler",
            call: str = "preprocess_handler(inference_record)") -> ModuleType:
    """Import a user's script (a preprocessor or a postprocessor) that must define ``function``.

    Raises:
        HandlerError: the file is missing, fails to import (or exits while it does), or
            lacks ``function``.
    """
    if not path.is_file():
        raise HandlerError(f"{path}: no such file")
    spec = importlib.util.spec_from_file_location(function.removesuffix("_handler"), path)
    if spec is None or spec.loader is None:
        raise HandlerError(f"{path}: cannot be imported (not a Python file?)")
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader
    try:
        _run_user_code(lambda: loader.exec_module(module), HandlerFailed)
    except HandlerFailed as error:  # the user's file: report it, do not crash on it
        raise HandlerError(f"{path}: importing it failed: {error}") from None
    if not callable(_lookup(module, function)):
        raise HandlerError(f"{path}: has no {call}")
    return module


def _lookup(module: ModuleType, name: str) -> Any:
    """``module.name``, or None; a module ``__getattr__`` of the user's that raises (or
    exits) means it has none."""
    try:
        return _run_user_code(lambda: getattr(module, name, None), HandlerFailed)
    except HandlerFailed:
        return None


def load_postprocessor(path: str | Path) -> Callable[[], None]:
    """A postprocessing script's ``postprocess_handler()``, run after a successful analysis.

    Raises:
        HandlerError: the file is missing, fails to import, or has no postprocess_handler.
    """
    file = Path(path)
    handler = _import(file, "postprocess_handler", "postprocess_handler()").postprocess_handler

    def postprocess() -> None:
        _postprocess(handler, file)

    return postprocess
