"""sagegate's HTTP, for :mod:`sagegate.client`: one ``urllib3.PoolManager`` per client
(keep-alive, safe to share between threads), ``x-api-key`` to sagegate only, never to S3, and at
most ``retries`` retries of a 503 or a failed connection by sagegate's one retry policy
(:mod:`chalicelib.core.retries`: full jitter, never sooner than the 503's ``Retry-After``, at
most :data:`MAX_RETRY_AFTER_S`, within the client's retry quota, so a failing server is not sent
every request ``retries + 1`` times)."""
from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Self

import urllib3

from chalicelib.core.retries import Retrier, RetryPolicy, RetryQuota, parse_retry_after
from sagegate.client import transfer

DEFAULT_URL = "http://127.0.0.1:8000"
MAX_RETRY_AFTER_S = 10.0
"""The longest a client waits before retrying a 503, whatever its ``Retry-After`` says."""
_CONNECTION_ERRORS = (urllib3.exceptions.NewConnectionError,
                      urllib3.exceptions.ConnectTimeoutError,
                      urllib3.exceptions.ProtocolError)
_sleep = time.sleep  # the tests replace it
_random = random.random  # the backoff's jitter; the tests replace it

Body = bytes | Callable[[], Iterable[bytes]] | None
"""A request body: bytes, or a function giving a new stream of it for each attempt."""


class ClientError(Exception):
    """An error answer (``status`` > 0: sagegate's ``Code`` and ``Message``, or S3's), or
    none: ``status`` 0 with code ``ConnectionError`` (no answer at all), ``WaitTimeout`` (a
    job that did not end in time) or a failed job's code
    (:class:`~sagegate.client.jobs.JobFailedError`)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}" if status else f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message


def retry_after_seconds(value: str | None) -> float | None:
    """A 503's ``Retry-After`` (seconds or an HTTP date) in seconds, at most
    :data:`MAX_RETRY_AFTER_S`; None when absent or unreadable."""
    seconds = parse_retry_after(value)
    if seconds is None or not math.isfinite(seconds):
        return None
    return min(seconds, MAX_RETRY_AFTER_S)


def retry_policy(retries: int) -> RetryPolicy:
    """``retries`` retries, 0.25 s doubling to :data:`MAX_RETRY_AFTER_S`, no time budget of its
    own (the server has one)."""
    return RetryPolicy(max_attempts=retries + 1, budget_seconds=math.inf, base_delay=0.25,
                       max_delay=MAX_RETRY_AFTER_S)


def json_object(response: urllib3.BaseHTTPResponse, what: str) -> dict[str, Any]:
    """A JSON object answer.

    Raises:
        ClientError: not one (``InvalidAnswer``).
    """
    try:
        answer = json.loads(response.data)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise ClientError(response.status, "InvalidAnswer", f"{what}: the answer is not a "
                          f"JSON object ({bytes(response.data[:80])!r}).")
    return answer


def check_s3(response: urllib3.BaseHTTPResponse) -> urllib3.BaseHTTPResponse:
    """An S3 answer if it is a success.

    Raises:
        ClientError: S3's refusal, with ``Code`` and ``Message`` from its XML error
            (``EntityTooLarge``, ``AccessDenied`` for an expired policy ...).
    """
    if response.status < 300:
        return response
    said = transfer.s3_error(response.data)
    if said is None:
        return HttpClient.check(response)
    raise ClientError(response.status, *said)


class HttpClient:
    """Requests to sagegate (and to S3's presigned URLs) with the client's retries; arguments as
    :class:`sagegate.client.Client`'s."""

    def __init__(self, url: str = DEFAULT_URL, api_key: str | None = None, *, retries: int = 3,
                 timeout: float = 30, pool: int = 8) -> None:
        self.url = url.rstrip("/")
        self.retries = max(0, retries)
        self.quota = RetryQuota()
        """The retry quota every thread using this client shares."""
        self._headers = {"x-api-key": api_key} if api_key else {}
        self._http = urllib3.PoolManager(maxsize=max(1, pool), retries=False,
                                         timeout=urllib3.Timeout(connect=timeout, read=timeout))

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None) -> urllib3.BaseHTTPResponse:
        """One request to the API with the client's retries; any answer but a 503 retried out is
        given back as it is (errors read with :meth:`check`).

        Raises:
            ClientError: no connection could be made (status 0, ``ConnectionError``).
        """
        return self._send(method, self.url + path, body, {**self._headers, **(headers or {})})

    def _send(self, method: str, url: str, body: Body,
              headers: Mapping[str, str]) -> urllib3.BaseHTTPResponse:
        retrier = Retrier(retry_policy(self.retries), self.quota, rng=_random)
        while True:
            try:
                response = self._http.request(method, url, body=body() if callable(body)
                                              else body, headers=dict(headers))
            except _CONNECTION_ERRORS as error:
                delay = retrier.failed()
                if delay is None:
                    raise ClientError(0, "ConnectionError",
                                      f"{method} {url.split('?')[0]}: {error}") from error
                _sleep(delay)
                continue
            if response.status != 503:
                if response.status < 300:  # a success refunds the quota, as in botocore
                    retrier.succeeded()
                return response
            delay = retrier.failed(
                hint=retry_after_seconds(response.headers.get("Retry-After")))
            if delay is None:
                return response
            _sleep(delay)

    @staticmethod
    def check(response: urllib3.BaseHTTPResponse) -> urllib3.BaseHTTPResponse:
        """The response if it is a success.

        Raises:
            ClientError: sagegate's ``Code`` and ``Message`` (other servers': ``HTTP<status>``
                and what they said).
        """
        if response.status < 400:
            return response
        code, message = f"HTTP{response.status}", response.data[:300].decode(errors="replace")
        try:
            body = json.loads(response.data)
        except ValueError:
            body = None
        if isinstance(body, dict):
            code = str(body.get("Code", code))
            message = str(body.get("Message", body.get("message", message)))
        raise ClientError(response.status, code, message)

    def _json(self, method: str, path: str, body: bytes | None = None,
              headers: Mapping[str, str] | None = None) -> Any:
        return json.loads(self.check(self.request(method, path, body, headers)).data)

    # ------------------------------------------------------------------ models

    def close(self) -> None:
        self._http.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

