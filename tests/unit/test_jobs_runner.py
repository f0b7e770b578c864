"""The job runner with the in-memory store and fake work: answers inline or as an object,
failures with the endpoint's message, and retries that never run a finished job again."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from chalicelib.calls import Answer
from chalicelib.core.errors import ConfigurationError, JobNotFoundError, ModelError
from chalicelib.jobs.lifetime import RunnerLifetime
from chalicelib.jobs.records import Job, JobState, new_job_id
from chalicelib.jobs.runner import INLINE_RESULT_BYTES, run_job
from chalicelib.jobs.store import MemoryJobStore, Outcome

NOW = 1_800_000_000.0
RUNNER = "request-1"  # the Lambda request id of the runner
LIFETIME = RunnerLifetime()  # a runner of Lambda's longest timeout
RUNNER_LIFETIME_SECONDS = LIFETIME.lease_seconds(None)  # its claim's lease, off Lambda
LEASE = NOW + RUNNER_LIFETIME_SECONDS  # the lease of a claim made at NOW
CONFIG = json.loads((Path(__file__).resolve().parents[2] / ".chalice" / "config.json")
                    .read_text())


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
    done = run_job(store, job_id, work, results, runner_id=RUNNER, lease_until=LEASE)
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
    done = run_job(store, job_id, lambda job: answer, results, runner_id=RUNNER, lease_until=LEASE)
    assert done.state is JobState.SUCCEEDED and done.result is None
    assert done.result_location == f"s3://b/jobs/results/{job_id}"
    assert results.put == [(job_id, answer)]
    assert "result" not in done.view()


def test_an_endpoint_failure_fails_the_job_with_its_message() -> None:
    store, job_id = _store_with_job()

    def work(job: Job) -> Answer:
        raise ModelError("The model failed: division by zero")

    failed = run_job(store, job_id, work, Results(), runner_id=RUNNER, lease_until=LEASE)
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
        run_job(store, job_id, dies, Results(), runner_id=RUNNER, lease_until=LEASE)
    job = store.get(job_id)
    assert job is not None and job.state is JobState.RUNNING

    def works(job: Job) -> Answer:
        calls.append("works")
        return Answer(json.dumps([1, 2]).encode(), "application/json; charset=utf-8")

    # Lambda's retry
    done = run_job(store, job_id, works, Results(), runner_id=RUNNER, lease_until=LEASE)
    assert done.state is JobState.SUCCEEDED and done.result == [1, 2]
    again = run_job(store, job_id, works, Results(), runner_id="another", lease_until=LEASE)
    assert again == done and calls == ["dies", "works"]


def test_an_unknown_job_is_not_found() -> None:
    store, _ = _store_with_job()
    with pytest.raises(JobNotFoundError):
        run_job(store, new_job_id(), lambda job: Answer.json({}), Results(), runner_id=RUNNER,
                lease_until=LEASE)


def _running_by(runner_id: str) -> tuple[MemoryJobStore, str, list[float]]:
    """A job a runner claimed at NOW and is still at (or died at); the store's clock, movable."""
    now = [NOW]
    store = MemoryJobStore(clock=lambda: now[0])
    job = store.create(Job(job_id=new_job_id(), model="iris", state=JobState.QUEUED,
                           created_at=NOW, updated_at=NOW, expires_at=int(NOW) + 7200))
    claimed, moved = store.claim(job.job_id, runner_id, LEASE, reclaim=True)
    assert moved and claimed.runner_id == runner_id
    return store, job.job_id, now


def test_a_duplicate_delivery_does_not_run_a_job_another_runner_is_running() -> None:
    store, job_id, now = _running_by(RUNNER)
    now[0] += RUNNER_LIFETIME_SECONDS  # as long as a runner may live, not longer
    again = run_job(store, job_id, lambda job: pytest.fail("ran again"), Results(),
                    runner_id="request-2", lease_until=LEASE)
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
                   Results(), runner_id=runner_id, lease_until=LEASE)
    assert done.state is JobState.SUCCEEDED and done.result == {"ran_by": runner_id}


# --- the inline answer's cap, at its edge ---------------------------------------------------

def _plain(record: int) -> Answer:
    """A JSON answer as compact as the record keeps it: ``record`` bytes sent and kept."""
    return Answer(b'{"blob":"' + b"x" * (record - 11) + b'"}', "application/json")


def _inflating(record: int) -> Answer:
    """A JSON answer 5 bytes shorter as sent than as kept (``1e5`` is kept as ``100000.0``):
    only the kept length can put it over the cap."""
    return Answer(b'{"n":1e5,"blob":"' + b"x" * (record - 24) + b'"}', "application/json")


def _spaced(sent: int) -> Answer:
    """A JSON answer 1 byte longer as sent than as kept (a space the record drops)."""
    return Answer(b'{"blob": "' + b"x" * (sent - 12) + b'"}', "application/json")


@pytest.mark.parametrize(("answer", "inline"), [
    (_plain(INLINE_RESULT_BYTES - 1), True), (_plain(INLINE_RESULT_BYTES), True),
    (_plain(INLINE_RESULT_BYTES + 1), False),
    (_inflating(INLINE_RESULT_BYTES - 1), True), (_inflating(INLINE_RESULT_BYTES), True),
    (_inflating(INLINE_RESULT_BYTES + 1), False),
    (_spaced(INLINE_RESULT_BYTES), True),  # kept: one byte under
    (_spaced(INLINE_RESULT_BYTES + 1), False)],  # as sent over the cap: not even parsed
    ids=["plain-below", "plain-at", "plain-above", "kept-below", "kept-at", "kept-above",
         "sent-at", "sent-above"])
def test_an_answer_is_inline_up_to_exactly_the_cap(answer: Answer, inline: bool) -> None:
    store, job_id = _store_with_job()
    results = Results()
    done = run_job(store, job_id, lambda job: answer, results, runner_id=RUNNER,
                   lease_until=LEASE)
    assert done.state is JobState.SUCCEEDED
    assert (done.result is not None, bool(results.put)) == (inline, not inline)
    if inline:
        assert len(json.dumps(done.result, separators=(",", ":")).encode()) <= INLINE_RESULT_BYTES


# --- keeping the outcome: never a second call for an answer given ---------------------------

class FlakyStore(MemoryJobStore):
    """A store whose first ``fails`` final moves raise ``error`` (S3 or DynamoDB failing)."""

    def __init__(self, error: Exception, fails: int = 1) -> None:
        super().__init__(clock=lambda: NOW)
        self.error, self.fails = error, fails

    def advance(self, job_id: str, state: JobState,
                outcome: Outcome | None = None) -> tuple[Job, bool]:
        if state.final and self.fails:
            self.fails -= 1
            raise self.error
        return super().advance(job_id, state, outcome)


def _flaky(error: Exception, fails: int = 1) -> tuple[FlakyStore, str]:
    store = FlakyStore(error, fails)
    job = store.create(Job(job_id=new_job_id(), model="iris", state=JobState.QUEUED,
                           created_at=NOW, updated_at=NOW, expires_at=int(NOW) + 60))
    return store, job.job_id


@pytest.mark.parametrize("work_fails", [False, True])
def test_keeping_an_outcome_is_retried_so_the_endpoint_is_not_called_again(
        work_fails: bool) -> None:
    store, job_id = _flaky(EndpointConnectionError(endpoint_url="http://127.0.0.1:9"), 2)
    calls: list[str] = []
    sleeps: list[float] = []

    def work(job: Job) -> Answer:
        calls.append(job.job_id)  # the endpoint answered (or refused: a model's error)
        if work_fails:
            raise ModelError("The model failed: bad row")
        return Answer.json({"ok": True})

    done = run_job(store, job_id, work, Results(), runner_id=RUNNER, lease_until=LEASE,
                   sleep=sleeps.append)
    assert calls == [job_id] and len(sleeps) == 2
    assert done.state is (JobState.FAILED if work_fails else JobState.SUCCEEDED)


def test_a_failure_a_retry_cannot_cure_is_not_retried() -> None:
    store, job_id = _flaky(ClientError({"Error": {"Code": "AccessDeniedException",
                                                  "Message": "no"},
                                        "ResponseMetadata": {"HTTPStatusCode": 400}},
                                       "UpdateItem"))
    sleeps: list[float] = []
    with pytest.raises(ClientError):
        run_job(store, job_id, lambda job: Answer.json({}), Results(), runner_id=RUNNER,
                lease_until=LEASE, sleep=sleeps.append)
    assert sleeps == []


# --- a runner's life: never shorter than its function's timeout -----------------------------

@pytest.mark.parametrize(("timeout", "remaining_s"), [
    (1, None), (28, None), (300, None), (900, None),  # off Lambda: the configured timeout
    (900, 42.0), (300, 299.5), (60, 900.0)])  # on Lambda: the invocation's remaining time
def test_no_other_runner_takes_a_job_while_its_function_may_still_run(
        timeout: int, remaining_s: float | None) -> None:
    lifetime = RunnerLifetime(timeout)
    remaining = None if remaining_s is None else (lambda: remaining_s * 1000)
    lives = timeout if remaining_s is None else min(timeout, remaining_s)
    lease = lifetime.lease_seconds(remaining)
    assert lease > lives
    now = [NOW]
    store = MemoryJobStore(clock=lambda: now[0])
    job = store.create(Job(job_id=new_job_id(), model="iris", state=JobState.QUEUED,
                           created_at=NOW, updated_at=NOW, expires_at=int(NOW) + 7200))
    run = store.claim(job.job_id, RUNNER, NOW + lease, reclaim=True)[0]
    assert run.lease_expires_at == NOW + lease  # stored on the record for the others to read
    now[0] += lives  # the first runner's function may be in its last second
    again = run_job(store, job.job_id, lambda job: pytest.fail("ran twice at once"), Results(),
                    runner_id="request-2", lease_until=now[0] + lease)
    assert again == run
    now[0] = NOW + lease + 1  # its function was stopped by now
    done = run_job(store, job.job_id, lambda job: Answer.json({"by": job.runner_id}),
                   Results(), runner_id="request-2", lease_until=now[0] + lease)
    assert done.result == {"by": "request-2"}


def test_the_lease_follows_the_configured_timeout_and_the_remaining_time() -> None:
    assert RunnerLifetime.from_env({}) == RunnerLifetime(900)  # Lambda's longest
    short = RunnerLifetime.from_env({"JOB_RUNNER_TIMEOUT_SECONDS": "300"})
    assert short.lease_seconds(None) == 360.0 and LIFETIME.lease_seconds(None) == 960.0
    assert LIFETIME.lease_seconds(lambda: 120_000) == 180.0  # 2 minutes left, and the margin
    assert short.lease_seconds(lambda: 899_000) == 360.0  # never past the configured timeout
    for bad in ("0", "901", "1.5", "-3", "ten", "٣٠٠"):
        with pytest.raises(ConfigurationError, match="JOB_RUNNER_TIMEOUT_SECONDS"):
            RunnerLifetime.from_env({"JOB_RUNNER_TIMEOUT_SECONDS": bad})


RUNNER_STAGES = sorted(name for name, stage in CONFIG["stages"].items()
                       if "job_runner" in stage.get("lambda_functions", {}))


def test_a_deployed_stage_configures_a_job_runner() -> None:
    assert "dev" in RUNNER_STAGES  # the check below has something to check


@pytest.mark.parametrize("stage", RUNNER_STAGES)
def test_every_stage_knows_its_runner_lives_as_long_as_its_function(stage: str) -> None:
    runner = CONFIG["stages"][stage]["lambda_functions"]["job_runner"]
    env = {**CONFIG.get("environment_variables", {}),
           **CONFIG["stages"][stage].get("environment_variables", {})}
    lifetime = RunnerLifetime.from_env(env)
    assert lifetime.timeout_seconds >= runner["lambda_timeout"], (
        f"{stage}: JOB_RUNNER_TIMEOUT_SECONDS must be job_runner's lambda_timeout")
    assert lifetime.lease_seconds(None) > runner["lambda_timeout"]


@pytest.mark.parametrize(("remaining_s", "budget", "expected"), [
    (None, 840.0, 840.0),  # not on Lambda: the stage's budget
    (900.0, 840.0, 840.0), (400.0, 840.0, 340.0),  # the invocation's time, less the margin
    (30.0, 840.0, 0.0),  # nothing left to work with
    (900.0, 100.0, 100.0)])
def test_a_jobs_work_ends_before_its_function_does(remaining_s: float | None, budget: float,
                                                   expected: float) -> None:
    remaining = None if remaining_s is None else (lambda: int(remaining_s * 1000))
    assert LIFETIME.work_seconds(remaining, budget) == expected
    # a function allowed longer than the others believe still stops within their belief
    assert RunnerLifetime(300).work_seconds(lambda: 900_000, 840.0) == 240.0
