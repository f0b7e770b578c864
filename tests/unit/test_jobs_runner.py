"""The job runner with the in-memory store and fake work: answers inline or as an object,
failures with the endpoint's message, and retries that never run a finished job again."""
from __future__ import annotations

import json

import pytest

from chalicelib.calls import Answer
from chalicelib.core.errors import ModelError
from chalicelib.jobs.records import Job, JobNotFoundError, JobState, new_job_id
from chalicelib.jobs.runner import INLINE_RESULT_BYTES, run_job
from chalicelib.jobs.store import MemoryJobStore

NOW = 1_800_000_000.0


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
    done = run_job(store, job_id, work, results)
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
    done = run_job(store, job_id, lambda job: answer, results)
    assert done.state is JobState.SUCCEEDED and done.result is None
    assert done.result_location == f"s3://b/jobs/results/{job_id}"
    assert results.put == [(job_id, answer)]
    assert "result" not in done.view()


def test_an_endpoint_failure_fails_the_job_with_its_message() -> None:
    store, job_id = _store_with_job()

    def work(job: Job) -> Answer:
        raise ModelError("The model failed: division by zero")

    failed = run_job(store, job_id, work, Results())
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
        run_job(store, job_id, dies, Results())
    job = store.get(job_id)
    assert job is not None and job.state is JobState.RUNNING

    def works(job: Job) -> Answer:
        calls.append("works")
        return Answer(json.dumps([1, 2]).encode(), "application/json; charset=utf-8")

    done = run_job(store, job_id, works, Results())
    assert done.state is JobState.SUCCEEDED and done.result == [1, 2]
    again = run_job(store, job_id, works, Results())
    assert again == done and calls == ["dies", "works"]


def test_an_unknown_job_is_not_found() -> None:
    store, _ = _store_with_job()
    with pytest.raises(JobNotFoundError):
        run_job(store, new_job_id(), lambda job: Answer.json({}), Results())
