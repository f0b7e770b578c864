"""No test may read what another command writes: a fresh clone (CI) has no ``samples/`` (written
by ``make run``), ``captures/`` or ``build/`` until a command makes them, so a test that reads
one passes on a developer's machine and fails in CI (it happened twice: issue 19)."""
from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# a path into a generated folder of the project: joined to its root, or written as a string
GENERATED = re.compile(r"""(ROOT|parents\[\d+\])\s*/\s*["'](samples|captures|build)["']"""
                       r"""|["']samples/[\w.-]+["']""")
# these make what they read: the README test writes its own samples into its copy of the
# project (sagegate.local.stack.write_samples), the deploy tier runs `sagegate package`
# before it reads
MAKES_ITS_OWN = {"integration/test_readme.py", "deploy/conftest.py"}


def test_no_test_reads_a_folder_another_command_writes() -> None:
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        name = path.relative_to(TESTS).as_posix()
        if name in MAKES_ITS_OWN or path == Path(__file__).resolve():
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if GENERATED.search(line):
                offenders.append(f"{name}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
