"""The packaged job functions run as Lambda runs them: ``app.job_runner``, ``app.job_results``
and ``app.job_failures`` from the dev stage's zips, in the bare interpreter of
``sagegate/deploy/sandbox_child.py``, with the environment their SAM resources set.

S3, DynamoDB and Firehose are moto's server on 127.0.0.1 (bucket, table, topics and capture
stream as the dev stack names them; moto's stream writes each PutRecordBatch as one object
under its prefix, with no buffering and no ``!{...}`` expressions), with IAM enforced: each
function runs with the keys of a moto user that holds exactly its committed policy
(``.chalice/policy-dev*.json``; DynamoDB and Firehose statements on ``"*"``, as moto matches
their requests against ``"*"`` only, the table's and the stream's ARNs being checked by
``test_job_functions.py`` and ``test_capture_stream.py``), so a call its role lacks fails
here as it would on AWS. SageMaker is the emulator (``tests/deploy/emulator-jobs.json``: the
image model for realtime jobs, iris behind an asynchronous endpoint that writes under
``jobs/async/`` and notifies the dev topics; its outbox gives the notifications SNS would
deliver). The API's packaged handler creates the jobs and answers them, as on AWS.
"""
from __future__ import annotations

import base64
import copy
import http.server
import json
import os
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import boto3
import pytest

from emulator.process import free_port, start_emulator
from sagegate.deploy import sandbox
from sagegate.deploy.jobs_template import jobs_table_schema
from sagegate.deploy.sandbox import DUMMY_CREDENTIALS, LambdaTree
from tests.deploy.conftest import EVENTS, ROOT, Package, load_event
from tests.deploy.test_artifact import CATS

pytestmark = pytest.mark.deploy

EMULATOR_CONFIG = ROOT / "tests" / "deploy" / "emulator-jobs.json"
BUCKET = TABLE = "sagegate-dev-jobs"
CAPTURES = "sagegate-dev-data"
CAPTURE_STREAM = "sagegate-dev-captures"
TOPICS = ("sagegate-dev-jobs-success", "sagegate-dev-jobs-error")
IRIS = {"instances": [[6.7, 3.0, 5.2, 2.3]]}
FAILURE_REASON = "ClientError: the model container ran out of memory"
NOTIFICATION_WAIT_S = 120.0


ROLES = {"APIHandler": "policy-dev.json", "JobRunner": "policy-dev-job_runner.json",
         "JobResults": "policy-dev-job_results.json",
         "JobFailures": "policy-dev-job_failures.json",
         "JobRedrive": "policy-dev-job_redrive.json"}
ADMIN = {"Version": "2012-10-17",
         "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}


@dataclass
class Aws:
    """moto's server, the keys of each function's role there, and the test's own client."""

    url: str
    admin: tuple[str, str]
    roles: dict[str, tuple[str, str]]  # logical id -> access key id, secret
    s3: Any

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        listed = self.s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
        return [item["Key"] for item in listed.get("Contents", [])]

    def captures(self) -> list[dict[str, Any]]:
        """The capture records the stream delivered, each as its JSON."""
        return [json.loads(line) for key in self.keys(CAPTURES, "captures/")
                for line in self.s3.get_object(Bucket=CAPTURES, Key=key)["Body"].read()
                .splitlines()]


@dataclass
class Flow:
    """What each packaged handler answered and logged, step by step."""

    created: list[dict[str, Any]]
    ids: dict[str, str]  # realtime, async, failing -> job id
    ran: sandbox.Run
    rerun: sandbox.Run
    notifications: dict[str, dict[str, Any]]  # job id -> the emulator's notification
    finished: sandbox.Run
    failed: sandbox.Run
    late: sandbox.Run
    views: dict[str, dict[str, Any]]
    synchronous: dict[str, dict[str, Any]]
    captures_after_run: list[dict[str, Any]]
    captures_after_rerun: list[dict[str, Any]]

    @property
    def logs(self) -> str:
        return "".join(run.logs for run in (self.ran, self.rerun, self.finished, self.failed,
                                            self.late))


def client(service: str, url: str, keys: tuple[str, str] = ("testing", "testing")) -> Any:
    return boto3.client(service, endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id=keys[0], aws_secret_access_key=keys[1])


def as_enforced_by_moto(document: dict[str, Any]) -> dict[str, Any]:
    """A committed policy as moto can enforce it (see the module's docstring)."""
    statements = [{**statement, "Resource": "*"}
                  if any(a.startswith(("dynamodb:", "firehose:")) for a in statement["Action"])
                  else statement for statement in document["Statement"]]
    return {**document, "Statement": statements}


def user_with(iam: Any, name: str, document: dict[str, Any]) -> tuple[str, str]:
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName=name, PolicyDocument=json.dumps(document))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return key["AccessKeyId"], key["SecretAccessKey"]


def enforce_iam(url: str, on: bool) -> None:
    """moto's switch: check every request's signature and policy from now on (or never)."""
    reset = urllib.request.Request(f"{url}/moto-api/reset-auth", method="POST",
                                   data=b"0" if on else b"inf",
                                   headers={"Content-Type": "text/plain"})
    with urllib.request.urlopen(reset, timeout=10) as answer:
        assert answer.status == 200


@pytest.fixture(scope="module")
def aws() -> Iterator[Aws]:
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    try:
        iam = client("iam", url)
        admin = user_with(iam, "admin", ADMIN)  # the test's own and the emulator's
        roles = {logical_id: user_with(iam, logical_id, as_enforced_by_moto(
            json.loads((ROOT / ".chalice" / name).read_text())))
            for logical_id, name in ROLES.items()}
        enforce_iam(url, on=True)
        s3 = client("s3", url, admin)
        for bucket in (BUCKET, CAPTURES):
            s3.create_bucket(Bucket=bucket)
        schema = jobs_table_schema()  # the keys and the re-drive's index the stack declares
        schema.pop("TimeToLiveSpecification")
        client("dynamodb", url, admin).create_table(TableName=TABLE,
                                                    BillingMode="PAY_PER_REQUEST", **schema)
        for topic in TOPICS:
            client("sns", url, admin).create_topic(Name=topic)
        client("firehose", url, admin).create_delivery_stream(
            DeliveryStreamName=CAPTURE_STREAM, DeliveryStreamType="DirectPut",
            ExtendedS3DestinationConfiguration={
                "RoleARN": "arn:aws:iam::123456789012:role/firehose",
                "BucketARN": f"arn:aws:s3:::{CAPTURES}", "Prefix": "captures/"})
        yield Aws(url, admin, roles, s3)
    finally:
        enforce_iam(url, on=False)  # moto's settings are this process's
        server.stop()


@pytest.fixture(scope="module")
def dev(package: Callable[[str], Package]) -> Package:
    return package("dev")


@pytest.fixture(scope="module")
def tree(dev: Package, tmp_path_factory: pytest.TempPathFactory) -> LambdaTree:
    return LambdaTree.build(tmp_path_factory.mktemp("jobs-lambda"), dev.function_zip,
                            dev.layer_zip)


def api_event(method: str, resource: str, path: str, parameters: dict[str, str],
              body: str | None) -> dict[str, Any]:
    """An API Gateway event of the stored ones' shape for another route."""
    event = copy.deepcopy(load_event("predict-json"))
    event.update(resource=resource, path=path, httpMethod=method, pathParameters=parameters,
                 isBase64Encoded=False, body=body, queryStringParameters=None,
                 multiValueQueryStringParameters=None)
    event["requestContext"].update(resourcePath=resource, httpMethod=method,
                                   path=f"/api{path}")
    return event


def ticket_event(job_id: str) -> dict[str, Any]:
    event = json.loads((EVENTS / "s3-job-ticket.json").read_text())
    event["Records"][0]["s3"]["object"]["key"] = f"jobs/tickets/{job_id}"
    return event  # type: ignore[no-any-return]


def sns_event(notification: dict[str, Any], topic: str) -> dict[str, Any]:
    event = json.loads((EVENTS / "sns-job-completion.json").read_text())
    event["Records"][0]["Sns"].update(Message=json.dumps(notification),
                                      TopicArn=f"arn:aws:sns:us-east-1:123456789012:{topic}")
    return event  # type: ignore[no-any-return]


def wait_for_notifications(outbox: Path, ids: set[str]) -> dict[str, dict[str, Any]]:
    """The emulator's notifications of ``ids``, as it appends them to its outbox."""
    deadline = time.monotonic() + NOTIFICATION_WAIT_S
    found: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        lines = outbox.read_text().splitlines() if outbox.exists() else []
        found = {entry["message"]["inferenceId"]: entry["message"]
                 for entry in map(json.loads, lines)}
        if ids <= set(found):
            return found
        time.sleep(0.1)
    pytest.fail(f"the asynchronous endpoint notified {sorted(found)}, not {sorted(ids)}")


class Handlers:
    """Runs one packaged handler of the dev stage at a time, as Lambda would."""

    def __init__(self, dev: Package, tree: LambdaTree, aws: Aws, emulator_url: str,
                 workdir: Path) -> None:
        self.dev, self.tree, self.aws, self.emulator_url = dev, tree, aws, emulator_url
        self.workdir, self.runs = workdir, 0
        self.extra_env: dict[str, str] = {}

    def __call__(self, logical_id: str, events: list[dict[str, Any]],
                 handler: str = "app") -> sandbox.Run:
        function = self.dev.resource(logical_id)["Properties"]
        env = sandbox.lambda_env(function["Environment"]["Variables"],
                                 function["FunctionName"], function["Runtime"],
                                 self.emulator_url)
        key, secret = self.aws.roles[logical_id]
        env.pop("AWS_SESSION_TOKEN")
        env.update(AWS_ENDPOINT_URL_S3=self.aws.url, AWS_ENDPOINT_URL_DYNAMODB=self.aws.url,
                   AWS_ENDPOINT_URL_FIREHOSE=self.aws.url, AWS_ACCESS_KEY_ID=key,
                   AWS_SECRET_ACCESS_KEY=secret, **self.extra_env)
        self.runs += 1
        return sandbox.invoke(self.tree, env, events, self.workdir / f"run-{self.runs}",
                              handler=handler, function_timeout=float(function["Timeout"]))


def _create_jobs(handlers: Handlers, aws: Aws, image: bytes) -> tuple[list[dict[str, Any]],
                                                                      dict[str, str]]:
    upload = uuid.uuid4().hex
    aws.s3.put_object(Bucket=BUCKET, Key=f"jobs/uploads/{upload}", Body=image,
                      ContentType="image/jpeg")
    posts = {
        "realtime": api_event("POST", "/models/{name}/jobs", "/models/efficientnet-lite0/jobs",
                              {"name": "efficientnet-lite0"}, json.dumps({"upload_id": upload})),
        "async": api_event("POST", "/models/{name}/jobs", "/models/iris/jobs", {"name": "iris"},
                           json.dumps(IRIS)),
        "failing": api_event("POST", "/models/{name}/jobs", "/models/iris/jobs",
                             {"name": "iris"}, json.dumps(IRIS)),
    }
    created = handlers("APIHandler", list(posts.values())).answers
    ids = {kind: json.loads(answer["body"]).get("job_id", "")
           for kind, answer in zip(posts, created, strict=True)}
    return created, ids


def _synchronous(handlers: Handlers, image: bytes) -> dict[str, dict[str, Any]]:
    predict = api_event("POST", "/models/{name}/predict", "/models/efficientnet-lite0/predict",
                        {"name": "efficientnet-lite0"}, base64.b64encode(image).decode())
    predict.update(isBase64Encoded=True)
    predict["headers"]["Content-Type"] = "image/jpeg"
    predict["multiValueHeaders"]["Content-Type"] = ["image/jpeg"]
    [answer] = handlers("APIHandler", [predict]).answers
    return {"realtime": json.loads(answer["body"])}


@pytest.fixture(scope="module")
def flow(dev: Package, tree: LambdaTree, aws: Aws,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flow]:
    workdir = tmp_path_factory.mktemp("jobs-invoke")
    outbox = workdir / "outbox.jsonl"
    image = base64.b64decode(load_event("predict-binary")["body"])
    emulator_env = {**os.environ, "AWS_ACCESS_KEY_ID": aws.admin[0],
                    "AWS_SECRET_ACCESS_KEY": aws.admin[1], "AWS_DEFAULT_REGION": "us-east-1"}
    with start_emulator(EMULATOR_CONFIG, env=emulator_env, extra_args=[
            "--s3-endpoint-url", aws.url, "--async-outbox", str(outbox)]) as emulator:
        handlers = Handlers(dev, tree, aws, emulator.url, workdir)
        created, ids = _create_jobs(handlers, aws, image)
        tickets = [ticket_event(job_id) for job_id in ids.values()]
        ran = handlers("JobRunner", tickets, "job_runner")
        captured = aws.captures()
        rerun = handlers("JobRunner", tickets[:1], "job_runner")  # S3 delivers again
        captured_again = aws.captures()
        notifications = wait_for_notifications(outbox, {ids["async"], ids["failing"]})
        finished = handlers("JobResults", [sns_event(notifications[ids["async"]], TOPICS[0])],
                            "job_results")
        failure = {**notifications[ids["failing"]], "invocationStatus": "Failed",
                   "failureReason": FAILURE_REASON}
        failure.pop("responseParameters", None)
        failed = handlers("JobFailures", [sns_event(failure, TOPICS[1])], "job_failures")
        # the success notification of the job that failed arrives late, and twice
        late_success = sns_event(notifications[ids["failing"]], TOPICS[0])
        late = handlers("JobResults", [late_success, late_success], "job_results")
        gets = [api_event("GET", "/jobs/{job_id}", f"/jobs/{job_id}", {"job_id": job_id}, None)
                for job_id in ids.values()]
        views = {kind: json.loads(answer["body"])
                 for kind, answer in zip(ids, handlers("APIHandler", gets).answers, strict=True)}
        yield Flow(created, ids, ran, rerun, notifications, finished, failed, late, views,
                   _synchronous(handlers, image), captured, captured_again)


def test_posting_jobs_queues_them_and_writes_their_tickets(flow: Flow, aws: Aws) -> None:
    for answer in flow.created:
        assert answer["statusCode"] == 202, answer["body"]
        body = json.loads(answer["body"])
        assert body["state"] == "queued"
        assert answer["headers"]["Location"] == f"/jobs/{body['job_id']}"
    tickets = aws.keys(BUCKET, "jobs/tickets/")
    assert sorted(tickets) == sorted(f"jobs/tickets/{job_id}" for job_id in flow.ids.values())


def test_the_runner_runs_a_realtime_job_and_hands_an_async_one_to_its_endpoint(
        flow: Flow) -> None:
    states = {job_id: state for answer in flow.ran.answers
              for job_id, state in answer["jobs"].items()}
    assert states == {flow.ids["realtime"]: "succeeded", flow.ids["async"]: "running",
                      flow.ids["failing"]: "running"}
    notification = flow.notifications[flow.ids["async"]]
    assert notification["requestParameters"]["endpointName"] == "iris-async"
    # where the dev stage's asynchronous endpoints write, which job_results may read
    assert notification["responseParameters"]["outputLocation"].startswith(
        f"s3://{BUCKET}/jobs/async/output/")


def test_a_realtime_job_answers_what_the_synchronous_route_answers(flow: Flow) -> None:
    view = flow.views["realtime"]
    assert view["state"] == "succeeded", view
    result, synchronous = dict(view["result"]), dict(flow.synchronous["realtime"])
    assert result.pop("request_id") == view["job_id"] != synchronous.pop("request_id")
    assert result == synchronous
    assert result["predictions"][0]["index"] in CATS


def test_an_async_job_is_finished_by_its_notification(flow: Flow) -> None:
    assert flow.finished.answers == [{"jobs": {flow.ids["async"]: "succeeded"}}]
    view = flow.views["async"]
    assert view["state"] == "succeeded", view
    assert view["result"]["predictions"][0][0]["label"] == "virginica"


def test_a_failure_notification_fails_the_job_with_the_endpoints_reason(flow: Flow) -> None:
    assert flow.failed.answers == [{"jobs": {flow.ids["failing"]: "failed"}}]
    view = flow.views["failing"]
    assert view["state"] == "failed"
    assert FAILURE_REASON in view["error"]["Message"]
    # a later success notification (twice: SNS delivers at least once) changes nothing
    assert flow.late.answers == [{"jobs": {flow.ids["failing"]: "failed"}}] * 2


def test_a_redelivered_ticket_runs_nothing_twice(flow: Flow) -> None:
    assert flow.rerun.answers == [{"jobs": {flow.ids["realtime"]: "succeeded"}}]
    assert flow.captures_after_run  # the realtime job was captured once ...

    def realtime(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # the partition keys the stream's dynamic partitioning reads, sent by the zip's sink
        return [r for r in records
                if r["eventMetadata"].get("sagegateEndpoint") == "efficientnet-lite0"]

    assert realtime(flow.captures_after_rerun) == realtime(flow.captures_after_run)
    assert len(realtime(flow.captures_after_run)) == 1  # ... and not again on its ticket
    [record] = realtime(flow.captures_after_run)
    assert record["eventMetadata"]["sagegateVariant"] == "AllTraffic"
    assert record["eventMetadata"]["inferenceId"] == flow.ids["realtime"]


def test_the_job_functions_import_only_from_the_zips(flow: Flow, tree: LambdaTree) -> None:
    for run in (flow.ran, flow.finished, flow.failed):
        modules = run.report["modules"]
        assert modules["chalicelib"].startswith(str(tree.task))
        assert modules["numpy"].startswith(str(tree.layer / "python"))
        assert modules["boto3"].startswith(str(tree.runtime))
        assert not run.report["site_loaded"]


def test_each_role_is_enforced_here(flow: Flow, aws: Aws) -> None:
    """The harness can fail: a role's missing grant is AWS's AccessDenied in moto too."""
    upload = next(key for key in aws.keys(BUCKET, "jobs/uploads/"))
    assert client("s3", aws.url, aws.roles["JobRunner"]).head_object(
        Bucket=BUCKET, Key=upload)["ContentLength"] > 0
    for logical_id in ("JobFailures", "JobResults"):  # only the API writes tickets
        s3 = client("s3", aws.url, aws.roles[logical_id])
        with pytest.raises(s3.exceptions.ClientError, match=r"AccessDenied|403"):
            s3.put_object(Bucket=BUCKET, Key=f"jobs/tickets/{uuid.uuid4().hex}", Body=b"{}")
    dynamodb = client("dynamodb", aws.url, aws.roles["JobRunner"])
    with pytest.raises(dynamodb.exceptions.ClientError, match=r"403|AccessDenied"):
        dynamodb.delete_item(TableName=TABLE, Key={"job_id": {"S": flow.ids["realtime"]}})


def test_the_job_functions_log_no_traceback_credentials_or_input(flow: Flow, aws: Aws) -> None:
    assert "Traceback" not in flow.logs
    for secret in (*DUMMY_CREDENTIALS.values(), *(key[1] for key in aws.roles.values())):
        assert secret not in flow.logs
    image_b64 = load_event("predict-binary")["body"]
    assert image_b64[1000:1064] not in flow.logs


class FakeLambda(http.server.BaseHTTPRequestHandler):
    """Lambda's Invoke API on 127.0.0.1, as far as the re-drive uses it: each asynchronous
    invocation recorded (function, type, payload), answered 202 as Lambda answers it."""

    invocations: ClassVar[list[tuple[str, str, dict[str, Any]]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        function = self.path.split("/functions/", 1)[1].split("/", 1)[0]
        self.invocations.append((urllib.parse.unquote(function),
                                 self.headers.get("X-Amz-Invocation-Type", ""),
                                 json.loads(body)))
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def fake_lambda() -> Iterator[tuple[str, list[tuple[str, str, dict[str, Any]]]]]:
    FakeLambda.invocations = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeLambda)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", FakeLambda.invocations
    finally:
        server.shutdown()
        server.server_close()


def schedule_event(at: float) -> dict[str, Any]:
    event = json.loads((EVENTS / "schedule-monitor.json").read_text())
    event["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
    event["resources"] = ["arn:aws:events:us-east-1:123456789012:rule/sagegate-dev-job_redrive"]
    return event


def test_the_packaged_redrive_hands_a_lost_job_to_the_runner_which_runs_it_once(
        dev: Package, tree: LambdaTree, aws: Aws, fake_lambda: Any,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """``app.job_redrive`` from the dev zip, with its own role (moto, IAM enforced): a job
    queued with its ticket and no event is due 6 minutes on; the re-drive lists it through
    the table's index, checks its ticket, and invokes ``sagegate-dev-job_runner``
    asynchronously with the ticket's S3 event; the packaged runner, given that event, runs
    it; the next run and a claimed job get nothing."""
    lambda_url, invocations = fake_lambda
    workdir = tmp_path_factory.mktemp("jobs-redrive")
    image = base64.b64decode(load_event("predict-binary")["body"])
    emulator_env = {**os.environ, "AWS_ACCESS_KEY_ID": aws.admin[0],
                    "AWS_SECRET_ACCESS_KEY": aws.admin[1], "AWS_DEFAULT_REGION": "us-east-1"}
    with start_emulator(EMULATOR_CONFIG, env=emulator_env,
                        extra_args=["--s3-endpoint-url", aws.url]) as emulator:
        handlers = Handlers(dev, tree, aws, emulator.url, workdir)
        handlers.extra_env = {"AWS_ENDPOINT_URL_LAMBDA": lambda_url}
        lost = json.loads(handlers("APIHandler", [_realtime_job(aws, image)]).answers[0][
            "body"])["job_id"]
        claimed = json.loads(handlers("APIHandler", [_realtime_job(aws, image)]).answers[0][
            "body"])["job_id"]
        dynamodb = client("dynamodb", aws.url, aws.admin)
        dynamodb.update_item(TableName=TABLE, Key={"job_id": {"S": claimed}},
                             UpdateExpression="SET #s = :r, runner_id = :id",
                             ExpressionAttributeNames={"#s": "state"},
                             ExpressionAttributeValues={":r": {"S": "running"},
                                                        ":id": {"S": "another-runner"}})
        due = time.time() + 360

        run = handlers("JobRedrive", [schedule_event(due)], "job_redrive")

        assert run.answers[0]["redriven"] == [lost], run.logs
        [(function, kind, event)] = invocations
        assert (function, kind) == ("sagegate-dev-job_runner", "Event")
        ran = handlers("JobRunner", [event], "job_runner")
        # the runner took it (claimed, then ended it: the runner's own tests say how)
        [(job_id, state)] = ran.answers[0]["jobs"].items()
        assert job_id == lost and state in ("succeeded", "failed"), ran.logs
        again = handlers("JobRedrive", [schedule_event(due + 300)], "job_redrive")
        assert again.answers[0]["redriven"] == [] and len(invocations) == 1
    state = dynamodb.get_item(TableName=TABLE, Key={"job_id": {"S": claimed}})["Item"]
    assert state["state"] == {"S": "running"} and state["runner_id"] == {"S": "another-runner"}
    assert "Traceback" not in run.logs + again.logs


def _realtime_job(aws: Aws, image: bytes) -> dict[str, Any]:
    upload = uuid.uuid4().hex
    aws.s3.put_object(Bucket=BUCKET, Key=f"jobs/uploads/{upload}", Body=image,
                      ContentType="image/jpeg")
    return api_event("POST", "/models/{name}/jobs", "/models/efficientnet-lite0/jobs",
                     {"name": "efficientnet-lite0"}, json.dumps({"upload_id": upload}))
