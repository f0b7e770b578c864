"""Jobs part: what the job path adds over the synchronous path, for an input that fits both.

``make run``'s stack with jobs on (:func:`sagegate.local.aws.jobs_stack`: moto's server as S3,
SNS and SQS, the emulator's real EfficientNet-Lite0, ``chalice local --stage local`` with its
event pump) on free ports. One photo (``bench/images.py``'s 640x480 JPEG), one model, three
ways, side by side in one run (the order rotates every round, so drift hits all three):

* **sync**: ``POST /models/efficientnet-lite0/predict`` (``Cache-Control: no-cache``: the
  endpoint is called every time);
* **job, inline**: ``POST /models/efficientnet-lite0/jobs`` with the photo as the body (the
  server keeps it as an upload), then ``GET /jobs/{id}`` every :data:`POLL_MS` ms until it has
  succeeded;
* **job, upload**: ``POST /uploads``, the form to the presigned URL (moto's S3), the job with
  its ``upload_id``, then the same polling: what a client of a file too big for the
  synchronous route does.

Each figure is the wall time to the answer (the last ``GET``'s last byte), median and p90; the
added latency is a job's median less the synchronous one, and the ratio the job's median over
it. Polling adds up to :data:`POLL_MS` ms. A job whose answer differs from the synchronous
one fails the run. Locally the events cross moto and the pump; on AWS, S3 and SNS invoke the
functions directly (and a cold start may add to a job's first run).
"""
from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import urllib3

from bench import images, table
from bench.report import Report
from bench.timing import Budget, Samples
from sagegate.local.aws import jobs_stack

STAGE = "local"
MODEL = "efficientnet-lite0"
POLL_MS = 10
JOB_LIMIT_S = 60.0
INPUT = images.E2E_INPUTS[:1]
"""The 640x480 JPEG: it fits the synchronous route with room to spare."""


class JobError(RuntimeError):
    """A call answered what it should not have (the message says which)."""


class Caller:
    """The three ways to an answer, over keep-alive connections to one stack."""

    def __init__(self, url: str, photo: bytes) -> None:
        self.url = url
        self.photo = photo
        self.http = urllib3.PoolManager(maxsize=4, retries=False, timeout=60)

    def _json(self, method: str, url: str, expected: int, **kwargs: Any) -> Any:
        response = self.http.request(method, url, **kwargs)
        if response.status != expected:
            raise JobError(f"{method} {url}: {response.status} {response.data[:300]!r}")
        return json.loads(response.data)

    def sync(self) -> Any:
        """The synchronous route's predictions."""
        answer = self._json("POST", f"{self.url}/models/{MODEL}/predict", 200, body=self.photo,
                            headers={"Content-Type": "image/jpeg", "Cache-Control": "no-cache"})
        return answer["predictions"]

    def inline_job(self) -> Any:
        """A job of the photo sent as the job's body; its predictions."""
        job = self._json("POST", f"{self.url}/models/{MODEL}/jobs", 202, body=self.photo,
                         headers={"Content-Type": "image/jpeg"})
        return self._wait(job["job_id"])

    def upload_job(self) -> Any:
        """An upload, then a job of it; its predictions."""
        upload = self._json("POST", f"{self.url}/uploads", 200,
                            json={"model": MODEL, "content_type": "image/jpeg"})
        sent = self.http.request("POST", upload["url"], fields={
            **upload["fields"], "file": ("photo.jpg", self.photo, "image/jpeg")})
        if sent.status != 204:
            raise JobError(f"the upload was refused: {sent.status} {sent.data[:300]!r}")
        job = self._json("POST", f"{self.url}/models/{MODEL}/jobs", 202,
                         json={"upload_id": upload["upload_id"]})
        return self._wait(job["job_id"])

    def _wait(self, job_id: str) -> Any:
        deadline = time.monotonic() + JOB_LIMIT_S
        while time.monotonic() < deadline:
            view = self._json("GET", f"{self.url}/jobs/{job_id}", 200)
            if view["state"] == "succeeded":
                return view["result"]["predictions"]
            if view["state"] == "failed":
                raise JobError(f"job {job_id} failed: {view.get('error')}")
            time.sleep(POLL_MS / 1000)
        raise JobError(f"job {job_id} did not finish within {JOB_LIMIT_S:g} s")


def rounds(ways: dict[str, Callable[[], Any]], budget: Budget) -> tuple[dict[str, Samples], int]:
    """Every way once a round (the first way rotating), ``budget.min_reps`` rounds after
    ``budget.warmup`` untimed ones.

    Returns:
        Each way's samples, and how many answers differed from the first way's.
    """
    names = list(ways)
    samples = {name: Samples() for name in names}
    different = 0
    for number in range(-budget.warmup, budget.min_reps):
        shift = number % len(names)
        answers: dict[str, Any] = {}
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            answers[name] = ways[name]()
            if number >= 0:
                samples[name].wall_ms.append((time.perf_counter() - start) * 1000.0)
        different += sum(answers[name] != answers[names[0]] for name in names[1:])
    return samples, different


def p90(values: list[float]) -> float:
    """The 90th percentile (inclusive method)."""
    return statistics.quantiles(values, n=10, method="inclusive")[-1] if len(values) > 1 \
        else values[0]


HEADERS = ["path", "runs", "median ms", "p90 ms", "added ms", "x sync"]


def report(budget: Budget) -> Report:
    """Run the part and print its table."""
    out = Report()
    photo = images.build(INPUT)[0]
    out.say(table.section("Jobs - the job path's added latency over the synchronous path"),
            f"  make run's stack with jobs on ('{STAGE}' stage, moto's server, the event pump), "
            f"real EfficientNet-Lite0; {photo.name} ({photo.size_label}),",
            "  sent synchronously, as a job's body, and uploaded then run as a job; the three "
            "side by side, the order rotating;", f"  wall ms to the answer, polling "
            f"GET /jobs/{{id}} every {POLL_MS} ms; added = job median - sync median.", "")
    with jobs_stack(stage=STAGE) as (api, _):
        caller = Caller(api.url, photo.data)
        ways = {"sync": caller.sync, "job, inline body": caller.inline_job,
                "job, upload": caller.upload_job}
        samples, different = rounds(ways, budget)
    sync = samples["sync"].wall
    rows = [[name, str(len(found.wall_ms)), table.ms(found.wall), table.ms(p90(found.wall_ms)),
             "" if name == "sync" else table.ms(found.wall - sync),
             "" if name == "sync" else table.times(found.wall / sync)]
            for name, found in samples.items()]
    out.say(table.render(HEADERS, rows, left=1))
    if different:
        out.failures.append(f"jobs: {different} job answer(s) differed from the synchronous one")
    return out
