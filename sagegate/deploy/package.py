"""``chalice package`` for a deploy stage, offline: SAM (default) or Terraform.

SAM (:func:`package_sam`), into ``build/package-<stage>``:

1. the layer zip is built unless up to date;
2. ``chalicelib``'s ``__pycache__`` directories are removed (never packaged);
3. ``build/merge-<stage>.json`` gets the merge template (:mod:`sagegate.deploy.templates`);
4. ``chalice package --merge-template`` runs (through :mod:`sagegate.deploy.chalice_sam`, which
   can package the jobs' S3 event) with ``PYTHONDONTWRITEBYTECODE=1`` and
   ``AWS_DEFAULT_REGION=us-east-1`` (Chalice insists on a region; the template uses
   ``${AWS::Region}``). If it fails, ``.chalice/deployments`` is deleted: Chalice caches the
   function zip there by the hash of ``requirements.txt``, and a failed run can leave a zip
   without its dependencies that the next would reuse;
5. with ``"snapstart": true``, the packaged ``sam.json`` is edited for SnapStart;
6. the layer zip is copied beside it, and the sizes printed and checked.

Terraform (:func:`package_terraform`): Chalice's Terraform output takes no merge template, so the
layer is the ARN in the stage's ``layers``, and Chalice 1.34 cannot write
``log_retention_in_days`` as Terraform: it packages a copy of the project,
``build/terraform-src``, whose config leaves that out.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
from pathlib import Path

from sagegate.deploy import layer, templates
from sagegate.deploy.runtime import add_architecture_option
from sagegate.deploy.shell import (
    PACKAGE_REGION,
    DeployError,
    Runner,
    add_stage_option,
    build_dir,
    config_path,
    guarded,
    remove_bytecode,
    run,
    stage_for,
    tool,
)
from sagegate.deploy.sizes import ZipSize, report
from sagegate.deploy.stage import Stage
from sagegate.deploy.stages import ROOT, terraform_config

FORMATS = ("cloudformation", "terraform")
# `chalice` with SAM's S3 event for app.py's job runner (Chalice alone refuses to package it)
CHALICE_SAM = (sys.executable, "-m", "sagegate.deploy.chalice_sam")


def package_dir(stage: Stage, root: Path = ROOT, architecture: str | None = None) -> Path:
    """``build/package-<stage>``; ``build/package-<stage>-<architecture>`` for a build of another
    architecture than the stage's (so the two never overwrite each other)."""
    built = stage.built_for(architecture)
    suffix = "" if built is stage else f"-{built.architecture}"
    return build_dir(root) / f"package-{stage.name}{suffix}"


def chalice_env(region: str = PACKAGE_REGION) -> dict[str, str]:
    """No .pyc files in the zip, a region name."""
    return {"PYTHONDONTWRITEBYTECODE": "1", "AWS_DEFAULT_REGION": region}


def run_chalice(command: list[str], project: Path, runner: Runner, cwd: Path,
                region: str = PACKAGE_REGION) -> None:
    """Run a ``chalice`` command; on failure delete the project's cached deployment zips.

    Raises:
        DeployError: chalice failed (the message says the cache was removed).
    """
    try:
        runner(command, env=chalice_env(region), cwd=cwd)
    except DeployError:
        shutil.rmtree(project / ".chalice" / "deployments", ignore_errors=True)
        raise DeployError("chalice failed: removed the stale .chalice/deployments cache "
                          "(a failed run can leave a function zip without its "
                          "dependencies)") from None


def check_sizes(function_zip: Path, layer_zips: list[Path], root: Path = ROOT) -> None:
    """Print the artifacts' sizes.

    Raises:
        DeployError: a size limit is broken.
    """
    def measure(path: Path) -> ZipSize:
        size = ZipSize.of(path)
        return dataclasses.replace(size, path=path.relative_to(root)) \
            if path.is_relative_to(root) else size

    lines, broken = report(measure(function_zip), [measure(path) for path in layer_zips])
    print("\n".join(lines))
    if broken:
        raise DeployError("; ".join(broken))


def package_sam(stage: Stage, root: Path = ROOT, runner: Runner = run,
                layer_zip: Path | None = None, architecture: str | None = None) -> Path:
    directory = package_dir(stage, root, architecture)
    stage = stage.built_for(architecture)
    archive = layer_zip or layer.build(stage.architecture, root, runner)
    shutil.rmtree(directory, ignore_errors=True)
    build_dir(root).mkdir(parents=True, exist_ok=True)
    remove_bytecode(root)
    merge = build_dir(root) / f"merge-{directory.name.removeprefix('package-')}.json"
    try:
        merged = templates.merge_template(stage, root=root)
    except ValueError as error:  # e.g. the streaming function's policy not rendered yet
        raise DeployError(str(error), status=2) from None
    merge.write_text(json.dumps(merged, indent=2) + "\n", encoding="utf-8")
    run_chalice([*CHALICE_SAM, "--architecture", stage.architecture, "package", "--stage",
                 stage.name, "--merge-template",
                 str(merge.relative_to(root)), str(directory.relative_to(root))],
                project=root, runner=runner, cwd=root)
    sam = directory / "sam.json"
    if stage.snapstart:
        template = json.loads(sam.read_text(encoding="utf-8"))
        pointed = templates.apply_snapstart(template)
        sam.write_text(json.dumps(template, indent=2) + "\n", encoding="utf-8")
        print(f"{sam.relative_to(root)}: SnapStart on published versions, {pointed} "
              f"integration(s) invoke alias {templates.ALIAS!r}")
    else:
        print(f"{sam.relative_to(root)}: SnapStart is off for {stage.name}, template unchanged")
    shutil.copyfile(archive, directory / "layer.zip")
    check_sizes(directory / "deployment.zip", [directory / "layer.zip"], root)
    return directory


def package_terraform(stage: Stage, root: Path = ROOT, runner: Runner = run,
                      layer_zip: Path | None = None, architecture: str | None = None) -> Path:
    directory = package_dir(stage, root, architecture)
    stage = stage.built_for(architecture)
    archive = layer_zip or layer.build(stage.architecture, root, runner)
    if not stage.layers:
        print(f"warning: stages.{stage.name}.layers is empty: run sagegate layer --stage "
              f"{stage.name} --bucket ... (make layer) first", file=sys.stderr)
    shutil.rmtree(directory, ignore_errors=True)
    source = build_dir(root) / "terraform-src"
    shutil.rmtree(source, ignore_errors=True)
    (source / ".chalice").mkdir(parents=True)
    remove_bytecode(root)
    shutil.copy2(root / "app.py", source / "app.py")
    shutil.copytree(root / "chalicelib", source / "chalicelib",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(root / "requirements.txt", source / "requirements.txt")
    for policy in sorted((root / ".chalice").glob(f"policy-{stage.name}*.json")):
        shutil.copy2(policy, source / ".chalice")  # the API's and the monitor's
    config = terraform_config(stage.name, config_path(root))
    if architecture is not None:  # another build than the stage's own
        config["stages"][stage.name]["lambda_architecture"] = architecture
    (source / ".chalice" / "config.json").write_text(json.dumps(config, indent=2) + "\n",
                                                     encoding="utf-8")
    run_chalice([tool("chalice"), "--project-dir", str(source.relative_to(root)), "package",
                 "--pkg-format", "terraform", "--stage", stage.name, str(directory)],
                project=source, runner=runner, cwd=root)
    check_sizes(directory / "deployment.zip", [archive], root)
    return directory


def package(stage: Stage, pkg_format: str = "cloudformation", root: Path = ROOT,
            runner: Runner = run, layer_zip: Path | None = None,
            architecture: str | None = None) -> Path:
    if pkg_format == "terraform":
        return package_terraform(stage, root, runner, layer_zip, architecture)
    return package_sam(stage, root, runner, layer_zip, architecture)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=prog, description="Package a deploy stage offline into build/package-<stage>: "
        "the layer zip for the stage's lambda_architecture (built if its inputs changed), "
        "chalice package with the merge template "
        "(usage plan, gateway responses, log group, SnapStart), and the artifact sizes "
        "checked against Lambda's limits.")
    add_stage_option(parser, default="prod")
    parser.add_argument("--format", dest="pkg_format", choices=FORMATS,
                        default="cloudformation",
                        help="cloudformation: a SAM template (default); terraform: "
                             "chalice.tf.json, with the layer ARN from the stage's layers")
    add_architecture_option(parser)
    args = parser.parse_args(argv)
    return guarded(lambda: package(stage_for(args.stage), args.pkg_format,
                                   architecture=args.architecture))
