"""``sagegate``: the one command for developers and users of sagegate.

``sagegate --help`` lists the commands; ``sagegate <command> --help`` explains one. Each
command is the ``main(argv)`` of its own module, imported only when that command runs (so
``sagegate stage`` does not load OpenCV), and reads the rest of the command line with its own
argparse parser. The ``make`` targets are aliases of these commands.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import sys
from collections.abc import Callable, Sequence


@dataclasses.dataclass(frozen=True)
class Command:

    module: str
    help: str
    group: str


COMMANDS: dict[str, Command] = {
    "run": Command("sagegate.local.stack", "serve the API on 127.0.0.1:8000 against a local "
                   "SageMaker emulator (no AWS account needed)", "Develop"),
    "emulator": Command("emulator.__main__", "run the SageMaker runtime emulator alone",
                        "Develop"),
    "capture": Command("sagegate.captures.reader", "read data capture records (directory, file or "
                       "s3://) as JSON Lines or CSV", "Develop"),
    "monitor": Command("sagegate.monitor.cli", "Model Monitor's data quality baseline and "
                       "checks of captured traffic (local or s3://)", "Develop"),
    "browser": Command("sagegate.local.browser", "find the Chromium the web page's tests drive, "
                       "installing one if there is none (make test runs it)", "Develop"),
    "predict": Command("sagegate.client.cli", "classify image files and directories, "
                       "shrinking each photo here before it is sent", "Use"),
    "resize": Command("sagegate.client.cli", "resize one image to an exact size with POST "
                      "/resize", "Use"),
    "chat": Command("sagegate.client.chat", "ask a language model through the OpenAI "
                    "route, its answer streamed to the terminal", "Use"),
    "bench": Command("bench.__main__", "side-by-side benchmarks against the 2018 reference",
                     "Measure"),
    "bench-coldstart": Command("bench.coldstart", "Lambda cold start: python3.11 vs 3.13, "
                               "init, SnapStart", "Measure"),
    "bench-worstcase": Command("bench.worstcase", "the most preprocessing a crafted upload "
                               "can cost", "Measure"),
    "stage": Command("sagegate.deploy.stages", "show a stage's settings as Chalice resolves "
                     "them", "Package (offline)"),
    "layer": Command("sagegate.deploy.layer", "build the Lambda layer zip; with --bucket, "
                     "publish it (needs AWS)", "Package (offline)"),
    "package": Command("sagegate.deploy.package", "chalice package a deploy stage (SAM or "
                       "Terraform), with the layer and the size checks", "Package (offline)"),
    "check": Command("sagegate.deploy.check", "package every deploy stage, then SAM "
                     "translator, cfn-lint and checkov (make deploy-check)",
                     "Package (offline)"),
    "arm64-check": Command("sagegate.deploy.arm64", "run a stage's arm64 package (layer "
                           "imports, the handler) in an arm64 CPython under qemu",
                           "Package (offline)"),
    "lock": Command("sagegate.deploy.lock", "recompile every requirements*.txt lock (pins, "
                    "hashes) from its .in file", "Package (offline)"),
    "policy": Command("sagegate.deploy.policy", "render a stage's least-privilege IAM policy "
                      "for an account and region", "Deploy (needs AWS)"),
    "deploy": Command("sagegate.deploy.sam_deploy", "deploy a stage as one CloudFormation "
                      "stack (SAM, Path A)", "Deploy (needs AWS)"),
    "chalice-deploy": Command("sagegate.deploy.chalice_deploy", "deploy a stage with chalice "
                              "deploy, log group, SnapStart, usage plan (Path B)",
                              "Deploy (needs AWS)"),
    "snapstart": Command("sagegate.deploy.snapstart", "enable or disable SnapStart on a "
                         "chalice-deployed stage", "Deploy (needs AWS)"),
}


def _epilog() -> str:
    groups: dict[str, list[str]] = {}
    for name, command in COMMANDS.items():
        groups.setdefault(command.group, []).append(f"  {name:<16} {command.help}")
    sections = [f"{group}:\n" + "\n".join(lines) for group, lines in groups.items()]
    return "\n\n".join(sections) + "\n\n`sagegate <command> --help` explains one."


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="sagegate", description="sagegate's developer and user tools: the local stack, "
        "the capture reader, benchmarks, packaging and deployment.", epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = top.add_subparsers(dest="command", metavar="<command>", required=True,
                                  help="one of the commands below, then its own arguments")
    for name in COMMANDS:
        # listed, grouped, in the epilog; `sagegate <command> --help` is the command's own
        commands.add_parser(name, add_help=False)
    return top


def load(name: str) -> Callable[..., int]:
    main: Callable[..., int] = importlib.import_module(COMMANDS[name].module).main
    return main


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``sagegate <command> [args...]``; returns the command's exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    top = parser()
    if not args or args[0] not in COMMANDS:
        top.parse_args(args[:1])  # prints help or names the unknown command; exits
    name, rest = args[0], args[1:]
    prog = f"sagegate {name}"
    command = load(name)
    saved, sys.argv[0] = sys.argv[0], prog  # for parsers that take their name from argv[0]
    try:
        if "prog" in inspect.signature(command).parameters:
            return command(rest, prog=prog)
        return command(rest)
    finally:
        sys.argv[0] = saved


if __name__ == "__main__":
    sys.exit(main())
