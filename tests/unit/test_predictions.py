from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chalicelib.core.config import Settings
from chalicelib.core.errors import ConfigurationError, InvalidEndpointResponseError
from chalicelib.inference import predictions
from chalicelib.registry.labels import read_labels
from chalicelib.registry.loading import load_model

SETTINGS = Settings(endpoint_name="efficientnet-lite0")
SIGNATURE = {"inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 2]}]}


def test_parses_builtin_json_array() -> None:
    probs = predictions.parse_probabilities(b"[1.4e-05, 0.5, 0.25]")
    assert probs.tolist() == [1.4e-05, 0.5, 0.25]


def test_parses_jsonlines_and_tf_serving_shapes() -> None:
    assert predictions.parse_probabilities(b'{"prediction": [0.1, 0.9]}').tolist() == [0.1, 0.9]
    assert predictions.parse_probabilities(b'{"predictions": [[0.3, 0.7]]}').tolist() == [0.3, 0.7]


@pytest.mark.parametrize("body", [
    b"", b"not json", b"[]", b"[[0.1, 0.2], [0.3, 0.4]]", b'["a", "b"]', b"[NaN, 0.5]",
    b"[Infinity]", b'{"predictions": [[0.1], [0.2]]}', b'{"scores": [0.1]}', b"0.5",
    b"__import__('os').system('true')", b"[0.1, [0.2]]",
])
def test_rejects_malformed_output(body: bytes) -> None:
    with pytest.raises(InvalidEndpointResponseError):
        predictions.parse_probabilities(body)


def test_rejects_class_count_that_disagrees_with_labels() -> None:
    with pytest.raises(InvalidEndpointResponseError, match="label file has 1000"):
        predictions.parse_probabilities(b"[0.5, 0.5]", expected=1000)


def test_top_k_orders_descending_with_ties_by_lower_index() -> None:
    probs = np.array([0.1, 0.3, 0.3, 0.05, 0.3, 0.25])
    assert predictions.top_k(probs, 3).tolist() == [1, 2, 4]
    assert predictions.top_k(probs, 2).tolist() == [1, 2]
    assert predictions.top_k(probs, 4).tolist() == [1, 2, 4, 5]


def test_top_k_above_class_count_returns_all() -> None:
    probs = np.array([0.2, 0.5, 0.3])
    assert predictions.top_k(probs, 10).tolist() == [1, 2, 0]


@given(st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.5, 1e-5]), min_size=1, max_size=60),
       st.integers(min_value=1, max_value=70))
def test_top_k_matches_a_full_stable_sort(values: list[float], k: int) -> None:
    probs = np.array(values)
    expected = sorted(range(len(values)), key=lambda i: (-values[i], i))[:k]
    assert predictions.top_k(probs, k).tolist() == expected


def test_labels_attach_by_index() -> None:
    probs = np.array([0.1, 0.7, 0.2])
    result = predictions.label_predictions(probs, np.array([1, 2]), ("a", "b", "c"))
    assert [p.to_dict() for p in result] == [
        {"index": 1, "label": "b", "probability": 0.7},
        {"index": 2, "label": "c", "probability": 0.2},
    ]


def test_without_labels_the_label_is_the_index() -> None:
    result = predictions.label_predictions(np.array([0.4, 0.6]), np.array([1]), None)
    assert result[0].label == "1"


def test_imagenet_labels_ship_with_the_function() -> None:
    labels = predictions.load_labels("imagenet1k")
    assert labels is not None and len(labels) == 1000
    assert labels[0] == "tench" and labels[285] == "Egyptian cat"


def test_missing_label_file_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match=r"nonexistent\.txt"):
        predictions.load_labels("nonexistent")
    assert predictions.load_labels("") is None


def test_a_label_file_is_read_once_whatever_names_it(tmp_path: Path) -> None:
    """The flat LABELS file (with or without .txt) and a model's labels.txt are read by one
    reader, once per file: every user of a file shares its one tuple."""
    flat = predictions.load_labels("imagenet1k")
    assert flat is not None and predictions.load_labels("imagenet1k.txt") is flat
    assert read_labels(predictions.LABELS_DIR / "imagenet1k.txt", "labels") is flat
    model = tmp_path / "pets"
    model.mkdir()
    (model / "model.json").write_text(json.dumps({"endpoint": "pets", "pipeline": "tensor",
                                                  "signature": SIGNATURE}))
    (model / "labels.txt").write_text("cat\ndog\n")
    first = load_model(model, SETTINGS, {}).labels
    assert first == ("cat", "dog") and load_model(model, SETTINGS, {}).labels is first


@pytest.mark.parametrize("model_file", [False, True], ids=["LABELS", "labels.txt"])
def test_both_label_files_are_read_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         model_file: bool) -> None:
    """A Windows editor's file (byte order mark, CRLF) and blank lines read the same in both."""
    text = "\ufeffcat\r\n\r\n  dog \r\n"
    assert read_either(tmp_path, monkeypatch, text.encode(), model_file) == ("cat", "dog")


@pytest.mark.parametrize("model_file", [False, True], ids=["LABELS", "labels.txt"])
@pytest.mark.parametrize(("data", "says"), [(b"cat\n\xff\xfe\n", "is not UTF-8 text"),
                                            (b"\n \n", "is empty")])
def test_a_bad_label_file_stops_start_up_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_file: bool, data: bytes,
        says: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        read_either(tmp_path, monkeypatch, data, model_file)
    shown = "models/pets/labels.txt" if model_file else "LABELS file pets.txt"
    assert caught.value.message == f"{shown} {says}"


def test_an_edited_label_file_is_read_again(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    assert read_either(tmp_path, monkeypatch, b"cat\n", False) == ("cat",)
    assert read_either(tmp_path, monkeypatch, b"cat\ndog\n", False) == ("cat", "dog")


def read_either(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes,
                model_file: bool) -> tuple[str, ...] | None:
    """``data`` as the flat LABELS file ``pets``, or as the labels.txt of a model ``pets``."""
    if not model_file:
        (tmp_path / "pets.txt").write_bytes(data)
        monkeypatch.setattr(predictions, "LABELS_DIR", tmp_path)
        return predictions.load_labels("pets")
    model = tmp_path / "pets"
    model.mkdir()
    (model / "model.json").write_text(json.dumps({"endpoint": "pets", "pipeline": "tensor",
                                                  "signature": SIGNATURE}))
    (model / "labels.txt").write_bytes(data)
    return load_model(model, SETTINGS, {}).labels


def test_parse_is_json_not_eval() -> None:
    body = json.dumps([1e-5] * 999 + [0.99]).encode()
    probs = predictions.parse_probabilities(body, expected=1000)
    assert predictions.top_k(probs, 1).tolist() == [999]
