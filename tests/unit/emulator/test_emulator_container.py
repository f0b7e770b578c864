"""The built-in image classifier contract over a fake model, and answer formatting."""

from __future__ import annotations

import json

import numpy as np
import pytest

from emulator.container import ImageClassifier, choose_accept, format_floats
from emulator.imaging import PreprocessSpec
from tests import imagefactory
from tests.unit.emulator.fakes import FakeModel

JPEG = imagefactory.jpeg(320, 240)


def classifier(model: FakeModel | None = None, classes: int | None = 10) -> ImageClassifier:
    return ImageClassifier(model or FakeModel(), PreprocessSpec(), classes)


def test_formats_float32_values_with_their_shortest_round_trip_repr() -> None:
    values = np.array([1.4e-05, 0.5, 1.7e-05, 0.25], dtype=np.float32)

    text = format_floats(values)

    assert text == "[1.4e-05, 0.5, 1.7e-05, 0.25]"
    assert np.array_equal(np.array(json.loads(text), dtype=np.float32), values)


def test_formatting_round_trips_every_value_of_a_softmax_row() -> None:
    logits = np.random.default_rng(3).normal(size=1000).astype(np.float32)
    row = (np.exp(logits) / np.exp(logits).sum()).astype(np.float32)

    parsed = np.array(json.loads(format_floats(row)), dtype=np.float32)

    assert np.array_equal(parsed, row)


def test_non_finite_values_still_produce_parsable_text() -> None:
    text = format_floats(np.array([np.nan, 1.0], dtype=np.float32))

    assert text == "[NaN, 1.0]"


@pytest.mark.parametrize(
    ("accept", "chosen"),
    [
        (None, "application/json"),
        ("", "application/json"),
        ("*/*", "application/json"),
        ("application/json", "application/json"),
        ("application/jsonlines", "application/jsonlines"),
        ("text/csv, application/jsonlines;q=0.9", "application/jsonlines"),
        ("APPLICATION/JSON; charset=utf-8", "application/json"),
        ("text/csv", None),
    ],
)
def test_chooses_the_answer_type_from_accept(accept: str | None, chosen: str | None) -> None:
    assert choose_accept(accept) == chosen


@pytest.mark.parametrize(
    "content_type",
    ["image/jpeg", "image/png", "application/x-image", "image/webp",
     "application/octet-stream", "image/jpeg; charset=binary", None],
)  # fmt: skip
def test_answers_a_json_array_of_all_probabilities(content_type: str | None) -> None:
    model = FakeModel(classes=10, top=3)

    reply = classifier(model).invoke(JPEG, content_type, None)

    assert (reply.status, reply.content_type) == (200, "application/json")
    probabilities = json.loads(reply.body)
    assert len(probabilities) == 10
    assert int(np.argmax(probabilities)) == 3
    assert sum(probabilities) == pytest.approx(1.0, abs=1e-5)
    assert model.batches[0].shape == (1, 3, 224, 224)


def test_answers_jsonlines_when_asked() -> None:
    reply = classifier().invoke(JPEG, "image/jpeg", "application/jsonlines")

    assert reply.content_type == "application/jsonlines"
    record = json.loads(reply.body)
    assert list(record) == ["prediction"]
    assert len(record["prediction"]) == 10


def test_refuses_an_unsupported_content_type_with_415() -> None:
    reply = classifier().invoke(JPEG, "text/csv", None)

    assert reply.status == 415
    assert b"text/csv" in reply.body


def test_refuses_an_unsupported_accept_with_406() -> None:
    assert classifier().invoke(JPEG, "image/jpeg", "text/csv").status == 406


def test_answers_400_for_an_undecodable_image_like_the_built_in_algorithm() -> None:
    reply = classifier().invoke(b"\xff\xd8 not really a jpeg", "image/jpeg", None)

    assert reply.status == 400
    assert reply.body.startswith(b"unable to evaluate payload provided")


def test_answers_400_for_a_decompression_bomb_without_running_the_model() -> None:
    model = FakeModel()

    reply = classifier(model).invoke(imagefactory.png_bomb(), "image/png", None)

    assert reply.status == 400
    assert model.batches == []


@pytest.mark.parametrize(
    ("model", "classes"),
    [(FakeModel(classes=5), 10), (FakeModel(rows=2), None)],
    ids=["wrong-width", "two-rows"],
)
def test_answers_500_when_the_model_output_has_the_wrong_shape(
    model: FakeModel, classes: int | None
) -> None:
    assert classifier(model, classes).invoke(JPEG, "image/jpeg", None).status == 500
