"""``POST /resize``'s answer: one image resized to exactly the width and height asked for."""
from __future__ import annotations

from chalicelib.core.config import Settings
from chalicelib.http.exchange import Exchange, HttpAnswer
from chalicelib.images.resizer import resize_image
from chalicelib.inference.pipeline import limits_from
from chalicelib.reading.resize import read_resize


def resize_answer(exchange: Exchange, settings: Settings) -> HttpAnswer:
    """The resized image: the image itself (``binary``), else JSON with it in base64.

    Raises:
        SagegateError: (a 4xx subclass) the request or the image is not acceptable.
    """
    asked = read_resize(exchange.http_request(), max_body_bytes=settings.max_body_bytes,
                        max_output_pixels=settings.max_output_pixels)
    resized = resize_image(asked.image, asked.options, limits_from(settings))
    if asked.options.binary:
        return HttpAnswer(resized.data, {"Content-Type": asked.options.content_type})
    return HttpAnswer(resized.to_dict())
