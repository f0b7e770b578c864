"""Settings in one home: no module of chalicelib reads the process's environment but one."""
from __future__ import annotations

import ast
from pathlib import Path

import chalicelib

ROOT = Path(chalicelib.__file__).parent
READER = ROOT / "core" / "environment.py"
_READS = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def environment_reads(source: str) -> list[int]:
    """The lines of ``source`` that reach the environment through ``os`` (``os.environ``,
    ``os.getenv`` ..., ``from os import environ``, an alias of ``os`` included)."""
    tree = ast.parse(source)
    os_names = {alias.asname or alias.name for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names if alias.name == "os"}
    return sorted(node.lineno for node in ast.walk(tree)
                  if isinstance(node, ast.ImportFrom | ast.Attribute) and _reads(node, os_names))


def _reads(node: ast.ImportFrom | ast.Attribute, os_names: set[str]) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.module == "os" and any(alias.name in _READS for alias in node.names)
    return node.attr in _READS and isinstance(node.value, ast.Name) \
        and node.value.id in os_names


def test_the_guard_sees_every_way_of_reading_the_environment() -> None:
    assert environment_reads("import os\nx = os.environ.get('A')\n") == [2]
    assert environment_reads("import os as o\ny = o.getenv('A')\n") == [2]
    assert environment_reads("from os import environ\n") == [1]
    assert environment_reads("import os\n'''os.environ'''\np = os.path.join('a')\n") == []


def test_only_the_reader_reads_the_environment() -> None:
    readers = {str(path.relative_to(ROOT.parent)): lines
               for path in sorted(ROOT.rglob("*.py")) if path != READER
               if (lines := environment_reads(path.read_text(encoding="utf-8")))}
    assert readers == {}, "read the environment through chalicelib.core.environment"
    assert environment_reads(READER.read_text(encoding="utf-8"))
