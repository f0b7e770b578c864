"""The jobs room on its own: the forward-only state machine, both stores (the DynamoDB one on
moto's in-process DynamoDB), idempotent retries, owners, and the presigned upload's policy."""
from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from chalicelib.calls import CallOptions
from chalicelib.core.config import Settings
from chalicelib.core.errors import (
    ConfigurationError,
    InvalidUploadError,
    JobNotFoundError,
    UploadNotFoundError,
    UploadTooLargeError,
    UploadTypeMismatchError,
)
from chalicelib.jobs.codec import CorruptJobError, decode_job, encode_job
from chalicelib.jobs.records import (
    LEGACY_LEASE_SECONDS,
    Job,
    JobState,
    check_owner,
    is_job_id,
    lease_end,
    may_move,
    new_job_id,
    owner_of,
)
from chalicelib.jobs.store import JobStore, MemoryJobStore, Outcome
from chalicelib.jobs.table import TableJobStore
from chalicelib.jobs.uploads import check_uploaded, presign_upload, upload_key

QUEUED, RUNNING, SUCCEEDED, FAILED = (JobState.QUEUED, JobState.RUNNING, JobState.SUCCEEDED,
                                      JobState.FAILED)
NOW = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def _job(job_id: str | None = None, **changes: Any) -> Job:
    job = Job(job_id=job_id or new_job_id(), model="efficientnet-lite0", state=QUEUED,
              created_at=NOW, updated_at=NOW, input_location="s3://bucket/jobs/uploads/x",
              options=CallOptions(k=3, variant="Blue"), owner="apikey:abc",
              expires_at=int(NOW) + 3600)
    return dataclasses.replace(job, **changes)


# --- ids and the state machine -------------------------------------------------------------

def test_job_ids_are_uuid4_hex_and_unique() -> None:
    ids = {new_job_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(is_job_id(job_id) and len(job_id) == 32 and job_id[12] == "4" for job_id in ids)
    assert not is_job_id("../etc") and not is_job_id("A" * 32) and not is_job_id("")


@pytest.mark.parametrize(("text", "valid"), [
    ("a" * 32, True), ("0123456789abcdef" * 2, True),
    ("a" * 31, False), ("a" * 33, False),  # one digit short, one too many
    ("a" * 31 + "g", False), ("a" * 31 + "A", False), ("a" * 32 + "\n", False),
    (" " + "a" * 31, False)])
def test_a_job_id_is_exactly_32_lowercase_hex_digits(text: str, valid: bool) -> None:
    assert is_job_id(text) is valid


@pytest.mark.parametrize(("current", "target", "allowed"), [
    (QUEUED, RUNNING, True), (QUEUED, SUCCEEDED, True), (QUEUED, FAILED, True),
    (RUNNING, RUNNING, False), (RUNNING, SUCCEEDED, True), (RUNNING, FAILED, True),
    (QUEUED, QUEUED, False), (RUNNING, QUEUED, False),
    (SUCCEEDED, FAILED, False), (FAILED, SUCCEEDED, False), (SUCCEEDED, SUCCEEDED, False),
    (SUCCEEDED, RUNNING, False), (FAILED, QUEUED, False)])
def test_states_only_move_forward(current: JobState, target: JobState, allowed: bool) -> None:
    assert may_move(current, target) is allowed


# --- both stores behave the same -----------------------------------------------------------

@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["memory", "table"])
def store(request: pytest.FixtureRequest, clock: Clock,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[JobStore]:
    if request.param == "memory":
        yield MemoryJobStore(clock=clock)
        return
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(TableName="jobs", BillingMode="PAY_PER_REQUEST",
                            AttributeDefinitions=[{"AttributeName": "job_id",
                                                   "AttributeType": "S"}],
                            KeySchema=[{"AttributeName": "job_id", "KeyType": "HASH"}])
        yield TableJobStore("jobs", client=client, clock=clock)


def test_a_created_job_reads_back_whole(store: JobStore) -> None:
    job = _job()
    assert store.create(job) == job
    assert store.get(job.job_id) == job
    assert store.get(new_job_id()) is None


def test_creating_again_is_idempotent_and_keeps_the_first(store: JobStore) -> None:
    job = _job()
    store.create(job)
    store.advance(job.job_id, RUNNING)
    again = store.create(dataclasses.replace(job, model="other", options=CallOptions()))
    assert again.state is RUNNING and again.model == job.model \
        and again.options == CallOptions(k=3, variant="Blue")


def test_a_job_runs_then_succeeds_with_its_answer(store: JobStore, clock: Clock) -> None:
    job = store.create(_job())
    clock.now += 5
    running, changed = store.advance(job.job_id, RUNNING)
    assert changed and running.state is RUNNING and running.updated_at == NOW + 5
    clock.now += 5
    answer = {"predictions": [{"label": "tabby", "probability": 0.9}]}
    done, changed = store.advance(job.job_id, SUCCEEDED, Outcome(result=answer))
    assert changed and done.state is SUCCEEDED and done.result == answer
    assert done.created_at == NOW and done.updated_at == NOW + 10
    assert store.get(job.job_id) == done
    assert done.view() == {"job_id": job.job_id, "state": "succeeded", "created_at": NOW,
                           "updated_at": NOW + 10, "result": answer}


def test_a_failed_job_keeps_the_endpoints_error(store: JobStore) -> None:
    job = store.create(_job())
    error = {"Code": "ModelError", "Message": "the model raised: boom"}
    failed, _ = store.advance(job.job_id, FAILED, Outcome(error=error))
    assert failed.view()["error"] == error and "result" not in failed.view()


def test_a_large_answer_is_a_location_not_inline(store: JobStore) -> None:
    job = store.create(_job())
    done, _ = store.advance(job.job_id, SUCCEEDED,
                            Outcome(result_location="s3://bucket/jobs/results/x.json"))
    assert done.result_location == "s3://bucket/jobs/results/x.json"
    assert "result" not in done.view()


def test_a_final_state_is_never_left_and_retries_change_nothing(store: JobStore,
                                                                clock: Clock) -> None:
    job = store.create(_job())
    store.advance(job.job_id, RUNNING)
    first, changed = store.advance(job.job_id, SUCCEEDED, Outcome(result={"a": 1}))
    assert changed
    clock.now += 60
    for state, outcome in [(SUCCEEDED, Outcome(result={"a": 2})),
                           (FAILED, Outcome(error={"Code": "X", "Message": "late"})),
                           (RUNNING, None), (QUEUED, None)]:
        after, changed = store.advance(job.job_id, state, outcome)
        assert not changed and after == first
    assert store.get(job.job_id) == first


LEASE = 960.0  # a runner's lease from its claim (the runner passes its own)


def test_one_runner_claims_a_job_and_only_its_retry_may_claim_it_again(store: JobStore,
                                                                       clock: Clock) -> None:
    job = store.create(_job())
    claimed, changed = store.claim(job.job_id, "request-1", NOW + LEASE, reclaim=True)
    assert changed and claimed.state is RUNNING and claimed.runner_id == "request-1"
    assert claimed.lease_expires_at == NOW + LEASE
    assert store.get(job.job_id) == claimed
    clock.now += LEASE  # a duplicate delivery while the runner may be at work: refused
    other, changed = store.claim(job.job_id, "request-2", clock.now + LEASE, reclaim=True)
    assert not changed and other == claimed
    moved, changed = store.advance(job.job_id, RUNNING)  # running is entered by a claim only
    assert not changed and moved == claimed
    retried, changed = store.claim(job.job_id, "request-1", clock.now + 30,
                                   reclaim=True)  # Lambda's retry, its own lease
    assert changed and retried.runner_id == "request-1" and retried.updated_at == NOW + LEASE
    assert retried.lease_expires_at == NOW + LEASE + 30
    back, changed = store.advance(job.job_id, QUEUED)
    assert not changed and back == retried


def test_a_running_job_whose_lease_is_over_may_be_claimed_by_another(store: JobStore,
                                                                     clock: Clock) -> None:
    job = store.create(_job(expires_at=int(NOW) + 100_000))
    store.claim(job.job_id, "request-1", NOW + 100, reclaim=True)  # 100 s left to its runner
    clock.now += 100
    kept, changed = store.claim(job.job_id, "request-2", clock.now + LEASE, reclaim=True)
    assert not changed and kept.runner_id == "request-1"  # the lease's last second
    clock.now += 1
    taken, changed = store.claim(job.job_id, "request-2", clock.now + LEASE, reclaim=True)
    assert changed and taken.runner_id == "request-2" and taken.updated_at == NOW + 101
    store.advance(job.job_id, SUCCEEDED, Outcome(result=1))
    clock.now += 10 * LEASE
    done, changed = store.claim(job.job_id, "request-2", clock.now + LEASE, reclaim=True)
    assert not changed and done.state is SUCCEEDED


def test_a_running_job_of_a_record_without_a_lease_is_held_as_long_as_a_runner_lives(
        store: JobStore, clock: Clock) -> None:
    """A record written before leases (running, no ``lease_expires_at``): its runner is taken
    to live as long as Lambda's longest timeout allows, and a margin."""
    job = store.create(_job(state=RUNNING, runner_id="old-runner", expires_at=int(NOW) + 9999))
    assert job.lease_expires_at is None and lease_end(job) == NOW + LEGACY_LEASE_SECONDS
    clock.now += LEGACY_LEASE_SECONDS
    kept, changed = store.claim(job.job_id, "request-2", clock.now + LEASE, reclaim=True)
    assert not changed and kept.runner_id == "old-runner"
    clock.now += 1
    taken, changed = store.claim(job.job_id, "request-2", clock.now + LEASE, reclaim=True)
    assert changed and taken.runner_id == "request-2"


def test_without_reclaiming_only_a_queued_job_is_claimed(store: JobStore,
                                                         clock: Clock) -> None:
    job = store.create(_job(expires_at=int(NOW) + 200_000))
    _, first = store.claim(job.job_id, "request-1", NOW + LEASE)
    clock.now += 100 * LEASE
    again, second = store.claim(job.job_id, "request-1", clock.now + LEASE)  # not even its own
    assert first and not second and again.updated_at == NOW
    with pytest.raises(JobNotFoundError):
        store.claim(new_job_id(), "request-1", NOW + LEASE)


def test_moving_an_unknown_job_is_not_found(store: JobStore) -> None:
    with pytest.raises(JobNotFoundError):
        store.advance(new_job_id(), RUNNING)
    with pytest.raises(JobNotFoundError):
        store.advance(new_job_id(), SUCCEEDED, Outcome(result=1))


def test_a_job_past_its_ttl_is_gone(store: JobStore, clock: Clock) -> None:
    job = store.create(_job())
    clock.now = job.expires_at + 1
    assert store.get(job.job_id) is None
    with pytest.raises(JobNotFoundError):
        store.advance(job.job_id, RUNNING)


@pytest.mark.parametrize(("after", "live"), [(-1, True), (0, False), (1, False)])
def test_a_job_lives_until_the_second_before_its_expiry(store: JobStore, clock: Clock,
                                                        after: int, live: bool) -> None:
    # expires_at is the first second the job is gone, for a read and for a move alike
    job = store.create(_job())
    clock.now = job.expires_at + after
    assert (store.get(job.job_id) is not None) is live
    if live:
        moved, changed = store.advance(job.job_id, RUNNING)
        assert changed and moved.state is RUNNING
    else:
        with pytest.raises(JobNotFoundError):
            store.advance(job.job_id, RUNNING)


def test_the_pinned_input_round_trips(store: JobStore) -> None:
    job = store.create(_job(input_etag='"9b2cf535f27731c974343645a3985328"',
                            input_version="3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY"))
    assert store.get(job.job_id) == job
    done, _ = store.advance(job.job_id, FAILED, Outcome(error={"Code": "X", "Message": "m"}))
    assert (done.input_etag, done.input_version) == (job.input_etag, job.input_version)


def test_a_job_without_owner_round_trips(store: JobStore) -> None:
    job = store.create(_job(owner=None, options=CallOptions()))
    assert store.get(job.job_id) == job


def test_the_table_item_round_trips_and_refuses_strangers() -> None:
    job = _job(state=FAILED, error={"Code": "ModelError", "Message": "m"}, runner_id="r-1",
               input_etag='"e"', input_version="v1")
    assert decode_job(encode_job(job)) == job
    assert decode_job(encode_job(dataclasses.replace(job, runner_id=None))).runner_id is None
    unpinned = decode_job(encode_job(dataclasses.replace(job, input_etag=None,
                                                         input_version=None)))
    assert (unpinned.input_etag, unpinned.input_version) == (None, None)
    leased = dataclasses.replace(job, lease_expires_at=NOW + 960.5)
    assert decode_job(encode_job(leased)) == leased
    item = encode_job(job)
    assert json.loads(item["options"]["S"]) == {"k": 3, "variant": "Blue"}  # kept typed
    before_typed = {**item, "options": {"S": '{"k": "3"}'}}  # a record of the query's text
    assert decode_job(before_typed).options == CallOptions(k=3)
    for broken in ({k: v for k, v in item.items() if k != "state"},
                   {**item, "state": {"S": "paused"}}, {**item, "options": {"S": "[1]"}},
                   {**item, "options": {"S": '{"k": "three"}'}},
                   {**item, "options": {"S": '{"colour": "red"}'}},
                   {**item, "options": {"S": '{"variant": 7}'}},
                   {**item, "created_at": {"S": "x"}}):
        with pytest.raises(CorruptJobError):
            decode_job(broken)


# --- owners --------------------------------------------------------------------------------

@pytest.mark.parametrize(("context", "owner"), [
    (None, None), ({}, None), ({"identity": {"sourceIp": "1.2.3.4"}}, None),
    ({"identity": {"apiKeyId": "k1"}}, "apikey:k1"),
    ({"identity": {"userArn": "arn:aws:iam::123456789012:user/a", "apiKeyId": "k1"}},
     "iam:arn:aws:iam::123456789012:user/a"),
    ({"authorizer": {"claims": {"sub": "u-1"}}, "identity": {"apiKeyId": "k1"}}, "cognito:u-1"),
    ({"authorizer": {"claims": {"sub": ""}}, "identity": None}, None)])
def test_the_owner_is_the_callers_identity(context: dict[str, Any] | None,
                                           owner: str | None) -> None:
    assert owner_of(context) == owner


def test_another_callers_job_is_not_found_like_a_missing_one() -> None:
    job = _job(owner="apikey:a")
    assert check_owner(job, job.job_id, "apikey:a") is job
    for caller in ("apikey:b", None, "iam:apikey:a"):
        with pytest.raises(JobNotFoundError) as other:
            check_owner(job, job.job_id, caller)
        with pytest.raises(JobNotFoundError) as missing:
            check_owner(None, job.job_id, caller)
        assert other.value.STATUS_CODE == missing.value.STATUS_CODE == 404
        assert str(other.value) == str(missing.value)
    unowned = _job(owner=None)
    assert check_owner(unowned, unowned.job_id, "apikey:b") is unowned


# --- uploads -------------------------------------------------------------------------------

def _policy(fields: dict[str, str]) -> dict[str, Any]:
    policy: dict[str, Any] = json.loads(base64.b64decode(fields["policy"]))
    return policy


def test_the_presigned_post_pins_key_type_size_and_expiry(clock: Clock) -> None:
    client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")
    upload = presign_upload(client, "bucket", "dev/jobs/", "image/JPEG", 5 * 1024 * 1024,
                            expiry_seconds=900, clock=clock)
    assert upload.key == f"dev/jobs/uploads/{upload.upload_id}" and is_job_id(upload.upload_id)
    assert upload.expires_at == NOW + 900
    assert upload.fields["key"] == upload.key and upload.fields["Content-Type"] == "image/jpeg"
    conditions = _policy(dict(upload.fields))["conditions"]
    assert {"Content-Type": "image/jpeg"} in conditions
    assert ["content-length-range", 1, 5 * 1024 * 1024] in conditions
    assert {"key": upload.key} in conditions and {"bucket": "bucket"} in conditions
    assert not any("starts-with" in json.dumps(condition) for condition in conditions)
    assert set(upload.view()) == {"upload_id", "url", "fields", "expires_at"}
    other = presign_upload(client, "bucket", "dev/jobs/", "image/jpeg", 10)
    assert other.upload_id != upload.upload_id


@pytest.mark.parametrize("content_type", [
    "", "image", "image/jpeg; charset=x", "image/jpeg\r\nX: y", "../x", 3, None, "a/" + "b" * 200])
def test_a_bad_content_type_is_refused(content_type: Any) -> None:
    client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")
    with pytest.raises(InvalidUploadError) as error:
        presign_upload(client, "bucket", "dev/jobs/", content_type, 10)
    assert error.value.STATUS_CODE == 400


def test_upload_ids_cannot_reach_outside_the_uploads_prefix() -> None:
    assert upload_key("dev/jobs/", "a" * 32) == "dev/jobs/uploads/" + "a" * 32
    for bad in ("../../prod/jobs/uploads/" + "a" * 32, "a" * 31, "A" * 32, "", "a" * 32 + "/x"):
        with pytest.raises(InvalidUploadError):
            upload_key("dev/jobs/", bad)


def test_the_uploaded_object_is_checked_before_a_job_reads_it() -> None:
    key = upload_key("dev/jobs/", "b" * 32)
    head = {"ContentLength": 40 * 1024 * 1024, "ContentType": "image/jpeg"}
    size = check_uploaded(head, key, "dev/jobs/", "image/jpeg", 100 * 1024 * 1024)
    assert size == 40 * 1024 * 1024
    with pytest.raises(UploadNotFoundError):
        check_uploaded(None, key, "dev/jobs/", "image/jpeg", 10**9)
    with pytest.raises(UploadTooLargeError) as large:
        check_uploaded(head, key, "dev/jobs/", "image/jpeg", 1024)
    assert large.value.STATUS_CODE == 413
    with pytest.raises(UploadTypeMismatchError) as mismatch:
        check_uploaded({**head, "ContentType": "text/plain"}, key, "dev/jobs/", "image/jpeg",
                       10**9)
    assert mismatch.value.STATUS_CODE == 415
    for stranger in ("prod/jobs/uploads/" + "b" * 32, "dev/jobs/results/" + "b" * 32,
                     "dev/jobs/uploads/../x"):
        with pytest.raises(InvalidUploadError):
            check_uploaded(head, stranger, "dev/jobs/", "image/jpeg", 10**9)


@pytest.mark.parametrize(("size", "allowed"), [(4095, True), (4096, True), (4097, False)])
def test_an_upload_of_exactly_the_cap_is_taken_and_one_byte_more_is_not(size: int,
                                                                        allowed: bool) -> None:
    key, cap = upload_key("dev/jobs/", "b" * 32), 4096
    head = {"ContentLength": size, "ContentType": "text/csv"}
    if allowed:
        assert check_uploaded(head, key, "dev/jobs/", "text/csv", cap) == size
    else:
        with pytest.raises(UploadTooLargeError, match=f"{size} bytes.*at most {cap}"):
            check_uploaded(head, key, "dev/jobs/", "text/csv", cap)


# --- settings ------------------------------------------------------------------------------

def test_jobs_are_off_unless_a_bucket_is_named() -> None:
    settings = Settings.from_env({"ENDPOINT_NAME": "ep"})
    assert not settings.jobs_enabled
    assert (settings.jobs_prefix, settings.jobs_table, settings.jobs_ttl_seconds,
            settings.upload_expiry_seconds) == ("jobs/", "", 7 * 86_400, 900)
    on = Settings.from_env({"ENDPOINT_NAME": "ep", "JOBS_BUCKET": "sagegate-dev-jobs",
                            "JOBS_PREFIX": "dev/jobs/", "JOBS_TABLE": "sagegate-dev-jobs",
                            "JOBS_TTL_SECONDS": "86400", "UPLOAD_EXPIRY_SECONDS": "300"})
    assert on.jobs_enabled and on.jobs_prefix == "dev/jobs/"
    assert (on.jobs_table, on.jobs_ttl_seconds, on.upload_expiry_seconds) == (
        "sagegate-dev-jobs", 86400, 300)


@pytest.mark.parametrize(("var", "value"), [
    ("JOBS_BUCKET", "Bad_Bucket"), ("JOBS_BUCKET", "s3://bucket"), ("JOBS_BUCKET", "ab"),
    ("JOBS_PREFIX", "jobs"), ("JOBS_PREFIX", "/jobs/"), ("JOBS_PREFIX", "a//"),
    ("JOBS_PREFIX", "../"), ("JOBS_PREFIX", "dev/./"), ("JOBS_PREFIX", "a b/"),
    ("JOBS_PREFIX", "a/" * 200), ("JOBS_TABLE", "t"), ("JOBS_TABLE", "a/b"),
    ("JOBS_TTL_SECONDS", "59"), ("JOBS_TTL_SECONDS", "1.5"),
    ("UPLOAD_EXPIRY_SECONDS", "59"), ("UPLOAD_EXPIRY_SECONDS", "3601")])
def test_bad_jobs_settings_name_the_variable(var: str, value: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env({"ENDPOINT_NAME": "ep", var: value})
    assert caught.value.message.startswith(f"{var} "), caught.value.message
