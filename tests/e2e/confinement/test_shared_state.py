"""End to end, through a real stdio client: what a readonly tree may not change or squat that has no path for
Landlock's file rights (adr/0024, Round 4; the attack review's R1–R4). The classifier admits `nproc` (tier 0); the
server's PATH makes it a probe (tests/e2e/confinement/shared_state_probe.py) that makes a loop device through
/dev/loop-control opened read-only, plants and searches kernel keys, takes a lease and an exclusive flock on a
file opened read-only, and binds and listens on names others need. Run unconfined (open mode) the same probe gets
through: proof each refusal is the confinement's."""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import fields, text_of
from tests.e2e.confinement import shared_state_probe
from tests.e2e.confinement.helpers import end_record, serve

pytestmark = pytest.mark.anyio


@pytest.fixture
def loop_index() -> Iterator[int]:
    with shared_state_probe.free_loop_index() as index:
        yield index


def _environment(tmp_path: Path, loop_index: int) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    shared_state_probe.install(bin_dir)
    work = tmp_path / "shared"
    work.mkdir()
    (work / "locked").write_text("a file another program locks\n")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("0.0.0.0", 0))
        udp_port = probe.getsockname()[1]
    return {
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "SHARED_DIR": str(work),
        "SHARED_LOOP": str(loop_index),
        "SHARED_UDP_PORT": str(udp_port),
        # an abstract name of 31 bytes (the binds dig, ip and ss make are 12, 16, 28 bytes long)
        "SHARED_ABSTRACT": f"relay-squat-{uuid.uuid4().hex[:18]}",
    }


async def _probe(tmp_path: Path, loop_index: int, mode: str) -> tuple[dict[str, Any], dict[str, Any]]:
    audit_path = tmp_path / f"audit-{mode}.jsonl"
    async with serve(audit_path, _environment(tmp_path, loop_index), policy_mode=mode) as client:
        result = await client.call_tool("shell_exec", {"command": "nproc"})
    assert fields(result)["exit_code"] == 0, text_of(result)
    line = next(line for line in text_of(result).splitlines() if line.startswith("{"))
    return json.loads(line), end_record(audit_path)


async def test_readonly_refuses_device_ioctls_keyrings_leases_and_squatted_names(
    tmp_path: Path, loop_index: int
) -> None:
    outcome, record = await _probe(tmp_path, loop_index, "readonly")
    assert record["tier"] == 0 and record["confinement"].startswith("landlock ABI "), record
    for name in shared_state_probe.REFUSED:
        assert outcome[name] in ("EPERM", "EACCES"), (name, outcome)
    for name in shared_state_probe.ALLOWED:
        assert outcome[name] == "ok", (name, outcome)
    # Write locks need a descriptor open for writing: the kernel's own refusal, the same outside.
    assert outcome["posix_write_lock"] == "EBADF" and outcome["ofd_write_lock"] == "EBADF", outcome
    assert outcome["null_ioctl"] == "ENOTTY", outcome  # /dev/null keeps its (empty) ioctls
    # Any other device opened by the tree: no ioctl at all from Landlock ABI 5 (IOCTL_DEV)
    device_rule = int(record["confinement"].split()[-1]) >= 5
    assert outcome["zero_ioctl"] == ("EACCES" if device_rule else "ENOTTY"), outcome
    if shared_state_probe.LOOP_ATTEMPT:  # Landlock's IOCTL_DEV from ABI 5, the filter's floor below
        assert outcome["loop_ctl_add"] == ("EACCES" if device_rule else "EPERM"), outcome
        assert not os.path.exists(f"/sys/block/loop{loop_index}")
    else:  # /dev/loop-control is root's alone: refused before any ioctl
        assert outcome["loop_ctl_add"] in ("EACCES", "ENOENT"), outcome
    # Left to the classifier (adr/0024 "What the kernel cannot stop"): a UDP port above 1023, which the filter
    # cannot tell from port 0 (the sockaddr is out of its reach).
    assert outcome["udp_port"] == "ok", outcome


async def test_open_mode_the_same_probe_gets_through(tmp_path: Path, loop_index: int) -> None:
    outcome, record = await _probe(tmp_path, loop_index, "open")
    assert "confinement" not in record
    got_through = [name for name in shared_state_probe.REFUSED if name not in ("request_key", "search_linking")]
    assert all(outcome[name] == "ok" for name in got_through), outcome
    # No such key (and no upcall asked for): the kernel looked, where readonly refuses to
    assert outcome["request_key"] == "ENOKEY" and outcome["search_linking"] == "ENOKEY", outcome
    assert outcome["zero_ioctl"] == "ENOTTY", outcome
    if shared_state_probe.LOOP_ATTEMPT:
        assert outcome["loop_ctl_add"] == "ok" and os.path.exists(f"/sys/block/loop{loop_index}"), outcome


# What read-only programs do with devices, locks and sockets, each in a readonly terminal session of its own.
# Readonly admits tier 0 only, and `stty` or a shell is not (the classifier's call, not the kernel's): the server's
# PATH makes `nproc` run $TOOL_COMMAND (from the call's `env`), confined like any tree. `stty` reopens the
# terminal as /dev/tty and by its name; `ip`/`ss` bind netlink; `getent` and `curl` resolve; `less` pages.
TOOLS = {
    "stty -a": "speed",
    "stty size": "40 120",
    "stty rows 33 cols 101 && stty size": "33 101",
    # the terminal reopened in the domain, as /dev/tty and by its name: Landlock's IOCTL_DEV granted on both
    "stty size < /dev/tty": "40 120",
    'stty -F "$(tty)" size': "40 120",
    "top -bn1 | head -1": "top -",
    "lsblk": "NAME",
    "df /": "Filesystem",
    "ip a": "lo:",
    "ss -tln": "State",
    "getent hosts localhost": "localhost",
    "curl -s -o /dev/null -w 'code %{http_code}' file:///etc/hostname": "code 000",
    "ssh -V": "OpenSSH",
}


async def test_read_only_programs_still_work_in_a_readonly_terminal(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nproc").write_text('#!/bin/sh\nexec sh -c "$TOOL_COMMAND"\n')
    (tmp_path / "bin" / "nproc").chmod(0o755)
    path = {"PATH": f"{tmp_path / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    (tmp_path / "page").write_text("".join(f"line {number}\n" for number in range(200)))
    async with serve(audit_path, path, policy_mode="readonly") as client:
        for command, expected in TOOLS.items():
            tool = {"TOOL_COMMAND": f"{command}; echo rc=$?"}
            spawned = await client.call_tool(
                "shell_spawn", {"command": "nproc", "env": tool, "until": "rc=[0-9]+", "timeout": 20}
            )
            assert expected in text_of(spawned) and "rc=0" in text_of(spawned), (command, text_of(spawned))
        paged = await client.call_tool(
            "shell_spawn",
            {"command": "nproc", "env": {"TOOL_COMMAND": f"less {tmp_path / 'page'}"}, "until": "line 5"},
        )
        assert "line 5" in text_of(paged), text_of(paged)
        session_id = fields(paged)["session_id"]
        await client.call_tool("session_kill", {"session_id": session_id})
    assert end_record(audit_path, tool="shell_spawn")["confinement"].startswith("landlock ABI ")
