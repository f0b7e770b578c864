"""JSON bodies, parsed in one place: every way the parser fails is the client's ``InvalidJSON``."""
from __future__ import annotations

import json
import math
from typing import Any

from chalicelib.core.errors import InvalidJSONError

_MAX_INT_DIGITS = 64  # longer JSON integers are out of every range: no 4300-digit conversion


def _parse_json_int(text: str) -> float:
    # an integer this long is out of every range sagegate checks; say so there, with the range
    if len(text) > _MAX_INT_DIGITS:
        return -math.inf if text.startswith("-") else math.inf
    return int(text)


def load_json(body: bytes, *, assumed: bool = False) -> Any:
    """Parse a JSON body (UTF-8, -16 or -32, as JSON allows).

    Args:
        assumed: no Content-Type was sent and JSON was assumed (the message says so).

    Raises:
        InvalidJSONError: malformed, not UTF, nested too deep for the parser, or anything else.
    """
    try:  # json: for megabytes of base64 text, faster than orjson here
        return json.loads(body, parse_int=_parse_json_int)
    except Exception:  # ValueError, RecursionError (deep nesting), MemoryError: all the client's
        hint = (" No Content-Type header was sent, so JSON was assumed: for a raw image send "
                "Content-Type: image/jpeg, image/png, image/webp or application/octet-stream."
                if assumed else "")
        raise InvalidJSONError("The request body is not valid JSON." + hint) from None
