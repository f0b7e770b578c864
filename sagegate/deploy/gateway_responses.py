"""API Gateway's own error answers, in sagegate's error shape and with advice that helps.

API Gateway refuses a body over 10 MB, throttles, enforces quotas and checks API keys itself,
answering ``{"message": "..."}``; these responses answer ``{"Code", "Message", "request_id"}``
like sagegate, and the 413 says how to send a smaller image. They are merged into the OpenAPI
definition (``x-amazon-apigateway-gateway-responses``), not separate resources, so every
deployment of the stage has them.
"""
from __future__ import annotations

import json
from typing import Any

IMAGE_LIMIT_ADVICE = (
    "sagegate takes images up to about 4.4 MB: Lambda accepts 6 MB per request and the image "
    "travels base64-encoded (4/3 larger), as JSON or as a binary body alike. Resize the image on "
    "the client (the model sees 224x224 pixels; 1 megapixel is plenty) or re-encode it as JPEG."
)

# type -> (status, Code, Message); no status keeps API Gateway's own (502, 504, ...).
_RESPONSES: dict[str, tuple[int | None, str, str]] = {
    "REQUEST_TOO_LARGE": (413, "PayloadTooLarge",
                          "The request is over API Gateway's 10 MB limit. " + IMAGE_LIMIT_ADVICE),
    "THROTTLED": (429, "Throttled", "Too many requests: retry after a short wait."),
    "QUOTA_EXCEEDED": (429, "QuotaExceeded", "This API key's request quota is used up."),
    "INVALID_API_KEY": (403, "Forbidden", "Send a valid API key in the x-api-key header."),
    "MISSING_AUTHENTICATION_TOKEN": (
        403, "Forbidden",
        "No such route, or the request is not authenticated. Routes: POST /predict, "
        "POST /models/{name}/predict, GET /models, POST /resize, GET /health, GET / "
        "(the web page), GET /openapi.yaml."),
    "DEFAULT_5XX": (
        None, "GatewayError",
        "API Gateway got no answer from sagegate ($context.error.responseType). A request "
        "over Lambda's 6 MB limit ends here too: " + IMAGE_LIMIT_ADVICE),
}


def gateway_responses(cors_origin: str = "") -> dict[str, Any]:
    """The ``x-amazon-apigateway-gateway-responses`` extension; with ``cors_origin`` browsers
    from there may read these errors too."""
    headers = {"gatewayresponse.header.Access-Control-Allow-Origin": f"'{cors_origin}'"}
    extension: dict[str, Any] = {}
    for kind, (status, code, message) in _RESPONSES.items():
        body = {"Code": code, "Message": message, "request_id": "$context.requestId"}
        response: dict[str, Any] = {"responseTemplates": {"application/json": json.dumps(body)}}
        if status is not None:
            response["statusCode"] = status
        parameters = dict(headers) if cors_origin else {}
        if kind == "THROTTLED":
            parameters["gatewayresponse.header.Retry-After"] = "'1'"
        if parameters:
            response["responseParameters"] = parameters
        extension[kind] = response
    return extension
