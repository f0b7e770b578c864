"""Expand a packaged SAM template into plain CloudFormation with AWS's own SAM translator.

cfn-lint validates SAM templates against SAM's schemas without expanding them, so it cannot
tell whether what SAM generates (the published version, the ``live`` alias, the Swagger body
that points at it) holds together. This runs the translator CloudFormation itself runs
(``aws-sam-translator``, installed in the IaC virtualenv beside cfn-lint) and writes the
result, which ``sagegate check`` lints again as plain CloudFormation::

    .venv/iac/bin/python -I sagegate/deploy/sam_translate.py build/package-prod/sam.json \
        build/package-prod/transformed.json

Offline: uploads are stood in for by S3 URIs, pseudo parameters by us-east-1, and no managed
policy is looked up (sagegate's role has inline policies only). Runs with the IaC
virtualenv's Python, by its file path, so it imports nothing from the project; ``-I`` keeps
its own directory (whose modules are named like ``policy`` and ``templates``) off
``sys.path``, and so does the guard below when it is run without ``-I``.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

_LOCAL_URIS = {"AWS::Serverless::Function": "CodeUri",
               "AWS::Serverless::LayerVersion": "ContentUri"}


class _NoManagedPolicies:
    def load(self) -> dict[str, str]:
        return {}


def translate(template: dict[str, Any]) -> dict[str, Any]:
    """The CloudFormation template SAM's transform produces from ``template``."""
    from samtranslator.translator.transform import transform

    for name, resource in template["Resources"].items():
        key = _LOCAL_URIS.get(resource["Type"])
        if key and isinstance(resource["Properties"].get(key), str):
            resource["Properties"][key] = f"s3://sagegate-artifacts/{name}.zip"
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    expanded: dict[str, Any] = transform(template, {}, _NoManagedPolicies())
    return expanded


def main(argv: list[str]) -> int:
    """``sam_translate.py SAM_TEMPLATE OUTPUT``."""
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    source, target = Path(argv[0]), Path(argv[1])
    expanded = translate(json.loads(source.read_text(encoding="utf-8")))
    target.write_text(json.dumps(expanded, indent=2) + "\n", encoding="utf-8")
    kinds = sorted({resource["Type"] for resource in expanded["Resources"].values()})
    print(f"{target}: {len(expanded['Resources'])} resources ({', '.join(kinds)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
