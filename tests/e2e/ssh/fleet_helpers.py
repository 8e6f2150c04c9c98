"""The fan-out lab of test_fleet.py: 21 sshd hosts plus fault hosts, the servers that use them, and what the
tests read their answers with."""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import SocketAttribute, SocketStream
from mcp import Client
from mcp_types import CallToolResult

from tests.conftest import fields, read_records, text_of
from tests.sshd import Blackhole, SshFleet, SshHost

FLEET_SIZE = 21
ROTATED = "h20"  # trusted, then given a new host key: hostkey_rejected on server A
FAILING = "h06"  # 127.0.0.7: the fan-out command exits 3 there
SLOW = "h09"  # 127.0.0.10: the fan-out command sleeps there
DOWN_ADDRESS = "127.0.0.100"
REFUSED_ADDRESS = "127.0.0.101"
VAULT_ADDRESS = "127.0.0.99"
FANOUT_COMMAND = (
    'set -- $SSH_CONNECTION; echo "served by $3:$4"; case "$3" in 127.0.0.7) exit 3;; 127.0.0.10) sleep 30;; esac'
)
PROMPT = "READY> "
AT_PROMPT = r"^READY> $"
LOGIN_PROMPT = r"[#$] $"
NEVER = r"(?!)"


@dataclass
class Lab:
    root: Path
    fleet: SshFleet
    down: Blackhole
    vault: Blackhole
    refused_port: int

    def host(self, alias: str) -> SshHost:
        return self.fleet.host(alias)


@dataclass
class Server:
    client: Client
    audit: Path
    known_hosts: Path
    config: Path


def config_block(alias: str, address: str, port: int, key: Path) -> str:
    return f"Host {alias}\n    HostName {address}\n    Port {port}\n    User root\n    IdentityFile {key}\n"


def write_ssh_config(path: Path, lab: Lab, known_hosts: Path, extra: tuple[tuple[str, str, int], ...] = ()) -> Path:
    blocks = [config_block(h.alias, h.address, h.port, lab.fleet.client_key) for h in lab.fleet.hosts]
    blocks += [config_block(alias, address, port, lab.fleet.client_key) for alias, address, port in extra]
    blocks.append(f"Host *\n    UserKnownHostsFile {known_hosts}\n")
    path.write_text("\n".join(blocks))
    return path


def ini_inventory(lab: Lab, path: Path) -> Path:
    key = lab.fleet.client_key

    def line(name: str, alias: str) -> str:
        host = lab.host(alias)
        return (
            f"{name} ansible_host={host.address} ansible_port={host.port} ansible_user=root "
            f"ansible_ssh_private_key_file={key}\n"
        )

    path.write_text(
        "# web tier\n[web]\n"
        + line("web1", "h01")
        + line("web2", "h02")
        + line("web3", "h03")
        + "\n[db]\n"
        + line("db1", "h08")
        + "\n[prod:children]\nweb\ndb\n"
    )
    return path


async def call(client: Client, tool: str, **arguments: Any) -> CallToolResult:
    return await client.call_tool(tool, arguments)


def sha256(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def served_by(host: SshHost) -> str:
    return f"served by {host.address}:{host.port}\n"


def by_host(result: CallToolResult) -> dict[str, dict[str, Any]]:
    hosts = fields(result)["hosts"]
    named = {entry["host"]: entry for entry in hosts}
    assert len(named) == len(hosts), hosts  # every host once
    return named


def plain(text: str) -> str:
    text = re.sub(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()=>][0-9A-Za-z]?|\x1b\][^\x07]*\x07", "", text)
    return text.replace("\r\n", "\n").replace("\r", "")


def assert_invalid(result: CallToolResult, *words: str) -> None:
    text = text_of(result)
    assert result.is_error, text
    assert text.startswith("[ERROR: InvalidArgument: "), text
    for word in words:
        assert word in text, (word, text)


def records_of(audit: Path, tool: str) -> list[dict[str, Any]]:
    """The record of each call of `tool` (its end record: a call that ran also has a start record before it)."""
    return [record for record in read_records(audit) if record["tool"] == tool and record.get("phase") != "start"]


def ppid_table() -> dict[int, tuple[int, str]]:
    table: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                raw = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            rest = raw[raw.rindex(b")") + 2 :].split()
            table[int(entry)] = (int(rest[1]), rest[0].decode())
    return table


def host_processes(lab: Lab, alias: str) -> set[int]:
    """Live processes below that host's sshd listener (its connections and their sessions)."""
    listener = lab.host(alias).pid
    table = ppid_table()
    found = set()
    for pid in lab.fleet.descendants():
        current = pid
        for _ in range(64):
            parent = table.get(current, (0, ""))[0]
            if parent == listener:
                found.add(pid)
                break
            if parent <= 1:
                break
            current = parent
    return found


async def poll(condition: Any, within: float, step: float = 0.02) -> bool:
    deadline = time.monotonic() + within
    while True:
        if condition():
            return True
        if time.monotonic() > deadline:
            return False
        await anyio.sleep(step)


async def spawn_shell(client: Client, host: str, **arguments: Any) -> str:
    """A remote login shell with a fixed prompt; returns the session id."""
    spawned = await call(client, "ssh_spawn", host=host, until=LOGIN_PROMPT, timeout=15, **arguments)
    assert not spawned.is_error, text_of(spawned)
    assert fields(spawned)["wait"] == "match", text_of(spawned)
    session_id: str = fields(spawned)["session_id"]
    await run_in(client, session_id, f"PS1='{PROMPT}'; unset PROMPT_COMMAND")
    return session_id


async def run_in(client: Client, session_id: str, line: str, until: str = AT_PROMPT, timeout: float = 10) -> str:
    result = await call(client, "session_send", session_id=session_id, data=line, until=until, timeout=timeout)
    assert not result.is_error, text_of(result)
    assert fields(result)["wait"] == "match", text_of(result)
    return text_of(result)


async def remote_shell_pid(client: Client, session_id: str) -> int:
    text = plain(await run_in(client, session_id, "echo pid=$$"))
    match = re.search(r"^pid=(\d+)$", text, re.MULTILINE)
    assert match, text
    return int(match.group(1))


@asynccontextmanager
async def slow_link(address: str, port: int, delay: float, listen: str = "127.0.0.1") -> AsyncIterator[int]:
    """A TCP proxy to address:port that delivers what the server sends `delay` seconds late, in order (a WAN
    link seen from the client). Yields the proxy's port on `listen`."""
    listener = await anyio.create_tcp_listener(local_host=listen)

    async def handle(client: SocketStream) -> None:
        try:
            async with client, await anyio.connect_tcp(address, port) as upstream:
                send, receive = anyio.create_memory_object_stream[tuple[float, bytes]](10_000)

                async def upward() -> None:
                    async for chunk in client:
                        await upstream.send(chunk)
                    await upstream.send_eof()

                async def downward() -> None:
                    async with send:
                        async for chunk in upstream:
                            await send.send((anyio.current_time() + delay, chunk))

                async def deliver() -> None:
                    async with receive:
                        async for due, chunk in receive:
                            await anyio.sleep(max(0.0, due - anyio.current_time()))
                            await client.send(chunk)
                    await client.send_eof()

                async with anyio.create_task_group() as group:
                    group.start_soon(upward)
                    group.start_soon(downward)
                    group.start_soon(deliver)
        except Exception:  # one side hung up: the link is gone, as it would be
            pass

    async with anyio.create_task_group() as group:
        group.start_soon(listener.serve, handle)
        yield listener.extra(SocketAttribute.local_port)
        group.cancel_scope.cancel()
