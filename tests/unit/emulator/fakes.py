"""In-memory stand-ins for the emulator's model and container (no ONNX, no I/O)."""

from __future__ import annotations

import numpy as np

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
