"""One way to talk to AWS (STYLE 14): every boto3 client of chalicelib and sagegate is built by
chalicelib.awsclients from a named policy, and only chalicelib.core.aws takes an ``s3://`` URI
apart (S3Uri). Read from the sources' syntax trees, so docstrings and comments may say
``s3://`` freely."""
from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("chalicelib", "sagegate")
BUILDER = "chalicelib/awsclients.py"
URI_HOME = "chalicelib/core/aws.py"
CLIENT_MODULES = ("boto3", "botocore.config", "botocore.session")
"""Importing any of these is how a client gets built outside the builder."""
PARSERS = {"removeprefix", "startswith", "split", "rsplit", "partition", "match", "fullmatch",
           "search", "compile", "len"}
"""Calls that take an ``s3://`` text apart when given the scheme (a literal or S3_SCHEME)."""


def sources() -> Iterator[tuple[str, ast.Module]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if "/models/" in name:  # users' handler files, data
                continue
            yield name, ast.parse(path.read_text(encoding="utf-8"), name)


def client_imports(tree: ast.Module) -> list[str]:
    """The client-building modules ``tree`` imports, with their line numbers."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        else:
            continue
        found += [f"{name} (line {node.lineno})" for name in names
                  if any(name == m or name.startswith(f"{m}.") for m in CLIENT_MODULES)]
    return found


def _scheme_names(tree: ast.Module) -> set[str]:
    """S3_SCHEME, and any name of the module bound to the scheme itself (``_S3 = "s3://"``)."""
    names = {"S3_SCHEME"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                and node.value.value == "s3://":
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
    return names


def _is_scheme(node: ast.AST, names: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and "s3://" in node.value
    if isinstance(node, ast.Call):  # len(S3_SCHEME), as in text[len(S3_SCHEME):]
        return any(_is_scheme(arg, names) for arg in node.args)
    return (isinstance(node, ast.Name) and node.id in names) or \
        (isinstance(node, ast.Attribute) and node.attr in names)


def hand_parsing(tree: ast.Module) -> list[str]:
    """Calls that split, strip or match an ``s3://`` text themselves, with their lines (a
    scheme test is allowed when it names S3_SCHEME: that is not parsing)."""
    found = []
    names = _scheme_names(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else \
            func.id if isinstance(func, ast.Name) else ""
        if name not in PARSERS or not any(_is_scheme(arg, names) for arg in node.args):
            continue
        if name == "startswith" and not any(isinstance(a, ast.Constant) for a in node.args):
            continue  # x.startswith(S3_SCHEME): which kind of destination, not its parts
        found.append(f"{name}(...) on line {node.lineno}")
    return found


def test_no_module_but_the_builder_builds_a_boto3_client() -> None:
    offenders = {name: found for name, tree in sources()
                 if name != BUILDER and (found := client_imports(tree))}
    assert offenders == {}, "build clients with chalicelib.awsclients (a policy of core/aws.py)"


def test_no_module_but_core_aws_takes_an_s3_uri_apart() -> None:
    offenders = {name: found for name, tree in sources()
                 if name != URI_HOME and (found := hand_parsing(tree))}
    assert offenders == {}, "parse s3:// URIs with chalicelib.core.aws.S3Uri"


@pytest.mark.parametrize(("source", "caught"), [
    ("import boto3\nboto3.client('s3')", True),
    ("from botocore.config import Config", True),
    ("import botocore.session", True),
    ("from botocore.exceptions import ClientError", False),
    ("from chalicelib import awsclients", False),
])
def test_the_client_guard_sees_a_client_built_by_hand(source: str, caught: bool) -> None:
    assert bool(client_imports(ast.parse(source))) is caught


@pytest.mark.parametrize(("source", "caught"), [
    ("text.removeprefix('s3://').split('/', 1)[0]", True),
    ("text[len(S3_SCHEME):].partition('/')", True),
    ("_S3 = 's3://'\nbucket = text[len(_S3):]", True),
    ("re.match(r'^s3://[a-z]+', text)", True),
    ("where.startswith('s3://')", True),
    ("where.startswith(S3_SCHEME)", False),
    ("f's3://{bucket}/{key}'", False),
    ("'''A location: ``s3://bucket/key``.'''", False),
    ("key.split('/', 1)", False),
])
def test_the_uri_guard_sees_an_s3_uri_taken_apart_by_hand(source: str, caught: bool) -> None:
    assert bool(hand_parsing(ast.parse(source))) is caught
