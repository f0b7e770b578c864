"""Every example in README.md and in the pages of docs/ runs (``make docs-check`` runs this
file alone).

The stack is `make run`'s: moto's server, the emulator with its default configuration and
``chalice local --stage local`` with its event pump, in a copy of the project, so the
examples' files (``samples/``, ``captures/``) are the copy's. One copy and one stack serve
every page, README.md first, then ``docs/*.md`` by name. Each command of a ``sh`` block (a
line, or lines joined by a trailing backslash) is run:

* ``curl``: against the stack; an answer documented in the ``#`` lines below it must be the
  answer given (the first prediction's index, label and probability to the digits shown);
* ``.venv/bin/...``: the installed console scripts (``sagegate``, the tools shown), in the copy;
* ``make``: the target must exist (``make -n``: ``make run`` and ``make test`` are what CI and
  this very test run).

``json`` blocks must be JSON; those that show an answer or a log line must have exactly the keys
the real ones have.

A block fenced otherwise (``bash``: AWS commands, a script that needs a shell and ``jq``, whose
own test the page names) is shown, not run. A ``sh`` block holds only what this file runs.
"""
from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from emulator.process import DEFAULT_CONFIG as DEFAULT_EMULATOR_CONFIG
from sagegate.local.aws import jobs_stack
from sagegate.local.preflight import PORTS
from sagegate.local.processes import PROJECT_FILES, ROOT, ApiProcess, copy_project
from sagegate.local.stack import write_samples

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
VENV_BIN = Path(sys.executable).parent
LOCAL_URL = re.compile(r"(https?://)?localhost:8000")
# a fenced block, at the margin or indented (inside a list item): its language and its body
_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<language>\w*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                    re.MULTILINE | re.DOTALL)
_PREDICTION = re.compile(r'"index": (\d+), "label": "([^"]+)", "probability": ([0-9.]+)')


@dataclass(frozen=True)
class Example:
    page: str
    """The page's path from the project's root: ``README.md``, ``docs/API.md``."""
    line: int
    command: str
    documented: str
    """The ``#`` lines that follow the command: its documented output."""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def examples(language: str, pages: list[Path] = PAGES) -> list[Example]:
    """The commands (``sh``) or documents (``json``) of the pages' fenced blocks, in order."""
    found: list[Example] = []
    for page in pages:
        found += _page_examples(page, language)
    return found


def _page_examples(page: Path, language: str) -> list[Example]:
    text = page.read_text()
    name = page.relative_to(ROOT).as_posix()
    found: list[Example] = []
    for block in _FENCE.finditer(text):
        if block.group("language") != language:
            continue
        first_line = text.count("\n", 0, block.start("body")) + 1
        indent = len(block.group("indent"))
        lines = [line[indent:] for line in block.group("body").splitlines()]
        if language != "sh":
            found.append(Example(name, first_line, "\n".join(lines), ""))
            continue
        index = 0
        while index < len(lines):
            start, line = index, lines[index]
            index += 1
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            while line.rstrip().endswith("\\") and index < len(lines):  # a continued command
                line = line.rstrip()[:-1] + " " + lines[index].strip()
                index += 1
            documented = []
            for following in lines[index:]:
                if not following.startswith("#"):
                    break
                documented.append(following[1:].strip())
            command = line.split(" # ", 1)[0].strip()  # a trailing comment is not the command
            found.append(Example(name, first_line + start, command, " ".join(documented)))
    return found


COMMANDS = examples("sh")


@dataclass
class Copy:
    root: Path
    api: ApiProcess


@pytest.fixture(scope="module")
def project() -> Iterator[Copy]:
    write_samples()
    with tempfile.TemporaryDirectory(prefix="sagegate-readme-") as tmp:
        root = Path(tmp)
        copy_project(root, (*PROJECT_FILES, "samples", "docs"))
        # make run's stack: jobs on (moto's S3, SNS and SQS, the event pump), so the
        # examples that go through an upload and a job run as a user's would
        with jobs_stack(DEFAULT_EMULATOR_CONFIG, project_dir=root, logs=root) as (api, _):
            _load_language_model(api)
            yield Copy(root, api)


def _load_language_model(api: ApiProcess) -> None:
    """As ``make run`` does before it says ready: smollm2's first request loads it, and may
    outlast that request's read (a 504 meanwhile)."""
    request = urllib.request.Request(
        api.url + "/v1/completions", method="POST", headers={"Content-Type": "application/json"},
        data=b'{"model": "smollm2", "prompt": "Hi", "max_tokens": 1}')
    for _ in range(40):
        try:
            with urllib.request.urlopen(request, timeout=120):
                return
        except urllib.error.HTTPError as error:
            assert error.code in (503, 504), error
            error.close()


def test_the_readme_has_examples_of_every_kind() -> None:
    readme_kinds = {example.command.split()[0] for example in COMMANDS
                    if example.page == "README.md"}
    assert {"make", "curl", ".venv/bin/sagegate"} <= readme_kinds, readme_kinds
    # every command of every page is one this file runs: no example goes unchecked
    strays = [example.where for example in COMMANDS
              if not example.command.startswith(("make ", "curl ", ".venv/bin/"))]
    assert not strays, f"a sh block holds a command this file cannot run: {strays}"


def test_the_docs_pages_are_read() -> None:
    """The reference moved from README.md into docs/: its examples are run there."""
    pages = {example.page for example in COMMANDS}
    assert {"README.md", "docs/API.md", "docs/MODELS.md", "docs/CLIENTS.md", "docs/CAPTURE.md",
            "docs/MONITOR.md"} <= pages, pages
    json_pages = {example.page for example in examples("json")}
    assert {"docs/API.md", "docs/OPERATIONS.md"} <= json_pages, json_pages


def run(project: Copy, command: str) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(LOCAL_URL.sub(project.api.url, command))
    if argv[0].startswith(".venv/bin/"):
        argv[0] = str(VENV_BIN / argv[0].removeprefix(".venv/bin/"))
    return subprocess.run(argv, cwd=project.root, capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.mark.parametrize("example", [e for e in COMMANDS if e.command.startswith("curl")],
                         ids=lambda e: e.where)
def test_curl_examples_answer_what_the_readme_says(project: Copy, example: Example) -> None:
    done = run(project, example.command)
    assert done.returncode == 0, done.stderr
    answer = _answer(done.stdout)
    where = example.where
    # an error only where the page shows one, and then that one
    assert answer.get("Code") == _documented_code(example.documented), (where, answer)
    for key, value in _TEXT_PAIR.findall(example.documented):
        if value != "...":
            assert (key, value) in _text_pairs(answer), (where, key, value, answer)
    for key, number in _NUMBER_PAIR.findall(example.documented):
        digits = len(number.split(".")[1]) if "." in number else 0
        assert any(round(value, digits) == float(number)
                   for value in _numbers_of(answer, key)), (where, key, number, answer)
    documented = _PREDICTION.search(example.documented)
    if documented is None:
        return
    index, label, probability = documented.groups()
    first = answer["predictions"][0]
    first = first[0] if isinstance(first, list) else first  # one list per row (tensor models)
    digits = len(probability.split(".")[1])
    assert (first["index"], first["label"], round(first["probability"], digits)) == \
        (int(index), label, float(probability)), f"{where}: {first}"


def _answer(stdout: str) -> Any:
    """A JSON answer, or a stream's (``data:`` lines, ``[DONE]`` last) as its events' list."""
    if not stdout.startswith("data: "):
        return json.loads(stdout)
    data = [line[6:] for line in stdout.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]", data[-3:]
    return {"events": [json.loads(event) for event in data[:-1]]}


_CODE = re.compile(r'"Code": "(\w+)"')
_TEXT_PAIR = re.compile(r'"(\w+)": "([^"]*)"')
_NUMBER_PAIR = re.compile(r'"(\w+)": \[*(-?[0-9][0-9.e-]*)')


def _documented_code(documented: str) -> str | None:
    found = _CODE.search(documented)
    return found.group(1) if found else None


def _text_pairs(document: Any) -> set[tuple[str, str]]:
    """Every ``"key": "text"`` pair anywhere in a JSON document."""
    pairs: set[tuple[str, str]] = set()
    if isinstance(document, dict):
        for key, value in document.items():
            if isinstance(value, str):
                pairs.add((key, value))
            pairs |= _text_pairs(value)
    elif isinstance(document, list):
        for item in document:
            pairs |= _text_pairs(item)
    return pairs


def _numbers_of(document: Any, key: str) -> list[float]:
    """The numbers under ``key`` anywhere in a JSON document (the first of a nested list)."""
    found: list[float] = []
    if isinstance(document, dict):
        for name, value in document.items():
            while isinstance(value, list) and value and name == key:
                value = value[0]
            if name == key and isinstance(value, (int, float)) and not isinstance(value, bool):
                found.append(float(value))
            found += _numbers_of(document[name], key)
    elif isinstance(document, list):
        for item in document:
            found += _numbers_of(item, key)
    return found


@pytest.mark.parametrize("example", [e for e in COMMANDS if e.command.startswith(".venv/bin/")],
                         ids=lambda e: e.where)
def test_venv_commands_run(project: Copy, example: Example) -> None:
    """sagegate's own commands and the tools the pages show (openapi-python-client)."""
    # the curl examples made the captures the capture examples read
    for curl in (e for e in COMMANDS if e.command.startswith("curl")):
        run(project, curl.command)
    done = run(project, example.command)
    assert done.returncode == 0, f"{example.where}: {done.stderr}"


@pytest.mark.parametrize("example", [e for e in COMMANDS if e.command.startswith("make")],
                         ids=lambda e: e.where)
def test_make_examples_name_real_targets(example: Example) -> None:
    argv = shlex.split(example.command)
    done = subprocess.run(["make", "-n", *argv[1:]], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, f"{example.where}: {done.stderr}"


def test_json_examples_are_json() -> None:
    for example in examples("json"):
        try:
            json.loads(example.command)
        except json.JSONDecodeError as error:
            pytest.fail(f"{example.where}: not JSON: {error}")


def test_json_examples_have_the_real_keys(project: Copy) -> None:
    documents = [json.loads(re.sub(r'"\.\.\."', '""', e.command)) for e in examples("json")]
    run(project, "curl -s localhost:8000/predict -H 'Content-Type: image/jpeg' "
                 "--data-binary @samples/cat.jpg")
    # no-cache: the log line of a real endpoint call, as OPERATIONS.md shows one
    answer = json.loads(run(project, "curl -s 'localhost:8000/predict?k=1' -H "
                                     "'Content-Type: image/jpeg' -H 'Cache-Control: no-cache' "
                                     "--data-binary @samples/cat.jpg").stdout)
    log_lines = [json.loads(line) for line in (project.root / "api.log").read_text().splitlines()
                 if line.startswith('{"level"')]
    real_log = next(line for line in reversed(log_lines) if line.get("route") == "/predict")
    checked = 0
    for document in documents:
        if "predictions" in document:
            assert _keys(document) == _keys(answer)
            checked += 1
        elif document.get("message") == "request":
            assert _keys(document) <= _keys(real_log) | {"timestamp", "location"}
            assert set(document) >= {"request_id", "route", "status", "stages_ms"}
            checked += 1
    assert checked >= 2


def _keys(document: Any, prefix: str = "") -> set[str]:
    """Every key path of a JSON document (lists: their first element)."""
    if isinstance(document, list):
        return _keys(document[0], prefix + "[]") if document else set()
    if not isinstance(document, dict):
        return set()
    keys = set()
    for key, value in document.items():
        keys.add(prefix + key)
        keys |= _keys(value, prefix + key + ".")
    return keys


def test_the_readme_names_every_port_and_its_default() -> None:
    """``make run`` reads three ports; the README names each, its default, and says once that
    the pages' commands assume the defaults."""
    text = README.read_text()
    for name, default in PORTS.items():
        assert re.search(rf"`{name}` \(default\s+{default}\b", text), name
    assert "assume the default ports" in text


# an option naming a file or folder a command writes (not aws's `--output text`)
_OUTPUT = re.compile(r"(?:^|\s)(?:-o|--output-path)\s+(?P<path>[^\s'\"]+)", re.MULTILINE)


def test_files_the_examples_write_are_git_ignored() -> None:
    """What the pages' commands write in the checkout (``monitoring/``, ``verdict/`` ...) is
    git-ignored: following the pages leaves ``git status`` clean."""
    written = {match["path"] for page in PAGES for block in _FENCE.finditer(page.read_text())
               for match in _OUTPUT.finditer(block["body"])
               if not match["path"].startswith(("/", "$", "-"))}
    assert {"monitoring/iris/baseline/", "verdict/int8"} <= written, written
    kept = [path for path in sorted(written) if subprocess.run(
        ["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT, check=False).returncode]
    assert kept == [], f"written by the docs' commands but not git-ignored: {kept}"
