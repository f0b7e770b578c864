"""The hostile corpus against the real thing: ``chalice local`` (threaded, over HTTP) in front
of the emulator's real model. Every case gets its expected answer, none hangs, and the server
never holds more memory than the production function has (1769 MB)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import urllib3

from emulator.process import free_port
from sagegate.local.processes import peak_rss_mb, start_api
from tests.corpus import generate, models
from tests.corpus.generate import Case
from tests.functional.test_corpus import check_answer
from tests.integration.conftest import Stack

pytestmark = pytest.mark.integration

CASES = generate.cases()
MODEL_CASES = models.cases()
PROD_MEMORY_MB = 1769  # lambda_memory_size of the dev and prod stages (.chalice/config.json)
HEAVIEST = ("bomb-", "aspect-", "resize-fill-", "json-brackets", "json-objects", "json-image-",
            "json-megabyte", "jpeg-1920x1080", "large-half", "panorama", "resize-output")


def send(stack: Stack, case: Case) -> tuple[int, bytes, dict[str, str]]:
    response = stack.http.request("POST", stack.api.url + case.path, body=case.body,
                                  headers=case.request_headers())
    return response.status, response.data, {k.lower(): v for k, v in response.headers.items()}


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_every_corpus_case_gets_its_answer_over_http(stack: Stack, case: Case) -> None:
    check_answer(case, *send(stack, case))


@pytest.mark.parametrize("case", MODEL_CASES, ids=[case.name for case in MODEL_CASES])
def test_every_model_route_case_gets_its_answer_without_calling_the_endpoint(
        stack: Stack, case: Case) -> None:
    status, body, headers = send(stack, case)
    check_answer(case, status, body, headers)
    assert stack.emulator_calls(headers["x-request-id"]) == 0  # answered before the endpoint


def test_the_heaviest_cases_stay_under_the_production_memory_size(stack: Stack) -> None:
    heavy = [case for case in CASES if case.name.startswith(HEAVIEST)]
    assert len(heavy) > 20
    with ThreadPoolExecutor(max_workers=8) as pool:  # concurrently, as chalice local serves
        answers = list(pool.map(lambda case: send(stack, case), heavy * 2))
    for case, answer in zip(heavy * 2, answers, strict=True):
        check_answer(case, *answer)
    peak = peak_rss_mb(stack.api.process.pid)
    print(f"chalice local peak RSS after the heaviest corpus cases: {peak:.0f} MB")
    assert peak < PROD_MEMORY_MB


def pool_warnings(api_url: str, log: Path, jpeg: bytes, clients: int = 24) -> int:
    """Send ``3 * clients`` predictions from ``clients`` threads; count the server's
    "Connection pool is full" warnings they caused."""
    http = urllib3.PoolManager(maxsize=clients, retries=False, timeout=30)
    before = log.read_text(errors="replace").count("Connection pool is full")
    with ThreadPoolExecutor(max_workers=clients) as pool:
        statuses = list(pool.map(lambda _: http.request(
            "POST", api_url + "/predict", body=jpeg,  # no-cache: every request calls out
            headers={"Content-Type": "image/jpeg", "Cache-Control": "no-cache"}).status,
        range(3 * clients)))
    assert statuses == [200] * (3 * clients)
    return log.read_text(errors="replace").count("Connection pool is full") - before


def test_concurrent_endpoint_calls_keep_their_pooled_connections(stack: Stack,
                                                                 tmp_path: Path) -> None:
    jpeg = next(case for case in CASES if case.name == "predict-jpeg-640x480").body
    assert pool_warnings(stack.api.url, stack.api_log, jpeg) == 0
    # the control: the same load against the pool sagegate used to have, 16 connections
    log = tmp_path / "api-16.log"
    with open(log, "wb") as output:
        small = start_api(free_port(), stack.emulator_url, stage="test", log=output,
                          env={"ENDPOINT_MAX_CONNECTIONS": "16"})
        try:
            assert pool_warnings(small.url, log, jpeg) > 0
        finally:
            small.stop()
