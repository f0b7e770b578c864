"""The user's preprocessor, called safely: its rows made plain, its exits and interrupts its own
failures (the user's Ctrl-C excepted), its log lines on the stream given."""
from __future__ import annotations

import io
import logging
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chalicelib.monitor import preprocessing
from chalicelib.monitor.captured_data import CapturedData
from chalicelib.monitor.preprocessing import (
    HandlerError,
    HandlerFailed,
    Preprocessor,
    checked_row,
    describe,
    handler_logger,
    watching_interrupts,
)


def _bad(what: str, detail: str) -> HandlerFailed:
    return HandlerFailed(f"{what} | {detail}")


def test_a_plain_row_is_passed_as_it_is() -> None:
    row = {"a": 1, "b": 2.5, "c": "x", "d": None, "e": True, 7: "int keys are kept"}
    assert checked_row(row, _bad) is row


@pytest.mark.parametrize("falsy", [None, [], (), {}, 0, "", False, set()])
def test_a_falsy_result_drops_the_record(falsy: Any) -> None:
    assert checked_row(falsy, _bad) is None


def test_numbers_and_strings_of_other_types_are_made_plain() -> None:
    class Name(str):
        def __str__(self) -> str:
            raise RuntimeError("not called")

    row = checked_row({"f": np.float64(1.5), "i": np.int64(3), "g": np.float32(0.5),
                       Name("s"): Name("v")}, _bad)
    assert row == {"f": 1.5, "i": 3, "g": 0.5, "s": "v"}
    assert row is not None
    assert [type(v) for v in row.values()] == [float, int, float, str]
    assert [type(k) for k in row] == [str, str, str, str]


def test_a_dict_subclass_is_copied_without_running_its_methods() -> None:
    class Tricky(dict[str, Any]):
        def items(self) -> Any:
            raise SystemExit(0)

        def __iter__(self) -> Any:
            raise SystemExit(0)

    row = checked_row(Tricky(a=1), _bad)
    assert row == {"a": 1} and type(row) is dict


@pytest.mark.parametrize(("row", "message"), [
    (object(), "object, not a dict, | a row is a dict of features"),
    (42, "int, not a dict,"),
    ({"a": {"b": 1}}, 'a bad row | the value of "a" is a dict: a feature is one value'),
    ({"a": (1, 2)}, 'the value of "a" is a tuple'),
    ({"a": b"x"}, 'the value of "a" is bytes'),
    ({"a": np.bool_(True)}, 'the value of "a" is bool'),
    ({3.5: 1}, "a key is float, not a string"),
])
def test_a_row_that_is_not_features_is_refused(row: Any, message: str) -> None:
    with pytest.raises(HandlerFailed) as raised:
        checked_row(row, _bad)
    assert message in str(raised.value)


def test_describe_is_one_line_whatever_the_exception() -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise ValueError

    assert describe(ValueError("a\nb\n  c")) == "ValueError: a b c"
    assert describe(Unprintable()) == "Unprintable: (its message cannot be printed)"
    assert describe(SystemExit()).startswith("it called sys.exit(None)")
    assert describe(SystemExit("bye\nnow")).startswith('it called sys.exit("bye now")')
    assert describe(SystemExit(object())).startswith("it called sys.exit(object)")
    assert len(describe(RuntimeError("x" * 10_000))) < 600


def _handler(tmp_path: Path, body: str) -> Preprocessor:
    path = tmp_path / "h.py"
    path.write_text("import os, signal, sys\n\ndef preprocess_handler(inference_record):\n"
                    f"    {body}\n", encoding="utf-8")
    return Preprocessor(path)


RECORD = CapturedData({"captureData": {}})


@pytest.mark.parametrize("watched", [True, False])
def test_a_keyboard_interrupt_the_handler_raises_is_its_failure(tmp_path: Path,
                                                               watched: bool) -> None:
    handler = _handler(tmp_path, "raise KeyboardInterrupt")
    with pytest.raises(HandlerFailed, match=r"h\.py: preprocess_handler failed on f:1: "
                       r"KeyboardInterrupt raised by the handler's code"):
        if watched:
            with watching_interrupts():
                handler(RECORD, "f:1")
        else:
            handler(RECORD, "f:1")


def test_the_users_ctrl_c_during_a_handler_stops_the_run(tmp_path: Path) -> None:
    handler = _handler(tmp_path, "os.kill(os.getpid(), signal.SIGINT)")
    previous = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt), watching_interrupts():
        handler(RECORD, "f:1")
    assert signal.getsignal(signal.SIGINT) is previous  # the watch is undone


def test_exits_are_the_handlers_failures(tmp_path: Path) -> None:
    with pytest.raises(HandlerFailed, match=r"failed on f:2: it called sys.exit\(0\)"):
        _handler(tmp_path, "sys.exit(0)")(RECORD, "f:2")
    with pytest.raises(HandlerFailed, match=r"it called sys.exit\(3\)"):
        _handler(tmp_path, "raise SystemExit(3)")(RECORD, "f:2")


def test_a_file_that_exits_as_it_is_imported_is_a_handler_error(tmp_path: Path) -> None:
    path = tmp_path / "h.py"
    path.write_text("raise KeyboardInterrupt\n", encoding="utf-8")
    with pytest.raises(HandlerError, match="importing it failed: KeyboardInterrupt raised"):
        Preprocessor(path)
    path.write_text("def __getattr__(name):\n    raise SystemExit(1)\n", encoding="utf-8")
    with pytest.raises(HandlerError, match="has no preprocess_handler"):
        Preprocessor(path)


def test_postprocess_handler_exits_are_its_failures(tmp_path: Path) -> None:
    path = tmp_path / "post.py"
    path.write_text("def postprocess_handler():\n    raise SystemExit(0)\n", encoding="utf-8")
    with pytest.raises(HandlerFailed, match=r"post.py: postprocess_handler failed: it called "
                       r"sys.exit\(0\)"):
        preprocessing.load_postprocessor(path)()


def test_the_handler_logger_writes_to_the_stream_given_once() -> None:
    first, second = io.StringIO(), io.StringIO()
    handler_logger(first)
    logger = handler_logger(second)  # replaces the first one's handler
    logger.info("read %d", 3)
    logger.debug("not shown")
    assert first.getvalue() == ""
    assert second.getvalue() == "preprocess_handler INFO: read 3\n"
    assert logger is logging.getLogger(preprocessing.LOGGER_NAME) and not logger.propagate
    ours = [h for h in logger.handlers if h.get_name() == "sagegate-preprocess-handler"]
    assert len(ours) == 1
    logger.removeHandler(ours[0])
    logger.propagate = True
