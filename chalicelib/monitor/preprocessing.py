"""A Model Monitor record preprocessor file, called as the analyzer calls it.

Model Monitor's analyzer imports the user's file and calls its ``preprocess_handler`` with a
``CapturedData`` (:mod:`chalicelib.monitor.captured_data`) for each record, passing its logger as
a second argument when the handler has a parameter named ``logger``, and skipping
``ShadowExperiment`` records first (here the record reader does); a falsy result drops the
record. :class:`Preprocessor` calls a handler the same way, and keeps the user's code from ending
the run with a traceback or an exit: whatever the handler raises is one line naming the file and
the record (:class:`HandlerFailed`), and what it returns is checked to be a row
(:func:`checked_row`).

It lives in the monitor room because the scheduled monitor runs a model's ``preprocessor.py`` in
Lambda; the CLI imports it from here, so it runs a handler exactly as the scheduled function
does.
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
from typing import Any, TextIO

from chalicelib.monitor.captured_data import (
    CapturedData,
)

LOGGER_NAME = "Preprocessing"  # the analyzer's name for the logger it hands handlers


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
"""Built-in types whose falsiness drops a record, read without running the handler's code (an
object's own ``__bool__`` might raise, or exit)."""


def handler_logger(stream: TextIO) -> logging.Logger:
    """The logger a ``preprocess_handler(inference_record, logger)`` gets on the command line:
    ``preprocess_handler LEVEL: message`` on ``stream`` from INFO up (the analyzer sends them to
    the job's log). Each call replaces the handler an earlier call added (bound to a stream a
    test may have swapped since)."""
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

    received = 0

    @classmethod
    def on_sigint(cls, signum: int, frame: FrameType | None) -> None:
        cls.received += 1
        raise KeyboardInterrupt


@contextlib.contextmanager
def watching_interrupts() -> Iterator[None]:
    """Count the user's Ctrl-C (SIGINT) before it raises :class:`KeyboardInterrupt`: a
    KeyboardInterrupt out of a handler with a SIGINT counted during the call is the user's and
    stops the run; one without is the handler's own ``raise``, a failure like any other. Without
    the watch (the scheduled function, a thread other than the main one, where signals cannot be
    handled) every KeyboardInterrupt is the handler's failure: the run stops either way."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _Interrupts.on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _run_user_code(call: Callable[[], Any], failed: Callable[[str], HandlerFailed]) -> Any:
    """``call()``'s result; whatever it raises (an exit or a KeyboardInterrupt, not the user's
    Ctrl-C) is ``failed(description)``."""
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
    """An exception of the user's code as one line, ``Type: message`` (cut to 500 characters), or
    what a ``sys.exit()`` means here."""
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
    """A Model Monitor record preprocessor file, called as the analyzer calls it (``logger``:
    what a ``logger`` parameter receives).

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
        """The handler's row for ``record``, or None when it drops it.

        Raises:
            HandlerFailed: the handler raised (or exited), or returned something other than a
                dict of JSON scalars; the message names the file and the record.
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


def checked_row(row: Any, bad: BadRow) -> dict[str, Any] | None:
    """A handler's result as a plain dict of JSON scalars (a subclass's number or string, numpy's
    included, made the plain type), or None for a falsy result.

    Raises:
        HandlerFailed: ``bad(what, detail)``: not a dict, a key not a string (or an int), a value
            not a JSON scalar (a nested value is not a feature: the handler flattens it).
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
    """Import a user's script that must define ``function``.

    Raises:
        HandlerError: the file is missing, fails to import (or exits while it does), or lacks
            ``function``.
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
    """``module.name``, or None; a module ``__getattr__`` of the user's that raises (or exits)
    means it has none."""
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
