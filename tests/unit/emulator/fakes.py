"""In-memory stand-ins for the emulator's model, container, S3, SNS and clock (no ONNX, no
I/O)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from emulator.asyncinvoke import InputError
from emulator.container import ContainerReply


class FakeModel:
    """A model whose probabilities peak at ``top`` and that records what it was given."""

    def __init__(self, classes: int = 10, top: int = 3, rows: int | None = None) -> None:
        self.classes = classes
        self.top = top
        self.rows = rows
        self.batches: list[np.ndarray] = []

    def predict(self, batch: np.ndarray) -> np.ndarray:
        self.batches.append(batch)
        logits = np.zeros((self.rows or batch.shape[0], self.classes), dtype=np.float32)
        logits[:, self.top] = 4.0
        exp = np.exp(logits)
        return (exp / exp.sum(axis=1, keepdims=True)).astype(np.float32)


class FakeContainer:
    """A container answering a fixed reply and recording its calls."""

    def __init__(self, reply: ContainerReply | None = None) -> None:
        self.reply = reply or ContainerReply(200, b"[0.25, 0.75]", "application/json")
        self.calls: list[tuple[bytes, str | None, str | None]] = []

    def invoke(self, body: bytes, content_type: str | None, accept: str | None) -> ContainerReply:
        self.calls.append((body, content_type, accept))
        return self.reply


class MemoryStore:
    """S3 as a dict of ``(bucket, key) -> (body, content type)``."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], tuple[bytes, str | None]] = {}

    def read(self, bucket: str, key: str, limit: int) -> tuple[bytes, str | None]:
        if (bucket, key) not in self.objects:
            raise InputError(f"the input s3://{bucket}/{key} does not exist (NoSuchKey)")
        body, content_type = self.objects[(bucket, key)]
        if len(body) > limit:
            raise InputError(f"the input has {len(body)} bytes, over the limit of {limit}")
        return body, content_type

    def write(self, bucket: str, key: str, body: bytes, content_type: str) -> None:
        self.objects[(bucket, key)] = (body, content_type)


class Topics:
    """SNS as a list of ``(topic ARN, message)``."""

    def __init__(self) -> None:
        self.published: list[tuple[str, dict[str, Any]]] = []

    def publish(self, topic_arn: str, message: str) -> None:
        self.published.append((topic_arn, json.loads(message)))


class Clock:
    """Wall time that moves only when a test moves it."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
