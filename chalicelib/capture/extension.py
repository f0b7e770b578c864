"""A Lambda internal extension that stores each invocation's capture records after its response.

Lambda freezes an execution environment once the runtime and every registered extension have
asked for their next event. An internal extension is a thread of the function's own process,
registered with the Extensions API during init, for ``INVOKE`` events only. For each
invocation this one waits until the handler has returned (:meth:`AfterHandlers.handler_ended`,
called by ``app.py``'s middleware as every handler ends), so the runtime is already sending the
response, then flushes the capture writer within the invocation's deadline, and only then asks
for its next event: the environment is not frozen while records wait in memory, and the caller
never waits for them.

SnapStart: the Extensions API was listed as unsupported when SnapStart launched, and no AWS
text says whether an extension registered before a snapshot survives a restore (its
registration and its pending ``next`` call are connections to the runtime API made before the
snapshot). Under SnapStart sagegate therefore registers no extension: the middleware flushes
the writer itself before the response leaves (:meth:`AfterHandlers.handler_ended`), as an
inline capture would store the record; the before-snapshot hook flushes too
(``Capturer.close``).

Only the standard library is used, and the core modules that use nothing else (lifecycle,
environment, pending): the extension starts before anything else is imported.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from chalicelib.core import environment, lifecycle
from chalicelib.core.pending import Pending

LOG = logging.getLogger("sagegate.capture")

RUNTIME_API = "AWS_LAMBDA_RUNTIME_API"  # host:port of the runtime and Extensions APIs
EXTENSION_NAME = "sagegate-capture"
BASE = "/2020-01-01/extension"
DEADLINE_MARGIN_SECONDS = 0.5
"""What a flush leaves of the invocation's time (the next call must still be made)."""

Flush = Callable[[float | None], bool]  # the capture writer's flush(timeout)


FINISHED = Pending()
"""This process's invocations: handed as the extension hears of one, settled as its handler
returns (the middleware counts them; a handler may return first)."""


class CaptureExtension:
    """The internal extension (see the module)."""

    def __init__(self, api: str, flush: Flush, finished: Pending = FINISHED,
                 clock: Callable[[], float] = time.time) -> None:
        host, _, port = api.rpartition(":")
        self._host, self._port = host or api, int(port) if port.isdigit() else 80
        self._flush = flush
        self._finished = finished
        self._clock = clock
        self._id = ""
        self.invocations = 0
        self._thread: threading.Thread | None = None

    def register(self) -> None:
        """Register for INVOKE events (during init, before the runtime's first next call);
        OSError or ValueError when the Extensions API refused or did not answer."""
        status, headers, _ = self._call("POST", f"{BASE}/register",
                                        {"Lambda-Extension-Name": EXTENSION_NAME},
                                        json.dumps({"events": ["INVOKE"]}).encode())
        identifier = headers.get("lambda-extension-identifier", "")
        if status != 200 or not identifier:
            raise ValueError(f"the Extensions API answered {status} to the registration")
        self._id = identifier

    def handler_ended(self) -> None:
        self._finished.settle()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="capture-extension",
                                        daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            try:
                event = self._next()
            except Exception as error:  # the environment is going away, or the API is gone
                LOG.warning("capture extension stopped: %s: %s", type(error).__name__, error)
                return
            if event.get("eventType") != "INVOKE":
                continue
            self.invocations += 1
            self._finished.hand()
            deadline = float(event.get("deadlineMs", 0)) / 1000.0 or None
            self._finished.wait(self._left(deadline))
            if not self._flush(self._left(deadline)):
                LOG.warning("capture extension: records still held at the invocation's "
                            "deadline; they are stored with the next one")

    def _left(self, deadline: float | None) -> float | None:
        if deadline is None:
            return None
        return max(0.0, deadline - self._clock() - DEADLINE_MARGIN_SECONDS)

    def _next(self) -> dict[str, Any]:
        status, _, body = self._call("GET", f"{BASE}/event/next",
                                     {"Lambda-Extension-Identifier": self._id}, None)
        if status != 200:
            raise ValueError(f"the Extensions API answered {status} to next")
        event = json.loads(body)
        return event if isinstance(event, dict) else {}

    def _call(self, method: str, path: str, headers: dict[str, str],
              body: bytes | None) -> tuple[int, dict[str, str], bytes]:
        import http.client  # (on Lambda only: an API's cold start elsewhere skips email.*)

        connection = http.client.HTTPConnection(self._host, self._port)  # no timeout: next
        try:  # blocks until Lambda has an event
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            return (response.status, {name.lower(): value for name, value in
                                      response.getheaders()}, response.read())
        finally:
            connection.close()


class AfterHandlers:
    """What happens to held capture records as each handler ends (``app.py``'s middleware
    calls :meth:`handler_ended`)."""

    def __init__(self, flush: Flush, extension: CaptureExtension | None,
                 on_lambda: bool) -> None:
        self._flush = flush
        self.extension = extension
        self._on_lambda = on_lambda
        self.acts = extension is not None or on_lambda
        """Whether a handler's end does anything here (off Lambda the writer's thread and the
        process's exit store the records)."""

    def held_work_waits(self) -> str | None:
        """Why work held after a response would hold the response itself here (on Lambda
        without the extension), or None."""
        if self.extension is None and self._on_lambda:
            return ("this Lambda environment runs no after-response extension (SnapStart, or "
                    "its registration failed): a shadow call would delay the caller's answer")
        return None

    def handler_ended(self, remaining_seconds: float | None) -> None:
        """A handler returned: the extension flushes after the response; without it, on
        Lambda, the records are stored now, within the invocation's time; elsewhere the
        writer's thread keeps storing them (flushed as the process exits)."""
        if self.extension is not None:
            self.extension.handler_ended()
        elif self._on_lambda:
            self._flush(None if remaining_seconds is None
                        else max(0.0, remaining_seconds - DEADLINE_MARGIN_SECONDS))


def start(flush: Flush, environ: dict[str, str] | None = None) -> CaptureExtension | None:
    """Register and start the extension on Lambda, not under SnapStart; None otherwise or
    when registration failed (logged: the middleware then flushes in the handler)."""
    environ = dict(environment.variables()) if environ is None else environ
    api = environ.get(RUNTIME_API, "")
    if not api or lifecycle.snap_start(environ):
        return None
    extension = CaptureExtension(api, flush)
    try:
        extension.register()
    except (OSError, ValueError) as error:
        LOG.warning("capture extension not registered (%s: %s); records are stored before "
                    "each response instead", type(error).__name__, error)
        return None
    extension.start()
    return extension
