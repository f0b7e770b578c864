"""Through the app: a stage's capture records are handed over and stored after the response
(``CAPTURE_WRITER=background``, the default), or before it (``inline``); every handler's end,
a route's or an event function's, is where held records are stored on Lambda."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

import app as app_module
from chalicelib.core.config import Settings
from tests import imagefactory
from tests.functional.conftest import Harness, endpoint_response, probabilities


def _records(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted(root.rglob("*.jsonl")) for line in path.open()]


@pytest.mark.parametrize(("writer", "outcome"), [("background", "queued"),
                                                 ("inline", "written")])
def test_a_stage_captures_after_or_before_the_response_as_configured(
        harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], writer: str, outcome: str) -> None:
    settings = dataclasses.replace(
        app_module.services.settings, capture_mode="both", capture_destination=str(tmp_path),
        capture_writer=Settings.from_env({"ENDPOINT_NAME": "x",
                                          "CAPTURE_WRITER": writer}).capture_writer)
    monkeypatch.setattr(app_module.services, "_settings", settings)
    monkeypatch.setattr(app_module.services, "_capturer", None)
    monkeypatch.setattr(app_module.services, "_after_handlers", None)
    for number in range(3):  # three images: three misses of the prediction cache
        harness.stubber.add_response("invoke_endpoint",
                                     endpoint_response(probabilities({282: 0.6})))
        response = harness.post("/predict", imagefactory.jpeg(320 + number, 240), "image/jpeg")
        assert response.status_code == 200
    logs = [json.loads(line) for line in capsys.readouterr().out.splitlines()
            if '"message":"request"' in line]
    assert [line["capture"] for line in logs] == [outcome] * 3
    capturer = app_module.services.capturer
    assert (capturer.writer is not None) == (writer == "background")
    assert capturer.flush(10)
    assert len(_records(tmp_path)) == 3  # every record lands


def test_an_unknown_capture_writer_is_refused() -> None:
    from chalicelib.core.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="CAPTURE_WRITER"):
        Settings.from_env({"ENDPOINT_NAME": "x", "CAPTURE_WRITER": "later"})


def test_every_handler_end_is_noted_routes_and_event_functions_alike(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    ended: list[Any] = []
    monkeypatch.setattr(app_module.services, "handler_ended", ended.append)
    assert harness.client.http.get("/health").status_code == 200
    assert harness.post("/predict", b"{}").status_code == 400  # an error answer too
    assert len(ended) == 2
