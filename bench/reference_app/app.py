"""The 2018 prediction front-end, as a Chalice app, for the end-to-end benchmark only.

Same provenance and same NumPy 2 port as ``bench/reference.py`` (read its docstring): the
client posts ``{"data": "<base64 image>", "topk": 3}``; the original image bytes go to the
endpoint as ``application/x-image``; the answer is parsed with ``ast.literal_eval``. Kept
self-contained, as the original was: ``chalice local`` runs it from this directory.
"""
from __future__ import annotations

import ast
import base64
import os
from typing import Any

import boto3
import numpy as np
from chalice import Chalice

ENDPOINT_NAME = os.environ["ENDPOINT_NAME"]
runtime = boto3.client("runtime.sagemaker")

app = Chalice(app_name="sagegate-2018-reference")
app.debug = True


@app.route("/", methods=["POST"])
def index() -> dict[str, Any]:
    """Classify the base64 image in ``data``; ``topk`` classes (default: all)."""
    request: Any = app.current_request
    body = request.json_body
    image = base64.b64decode(body["data"])
    response = runtime.invoke_endpoint(EndpointName=ENDPOINT_NAME,
                                       ContentType="application/x-image", Body=image)
    probs = np.array(ast.literal_eval(response["Body"].read().decode()))
    topk = body.get("topk", len(probs))
    indexes = np.argsort(probs)[::-1][:topk]
    pairs = list(zip((indexes + 1).tolist(), probs[indexes].tolist(), strict=True))
    return {"response": str(pairs)}
