"""The token budgets' DynamoDB counters (chalicelib.llm.budgets.TableCounters) on moto's
server, provisioned as ``make run`` provisions it (the deploy template's schema): the
conditional ``ADD`` refuses a window without room and says where it stands, and many threads
reserving at once never take more than the limit; settling moves the count."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config

from chalicelib.llm.budgets import (
    BudgetExceeded,
    Limits,
    TableCounters,
    TokenBudgets,
    Window,
)
from emulator.process import free_port
from sagegate.local.aws import BUDGET_TABLE, LocalJobs, provision, start_moto
from tests.unit.llm.test_budgets import model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

THREADS = 24


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    with start_moto(free_port()) as moto:
        provision(LocalJobs(moto.url, bucket="", success_topic="", error_topic=""),
                  key=moto.provision_key)
        yield boto3.client("dynamodb", endpoint_url=moto.url, region_name="us-east-1",
                           aws_access_key_id="testing", aws_secret_access_key="testing",
                           config=Config(max_pool_connections=THREADS + 4,
                                         retries={"total_max_attempts": 1}))


def test_a_refused_reservation_says_where_the_window_stands(client: Any) -> None:
    counters = TableCounters(BUDGET_TABLE, client)
    assert counters.reserve("refused", 60, 100, 2_000_000_000) == (True, 60)
    assert counters.reserve("refused", 60, 100, 2_000_000_000) == (False, 60)
    assert counters.add("refused", -45, 2_000_000_000) == 15
    item = client.get_item(TableName=BUDGET_TABLE, Key={"key": {"S": "refused"}})["Item"]
    assert item == {"key": {"S": "refused"}, "used": {"N": "15"},
                    "expires_at": {"N": "2000000000"}}


def test_threads_reserving_at_once_never_take_more_than_the_limit(client: Any) -> None:
    budgets = TokenBudgets(TableCounters(BUDGET_TABLE, client), Limits(0, 1000),
                           clock=lambda: 1_765_065_600.0)
    taken: list[int] = []
    refused: list[int] = []
    start = threading.Barrier(THREADS)

    def ask(amount: int) -> None:
        start.wait()
        try:
            held = budgets.reserve("threads", model(), amount)
        except BudgetExceeded:
            refused.append(amount)
            return
        assert held.errors == 0
        taken.append(amount)

    threads = [threading.Thread(target=ask, args=(70 + index % 3,)) for index in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    item = Window("*", "day", 1000).item("threads", 1_765_065_600.0)
    used = int(client.get_item(TableName=BUDGET_TABLE, Key={"key": {"S": item}},
                               ConsistentRead=True)["Item"]["used"]["N"])
    assert refused and len(taken) + len(refused) == THREADS
    assert used == sum(taken) <= 1000
    assert used > 1000 - 72  # every refusal found no room for its own amount
