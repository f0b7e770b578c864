"""Configuration loading and validation: every error names the bad key."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from emulator.config import ConfigError, load_config, parse_config

REPO = Path(__file__).resolve().parents[3]
BASE = Path("/configs")  # never read: validation does not touch model files

VALID: dict[str, Any] = {
    "allow_fault_header": True,
    "seed": 7,
    "models": {
        "net": {
            "path": "models/net.onnx",
            "normalize": {"mean": [0.485 * 255, 0.456 * 255, 0.406 * 255], "std": 58.0},
        }
    },
    "endpoints": {
        "ab-test": {
            "variants": [
                {"name": "A", "model": "net", "weight": 0.7},
                {
                    "name": "B",
                    "model": "other/net.onnx",
                    "weight": 0.3,
                    "faults": {
                        "latency_ms": 20,
                        "error_rate": {"ModelError": 0.1, "ServiceUnavailable": 0.05},
                        "malformed_output": 0.02,
                    },
                },
            ]
        }
    },
}


def with_change(path: list[str | int], value: object) -> dict[str, Any]:
    raw = copy.deepcopy(VALID)
    node: Any = raw
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return raw


def test_parses_endpoints_variants_models_and_faults() -> None:
    config = parse_config(VALID, BASE)

    endpoint = config.endpoints["ab-test"]
    assert [v.name for v in endpoint.variants] == ["A", "B"]
    assert [v.weight for v in endpoint.variants] == [0.7, 0.3]
    assert config.models["net"].path == BASE / "models/net.onnx"
    assert config.models["net"].preprocess.std == (58.0, 58.0, 58.0)
    faults = endpoint.variants[1].faults
    assert faults.error_rate == (("ModelError", 0.1), ("ServiceUnavailable", 0.05))
    assert (faults.latency_ms, faults.malformed_output) == (20.0, 0.02)
    assert config.default_endpoint == "ab-test"
    assert (config.allow_fault_header, config.seed) == (True, 7)


def test_variant_model_given_as_a_path_becomes_a_model_with_defaults() -> None:
    config = parse_config(VALID, BASE)

    spec = config.models["other/net.onnx"]
    assert spec.path == BASE / "other/net.onnx"
    assert spec.preprocess.mean == (127.0, 127.0, 127.0)
    assert spec.preprocess.std == (128.0, 128.0, 128.0)
    assert (spec.preprocess.resize, spec.preprocess.crop) == (256, 224)


def test_defaults_fault_header_off_and_account_and_region() -> None:
    raw = {"endpoints": {"e": {"variants": [{"name": "v", "model": "m.onnx"}]}}}

    config = parse_config(raw, BASE)

    assert config.allow_fault_header is False
    assert (config.account_id, config.region) == ("123456789012", "us-east-1")
    assert config.endpoints["e"].variants[0].weight == 1.0


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (["endpoints", "ab-test", "variants", 0, "wieght"], 1, "variants[0].wieght"),
        (["endpoints", "ab-test", "variants", 0, "weight"], -1, "variants[0].weight"),
        (["endpoints", "ab-test", "variants", 0, "weight"], "1", "variants[0].weight"),
        (["endpoints", "ab-test", "variants", 1, "name"], "A", "ab-test.variants"),
        (["endpoints", "ab-test", "variants", 1, "name"], "bad_name", "variants[1].name"),
        (["endpoints", "ab-test", "variants"], [], "ab-test.variants"),
        (["endpoints", "bad name!"], {"variants": []}, "endpoints.bad name!"),
        (["models", "net", "crop"], 300, "models.net.resize"),
        (["models", "net", "normalize", "std"], [1, 0, 1], "models.net.normalize.std"),
        (["models", "net", "normalize", "mean"], [1, 2], "models.net.normalize.mean"),
        (["models", "net", "path"], "", "models.net.path"),
        (["default_endpoint"], "nope", "default_endpoint"),
        (["allow_fault_header"], "yes", "allow_fault_header"),
        (["seed"], 1.5, "seed"),
        (["endpoint"], {}, "^endpoint: unknown key"),
    ],
)
def test_rejects_bad_values_naming_the_key(
    path: list[str | int], value: object, named: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(named) if "^" not in named else named):
        parse_config(with_change(path, value), BASE)


@pytest.mark.parametrize(
    ("faults", "named"),
    [
        ({"error_rate": {"ModelErorr": 0.1}}, "error_rate.ModelErorr"),
        ({"error_rate": {"ModelError": 1.5}}, "error_rate.ModelError"),
        ({"error_rate": {"ModelError": 0.6, "InternalFailure": 0.6}}, "error_rate"),
        ({"malformed_output": -0.1}, "malformed_output"),
        ({"latency_ms": -5}, "latency_ms"),
        ({"latency": 5}, "faults.latency"),
    ],
)
def test_rejects_bad_faults_naming_the_key(faults: dict[str, object], named: str) -> None:
    raw = with_change(["endpoints", "ab-test", "variants", 0, "faults"], faults)

    with pytest.raises(ConfigError, match=named):
        parse_config(raw, BASE)


def test_rejects_an_endpoint_whose_weights_are_all_zero() -> None:
    raw = with_change(
        ["endpoints", "ab-test", "variants"], [{"name": "A", "model": "net", "weight": 0}]
    )

    with pytest.raises(ConfigError, match="weight must be above 0"):
        parse_config(raw, BASE)


def test_ignores_keys_starting_with_underscore() -> None:
    raw = with_change(["_comment"], "anything")
    raw["endpoints"]["ab-test"]["variants"][0]["_note"] = "ignored"

    assert parse_config(raw, BASE).endpoints["ab-test"].variants[0].name == "A"


def test_loads_json_and_resolves_model_paths_against_the_file(tmp_path: Path) -> None:
    path = tmp_path / "emulator.json"
    path.write_text(json.dumps(VALID))

    config = load_config(path)

    assert config.models["net"].path == tmp_path / "models/net.onnx"
    assert config.source == path


def test_loads_yaml_when_pyyaml_is_installed(tmp_path: Path) -> None:
    yaml = pytest.importorskip("yaml")
    path = tmp_path / "emulator.yaml"
    path.write_text(yaml.safe_dump(VALID))

    assert load_config(path).endpoints["ab-test"].variants[1].weight == 0.3


def test_reports_invalid_json_with_the_file_name(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{")

    with pytest.raises(ConfigError, match=r"broken\.json: invalid JSON"):
        load_config(path)


def test_default_config_serves_the_committed_model() -> None:
    config = load_config(REPO / "emulator" / "config.json")

    variant = config.endpoints["efficientnet-lite0"].variants[0]
    assert (variant.name, variant.weight) == ("AllTraffic", 1.0)
    spec = config.models[variant.model]
    assert spec.path == REPO / "emulator" / "models" / "efficientnet-lite0" / "model.onnx"
    assert spec.path.is_file()
    assert config.allow_fault_header is False


def test_default_config_serves_the_int8_challenger_as_the_float_model_is_served() -> None:
    config = load_config(REPO / "emulator" / "config.json")

    (variant,) = config.endpoints["efficientnet-lite0-int8"].variants
    assert (variant.name, variant.weight, variant.model) == ("AllTraffic", 1.0,
                                                             "efficientnet-lite0-int8")
    spec, float_spec = config.models[variant.model], config.models["efficientnet-lite0"]
    assert spec.path == REPO / "emulator" / "models" / "efficientnet-lite0-int8" / "model.onnx"
    assert spec.path.is_file()
    assert (spec.kind, spec.preprocess, spec.classes) == (float_spec.kind, float_spec.preprocess,
                                                          float_spec.classes)
    assert config.endpoints["efficientnet-lite0-int8"].asynchronous is None


COMPONENT_ENDPOINT: dict[str, Any] = {
    "models": {"net": {"path": "models/net.onnx"}},
    "endpoints": {"shared": {"inference_components": [
        {"name": "net-ic", "model": "net"},
        {"name": "other-ic", "model": "other/net.onnx", "variant": "Blue",
         "faults": {"latency_ms": 5}},
    ]}},
}  # fmt: skip


def test_parses_an_endpoint_of_inference_components() -> None:
    config = parse_config(COMPONENT_ENDPOINT, BASE)

    endpoint = config.endpoints["shared"]
    assert {name: (v.name, v.model) for name, v in endpoint.components.items()} == {
        "net-ic": ("AllTraffic", "net"), "other-ic": ("Blue", "other/net.onnx")}
    assert endpoint.components["other-ic"].faults.latency_ms == 5
    assert list(endpoint.variants) == list(endpoint.components.values())
    assert config.models["other/net.onnx"].path == BASE / "other/net.onnx"


@pytest.mark.parametrize(("change", "message"), [
    ({"variants": [{"name": "A", "model": "net"}]}, "endpoints.shared: give variants or"),
    ({"inference_components": []}, "endpoints.shared.inference_components: must be a non-empty"),
    ({"inference_components": [{"name": "a_b", "model": "net"}]},
     "inference_components[0].name: 'a_b' is not a valid inference component name"),
    ({"inference_components": [{"name": "a", "model": "net"}, {"name": "a", "model": "net"}]},
     "inference_components[1].name: 'a' is given twice"),
    ({"inference_components": [{"name": "a", "model": "net", "variant": "x_y"}]},
     "inference_components[0].variant: 'x_y' is not a valid SageMaker name"),
    ({"inference_components": [{"name": "a", "model": "net", "weight": 1}]},
     "inference_components[0].weight: unknown key"),
    ({"inference_components": [{"name": "a"}]}, "inference_components[0].model: must be a"),
])  # fmt: skip
def test_a_bad_inference_component_names_its_key(change: dict[str, Any], message: str) -> None:
    raw = copy.deepcopy(COMPONENT_ENDPOINT)
    raw["endpoints"]["shared"].update(change)

    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config(raw, BASE)
