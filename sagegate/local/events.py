"""The local event pump: S3 and SNS events to the job functions, inside ``chalice local``.

On AWS, S3 invokes the job runner for each new ticket, and SNS the results and failures functions
for each SageMaker notification. ``chalice local`` serves routes only, so ``sagegate run`` has
moto deliver those events to two SQS queues, and this pump, a few threads inside the ``chalice
local`` process (so the in-memory job store is the API's), long-polls them and calls the same
functions Lambda would, each with a Lambda-shaped event and context.

As Lambda's asynchronous invocation does, a message is deleted once its function returned and
left for redelivery when it raised, at most :data:`MAX_ATTEMPTS` times (the first try and
Lambda's 2 retries); then one log line says it was dropped. S3's ``s3:TestEvent`` never reaches a
function, as on AWS.

The scheduled re-drive (EventBridge's on AWS) runs here every ``JOB_REDRIVE_PERIOD_SECONDS``,
each ticket event it hands out a message on the tickets queue, so a re-driven job reaches
``job_runner`` as its S3 event would have. Only the standard library is imported at module level;
boto3 and chalice come with :func:`start_pump`.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

from chalicelib import awsclients
from chalicelib.core.aws import EVENTS_SQS

TICKETS_QUEUE_ENV = "SAGEGATE_LOCAL_TICKETS_QUEUE"
NOTIFICATIONS_QUEUE_ENV = "SAGEGATE_LOCAL_NOTIFICATIONS_QUEUE"
JOB_RUNNER = "job_runner"
JOB_RESULTS = "job_results"
JOB_FAILURES = "job_failures"
JOB_REDRIVE = "job_redrive"
MAX_ATTEMPTS = 3
"""Calls per event at most: Lambda's asynchronous invocation tries twice more after a failure."""
RETRY_DELAY_S = 1
WAIT_SECONDS = 2
"""The long poll: also the longest a stop waits for an idle receiver."""
WORKERS = 4
LAMBDA_TIMEOUT_MS = 900_000
LOG = logging.getLogger("sagegate.local_events")
_REQUEST_IDS = uuid.UUID("6f1d3c52-5a8e-4f0b-9d7e-2b7a1c0e4a11")

Handler = Callable[[dict[str, Any], Any], Any]
Event = tuple[str, dict[str, Any]]
"""A function's name and the Lambda event to call it with."""


def s3_events(body: str) -> list[Event]:
    """The job runner's event for an S3 notification delivered to SQS: the notification as is
    (Lambda gets the same document); none for ``s3:TestEvent``.

    Raises:
        ValueError: the body is not an S3 notification.
    """
    document = json.loads(body)
    if not isinstance(document, dict):
        raise ValueError("an S3 notification is a JSON object")
    if document.get("Event") == "s3:TestEvent":
        return []
    if not isinstance(document.get("Records"), list):
        raise ValueError("an S3 notification has Records")
    return [(JOB_RUNNER, document)]


def sns_record(envelope: Mapping[str, Any]) -> dict[str, Any]:
    """A Lambda SNS record from the envelope SNS delivers to SQS (raw delivery off)."""
    sns = {key: value for key, value in envelope.items()
           if key not in ("SigningCertURL", "UnsubscribeURL")}
    sns.setdefault("Subject", None)
    sns.setdefault("MessageAttributes", {})
    # Lambda spells these two "Url"; the SQS envelope "URL"
    sns["SigningCertUrl"] = envelope.get("SigningCertURL")
    sns["UnsubscribeUrl"] = envelope.get("UnsubscribeURL")
    topic = str(envelope.get("TopicArn", ""))
    return {"EventSource": "aws:sns", "EventVersion": "1.0",
            "EventSubscriptionArn": f"{topic}:local", "Sns": sns}


def topic_name(topic: str) -> str:
    return topic.rsplit(":", 1)[-1]


def sns_router(success_topic: str, error_topic: str) -> Callable[[str], list[Event]]:
    """The success topic's notifications go to ``job_results``, the error topic's to
    ``job_failures`` (both to ``job_results`` when one topic); another topic's to none."""
    names = {topic_name(t): JOB_FAILURES for t in (error_topic,) if t}
    names.update({topic_name(t): JOB_RESULTS for t in (success_topic,) if t})

    def route(body: str) -> list[Event]:
        envelope = json.loads(body)
        if not isinstance(envelope, dict) or envelope.get("Type") != "Notification":
            raise ValueError("not an SNS notification envelope")
        function = names.get(topic_name(str(envelope.get("TopicArn", ""))))
        if function is None:
            return []
        return [(function, {"Records": [sns_record(envelope)]})]

    return route


@dataclasses.dataclass(frozen=True)
class Route:

    queue_url: str
    events: Callable[[str], list[Event]]


@dataclasses.dataclass(frozen=True)
class Scheduled:
    """A scheduled function, run every ``period`` seconds (the first one period after the start,
    as EventBridge's rate starts)."""

    name: str
    run: Callable[[], Any]
    period: float


class EventPump:
    """Receives each route's messages and calls the functions, Lambda's way (see module)."""

    def __init__(self, sqs: Any, routes: Sequence[Route], handlers: Mapping[str, Handler],
                 context: Callable[[str, str], Any], *, max_attempts: int = MAX_ATTEMPTS,
                 retry_delay: int = RETRY_DELAY_S, wait_seconds: int = WAIT_SECONDS,
                 workers: int = WORKERS, scheduled: Sequence[Scheduled] = ()) -> None:
        """Prepares the pump; :meth:`start` runs it.

        Args:
            handlers: the functions by name; an event for a missing one is dropped with a log
                line.
            context: makes the Lambda context for a function name and request id (the same for
                every attempt at one event, as Lambda's retries keep theirs).
            retry_delay: seconds a failed event stays hidden.
            workers: receiver threads per queue.
            scheduled: each run on its own thread.
        """
        self.sqs = sqs
        self.routes = tuple(routes)
        self.handlers = dict(handlers)
        self.context = context
        self.max_attempts = max_attempts
        self.retry_delay = retry_delay
        self.wait_seconds = wait_seconds
        self.workers = workers
        self.scheduled = tuple(scheduled)
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def threads(self) -> tuple[threading.Thread, ...]:
        return tuple(self._threads)

    def start(self) -> None:
        """Starts the receivers and scheduled functions (daemon threads: they never hold the
        process up)."""
        for route in self.routes:
            for index in range(self.workers):
                self._spawn(self._receive, route, name=f"event-pump-{index}")
        for job in self.scheduled:
            self._spawn(self._repeat, job, name=f"event-pump-{job.name}")

    def _spawn(self, target: Callable[[Any], None], argument: Any, name: str) -> None:
        thread = threading.Thread(target=target, args=(argument,), daemon=True, name=name)
        thread.start()
        self._threads.append(thread)

    def stop(self, timeout: float = WAIT_SECONDS + 1.0) -> None:
        """Asks the receivers to stop and waits ``timeout`` seconds at most (a function still
        running is left to finish or die with the process)."""
        self._stopping.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _repeat(self, job: Scheduled) -> None:
        while not self._stopping.wait(job.period):
            try:
                job.run()
            except Exception as error:  # as a failed scheduled run: logged, the next one is due
                LOG.error("event pump: %s failed (%s: %s)", job.name, type(error).__name__,
                          error, exc_info=error)

    def _receive(self, route: Route) -> None:
        while not self._stopping.is_set():
            try:
                self.poll(route, max_messages=1)
            except Exception as error:  # moto unreachable (restarting): wait, try again
                LOG.warning("event pump: cannot receive from %s: %s", route.queue_url, error)
                self._stopping.wait(self.wait_seconds)

    def poll(self, route: Route, max_messages: int = 10) -> int:
        """Receives once (a long poll) and handles what came; returns the count received."""
        answer = self.sqs.receive_message(
            QueueUrl=route.queue_url, MaxNumberOfMessages=max_messages,
            WaitTimeSeconds=self.wait_seconds, AttributeNames=["ApproximateReceiveCount"])
        messages = answer.get("Messages", [])
        for message in messages:
            self.handle(route, message)
        return len(messages)

    def handle(self, route: Route, message: Mapping[str, Any]) -> bool:
        """Calls the functions of one message; deletes it when they returned, else leaves it for
        a later attempt (or drops it, with a log line, after the last). True when every call
        returned."""
        try:
            events = route.events(str(message.get("Body", "")))
        except (ValueError, TypeError) as error:  # JSONDecodeError is a ValueError
            LOG.error("event pump: dropped a message of %s that is not an event: %s",
                      route.queue_url, error)
            self._delete(route, message)
            return False
        for index, (name, event) in enumerate(events):
            if not self._call(route, message, name, event, request_id(message, index)):
                return False
        self._delete(route, message)
        return True

    def _call(self, route: Route, message: Mapping[str, Any], name: str,
              event: dict[str, Any], invocation: str) -> bool:
        handler = self.handlers.get(name)
        if handler is None:
            LOG.error("event pump: no function %s in app.py; dropped its event", name)
            return True
        try:
            handler(event, self.context(name, invocation))
        except Exception as error:  # as Lambda: the event is retried, the pump goes on
            self._failed(route, message, name, error)
            return False
        return True

    def _failed(self, route: Route, message: Mapping[str, Any], name: str,
                error: Exception) -> None:
        attempt = int(message.get("Attributes", {}).get("ApproximateReceiveCount", 1))
        what = f"{type(error).__name__}: {error}"
        if attempt >= self.max_attempts:
            LOG.error("event pump: %s failed %d times, event dropped (%s)", name, attempt,
                      what, exc_info=error)
            self._delete(route, message)
            return
        LOG.warning("event pump: %s failed (attempt %d of %d: %s); retrying in %d s", name,
                    attempt, self.max_attempts, what, self.retry_delay)
        self.sqs.change_message_visibility(QueueUrl=route.queue_url,
                                           ReceiptHandle=message["ReceiptHandle"],
                                           VisibilityTimeout=self.retry_delay)

    def _delete(self, route: Route, message: Mapping[str, Any]) -> None:
        self.sqs.delete_message(QueueUrl=route.queue_url, ReceiptHandle=message["ReceiptHandle"])


def request_id(message: Mapping[str, Any], index: int) -> str:
    """The ``aws_request_id`` of one event of a message: the same on every attempt (Lambda's
    retries keep it, and the job runner tells a retry from a duplicate delivery by it), another
    for every other event."""
    return str(uuid.uuid5(_REQUEST_IDS, f"{message.get('MessageId', '')}/{index}"))


def handlers_of(app_module: Any) -> dict[str, Handler]:
    names = (JOB_RUNNER, JOB_RESULTS, JOB_FAILURES)
    return {name: getattr(app_module, name) for name in names
            if callable(getattr(app_module, name, None))}


def routes_from(environ: Mapping[str, str]) -> list[Route]:
    routes = []
    if environ.get(TICKETS_QUEUE_ENV):
        routes.append(Route(environ[TICKETS_QUEUE_ENV], s3_events))
    if environ.get(NOTIFICATIONS_QUEUE_ENV):
        router = sns_router(environ.get("JOBS_SUCCESS_TOPIC", ""),
                            environ.get("JOBS_ERROR_TOPIC", ""))
        routes.append(Route(environ[NOTIFICATIONS_QUEUE_ENV], router))
    return routes


def redrive_schedule(app_module: Any, environ: Mapping[str, str],
                     send: Callable[[str, str], Any]) -> list[Scheduled]:
    """The jobs' re-drive on its period, when the app declares it and ``sagegate run`` named the
    tickets queue; each ticket event it hands the runner is sent there, as S3 would have.

    Raises:
        ConfigurationError: a re-drive setting is wrong (``sagegate run`` checks them first).
    """
    queue = environ.get(TICKETS_QUEUE_ENV, "")
    if not callable(getattr(app_module, JOB_REDRIVE, None)) or not queue:
        return []
    from chalicelib.jobs import functions
    from chalicelib.jobs.redrive import RedriveSettings

    period = RedriveSettings.from_env(environ).period_seconds

    def deliver(event: dict[str, Any]) -> None:
        send(queue, json.dumps(event))

    def work() -> Any:  # the app's jobs, as its scheduled function runs them, delivered here
        return functions.redrive_jobs(app_module.services.jobs_context, "", JOB_REDRIVE,
                                      deliver)

    return [Scheduled(JOB_REDRIVE, work, period)]


def start_pump(app_module: Any, environ: MutableMapping[str, str]) -> EventPump | None:
    """The pump for the app's job functions and re-drive, when ``sagegate run`` named its queues
    and the app declares functions; None otherwise (plain ``chalice local``, jobs off)."""
    routes = routes_from(environ)
    handlers = handlers_of(app_module)
    if not routes or not handlers:
        return None
    from chalice.local import LambdaContext

    # the read timeout outlasts the long poll's wait
    policy = EVENTS_SQS.with_timeouts(EVENTS_SQS.connect_timeout, WAIT_SECONDS + 10)
    sqs = awsclients.build("sqs", policy, endpoint_url=environ.get("AWS_ENDPOINT_URL_SQS"))

    def context(name: str, invocation: str) -> Any:
        made = LambdaContext(name, 1769, LAMBDA_TIMEOUT_MS)
        made.aws_request_id = invocation
        return made

    scheduled = redrive_schedule(app_module, environ, lambda queue, body: sqs.send_message(
        QueueUrl=queue, MessageBody=body))
    pump = EventPump(sqs, routes, handlers, context, scheduled=scheduled)
    pump.start()
    LOG.info("event pump: delivering %s to %s%s", ", ".join(r.queue_url for r in routes),
             ", ".join(sorted(handlers)),
             "".join(f"; {job.name} every {job.period:g} s" for job in scheduled))
    return pump
