"""``--start``/``--end`` as Model Monitor's schedules write them (``-PT1H``, ``now``), and a
window's files found by walking the folders that exist, locally and in S3."""
from __future__ import annotations

import datetime
import json
import os
import random
from pathlib import Path

import boto3
import pytest

from chalicelib.monitor import windows
from sagegate.monitor import cli, cli_shared, sources
from tests.unit.monitor import capturegen

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
DECADE = ["--start", "2020-01-01T00:00Z", "--end", "2030-01-01T00:00Z"]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mon3")
    dataset = capturegen.training_csv(folder / "train.csv", 2000, header=False)
    assert cli.main(["baseline", str(dataset), "-o", str(folder / "baseline")]) == 0
    return folder / "baseline"


def _count(out: Path) -> int:
    document = json.loads((out / "statistics.json").read_text(encoding="utf-8"))
    return int(document["dataset"]["item_count"])


def _write_at(root: Path, times: list[datetime.datetime]) -> None:
    """One record at each time, in the hour folder of its time."""
    features = capturegen.iris_like()
    rng = random.Random(5)
    for when in times:
        folder = root / "AllTraffic" / windows.hour_folder(when)
        folder.mkdir(parents=True, exist_ok=True)
        record = capturegen.record(features(rng, 0), rng.random(), when)
        with (folder / "batch.jsonl").open("a", encoding="utf-8") as file:
            file.write(json.dumps(record) + "\n")


def test_a_relative_window_reads_the_hours_just_captured(baseline: Path,
                                                          tmp_path: Path) -> None:
    now = datetime.datetime.now(datetime.UTC)
    root = tmp_path / "iris"
    # records are in a window by their inferenceTime: 300 in the last 50 minutes, 200 three
    # hours before
    _write_at(root, [now - datetime.timedelta(minutes=50) + i * datetime.timedelta(seconds=9)
                     for i in range(300)])
    _write_at(root, [now - 3 * windows.HOUR + i * datetime.timedelta(seconds=9)
                     for i in range(200)])
    out = tmp_path / "out"
    # "--start -PT1H" as two arguments: argparse alone would read -PT1H as an option
    assert cli.main(["check", str(root), "--baseline", str(baseline), "-o", str(out),
                     "--start", "-PT1H", "--end", "now"]) == cli_shared.EXIT_OK
    assert _count(out) == 300
    assert cli.main(["check", str(root), "--baseline", str(baseline), "-o", str(out),
                     "--start=-P1D", "--end=-PT0S"]) == cli_shared.EXIT_OK
    assert _count(out) == 500


@pytest.mark.parametrize("bounds", [["--end", "0001-01-01T00:30Z"],
                                    ["--start", "9999-12-31T23:00Z", "--end", "9999-12-31T23:59Z"]])
def test_a_window_at_the_calendars_ends_is_a_usage_error_or_read(
        baseline: Path, tmp_path: Path, bounds: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    root = capturegen.write_window(tmp_path / "iris", 10)
    status = cli.main(["check", str(root), "--baseline", str(baseline),
                       "-o", str(tmp_path / "out"), *bounds])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "OverflowError" not in err
    if bounds[0] == "--end":
        assert status == cli_shared.EXIT_USAGE and "outside the calendar" in err
    else:  # the calendar's last hour is read (the captures are of another hour)
        assert status == cli_shared.EXIT_EMPTY and "no records" in err


def test_a_window_of_years_lists_the_folders_that_exist(
        baseline: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = capturegen.write_window(tmp_path / "iris", 400)
    capturegen.write_window(root, 100, hour=capturegen.HOUR - 400 * 24 * windows.HOUR)
    capturegen.write_window(root, 50, hour=datetime.datetime(2019, 12, 31, 23,
                                                              tzinfo=datetime.UTC))
    globs: list[Path] = []
    glob = Path.glob

    def counted(self: Path, pattern: str) -> object:
        globs.append(self)
        return glob(self, pattern)

    monkeypatch.setattr(Path, "glob", counted)
    out = tmp_path / "out"
    assert cli.main(["check", str(root), "--baseline", str(baseline), "-o", str(out),
                     *DECADE]) == cli_shared.EXIT_OK
    assert _count(out) == 500  # 2019's hour is outside the window
    # one per hour folder that exists, not one per hour of a decade: the window's two, and the
    # hour before it (2019's last), listed for a Firehose stream's objects, whose .jsonl files
    # are not read
    assert len(globs) == 3


def test_a_long_s3_window_walks_the_prefixes_that_exist(
        baseline: Path, tmp_path: Path, moto_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"AWS_ENDPOINT_URL_S3": moto_url, "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    root = capturegen.write_window(tmp_path / "iris", 300)
    capturegen.write_window(root, 200, hour=capturegen.HOUR - 40 * 24 * windows.HOUR)
    capturegen.write_window(root, 70, hour=datetime.datetime(2031, 1, 1, tzinfo=datetime.UTC))
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="mon3-walk")
    for path in root.rglob("*.jsonl"):
        s3.upload_file(str(path), "mon3-walk", f"capture/iris/{path.relative_to(root)}")
    listed: list[str] = []
    children = sources._s3_children
    monkeypatch.setattr(sources, "_s3_children",
                        lambda client, bucket, folder: listed.append(folder)
                        or children(client, bucket, folder))
    out = tmp_path / "out"
    assert cli.main(["check", "s3://mon3-walk/capture/iris", "--baseline", str(baseline),
                     "-o", str(out), *DECADE]) == cli_shared.EXIT_OK
    assert _count(out) == 500
    assert len(listed) < 12  # variants, years, months, days: not 87,600 hour prefixes


def _put_firehose(root: Path, objects: list[capturegen.FirehoseObject]) -> None:
    """The objects as files under ``root`` (the capture prefix), each modified when it was
    delivered (as ``aws s3 sync`` keeps S3's LastModified)."""
    for item in objects:
        path = root / item.key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(item.body)
        stamp = item.last_modified.timestamp()
        os.utime(path, (stamp, stamp))


HOUR_BOUNDS = ["--start", "2026-11-25T09:00Z", "--end", "2026-11-25T10:00Z"]


def test_a_firehose_streams_gzip_objects_are_read_with_the_hours_around_the_window(
        baseline: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    delivered = capturegen.firehose_window("captures", "iris", 3000)
    _put_firehose(tmp_path, delivered)
    out = tmp_path / "out"
    assert cli.main(["check", str(tmp_path / "captures" / "iris"), "--baseline", str(baseline),
                     "-o", str(out), *HOUR_BOUNDS]) == cli_shared.EXIT_OK
    # every record of the hour, wherever the stream put it, and no other
    assert _count(out) == capturegen.in_hour(delivered) > 2800
    note = capsys.readouterr().err
    assert "outside the window" in note
    # the same objects read by two workers: the same records
    assert cli.main(["check", str(tmp_path / "captures" / "iris"), "--baseline", str(baseline),
                     "-o", str(tmp_path / "out2"), "--workers", "2", *HOUR_BOUNDS]) == 0
    assert _count(tmp_path / "out2") == _count(out)
    assert (out / "statistics.json").read_bytes() != b""


def test_a_broken_gzip_object_is_counted_in_one_line_not_a_traceback(
        baseline: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    delivered = capturegen.firehose_window("captures", "iris", 500)
    _put_firehose(tmp_path, delivered)
    folder = tmp_path / "captures" / "iris" / "AllTraffic" / "2026" / "11" / "25" / "09"
    (folder / "zz-broken.jsonl.gz").write_bytes(delivered[5].body[:-30])
    (folder / "zz-plain-text.jsonl.gz").write_text("{}\n")
    out = tmp_path / "out"
    status = cli.main(["check", str(tmp_path / "captures" / "iris"), "--baseline",
                       str(baseline), "-o", str(out), *HOUR_BOUNDS])
    err = capsys.readouterr().err
    assert status == cli_shared.EXIT_OK and "Traceback" not in err
    assert "2 bad object(s) given up (the first " in err
    assert "zz-broken.jsonl.gz: not a whole GZIP file" in err
    # the truncated object's records before the damage are read as any others
    assert _count(out) > capturegen.in_hour(delivered)
    # a window of broken objects only: an input error, one line
    only = tmp_path / "only" / "iris" / "AllTraffic" / "2026" / "11" / "25" / "09"
    only.mkdir(parents=True)
    (only / "a.jsonl.gz").write_bytes(b"\x1f\x8bnot really")
    assert cli.main(["check", str(tmp_path / "only" / "iris"), "--baseline", str(baseline),
                     "-o", str(tmp_path / "out-only"), *HOUR_BOUNDS]) == cli_shared.EXIT_USAGE
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "no readable record: 1 bad object(s) skipped, the first " in line
    assert "a.jsonl.gz: not a readable GZIP file" in line


def test_an_s3_window_of_gzip_objects_is_read_as_a_local_one(
        baseline: Path, tmp_path: Path, moto_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"AWS_ENDPOINT_URL_S3": moto_url, "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    delivered = capturegen.firehose_window("captures", "iris", 2000, seed=11)
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="mon3-firehose")
    for item in delivered:
        s3.put_object(Bucket="mon3-firehose", Key=item.key, Body=item.body)
    s3.put_object(Bucket="mon3-firehose", Body=b"not gzip",
                  Key="captures/iris/AllTraffic/2026/11/25/09/bad.jsonl.gz")
    out = tmp_path / "out"
    assert cli.main(["check", "s3://mon3-firehose/captures/iris", "--baseline", str(baseline),
                     "-o", str(out), *HOUR_BOUNDS]) == cli_shared.EXIT_OK
    # moto's LastModified is the upload's: every object of the hour before is read, and its
    # records outside the window are left out by their time
    assert _count(out) == capturegen.in_hour(delivered)
    _put_firehose(tmp_path, delivered)
    local = tmp_path / "local"
    assert cli.main(["check", str(tmp_path / "captures" / "iris"), "--baseline", str(baseline),
                     "-o", str(local), *HOUR_BOUNDS]) == cli_shared.EXIT_OK
    assert (local / "constraint_violations.json").read_bytes() == \
        (out / "constraint_violations.json").read_bytes()
    s3_statistics = json.loads((out / "statistics.json").read_text())
    local_statistics = json.loads((local / "statistics.json").read_text())
    assert s3_statistics == local_statistics
