"""Long values in ``sagegate monitor``'s commands: distinct strings of megabytes, in the
captures or from a record preprocessor, leave every output file small (a string is kept to
its first characters and a digest, docs/MONITOR.md), and a ``.jsonl`` line past the line bound
is a bad object, counted, as a ``.jsonl.gz`` one is."""
from __future__ import annotations

import datetime
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from chalicelib.monitor import capture_format
from chalicelib.monitor.features import MAX_VALUE_CHARS
from sagegate.monitor import cli, cli_shared
from tests.unit.monitor import capturegen

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
WINDOW = ["--start", "2026-11-25T09:00Z", "--end", "2026-11-25T10:00Z"]
RECORDS = 30
LONG = 2 * 1024 * 1024
"""Each record's string: 60 MB in all, which statistics.json held whole before."""
SMALL = 256 * 1024
"""Well above what the outputs hold (30 values of MAX_VALUE_CHARS, the sketches, the report's
ten longest bars), far below the strings' 60 MB."""


def _captures(root: Path) -> Path:
    folder = root / "AllTraffic" / f"{capturegen.HOUR:%Y/%m/%d/%H}"
    folder.mkdir(parents=True)
    with (folder / "records.jsonl").open("w", encoding="utf-8") as out:
        for index in range(RECORDS):
            when = capturegen.HOUR + datetime.timedelta(seconds=index * 60)
            record = capturegen.record([1.0], 0.5, when, encoding="JSON")
            text = f"{index:03d}" + "t" * LONG
            record["captureData"]["endpointInput"]["data"] = json.dumps(
                {"instances": [{"text": text, "n": index}]})
            out.write(json.dumps(record) + "\n")
    return root


def _sizes(folder: Path) -> dict[str, int]:
    return {path.name: path.stat().st_size for path in folder.iterdir()
            if path.suffix in (".json", ".html")}


def _texts(statistics: Path, name: str) -> list[str]:
    document: dict[str, Any] = json.loads(statistics.read_text(encoding="utf-8"))
    feature = next(f for f in document["features"] if f["name"] == name)
    buckets = feature["string_statistics"]["distribution"]["categorical"]["buckets"]
    return [bucket["value"] for bucket in buckets]


def test_megabyte_strings_in_captures_leave_the_outputs_small(tmp_path: Path) -> None:
    captures = _captures(tmp_path / "endpoint")
    baseline, window = tmp_path / "baseline", tmp_path / "check"
    assert cli.main(["baseline", str(captures), "-o", str(baseline), *WINDOW]) == cli_shared.EXIT_OK
    assert cli.main(["check", str(captures), "--baseline", str(baseline), "-o", str(window),
                     *WINDOW]) == cli_shared.EXIT_OK
    for folder in (baseline, window):
        assert max(_sizes(folder).values()) < SMALL, _sizes(folder)
    texts = _texts(window / "statistics.json", "text")
    assert len(set(texts)) == RECORDS and {len(t) for t in texts} == {MAX_VALUE_CHARS}


PREPROCESSOR = """\
    import itertools
    _count = itertools.count()

    def preprocess_handler(inference_record):
        index = next(_count)
        return {"text": f"{index:03d}" + "p" * (2 * 1024 * 1024), "n": index}
    """


def test_a_preprocessors_megabyte_strings_leave_every_commands_outputs_small(
        tmp_path: Path) -> None:
    captures = capturegen.write_window(tmp_path / "endpoint", RECORDS)
    handler = tmp_path / "handler.py"
    handler.write_text(textwrap.dedent(PREPROCESSOR), encoding="utf-8")
    given = ["--preprocess-handler", str(handler), *WINDOW]
    baseline, window, compared = tmp_path / "baseline", tmp_path / "check", tmp_path / "cmp"
    assert cli.main(["baseline", str(captures), "-o", str(baseline), *given]) == cli_shared.EXIT_OK
    # each run calls the handler afresh in its own module: the same strings each time
    assert cli.main(["check", str(captures), "--baseline", str(baseline), "-o", str(window),
                     *given]) == cli_shared.EXIT_OK
    assert cli.main(["compare", str(captures), str(captures), "-o", str(compared),
                     *given]) == cli_shared.EXIT_OK
    for folder in (baseline, window, compared):
        assert max(_sizes(folder).values()) < SMALL, _sizes(folder)
    assert len(set(_texts(baseline / "statistics.json", "text"))) == RECORDS


def test_a_jsonl_line_past_the_bound_is_a_bad_object_counted_in_the_summary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    captures = _captures(tmp_path / "endpoint")
    capturegen.write_window(captures, 20)  # a second file, of short records
    monkeypatch.setattr(capture_format, "MAX_LINE_BYTES", LONG // 2)
    monkeypatch.setattr(capture_format, "READ_BYTES", 64 * 1024)
    out = tmp_path / "baseline"
    assert cli.main(["baseline", str(captures), "-o", str(out), *WINDOW]) == cli_shared.EXIT_OK
    printed = capsys.readouterr()
    assert "a line longer than 1 MiB" in printed.out + printed.err
    document = json.loads((out / "statistics.json").read_text(encoding="utf-8"))
    assert document["dataset"]["item_count"] == 20  # the short file's records only
