"""Who listens on a TCP port: the program ``sagegate run`` names when its port is taken.

Linux lists every TCP socket in ``/proc/net/tcp`` and ``tcp6`` with its state and inode; its
owner has a descriptor linking to ``socket:[<inode>]`` under ``/proc/<pid>/fd``. Another user's
descriptors cannot be read without privileges, and other systems have no ``/proc``: then the
owner is unknown (None) and the caller says so.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

PROC = Path("/proc")
_LISTEN = "0A"  # the kernel's TCP_LISTEN state, as /proc/net/tcp writes it


@dataclasses.dataclass(frozen=True)
class Owner:

    pid: int
    command: str

    def __str__(self) -> str:
        return f"{self.command} (pid {self.pid})"


def listening_inodes(port: int, proc: Path = PROC) -> set[int]:
    inodes: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:  # not Linux, or no IPv6
            continue
        for fields in (line.split() for line in lines):
            if len(fields) > 9 and fields[3] == _LISTEN and _port_of(fields[1]) == port:
                inodes.add(int(fields[9]))
    return inodes


def _port_of(address: str) -> int:
    try:
        return int(address.rsplit(":", 1)[1], 16)
    except (IndexError, ValueError):
        return -1


def _pids(proc: Path) -> Iterator[Path]:
    try:
        yield from (entry for entry in proc.iterdir() if entry.name.isdigit())
    except OSError:
        return


def _holds(process: Path, links: set[str]) -> bool:
    try:
        descriptors = list((process / "fd").iterdir())
    except OSError:  # another user's process, or it has exited
        return False
    for descriptor in descriptors:
        try:
            if descriptor.readlink().name in links:
                return True
        except OSError:
            continue
    return False


def _command(process: Path) -> str:
    try:
        return process.joinpath("comm").read_text().strip() or "?"
    except OSError:
        return "?"


def port_owners(port: int, proc: Path = PROC) -> list[Owner]:
    """The processes listening on ``port`` that this user may see (empty: unknown)."""
    links = {f"socket:[{inode}]" for inode in listening_inodes(port, proc)}
    if not links:
        return []
    return sorted((Owner(int(p.name), _command(p)) for p in _pids(proc) if _holds(p, links)),
                  key=lambda owner: owner.pid)


def describe_owner(port: int, proc: Path = PROC) -> str | None:
    """``"python3 (pid 1234)"`` for the program listening on ``port``; None when unknown."""
    owners = port_owners(port, proc)
    return ", ".join(map(str, owners)) if owners else None
