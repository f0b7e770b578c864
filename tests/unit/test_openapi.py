"""chalicelib/openapi.yaml: valid OpenAPI 3.1, true to the app's routes and error codes, and
what GET /openapi.yaml serves."""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import yaml
from chalice.test import Client
from openapi_spec_validator import OpenAPIV31SpecValidator, validate
from schemathesis.core.result import Ok

import app as app_module
from chalicelib.core import errors

SPEC_PATH = Path(app_module.__file__).resolve().parent / "chalicelib" / "openapi.yaml"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
# Codes of errors.py no route answers: the base class's default (every error sagegate raises
# is a subclass with its own code).
NEVER_ANSWERED = {errors.SagegateError.CODE}
# Codes Chalice itself answers with (an unhandled exception; a binary answer to a request whose
# Accept header names no binary type), and API Gateway's own on deployed stages
# (sagegate/deploy/gateway_responses.py).
CHALICE_CODES = {"InternalServerError", "BadRequest", "UnsupportedMediaType"}
GATEWAY_CODES = {"Forbidden", "Throttled", "QuotaExceeded", "GatewayError", "PayloadTooLarge"}


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(SPEC_PATH.read_text(encoding="utf-8"))
    return document


def _error_codes() -> set[str]:
    return {cls.CODE for _, cls in inspect.getmembers(errors, inspect.isclass)
            if issubclass(cls, errors.SagegateError)}


def _enum(spec: dict[str, Any], name: str) -> set[str]:
    schema = spec["components"]["schemas"][name]
    if "enum" in schema:
        return set(schema["enum"])
    return set(schema["allOf"][1]["properties"]["Code"]["enum"])


def test_it_is_valid_openapi_3_1(spec: dict[str, Any]) -> None:
    assert spec["openapi"].startswith("3.1.")
    validate(spec, cls=OpenAPIV31SpecValidator)
    loaded = schemathesis.openapi.from_dict(spec)
    assert all(isinstance(result, Ok) for result in loaded.get_all_operations())


def test_its_paths_and_methods_are_the_apps_routes(spec: dict[str, Any]) -> None:
    described = {path: {method.upper() for method in item if method in METHODS}
                 for path, item in spec["paths"].items()}
    routed = {path: set(methods) for path, methods in app_module.app.routes.items()}
    assert described == routed


def test_every_operation_has_an_id_and_documents_its_errors(spec: dict[str, Any]) -> None:
    ids = []
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            if method not in METHODS:
                continue
            ids.append(operation["operationId"])
            assert "200" in operation["responses"], (method, path)
            assert "500" in operation["responses"], (method, path)
    assert len(ids) == len(set(ids))


def test_every_error_code_a_route_can_answer_is_in_the_error_enum(spec: dict[str, Any]) -> None:
    codes = _enum(spec, "ErrorCode")
    assert _error_codes() - NEVER_ANSWERED <= codes
    assert codes >= CHALICE_CODES | GATEWAY_CODES
    # and nothing else: each code the enum lists is answered by someone
    assert codes <= _error_codes() - NEVER_ANSWERED | CHALICE_CODES | GATEWAY_CODES


@pytest.mark.parametrize(("schema", "required"), [
    ("PredictError", {errors.InvalidJSONError, errors.MissingImageError,
                      errors.InvalidBase64Error, errors.InvalidImageError,
                      errors.InvalidParameterError, errors.InvalidVariantError,
                      errors.PayloadTooLargeError, errors.ImageTooLargeError,
                      errors.UnsupportedMediaTypeError, errors.EndpointError,
                      errors.EndpointNotFoundError, errors.ModelError,
                      errors.InvalidEndpointResponseError, errors.EndpointUnavailableError,
                      errors.EndpointTimeoutError, errors.PreprocessingTimeoutError,
                      errors.ConfigurationError}),
    ("ModelPredictError", {errors.SignatureMismatchError, errors.InvalidInputError,
                           errors.ModelNotFoundError, errors.HandlerError,
                           errors.EndpointUnavailableError, errors.PreprocessingTimeoutError,
                           errors.ConfigurationError}),
    ("ResizeError", {errors.NotAcceptableError, errors.ImageTooLargeError,
                     errors.PayloadTooLargeError, errors.InvalidImageError}),
    ("ModelNotFoundError", {errors.ModelNotFoundError}),
    ("NotFoundError", {errors.NotFoundError}),
])
def test_each_routes_error_enum_holds_its_codes(spec: dict[str, Any], schema: str,
                                                 required: set[type[errors.SagegateError]]
                                                 ) -> None:
    codes = _enum(spec, schema)
    assert {cls.CODE for cls in required} <= codes
    assert codes <= _enum(spec, "ErrorCode")


def test_each_error_status_is_documented_where_it_can_happen(spec: dict[str, Any]) -> None:
    predict = spec["paths"]["/predict"]["post"]["responses"]
    model = spec["paths"]["/models/{name}/predict"]["post"]["responses"]
    for cls in (errors.InvalidJSONError, errors.PayloadTooLargeError, errors.ImageTooLargeError,
                errors.UnsupportedMediaTypeError, errors.EndpointError,
                errors.EndpointUnavailableError, errors.EndpointTimeoutError,
                errors.ConfigurationError):
        assert str(cls.STATUS_CODE) in predict and str(cls.STATUS_CODE) in model
    assert "Retry-After" in spec["components"]["responses"]["PredictUnavailable"]["headers"]
    assert "406" in spec["paths"]["/resize"]["post"]["responses"]
    assert "404" in spec["paths"]["/models/{name}"]["get"]["responses"]


def test_only_the_open_routes_drop_the_api_key(spec: dict[str, Any]) -> None:
    assert spec["components"]["securitySchemes"]["api_key"] == {
        **spec["components"]["securitySchemes"]["api_key"],
        "type": "apiKey", "in": "header", "name": "x-api-key"}
    assert {"api_key": []} in spec["security"]
    open_routes = {path for path, item in spec["paths"].items()
                   if item["get" if "get" in item else "post"].get("security") == []}
    assert open_routes == {"/health", "/", "/static/{name}", "/openapi.yaml"}


def test_get_openapi_yaml_serves_the_file() -> None:
    with Client(app_module.app) as client:
        response = client.http.get("/openapi.yaml")
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/yaml"
    assert response.body == SPEC_PATH.read_bytes()
