"""The shape of one request's way through sagegate (STYLE.md 15): a ``POST
/models/<model>/predict`` on an experiment model (a tensor model, two arms, sticky by a header, a
shadow) through the real app, traced with :func:`sys.setprofile` on the caller's thread.

Counted: the calls into sagegate's own code (``app.py`` and ``chalicelib/``), the distinct
functions and modules they enter, and the switches of module (two calls in a row into different
modules); and the same at the scale of rooms (a package of chalicelib, such as ``http`` or
``cache``; a top-level module is its own room). The shadow's call runs on its pool's thread
after the answer, so it is not on the caller's path and not counted. It is a measure of the
structure, not of time: the same request gives the same counts on every run.

The project is copied with one model added (nothing is written into the tree it reads), and the
app is imported in a child process, so a tree before a change can be measured beside the tree
after it: ``python -m bench.requestpath --project DIR``. The endpoint is a small HTTP server on
127.0.0.1 that answers the model's probabilities; boto3 reaches it through
``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME``, as the local stack's clients do.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench.report import Report
from sagegate.local.processes import copy_project

ROOT = Path(__file__).resolve().parent.parent
MODEL = "iris-experiment"
ROW = {"instances": [[5.1, 3.5, 1.4, 0.2]]}
EXPERIMENT = {
    "name": "iris-ab",
    "arms": [{"name": "a", "endpoint": "iris-a", "weight": 1},
             {"name": "b", "endpoint": "iris-b", "weight": 1}],
    "sticky": "header:X-User",
    "shadow": [{"name": "s", "endpoint": "iris-shadow", "sample": 1.0, "timeout_seconds": 5}],
}
ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
    "SAGEGATE_AUTH": "none", "ENDPOINT_NAME": "efficientnet-lite0",
    "CAPTURE_MODE": "both", "CAPTURE_MAX_BYTES": "200000000",
}
WARM_UP = 3


class _Endpoint(BaseHTTPRequestHandler):
    """InvokeEndpoint on 127.0.0.1: every endpoint answers one row of three probabilities."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"predictions": [[0.9, 0.05, 0.05]]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Amzn-Invoked-Production-Variant", "AllTraffic")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the trace prints its own lines."""


@contextlib.contextmanager
def _endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _project_copy(project: Path, into: Path) -> Path:
    """``project``'s app, chalicelib and Chalice config in ``into``, with the traced model."""
    copy_project(into, project=project)
    iris = json.loads((project / "chalicelib" / "models" / "iris" / "model.json").read_text())
    iris.pop("jobs", None)
    iris.update(endpoint="iris-a", experiment=EXPERIMENT)
    (into / "chalicelib" / "models" / MODEL).mkdir()
    (into / "chalicelib" / "models" / MODEL / "model.json").write_text(json.dumps(iris))
    for extra in ("labels.txt",):
        if (project / "chalicelib" / "models" / "iris" / extra).exists():
            shutil.copy2(project / "chalicelib" / "models" / "iris" / extra,
                         into / "chalicelib" / "models" / MODEL / extra)
    return into


def trace(project: Path) -> dict[str, object]:
    """Trace one request through ``project``'s app; the counts (see the module)."""
    with tempfile.TemporaryDirectory(prefix="sagegate-path-") as tmp, _endpoint() as url:
        copy = _project_copy(project, Path(tmp))
        env = {**os.environ, **ENVIRONMENT, "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": url,
               "CAPTURE_DESTINATION": str(Path(tmp) / "captures"),
               "PYTHONPATH": str(copy)}
        result = Path(tmp) / "trace.json"
        done = subprocess.run([sys.executable, "-c", _CHILD, str(copy), MODEL, str(result),
                               str(WARM_UP)],
                              env=env, cwd=copy, capture_output=True, text=True, timeout=120,
                              check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the traced request failed: {done.stderr.strip()[-2000:]}")
        counts: dict[str, object] = json.loads(result.read_text())
        return counts


# The child: the app imported from the copy, warmed up, then one request traced.
_CHILD = r'''
import json, sys
from pathlib import Path
root, model = Path(sys.argv[1]).resolve(), sys.argv[2]
import app
from chalice.test import Client

def ours(filename):
    path = Path(filename)
    return path == root / "app.py" or root / "chalicelib" in path.parents

def module(filename):
    return ".".join(Path(filename).relative_to(root).with_suffix("").parts)

calls = []
def profile(frame, event, arg):
    if event == "call" and ours(frame.f_code.co_filename):
        code = frame.f_code
        calls.append((module(code.co_filename), code.co_firstlineno, code.co_name))

body = json.dumps({"instances": [[5.1, 3.5, 1.4, 0.2]]})
headers = {"Content-Type": "application/json", "X-User": "one-caller"}
with Client(app.app) as client:
    for _ in range(int(sys.argv[4])):
        answer = client.http.post(f"/models/{model}/predict", body=body, headers=headers)
        assert answer.status_code == 200, answer.body
    sys.setprofile(profile)
    answer = client.http.post(f"/models/{model}/predict", body=body, headers=headers)
    sys.setprofile(None)
    assert answer.status_code == 200, answer.body
modules = [name for name, _, _ in calls]
switches = sum(1 for a, b in zip(modules, modules[1:]) if a != b)
per_module = {}
for name in modules:
    per_module[name] = per_module.get(name, 0) + 1
rooms = [name.split(".")[1] if name.startswith("chalicelib.") and name.count(".") > 1
         else name for name in modules]
room_switches = sum(1 for a, b in zip(rooms, rooms[1:]) if a != b)
counts = {"calls": len(calls), "functions": len(set(calls)), "modules": len(per_module),
          "switches": switches, "per_module": per_module, "rooms": len(set(rooms)),
          "room_switches": room_switches}
Path(sys.argv[3]).write_text(json.dumps(counts))
'''


def lines(label: str, counts: dict[str, object], top: int = 12) -> list[str]:
    """The counts as printed: one summary line, then the modules entered most."""
    per_module = counts["per_module"]
    assert isinstance(per_module, dict)
    ranked = collections.Counter(per_module).most_common(top)
    return [f"  {label}: {counts['calls']} calls into {counts['functions']} functions across "
            f"{counts['modules']} modules, {counts['switches']} switches of module; "
            f"{counts['rooms']} rooms, {counts['room_switches']} switches of room",
            *(f"    {calls:4d}  {name}" for name, calls in ranked)]


def report(projects: Sequence[Path] = (ROOT,)) -> Report:
    """Trace the request through each project (the first is this tree) and print the counts."""
    out = Report()
    out.say(f"POST /models/{MODEL}/predict, an experiment model (two arms, a shadow), traced "
            "on the caller's thread:")
    for project in projects:
        out.say(*lines(str(project) if project != ROOT else "this tree", trace(project)))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.requestpath", description=__doc__)
    parser.add_argument("--project", type=Path, action="append",
                        help="another checkout to trace beside this one (a tree before a "
                             "change); may repeat")
    args = parser.parse_args(argv)
    report((ROOT, *(path.resolve() for path in args.project or ())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
