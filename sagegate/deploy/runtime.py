"""The Lambda runtime sagegate deploys to, and the wheels that can load on it.

Chalice names the runtime after its interpreter (``python3.13``), the one ``.python-version``
selects. Each Lambda Python runtime runs on one Amazon Linux release, whose glibc decides which
wheels load: ``manylinux_2_X`` needs glibc 2.X or newer. The layer's and the locks' pip
``--platform`` list is computed from that glibc instead of written by hand.
"""
from __future__ import annotations

import dataclasses
import sys

ARCHITECTURE = "x86_64"
# manylinux2014 (glibc 2.17) is the oldest tag modern wheels (numpy 2, OpenCV) still ship.
OLDEST_GLIBC_MINOR = 17


@dataclasses.dataclass(frozen=True)
class Runtime:

    name: str
    python: str
    os: str
    glibc: tuple[int, int]
    snapstart: bool

    def manylinux_platforms(self, architecture: str = ARCHITECTURE) -> list[str]:
        major, newest_minor = self.glibc
        if major != 2 or newest_minor < OLDEST_GLIBC_MINOR:
            raise ValueError(f"{self.name}: unsupported glibc {major}.{newest_minor}")
        platforms = [f"manylinux2014_{architecture}"]
        platforms += [f"manylinux_2_{minor}_{architecture}"
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

