"""The local stack's AWS side: moto's server (S3, SNS, SQS, DynamoDB) and what sagegate's jobs
and the stage's tables need in it.

:func:`start_moto` starts :mod:`sagegate.local.moto_server` as a child, its gate closed: it
answers 503 to all but this process until :func:`provision` has created the jobs bucket, the
emulator's buckets and topics, the event plumbing the pump reads (tickets notified to one SQS
queue, both topics subscribed to another with raw delivery off, so the SNS envelope arrives as
Lambda's records carry it), the stage's tables and capture bucket. So no ticket can be written
before the bucket notifies its event (after a restart too). :class:`MotoStack` is ``sagegate
run``'s moto; :func:`jobs_stack` the whole stack with jobs on, for tests and the benchmark.

moto keeps everything in memory: when its server dies the uploads, results and queued events are
gone; ``sagegate run`` restarts and provisions it again, and says so.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from chalicelib import awsclients
from chalicelib.core import aws
from chalicelib.core.config import Settings
from emulator.process import DEFAULT_CONFIG as DEFAULT_EMULATOR_CONFIG
from emulator.process import free_port, start_emulator
from sagegate.local.events import NOTIFICATIONS_QUEUE_ENV, TICKETS_QUEUE_ENV
from sagegate.local.moto_server import OPEN_PATH, PROVISION_HEADER, PROVISION_KEY_ENV
from sagegate.local.processes import (
    DUMMY_AWS_ENV,
    HOST,
    INSTANCE_ENV,
    ROOT,
    ApiProcess,
    ApiStartError,
    start_chalice_local,
    wait_until_serving,
)
from sagegate.local.supervision import Supervisor

JOBS_BUCKET = "sagegate-local-jobs"
"""The local jobs bucket: uploads, tickets, results, and the async endpoints' outputs."""
BUDGET_TABLE = "sagegate-local-token-budgets"
"""The local stack's token budgets (the local stage's limits are generous: see
.chalice/config.json)."""
SUCCESS_TOPIC = "sagegate-local-jobs-success"
ERROR_TOPIC = "sagegate-local-jobs-error"
TICKETS_QUEUE = "sagegate-local-job-tickets"
NOTIFICATIONS_QUEUE = "sagegate-local-job-notifications"
ACCOUNT = "123456789012"
"""moto's account for any credentials (and the emulator's default account)."""
REGION = DUMMY_AWS_ENV["AWS_DEFAULT_REGION"]
VISIBILITY_TIMEOUT_S = 900
"""How long a received event stays hidden while its handler runs: Lambda's longest run."""
MOTO_READY_PATH = "/moto-api/"


def topic_arn(name: str) -> str:
    return f"arn:aws:sns:{REGION}:{ACCOUNT}:{name}"


class MotoStartError(RuntimeError):
    """moto's server exited, did not answer in time, or could not be provisioned."""


class MotoProcess(ApiProcess):
    """A running :mod:`sagegate.local.moto_server` child; a context manager that stops it."""

    provision_key = ""
    """The key its gate lets through before :func:`provision` opens it."""


def start_moto(port: int, *, host: str = HOST, log: IO[bytes] | None = None,
               timeout: float = 60.0) -> MotoProcess:
    """Start moto's server and wait until this child itself answers (503: its gate is closed).

    Raises:
        MotoStartError: the child exited or never answered (it is then stopped).
    """
    instance, key = secrets.token_hex(8), secrets.token_hex(16)
    env = {**os.environ, **DUMMY_AWS_ENV, INSTANCE_ENV: instance, PROVISION_KEY_ENV: key,
           "MOTO_PORT": str(port)}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    process = subprocess.Popen(
        [sys.executable, "-m", "sagegate.local.moto_server", "--host", host, "--port", str(port)],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
        stderr=subprocess.STDOUT if log else None)
    moto = MotoProcess(process, host, port, instance)
    moto.provision_key = key
    try:
        wait_until_serving(moto, timeout, MOTO_READY_PATH, None, what="moto's server")
    except ApiStartError as error:
        moto.stop(timeout=2.0)
        raise MotoStartError(str(error)) from None
    except BaseException:
        moto.stop(timeout=2.0)
        raise
    return moto


@dataclasses.dataclass(frozen=True)
class LocalJobs:

    endpoint_url: str
    bucket: str = JOBS_BUCKET
    prefix: str = "jobs/"
    success_topic: str = topic_arn(SUCCESS_TOPIC)
    error_topic: str = topic_arn(ERROR_TOPIC)
    tickets_queue: str = ""
    """Set by :func:`provision`."""
    notifications_queue: str = ""
    """The queue both topics deliver to (set by :func:`provision`)."""
    table: str = ""
    """``JOBS_TABLE``; empty: records in chalice local's memory."""
    cache_table: str = ""
    capture_bucket: str = ""
    budget_table: str = BUDGET_TABLE
    """``TOKEN_BUDGET_TABLE``: the OpenAI routes' per-key token budgets (empty: off)."""

    def settings_env(self) -> dict[str, str]:
        """The variables sagegate reads and boto3's endpoints; no jobs variable with jobs off."""
        tables = {name: value for name, value in (("JOBS_TABLE", self.table),
                                                  ("CACHE_TABLE", self.cache_table),
                                                  ("TOKEN_BUDGET_TABLE", self.budget_table))
                  if value}
        jobs = {"JOBS_BUCKET": self.bucket, "JOBS_SUCCESS_TOPIC": self.success_topic,
                "JOBS_ERROR_TOPIC": self.error_topic} if self.bucket else {}
        return {**jobs, **tables, **local_aws_env(self.endpoint_url)}

    def api_env(self) -> dict[str, str]:
        queues = {name: value for name, value in ((TICKETS_QUEUE_ENV, self.tickets_queue),
                                                  (NOTIFICATIONS_QUEUE_ENV,
                                                   self.notifications_queue)) if value}
        return {**self.settings_env(), **queues}

    def emulator_args(self) -> list[str]:
        return ["--s3-endpoint-url", self.endpoint_url,
                "--sns-endpoint-url", self.endpoint_url]

    @property
    def tickets_prefix(self) -> str:
        return f"{self.prefix}tickets/"


MOTO_SERVICES = ("S3", "SNS", "SQS", "DYNAMODB", "FIREHOSE")


def local_aws_env(moto_url: str) -> dict[str, str]:
    """The variables that point every boto3 client of a local run at moto's server: each
    service's endpoint variable, and ``AWS_ENDPOINT_URL`` for any other (an unexpected client
    fails on 127.0.0.1 instead of reaching AWS); dummy credentials, so no profile or instance
    metadata is looked up. The SageMaker runtime's own variable (the emulator) beats
    ``AWS_ENDPOINT_URL``."""
    return {**DUMMY_AWS_ENV, "AWS_ENDPOINT_URL": moto_url,
            "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "false",
            **{f"AWS_ENDPOINT_URL_{service}": moto_url for service in MOTO_SERVICES}}


def emulator_env(moto_url: str) -> dict[str, str]:
    env = {**os.environ, **local_aws_env(moto_url)}
    env.pop("AWS_PROFILE", None)
    return env


def _clients(endpoint_url: str, key: str) -> tuple[Any, Any, Any, Any]:
    """boto3 clients for moto's server, each request carrying the gate's key."""
    session = awsclients.Clients(aws.CLI, region=REGION, endpoint_url=endpoint_url,
                                 credentials=(DUMMY_AWS_ENV["AWS_ACCESS_KEY_ID"],
                                              DUMMY_AWS_ENV["AWS_SECRET_ACCESS_KEY"]))
    clients = tuple(session.client(name) for name in ("s3", "sns", "sqs", "dynamodb"))

    def with_key(request: Any, **_: Any) -> None:
        request.headers[PROVISION_HEADER] = key

    for client in clients:
        client.meta.events.register("before-send", with_key)
    return clients[0], clients[1], clients[2], clients[3]


def provision(jobs: LocalJobs, buckets: Iterable[str] = (), topics: Iterable[str] = (), *,
              key: str = "") -> LocalJobs:
    """Create the jobs bucket, the emulator's ``buckets`` and ``topics``, the event plumbing, the
    stage's tables and capture bucket; then open the gate with ``key``, never before. Idempotent.
    Returns ``jobs`` with its queue URLs.

    Raises:
        MotoStartError: moto refused or could not be reached (the message says which step).
    """
    from botocore.exceptions import BotoCoreError, ClientError

    s3, sns, sqs, dynamodb = _clients(jobs.endpoint_url, key)
    tickets = notes = ""
    try:
        for bucket in dict.fromkeys(filter(None, [jobs.bucket, jobs.capture_bucket, *buckets])):
            s3.create_bucket(Bucket=bucket)
        for arn in dict.fromkeys(filter(None, [jobs.success_topic, jobs.error_topic, *topics])):
            sns.create_topic(Name=arn.rsplit(":", 1)[-1])
        if jobs.bucket:  # jobs on: their events' queues
            tickets, tickets_arn = _queue(sqs, TICKETS_QUEUE)
            notes, notes_arn = _queue(sqs, NOTIFICATIONS_QUEUE)
            s3.put_bucket_notification_configuration(
                Bucket=jobs.bucket,
                NotificationConfiguration=ticket_notification(jobs, tickets_arn))
            _subscribe(sns, {jobs.success_topic, jobs.error_topic} - {""}, notes_arn)
        for table, schema in table_schemas(jobs).items():
            _table(dynamodb, table, schema)
        if key:  # last: until now, nothing but this process could reach moto
            _open_gate(jobs.endpoint_url, key)
    except (BotoCoreError, ClientError, OSError) as error:
        raise MotoStartError(f"cannot provision moto's server at {jobs.endpoint_url}: "
                             f"{error}") from None
    return dataclasses.replace(jobs, tickets_queue=tickets, notifications_queue=notes)


def ticket_notification(jobs: LocalJobs, queue_arn: str) -> dict[str, Any]:
    return {"QueueConfigurations": [{
        "Id": "job-tickets", "QueueArn": queue_arn, "Events": ["s3:ObjectCreated:*"],
        "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": jobs.tickets_prefix}]}}}]}


def table_schemas(jobs: LocalJobs) -> dict[str, dict[str, Any]]:
    """The tables to create, by name, with the keys, indexes and TTL their templates declare."""
    from sagegate.deploy.jobs_template import jobs_table_schema
    from sagegate.deploy.templates import budget_table_schema, cache_table_schema

    schemas = {jobs.table: jobs_table_schema(), jobs.cache_table: cache_table_schema(),
               jobs.budget_table: budget_table_schema()}
    return {name: schema for name, schema in schemas.items() if name}


def _table(dynamodb: Any, name: str, schema: dict[str, Any]) -> None:
    """Create one on-demand table and its TTL (an existing one is left as it is)."""
    keys = {key: value for key, value in schema.items() if key != "TimeToLiveSpecification"}
    try:
        dynamodb.create_table(TableName=name, BillingMode="PAY_PER_REQUEST", **keys)
    except dynamodb.exceptions.ResourceInUseException:
        return
    if "TimeToLiveSpecification" in schema:
        dynamodb.update_time_to_live(TableName=name,
                                     TimeToLiveSpecification=schema["TimeToLiveSpecification"])


def _open_gate(endpoint_url: str, key: str) -> None:
    request = urllib.request.Request(endpoint_url + OPEN_PATH, method="POST", data=b"",
                                     headers={PROVISION_HEADER: key})
    with urllib.request.urlopen(request, timeout=10) as answer:
        if answer.status != 204:
            raise MotoStartError(f"moto's server did not open its gate ({answer.status})")


def _queue(sqs: Any, name: str) -> tuple[str, str]:
    url = sqs.create_queue(QueueName=name, Attributes={
        "VisibilityTimeout": str(VISIBILITY_TIMEOUT_S)})["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    return str(url), str(arn["Attributes"]["QueueArn"])


def _subscribe(sns: Any, topics: set[str], queue_arn: str) -> None:
    for arn in sorted(topics):
        existing = sns.list_subscriptions_by_topic(TopicArn=arn).get("Subscriptions", [])
        if any(item.get("Endpoint") == queue_arn for item in existing):
            continue
        sns.subscribe(TopicArn=arn, Protocol="sqs", Endpoint=queue_arn,
                      Attributes={"RawMessageDelivery": "false"})


def emulator_resources(config_path: Path) -> tuple[list[str], list[str]]:
    """The buckets and topic ARNs the emulator's asynchronous endpoints write and notify.

    Raises:
        MotoStartError: the configuration cannot be read (the emulator would refuse it too).
    """
    from emulator.config import ConfigError, load_config

    try:
        config = load_config(config_path)
    except ConfigError as error:
        raise MotoStartError(str(error)) from None
    buckets: list[str] = []
    topics: list[str] = []
    for endpoint in config.endpoints.values():
        settings = endpoint.asynchronous
        if settings is None:
            continue
        for path in (settings.output_path, settings.failure_path):
            if path:
                buckets.append(aws.S3Uri.parse(path).bucket)  # checked by load_config
        topics.extend(t for t in (settings.success_topic, settings.error_topic) if t)
    return buckets, topics


def emulator_topics(config_path: Path) -> set[tuple[str, str]]:
    """The (success, error) topic ARNs each asynchronous endpoint notifies ("" for none), once
    each.

    Raises:
        MotoStartError: the configuration cannot be read.
    """
    from emulator.config import ConfigError, load_config

    try:
        config = load_config(config_path)
    except ConfigError as error:
        raise MotoStartError(str(error)) from None
    return {(endpoint.asynchronous.success_topic or "", endpoint.asynchronous.error_topic or "")
            for endpoint in config.endpoints.values() if endpoint.asynchronous is not None}


@contextlib.contextmanager
def jobs_stack(emulator_config: Path = DEFAULT_EMULATOR_CONFIG, *, stage: str = "local",
               logs: Path | None = None, env: Mapping[str, str] | None = None,
               project_dir: Path = ROOT, local: LocalJobs | None = None,
               overrides: Mapping[str, str] | None = None,
               ) -> Iterator[tuple[ApiProcess, LocalJobs]]:
    """``make run``'s stack with jobs on, on free ports: moto's server (provisioned as ``sagegate
    run`` does), the emulator writing to it, ``chalice local`` for ``stage`` with its event pump;
    each stopped by its PID on the way out.

    Args:
        logs: a directory for ``moto.log``, ``emulator.log`` and ``api.log`` (None: discarded).
        env: more variables for ``chalice local`` (the stage's own win).
        overrides: variables that win over the stage's own (small token budgets).
        local: what to provision (its URL replaced by moto's; default: the local stage's bucket
            and topics, records in memory).
    """
    buckets, topics = emulator_resources(emulator_config)
    with contextlib.ExitStack() as stack:
        def log(name: str, mode: str) -> Any:
            return stack.enter_context(open(logs / name if logs else os.devnull, mode))

        moto = stack.enter_context(start_moto(free_port(HOST), log=log("moto.log", "wb")))
        jobs = provision(dataclasses.replace(local, endpoint_url=moto.url) if local
                         else LocalJobs(moto.url), buckets, topics, key=moto.provision_key)
        emulator = stack.enter_context(start_emulator(
            emulator_config, echo_stderr=log("emulator.log", "w") if logs else None,
            extra_args=jobs.emulator_args(), env=emulator_env(moto.url)))
        api = stack.enter_context(start_chalice_local(
            free_port(HOST), emulator.url, project_dir=project_dir, stage=stage,
            log=log("api.log", "wb"), env={**jobs.api_env(), **(env or {})},
            overrides=overrides))
        yield api, jobs


def arn_of(topic: str) -> str:
    """A topic setting (an ARN or a bare name) as an ARN; empty stays empty."""
    return topic if not topic or topic.startswith("arn:") else topic_arn(topic)


MOTO_MEANWHILE = ("uploads and jobs fail meanwhile, and what it held (uploads, results, "
                  "queued events) is lost")


class MotoStack:
    """moto's server for ``sagegate run``: started, provisioned, and provisioned again by its
    supervisor after a restart (same port, same names: the queue URLs stay)."""

    def __init__(self, port: int, jobs: LocalJobs, emulator_config: Path,
                 say: Callable[[str], None]) -> None:
        self.port = port
        self.jobs = jobs
        self.emulator_config = emulator_config
        self.supervisor: Supervisor[MotoProcess] = Supervisor(
            self.start, say, name="moto's server", meanwhile=MOTO_MEANWHILE,
            start_errors=(MotoStartError,))

    @classmethod
    def for_plan(cls, port: int, settings: Settings, emulator_config: Path,
                 say: Callable[[str], None]) -> MotoStack | None:
        """The stack for a stage's settings; None when the run uses no AWS service or has no moto
        port."""
        if not port or not moto_needed(settings):
            return None
        on = settings.jobs_enabled
        jobs = LocalJobs(f"http://{HOST}:{port}", settings.jobs_bucket, settings.jobs_prefix,
                         arn_of(settings.jobs_success_topic) if on else "",
                         arn_of(settings.jobs_error_topic) if on else "",
                         table=settings.jobs_table if on else "",
                         cache_table=settings.cache_table,
                         capture_bucket=capture_bucket(settings.capture_destination),
                         budget_table=settings.token_budget_table)
        return cls(port, jobs, emulator_config, say)

    def start(self) -> MotoProcess:
        """Start moto's server and provision it.

        Raises:
            MotoStartError: it did not start, or refused a resource (it is then stopped).
        """
        buckets, topics = emulator_resources(self.emulator_config)
        moto = start_moto(self.port)
        try:
            self.jobs = provision(self.jobs, buckets, topics, key=moto.provision_key)
        except BaseException:
            moto.stop(timeout=2.0)
            raise
        return moto

    def describe(self, redrive_period: int) -> str:
        """The banner's line on the jobs flow."""
        moto = self.supervisor.current
        where = f" (pid {moto.pid})" if moto is not None else ""
        jobs = self.jobs
        records = (f"records in DynamoDB table {jobs.table} there" if jobs.table
                   else "records in chalice local's memory")
        also = [f"prediction cache table {jobs.cache_table}"] if jobs.cache_table else []
        also += [f"token budgets table {jobs.budget_table}"] if jobs.budget_table else []
        also += [f"capture bucket {jobs.capture_bucket}"] if jobs.capture_bucket else []
        if not jobs.bucket:  # jobs off: moto's server holds the rest
            return (f"moto's server {jobs.endpoint_url}{where}, in memory: "
                    + ", ".join(also) + " (jobs are off)")
        return (f"jobs: uploads and results go to s3://{jobs.bucket}/{jobs.prefix} on moto's "
                f"server {jobs.endpoint_url}{where}, in memory ({records}"
                + "".join(f", {item}" for item in also) + "); its S3 and SNS events reach the "
                "job functions through a pump in chalice local, which re-drives jobs still "
                f"queued (lost events) every {redrive_period} s")


def moto_needed(settings: Settings) -> bool:
    """Whether a local run uses an AWS service, all on moto: jobs, the cache's table, or captures
    to S3 (a ``firehose://`` destination included: a local run captures to S3)."""
    return settings.jobs_enabled or bool(settings.cache_table) \
        or bool(settings.token_budget_table) or bool(capture_bucket(settings.capture_destination))


def capture_bucket(destination: str) -> str:
    try:
        return aws.S3Uri.parse(destination).bucket
    except ValueError:
        return ""
