"""The Lambda runtime sagegate deploys to, and the wheels that can load on it.

Chalice names the runtime after its interpreter (``python3.13``), the one ``.python-version``
selects. Each Lambda Python runtime runs on one Amazon Linux release, whose glibc decides which
wheels load: ``manylinux_2_X`` needs glibc 2.X or newer. The layer's and the locks' pip
``--platform`` list is computed from that glibc instead of written by hand, for the stage's
architecture (``lambda_architecture``: Lambda's ``x86_64`` or ``arm64``, whose wheels are
tagged ``aarch64``).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys

DEFAULT_ARCHITECTURE = "x86_64"  # Chalice's, when a stage sets no lambda_architecture
# Lambda's architecture names -> the machine name in wheel tags (and uname -m)
MACHINES = {"x86_64": "x86_64", "arm64": "aarch64"}
ARCHITECTURES = tuple(MACHINES)
# manylinux2014 (glibc 2.17) is the oldest tag modern wheels (numpy 2, OpenCV) still ship.
OLDEST_GLIBC_MINOR = 17


@dataclasses.dataclass(frozen=True)
class Runtime:

    name: str
    python: str
    os: str
    glibc: tuple[int, int]
    snapstart: bool

    def manylinux_platforms(self, architecture: str) -> list[str]:
        """pip's ``--platform`` tags for ``architecture`` (Lambda's name: x86_64 or arm64)."""
        major, newest_minor = self.glibc
        if major != 2 or newest_minor < OLDEST_GLIBC_MINOR:
            raise ValueError(f"{self.name}: unsupported glibc {major}.{newest_minor}")
        machine = MACHINES[architecture]
        platforms = [f"manylinux2014_{machine}"]
        platforms += [f"manylinux_2_{minor}_{machine}"
                      for minor in range(OLDEST_GLIBC_MINOR, newest_minor + 1)]
        return platforms


# From Lambda's runtime table: the AL2 runtimes have glibc 2.26, the AL2023 ones 2.34.
# SnapStart supports Python 3.12 and later.
RUNTIMES = {
    runtime.name: runtime for runtime in (
        Runtime("python3.11", "3.11", "Amazon Linux 2", (2, 26), snapstart=False),
        Runtime("python3.12", "3.12", "Amazon Linux 2023", (2, 34), snapstart=True),
        Runtime("python3.13", "3.13", "Amazon Linux 2023", (2, 34), snapstart=True),
        Runtime("python3.14", "3.14", "Amazon Linux 2023", (2, 34), snapstart=True),
    )
}


def runtime_for(python_version: str) -> Runtime:
    """The runtime Chalice targets from an interpreter of ``python_version`` (``"3.13"``).

    Raises:
        ValueError: Lambda has no managed runtime for that version.
    """
    name = "python" + ".".join(python_version.split(".")[:2])
    if name not in RUNTIMES:
        raise ValueError(f"Lambda has no managed runtime {name}; known: {', '.join(RUNTIMES)}")
    return RUNTIMES[name]


def current() -> Runtime:
    return runtime_for(f"{sys.version_info.major}.{sys.version_info.minor}")



def add_architecture_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--architecture", choices=ARCHITECTURES,
                        help="build for this Lambda architecture instead of the stage's "
                             "lambda_architecture (the tests run an arm64 stage's x86_64 "
                             "build on an x86_64 machine)")
