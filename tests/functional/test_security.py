"""The security review's findings, each a class of bug with its regression tests.

1. work bounded, not only size: a crafted progressive JPEG (scans x pixels) and the request
   budget counted from the request's start, preprocessing included;
2. authentication explicit on Lambda (packaging: tests/unit/test_stage_auth.py);
3. full matches for every anchored pattern;
4. names from the endpoint kept out of paths;
5. capture files private;
6. capture inside the request budget;
7. API Gateway's request id of record, the client's as a correlation id
   (tests/functional/test_observability.py, test_predict.py);
8. the open /health says ``status`` only where the API has authentication.
"""
from __future__ import annotations

import ast
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

import app as app_module
from chalicelib.capture import MAX_PENDING_WRITES, Capturer
from chalicelib.capture.records import Exchange, build_record
from chalicelib.capture.sinks import DirectorySink
from chalicelib.core.access import Access
from chalicelib.core.errors import ConfigurationError, PreprocessingTimeoutError
from chalicelib.core.observability import Outcome
from chalicelib.core.retries import RetryPolicy
from chalicelib.inference.endpoint import EndpointClient, Invocation
from scripts.crafted_images import progressive, scan_bomb
from tests import imagefactory
from tests.functional.conftest import (
    AnsweringApp,
    Harness,
    endpoint_response,
    make_settings,
    probabilities,
)

ROOT = Path(__file__).resolve().parents[2]
CAT = probabilities({281: 0.9})


# --- 1. bounded work ---------------------------------------------------------------------------
@pytest.mark.parametrize("side,scans", [(6320, 15000), (640, 5000), (640, 65)])
def test_a_jpeg_with_too_many_scans_is_refused_before_any_decode(
        answering_app: AnsweringApp, side: int, scans: int) -> None:
    """640x480 would be passed through untouched: the count is checked before that too."""
    bomb = scan_bomb(side, scans)
    calls = answering_app.endpoint.calls
    response = answering_app.client.http.post("/predict", body=bomb,
                                              headers={"Content-Type": "image/jpeg"})
    assert response.status_code == 400, response.body
    assert response.json_body["Code"] == "InvalidImage"
    assert f"{scans} scans" in response.json_body["Message"]
    assert answering_app.endpoint.calls == calls  # never reached the endpoint


def _pillow_progressive() -> bytes:
    import io

    out = io.BytesIO()
    Image.fromarray(imagefactory.gradient(800, 600)).save(out, "JPEG", progressive=True,
                                                          quality=85)
    return out.getvalue()


@pytest.mark.parametrize("make", [lambda: progressive(640, colour=True),
                                  lambda: progressive(640), _pillow_progressive,
                                  lambda: scan_bomb(640, 64)])
def test_real_progressive_jpegs_are_within_the_scan_limit(
        answering_app: AnsweringApp, make: Any) -> None:
    response = answering_app.client.http.post("/predict", body=make(),
                                              headers={"Content-Type": "image/jpeg"})
    assert response.status_code == 200, response.body


def test_no_endpoint_attempt_starts_once_the_budget_cannot_hold_one() -> None:
    now = [100.0]
    endpoint = EndpointClient(object(), RetryPolicy(attempt_timeout=2.5),  # type: ignore[arg-type]
                              clock=lambda: now[0])
    with pytest.raises(PreprocessingTimeoutError, match="time budget"):
        endpoint.invoke(Invocation("e", b"x", "image/jpeg", "application/json"), deadline=102.0)


def test_the_budget_counts_preprocessing(harness: Harness,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Budget 2.7 s, an attempt needs 2.5 s: preprocessing that takes 0.5 s leaves too little,
    so the endpoint is not called (main started the budget after preprocessing)."""
    settings = make_settings(request_budget_seconds=2.7, endpoint_connect_timeout=0.5,
                             endpoint_read_timeout=2.0)
    harness.use(settings)
    from chalicelib.images import imaging

    real = imaging.decode_and_resize

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(imaging, "decode_and_resize", slow)
    # nothing queued on the Stubber: a call to the endpoint would be a 502, not this 503
    response = harness.post("/predict", imagefactory.jpeg(1920, 1080), "image/jpeg")
    assert response.status_code == 503, response.body
    assert response.json_body["Code"] == "PreprocessingTimeout"
    assert "endpoint was not called" in response.json_body["Message"]
    assert response.headers["Retry-After"] == "2"


# --- 2. explicit authentication on Lambda -------------------------------------------------
@pytest.mark.parametrize("env,message", [
    ({}, "is not set"),
    ({"SAGEGATE_AUTH": " "}, "is not set"),
    ({"SAGEGATE_AUTH": "none"}, "SAGEGATE_OPEN_API=true"),
    ({"SAGEGATE_AUTH": "none", "SAGEGATE_OPEN_API": "yes"}, "SAGEGATE_OPEN_API=true"),
])
def test_a_deployed_function_refuses_an_implicit_or_unannounced_open_mode(
        env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Access.from_env(env, deployed=True)


@pytest.mark.parametrize("env", [{"SAGEGATE_AUTH": "api-key"},
                                 {"SAGEGATE_AUTH": "none", "SAGEGATE_OPEN_API": "true"}])
def test_an_explicit_mode_starts_on_lambda(env: dict[str, str]) -> None:
    Access.from_env(env, deployed=True)


def test_locally_a_missing_mode_is_still_open() -> None:
    assert Access.from_env({}).auth == "none"


def test_on_lambda_the_app_does_not_import_without_a_mode() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SAGEGATE_", "AWS_"))}
    env.update(AWS_LAMBDA_FUNCTION_NAME="sagegate-prod", AWS_EXECUTION_ENV="AWS_Lambda_python3.13",
               ENDPOINT_NAME="efficientnet-lite0")
    done = subprocess.run([sys.executable, "-c", "import app"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "SAGEGATE_AUTH is not set" in done.stderr


# --- 3. full matches --------------------------------------------------------------------------
@pytest.mark.parametrize("query,header", [
    ("variant=AllTraffic%0A", {}),
    ("", {"X-Target-Variant": "AllTraffic\n"}),
    ("", {"X-Custom-Attributes": "session=1\n"}),
])
def test_a_trailing_newline_is_a_400_not_a_header_injection(
        harness: Harness, query: str, header: dict[str, str]) -> None:
    response = harness.post(f"/predict?{query}" if query else "/predict",
                            imagefactory.jpeg(320, 240), "image/jpeg", **header)
    assert response.status_code == 400, response.body
    assert response.json_body["Code"] == "InvalidParameter"


def test_a_client_id_with_a_trailing_newline_is_not_echoed(harness: Harness) -> None:
    response = harness.post("/predict", b"{}", **{"X-Request-Id": "trace-1\n"})
    assert "X-Correlation-Id" not in response.headers
    assert "\n" not in response.headers["X-Request-Id"]


def _anchored_patterns() -> list[tuple[str, int, str]]:
    found = []
    for folder in ("chalicelib", "scripts", "emulator", "bench"):
        for path in [*sorted((ROOT / folder).rglob("*.py")), ROOT / "app.py"]:
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"
                        and node.args and isinstance(node.args[0], ast.Constant)
                        and isinstance(node.args[0].value, str)):
                    found.append((str(path.relative_to(ROOT)), node.lineno, node.args[0].value))
    return found


def test_no_pattern_ends_with_a_dollar_that_lets_a_newline_through() -> None:
    """``$`` also matches before a final newline; ``\\Z`` or ``fullmatch`` do not."""
    patterns = _anchored_patterns()
    assert len(patterns) > 10  # the scan sees the project's patterns
    offenders = [(path, line) for path, line, text in patterns
                 if text.endswith("$") and not text.endswith("\\$")]
    assert offenders == []


# --- 4 and 5. capture paths and permissions ---------------------------------------------------
def _exchange(variant: str, endpoint: str = "efficientnet-lite0") -> Exchange:
    return Exchange(endpoint=endpoint, variant=variant, inference_id="r-1", sent=b"img",
                    sent_content_type="image/jpeg", received=b"[1.0]",
                    received_content_type="application/json")


@pytest.mark.parametrize("variant", ["../../escaped", "a/b", "x\n", "..", ""])
def test_a_hostile_variant_name_stays_under_the_capture_root(tmp_path: Path, variant: str) -> None:
    root = tmp_path / "captures"
    DirectorySink(root).write([build_record(_exchange(variant), "both")])
    (written,) = list(tmp_path.rglob("*.jsonl"))
    assert written.resolve().is_relative_to(root.resolve())
    assert written.relative_to(root).parts[:2] == ("efficientnet-lite0", "invalid-name")


def test_the_variant_the_endpoint_names_is_checked_before_use(harness: Harness) -> None:
    harness.stubber.add_response("invoke_endpoint",
                                 endpoint_response(CAT, variant="../../escaped"))
    response = harness.post("/predict", imagefactory.jpeg(320, 240), "image/jpeg")
    assert response.status_code == 200
    assert response.json_body["variant"] is None


def test_capture_files_are_private(tmp_path: Path) -> None:
    root = tmp_path / "captures"
    DirectorySink(root).write([build_record(_exchange("AllTraffic"), "both")])
    (written,) = list(root.rglob("*.jsonl"))
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    for directory in [p for p in root.rglob("*") if p.is_dir()] + [root]:
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory


# --- 6. capture inside the budget -------------------------------------------------------------
class _HangingSink:
    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = 0
        self.finished = 0

    def write(self, records: Any) -> None:
        self.started += 1
        self.release.wait(30)
        self.finished += 1

    def close(self) -> None:
        pass


def test_a_sink_that_does_not_answer_fails_the_capture_not_the_request() -> None:
    sink = _HangingSink()
    capturer = Capturer("both", sink)
    try:
        assert capturer.capture(_exchange("AllTraffic"), timeout=0.05) == Outcome.FAILED
        assert sink.started == 1 and sink.finished == 0  # answered while the sink still hung
        for _ in range(MAX_PENDING_WRITES + 3):
            assert capturer.capture(_exchange("AllTraffic"), timeout=0.01) == Outcome.FAILED
        assert sink.started == MAX_PENDING_WRITES  # no unbounded pile of pending writes
    finally:
        sink.release.set()


def test_a_capture_within_the_budget_is_written(tmp_path: Path) -> None:
    capturer = Capturer("both", DirectorySink(tmp_path))
    assert capturer.capture(_exchange("AllTraffic"), timeout=5.0) == Outcome.WRITTEN
    assert len(list(tmp_path.rglob("*.jsonl"))) == 1


class _SlowSink:
    """Answers, slowly, and only once 12 writes are in it at the same time."""

    def __init__(self, together: int) -> None:
        self.barrier = threading.Barrier(together, timeout=20)
        self.written = 0

    def write(self, records: Any) -> None:
        self.barrier.wait()
        self.written += 1

    def close(self) -> None:
        pass


def test_concurrent_captures_are_all_written_not_refused() -> None:
    """Many requests capturing at once is load, not a hanging sink (the backlog bound counts
    only writes whose request stopped waiting)."""
    together = 12
    sink = _SlowSink(together)
    capturer = Capturer("both", sink)
    outcomes: list[str] = []
    threads = [threading.Thread(target=lambda: outcomes.append(
        capturer.capture(_exchange("AllTraffic"), timeout=20.0))) for _ in range(together)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert outcomes == [Outcome.WRITTEN] * together
    assert sink.written == together


# --- 8. the open /health --------------------------------------------------------------------
def test_health_says_status_only_where_the_api_has_authentication(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    open_body = harness.client.http.get("/health").json_body
    assert open_body["endpoint"] and open_body["labels"] == 1000
    monkeypatch.setattr(app_module, "_ACCESS", Access(auth="api-key"))
    assert harness.client.http.get("/health").json_body == {"status": "ok"}
    details = harness.client.http.get("/health/details").json_body
    assert details["endpoint"] == open_body["endpoint"]


