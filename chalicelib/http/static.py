"""The files the API serves as they are: the web page (``GET /``, ``chalicelib/web/``) and the
OpenAPI description (``GET /openapi.yaml``), read once and kept.

Only a file directly in ``chalicelib/web/`` with a known type is served (no sub-folders, no
dot files, no ``..``); every answer says what it is (``nosniff``) and what it may load (a
Content-Security-Policy of its own origin only: no CDN, nothing inline; when jobs are on, the
page may also connect to the jobs bucket's S3 endpoint, where it posts uploads and reads
results: :func:`upload_origins`).
"""
from __future__ import annotations

import functools
import re
import urllib.parse
from collections.abc import Mapping
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


_ORIGIN = re.compile(r"^https?://[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?\Z")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-[0-9]{1,2}\Z")


def upload_origins(bucket: str, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The CSP connect-src for uploads and job results, as boto3 presigns them: the S3 endpoint
    given (``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``: moto's server locally), else the
    bucket's global and regional virtual-hosted URLs (``AWS_REGION``). None when jobs are off
    or an endpoint is not a plain origin (never a wildcard)."""
    if not bucket:
        return ()
    endpoint = (environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL") or "")
    if endpoint:
        parts = urllib.parse.urlsplit(endpoint.strip())
        origin = f"{parts.scheme}://{parts.netloc}"
        return (origin,) if _ORIGIN.match(origin) else ()
    origins = [f"https://{bucket}.s3.amazonaws.com"]
    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or ""
    if _REGION.match(region):
        origins.append(f"https://{bucket}.s3.{region}.amazonaws.com")
    return tuple(origins) if all(_ORIGIN.match(origin) for origin in origins) else ()


@functools.lru_cache(maxsize=8)
def security_headers(connect: tuple[str, ...] = ()) -> dict[str, str]:
    """:data:`SECURITY_HEADERS`, with the page also allowed to connect to ``connect``'s
    origins (:func:`upload_origins`)."""
    if not connect:
        return SECURITY_HEADERS
    policy = SECURITY_HEADERS["Content-Security-Policy"].replace(
        "connect-src 'self'", "connect-src 'self' " + " ".join(connect))
    return {**SECURITY_HEADERS, "Content-Security-Policy": policy}


@functools.lru_cache(maxsize=32)
def web_file(name: str) -> tuple[str, str]:
    """A file of the web page and its content type; ``NotFoundError`` if no such file."""
    suffix = Path(name).suffix
    path = WEB_DIR / name
    if not _NAME.match(name) or suffix not in CONTENT_TYPES or not path.is_file():
        raise NotFoundError(f"No file {name[:64]!r} here.")
    return path.read_text(encoding="utf-8"), CONTENT_TYPES[suffix]


@functools.lru_cache(maxsize=1)
def openapi() -> str:
    """The OpenAPI description of this API."""
    return OPENAPI.read_text(encoding="utf-8")
