"""End to end: the SSH fleet tools (ssh_fanout, ssh_check, ssh_hosts, ssh_exec policy, ssh_spawn sessions,
inventory resources) through a real relay-shell stdio server and a fleet of real OpenSSH servers.

One fleet of 21 `sshd` (h01..h21 on 127.0.0.2..127.0.0.22) serves the whole module; every known_hosts file
the servers use is this module's own. Fault hosts: `down` (a Blackhole that never answers), `refused` (a
port where nothing listens), `vault` (a Blackhole denied by policy, so any contact would be counted) and
h20, whose host key is rotated after it was trusted. Servers, each module-scoped where it can be:

- A (fanout): every fleet host plus the fault hosts in its ssh_config; deny `127\\.0\\.0\\.99` (vault).
- B (inventory + policy + bounds): an Ansible INI inventory, FANOUT_MAX_HOSTS=5, deny rules on h04's
  address and on `rm -rf`.
- C (sessions): transcripts in RECORD_DIR.
- the YAML inventory, the deny rule on an alias (`^h07$`), the localhost host-key case and the disconnect
  test start servers of their own. `slow_link` (a TCP proxy that delays the server's bytes) stands in for a
  WAN link or a host on another loopback address.

Not covered here: session ownership between two clients of the same server. conftest's `connect()` starts
one stdio server per client, so two clients can never share a session registry.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import asyncssh
import pytest
from anyio.abc import SocketAttribute, SocketStream
from mcp import Client
from mcp_types import CallToolResult, TextResourceContents

from tests.conftest import connect, read_records, text_of
from tests.sshd import Blackhole, SshFleet, SshHost, refused_port

pytestmark = pytest.mark.anyio

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


# -- fleet and servers -------------------------------------------------------------------------------------


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


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("ssh_fleet")
    with (
        SshFleet(root / "fleet", FLEET_SIZE) as fleet,
        Blackhole(DOWN_ADDRESS) as down,
        Blackhole(VAULT_ADDRESS) as vault,
    ):
        fleet.trust()  # server A's known_hosts (fleet.known_hosts) lists every host ...
        fleet.rotate_host_key(ROTATED)  # ... and h20 with a key it no longer has
        yield Lab(root, fleet, down, vault, refused_port(REFUSED_ADDRESS))


@pytest.fixture(scope="module")
async def server_a(lab: Lab) -> AsyncIterator[Server]:
    extra = (
        ("down", DOWN_ADDRESS, lab.down.port),
        ("refused", REFUSED_ADDRESS, lab.refused_port),
        ("vault", VAULT_ADDRESS, lab.vault.port),
    )
    config = write_ssh_config(lab.root / "a_ssh_config", lab, lab.fleet.known_hosts, extra)
    audit = lab.root / "a_audit.jsonl"
    settings = {"ssh_config": str(config), "ssh_connect_timeout": "1", "policy_deny": json.dumps([r"127\.0\.0\.99"])}
    async with connect(audit, **settings) as client:
        yield Server(client, audit, lab.fleet.known_hosts, config)


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


@pytest.fixture(scope="module")
async def server_b(lab: Lab) -> AsyncIterator[Server]:
    known_hosts = lab.root / "b_known_hosts"
    config = write_ssh_config(lab.root / "b_ssh_config", lab, known_hosts)
    inventory = ini_inventory(lab, lab.root / "hosts.ini")
    audit = lab.root / "b_audit.jsonl"
    settings = {
        "ssh_config": str(config),
        "inventory": str(inventory),
        "fanout_max_hosts": "5",
        "policy_deny": json.dumps([r"127\.0\.0\.5", "rm -rf"]),
    }
    async with connect(audit, **settings) as client:
        yield Server(client, audit, known_hosts, config)


@pytest.fixture(scope="module")
async def server_c(lab: Lab) -> AsyncIterator[Server]:
    known_hosts = lab.root / "c_known_hosts"
    config = write_ssh_config(lab.root / "c_ssh_config", lab, known_hosts)
    audit = lab.root / "c_audit.jsonl"
    async with connect(audit, ssh_config=str(config), record_dir=str(lab.root / "casts")) as client:
        yield Server(client, audit, known_hosts, config)


# -- helpers -----------------------------------------------------------------------------------------------


async def call(client: Client, tool: str, **arguments: Any) -> CallToolResult:
    return await client.call_tool(tool, arguments)


def fields(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None, text_of(result)
    return result.structured_content


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


def alive(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return raw[raw.rindex(b")") + 2 :].split()[0] != b"Z"


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


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


# -- 1. fan-out over the fleet with every kind of failure ----------------------------------------------------


def fault_hosts() -> list[str]:
    return ["down", "refused", "vault"]


def all_hosts(lab: Lab) -> list[str]:
    return [host.alias for host in lab.fleet.hosts] + fault_hosts()


def check_fanout_hosts(lab: Lab, result: CallToolResult) -> None:
    hosts = by_host(result)
    assert list(hosts) == all_hosts(lab)  # every host, in the order asked
    for host in lab.fleet.hosts:
        entry = hosts[host.alias]
        if host.alias in (ROTATED, FAILING, SLOW):
            continue
        assert entry["status"] == "ok", entry
        assert entry["exit_code"] == 0, entry
        assert entry["output"] == served_by(host), entry
        assert entry["output_bytes"] == len(served_by(host))
        assert entry["output_sha256"] == sha256(served_by(host))
        assert entry["truncated"] is False
    failed = hosts[FAILING]
    assert (failed["status"], failed["exit_code"]) == ("failed", 3), failed
    assert failed["output"] == served_by(lab.host(FAILING))
    assert failed["output_sha256"] == sha256(served_by(lab.host(FAILING)))
    slow = hosts[SLOW]
    assert slow["status"] == "timeout", slow
    assert slow.get("exit_code") is None
    assert slow["output"] == served_by(lab.host(SLOW))  # partial output is kept
    assert "TIMEOUT after 2s" in slow["error"]
    rotated = hosts[ROTATED]
    assert rotated["status"] == "hostkey_rejected", rotated
    assert rotated["error"].startswith("HostKeyMismatch: "), rotated
    assert "output" not in rotated
    down = hosts["down"]
    assert down["status"] == "unreachable", down
    assert down["error"].startswith("ConnectTimeout: "), down
    refused = hosts["refused"]
    assert refused["status"] == "unreachable", refused
    assert refused["error"].startswith("ConnectionRefused: "), refused
    vault = hosts["vault"]
    assert vault["status"] == "denied", vault
    assert "deny pattern" in vault["error"], vault
    assert "output" not in vault and "exit_code" not in vault
    assert fields(result)["summary"] == {
        "ok": 18,
        "failed": 1,
        "unreachable": 2,
        "timeout": 1,
        "denied": 1,
        "auth_failed": 0,
        "hostkey_rejected": 1,
    }


async def test_fanout_over_24_hosts_reports_every_status(lab: Lab, server_a: Server) -> None:
    hosts = all_hosts(lab)
    assert len(hosts) == 24
    known_before = server_a.known_hosts.read_text()
    started = time.monotonic()
    result = await call(server_a.client, "ssh_fanout", command=FANOUT_COMMAND, hosts=hosts, timeout=2)
    elapsed = time.monotonic() - started
    text = text_of(result)
    assert not result.is_error, text  # some hosts ran: not an error, but not all ok
    assert fields(result)["status"] == "exit_nonzero"
    first = text.split("\n", 1)[0]
    assert re.fullmatch(
        r"\[fanout 24 hosts: 18 ok, 1 failed, 2 unreachable, 1 timeout, 1 denied, 1 hostkey_rejected "
        r"\| \d+\.\ds\]",
        first,
    ), first
    assert f"=== {FAILING}: failed exit 3 " in text
    assert re.search(rf"^=== {SLOW}: timeout \d+ms \| TIMEOUT after 2s$", text, re.MULTILINE), text
    assert re.search(r"^=== refused: unreachable \d+ms \| ConnectionRefused: ", text, re.MULTILINE), text
    assert re.search(r"^=== h01: ok exit 0 \d+ms\n" + re.escape(served_by(lab.host("h01"))), text, re.MULTILINE)
    check_fanout_hosts(lab, result)
    assert elapsed < 10, elapsed
    # Hosts ran in parallel: the call took less than its hosts' times added up.
    assert fields(result)["duration_ms"] < sum(entry["duration_ms"] for entry in fields(result)["hosts"]) - 500
    # The changed key was refused, never appended; every other key was already known.
    assert server_a.known_hosts.read_text() == known_before
    assert lab.vault.connections == 0  # the denied host was never contacted

    # The remote `sleep 30` on the timed-out host was killed with its session.
    assert await poll(lambda: not any(comm(pid) == "sleep" for pid in host_processes(lab, SLOW)), 5)

    record = [
        r
        for r in records_of(server_a.audit, "ssh_fanout")
        if r["args"].get("command") == FANOUT_COMMAND and "concurrency" not in r["args"]
    ][-1]
    statuses = {entry["host"]: entry["status"] for entry in record["target"]["hosts"]}
    assert statuses == {name: entry["status"] for name, entry in by_host(result).items()}
    assert record["outcome"] == "exit_nonzero" and record["denied"] is False
    assert record["output_sha256"] == sha256(text)


async def test_fanout_with_concurrency_one_gives_the_same_results(lab: Lab, server_a: Server) -> None:
    result = await call(
        server_a.client, "ssh_fanout", command=FANOUT_COMMAND, hosts=",".join(all_hosts(lab)), timeout=2, concurrency=1
    )
    text = text_of(result)
    assert not result.is_error, text
    assert text.startswith(
        "[fanout 24 hosts: 18 ok, 1 failed, 2 unreachable, 1 timeout, 1 denied, 1 hostkey_rejected | "
    ), text
    check_fanout_hosts(lab, result)
    assert lab.vault.connections == 0
    # One host at a time: the call took at least as long as its hosts' times added up.
    durations = [entry["duration_ms"] for entry in fields(result)["hosts"]]
    assert sum(durations) >= 2900  # down (connect timeout 1 s) + h09 (timeout 2 s)
    assert fields(result)["duration_ms"] >= sum(durations) - len(durations)


async def test_changed_host_key_stops_exec_and_spawn(lab: Lab, server_a: Server) -> None:
    known_before = server_a.known_hosts.read_text()
    for tool, arguments in (("ssh_exec", {"command": "true"}), ("ssh_spawn", {})):
        result = await call(server_a.client, tool, host=ROTATED, **arguments)
        text = text_of(result)
        assert result.is_error, text
        assert text.startswith(f"[ERROR: HostKeyMismatch: root@{lab.host(ROTATED).address}:"), text
    assert server_a.known_hosts.read_text() == known_before
    assert fields(await call(server_a.client, "session_list"))["sessions"] == []


# -- 2. progress ---------------------------------------------------------------------------------------------


async def test_fanout_reports_progress_per_finished_host(server_a: Server) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    hosts = ["h01", "h02", "h03", "h05", "refused", "vault"]
    result = await server_a.client.call_tool(
        "ssh_fanout", {"command": "echo hi", "hosts": hosts, "timeout": 5}, progress_callback=on_progress
    )
    assert not result.is_error, text_of(result)
    assert fields(result)["summary"]["ok"] == 4
    # Notifications precede the response on the stream; give the callback a moment to run.
    assert await poll(lambda: len(seen) >= len(hosts), 2), seen
    assert all(total == len(hosts) for _, total, _ in seen), seen
    # One notification per finished host (the denied one too), the last one saying all are done.
    assert [progress for progress, _, _ in seen] == [float(n) for n in range(1, len(hosts) + 1)]
    assert seen[-1][2] == f"{len(hosts)} of {len(hosts)} hosts done"


# -- 3. ssh_check --------------------------------------------------------------------------------------------


async def test_check_without_hosts_probes_every_inventory_host(lab: Lab, server_a: Server) -> None:
    result = await call(server_a.client, "ssh_check", timeout=5)
    text = text_of(result)
    assert not result.is_error, text
    assert re.match(r"\[check 24 hosts: 20 ok, 2 unreachable, 1 denied, 1 hostkey_rejected \| \d+\.\ds\]\n", text)
    hosts = by_host(result)
    assert set(hosts) == set(all_hosts(lab))
    expected = {alias: "ok" for alias in all_hosts(lab)}
    expected.update({ROTATED: "hostkey_rejected", "down": "unreachable", "refused": "unreachable", "vault": "denied"})
    assert {name: entry["status"] for name, entry in hosts.items()} == expected
    for entry in hosts.values():
        assert "output" not in entry and "output_sha256" not in entry, entry
    assert lab.vault.connections == 0
    assert fields(result)["tier"] == 0


async def test_check_named_hosts(lab: Lab, server_a: Server) -> None:
    result = await call(server_a.client, "ssh_check", hosts="h01, refused,h20 ,vault", timeout=5)
    text = text_of(result)
    assert not result.is_error, text
    assert text.startswith("[check 4 hosts: 1 ok, 1 unreachable, 1 denied, 1 hostkey_rejected | ")
    hosts = by_host(result)
    assert list(hosts) == ["h01", "refused", "h20", "vault"]
    assert [entry["status"] for entry in hosts.values()] == ["ok", "unreachable", "hostkey_rejected", "denied"]
    assert hosts["h01"]["exit_code"] == 0
    assert hosts["refused"]["error"].startswith("ConnectionRefused: ")
    assert all("output" not in entry for entry in hosts.values())
    only_denied = await call(server_a.client, "ssh_check", hosts=["vault"])
    assert only_denied.is_error
    assert text_of(only_denied).startswith("[DENIED tier 0 "), text_of(only_denied)
    assert lab.vault.connections == 0


# -- 4. bounds -----------------------------------------------------------------------------------------------


async def test_fanout_argument_bounds(server_b: Server) -> None:
    client = server_b.client
    six = ["h01", "h02", "h03", "h05", "h06", "h08"]
    assert_invalid(await call(client, "ssh_fanout", command="true", hosts=six), "hosts: 6 hosts", "at most 5")
    assert_invalid(await call(client, "ssh_check", hosts=six), "hosts: 6 hosts", "at most 5")
    every = FLEET_SIZE + 4  # the ssh_config aliases and the inventory's web1..web3, db1
    assert_invalid(await call(client, "ssh_fanout", command="true", hosts="@all"), f"hosts: {every} hosts", "at most 5")
    assert_invalid(await call(client, "ssh_check"), f"hosts: {every} hosts", "at most 5")
    empties: list[str | list[str]] = [[], "", " , "]
    for empty in empties:
        assert_invalid(await call(client, "ssh_fanout", command="true", hosts=empty), "hosts: is empty")
    assert_invalid(await call(client, "ssh_fanout", command="true", hosts="@nope"), "hosts", "'nope'", "web")
    assert_invalid(await call(client, "ssh_fanout", command="true", hosts=["h01", "@nope"]), "hosts", "'nope'")
    assert_invalid(await call(client, "ssh_fanout", command="true", hosts="h01", concurrency=0), "concurrency")
    assert_invalid(await call(client, "ssh_fanout", command="  ", hosts="h01"), "command: is empty")
    records = records_of(server_b.audit, "ssh_fanout")
    assert len(records) >= 9 and all(r["outcome"] == "error" for r in records[-9:])


async def test_fanout_output_per_host_is_cut_head_and_tail_with_the_full_digest(lab: Lab, server_b: Server) -> None:
    command = "printf HEAD; head -c 9992 /dev/zero | tr '\\0' a; printf TAIL"
    full = b"HEAD" + b"a" * 9992 + b"TAIL"
    result = await call(
        server_b.client, "ssh_fanout", command=command, hosts=["h01", "h02"], max_output_per_host=300, timeout=10
    )
    text = text_of(result)
    assert not result.is_error, text
    assert text.startswith("[fanout 2 hosts: 2 ok | ")
    for entry in by_host(result).values():
        assert entry["status"] == "ok"
        assert entry["truncated"] is True
        assert entry["output_bytes"] == 10000
        assert entry["output_sha256"] == sha256(full)
        assert entry["output"] == "HEAD" + "a" * 146 + "\n…\n" + "a" * 146 + "TAIL"
    assert text.count("[TRUNCATED: 10000 bytes produced, 300 shown]") == 2


# -- 5. inventory ----------------------------------------------------------------------------------------------


async def test_ansible_ini_inventory_groups_hosts_and_resources(lab: Lab, server_b: Server) -> None:
    client, audit = server_b.client, server_b.audit
    web = {"web1": lab.host("h01"), "web2": lab.host("h02"), "web3": lab.host("h03")}

    ran = await call(client, "ssh_fanout", command='set -- $SSH_CONNECTION; echo "served by $3:$4"', hosts="@web")
    assert not ran.is_error, text_of(ran)
    assert text_of(ran).startswith("[fanout 3 hosts: 3 ok | ")
    hosts = by_host(ran)
    assert sorted(hosts) == sorted(web)
    for name, host in web.items():
        assert hosts[name]["output"] == served_by(host)

    checked = await call(client, "ssh_check", hosts="@prod")
    assert sorted(by_host(checked)) == ["db1", "web1", "web2", "web3"]
    assert all(entry["status"] == "ok" for entry in by_host(checked).values()), text_of(checked)

    listed = await call(client, "ssh_hosts")
    assert not listed.is_error, text_of(listed)
    inventory = fields(listed)["inventory"]
    entries = {entry["name"]: entry for entry in inventory["hosts"]}
    for name, host in web.items():
        entry = entries[name]
        assert (entry["hostname"], entry["port"], entry["user"]) == (host.address, host.port, "root")
        assert entry["key_path"] == str(lab.fleet.client_key)
        assert entry["groups"] == ["prod", "web"]
        assert entry["source"] == str(lab.root / "hosts.ini")
    assert entries["db1"]["groups"] == ["db", "prod"]
    assert entries["db1"]["hostname"] == lab.host("h08").address
    assert entries["h05"]["source"] == "ssh_config"
    assert inventory["groups"]["web"] == ["web1", "web2", "web3"]
    assert inventory["groups"]["db"] == ["db1"]
    assert inventory["groups"]["prod"] == ["db1", "web1", "web2", "web3"]
    assert inventory["problems"] == []
    web2 = lab.host("h02")
    assert re.search(
        rf"^web2  root@{re.escape(web2.address)}:{web2.port} \[prod, web\]  \(", text_of(listed), re.MULTILINE
    ), text_of(listed)

    before = len(read_records(audit))
    whole = await client.read_resource("relay-shell://inventory")
    (content,) = whole.contents
    assert isinstance(content, TextResourceContents)
    assert json.loads(content.text)["groups"]["web"] == ["web1", "web2", "web3"]
    assert {entry["name"]: entry["hostname"] for entry in json.loads(content.text)["hosts"]}["web3"] == "127.0.0.4"

    one = await client.read_resource("relay-shell://inventory/web2")
    (one_content,) = one.contents
    assert isinstance(one_content, TextResourceContents)
    resolved = json.loads(one_content.text)
    assert (resolved["host"], resolved["address"], resolved["port"], resolved["user"]) == (
        "web2",
        web2.address,
        web2.port,
        "root",
    )
    fingerprint = asyncssh.read_public_key(f"{lab.fleet.client_key}.pub").get_fingerprint("sha256")
    assert resolved["key"] == fingerprint
    assert resolved["groups"] == ["prod", "web"]
    assert resolved["host_key_mode"] == "accept-new"
    assert resolved["known_hosts_files"] == [str(server_b.known_hosts)]
    assert resolved["host_key_known"] is True  # the fan-out above trusted it (accept-new)

    config = await client.read_resource("relay-shell://ssh-config")
    (config_content,) = config.contents
    assert isinstance(config_content, TextResourceContents)
    assert f"# file: {server_b.config}" in config_content.text
    h04 = lab.host("h04")
    assert f"Host h04\n    HostName {h04.address}\n    Port {h04.port}\n" in config_content.text

    pulls = read_records(audit)[before:]
    assert [record["tool"] for record in pulls] == [
        "resource:inventory",
        "resource:inventory_host",
        "resource:ssh_config",
    ]
    for record, text in zip(pulls, [content.text, one_content.text, config_content.text], strict=True):
        assert record["tier"] == 0 and record["outcome"] == "ok"
        assert record["output_sha256"] == sha256(text)
    assert pulls[1]["args"]["uri"] == "relay-shell://inventory/web2"


async def test_ansible_yaml_inventory(lab: Lab) -> None:
    root = lab.root / "yaml"
    root.mkdir()
    known_hosts = root / "known_hosts"
    config = root / "ssh_config"
    config.write_text(f"Host *\n    UserKnownHostsFile {known_hosts}\n")

    def entry(alias: str) -> str:
        host = lab.host(alias)
        return f"          ansible_host: {host.address}\n          ansible_port: {host.port}\n"

    # The key comes from `all`'s vars, the user from each group's (or the host's own) vars.
    inventory = root / "inventory.yml"
    inventory.write_text(
        f"all:\n  vars:\n    ansible_ssh_private_key_file: {lab.fleet.client_key}\n    ansible_user: nobody\n"
        "  children:\n    app:\n      vars:\n        ansible_user: root\n      hosts:\n        app1:\n"
        + entry("h12")
        + "        app2:\n"
        + entry("h13")
        + "    batch:\n      hosts:\n        job1:\n"
        + entry("h14")
        + "          ansible_user: root\n"
    )
    async with connect(root / "audit.jsonl", ssh_config=str(config), inventory=str(inventory)) as client:
        listed = fields(await call(client, "ssh_hosts"))["inventory"]
        assert sorted(entry["name"] for entry in listed["hosts"]) == ["app1", "app2", "job1"]
        assert listed["groups"]["app"] == ["app1", "app2"]
        assert listed["groups"]["batch"] == ["job1"]
        assert listed["problems"] == []
        assert {entry["name"]: entry["user"] for entry in listed["hosts"]} == {
            "app1": "root",
            "app2": "root",
            "job1": "root",
        }
        assert {entry["name"]: entry["groups"] for entry in listed["hosts"]} == {
            "app1": ["app"],
            "app2": ["app"],
            "job1": ["batch"],
        }
        command = 'set -- $SSH_CONNECTION; echo "served by $3:$4"'
        ran = await call(client, "ssh_fanout", command=command, hosts="@app")
        assert text_of(ran).startswith("[fanout 2 hosts: 2 ok | "), text_of(ran)
        hosts = by_host(ran)
        assert list(hosts) == ["app1", "app2"]
        assert hosts["app1"]["output"] == served_by(lab.host("h12"))
        assert hosts["app2"]["output"] == served_by(lab.host("h13"))
        batch = by_host(await call(client, "ssh_fanout", command=command, hosts=["@batch"]))
        assert list(batch) == ["job1"]
        assert batch["job1"]["output"] == served_by(lab.host("h14"))
    lines = known_hosts.read_text().splitlines()
    assert sorted(line.split()[0] for line in lines) == sorted(
        f"[{lab.host(alias).address}]:{lab.host(alias).port}" for alias in ("h12", "h13", "h14")
    )


# -- 6. policy sees the target in every spelling ------------------------------------------------------------


async def test_deny_rule_on_an_address_holds_for_every_spelling(lab: Lab, server_b: Server, tmp_path: Path) -> None:
    client, audit = server_b.client, server_b.audit
    h04 = lab.host("h04")
    assert h04.address == "127.0.0.5"
    marker = tmp_path / "ran"
    port = h04.port
    spellings = [
        ("h04", {}),
        (f"root@127.0.0.5:{port}", {}),
        ("2130706437", {"port": port}),
        (f"0x7f000005:{port}", {}),
        (f"0177.0.0.5:{port}", {}),
        (f"127.5:{port}", {}),
        (f"[::ffff:127.0.0.5]:{port}", {}),
        (f"root@[::ffff:7f00:5]:{port}", {}),
        ("127.000.000.005", {"port": port}),
    ]
    before = len(records_of(audit, "ssh_exec"))
    # With the key and user given, a spelling that got past the rule would really run the command.
    login = {"key_path": str(lab.fleet.client_key), "user": "root"}
    for host, extra in spellings:
        result = await call(client, "ssh_exec", host=host, command=f"touch {marker}", timeout=5, **login, **extra)
        text = text_of(result)
        assert result.is_error, (host, text)
        assert text.startswith("[DENIED tier "), (host, text)
        assert repr(r"127\.0\.0\.5") in text, (host, text)
    # The other tools that reach a host see the same spellings.
    spawned = await call(client, "ssh_spawn", host=f"127.5:{port}", command=f"touch {marker}")
    assert text_of(spawned).startswith("[DENIED tier "), text_of(spawned)
    jumped = await call(client, "ssh_exec", host="h05", jump=f"0x7f000005:{port}", command=f"touch {marker}")
    assert text_of(jumped).startswith("[DENIED tier "), text_of(jumped)
    spelled = [f"2130706437:{port}", f"[::ffff:7f00:5]:{port}"]
    checked = await call(client, "ssh_check", hosts=spelled)
    assert text_of(checked).startswith("[DENIED tier 0 "), text_of(checked)
    fanned = await call(client, "ssh_fanout", command=f"touch {marker}", hosts=[*spelled, "h05"])
    assert [entry["status"] for entry in fields(fanned)["hosts"]] == ["denied", "denied", "ok"], text_of(fanned)
    marker.unlink()  # h05 ran it
    records = records_of(audit, "ssh_exec")[before : before + len(spellings)]
    assert len(records) == len(spellings)
    assert all(record["denied"] is True and record["outcome"] == "denied" for record in records)
    assert [record["args"]["host"] for record in records] == [host for host, _ in spellings]
    assert all(record["target"]["address"] for record in records)

    # A host that is not denied runs, and is written to known_hosts (so the check below can fail).
    h05 = lab.host("h05")
    # (A bare address matches no `Host` alias, so like `ssh` it needs the key named.)
    allowed = await call(
        client,
        "ssh_exec",
        host=f"root@{h05.address}:{h05.port}",
        command="echo ran-$((2+3))",
        key_path=str(lab.fleet.client_key),
    )
    assert text_of(allowed).startswith("[exit 0]\n"), text_of(allowed)
    assert "ran-5" in text_of(allowed).splitlines()
    known = server_b.known_hosts.read_text()
    assert f"[{h05.address}]:{h05.port} " in known
    assert f"]:{port} " not in known  # h04 (the only sshd on its port) was never contacted, under any name
    assert not marker.exists()


async def test_deny_rule_on_an_alias_holds_for_its_address(lab: Lab, tmp_path: Path) -> None:
    known_hosts = tmp_path / "known_hosts"
    config = write_ssh_config(tmp_path / "ssh_config", lab, known_hosts)
    h07 = lab.host("h07")
    marker = tmp_path / "ran"
    key: dict[str, Any] = {"key_path": str(lab.fleet.client_key)}
    decimal = str(int.from_bytes(bytes(map(int, h07.address.split("."))), "big"))
    async with connect(tmp_path / "audit.jsonl", ssh_config=str(config), policy_deny=json.dumps(["^h07$"])) as client:
        spellings: list[tuple[str, dict[str, Any]]] = [
            ("h07", {}),
            (f"root@{h07.address}:{h07.port}", key),
            (h07.address, {"port": h07.port, "user": "root", **key}),
            (decimal, {"port": h07.port, "user": "root", **key}),
            (f"[::ffff:{h07.address}]:{h07.port}", {"user": "root", **key}),
        ]
        for host, extra in spellings:
            result = await call(client, "ssh_exec", host=host, command=f"touch {marker}", timeout=5, **extra)
            assert result.is_error, (host, text_of(result))
            assert text_of(result).startswith("[DENIED tier "), (host, text_of(result))
            assert "'^h07$'" in text_of(result), (host, text_of(result))
        # Only h07 is refused: the other hosts (on other loopback addresses) still run.
        by_address = f"root@{h07.address}:{h07.port}"
        fanned = await call(client, "ssh_fanout", command="echo ran", hosts=[by_address, "h05", "h06"], **key)
        assert not fanned.is_error, text_of(fanned)
        statuses = {name: entry["status"] for name, entry in by_host(fanned).items()}
        assert statuses == {by_address: "denied", "h05": "ok", "h06": "ok"}, text_of(fanned)
    assert not marker.exists()
    known = known_hosts.read_text()
    assert f"[{lab.host('h05').address}]:{lab.host('h05').port} " in known
    assert f"[{h07.address}]:{h07.port} " not in known


async def test_a_new_host_on_another_loopback_address_is_not_taken_for_localhost(lab: Lab, tmp_path: Path) -> None:
    """known_hosts pins a key for `[localhost]:PORT`; a different sshd at 127.0.0.30:PORT is a different host
    (as for `ssh`): accept-new trusts it, it is not a changed key of localhost."""
    known_hosts = tmp_path / "known_hosts"
    config = tmp_path / "ssh_config"
    config.write_text(f"Host *\n    UserKnownHostsFile {known_hosts}\n")
    h16, h17 = lab.host("h16"), lab.host("h17")
    async with slow_link(h16.address, h16.port, 0.0, listen="127.0.0.30") as port:
        other_key = h17.host_key_line().split(" ", 1)[1]
        known_hosts.write_text(f"[localhost]:{port} {other_key}\n")
        async with connect(tmp_path / "audit.jsonl", ssh_config=str(config)) as client:
            result = await call(
                client,
                "ssh_exec",
                host=f"root@127.0.0.30:{port}",
                key_path=str(lab.fleet.client_key),
                command="echo ran-$((2*4))",
            )
    assert text_of(result).startswith("[exit 0]\n"), text_of(result)
    assert "ran-8" in text_of(result).splitlines()
    assert f"[127.0.0.30]:{port} " in known_hosts.read_text()


async def test_command_deny_applies_to_ssh_exec_and_fanout(lab: Lab, server_b: Server, tmp_path: Path) -> None:
    client, audit = server_b.client, server_b.audit
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("precious")
    exec_result = await call(client, "ssh_exec", host="h05", command=f"rm -rf {victim}")
    assert exec_result.is_error
    assert text_of(exec_result).startswith("[DENIED tier "), text_of(exec_result)
    assert "'rm -rf'" in text_of(exec_result)
    for spelled in (f"rm  -rf {victim}", f"/bin/rm -rf {victim}"):
        spelled_result = await call(client, "ssh_exec", host="h05", command=spelled)
        assert spelled_result.is_error, (spelled, text_of(spelled_result))
        assert text_of(spelled_result).startswith("[DENIED tier "), (spelled, text_of(spelled_result))
    spawn_result = await call(client, "ssh_spawn", host="h05", command=f"rm -rf {victim}")
    assert text_of(spawn_result).startswith("[DENIED tier "), text_of(spawn_result)
    session_id = await spawn_shell(client, "h05")
    typed = await call(client, "session_send", session_id=session_id, data=f"rm -rf {victim}", until=AT_PROMPT)
    assert text_of(typed).startswith("[DENIED tier "), text_of(typed)
    assert "fine-7" in plain(await run_in(client, session_id, "echo fine-$((3+4))")).splitlines()
    assert not (await call(client, "session_kill", session_id=session_id)).is_error
    fanout_result = await call(client, "ssh_fanout", command=f"rm -rf {victim}", hosts=["h05", "h06"])
    assert fanout_result.is_error
    assert text_of(fanout_result).startswith("[DENIED tier "), text_of(fanout_result)
    assert fields(fanout_result)["status"] == "denied"
    assert (victim / "keep").read_text() == "precious"
    (record,) = records_of(audit, "ssh_fanout")[-1:]
    assert record["denied"] is True and "rm -rf" in record["reason"]


# -- 7. remote PTY sessions ------------------------------------------------------------------------------------


async def test_remote_login_shell_answers_resizes_and_is_interrupted(lab: Lab, server_c: Server) -> None:
    client = server_c.client
    # Warm the pooled connection so the host's processes can be compared before and after the session.
    warm = await call(client, "ssh_exec", host="h10", command="true")
    assert text_of(warm).startswith("[exit 0]"), text_of(warm)
    await anyio.sleep(0.2)
    baseline = host_processes(lab, "h10")

    session_id = await spawn_shell(client, "h10")
    answer = await call(client, "session_send", session_id=session_id, data="echo $((6*7))", until=AT_PROMPT)
    assert fields(answer)["wait"] == "match", text_of(answer)
    assert "42" in plain(text_of(answer)).splitlines()
    shell = await remote_shell_pid(client, session_id)
    assert shell in host_processes(lab, "h10")
    assert comm(shell) == "bash"

    listed = fields(await call(client, "session_list"))["sessions"]
    (described,) = [item for item in listed if item["session_id"] == session_id]
    assert described["kind"] == "ssh"
    assert described["state"] == "running"

    for cols, rows in ((100, 30), (77, 21)):
        resized = await call(client, "session_resize", session_id=session_id, cols=cols, rows=rows)
        assert not resized.is_error, text_of(resized)
        assert text_of(resized).startswith(f"[resized to {cols}x{rows} | "), text_of(resized)
        # bash redraws its prompt on SIGWINCH: the resize returns that redraw (see the slow-link test below).
        assert "READY> " in plain(text_of(resized)), text_of(resized)
        assert f"{rows} {cols}" in plain(await run_in(client, session_id, "stty size")).splitlines()

    started = await call(client, "session_send", session_id=session_id, data="sleep 100", timeout=0.5)
    assert not started.is_error, text_of(started)
    table: dict[int, tuple[int, str]] = {}

    def sleeper_found() -> bool:
        table.update(ppid_table())
        return any(ppid == shell and comm(pid) == "sleep" for pid, (ppid, _) in table.items())

    assert await poll(sleeper_found, 5)
    (sleeper,) = [pid for pid, (ppid, _) in ppid_table().items() if ppid == shell and comm(pid) == "sleep"]
    begun = time.monotonic()
    interrupted = await call(client, "session_send", session_id=session_id, keys=["ctrl-c"], until=AT_PROMPT)
    assert fields(interrupted)["wait"] == "match", text_of(interrupted)
    assert time.monotonic() - begun < 3
    assert await poll(lambda: not alive(sleeper), 2)
    assert alive(shell)
    assert "after-2" in plain(await run_in(client, session_id, "echo after-$((1+1))")).splitlines()

    killed = await call(client, "session_kill", session_id=session_id)
    assert not killed.is_error, text_of(killed)
    assert text_of(killed).startswith(f"[closed {session_id}"), text_of(killed)
    assert await poll(lambda: not alive(shell), 5)
    assert await poll(lambda: host_processes(lab, "h10") <= baseline, 5), (host_processes(lab, "h10"), baseline)
    gone = await call(client, "session_send", session_id=session_id, data="echo hi")
    assert gone.is_error and "SessionClosed" in text_of(gone)


async def test_remote_python_repl_answers_each_step_in_one_call(server_c: Server) -> None:
    client = server_c.client
    spawned = await call(client, "ssh_spawn", host="h11", command="python3 -q", until="^>>> ", timeout=15)
    assert fields(spawned)["wait"] == "match", text_of(spawned)
    session_id = fields(spawned)["session_id"]
    steps = [
        ("6 * 7", "42"),
        ("print('ab' * 3)", "ababab"),
        ("import os; os.environ.get('SSH_CONNECTION', '').split()[2]", "'127.0.0.12'"),
        ("[n * n for n in range(4)]", "[0, 1, 4, 9]"),
        ("1 / 0", "ZeroDivisionError: division by zero"),
    ]
    for expression, answer in steps:
        result = await call(client, "session_send", session_id=session_id, data=expression, until="^>>> ")
        text = text_of(result)
        assert not result.is_error, text
        assert fields(result)["wait"] == "match", text
        assert answer in plain(text).splitlines(), (expression, text)
    ended = await call(client, "session_send", session_id=session_id, data="exit()", until=NEVER, timeout=10)
    assert fields(ended)["wait"] == "eof", text_of(ended)
    assert fields(ended)["exit_code"] == 0


async def test_remote_password_prompt_input_is_withheld_from_the_audit_log(server_c: Server, tmp_path: Path) -> None:
    client, audit = server_c.client, server_c.audit
    secret = "s3cret-remote-horse-4711"
    script = tmp_path / "ask.sh"
    script.write_text('read -s -p "Password: " pw\necho\necho "got ${#pw} chars"\n')
    spawned = await call(client, "ssh_spawn", host="h12", command=f"bash {script}", until="Password: ", timeout=15)
    assert fields(spawned)["wait"] == "match", text_of(spawned)
    session_id = fields(spawned)["session_id"]
    answered = await call(client, "session_send", session_id=session_id, data=secret, until=r"got \d+ chars")
    text = text_of(answered)
    assert not answered.is_error, text
    assert f"got {len(secret)} chars" in text
    assert secret not in text
    ended = await call(client, "session_recv", session_id=session_id, until=NEVER, timeout=10)
    assert fields(ended)["wait"] == "eof", text_of(ended)
    assert secret not in audit.read_text()
    (send,) = [r for r in records_of(audit, "session_send") if r.get("session_id") == session_id]
    assert send["args"]["data"].startswith("[withheld: "), send
    assert f"{len(secret)} characters" in send["args"]["data"]


# -- 8. transcripts ------------------------------------------------------------------------------------------


async def test_remote_session_transcript_matches_the_audited_digest(lab: Lab, server_c: Server) -> None:
    client, audit = server_c.client, server_c.audit
    session_id = await spawn_shell(client, "h13")
    assert "cast-12" in plain(await run_in(client, session_id, "echo cast-$((3*4))")).splitlines()
    killed = await call(client, "session_kill", session_id=session_id)
    assert not killed.is_error, text_of(killed)

    def end_records() -> list[dict[str, Any]]:
        return [r for r in records_of(audit, "session:end") if r.get("session_id") == session_id]

    assert await poll(lambda: len(end_records()) == 1, 5)
    (end,) = end_records()
    cast = lab.root / "casts" / f"{session_id}.cast"
    content = cast.read_bytes()
    assert end["transcript_sha256"] == sha256(content)
    assert b"cast-12" in content
    assert json.loads(content.splitlines()[0])["version"] == 2


# -- 7 (cont.). a remote session over a slow link ----------------------------------------------------------------


async def test_session_send_after_resize_answers_the_new_command_over_a_slow_link(lab: Lab, server_c: Server) -> None:
    """Over a link with 50 ms latency (an ordinary WAN), typing right after session_resize must still return
    the answer to what was typed, not the prompt bash redraws on SIGWINCH."""
    client = server_c.client
    host = lab.host("h15")
    async with slow_link(host.address, host.port, 0.05) as port:
        spawned = await call(
            client,
            "ssh_spawn",
            host=f"root@127.0.0.1:{port}",
            key_path=str(lab.fleet.client_key),
            until=LOGIN_PROMPT,
            timeout=15,
        )
        assert fields(spawned)["wait"] == "match", text_of(spawned)
        session_id = fields(spawned)["session_id"]
        try:
            await run_in(client, session_id, f"PS1='{PROMPT}'; unset PROMPT_COMMAND")
            # Without a resize the slow link is no problem.
            assert "42" in plain(await run_in(client, session_id, "echo $((6*7))")).splitlines()
            resized = await call(client, "session_resize", session_id=session_id, cols=100, rows=30)
            assert text_of(resized).startswith("[resized to 100x30 | "), text_of(resized)
            answer = plain(await run_in(client, session_id, "stty size"))
            following = plain(await run_in(client, session_id, "echo next-$((1+1))"))
            assert "30 100" in answer.splitlines(), (answer, following)
            assert "next-2" in following.splitlines(), (answer, following)
        finally:
            await call(client, "session_kill", session_id=session_id)


# -- 7 (cont.). leaving the client ends remote sessions --------------------------------------------------------


async def test_closing_the_client_ends_remote_sessions(lab: Lab) -> None:
    root = lab.root / "disconnect"
    root.mkdir()
    config = write_ssh_config(root / "ssh_config", lab, root / "known_hosts")
    aliases = ("h18", "h19")
    baseline = {alias: host_processes(lab, alias) for alias in aliases}
    pids: set[int] = set()
    async with connect(root / "audit.jsonl", ssh_config=str(config)) as client:
        for alias in aliases:
            session_id = await spawn_shell(client, alias)
            pids.add(await remote_shell_pid(client, session_id))
            text = plain(await run_in(client, session_id, "sleep 300 & echo bg=$!"))
            match = re.search(r"^bg=(\d+)$", text, re.MULTILINE)
            assert match, text
            pids.add(int(match.group(1)))
        assert all(alive(pid) for pid in pids)
        assert all(host_processes(lab, alias) - baseline[alias] for alias in aliases)
        leaving = time.monotonic()
    within = max(0.0, 2.0 - (time.monotonic() - leaving))
    assert await poll(lambda: not any(alive(pid) for pid in pids), within), [pid for pid in pids if alive(pid)]
    assert await poll(lambda: all(host_processes(lab, a) <= baseline[a] for a in aliases), 1.0)
