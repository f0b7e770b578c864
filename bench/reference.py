"""The reference sagegate is measured against: the 2018 front-end, ported to NumPy 2.

Provenance. In April 2018 Julien Simon's post "Using Chalice to serve SageMaker predictions"
put an AWS Chalice app in front of a SageMaker built-in image classification endpoint
(Caltech-256), with a companion Chalice resizer service. That code is what users of this field
copied, and it is the compatibility target in ``CONTRACTS.md`` section 6:

* request ``{"data": "<base64 image>", "topk": 3}``, read with ``current_request.json_body``
  and ``base64.b64decode``;
* the resizer decodes the whole upload with ``cv2.imdecode(..., cv2.IMREAD_COLOR)``, resizes it
  with ``cv2.resize`` (default ``INTER_LINEAR``; the 2018 code passed ``(height, width)``, which
  for a square 224 x 224 target makes no difference) and re-encodes with ``cv2.imencode('.jpg')``;
* ``invoke_endpoint(ContentType='application/x-image')``, the body read, decoded and parsed with
  ``ast.literal_eval``; ``argsort()[::-1][:topk]``; 1-based class ids in the answer.

The only changes are the ones NumPy 2 forces, made the way a maintainer would make them:
``np.fromstring(data, np.uint8)`` became ``np.frombuffer`` and ``.tostring()`` became
``.tobytes()``; numbers are turned into Python ones before ``str()`` so the answer does not
read ``np.int64(...)``. Nothing is made slower or faster than the original on purpose.
"""
from __future__ import annotations

import ast
import base64
import json
from typing import Any

import cv2
import numpy as np

MODEL_SIZE = (224, 224)
CONTENT_TYPE = "application/x-image"


def read_request(body: bytes) -> tuple[bytes, int | None]:
    """``current_request.json_body`` then ``b64decode`` of ``data``; ``topk`` if given."""
    document = json.loads(body)
    return base64.b64decode(document["data"]), document.get("topk")


def preprocess(image: bytes) -> bytes:
    """The 2018 resizer: full-size decode, resize to the model's size, re-encode as JPEG."""
    img: Any = cv2.imdecode(np.frombuffer(image, np.uint8), cv2.IMREAD_COLOR)  # unchecked (2018)
    img = cv2.resize(img, MODEL_SIZE)
    _, buffer = cv2.imencode(".jpg", img)
    return buffer.tobytes()


def invoke(client: Any, endpoint_name: str, payload: bytes) -> str:
    """``invoke_endpoint`` and the body as text, as the 2018 code read it."""
    response = client.invoke_endpoint(EndpointName=endpoint_name, ContentType=CONTENT_TYPE,
                                      Body=payload)
    return str(response["Body"].read().decode())


def parse_probabilities(text: str) -> np.ndarray:
    """``ast.literal_eval`` of the body, as a NumPy array."""
    return np.array(ast.literal_eval(text))


def top_k(probabilities: np.ndarray, k: int | None) -> np.ndarray:
    """0-based indices of the ``k`` highest probabilities (all when ``k`` is None)."""
    return np.argsort(probabilities)[::-1][:k]


def render(probabilities: np.ndarray, indices: np.ndarray) -> dict[str, str]:
    """The 2018 answer: a string of ``(1-based class id, probability)`` tuples."""
    pairs = list(zip((indices + 1).tolist(), probabilities[indices].tolist(), strict=True))
    return {"response": str(pairs)}


def handle(body: bytes, client: Any, endpoint_name: str) -> dict[str, str]:
    """One request through the whole 2018 pipeline (resizer, then prediction)."""
    image, k = read_request(body)
    text = invoke(client, endpoint_name, preprocess(image))
    probabilities = parse_probabilities(text)
    return render(probabilities, top_k(probabilities, k))
