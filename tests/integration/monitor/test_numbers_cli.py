"""Numbers past what a double holds, in each command that reads captures (``baseline``,
``check``, ``compare``): JSON's ``NaN`` and ``Infinity`` (which Spark's JSON reader, and
Python's, accept), ``1e999``, a 400-digit integer, and the same from a record preprocessor
(``{"c": 10**400}``). Each is a missing value, as docs/MONITOR.md says; the command ends as
usual and every file it writes is strict JSON (no ``NaN`` or ``Infinity`` literal)."""
from __future__ import annotations

import datetime
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from sagegate.monitor import cli, cli_shared
from tests.unit.monitor import capturegen

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
WINDOW = ["--start", "2026-11-25T09:00Z", "--end", "2026-11-25T10:00Z"]
RECORDS = 30
EVERY = 3
"""One record in three carries the value (its first feature and its first prediction)."""
VALUES = {"nan": "NaN", "infinity": "Infinity", "minus_infinity": "-Infinity",
          "beyond_double": "1e999", "digits_400": "1" * 400}


def _refuse_constant(name: str) -> Any:
    raise AssertionError(f"not strict JSON: {name}")


def _strict(path: Path) -> dict[str, Any]:
    """A file the command wrote, parsed as strict JSON (a NaN or Infinity literal fails)."""
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"),
                                          parse_constant=_refuse_constant)
    return document


def _record(index: int, value: str) -> str:
    when = capturegen.HOUR + datetime.timedelta(seconds=index * 60)
    record = capturegen.record([1.0, 2.0, 3.0, 4.0], 0.5, when, encoding="JSON")
    number = value if index % EVERY == 0 else f"{1.5 + index / 10}"
    capture = record["captureData"]
    capture["endpointInput"]["data"] = f'{{"instances": [[{number}, 2.5]]}}'
    capture["endpointOutput"]["data"] = f'{{"predictions": [[{number}, 0.25]]}}'
    return json.dumps(record)


def _captures(root: Path, value: str) -> Path:
    folder = root / "AllTraffic" / f"{capturegen.HOUR:%Y/%m/%d/%H}"
    folder.mkdir(parents=True)
    lines = [_record(index, value) for index in range(RECORDS)]
    (folder / "records.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def _feature(statistics: dict[str, Any], name: str) -> dict[str, Any]:
    feature: dict[str, Any] = next(f for f in statistics["features"] if f["name"] == name)
    return feature


def _assert_missing(feature: dict[str, Any], missing: int) -> None:
    numbers = feature["numerical_statistics"]
    assert feature["inferred_type"] == "Fractional"
    assert numbers["common"] == {"num_present": RECORDS - missing, "num_missing": missing}
    assert numbers["max"] < 10, numbers  # the value is not among the numbers


@pytest.mark.parametrize("value", VALUES.values(), ids=VALUES.keys())
def test_a_number_no_double_holds_is_missing_in_baseline_check_and_compare(
        value: str, tmp_path: Path) -> None:
    captures = _captures(tmp_path / "endpoint", value)
    missing = len(range(0, RECORDS, EVERY))
    baseline, window, compared = tmp_path / "baseline", tmp_path / "check", tmp_path / "cmp"
    assert cli.main(["baseline", str(captures), "-o", str(baseline), *WINDOW]) == cli_shared.EXIT_OK
    statistics = _strict(baseline / "statistics.json")
    for name in ("feature0", "prediction0"):
        _assert_missing(_feature(statistics, name), missing)
    _strict(baseline / "constraints.json")
    assert cli.main(["check", str(captures), "--baseline", str(baseline), "-o", str(window),
                     *WINDOW]) == cli_shared.EXIT_OK
    _assert_missing(_feature(_strict(window / "statistics.json"), "feature0"), missing)
    assert _strict(window / "constraint_violations.json") == {"violations": []}
    assert cli.main(["compare", str(captures), str(captures), "-o", str(compared),
                     *WINDOW]) == cli_shared.EXIT_OK
    document = _strict(compared / "compare.json")
    assert {c["name"] for c in document["columns"]} >= {"feature0", "prediction0"}
    _assert_missing(_feature(_strict(compared / "statistics_b.json"), "prediction0"), missing)


PREPROCESSOR = """\
    import itertools
    _count = itertools.count()
    _VALUES = [10**400, float("nan"), float("inf"), -float("inf"), 1.5, 2.5]

    def preprocess_handler(inference_record):
        return {"c": _VALUES[next(_count) % len(_VALUES)], "d": 1}
    """


def test_a_preprocessors_numbers_no_double_holds_are_missing_in_every_command(
        tmp_path: Path) -> None:
    captures = capturegen.write_window(tmp_path / "endpoint", 36)
    handler = tmp_path / "handler.py"
    handler.write_text(textwrap.dedent(PREPROCESSOR), encoding="utf-8")
    given = ["--preprocess-handler", str(handler), *WINDOW]
    baseline, window, compared = tmp_path / "baseline", tmp_path / "check", tmp_path / "cmp"
    assert cli.main(["baseline", str(captures), "-o", str(baseline), *given]) == cli_shared.EXIT_OK
    common = {"num_present": 12, "num_missing": 24}  # 1.5 and 2.5 of every six
    feature = _feature(_strict(baseline / "statistics.json"), "c")
    assert feature["numerical_statistics"]["common"] == common
    assert cli.main(["check", str(captures), "--baseline", str(baseline), "-o", str(window),
                     *given]) == cli_shared.EXIT_OK
    feature = _feature(_strict(window / "statistics.json"), "c")
    assert feature["numerical_statistics"]["common"] == common
    assert cli.main(["compare", str(captures), str(captures), "-o", str(compared),
                     *given]) == cli_shared.EXIT_OK
    _strict(compared / "compare.json")
    feature = _feature(_strict(compared / "statistics_a.json"), "c")
    assert feature["numerical_statistics"]["common"] == common


def test_numbers_whose_sum_passes_the_double_range_write_strict_json(tmp_path: Path) -> None:
    """Each value is a double, their sum and spread are not: the file is still strict JSON
    (the moments that overflowed are null) and every value is counted."""
    captures = _captures(tmp_path / "endpoint", "1.5e308")
    baseline = tmp_path / "baseline"
    assert cli.main(["baseline", str(captures), "-o", str(baseline), *WINDOW]) == cli_shared.EXIT_OK
    numbers = _feature(_strict(baseline / "statistics.json"), "feature0")["numerical_statistics"]
    assert numbers["common"] == {"num_present": RECORDS, "num_missing": 0}
    assert numbers["max"] == 1.5e308 and numbers["sum"] is None and numbers["std_dev"] is None
    assert all(b["upper_bound"] <= 1.5e308 for b in numbers["distribution"]["kll"]["buckets"])
    assert cli.main(["check", str(captures), "--baseline", str(baseline), "-o",
                     str(tmp_path / "check"), *WINDOW]) == cli_shared.EXIT_OK
    _strict(tmp_path / "check" / "statistics.json")


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_a_datasets_numbers_no_double_holds_are_missing_in_its_baseline(
        suffix: str, tmp_path: Path) -> None:
    values = [*VALUES.values(), "1.5", "2.5", "3.5"]
    dataset = tmp_path / f"train{suffix}"
    if suffix == ".csv":
        dataset.write_text("x,y\n" + "".join(f"{v},{i}\n" for i, v in enumerate(values)),
                           encoding="utf-8")
    else:
        dataset.write_text("".join(f'{{"x": {v}, "y": {i}}}\n' for i, v in enumerate(values)),
                           encoding="utf-8")
    baseline = tmp_path / "baseline"
    assert cli.main(["baseline", str(dataset), "-o", str(baseline)]) == cli_shared.EXIT_OK
    feature = _feature(_strict(baseline / "statistics.json"), "x")
    assert feature["inferred_type"] == "Fractional"
    assert feature["numerical_statistics"]["common"] == {"num_present": 3,
                                                         "num_missing": len(VALUES)}
    assert feature["numerical_statistics"]["max"] == 3.5
