"""The job runner with the in-memory store and fake work: answers inline or as an object,
failures with the endpoint's message, and retries that never run a finished job again."""
from __future__ import annotations

import json

import pytest

from chalicelib.calls import Answer
from chalicelib.core.errors import ModelError
from chalicelib.jobs.records import Job, JobNotFoundError, JobState, new_job_id
from chalicelib.jobs.runner import INLINE_RESULT_BYTES, RUNNER_LIFETIME_SECONDS, run_job
from chalicelib.jobs.store import MemoryJobStore

NOW = 1_800_000_000.0
RUNNER = "request-1"  # the Lambda request id of the runner


def _store_with_job() -> tuple[MemoryJobStore, str]:
    store = MemoryJobStore(clock=lambda: NOW)
    job = Job(job_id=new_job_id(), model="iris", state=JobState.QUEUED, created_at=NOW,
              updated_at=NOW, input_location="s3://b/jobs/uploads/x", expires_at=int(NOW) + 60)
    store.create(job)
    return store, job.job_id


class Results:
    def __init__(self) -> None:
        self.put: list[tuple[str, Answer]] = []

    def __call__(self, job: Job, answer: Answer) -> str:
        self.put.append((job.job_id, answer))
        return f"s3://b/jobs/results/{job.job_id}"


def test_a_small_json_answer_is_kept_in_the_record() -> None:
    store, job_id = _store_with_job()
    seen: list[JobState] = []

    def work(job: Job) -> Answer:
        seen.append(job.state)
        return Answer.json({"predictions": [{"label": "setosa", "probability": 0.98}]})

    results = Results()
    done = run_job(store, job_id, work, results, runner_id=RUNNER)
    assert seen == [JobState.RUNNING]
    assert done.state is JobState.SUCCEEDED and results.put == []
    assert done.result == {"predictions": [{"label": "setosa", "probability": 0.98}]}


@pytest.mark.parametrize("answer", [
    Answer.json({"blob": "x" * INLINE_RESULT_BYTES}), Answer(b"\x00\x01", "application/x-npy"),
    # under the cap as sent, over it as the record would keep it (1e5 is kept as 100000.0)
    Answer(b"[" + b",".join([b"1e5"] * (INLINE_RESULT_BYTES // 5)) + b"]", "application/json"),
    Answer(b"{not json", "application/json")])
def test_a_large_or_non_json_answer_becomes_an_object(answer: Answer) -> None:
    store, job_id = _store_with_job()
    results = Results()
    done = run_job(store, job_id, lambda job: answer, results, runner_id=RUNNER)
    assert done.state is JobState.SUCCEEDED and done.result is None
    assert done.result_location == f"s3://b/jobs/results/{job_id}"
    assert results.put == [(job_id, answer)]
    assert "result" not in done.view()


def test_an_endpoint_failure_fails_the_job_with_its_message() -> None:
    store, job_id = _store_with_job()

    def work(job: Job) -> Answer:
        raise ModelError("The model failed: division by zero")

    failed = run_job(store, job_id, work, Results(), runner_id=RUNNER)
    assert failed.state is JobState.FAILED
    assert failed.view()["error"] == {"Code": ModelError.CODE,
                                      "Message": "The model failed: division by zero"}


def test_a_runner_that_dies_is_retried_and_a_finished_job_is_never_run_again() -> None:
    store, job_id = _store_with_job()
    calls: list[str] = []

    def dies(job: Job) -> Answer:
        calls.append("dies")
        raise MemoryError("the function ran out of memory")

    with pytest.raises(MemoryError):
        run_job(store, job_id, dies, Results(), runner_id=RUNNER)
    job = store.get(job_id)
    assert job is not None and job.state is JobState.RUNNING

    def works(job: Job) -> Answer:
        calls.append("works")
        return Answer(json.dumps([1, 2]).encode(), "application/json; charset=utf-8")

    done = run_job(store, job_id, works, Results(), runner_id=RUNNER)  # Lambda's retry
    assert done.state is JobState.SUCCEEDED and done.result == [1, 2]
    again = run_job(store, job_id, works, Results(), runner_id="another")
    assert again == done and calls == ["dies", "works"]


def test_an_unknown_job_is_not_found() -> None:
    store, _ = _store_with_job()
    with pytest.raises(JobNotFoundError):
        run_job(store, new_job_id(), lambda job: Answer.json({}), Results(), runner_id=RUNNER)


def _running_by(runner_id: str) -> tuple[MemoryJobStore, str, list[float]]:
    """A job a runner claimed at NOW and is still at (or died at); the store's clock, movable."""
    now = [NOW]
    store = MemoryJobStore(clock=lambda: now[0])
    job = store.create(Job(job_id=new_job_id(), model="iris", state=JobState.QUEUED,
                           created_at=NOW, updated_at=NOW, expires_at=int(NOW) + 7200))
    claimed, moved = store.claim(job.job_id, runner_id, RUNNER_LIFETIME_SECONDS)
    assert moved and claimed.runner_id == runner_id
    return store, job.job_id, now


def test_a_duplicate_delivery_does_not_run_a_job_another_runner_is_running() -> None:
    store, job_id, now = _running_by(RUNNER)
    now[0] += RUNNER_LIFETIME_SECONDS  # as long as a runner may live, not longer
    again = run_job(store, job_id, lambda job: pytest.fail("ran again"), Results(),
                    runner_id="request-2")
    assert again.state is JobState.RUNNING and again.runner_id == RUNNER
    assert store.get(job_id) == again  # not even touched


@pytest.mark.parametrize(("runner_id", "after"), [
    (RUNNER, 5.0),  # Lambda's retry of the same event keeps its request id
    ("request-2", RUNNER_LIFETIME_SECONDS + 1.0)])  # the first runner is surely gone
def test_a_running_job_is_run_again_by_its_own_retry_or_once_its_runner_is_gone(
        runner_id: str, after: float) -> None:
    store, job_id, now = _running_by(RUNNER)
    now[0] += after
    done = run_job(store, job_id, lambda job: Answer.json({"ran_by": job.runner_id}),
                   Results(), runner_id=runner_id)
    assert done.state is JobState.SUCCEEDED and done.result == {"ran_by": runner_id}
