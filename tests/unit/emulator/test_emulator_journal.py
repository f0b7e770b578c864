"""The asynchronous queue's journal (a state directory): what is written when, what a new
process resumes from it (queued and running calls run, completed ones only notified), the
attempts a dying process may cost, and the emulator's ``--state-dir`` default."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path
from typing import Any

import pytest

from emulator import errors
from emulator.__main__ import STATE_ROOT, parse_args
from emulator.asyncinvoke import MAX_ATTEMPTS, AsyncInference, AsyncRequest, Job
from emulator.config import parse_config
from emulator.journal import COMPLETED, QUEUED, RUNNING, Entry, Journal, JournalError
from emulator.runtime import Runtime
from tests.unit.emulator.fakes import Clock, FakeContainer, MemoryStore, Topics
from tests.unit.emulator.test_emulator_async import ERROR, RAW, SUCCESS

INPUT = ("inputs", "rows.csv")


def service(directory: Path, container: FakeContainer | None = None, clock: Clock | None = None,
            store: MemoryStore | None = None) -> tuple[AsyncInference, MemoryStore, Topics]:
    """A service on the journal in ``directory`` (closed by the caller's :func:`close`)."""
    config = parse_config(RAW, Path("/configs"))
    runtime = Runtime(config, {"m": container or FakeContainer()}, random.Random(1),
                      lambda s: None)
    store = store or MemoryStore()
    store.objects.setdefault(INPUT, (b"1,2,3,4", "text/csv"))
    topics = Topics()
    made = AsyncInference(runtime, store, topics, None, clock or Clock(),
                          journal=Journal(directory))
    return made, store, topics


def close(made: AsyncInference) -> None:
    assert made.journal is not None
    made.journal.close()


def entries(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted((directory / "async").glob("*.json"))]


def submit(made: AsyncInference, inference_id: str, **fields: Any) -> Any:
    fields.setdefault("input_location", "s3://inputs/rows.csv")
    return made.submit(AsyncRequest("queued", inference_id=inference_id, **fields))


def left_behind(directory: Path, inference_id: str, phase: str, attempts: int = 0,
                completion: dict[str, Any] | None = None) -> Any:
    """What a process that died leaves: a call accepted, then its entry moved to ``phase``
    (as its worker would have written it) before the end."""
    dead, *_ = service(directory)
    accepted = submit(dead, inference_id)
    job = dead.queues["queued"].get_nowait()
    assert dead.journal is not None and job is not None
    dead.journal.write(Entry(job.key, job.to_document(), phase, attempts, completion))
    close(dead)
    return accepted


def build_memory() -> AsyncInference:
    config = parse_config(RAW, Path("/configs"))
    runtime = Runtime(config, {"m": FakeContainer()}, random.Random(1), lambda s: None)
    return AsyncInference(runtime, MemoryStore(), Topics(), None, Clock())


def test_a_call_is_written_down_before_its_202_and_forgotten_once_notified(
        tmp_path: Path) -> None:
    made, _, topics = service(tmp_path)
    accepted = submit(made, "job-1", content_type="text/csv")
    [entry] = entries(tmp_path)
    assert entry["phase"] == QUEUED and entry["attempts"] == 0
    assert entry["job"]["output_location"] == accepted.output_location
    completion = made.run_next("queued")
    assert completion is not None and completion.status == "Completed"
    assert entries(tmp_path) == []
    assert [topic for topic, _ in topics.published] == [SUCCESS]
    close(made)


def test_a_job_reads_back_as_it_was_written_inline_body_included() -> None:
    request = AsyncRequest("queued", body=b"\x00\xffbytes", body_length=7,
                           content_type="application/x-npy", inference_id="i",
                           custom_attributes="a=1", filename="x.out")  # fmt: skip
    made = build_memory()
    accepted = made.submit(request)
    job = made.queues["queued"].get_nowait()
    assert job is not None
    again = Job.from_document(json.loads(json.dumps(job.to_document())), job.key, 2)
    assert again.request == request and again.accepted == accepted
    assert (again.timeout_s, again.ttl_s, again.received_at) == (job.timeout_s, job.ttl_s,
                                                                job.received_at)
    assert again.attempts == 2


def test_queued_and_running_calls_run_again_after_the_process_died(tmp_path: Path) -> None:
    waiting = left_behind(tmp_path, "waiting", QUEUED)
    running = left_behind(tmp_path, "running", RUNNING, attempts=1)

    container = FakeContainer()
    made, store, topics = service(tmp_path, container)
    assert made.resume() == 2
    for _ in range(2):
        completion = made.run_next("queued")
        assert completion is not None and completion.status == "Completed"
    assert made.run_next("queued") is None  # each once
    assert container.calls == [(b"1,2,3,4", "text/csv", None)] * 2
    for accepted in (waiting, running):
        bucket, key = accepted.output_location.removeprefix("s3://").split("/", 1)
        assert (bucket, key) in store.objects  # where the 202 said
    assert sorted(message["inferenceId"] for _, message in topics.published) == \
        ["running", "waiting"]
    assert entries(tmp_path) == []
    close(made)


def test_a_run_cut_short_counts_as_an_attempt_and_the_last_one_fails(tmp_path: Path) -> None:
    left_behind(tmp_path, "poison", RUNNING, attempts=MAX_ATTEMPTS)
    container = FakeContainer()
    made, _, topics = service(tmp_path, container)
    made.resume()
    completion = made.run_next("queued")
    assert completion is not None and completion.status == "Failed"
    assert container.calls == []  # not run a fourth time
    [(topic, message)] = topics.published
    assert topic == ERROR and f"failed {MAX_ATTEMPTS} times" in message["failureReason"]
    close(made)


def test_a_completed_call_is_only_notified_again(tmp_path: Path) -> None:
    note = {"inferenceId": "done", "invocationStatus": "Completed"}
    left_behind(tmp_path, "done", COMPLETED,
                completion={"topic_arn": SUCCESS, "status": "Completed", "message": note})

    container = FakeContainer()
    made, store, topics = service(tmp_path, container)
    before = dict(store.objects)
    assert made.resume() == 1
    for thread in [t for t in threading.enumerate() if t.name == "async-resume"]:
        thread.join(5)  # the notifications go in a thread of their own
    assert topics.published == [(SUCCESS, note)]
    assert made.run_next("queued") is None and container.calls == [] and store.objects == before
    assert entries(tmp_path) == []
    close(made)


def test_a_call_this_configuration_cannot_run_is_dropped_and_a_bad_file_set_aside(
        tmp_path: Path) -> None:
    left_behind(tmp_path, "elsewhere", QUEUED)
    [path] = (tmp_path / "async").glob("*.json")
    document = json.loads(path.read_text())
    document["job"]["request"]["endpoint_name"] = "gone"
    path.write_text(json.dumps(document))
    (tmp_path / "async" / "broken.json").write_text("{not json")
    (tmp_path / "async" / ".k.1.2.tmp").write_text("half a write")

    made, *_ = service(tmp_path)
    assert made.resume() == 1  # the broken file is no entry
    assert made.run_next("queued") is None
    assert sorted(p.name for p in (tmp_path / "async").iterdir()) == ["broken.json.unreadable"]
    close(made)


def test_a_call_that_cannot_be_written_down_is_refused(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    made, *_ = service(tmp_path)

    def full(entry: Entry) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(made.journal, "write", full)
    with pytest.raises(errors.InternalFailure, match="durably"):
        submit(made, "lost")
    assert made.run_next("queued") is None  # not queued either
    close(made)


def test_one_emulator_at_a_time_holds_a_state_directory(tmp_path: Path) -> None:
    first = Journal(tmp_path)
    with pytest.raises(JournalError, match="in use by another emulator"):
        Journal(tmp_path)
    first.close()
    Journal(tmp_path).close()  # free again once the holder is gone


def test_the_state_directory_defaults_by_port() -> None:
    assert parse_args(["--port", "0"], {}).state_dir is None  # nobody could find it again
    fixed = parse_args(["--port", "9080"], {})
    assert fixed.state_dir == STATE_ROOT / "9080" and not fixed.state_dir_given
    given = parse_args(["--port", "0"], {"EMULATOR_STATE_DIR": "/somewhere"})
    assert given.state_dir == Path("/somewhere") and given.state_dir_given
    assert parse_args(["--port", "0", "--state-dir", "/x"], {}).state_dir == Path("/x")
    assert parse_args(["--port", "9080", "--no-state-dir"], {}).state_dir is None


def test_an_unusable_default_directory_leaves_the_queue_in_memory_a_given_one_stops(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from emulator.__main__ import _journal

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    default = parse_args(["--port", "9080"], {})
    default.state_dir = blocker / "state"  # as if the default folder could not be made
    assert _journal(default) is None and "in memory only" in caplog.text
    given = parse_args(["--port", "0", "--state-dir", str(blocker / "state")], {})
    with pytest.raises(JournalError, match="cannot use the state directory"):
        _journal(given)
