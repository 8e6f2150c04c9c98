"""ssh_exec as a client calls it, the audit record it leaves, host-key fingerprints, and the remote processes
found by a marker word in their argv."""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp_types import CallToolResult

from tests.conftest import fields, read_records, text_of
from tests.sshd import SshFleet


async def ssh_exec(client: Client, host: str, command: str, **arguments: Any) -> CallToolResult:
    return await client.call_tool("ssh_exec", {"host": host, "command": command, **arguments})


def last_record(audit_path: Path, tool: str = "ssh_exec") -> dict[str, Any]:
    records = [record for record in read_records(audit_path) if record["tool"] == tool]
    assert records, f"no {tool} record in {audit_path}"
    return records[-1]


def fingerprint(public_key: Path) -> str:
    """SHA256:… of a public key file, as OpenSSH itself computes it."""
    output = subprocess.run(["ssh-keygen", "-lf", str(public_key)], capture_output=True, text=True, check=True).stdout
    return output.split()[1]


def host_key_fingerprint(fleet: SshFleet, alias: str) -> str:
    return fingerprint(Path(f"{fleet.host(alias).host_key}.pub"))


def marker() -> str:
    """A sleep duration nobody else uses, so its processes can be found by their argv in /proc."""
    return f"300.{secrets.randbelow(10**9):09d}"


def pids_running(argument: str) -> set[int]:
    """Live (non-zombie) processes with exactly this word in their argv."""
    found = set()
    wanted = argument.encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{entry.name}/stat").read_bytes()
        except OSError:
            continue
        if wanted in argv and stat[stat.rindex(b")") + 2 :].split()[0] != b"Z":
            found.add(int(entry.name))
    return found


async def wait_gone(arguments: list[str], within: float = 5.0) -> dict[str, set[int]]:
    """Poll /proc until no process carries any of these argv words; returns what is left after `within`."""
    deadline = time.monotonic() + within
    while True:
        left = {argument: pids for argument in arguments if (pids := pids_running(argument))}
        if not left or time.monotonic() > deadline:
            return left
        await anyio.sleep(0.02)


async def ssh_connections(client: Client) -> int:
    result = await client.call_tool("server_info", {})
    assert not result.is_error, text_of(result)
    return int(fields(result)["info"]["ssh"]["connections_open"])
