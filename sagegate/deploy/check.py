"""The offline deploy checks ``make test`` runs: package every deploy stage, lint, scan.

For each deploy stage: the SAM package (with a language model, the streaming function and its
two methods in ``STREAM`` mode), the stand-alone usage-plan stack and, with ``CACHE_TABLE`` and
``TOKEN_BUDGET_TABLE``, the table stacks ``sagegate chalice-deploy`` deploys; then, with the IaC
virtualenv's tools (``.venv/iac``, ``make iac-tools``; its own because checkov pins an older
boto3):

* AWS's SAM translator expands each ``sam.json`` into plain CloudFormation
  (:mod:`sagegate.deploy.sam_translate`, run by file path under the IaC Python so it imports
  nothing of the project);
* cfn-lint on every SAM template, expansion and stand-alone stack;
* checkov (``--skip-download``: offline, no Prisma Cloud severities, so every finding counts) on
  the SAM templates and stand-alone stacks.

Accepted findings are skipped in the templates, on the resource they concern
(``Metadata.checkov.skip``, each with its reason): the function's CKV_AWS_116/117/173, the API's
CKV_AWS_120/76 (and CKV_AWS_73 while X-Ray is off), the log group's CKV_AWS_158, the cache
table's CKV_AWS_28 (no point-in-time recovery for answers the endpoint gives again) and
CKV_AWS_119 (the AWS managed key for those answers), the same two on the token budgets' table
(counters of minutes and days); on a jobs stage,
:mod:`sagegate.deploy.jobs_template`'s.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from sagegate.deploy import package, templates
from sagegate.deploy.shell import (
    DeployError,
    Runner,
    build_dir,
    guarded,
    run,
    stage_for,
)
from sagegate.deploy.stage import Stage
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
    return build_dir(root) / f"usage-plan-{stage}.json"


def cache_stack_path(stage: str, root: Path = ROOT) -> Path:
    return build_dir(root) / f"cache-{stage}.json"


def budget_stack_path(stage: str, root: Path = ROOT) -> Path:
    return build_dir(root) / f"budgets-{stage}.json"


def write_stacks(stage: Stage, root: Path = ROOT) -> list[Path]:
    build_dir(root).mkdir(parents=True, exist_ok=True)
    written = {usage_plan_path(stage.name, root): templates.usage_plan_template(stage)}
    if stage.cache_table:
        written[cache_stack_path(stage.name, root)] = templates.cache_template(stage)
    if stage.budget_table:
        written[budget_stack_path(stage.name, root)] = templates.budget_template(stage)
    for path, template in written.items():
        path.write_text(json.dumps(template, indent=2) + "\n", encoding="utf-8")
    return list(written)


def check(stages: Sequence[str] = DEPLOY_STAGES, root: Path = ROOT,
          runner: Runner = run) -> None:
    """Package every stage and run the translator, cfn-lint and checkov on the templates.

    Raises:
        DeployError: a stage does not package, or a checker finds something.
    """
    python, cfn_lint, checkov = (iac_tool(name, root) for name in ("python", "cfn-lint",
                                                                   "checkov"))
    expansions: list[tuple[Path, Path]] = []
    stacks: list[list[Path]] = []
    for name in stages:
        stage = stage_for(name, root)
        directory = package.package_sam(stage, root, runner)  # the stage's architecture
        expansions.append((directory / "sam.json", directory / "transformed.json"))
        stacks.append(write_stacks(stage, root))
    for sam, transformed in expansions:
        runner([str(python), "-I", str(SAM_TRANSLATE), _rel(sam, root), _rel(transformed, root)],
               cwd=root)
    linted = [path for pair, own in zip(expansions, stacks, strict=True)
              for path in (*pair, *own)]
    scanned = [path for (sam, _), own in zip(expansions, stacks, strict=True)
               for path in (sam, *own)]
    runner([str(cfn_lint), *(_rel(path, root) for path in linted)], cwd=root)
    runner([str(checkov), "--quiet", "--compact", "--skip-download", "--framework",
            "cloudformation", *(flag for path in scanned for flag in ("-f", _rel(path, root)))],
           cwd=root)
    print(f"check: cfn-lint and checkov passed for: {' '.join(stages)}")


def _rel(path: Path, root: Path) -> str:
    return str(path.relative_to(root))


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=prog, description="Offline deploy checks (make deploy-check, part of make "
        f"test): package every deploy stage ({', '.join(DEPLOY_STAGES)}) as SAM, write the "
        "usage-plan, cache-table and token-budgets stacks, expand the templates with AWS's SAM "
        "translator, then cfn-lint and checkov. Needs the IaC virtualenv (make iac-tools).")
    parser.add_argument("--stage", dest="stages", action="append", choices=DEPLOY_STAGES,
                        help="check only this stage (repeatable; default: every deploy stage)")
    args = parser.parse_args(argv)
    return guarded(lambda: check(tuple(args.stages or DEPLOY_STAGES)))
