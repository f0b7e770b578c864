"""The offline deploy checks ``make test`` runs: package every deploy stage, lint, scan.

For each of :data:`~sagegate.deploy.stages.DEPLOY_STAGES`: the SAM package
(:mod:`sagegate.deploy.package`) and the stand-alone usage-plan stack
(``build/usage-plan-<stage>.json``); then, with the tools of the IaC virtualenv
(``.venv/iac``, ``make iac-tools``; its own because checkov pins an older boto3):

* AWS's SAM translator expands each ``sam.json`` into plain CloudFormation
  (``transformed.json``, :mod:`sagegate.deploy.sam_translate`, run by file path under the IaC
  Python so that it imports nothing from the project);
* cfn-lint on every SAM template, expansion and usage-plan stack;
* checkov (``--skip-download``: offline, no Prisma Cloud severities, so every finding counts)
  on the SAM templates and usage-plan stacks.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from sagegate.deploy import layer, package, templates
from sagegate.deploy.shell import (
    DeployError,
    Runner,
    build_dir,
    guarded,
    run,
    stage_for,
)
from sagegate.deploy.stages import DEPLOY_STAGES, ROOT

SAM_TRANSLATE = Path(__file__).resolve().parent / "sam_translate.py"


def iac_tool(name: str, root: Path = ROOT) -> Path:
    """A program of the IaC virtualenv.

    Raises:
        DeployError: (status 2) not installed.
    """
    path = root / ".venv" / "iac" / "bin" / name
    if not path.exists():
        raise DeployError(f"{path.relative_to(root)} is missing: run make iac-tools "
                          "(make deploy-check does)", status=2)
    return path


def usage_plan_path(stage: str, root: Path = ROOT) -> Path:
    """``build/usage-plan-<stage>.json``."""
    return build_dir(root) / f"usage-plan-{stage}.json"


def check(stages: Sequence[str] = DEPLOY_STAGES, root: Path = ROOT,
          runner: Runner = run) -> None:
    """Package every stage and run the translator, cfn-lint and checkov on the templates.

    Raises:
        DeployError: a stage does not package, or a checker finds something.
    """
    python, cfn_lint, checkov = (iac_tool(name, root) for name in ("python", "cfn-lint",
                                                                   "checkov"))
    archive = layer.build(root, runner)
    expansions: list[tuple[Path, Path]] = []
    plans: list[Path] = []
    for name in stages:
        stage = stage_for(name, root)
        directory = package.package_sam(stage, root, runner, layer_zip=archive)
        expansions.append((directory / "sam.json", directory / "transformed.json"))
        plans.append(usage_plan_path(name, root))
        plans[-1].write_text(json.dumps(templates.usage_plan_template(stage), indent=2) + "\n",
                             encoding="utf-8")
    for sam, transformed in expansions:
        runner([str(python), "-I", str(SAM_TRANSLATE), _rel(sam, root), _rel(transformed, root)],
               cwd=root)
    linted = [path for pair, plan in zip(expansions, plans, strict=True) for path in (*pair, plan)]
    scanned = [path for (sam, _), plan in zip(expansions, plans, strict=True)
               for path in (sam, plan)]
    runner([str(cfn_lint), *(_rel(path, root) for path in linted)], cwd=root)
    runner([str(checkov), "--quiet", "--compact", "--skip-download", "--framework",
            "cloudformation", *(flag for path in scanned for flag in ("-f", _rel(path, root)))],
           cwd=root)
    print(f"check: cfn-lint and checkov passed for: {' '.join(stages)}")


def _rel(path: Path, root: Path) -> str:
    return str(path.relative_to(root))


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """``sagegate check``: the deploy checks of ``make test`` (was ``make deploy-check``)."""
    parser = argparse.ArgumentParser(
        prog=prog, description="Offline deploy checks (make deploy-check, part of make "
        f"test): package every deploy stage ({', '.join(DEPLOY_STAGES)}) as SAM, write the "
        "usage-plan stacks, expand the templates with AWS's SAM translator, then cfn-lint and "
        "checkov. Needs the IaC virtualenv (make iac-tools).")
    parser.add_argument("--stage", dest="stages", action="append", choices=DEPLOY_STAGES,
                        help="check only this stage (repeatable; default: every deploy stage)")
    args = parser.parse_args(argv)
    return guarded(lambda: check(tuple(args.stages or DEPLOY_STAGES)))
