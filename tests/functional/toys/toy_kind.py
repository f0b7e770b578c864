"""A pipeline kind sagegate does not ship: ``csv-sum``. A request is one CSV row of numbers;
the endpoint is sent the row as ``text/csv`` and answers one number; the client gets
``{"sum": ..., "count": ...}``. Everything it needs is here: its rules, its reading, its
pipeline and its catalog entry."""
from __future__ import annotations

from typing import Any

from chalicelib.calls import Answer, Call, CallOptions, Invoke
from chalicelib.core.errors import InvalidInputError, UnsupportedMediaTypeError
from chalicelib.inference.serving import HandledModel
from chalicelib.kinds.base import BodyKind, Parts
from chalicelib.registry.kinds import KindRules
from chalicelib.registry.specs import ModelSpec

RULES = KindRules("csv-sum", implementation=__name__, content_type="text/csv")


def _row(call: Call) -> list[float]:
    if call.content_type != "text/csv":  # the route leaves the body's type to the kind
        raise UnsupportedMediaTypeError("This model reads text/csv.")
    try:
        return [float(cell) for cell in call.body.decode("ascii").strip().split(",")]
    except (UnicodeDecodeError, ValueError):
        raise InvalidInputError("Send one CSV row of numbers.") from None


def run(model: ModelSpec, call: Call, options: CallOptions, invoke: Invoke,
        request_id: str) -> Answer:
    row = _row(call)
    result = invoke(",".join(repr(value) for value in row).encode(), "text/csv",
                    "application/json")
    return Answer.json({"sum": float(result.body), "count": len(row), "model": model.name})


class CsvSumKind(BodyKind):
    def accepts(self, model: ModelSpec) -> tuple[str, ...]:
        return ("text/csv",)

    def pipeline(self, model: ModelSpec, parts: Parts) -> HandledModel:
        return HandledModel(parts.server, model, run)

    def example(self, model: ModelSpec) -> Any:
        return "1,2,3"

    def describe(self, model: ModelSpec) -> dict[str, Any]:
        return {"csv": {"row": "numbers"}}


KIND = CsvSumKind()
