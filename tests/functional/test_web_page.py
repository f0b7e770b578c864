"""The web page's files as the API serves them: GET / and GET /static/{name} (chalicelib/web/).

The page itself runs in a real browser in tests/integration/test_web.py; here: the answers'
types and headers, that nothing outside chalicelib/web/ is served, and that the page keeps
to its Content-Security-Policy (no inline script or style) and to relative URLs (it lives
under an API Gateway stage prefix such as /api/).
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from chalice.test import Client

import app as app_module
from chalicelib.core.errors import NotFoundError
from chalicelib.http import static

WEB = Path(static.WEB_DIR)


def header(response: Any, name: str) -> str:
    """A response header, whatever its case."""
    for key, value in response.headers.items():
        if key.lower() == name.lower():
            return str(value)
    raise AssertionError(f"no {name} header in {dict(response.headers)}")


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with Client(app_module.app, stage_name="local") as test_client:
        yield test_client


def assert_served(response: Any, content_type: str) -> None:
    assert response.status_code == 200, response.body
    assert header(response, "Content-Type") == content_type
    policy = header(response, "Content-Security-Policy")
    for directive in ("default-src 'self'", "script-src 'self'", "style-src 'self'",
                      "connect-src 'self'"):
        assert directive in policy
    assert "unsafe-inline" not in policy
    assert header(response, "X-Content-Type-Options") == "nosniff"


def test_the_page_is_served_at_the_root_without_auth_headers(client: Client) -> None:
    response = client.http.get("/")
    assert_served(response, "text/html; charset=utf-8")
    assert response.body == (WEB / "index.html").read_bytes()


@pytest.mark.parametrize(("name", "content_type"), [
    ("app.js", "text/javascript; charset=utf-8"),
    ("app.css", "text/css; charset=utf-8"),
    ("icon.svg", "image/svg+xml"),
])
def test_the_page_files_are_served_with_their_types(client: Client, name: str,
                                                     content_type: str) -> None:
    response = client.http.get(f"/static/{name}")
    assert_served(response, content_type)
    assert response.body == (WEB / name).read_bytes()


def test_nothing_outside_the_web_folder_is_served(client: Client) -> None:
    app_source = Path(app_module.__file__).read_bytes()
    # no route matches a path with a dot segment: the router refuses it (API Gateway's 403)
    dotted = client.http.get("/static/../app.py")
    assert dotted.status_code in (403, 404)
    assert app_source not in dotted.body
    # the same name as API Gateway hands it over, decoded into the path parameter
    for name in ("..%2Fapp.py", "app.py", "index", ".app.js", "%2e%2e", "APP.JS"):
        response = client.http.get(f"/static/{name}")
        assert response.status_code == 404, name
        assert b'"Code":"NotFound"' in response.body.replace(b" ", b"")
    with pytest.raises(NotFoundError):
        static.web_file("../app.py")


class _Page(HTMLParser):
    """Every URL index.html refers to, and anything inline the CSP would refuse."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.inline: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for attribute in ("src", "href"):
            if values.get(attribute):
                self.urls.append(str(values[attribute]))
        if tag == "style" or "style" in values:
            self.inline.append(f"<{tag}> style")
        self.inline += [f"<{tag} {name}>" for name in values if name.startswith("on")]
        if tag == "script" and not values.get("src"):
            self.inline.append("<script> without src")


def test_the_page_keeps_to_its_policy_and_to_relative_urls(client: Client) -> None:
    page = _Page()
    page.feed((WEB / "index.html").read_text(encoding="utf-8"))
    assert page.inline == []
    assert page.urls
    for url in page.urls:
        # relative: under a stage prefix (/api/) a leading slash would leave the stage
        assert not re.match(r"^([a-z]+:|/)", url), url
        if url.startswith("static/"):
            assert client.http.get("/" + url).status_code == 200, url
    script = (WEB / "app.js").read_text(encoding="utf-8")
    # the script calls the API by relative paths only, and loads nothing from elsewhere
    assert not re.search(r"""["'`]/[a-z]""", script)
    assert not re.search(r"https?://", script)
    assert "innerHTML" not in script and "eval(" not in script
    assert "setAttribute(\"style\"" not in script
    for css in WEB.glob("*.css"):
        assert not re.search(r"@import|url\(\s*['\"]?(https?:)?//", css.read_text()), css


def test_the_page_without_the_stages_slash_is_redirected_to_it() -> None:
    """API Gateway serves the page at /api and /api/; only the second resolves its relative
    URLs inside the stage, so the first is redirected."""
    import app as app_module

    event = {"resource": "/", "path": "/", "httpMethod": "GET", "headers": {},
             "multiValueHeaders": {}, "queryStringParameters": None,
             "multiValueQueryStringParameters": None, "pathParameters": None,
             "stageVariables": None, "body": None, "isBase64Encoded": False,
             "requestContext": {"resourcePath": "/", "path": "/api", "httpMethod": "GET",
                                "stage": "api", "requestId": "r-1",
                                "identity": {"sourceIp": "203.0.113.7"}}}
    answer = app_module.app(event, None)
    assert answer["statusCode"] == 301
    assert answer["headers"]["Location"] == "/api/"
    event["requestContext"]["path"] = "/api/"
    assert app_module.app(event, None)["statusCode"] == 200


def test_every_element_the_script_looks_up_is_in_the_page() -> None:
    """app.js finds its elements by id (``$("...")``, ``document.getElementById``): a renamed or
    missing one is a script error on load, before any request."""
    script = (WEB / "app.js").read_text(encoding="utf-8")
    page = (WEB / "index.html").read_text(encoding="utf-8")
    wanted = set(re.findall(r"""\$\("([a-z-]+)"\)""", script))
    wanted |= set(re.findall(r"""getElementById\("([a-z-]+)"\)""", script))
    assert {"chat-log", "chat-input", "chat-stop", "chat-usage", "chat-first"} <= wanted
    present = set(re.findall(r'\sid="([a-z-]+)"', page))
    assert wanted - present == set()


def test_the_models_listing_tells_the_page_which_models_chat(client: Client) -> None:
    """The page offers a chat box for a model GET /models lists with pipeline ``llm`` and the
    chat route among its ``llm.openai_paths``; image models keep their controls."""
    import json

    listing = json.loads(client.http.get("/models").body)
    models = {model["name"]: model for model in listing["models"]}
    chat = models["smollm2"]
    assert chat["pipeline"] == "llm"
    assert "/v1/chat/completions" in chat["llm"]["openai_paths"]
    assert models["efficientnet-lite0"]["pipeline"] == "image-classification"
    script = (WEB / "app.js").read_text(encoding="utf-8")
    assert 'LLM_PIPELINE = "llm"' in script and 'CHAT_PATH = "v1/chat/completions"' in script
    # the chat box and the image controls are each shown for their own kind of model only
    page = (WEB / "index.html").read_text(encoding="utf-8")
    assert 'class="panel chat chat-only"' in page and 'class="panel results image-only"' in page
    css = (WEB / "app.css").read_text(encoding="utf-8")
    assert "main.chat-mode .image-only, main:not(.chat-mode) .chat-only" in css
