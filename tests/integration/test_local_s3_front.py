"""The local S3 front against a real moto child on 127.0.0.1 (:mod:`sagegate.local.moto_server`, as
``make run`` starts it): nothing reaches moto before it is provisioned; form uploads read as
S3 reads them (a key given twice, a second file, fields after the file); S3's own 4xx where
moto answered 500; ``?delete`` as S3 takes it; the owner a presigned POST pins, checked
by this front (the functional tests' in-process mock reads no policy at all); and a form's
policy checked whatever its ``Authorization`` header says.

Every process is started here and stopped by its PID."""
from __future__ import annotations

import time
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
import urllib3
from botocore.config import Config
from botocore.exceptions import ClientError

from chalicelib.core.errors import UploadNotFoundError
from chalicelib.jobs.objects import check_input
from chalicelib.jobs.uploads import OWNER_FIELD, presign_upload
from emulator.process import free_port
from sagegate.local.aws import LocalJobs, MotoProcess, provision, start_moto

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing",
               "region_name": "us-east-1"}
CAP = 10


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoProcess]:
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as output, start_moto(free_port(), log=output) as process:
        yield process


@pytest.fixture(scope="module")
def jobs(moto: MotoProcess) -> LocalJobs:
    return provision(LocalJobs(moto.url), key=moto.provision_key)


def client(url: str, name: str, **config: Any) -> Any:
    return boto3.client(name, endpoint_url=url, config=Config(**config), **CREDENTIALS)


def keys(jobs: LocalJobs, prefix: str) -> list[str]:
    listed = client(jobs.endpoint_url, "s3").list_objects_v2(Bucket=jobs.bucket, Prefix=prefix)
    return [item["Key"] for item in listed.get("Contents", [])]


def presigned(jobs: LocalJobs, owner: str | None = None) -> tuple[str, dict[str, str], str]:
    """sagegate's own presigned POST (an image of at most :data:`CAP` bytes)."""
    upload = presign_upload(client(jobs.endpoint_url, "s3"), jobs.bucket, jobs.prefix,
                            "image/jpeg", CAP, owner=owner)
    return upload.url, dict(upload.fields), upload.key


def send(url: str, parts: list[tuple[str, Any]]) -> urllib3.BaseHTTPResponse:
    """A form of these parts in this order (a file part is ``(name, (filename, data))``)."""
    body, content_type = urllib3.encode_multipart_formdata(parts)
    return urllib3.request("POST", url, body=body, headers={"Content-Type": content_type},
                           timeout=30)


def test_nothing_reaches_moto_before_the_bucket_notifies_its_tickets(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """A ticket written between the bucket's creation and its notification started no job:
    the bucket takes nothing from anyone until provisioning is done."""
    log = tmp_path_factory.mktemp("moto-gate") / "moto.log"
    with open(log, "wb") as output, start_moto(free_port(), log=output) as moto:
        own = client(moto.url, "s3", retries={"total_max_attempts": 1})
        own.meta.events.register("before-send", lambda request, **_: request.headers.update(
            {"X-Sagegate-Provision": moto.provision_key}))
        own.create_bucket(Bucket="sagegate-local-jobs")  # half provisioned, as after a restart
        others = client(moto.url, "s3", retries={"total_max_attempts": 1})
        with pytest.raises(ClientError) as refused:
            others.put_object(Bucket="sagegate-local-jobs", Key="jobs/tickets/early", Body=b"{}")
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503

        jobs = provision(LocalJobs(moto.url), key=moto.provision_key)
        others.put_object(Bucket=jobs.bucket, Key=f"{jobs.tickets_prefix}now", Body=b"{}")
        sqs = client(moto.url, "sqs")
        deadline, bodies = time.monotonic() + 20, list[str]()
        while time.monotonic() < deadline and not any("tickets/now" in b for b in bodies):
            bodies += [urllib.parse.unquote(message["Body"]) for message in sqs.receive_message(
                QueueUrl=jobs.tickets_queue, WaitTimeSeconds=1).get("Messages", [])]
        assert any("tickets/now" in body for body in bodies)
        assert not any("tickets/early" in body for body in bodies)


def test_a_key_given_twice_stores_nothing(jobs: LocalJobs) -> None:
    url, fields, key = presigned(jobs)
    other = f"{jobs.prefix}uploads/{uuid.uuid4().hex}"
    parts = [("key", other), *(("KEY" if name == "key" else name, value)
                               for name, value in fields.items()), ("file", ("a.jpg", b"x"))]

    answer = send(url, parts)

    assert answer.status == 400 and b"<Code>InvalidArgument</Code>" in answer.data
    assert keys(jobs, other) == [] and keys(jobs, key) == []


def test_a_second_file_over_the_cap_is_refused_and_stores_nothing(jobs: LocalJobs) -> None:
    url, fields, key = presigned(jobs)
    parts = [*fields.items(), ("file", ("a.jpg", b"x" * CAP)),
             ("file", ("b.jpg", b"y" * (CAP + 1)))]

    answer = send(url, parts)

    assert answer.status == 400 and b"<ArgumentValue>2</ArgumentValue>" in answer.data
    assert keys(jobs, key) == []


def test_fields_after_the_file_are_ignored_and_the_checked_file_is_stored(
        jobs: LocalJobs) -> None:
    url, fields, key = presigned(jobs)
    parts = [*fields.items(), ("file", ("a.jpg", b"x" * CAP)),
             ("key", f"{jobs.prefix}uploads/elsewhere"), ("Content-Type", "text/html")]

    answer = send(url, parts)

    assert answer.status == 204, answer.data
    s3 = client(jobs.endpoint_url, "s3")
    stored = s3.get_object(Bucket=jobs.bucket, Key=key)
    assert (stored["Body"].read(), stored["ContentType"]) == (b"x" * CAP, "image/jpeg")
    assert keys(jobs, f"{jobs.prefix}uploads/elsewhere") == []


@pytest.mark.parametrize(("headers", "query", "status", "code"), [
    # DeleteObjects with a form for its body: moto answered 500
    ({"Content-Type": "multipart/form-data; boundary=b"}, "?delete", 400, "MalformedXML"),
    # an urlencoded bucket POST signed for S3: moto answered 500
    ({"Content-Type": "application/x-www-form-urlencoded",
      "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20261125/us-east-1/s3/"
                       "aws4_request, SignedHeaders=host, Signature=0"}, "", 412,
     "PreconditionFailed"),
    # a virtual-hosted Host on a path-style URL: the bucket's name is a key there
    ({"Content-Type": "multipart/form-data; boundary=b", "Host": "{bucket}.localhost:{port}"},
     "", 405, "MethodNotAllowed"),
])
def test_s3s_own_errors_where_moto_answered_500(jobs: LocalJobs, moto: MotoProcess,
                                                headers: dict[str, str], query: str,
                                                status: int, code: str) -> None:
    sent = {name: value.format(bucket=jobs.bucket, port=moto.port)
            for name, value in headers.items()}
    body = b'--b\r\nContent-Disposition: form-data; name="key"\r\n\r\nk\r\n--b--\r\n'

    answer = urllib3.request("POST", f"{moto.url}/{jobs.bucket}{query}", body=body,
                             headers=sent, timeout=30)

    assert answer.status == status and f"<Code>{code}</Code>".encode() in answer.data
    assert answer.headers["Content-Type"] == "application/xml"


def test_delete_objects_as_curl_sends_it_deletes_them(jobs: LocalJobs, moto: MotoProcess) -> None:
    """``curl -d @delete.xml`` says it is a form (urlencoded): read as one, it was refused;
    ``?delete`` is DeleteObjects, whatever the body's declared type."""
    s3 = client(jobs.endpoint_url, "s3")
    doomed = [f"{jobs.prefix}results/{uuid.uuid4().hex}" for _ in range(2)]
    for key in doomed:
        s3.put_object(Bucket=jobs.bucket, Key=key, Body=b"old")
    document = ("<Delete>" + "".join(f"<Object><Key>{key}</Key></Object>" for key in doomed)
                + "</Delete>").encode()

    answer = urllib3.request("POST", f"{moto.url}/{jobs.bucket}?delete", body=document,
                             headers={"Content-Type": "application/x-www-form-urlencoded"},
                             timeout=30)

    assert answer.status == 200, answer.data
    assert all(keys(jobs, key) == [] for key in doomed)


def test_the_owner_a_presigned_post_pins_is_checked_here_and_kept(jobs: LocalJobs) -> None:
    """An upload presigned for alice: the front refuses it without her or as bob's; posted as
    given, it carries her, and bob's job cannot read it."""
    url, fields, key = presigned(jobs, owner="apikey:alice")
    assert fields[OWNER_FIELD] == "apikey:alice"
    image = [("file", ("a.jpg", b"\xff\xd8\xff" + b"x" * 3))]

    for changed in ({**fields, OWNER_FIELD: "apikey:bob"},
                    {name: value for name, value in fields.items() if name != OWNER_FIELD}):
        refused = send(url, [*changed.items(), *image])
        assert refused.status == 403, refused.data
        assert OWNER_FIELD.encode() in refused.data
        assert keys(jobs, key) == []
    assert send(url, [*fields.items(), *image]).status == 204

    s3 = client(jobs.endpoint_url, "s3")
    assert s3.head_object(Bucket=jobs.bucket, Key=key)["Metadata"] == {
        "sagegate-owner": "apikey:alice"}

    def check(caller: str) -> None:
        check_input(s3, jobs.bucket, jobs.prefix, key, CAP, lambda kind: kind == "image/jpeg",
                    caller)

    check("apikey:alice")  # hers: no error
    with pytest.raises(UploadNotFoundError):
        check("apikey:bob")


# A form whose policy would refuse it, sent with headers that once made the front take it for
# another service's request while moto's own routing still handed it to S3.
BYPASSES = {
    "scope in upper case": "AWS4-HMAC-SHA256 Credential=AKID/20261125/us-east-1/S3/aws4_request, "
                           "SignedHeaders=host, Signature=x",
    "second word not the Credential": "AWS4-HMAC-SHA256 Scope=AKID/20261125/us-east-1/s3/"
                                      "aws4_request, Credential=AKID/20261125/us-east-1/sqs/"
                                      "aws4_request, Signature=x",
    "a scope moto cannot read": "AWS4-HMAC-SHA256 Credential=AKID/20261125/us-east-1/sqs/"
                                "aws4_request/more, Signature=x",
    "SigV2": "AWS AKID:signature",
}


@pytest.mark.parametrize("authorization", BYPASSES.values(), ids=BYPASSES.keys())
def test_a_form_outside_its_policy_is_refused_whatever_the_authorization(
        jobs: LocalJobs, authorization: str) -> None:
    url, fields, key = presigned(jobs)
    other = f"{jobs.prefix}uploads/{uuid.uuid4().hex}"
    body, content_type = urllib3.encode_multipart_formdata(
        [*{**fields, "key": other}.items(), ("file", ("a.jpg", b"x" * (CAP + 5)))])

    answer = urllib3.request("POST", url, body=body, timeout=30, headers={
        "Content-Type": content_type, "Authorization": authorization})

    assert answer.status in (400, 403), answer.data
    assert keys(jobs, other) == [] and keys(jobs, key) == []


def test_a_form_within_its_policy_is_stored_with_any_authorization(jobs: LocalJobs) -> None:
    url, fields, key = presigned(jobs)
    body, content_type = urllib3.encode_multipart_formdata(
        [*fields.items(), ("file", ("a.jpg", b"x" * CAP))])

    answer = urllib3.request("POST", url, body=body, timeout=30, headers={
        "Content-Type": content_type, "Authorization": BYPASSES["scope in upper case"]})

    assert answer.status == 204, answer.data
    assert keys(jobs, key) == [key]
