"""The open routes' answers: the web page, its assets and the API's OpenAPI description
(:mod:`chalicelib.http.static` reads the files), each with its security headers.

When jobs are on, the page posts uploads to the jobs bucket and reads results from it, so its
Content-Security-Policy also names that bucket's S3 endpoint
(:func:`~chalicelib.http.static.upload_origins`): boto3 reads the SDK's variables
(``AWS_ENDPOINT_URL_S3``, ``AWS_REGION`` ...) when it presigns, so they are read here per page.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

from chalicelib.core import environment
from chalicelib.core.errors import ConfigurationError
from chalicelib.http import static
from chalicelib.http.exchange import HttpAnswer

JobsBucket = Callable[[], str]
"""The stage's jobs bucket (empty: jobs off); may raise ``ConfigurationError``."""


def web_page(path: str, jobs_bucket: JobsBucket,
             environ: Mapping[str, str] | None = None) -> HttpAnswer:
    """The page at ``path`` (the request's own, stage included): ``/api`` is sent to
    ``/api/``, as the page's relative URLs need the stage's slash."""
    if not path.endswith("/"):
        return HttpAnswer("", {"Location": path + "/"}, 301)
    return _file_answer(*static.web_file("index.html"), jobs_bucket, environ)


def web_asset(name: str, jobs_bucket: JobsBucket,
              environ: Mapping[str, str] | None = None) -> HttpAnswer:
    """One of the page's files (its script, style sheet and icons); ``NotFoundError`` if none."""
    return _file_answer(*static.web_file(name), jobs_bucket, environ)


def openapi_description(jobs_bucket: JobsBucket,
                        environ: Mapping[str, str] | None = None) -> HttpAnswer:
    """The OpenAPI 3.1 description of every route."""
    return _file_answer(static.openapi(), "application/yaml", jobs_bucket, environ)


def _file_answer(body: str, content_type: str, jobs_bucket: JobsBucket,
                 environ: Mapping[str, str] | None) -> HttpAnswer:
    try:  # the page may post uploads to the jobs bucket (its CSP); it is served even so
        bucket = jobs_bucket()
    except ConfigurationError:
        bucket = ""
    origins = static.upload_origins(bucket, environment.variables() if environ is None
                                    else environ)
    return HttpAnswer(body, {"Content-Type": content_type, **static.security_headers(origins)})
