"""The files the API serves as they are: the web page (``GET /``, ``chalicelib/web/``) and the
OpenAPI description (``GET /openapi.yaml``), read once and kept.

Only a file directly in ``chalicelib/web/`` with a known type is served (no sub-folders, no
dot files, no ``..``); every answer says what it is (``nosniff``) and what it may load (a
Content-Security-Policy of its own origin only: no CDN, nothing inline).
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

from chalicelib.core.errors import NotFoundError

WEB_DIR = Path(__file__).resolve().parent.parent / "web"
OPENAPI = Path(__file__).resolve().parent.parent / "openapi.yaml"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".yaml": "application/yaml",
    ".json": "application/json",
}
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}\.[a-z]{2,4}\Z")
# The page loads only its own files and calls only its own API.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' blob: data:; "
                               "style-src 'self'; script-src 'self'; connect-src 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@functools.lru_cache(maxsize=32)
def web_file(name: str) -> tuple[str, str]:
    """A file of the web page: its text and content type.

    Raises:
        NotFoundError: no such file (or a name that is not one).
    """
    suffix = Path(name).suffix
    path = WEB_DIR / name
    if not _NAME.match(name) or suffix not in CONTENT_TYPES or not path.is_file():
        raise NotFoundError(f"No file {name[:64]!r} here.")
    return path.read_text(encoding="utf-8"), CONTENT_TYPES[suffix]


@functools.lru_cache(maxsize=1)
def openapi() -> str:
    """The OpenAPI description of this API."""
    return OPENAPI.read_text(encoding="utf-8")
