"""The local stack's AWS side: moto's server (S3, SNS, SQS) and what sagegate's jobs need in it.

:func:`start_moto` starts :mod:`sagegate.moto_server` as a child (as the emulator and
``chalice local`` are started: ready once this child itself answers, stopped by its PID);
:func:`provision` creates the jobs bucket, the asynchronous endpoints' buckets and topics, and
the event plumbing the local event pump reads (:mod:`sagegate.local_events`): the bucket's
notification of new tickets to one SQS queue, and both SNS topics subscribed to another (raw
delivery off, so the SNS envelope arrives, as Lambda's SNS records carry it). :class:`LocalJobs`
then gives ``chalice local`` and the emulator the variables and options that point them there.
:class:`MotoStack` is ``sagegate run``'s moto; :func:`jobs_stack` the whole stack with jobs on,
for the integration tests and the benchmark.

moto keeps everything in memory: when its server dies, the uploads, results and queued events
are gone; ``sagegate run`` restarts it (:class:`sagegate.supervision.Supervisor`) and
provisions it again, and says so.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from chalicelib.core.config import Settings
from sagegate.local_events import NOTIFICATIONS_QUEUE_ENV, TICKETS_QUEUE_ENV
from sagegate.localstack import (
    DEFAULT_EMULATOR_CONFIG,
    DUMMY_AWS_ENV,
    HOST,
    INSTANCE_ENV,
    ROOT,
    ApiProcess,
    ApiStartError,
    Supervisor,
    free_port,
    start_chalice_local,
    start_emulator,
    wait_until_serving,
)

JOBS_BUCKET = "sagegate-local-jobs"
"""The local jobs bucket: uploads, tickets, results, and the async endpoints' outputs."""
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
    """The ARN moto gives a topic created here."""
    return f"arn:aws:sns:{REGION}:{ACCOUNT}:{name}"


class MotoStartError(RuntimeError):
    """moto's server exited, did not answer in time, or could not be provisioned."""


class MotoProcess(ApiProcess):
    """A running :mod:`sagegate.moto_server` child; a context manager that stops it."""


def start_moto(port: int, *, host: str = HOST, log: IO[bytes] | None = None,
               timeout: float = 60.0) -> MotoProcess:
    """Start moto's server on ``host:port`` and wait until this child itself answers.

    Raises:
        MotoStartError: the child exited or never answered (it is then stopped).
    """
    instance = secrets.token_hex(8)
    env = {**os.environ, **DUMMY_AWS_ENV, INSTANCE_ENV: instance, "MOTO_PORT": str(port)}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    process = subprocess.Popen(
        [sys.executable, "-m", "sagegate.moto_server", "--host", host, "--port", str(port)],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
        stderr=subprocess.STDOUT if log else None)
    moto = MotoProcess(process, host, port, instance)
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
    """Where the local jobs flow lives in moto, and how the other processes find it."""

    endpoint_url: str
    bucket: str = JOBS_BUCKET
    prefix: str = "jobs/"
    success_topic: str = topic_arn(SUCCESS_TOPIC)
    error_topic: str = topic_arn(ERROR_TOPIC)
    tickets_queue: str = ""
    """The SQS queue URL of the bucket's ticket notifications (set by :func:`provision`)."""
    notifications_queue: str = ""
    """The SQS queue URL both topics deliver to (set by :func:`provision`)."""

    def settings_env(self) -> dict[str, str]:
        """The variables sagegate reads: the bucket, the topics, and boto3's endpoints."""
        return {"JOBS_BUCKET": self.bucket, "JOBS_SUCCESS_TOPIC": self.success_topic,
                "JOBS_ERROR_TOPIC": self.error_topic,
                "AWS_ENDPOINT_URL_S3": self.endpoint_url,
                "AWS_ENDPOINT_URL_SNS": self.endpoint_url,
                "AWS_ENDPOINT_URL_SQS": self.endpoint_url}

    def api_env(self) -> dict[str, str]:
        """Everything ``chalice local`` needs: :meth:`settings_env` and the pump's queues."""
        return {**self.settings_env(), TICKETS_QUEUE_ENV: self.tickets_queue,
                NOTIFICATIONS_QUEUE_ENV: self.notifications_queue}

    def emulator_args(self) -> list[str]:
        """The emulator's options for its asynchronous endpoints' S3 and SNS."""
        return ["--s3-endpoint-url", self.endpoint_url,
                "--sns-endpoint-url", self.endpoint_url]

    @property
    def tickets_prefix(self) -> str:
        """The keys whose creation starts a job (the job runner's S3 event)."""
        return f"{self.prefix}tickets/"


def _clients(endpoint_url: str) -> tuple[Any, Any, Any]:
    import boto3  # deferred: only provisioning needs it

    session = boto3.session.Session(
        aws_access_key_id=DUMMY_AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DUMMY_AWS_ENV["AWS_SECRET_ACCESS_KEY"], region_name=REGION)
    return tuple(session.client(name, endpoint_url=endpoint_url)
                 for name in ("s3", "sns", "sqs"))


def provision(jobs: LocalJobs, buckets: Iterable[str] = (),
              topics: Iterable[str] = ()) -> LocalJobs:
    """Create the jobs bucket, the other ``buckets`` and ``topics`` (ARNs) the emulator's
    asynchronous endpoints use, the two event queues, the bucket's ticket notification and
    the topics' subscriptions. Idempotent (moto answers the same for an existing resource).

    Returns:
        ``jobs`` with its queue URLs.

    Raises:
        MotoStartError: moto refused or could not be reached (the message says which step).
    """
    from botocore.exceptions import BotoCoreError, ClientError

    s3, sns, sqs = _clients(jobs.endpoint_url)
    try:
        for bucket in dict.fromkeys([jobs.bucket, *buckets]):
            s3.create_bucket(Bucket=bucket)
        for arn in dict.fromkeys(filter(None, [jobs.success_topic, jobs.error_topic, *topics])):
            sns.create_topic(Name=arn.rsplit(":", 1)[-1])
        tickets, tickets_arn = _queue(sqs, TICKETS_QUEUE)
        notes, notes_arn = _queue(sqs, NOTIFICATIONS_QUEUE)
        s3.put_bucket_notification_configuration(
            Bucket=jobs.bucket, NotificationConfiguration={"QueueConfigurations": [{
                "Id": "job-tickets", "QueueArn": tickets_arn,
                "Events": ["s3:ObjectCreated:*"],
                "Filter": {"Key": {"FilterRules": [
                    {"Name": "prefix", "Value": jobs.tickets_prefix}]}}}]})
        _subscribe(sns, {jobs.success_topic, jobs.error_topic} - {""}, notes_arn)
    except (BotoCoreError, ClientError) as error:
        raise MotoStartError(f"cannot provision moto's server at {jobs.endpoint_url}: "
                             f"{error}") from None
    return dataclasses.replace(jobs, tickets_queue=tickets, notifications_queue=notes)


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
                buckets.append(path.removeprefix("s3://").split("/", 1)[0])
        topics.extend(t for t in (settings.success_topic, settings.error_topic) if t)
    return buckets, topics


@contextlib.contextmanager
def jobs_stack(emulator_config: Path = DEFAULT_EMULATOR_CONFIG, *, stage: str = "local",
               logs: Path | None = None, env: Mapping[str, str] | None = None,
               project_dir: Path = ROOT) -> Iterator[tuple[ApiProcess, LocalJobs]]:
    """``make run``'s stack with jobs on, on free ports, started with its own helpers: moto's
    server (provisioned as ``sagegate run`` does), the emulator writing to it, ``chalice local``
    for ``stage`` with its event pump (and ``env``); each stopped by its PID on the way out.

    Args:
        emulator_config: the emulator's configuration.
        stage: the Chalice stage.
        logs: a directory for ``moto.log``, ``emulator.log`` and ``api.log`` (None: the
            output is discarded).
        env: more variables for ``chalice local``.
        project_dir: the Chalice project (default: sagegate's; a copy of it, say).
    """
    buckets, topics = emulator_resources(emulator_config)
    with contextlib.ExitStack() as stack:
        def log(name: str, mode: str) -> Any:
            return stack.enter_context(open(logs / name if logs else os.devnull, mode))

        moto = stack.enter_context(start_moto(free_port(HOST), log=log("moto.log", "wb")))
        jobs = provision(LocalJobs(moto.url), buckets, topics)
        emulator = stack.enter_context(start_emulator(
            emulator_config, echo_stderr=log("emulator.log", "w") if logs else None,
            extra_args=jobs.emulator_args()))
        api = stack.enter_context(start_chalice_local(
            free_port(HOST), emulator.url, project_dir=project_dir, stage=stage,
            log=log("api.log", "wb"), env={**jobs.api_env(), **(env or {})}))
        yield api, jobs


def arn_of(topic: str) -> str:
    """A topic setting (an ARN or a bare name) as an ARN; empty stays empty."""
    return topic if not topic or topic.startswith("arn:") else topic_arn(topic)


MOTO_MEANWHILE = ("uploads and jobs fail meanwhile, and what it held (uploads, results, "
                  "queued events) is lost")


class MotoStack:
    """moto's server for ``sagegate run``: started, provisioned, and provisioned again by its
    supervisor after a restart (the queue URLs stay the same: same port, same names)."""

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
        """The stack for a stage's settings; None when the stage has jobs off (port 0)."""
        if not port or not settings.jobs_enabled:
            return None
        jobs = LocalJobs(f"http://{HOST}:{port}", settings.jobs_bucket, settings.jobs_prefix,
                         arn_of(settings.jobs_success_topic), arn_of(settings.jobs_error_topic))
        return cls(port, jobs, emulator_config, say)

    def start(self) -> MotoProcess:
        """Start moto's server and provision it.

        Raises:
            MotoStartError: it did not start, or refused a resource (it is then stopped).
        """
        buckets, topics = emulator_resources(self.emulator_config)
        moto = start_moto(self.port)
        try:
            self.jobs = provision(self.jobs, buckets, topics)
        except BaseException:
            moto.stop(timeout=2.0)
            raise
        return moto

    def describe(self) -> str:
        """The banner's line on the jobs flow: where uploads go and how events arrive."""
        moto = self.supervisor.current
        where = f" (pid {moto.pid})" if moto is not None else ""
        return (f"jobs: uploads and results go to s3://{self.jobs.bucket}/{self.jobs.prefix} "
                f"on moto's server {self.jobs.endpoint_url}{where}, in memory; its S3 and SNS "
                "events reach the job functions through a pump in chalice local")
