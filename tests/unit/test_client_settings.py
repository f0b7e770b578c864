"""One set of defaults for ``Client()`` and ``sagegate predict``: the URL, the API key and the
timeouts, each an explicit argument, else its environment variable, else the default."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sagegate.client import Client
from sagegate.client import cli as predict_cli
from sagegate.client.http import DEFAULT_URL, ClientError
from sagegate.client.jobs import DEFAULT_WAIT_S
from sagegate.client.settings import (
    API_KEY_ENV,
    DEFAULT_TIMEOUT_S,
    TIMEOUT_ENV,
    URL_ENV,
    WAIT_TIMEOUT_ENV,
    ClientSettings,
)
from tests import httpfake

ENV = {URL_ENV: "http://env.invalid:1", API_KEY_ENV: "env-key", TIMEOUT_ENV: "7",
       WAIT_TIMEOUT_ENV: "90"}


@pytest.fixture
def server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []

    def route(request: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        seen.append(request)
        return 200, {"Content-Type": "application/json"}, b'{"default": "m", "models": []}'

    with httpfake.serve(route) as url:
        yield url, seen


def test_client_reads_the_url_and_the_key_from_the_environment(
        server: tuple[str, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch) -> None:
    url, seen = server
    monkeypatch.setenv(URL_ENV, url)
    monkeypatch.setenv(API_KEY_ENV, "k-123")
    with Client() as client:
        assert client.models()["default"] == "m"
    assert seen[0]["headers"]["x-api-key"] == "k-123"


def test_an_argument_beats_the_environment_which_beats_the_default() -> None:
    assert ClientSettings.resolve(environ={}) == ClientSettings(
        DEFAULT_URL, None, DEFAULT_TIMEOUT_S, DEFAULT_WAIT_S)
    assert ClientSettings.resolve(environ=ENV) == ClientSettings(
        "http://env.invalid:1", "env-key", 7.0, 90.0)
    assert ClientSettings.resolve("http://arg.invalid:2", "arg-key", 3, 4, environ=ENV) == \
        ClientSettings("http://arg.invalid:2", "arg-key", 3.0, 4.0)
    assert ClientSettings.resolve(api_key="", environ=ENV).api_key == ""  # no key, on purpose


def test_the_client_and_the_command_line_settle_the_same_way(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    library = Client()
    parser = predict_cli.predict_parser("sagegate predict")
    command = predict_cli.client_of(parser, parser.parse_args(["x.jpg"]))
    assert library.settings == command.settings == ClientSettings.resolve(environ=ENV)
    assert command.wait_timeout == library.wait_timeout == 90.0
    given = predict_cli.client_of(parser, parser.parse_args(
        ["x.jpg", "--url", "http://flag.invalid:3", "--timeout", "2", "--wait-timeout", "5"]))
    assert given.settings == ClientSettings("http://flag.invalid:3", "env-key", 2.0, 5.0)


@pytest.mark.parametrize("value", ["soon", "0", "-1", "nan", "inf"])
def test_a_bad_timeout_variable_is_named(value: str, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(TIMEOUT_ENV, value)
    with pytest.raises(ValueError, match=TIMEOUT_ENV):
        Client()
    parser = predict_cli.predict_parser("sagegate predict")
    with pytest.raises(SystemExit) as stopped:
        predict_cli.client_of(parser, parser.parse_args(["x.jpg"]))
    assert stopped.value.code == 2 and TIMEOUT_ENV in capsys.readouterr().err


def test_the_job_wait_defaults_to_the_clients_wait_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from sagegate.client import http as http_client
    from sagegate.client import jobs as jobs_client

    monkeypatch.setenv(WAIT_TIMEOUT_ENV, "12")
    client = Client("http://127.0.0.1:9")
    monkeypatch.setattr(client, "_job", lambda job_id: ({"state": "running"}, None))
    clock = iter(float(second) for second in range(100))  # a second a read
    monkeypatch.setattr(jobs_client, "_clock", lambda: next(clock))
    monkeypatch.setattr(http_client, "_sleep", lambda seconds: None)
    with pytest.raises(ClientError, match="still running after 12 s") as waited:
        client.wait("j")
    assert waited.value.code == "WaitTimeout"
