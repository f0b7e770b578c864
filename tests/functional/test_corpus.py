"""The hostile corpus (tests/corpus/generate.py) through the real app and Chalice's test client:
every case gets exactly its expected answer, never a 500, never a hang, never a traceback."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.corpus import generate
from tests.corpus.generate import Case
from tests.functional.conftest import AnsweringApp

CASES = generate.cases()


def check_answer(case: Case, status: int, body: bytes, headers: dict[str, str]) -> None:
    """What every answer to a corpus case must be (shared with the integration tier)."""
    text = body.decode("utf-8", "replace")
    assert status == case.status, (case.name, status, text[:300])
    assert "Traceback" not in text and 'File "' not in text
    if case.status == 200:
        return
    answer = json.loads(body)
    assert answer["Code"] == case.code, (case.name, answer)
    assert answer["Message"] and case.says in answer["Message"], (case.name, answer)
    assert len(answer["Message"]) < 1000  # a client's megabyte never comes back
    assert answer["request_id"] == headers.get("x-request-id", headers.get("X-Request-Id"))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_every_corpus_case_gets_its_answer(answering_app: AnsweringApp, case: Case) -> None:
    response = answering_app.client.http.post(case.path, body=case.body,
                                              headers=case.request_headers())
    check_answer(case, response.status_code, response.body, response.headers)


def test_the_corpus_covers_every_class_of_input() -> None:
    names = " ".join(case.name for case in CASES)
    for needed in ("jpeg-cut", "half-plus-eoi", "png-cut", "webp-cut", "bomb-", "1x1", "20x1",
                   "palette", "16-bit", "cmyk", "progressive", "json-brackets", "megabyte",
                   "invalid-utf8", "type-predict-k-array", "type-resize-format-object",
                   "content-type-", "without-content-type", "accept-"):
        assert needed in names, needed
    assert {case.status for case in CASES} >= {200, 400, 406, 413, 415}


def test_the_corpus_is_deterministic(tmp_path: Path) -> None:
    first = [case.manifest() for case in generate.write(tmp_path / "a")]
    second = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert first == second == [case.manifest() for case in generate.cases()]
    assert (tmp_path / "a" / "predict-jpeg-640x480.bin").read_bytes() == CASES[0].body
