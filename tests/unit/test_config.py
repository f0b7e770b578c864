from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from chalicelib.core.access import Access
from chalicelib.core.config import Settings
from chalicelib.core.config_names import (
    API_GATEWAY_TIMEOUT_SECONDS,
    COGNITO_USER_POOL_ARNS,
    CORS_ALLOW_ORIGIN,
    POWERTOOLS_METRICS_NAMESPACE,
    POWERTOOLS_SERVICE_NAME,
    SAGEGATE_AUTH,
    SAGEGATE_OPEN_API,
)
from chalicelib.core.errors import ConfigurationError
from chalicelib.monitor import deployed_settings

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_need_only_the_endpoint_name() -> None:
    settings = Settings.from_env({"ENDPOINT_NAME": "my-endpoint"})
    assert settings.endpoint_name == "my-endpoint"
    assert settings.default_k == 5 and settings.resize_mode == "shorter-side"
    assert settings.resize_shorter_side == 256
    assert (settings.input_width, settings.input_height) == (224, 224)
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


@pytest.mark.parametrize("connect,read,budget", [("2", "23", "25"), ("5", "20", "25"),
                                                 ("0.5", "8", "8.5")])
def test_a_whole_endpoint_attempt_must_leave_time_to_preprocess(connect: str, read: str,
                                                                budget: str) -> None:
    env = {"ENDPOINT_NAME": "ep", "ENDPOINT_CONNECT_TIMEOUT": connect,
           "ENDPOINT_READ_TIMEOUT": read, "REQUEST_BUDGET_SECONDS": budget}
    with pytest.raises(ConfigurationError, match=r"ENDPOINT_READ_TIMEOUT.*ENDPOINT_CONNECT"):
        Settings.from_env(env)
    Settings.from_env({**env, "REQUEST_BUDGET_SECONDS": "29"})


def test_explicit_argument_beats_environment() -> None:
    settings = Settings.from_env({"ENDPOINT_NAME": "ep", "DEFAULT_K": "3"}, default_k=7)
    assert settings.default_k == 7


def test_empty_labels_means_no_label_file() -> None:
    assert Settings.from_env({"ENDPOINT_NAME": "ep", "LABELS": ""}).labels == ""


def test_settings_are_frozen() -> None:
    settings = Settings.from_env({"ENDPOINT_NAME": "ep"})
    with pytest.raises(AttributeError):
        settings.default_k = 3  # type: ignore[misc]


CONFIG = json.loads((ROOT / ".chalice" / "config.json").read_text())
STAGES = sorted(CONFIG["stages"])
LOCAL_STAGES = {"local", "test"}  # served by chalice local, never deployed
SETTINGS_FIELDS = {field.name.upper(): field for field in dataclasses.fields(Settings)}
ACCESS_VARIABLES = {SAGEGATE_AUTH, SAGEGATE_OPEN_API, CORS_ALLOW_ORIGIN, COGNITO_USER_POOL_ARNS}
# read by libraries, not by sagegate's own code: botocore's region, Powertools' names
LIBRARY_VARIABLES = {"AWS_DEFAULT_REGION", "POWERTOOLS_LOG_LEVEL", POWERTOOLS_SERVICE_NAME,
                     POWERTOOLS_METRICS_NAMESPACE}
# read by the scheduled monitor (chalicelib.monitor.deployed) and app.py at import
MONITOR_VARIABLES = {deployed_settings.MONITOR_BASELINE, deployed_settings.MONITOR_OUTPUT,
                     deployed_settings.MONITOR_SCHEDULE, deployed_settings.MONITOR_CAPTURES,
                     deployed_settings.MONITOR_ENGINE}


def stage_env(stage: str) -> dict[str, str]:
    """What a stage's function sees: the top-level variables, then the stage's over them."""
    return {**CONFIG["environment_variables"],
            **CONFIG["stages"][stage].get("environment_variables", {})}


def test_the_stages_are_the_ones_the_project_uses() -> None:
    assert set(STAGES) == {"local", "test", "dev", "prod"}
    assert CONFIG["environment_variables"]["ENDPOINT_NAME"] == "efficientnet-lite0"


@pytest.mark.parametrize("where", ["top level", *STAGES])
def test_every_variable_is_one_that_is_read(where: str) -> None:
    """A misspelt name (``REQUEST_BUDGET_SECOND``) would be ignored without a word."""
    variables = (CONFIG["environment_variables"] if where == "top level"
                 else CONFIG["stages"][where].get("environment_variables", {}))
    unknown = set(variables) - set(SETTINGS_FIELDS) - ACCESS_VARIABLES - LIBRARY_VARIABLES \
        - MONITOR_VARIABLES
    assert not unknown, f"{where}: no setting is called {sorted(unknown)}"


def test_no_top_level_value_repeats_a_settings_default() -> None:
    """The top level holds only what differs from the defaults in chalicelib/core/config.py."""
    top = Settings.from_env(CONFIG["environment_variables"])
    for name, value in CONFIG["environment_variables"].items():
        field = SETTINGS_FIELDS.get(name)
        if field is not None and field.default is not dataclasses.MISSING:
            assert getattr(top, field.name) != field.default, f"{name}={value!r} is the default"


@pytest.mark.parametrize("stage", STAGES)
def test_no_stage_value_repeats_what_the_stage_gets_anyway(stage: str) -> None:
    inherited = Settings.from_env(CONFIG["environment_variables"])
    settings = Settings.from_env(stage_env(stage))
    for name, value in CONFIG["stages"][stage].get("environment_variables", {}).items():
        if name in SETTINGS_FIELDS:
            assert getattr(settings, name.lower()) != getattr(inherited, name.lower()), \
                f"{stage}: {name}={value!r} is what the stage gets without it"


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_config_is_valid(stage: str) -> None:
    """The settings and access rules each stage's function reads are valid (a deployed one
    with its authentication named), and a capture directory has a size cap."""
    env = stage_env(stage)
    settings = Settings.from_env(env)
    access = Access.from_env(env, deployed=stage not in LOCAL_STAGES)
    assert settings.endpoint_name == env["ENDPOINT_NAME"]
    assert access.auth == env.get(SAGEGATE_AUTH, "none")
    if settings.capture_mode != "off" and "://" not in settings.capture_destination:
        assert settings.capture_max_bytes > 0, f"{stage}: a capture directory without a cap"


@pytest.mark.parametrize("stage", sorted(set(STAGES) - LOCAL_STAGES))
def test_a_deployed_request_is_ended_by_its_budget_not_by_lambda_or_api_gateway(
        stage: str) -> None:
    """The budget answers 504 in time only if Lambda lets the function run past it, and API
    Gateway (29 s) waits for Lambda. Chalice's default Lambda timeout is 60 s."""
    settings = Settings.from_env(stage_env(stage))
    timeout = CONFIG["stages"][stage].get("lambda_timeout")
    assert timeout is not None, f"{stage} has no lambda_timeout (Chalice's default is 60 s)"
    assert settings.request_budget_seconds < timeout < API_GATEWAY_TIMEOUT_SECONDS


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


def test_the_configuration_page_documents_every_setting() -> None:
    page = (ROOT / "docs" / "CONFIGURATION.md").read_text()
    for name in ("MAX_ASPECT_RATIO", "ALLOW_CORRUPT_IMAGES", "ENDPOINT_MAX_CONNECTIONS"):
        assert f"`{name}`" in page, name


# A wrong-typed value of each kind of field: bool fields get a truthy string and an int, int
# fields a fraction and True (an int to Python, and inside most ranges), float fields True and
# a numeric string, str fields a number.
WRONG_TYPES: dict[str, list[object]] = {"bool": ["false", 0], "int": [100.7, True],
                                        "float": [True, "2.5"], "str": [3]}


@pytest.mark.parametrize(("field", "value"), [
    (field.name, value) for field in dataclasses.fields(Settings)
    for value in WRONG_TYPES[str(field.type)]], ids=str)
def test_every_setting_refuses_a_value_of_another_type(field: str, value: object) -> None:
    """Explicit arguments (and model.json's ``image``, which arrives the same way) are checked
    for type as the variables are: "false" is truthy, 100.7 reaches OpenCV."""
    values: dict[str, object] = {"endpoint_name": "ep", field: value}
    with pytest.raises(ConfigurationError) as caught:
        Settings(**values)  # type: ignore[arg-type]
    assert caught.value.message.startswith(f"{field.upper()} must be "), caught.value.message


@pytest.mark.parametrize(("var", "value", "says"), [
    ("UPSCALE", "maybe", "must be true or false (true/1/yes/on or false/0/no/off), not 'maybe'"),
    ("PASSTHROUGH", "2", "must be true or false"),
    ("DEFAULT_K", "1_000", "must be a whole number, not '1_000'"),
    ("DEFAULT_K", "\u0663", "must be a whole number"),  # an Arabic-Indic 3: int() takes it
    ("INPUT_WIDTH", "100.7", "must be a whole number, not '100.7'"),
    ("INPUT_WIDTH", "true", "must be a whole number"),
    ("MAX_ASPECT_RATIO", "1_0", "must be a number, not '1_0'"),
    ("MAX_ASPECT_RATIO", "nan", "must be a number"),
    ("ENDPOINT_READ_TIMEOUT", "infinity", "must be a number"),
])
def test_a_variable_must_be_spelt_as_documented(var: str, value: str, says: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env({"ENDPOINT_NAME": "ep", var: value})
    assert caught.value.message.startswith(f"{var} {says}"), caught.value.message


@pytest.mark.parametrize(("value", "expected"), [
    ("true", True), (" TRUE ", True), ("1", True), ("yes", True), ("On", True),
    ("false", False), ("0", False), ("no", False), ("OFF", False)])
def test_the_documented_boolean_spellings(value: str, expected: bool) -> None:
    assert Settings.from_env({"ENDPOINT_NAME": "ep", "UPSCALE": value}).upscale is expected


@pytest.mark.parametrize(("var", "value", "expected"), [
    ("DEFAULT_K", " 7 ", 7), ("DEFAULT_K", "+7", 7), ("MAX_ASPECT_RATIO", "32.5", 32.5),
    ("MAX_ASPECT_RATIO", "5", 5.0), ("MAX_ASPECT_RATIO", ".5e1", 5.0),
    ("ENDPOINT_CONNECT_TIMEOUT", "1.", 1.0)])
def test_numbers_are_read_as_written(var: str, value: str, expected: float) -> None:
    settings = Settings.from_env({"ENDPOINT_NAME": "ep", var: value})
    assert getattr(settings, var.lower()) == expected
