"""Naming the program on a port (:mod:`sagegate.local.ports`): a real socket this test opens on
127.0.0.1, then fake ``/proc`` trees for what the real one cannot show on demand (another
user's process, no ``/proc`` at all)."""
from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sagegate.local.ports import Owner, describe_owner, listening_inodes, port_owners
from sagegate.local.preflight import StartError, check_port_free

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
HEADER = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
          "timeout inode\n")


@pytest.fixture
def listening() -> Iterator[int]:
    """A port this process listens on, on 127.0.0.1."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def own_command() -> str:
    return Path("/proc/self/comm").read_text().strip()


@linux
def test_the_process_listening_on_a_port_is_named_with_its_pid(listening: int) -> None:
    assert port_owners(listening) == [Owner(os.getpid(), own_command())]
    assert describe_owner(listening) == f"{own_command()} (pid {os.getpid()})"


@linux
def test_make_run_names_the_program_on_its_port(listening: int) -> None:
    with pytest.raises(StartError) as refused:
        check_port_free(listening, "API_PORT")
    message = str(refused.value)
    assert f"port {listening} on 127.0.0.1 (API_PORT) is used by {own_command()} " \
           f"(pid {os.getpid()}): stop it" in message
    assert "make run API_PORT=9000" in message


@linux
def test_a_port_nobody_listens_on_has_no_owner() -> None:
    with socket.socket() as bound:  # bound, not listening: no LISTEN entry
        bound.bind(("127.0.0.1", 0))
        assert describe_owner(bound.getsockname()[1]) is None


def fake_proc(root: Path, tcp: str = "", tcp6: str = "") -> Path:
    (root / "net").mkdir(parents=True)
    (root / "net" / "tcp").write_text(HEADER + tcp)
    (root / "net" / "tcp6").write_text(HEADER + tcp6)
    return root


def entry(address: str, state: str, inode: int) -> str:
    return (f"   0: {address} 00000000:0000 {state} 00000000:00000000 00:00000000 00000000  "
            f"1000        0 {inode} 1 0000000000000000 100 0 0 10 0\n")


def process(root: Path, pid: int, command: str, *links: str) -> None:
    fd = root / str(pid) / "fd"
    fd.mkdir(parents=True)
    (root / str(pid) / "comm").write_text(command + "\n")
    for number, link in enumerate(links):
        (fd / str(number)).symlink_to(link)


def test_listening_sockets_are_read_from_both_tables_by_port_and_state(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, tcp=entry("0100007F:1F40", "0A", 11)
                     + entry("0100007F:1F40", "01", 12)  # an established connection
                     + entry("00000000:1F41", "0A", 13),
                     tcp6=entry("00000000000000000000000000000000:1F40", "0A", 14))
    assert listening_inodes(8000, proc) == {11, 14}


def test_the_owner_is_found_through_its_socket_descriptor(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, tcp=entry("0100007F:1F40", "0A", 4242))
    process(proc, 300, "nginx", "/dev/null", "socket:[4242]")
    process(proc, 301, "bash", "socket:[999]")
    assert describe_owner(8000, proc) == "nginx (pid 300)"


def test_an_owner_this_user_may_not_see_is_unknown(tmp_path: Path) -> None:
    """The socket is listed, but no readable descriptor links to it (another user's)."""
    proc = fake_proc(tmp_path, tcp=entry("0100007F:1F40", "0A", 4242))
    process(proc, 301, "bash", "socket:[999]")
    (proc / "302").mkdir()  # a process whose fd directory cannot be read
    assert describe_owner(8000, proc) is None


def test_without_proc_the_owner_is_unknown(tmp_path: Path) -> None:
    assert describe_owner(8000, tmp_path / "no-proc") is None


def test_an_unnamed_owner_still_leaves_one_way_out(monkeypatch: pytest.MonkeyPatch,
                                                   listening: int) -> None:
    monkeypatch.setattr("sagegate.local.preflight.describe_owner", lambda port: None)
    with pytest.raises(StartError) as refused:
        check_port_free(listening, "EMULATOR_PORT")
    message = str(refused.value)
    assert "could not be named" in message and f"lsof -i :{listening}" in message
    assert "stop what uses it or pick another port, e.g. make run EMULATOR_PORT=9000" in message
