from __future__ import annotations

import json
from pathlib import Path

import pytest

from chalicelib.config import Settings
from chalicelib.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_need_only_the_endpoint_name() -> None:
    settings = Settings.from_env({"ENDPOINT_NAME": "my-endpoint"})
    assert settings.endpoint_name == "my-endpoint"
    assert settings.default_k == 5 and settings.resize_mode == "shorter-side"
    assert settings.resize_shorter_side == 256 and settings.target_size == (224, 224)
    assert settings.max_body_bytes == 6 * 1024 * 1024 and settings.max_image_pixels == 40_000_000


def test_missing_endpoint_name_names_the_variable() -> None:
    with pytest.raises(ConfigurationError, match="ENDPOINT_NAME"):
        Settings.from_env({})


@pytest.mark.parametrize("var,value", [
    ("ENDPOINT_NAME", "bad_name!"), ("DEFAULT_K", "0"), ("DEFAULT_K", "abc"),
    ("RESIZE_MODE", "zoom"), ("JPEG_QUALITY", "101"), ("UPSCALE", "maybe"),
    ("ENDPOINT_ACCEPT", "text/csv"), ("REQUEST_BUDGET_SECONDS", "30"),
    ("ENDPOINT_READ_TIMEOUT", "26"), ("LABELS", "../secrets"), ("MAX_BODY_BYTES", "20000000"),
])
def test_bad_values_name_the_variable(var: str, value: str) -> None:
    env = {"ENDPOINT_NAME": "ep", var: value}
    with pytest.raises(ConfigurationError, match=var):
        Settings.from_env(env)


def test_explicit_argument_beats_environment() -> None:
    settings = Settings.from_env({"ENDPOINT_NAME": "ep", "DEFAULT_K": "3"}, default_k=7)
    assert settings.default_k == 7


def test_empty_labels_means_no_label_file() -> None:
    assert Settings.from_env({"ENDPOINT_NAME": "ep", "LABELS": ""}).labels == ""


def test_settings_are_frozen() -> None:
    settings = Settings.from_env({"ENDPOINT_NAME": "ep"})
    with pytest.raises(AttributeError):
        settings.default_k = 3  # type: ignore[misc]


@pytest.mark.parametrize("stage", ["local", "dev", "prod"])
def test_every_stage_config_is_valid(stage: str) -> None:
    config = json.loads((ROOT / ".chalice" / "config.json").read_text())
    env = {**config["environment_variables"],
           **config["stages"][stage].get("environment_variables", {})}
    Settings.from_env(env)
    assert config["stages"][stage]["lambda_timeout"] < 29 if stage != "local" else True


def test_new_limits_have_documented_defaults() -> None:
    settings = Settings.from_env({"ENDPOINT_NAME": "ep"})
    assert settings.max_aspect_ratio == 20
    assert settings.allow_corrupt_images is False
    assert settings.endpoint_max_connections == 0  # sized to the server
    tuned = Settings.from_env({"ENDPOINT_NAME": "ep", "MAX_ASPECT_RATIO": "32.5",
                               "ALLOW_CORRUPT_IMAGES": "true", "ENDPOINT_MAX_CONNECTIONS": "8"})
    assert (tuned.max_aspect_ratio, tuned.allow_corrupt_images,
            tuned.endpoint_max_connections) == (32.5, True, 8)


@pytest.mark.parametrize("var,value", [("MAX_ASPECT_RATIO", "0.5"), ("MAX_ASPECT_RATIO", "nan"),
                                       ("MAX_ASPECT_RATIO", "inf"), ("ALLOW_CORRUPT_IMAGES", "2"),
                                       ("ENDPOINT_MAX_CONNECTIONS", "-1"),
                                       ("ENDPOINT_MAX_CONNECTIONS", "1001")])
def test_bad_new_limits_name_the_variable(var: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=var):
        Settings.from_env({"ENDPOINT_NAME": "ep", var: value})


def test_the_readme_documents_every_setting() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in ("MAX_ASPECT_RATIO", "ALLOW_CORRUPT_IMAGES", "ENDPOINT_MAX_CONNECTIONS"):
        assert f"`{name}`" in readme, name
