"""Capture folders of a traffic experiment, as the front end's experiment contract writes them.

Each arm (or shadow) is its own endpoint: its records are under
``<root>/<endpoint>/<variant>/yyyy/mm/dd/hh/*.jsonl`` in Model Monitor's record format
(``{"instances": [[4 features]]}`` in, ``{"predictions": [[3 class probabilities]]}`` out),
with ``eventMetadata.sagegateArm`` (the arm's or shadow's name) and
``sagegateLatencyMs``. A shadow's record has ``invocationSource: ShadowExperiment`` and its
primary's ``inferenceId``; a failed shadow call has no ``endpointOutput`` and
``sagegateError: {"Code", "Message"}``.

The expected figures are computed here from the values written (the argmax of each
probability vector as written, numpy's percentiles of the latencies), for the tests to hold
the command's figures to.
"""
from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import math
import random
import uuid
from pathlib import Path
from typing import Any

import numpy as np

HOUR = datetime.datetime(2026, 11, 25, 9, tzinfo=datetime.UTC)
WINDOW = ["--start", "2026-11-25T09:00Z", "--end", "2026-11-25T10:00Z"]
WEIGHTS = ((1.2, -0.5, 0.9, -1.4), (-0.3, 0.8, -0.2, 0.6), (-0.9, -0.3, -0.7, 1.8))


@dataclasses.dataclass
class Arm:
    """What was written for one endpoint, and the figures a comparison should find."""

    folder: Path
    records: list[dict[str, Any]]
    latencies: list[float] = dataclasses.field(default_factory=list)
    errors: int = 0


@dataclasses.dataclass
class Experiment:
    """A primary and its shadow, with the pairs' expected agreement."""

    primary: Arm
    shadow: Arm
    compared: int
    agreed: int


def probabilities(features: list[float]) -> list[float]:
    """A three-class model's softmax over a linear score of the features."""
    scores = [sum(w * (x - m) for w, x, m in zip(row, features, (5.8, 3.0, 3.8, 1.2),
                                                  strict=True)) for row in WEIGHTS]
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [round(e / total, 6) for e in exps]


def _features(rng: random.Random) -> list[float]:
    return [round(rng.gauss(m, s), 3) for m, s in zip((5.8, 3.0, 3.8, 1.2),
                                                       (0.8, 0.4, 1.7, 0.7), strict=True)]


def record(features: list[float], answer: list[float] | None, when: datetime.datetime,
           metadata: dict[str, Any]) -> dict[str, Any]:
    """One capture record of the contract (no output when ``answer`` is None)."""
    capture: dict[str, Any] = {"endpointInput": {
        "observedContentType": "application/json", "mode": "INPUT",
        "data": json.dumps({"instances": [features]}), "encoding": "JSON"}}
    if answer is not None:
        capture["endpointOutput"] = {"observedContentType": "application/json",
                                     "mode": "OUTPUT",
                                     "data": json.dumps({"predictions": [answer]}),
                                     "encoding": "JSON"}
    meta = {"eventId": str(uuid.uuid4()), "inferenceTime": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
            **metadata}
    return {"captureData": capture, "eventMetadata": meta, "eventVersion": "0"}


def write(folder: Path, records: list[dict[str, Any]], variant: str = "AllTraffic",
          hour: datetime.datetime = HOUR, per_file: int = 400) -> Path:
    """The records in ``folder/<variant>/yyyy/mm/dd/hh/`` files of ``per_file`` lines."""
    target = folder / variant / f"{hour:%Y/%m/%d/%H}"
    target.mkdir(parents=True, exist_ok=True)
    for start in range(0, len(records), per_file):
        lines = [json.dumps(r, separators=(",", ":")) for r in records[start:start + per_file]]
        (target / f"{start:06d}-{uuid.uuid4()}.jsonl").write_text("\n".join(lines) + "\n",
                                                                  encoding="utf-8")
    return folder


def _latency(rng: random.Random, median: float) -> float:
    return round(median * math.exp(rng.gauss(0.0, 0.25)), 3)


def experiment(root: Path, records: int, shadow: str = "int8",
               disagree_every: int | None = None, error_every: int | None = None,
               latency_factor: float = 0.7, seed: int = 5,
               hour: datetime.datetime = HOUR) -> Experiment:
    """A primary (``<root>/iris``) and its shadow (``<root>/iris-<shadow>``).

    The shadow's answer is the primary's probabilities rounded to 1/255 (an int8 model's
    error); every ``disagree_every``-th one is rotated by one class instead (a different
    top-1); every ``error_every``-th call fails. Latencies: about 20 ms for the primary, that
    times ``latency_factor`` for the shadow.
    """
    rng = random.Random(seed)
    primary = Arm(root / "iris", [])
    twin = Arm(root / f"iris-{shadow}", [])
    compared = agreed = 0
    for index in range(records):
        features = _features(rng)
        answer = probabilities(features)
        when = hour + datetime.timedelta(seconds=index * 3600 / records)
        request = f"req-{seed}-{index:06d}"
        latency = _latency(rng, 20.0)
        primary.latencies.append(latency)
        primary.records.append(record(features, answer, when, {
            "inferenceId": request, "sagegateArm": "primary", "sagegateLatencyMs": latency}))
        meta: dict[str, Any] = {"inferenceId": request, "invocationSource": "ShadowExperiment",
                                "sagegateArm": shadow}
        if error_every and index % error_every == error_every - 1:
            twin.errors += 1
            meta["sagegateError"] = {"Code": "ModelError",
                                     "Message": "Received server error (500) from model"}
            twin.records.append(record(features, None, when, meta))
            continue
        if disagree_every and index % disagree_every == 0:
            theirs = answer[1:] + answer[:1]
        else:
            theirs = [round(round(p * 255) / 255, 6) for p in answer]
        meta["sagegateLatencyMs"] = _latency(rng, 20.0 * latency_factor)
        twin.latencies.append(meta["sagegateLatencyMs"])
        twin.records.append(record(features, theirs, when, meta))
        compared += 1
        agreed += int(np.argmax(answer)) == int(np.argmax(theirs))
    write(primary.folder, primary.records, hour=hour)
    write(twin.folder, twin.records, hour=hour)
    return Experiment(primary, twin, compared, agreed)


def independent_arm(root: Path, name: str, records: int, seed: int, shift: float = 0.0,
                    latency: float = 20.0, hour: datetime.datetime = HOUR) -> Arm:
    """An arm of a split experiment: its own requests (its own ids), no shadow marker;
    ``shift`` moves the first feature's mean (so the answers' distribution moves)."""
    rng = random.Random(seed)
    arm = Arm(root / f"iris-{name}", [])
    for index in range(records):
        features = _features(rng)
        features[0] = round(features[0] + shift, 3)
        when = hour + datetime.timedelta(seconds=index * 3600 / records)
        value = _latency(rng, latency)
        arm.latencies.append(value)
        arm.records.append(record(features, probabilities(features), when, {
            "inferenceId": f"{name}-{index:06d}", "sagegateArm": name,
            "sagegateLatencyMs": value}))
    write(arm.folder, arm.records, hour=hour)
    return arm


def image_experiment(root: Path, records: int, classes: int = 1000, seed: int = 7,
                     hour: datetime.datetime = HOUR) -> Experiment:
    """An image classifier and its int8 shadow, as the front end captures them: the input
    an image (BASE64), the answer a JSON list of ``classes`` softmax probabilities
    (``efficientnet-lite0`` and ``efficientnet-lite0-int8``'s shape). The shadow's
    probabilities are the primary's logits with a small noise (a quantized model's error),
    so its top-1 answer differs where the two best classes were close."""
    rng = np.random.default_rng(seed)
    primary = Arm(root / "efficientnet-lite0", [])
    twin = Arm(root / "efficientnet-lite0-int8", [])
    compared = agreed = 0
    for index in range(records):
        logits = rng.normal(0.0, 1.0, classes)
        logits[rng.integers(classes)] += rng.uniform(2.0, 8.0)  # a confident class, mostly
        noisy = logits + rng.normal(0.0, 0.15, classes)
        ours, theirs = (np.round(np.exp(x - x.max()) / np.exp(x - x.max()).sum(), 7).tolist()
                        for x in (logits, noisy))
        when = hour + datetime.timedelta(seconds=index * 3600 / records)
        image = base64.b64encode(rng.bytes(64)).decode("ascii")
        request = f"img-{seed}-{index:06d}"
        for arm, answer, meta in (
                (primary, ours, {"sagegateArm": "float"}),
                (twin, theirs, {"sagegateArm": "int8",
                                "invocationSource": "ShadowExperiment"})):
            latency = round(float(rng.lognormal(math.log(40.0 if arm is primary else 25.0),
                                                0.2)), 3)
            arm.latencies.append(latency)
            arm.records.append({
                "captureData": {
                    "endpointInput": {"observedContentType": "image/jpeg", "mode": "INPUT",
                                      "data": image, "encoding": "BASE64"},
                    "endpointOutput": {"observedContentType": "application/json",
                                       "mode": "OUTPUT", "data": json.dumps(answer),
                                       "encoding": "JSON"}},
                "eventMetadata": {"eventId": str(uuid.uuid4()),
                                  "inferenceTime": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                  "inferenceId": request, "sagegateLatencyMs": latency, **meta},
                "eventVersion": "0"})
        compared += 1
        agreed += int(np.argmax(ours)) == int(np.argmax(theirs))
    write(primary.folder, primary.records, hour=hour)
    write(twin.folder, twin.records, hour=hour)
    return Experiment(primary, twin, compared, agreed)
