"""The model registry: the packaged folders load, and every bad model.json stops start-up with
a message naming the file and the key."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chalicelib.core.config import Settings
from chalicelib.core.errors import ConfigurationError, ModelNotFoundError
from chalicelib.registry.kinds import Pipeline
from chalicelib.registry.loading import IMAGE_KEYS, MODELS_DIR, load_model, load_registry
from chalicelib.registry.specs import DType

SETTINGS = Settings(endpoint_name="efficientnet-lite0")
ENV = {"ENDPOINT_NAME": "efficientnet-lite0"}
IRIS = {"endpoint": "iris", "pipeline": "tensor",
        "signature": {"inputs": [{"name": "features", "dtype": "float32", "shape": [-1, 4]}],
                      "outputs": [{"name": "probabilities", "dtype": "float32",
                                   "shape": [-1, 3]}]}}


def folder(tmp_path: Path, document: Any, name: str = "model-a", **files: str) -> Path:
    path = tmp_path / name
    path.mkdir()
    (path / "model.json").write_text(document if isinstance(document, str)
                                     else json.dumps(document))
    for file_name, text in files.items():
        (path / file_name.replace("_", ".")).write_text(text)
    return path


def test_the_packaged_models_load() -> None:
    registry = load_registry(SETTINGS, ENV)
    assert registry.default == "efficientnet-lite0"
    assert {"efficientnet-lite0", "iris", "iris-cortex", "sentiment"} <= set(registry.names())
    default = registry.get()
    assert default.pipeline == Pipeline.IMAGE_CLASSIFICATION
    assert default.settings == SETTINGS  # the flat variables describe the default model
    iris = registry.get("iris")
    assert iris.labels == ("setosa", "versicolor", "virginica")
    assert iris.signature.inputs[0].describe() == "float32 of shape (-1, 4)"
    assert registry.get("sentiment").signature.inputs[1].dtype == DType.INT32


def test_an_unknown_model_is_404_listing_the_known_ones() -> None:
    registry = load_registry(SETTINGS, ENV)
    with pytest.raises(ModelNotFoundError) as caught:
        registry.get("resnet")
    assert caught.value.STATUS_CODE == 404
    assert "iris" in caught.value.message and "resnet" in caught.value.message


def test_default_model_names_a_registered_one() -> None:
    assert load_registry(SETTINGS, {**ENV, "DEFAULT_MODEL": "iris"}).default == "iris"
    with pytest.raises(ConfigurationError, match="DEFAULT_MODEL='nope' names no model"):
        load_registry(SETTINGS, {**ENV, "DEFAULT_MODEL": "nope"})


def test_an_endpoint_can_come_from_the_stage(tmp_path: Path) -> None:
    path = folder(tmp_path, {**IRIS, "endpoint": "$IRIS_ENDPOINT"})
    assert load_model(path, SETTINGS, {"IRIS_ENDPOINT": "iris-prod"}).endpoint == "iris-prod"
    with pytest.raises(ConfigurationError, match=r"model-a/model.json: key 'endpoint' reads "
                                                 r"\$IRIS_ENDPOINT, which is not set"):
        load_model(path, SETTINGS, {})


@pytest.mark.parametrize("change,key", [
    ({"pipeline": "pytorch"}, "pipeline"),
    ({"endpoint": "bad name!"}, "endpoint"),
    ({"endpoint": 3}, "endpoint"),
    ({"colour": "red"}, "colour"),
    ({"signature": None}, "signature"),
    ({"signature": {"inputs": []}}, "signature.inputs"),
    ({"signature": {"inputs": [{"name": "x", "dtype": "complex", "shape": [-1]}]}},
     "signature.inputs[0].dtype"),
    ({"signature": {"inputs": [{"name": "x", "dtype": "float32", "shape": [0]}]}},
     "signature.inputs[0].shape"),
    ({"signature": {"inputs": [{"name": "x", "dtype": "float32"}]}}, "signature.inputs[0]"),
    ({"signature": {"inputs": [{"name": "x", "dtype": "float32", "shape": [-1]}] * 2}},
     "signature.inputs"),
    ({"accept": "text/html"}, "accept"),
    ({"default_k": 0}, "default_k"),
    ({"default_k": True}, "default_k"),
    ({"metadata": []}, "metadata"),
    ({"variant": "no way"}, "variant"),
    ({"content_type": "text/csv"}, "content_type"),
    # every key's type, not only its value
    ({"pipeline": ["tensor"]}, "pipeline"),
    ({"content_type": 1}, "content_type"),
    ({"accept": None}, "accept"),
    ({"signature": []}, "signature"),
    ({"signature": {"inputs": {}}}, "signature.inputs"),
    ({"signature": {"inputs": [{"name": 1, "dtype": "float32", "shape": [-1]}]}},
     "signature.inputs[0].name"),
    ({"signature": {"inputs": [{"name": "x", "dtype": 1, "shape": [-1]}]}},
     "signature.inputs[0].dtype"),
    ({"signature": {"inputs": [{"name": "x", "dtype": "float32", "shape": [4.0]}]}},
     "signature.inputs[0].shape"),
    ({"signature": {"inputs": [{"name": "x", "dtype": "float32", "shape": [True]}]}},
     "signature.inputs[0].shape"),
    ({"target_model": 1}, "target_model"),
    ({"variant": True}, "variant"),
    ({"default_k": 2.0}, "default_k"),
    ({"default_k": "3"}, "default_k"),
    ({"description": ["x"]}, "description"),
    ({"cache": "false"}, "cache"),
    ({"cache": 0}, "cache"),
    ({"expose_handler_errors": "true"}, "expose_handler_errors"),
    ({"image": {"upscale": True}}, "image"),  # a tensor model: no pipeline but images reads it
])
def test_a_bad_key_stops_start_up_naming_the_file_and_the_key(
        tmp_path: Path, change: dict[str, Any], key: str) -> None:
    document = {**IRIS, **change}
    if change.get("signature", 0) is None:
        del document["signature"]
    with pytest.raises(ConfigurationError) as caught:
        load_model(folder(tmp_path, document), SETTINGS, ENV)
    assert caught.value.message.startswith(f"models/model-a/model.json: key {key!r} ")


def test_an_image_model_gets_its_own_image_settings(tmp_path: Path) -> None:
    path = folder(tmp_path, {"endpoint": "inception", "pipeline": "image-classification",
                             "image": {"resize_mode": "fill", "input_width": 299,
                                       "input_height": 299}},
                  labels_txt="cat\ndog\n")
    model = load_model(path, SETTINGS, ENV)
    assert model.settings is not None
    assert (model.settings.resize_mode, model.settings.input_width) == ("fill", 299)
    assert model.settings.endpoint_name == "inception" and model.labels == ("cat", "dog")
    bad = folder(tmp_path, {"endpoint": "x", "pipeline": "image-classification",
                            "image": {"resize_mode": "zoom"}}, name="model-b")
    with pytest.raises(ConfigurationError, match=r"model-b/model\.json: key 'image\.resize_mode' "
                                                 r"must be one of"):
        load_model(bad, SETTINGS, ENV)


IMAGE_MODEL = {"endpoint": "inception", "pipeline": "image-classification"}


@pytest.mark.parametrize("image,key,says", [
    # a string is truthy: "false" would switch upscaling on
    ({"upscale": "false"}, "upscale", "must be true or false"),
    ({"passthrough": 0}, "passthrough", "must be true or false"),
    ({"passthrough": None}, "passthrough", "must be true or false"),
    # 100.7 would reach OpenCV's resize at request time as a raw cv2.error
    ({"input_width": 100.7}, "input_width", "must be a whole number"),
    ({"input_height": 224.0}, "input_height", "must be a whole number"),
    ({"resize_shorter_side": "256"}, "resize_shorter_side", "must be a whole number"),
    # true is 1 to Python, inside JPEG_QUALITY's range
    ({"jpeg_quality": True}, "jpeg_quality", "must be a whole number"),
    ({"png_compression": None}, "png_compression", "must be a whole number"),
    ({"resize_mode": ["fill"]}, "resize_mode", "must be a string"),
    ({"encode_format": 1}, "encode_format", "must be a string"),
    ({"input_width": 4}, "input_width", "must be between 8 and 8192"),
    ({"jpeg_quality": 101}, "jpeg_quality", "must be between 1 and 100"),
    ({"encode_format": "gif"}, "encode_format", "must be one of"),
    ({"colour": "red"}, "colour", "is not an image setting"),
])
def test_a_badly_typed_image_setting_stops_start_up_naming_its_key(
        tmp_path: Path, image: dict[str, Any], key: str, says: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_model(folder(tmp_path, {**IMAGE_MODEL, "image": image}), SETTINGS, ENV)
    assert caught.value.message.startswith(
        f"models/model-a/model.json: key 'image.{key}' {says}"), caught.value.message


def test_an_image_model_sends_the_content_type_and_accept_its_file_names(
        tmp_path: Path) -> None:
    """The image pipeline sends its settings' types: model.json's are those, checked alike."""
    model = load_model(folder(tmp_path, {**IMAGE_MODEL, "content_type": "image/jpeg",
                                         "accept": "application/jsonlines",
                                         "image": {"encode_format": "jpeg"}}), SETTINGS, ENV)
    assert model.settings is not None
    assert (model.settings.endpoint_content_type, model.settings.endpoint_accept) == \
        (model.content_type, model.accept) == ("image/jpeg", "application/jsonlines")


@pytest.mark.parametrize("change,key,says", [
    ({"content_type": "text/csv"}, "content_type", "must be one of"),
    ({"content_type": 3}, "content_type", "must be a string"),
    ({"accept": "text/html"}, "accept", "must be one of"),
    ({"content_type": "image/jpeg"}, "image", "ENCODE_FORMAT must match"),  # PNG is encoded
])
def test_an_image_models_content_types_are_checked_as_sent(
        tmp_path: Path, change: dict[str, Any], key: str, says: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_model(folder(tmp_path, {**IMAGE_MODEL, **change}), SETTINGS, ENV)
    assert caught.value.message.startswith(
        f"models/model-a/model.json: key {key!r} {says}"), caught.value.message


def test_image_must_be_an_object(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"model-a/model\.json: key 'image' must be an "
                                                 r"object of"):
        load_model(folder(tmp_path, {**IMAGE_MODEL, "image": []}), SETTINGS, ENV)


def test_every_image_setting_is_read_with_its_type(tmp_path: Path) -> None:
    """Each key ``image`` admits, given a valid value of its type, is what the model gets."""
    image = {"resize_mode": "fit", "resize_shorter_side": 300, "input_width": 320,
             "input_height": 240, "upscale": True, "encode_format": "jpeg", "jpeg_quality": 80,
             "png_compression": 3, "passthrough": False}
    assert set(image) == IMAGE_KEYS
    model = load_model(folder(tmp_path, {**IMAGE_MODEL, "image": image}), SETTINGS, ENV)
    assert model.settings is not None
    assert {key: getattr(model.settings, key) for key in image} == image


@pytest.mark.parametrize("text,says", [
    ('{"endpoint": "x", "pipeline": "image-classification", "image": {"input_width": NaN}}',
     "NaN is not a JSON value"),
    ('{"endpoint": "x", "pipeline": "tensor", "default_k": Infinity}',
     "Infinity is not a JSON value"),
    ('{"endpoint": "x", "pipeline": "image-classification", '
     '"image": {"upscale": true, "upscale": "false"}}', "key 'upscale' is given twice"),
    ('{"endpoint": "x", "endpoint": "y", "pipeline": "tensor"}', "key 'endpoint' is given twice"),
])
def test_model_json_is_strict_json(tmp_path: Path, text: str, says: str) -> None:
    """What Python's json module reads beyond JSON (NaN, a key given twice, the last winning
    unseen) is refused, not loaded as something the file does not say."""
    with pytest.raises(ConfigurationError) as caught:
        load_model(folder(tmp_path, text), SETTINGS, ENV)
    assert caught.value.message.startswith("models/model-a/model.json is not valid JSON: ")
    assert says in caught.value.message


@pytest.mark.parametrize("pipeline,handler", [("sagemaker-tfs", "inference.py"),
                                              ("cortex", "handler.py")])
def test_a_handler_pipeline_without_its_file_stops_start_up(
        tmp_path: Path, pipeline: str, handler: str) -> None:
    with pytest.raises(ConfigurationError, match=f"models/model-a/{handler} is missing"):
        load_model(folder(tmp_path, {**IRIS, "pipeline": pipeline}), SETTINGS, ENV)


@pytest.mark.parametrize("text,says", [("{", "is not valid JSON"), ("[]", "JSON object")])
def test_a_file_that_is_not_a_json_object(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=f"models/model-a/model.json {says}|"
                                                 f"model.json must hold a {says}"):
        load_model(folder(tmp_path, text), SETTINGS, ENV)


def test_a_folder_name_is_a_url_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="folder name"):
        load_model(folder(tmp_path, IRIS, name="Bad_Name"), SETTINGS, ENV)


def test_a_missing_model_json_is_named(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigurationError, match=r"models/empty/model\.json is missing"):
        load_registry(SETTINGS, ENV, root=tmp_path)


def test_every_packaged_model_json_uses_only_known_keys() -> None:
    for path in MODELS_DIR.glob("*/model.json"):
        load_model(path.parent, SETTINGS, ENV)  # raises on any problem


def test_an_inference_component_is_read_and_may_come_from_the_stage(tmp_path: Path) -> None:
    named = load_model(folder(tmp_path, {**IRIS, "inference_component": "iris-ic-1"}),
                       SETTINGS, ENV)
    assert named.inference_component == "iris-ic-1"
    staged = load_model(folder(tmp_path, {**IRIS, "inference_component": "$IRIS_IC"}, "b"),
                        SETTINGS, {**ENV, "IRIS_IC": "iris-prod"})
    assert staged.inference_component == "iris-prod"
    assert load_model(folder(tmp_path, IRIS, "c"), SETTINGS, ENV).inference_component is None


@pytest.mark.parametrize(("value", "env", "says"), [
    ("iris_ic", {}, "must be a SageMaker inference component name"),
    ("-iris", {}, "must be a SageMaker inference component name"),
    ("x" * 64, {}, "must be a SageMaker inference component name"),
    (3, {}, "must name an inference component"),
    ("", {}, "must name an inference component"),
    ("$IRIS_IC", {}, "reads $IRIS_IC, which is not set"),
    ("$IRIS_IC", {"IRIS_IC": "not valid"}, "not 'not valid'"),
])
def test_a_bad_inference_component_stops_start_up(tmp_path: Path, value: Any,
                                                  env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_model(folder(tmp_path, {**IRIS, "inference_component": value}), SETTINGS,
                   {**ENV, **env})
    assert "models/model-a/model.json: key 'inference_component'" in caught.value.message
    assert says in caught.value.message
