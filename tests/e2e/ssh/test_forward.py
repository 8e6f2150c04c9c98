"""End to end: ssh_forward, ssh_forward_list and ssh_forward_close against real OpenSSH servers (tests/sshd.py),
real HTTP servers (`python -m http.server`), real `curl` (SOCKS) and real sockets. Fixtures:
tests/e2e/ssh/conftest.py; helpers: tests/e2e/ssh/forward_helpers.py.

The "remote side" is this machine too: sshd on 127.0.0.x connects to destinations on loopback, and a remote
listener (R) binds the SSH host's loopback, which is ours. Servers:

- `client`: a relay-shell stdio server in open mode (the SDK's client over stdio);
- `guarded`: a stdio server in guarded mode with a deny rule on 127.0.0.1 (the destination, in any spelling);
- per test, an in-process server (`build_server`) with SDK clients over in-memory streams, where a test needs
  two clients of one server (ownership, disconnect), a small RELAY_SHELL_MAX_FORWARDS, a short SSH idle timeout,
  or to stop the server while a client is still connected. A stdio server has exactly one client. These clients
  speak the 2025-11-25 handshake era: in-process dispatch in the 2026-07-28 era has no per-stream object for
  `owner_of` to key on (see identity.py), as in tests/e2e/sessions/test_in_process_server.py.

Fleet roles: h01 carries most forwards; h02 is stopped by the test of a lost SSH connection; h03 is used by the
in-process servers and the HTTP server.

Section 5 holds the tests of a security review's findings: descriptors exhausted through forwarded connections,
the audit log flooded through refused SOCKS connects, forwards of clients that never disconnect, R listeners.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import resource
import shlex
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.conftest import assert_error, fields, server_env, text_of
from tests.e2e.ssh.forward_helpers import (
    ALLOWED_ADDRESS,
    PAYLOAD_BYTES,
    HashingSink,
    HttpServer,
    accepts,
    close,
    curl,
    end_record,
    fetch,
    forward,
    in_process,
    listed,
    opened,
    payload_sha,
    records,
    send_through,
    until,
)
from tests.sshd import SshFleet, refused_port

pytestmark = pytest.mark.anyio

DENIED_SPELLINGS = ("127.0.0.1", "2130706433", "0x7f.1", "0177.0.0.1", "127.1", "localhost", "[::ffff:127.0.0.1]")


@pytest.fixture(scope="module")
def guarded_settings() -> dict[str, str]:
    return {"policy_deny": json.dumps([r"^127\.0\.0\.1$"])}


# -- 0. the tools as a client sees them (the spec grammar: tests/unit/test_forward_spec.py) -------------------


async def test_the_tools_are_listed_with_true_annotations(client: Client) -> None:
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    connection = {"user", "port", "key_path", "known_hosts", "jump"}
    assert set(tools["ssh_forward"].input_schema["properties"]) == {"host", "spec", "bind_address"} | connection
    assert set(tools["ssh_forward"].input_schema["required"]) == {"host", "spec"}
    assert tools["ssh_forward"].input_schema["properties"]["bind_address"]["default"] == "127.0.0.1"
    assert set(tools["ssh_forward_list"].input_schema.get("properties", {})) == set()
    assert set(tools["ssh_forward_close"].input_schema["properties"]) == {"forward_id"}
    hints = {
        name: (
            tool.annotations.read_only_hint,
            tool.annotations.destructive_hint,
            tool.annotations.idempotent_hint,
            tool.annotations.open_world_hint,
        )
        for name, tool in tools.items()
        if name.startswith("ssh_forward") and tool.annotations is not None
    }
    assert hints == {
        "ssh_forward": (False, False, False, True),
        "ssh_forward_list": (True, False, True, False),
        "ssh_forward_close": (False, True, True, True),
    }
    for name in ("ssh_forward", "ssh_forward_close"):
        assert {"forward_id", "listen_port", "forward"} <= set(tools[name].output_schema["properties"])
    assert "forwards" in tools["ssh_forward_list"].output_schema["properties"]


# -- 1. the three kinds carry real traffic ----------------------------------------------------------------


async def test_local_forward_carries_http_and_reports_the_chosen_port(
    client: Client, www: Path, http_port: int, audit_path: Path
) -> None:
    result = await forward(client, f"L:0:127.0.0.1:{http_port}")
    forward_id, port = opened(result)
    assert port > 0
    text = text_of(result)
    assert text.startswith(f"[forward {forward_id} open | L:{port}:127.0.0.1:{http_port} via root@127.0.0.2:"), text
    assert f"[NOTE: listen port 0: the listener picked port {port}]" in text
    assert f"listening on 127.0.0.1:{port} on this machine" in text
    assert fields(result)["tier"] == 1

    body = await anyio.to_thread.run_sync(fetch, f"http://127.0.0.1:{port}/payload.bin")
    assert hashlib.sha256(body).hexdigest() == payload_sha(www)

    item = (await listed(client))[forward_id]
    assert item["spec"] == f"L:{port}:127.0.0.1:{http_port}"
    assert item["listen"] == f"127.0.0.1:{port}"
    assert item["destination"] == f"127.0.0.1:{http_port}"
    assert item["connections"] == 1
    assert item["bytes_from_destination"] > PAYLOAD_BYTES  # the body and the response headers
    assert 0 < item["bytes_to_destination"] < 1024  # the GET request

    closed = await close(client, forward_id)
    totals = fields(closed)["forward"]
    assert totals["bytes_from_destination"] == item["bytes_from_destination"]
    assert text_of(closed).startswith(f"[closed {forward_id} | {item['bytes_to_destination']} B to / ")
    assert not accepts("127.0.0.1", port)  # the listener is gone
    assert forward_id not in await listed(client)

    # The call's record names the spec, the host and the ports; the end record has what it carried.
    record = [record for record in records(audit_path, "ssh_forward") if record.get("target", {}).get("forward_id")]
    call = next(record for record in record if record["target"]["forward_id"] == forward_id)
    assert call["args"]["spec"] == f"L:0:127.0.0.1:{http_port}"
    assert call["args"]["host"] == "h01"
    assert call["tier"] == 1
    assert call["outcome"] == "ok"
    target = call["target"]
    assert (target["host"], target["address"], target["user"]) == ("h01", "127.0.0.2", "root")
    assert target["spec"] == f"L:{port}:127.0.0.1:{http_port}"
    assert target["listen"] == f"127.0.0.1:{port}"
    assert target["destination"] == f"127.0.0.1:{http_port}"
    assert target["host_key"].startswith("SHA256:")
    end = end_record(audit_path, forward_id)
    assert end["reason"] == "closed by ssh_forward_close"
    assert end["bytes_from_destination"] == item["bytes_from_destination"]
    assert end["target"]["host"] == "h01"


async def test_bulk_bytes_both_ways_with_half_close(client: Client) -> None:
    sink = HashingSink()
    try:
        forward_id, port = opened(await forward(client, f"L:0:127.0.0.1:{sink.port}"))
        data = os.urandom(8 * 1024 * 1024)
        answer = await anyio.to_thread.run_sync(send_through, port, data)
        assert answer.decode() == f"{len(data)} {hashlib.sha256(data).hexdigest()}\n"
        item = (await listed(client))[forward_id]
        assert item["bytes_to_destination"] == len(data)
        assert item["bytes_from_destination"] == len(answer)
        await close(client, forward_id)
    finally:
        sink.close()


async def test_socks_forward_is_usable_by_curl(client: Client, www: Path, http_port: int) -> None:
    forward_id, port = opened(await forward(client, "D:0"))
    url = f"http://127.0.0.1:{http_port}/payload.bin"
    for proxy in (["--socks5", f"127.0.0.1:{port}"], ["--socks5-hostname", f"127.0.0.1:{port}"]):
        done = await anyio.to_thread.run_sync(curl, *proxy, url)
        assert done.returncode == 0, done.stderr
        assert hashlib.sha256(done.stdout).hexdigest() == payload_sha(www)
    # SOCKS4a with a name the SSH host resolves
    done = await anyio.to_thread.run_sync(
        curl, "--socks4a", f"127.0.0.1:{port}", f"http://localhost:{http_port}/payload.bin"
    )
    assert done.returncode == 0, done.stderr
    item = (await listed(client))[forward_id]
    assert item["connections"] == 3
    assert item["bytes_from_destination"] > 3 * PAYLOAD_BYTES
    assert item["destinations"] == [f"127.0.0.1:{http_port}", f"localhost:{http_port}"]
    await close(client, forward_id)
    assert not accepts("127.0.0.1", port)


async def test_remote_forward_reaches_a_local_listener(client: Client, www: Path, http_port: int) -> None:
    result = await forward(client, f"R:0:127.0.0.1:{http_port}")
    forward_id, port = opened(result)
    assert port > 0
    assert f"listening on 127.0.0.1:{port} on the SSH host" in text_of(result)
    fetched = await client.call_tool(
        "ssh_exec", {"host": "h01", "command": f"curl -sS http://127.0.0.1:{port}/payload.bin | sha256sum"}
    )
    assert text_of(fetched).split()[:3] == ["[exit", "0]", payload_sha(www)], text_of(fetched)
    item = (await listed(client))[forward_id]
    assert item["listen_on"] == "the SSH host"
    assert item["connections"] == 1
    assert item["bytes_from_destination"] > PAYLOAD_BYTES
    await close(client, forward_id)
    # sshd stops listening once it has the cancel request (the SSH host is this machine)
    assert await until(lambda: not accepts("127.0.0.1", port), 3.0)


async def test_an_ipv6_destination_in_brackets_and_an_ipv6_listener(client: Client, www: Path) -> None:
    with HttpServer("::1", www) as port:
        result = await forward(client, f"L:0:[::1]:{port}", bind_address="::1")
        forward_id, listen_port = opened(result)
        assert fields(result)["tier"] == 1  # ::1 is loopback
        assert fields(result)["forward"]["listen"] == f"[::1]:{listen_port}"
        assert fields(result)["forward"]["destination"] == f"[::1]:{port}"
        body = await anyio.to_thread.run_sync(fetch, f"http://[::1]:{listen_port}/payload.bin")
        assert hashlib.sha256(body).hexdigest() == payload_sha(www)
        await close(client, forward_id)


async def test_an_explicit_port_is_used_and_a_taken_one_is_a_clear_error(client: Client, http_port: int) -> None:
    port = refused_port("127.0.0.1")
    forward_id, got = opened(await forward(client, f"L:{port}:127.0.0.1:{http_port}"))
    assert got == port
    assert accepts("127.0.0.1", port)
    taken = await forward(client, f"L:{port}:127.0.0.1:{http_port}")
    assert "address already in use" in assert_error(taken, "ListenFailed").lower()
    await close(client, forward_id)
    assert forward_id not in await listed(client)


async def test_an_unreachable_destination_is_counted_as_failed(client: Client) -> None:
    dead = refused_port("127.0.0.1")
    forward_id, port = opened(await forward(client, f"L:0:127.0.0.1:{dead}"))

    def try_it() -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
            return connection.recv(10)  # the forward closes it once sshd cannot connect

    assert await anyio.to_thread.run_sync(try_it) == b""
    item = (await listed(client))[forward_id]
    assert (item["connections"], item["failed_connections"], item["open_connections"]) == (1, 1, 0)
    await close(client, forward_id)


async def test_open_connections_per_forward_are_bounded(client: Client) -> None:
    from relay_shell.ssh.forwards.tunnel import MAX_OPEN_CONNECTIONS

    # A destination that never accepts: the kernel completes sshd's connects into its backlog, and they stay open.
    holder = socket.create_server(("127.0.0.1", 0), backlog=2 * MAX_OPEN_CONNECTIONS)
    forward_id, port = opened(await forward(client, f"L:0:127.0.0.1:{holder.getsockname()[1]}"))
    # Accepted in the order they connected: the first MAX_OPEN_CONNECTIONS are carried, the next one is refused.
    sockets = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(MAX_OPEN_CONNECTIONS)]
    try:
        extra = socket.create_connection(("127.0.0.1", port), timeout=10)
        with extra:
            assert await anyio.to_thread.run_sync(extra.recv, 10) == b""  # closed at once
        item = (await listed(client))[forward_id]
        assert item["refused_connections"] == 1
        assert item["open_connections"] == MAX_OPEN_CONNECTIONS
        assert item["connections"] == MAX_OPEN_CONNECTIONS + 1
        await close(client, forward_id)
        # Closing the forward ends every connection it carried.
        for connection in sockets[:8]:
            assert await anyio.to_thread.run_sync(connection.recv, 10) == b""
    finally:
        for connection in sockets:
            connection.close()
        holder.close()


# -- 2. bad input -----------------------------------------------------------------------------------------

MALFORMED = [
    "",
    "L",
    "X:80:host:80",
    "L:80",
    "L:80:host",
    "L:80:host:",
    "L:80::80",
    "L:80:::1:80",  # IPv6 without brackets
    "L:80:[::1:80",
    "L:80:[::1]80",
    "L:80:[not-v6]:80",
    "L:80:bad host:80",
    "L:80:-oProxyCommand=x:80",
    "D:80:host:80",
    "D:",
    "R:host:80",
    "L:8 0:h:80",
    "D:-1",
    "L:１２:h:80",  # fullwidth digits
    "L:" + "x" * 400 + ":80",
]
OUT_OF_RANGE = ["L:65536:h:80", "L:80:h:0", "L:80:h:65536", "R:99999:h:80", "D:65536", "D:0123456"]


async def test_malformed_specs_and_ports_out_of_range_are_named(client: Client, audit_path: Path) -> None:
    for spec in MALFORMED:
        message = assert_error(await forward(client, spec), "InvalidArgument")
        assert message.startswith("spec: "), (spec, message)
        assert "; allowed: " in message, message
        assert "L:lport:dhost:dport" in message and "R:rport:dhost:dport" in message and "D:lport" in message, message
    for spec in OUT_OF_RANGE:
        message = assert_error(await forward(client, spec), "InvalidArgument")
        assert message.startswith("spec: "), (spec, message)
        assert " is out of range; allowed: 0 to 65535 (0 picks a free port)" in message or (
            "destination port" in message and " is out of range; allowed: 1 to 65535" in message
        ), message
    refused = [record for record in records(audit_path, "ssh_forward") if record["outcome"] == "error"]
    assert {record["args"]["spec"] for record in refused} >= set(MALFORMED + OUT_OF_RANGE)


async def test_bind_address_must_be_an_address_and_non_loopback_is_tier_2(client: Client, http_port: int) -> None:
    for bad in ("my-laptop", "2130706433", "0x7f.1", "", "127.0.0.1:80"):
        message = assert_error(await forward(client, f"L:0:127.0.0.1:{http_port}", bind_address=bad), "InvalidArgument")
        assert message.startswith("bind_address: "), message
    loopback = await forward(client, f"L:0:127.0.0.1:{http_port}", bind_address="127.0.0.5")
    forward_id, port = opened(loopback)
    assert fields(loopback)["tier"] == 1
    assert accepts("127.0.0.5", port)
    await close(client, forward_id)
    everywhere = await forward(client, f"L:0:127.0.0.1:{http_port}", bind_address="0.0.0.0")
    forward_id, port = opened(everywhere)
    assert fields(everywhere)["tier"] == 2  # admitted in open mode, classified as reachable from other hosts
    assert fields(everywhere)["forward"]["listen"] == f"0.0.0.0:{port}"
    await close(client, forward_id)


async def test_closing_an_unknown_forward_is_a_clear_error(client: Client) -> None:
    result = await client.call_tool("ssh_forward_close", {"forward_id": "f-000000000000"})
    text = assert_error(result, "UnknownForward")
    assert "you have no forward 'f-000000000000'; ssh_forward_list shows yours" in text
    missing = await client.call_tool("ssh_forward_close", {})
    assert text_of(missing).startswith("[ERROR: InvalidArgument: forward_id: is required"), text_of(missing)


# -- 3. policy ---------------------------------------------------------------------------------------------


async def test_guarded_mode_refuses_a_listener_other_hosts_can_reach(
    guarded: Client, allowed_http_port: int, guarded_audit_path: Path
) -> None:
    spec = f"L:0:{ALLOWED_ADDRESS}:{allowed_http_port}"
    for bind in ("0.0.0.0", "::"):
        refused = await forward(guarded, spec, bind_address=bind)
        text = text_of(refused)
        assert refused.is_error
        assert text.startswith("[DENIED tier 2 (stateful): mode guarded refuses tier 2"), text
        assert f"bind_address {bind}" in text or f"bind_address [{bind}]" in text, text
    remote = await forward(guarded, f"R:0:{ALLOWED_ADDRESS}:{allowed_http_port}", bind_address="0.0.0.0")
    assert text_of(remote).startswith("[DENIED tier 2"), text_of(remote)
    remote_loopback = await forward(guarded, f"R:0:{ALLOWED_ADDRESS}:{allowed_http_port}")
    assert text_of(remote_loopback).startswith("[DENIED tier 2 (stateful): mode guarded"), text_of(remote_loopback)
    assert await listed(guarded) == {}

    # Loopback is tier 1: guarded mode admits it, and it carries traffic.
    forward_id, port = opened(await forward(guarded, spec))
    body = await anyio.to_thread.run_sync(fetch, f"http://127.0.0.1:{port}/payload.bin")
    assert len(body) == PAYLOAD_BYTES
    await close(guarded, forward_id)
    denied = [record for record in records(guarded_audit_path, "ssh_forward") if record["denied"]]
    assert len(denied) >= 4
    assert all(record["tier"] == 2 for record in denied[:4])


@pytest.mark.parametrize("kind", ["L", "R"])
async def test_a_deny_rule_on_the_destination_holds_for_every_spelling(
    guarded: Client, http_port: int, guarded_audit_path: Path, kind: str
) -> None:
    for spelling in DENIED_SPELLINGS:
        refused = await forward(guarded, f"{kind}:0:{spelling}:{http_port}")
        text = text_of(refused)
        assert refused.is_error, text
        tier = "2 (stateful)" if kind == "R" else "1 (reversible)"  # every R listener lets the SSH host in
        assert text.startswith(f"[DENIED tier {tier}: matches deny pattern"), (spelling, text)
    assert await listed(guarded) == {}
    denied = [record for record in records(guarded_audit_path, "ssh_forward") if record["denied"]]
    assert {record["args"]["spec"] for record in denied} >= {
        f"{kind}:0:{spelling}:{http_port}" for spelling in DENIED_SPELLINGS
    }


async def test_a_socks_destination_is_admitted_when_the_client_names_it(
    guarded: Client, www: Path, http_port: int, allowed_http_port: int, guarded_audit_path: Path
) -> None:
    forward_id, port = opened(await forward(guarded, "D:0"))
    allowed = await anyio.to_thread.run_sync(
        curl, "--socks5", f"127.0.0.1:{port}", f"http://{ALLOWED_ADDRESS}:{allowed_http_port}/payload.bin"
    )
    assert allowed.returncode == 0, allowed.stderr
    assert hashlib.sha256(allowed.stdout).hexdigest() == payload_sha(www)
    for proxy, host in [
        ("--socks5", "127.0.0.1"),
        ("--socks5-hostname", "localhost"),
        ("--socks5-hostname", "0x7f.1"),
        ("--socks4a", "2130706433"),
    ]:
        refused = await anyio.to_thread.run_sync(curl, proxy, f"127.0.0.1:{port}", f"http://{host}:{http_port}/")
        assert refused.returncode != 0, (host, refused.stdout)
        assert refused.stdout == b""
    item = (await listed(guarded))[forward_id]
    assert item["refused_connections"] == 4
    assert item["connections"] == 5
    assert item["destinations"] == [f"{ALLOWED_ADDRESS}:{allowed_http_port}"]
    assert item["refused_destinations"] == {f"127.0.0.1:{http_port}": 3, f"localhost:{http_port}": 1}
    refusals = [
        record for record in records(guarded_audit_path, "forward:refused") if record["forward_id"] == forward_id
    ]
    # The first refusal of each destination is a record; the repeats are counted (0x7f.1 and 2130706433 are
    # dialed, and counted, as 127.0.0.1).
    assert [record["destination"] for record in refusals] == [f"127.0.0.1:{http_port}", f"localhost:{http_port}"]
    assert all(record["denied"] and record["outcome"] == "denied" for record in refusals)
    assert all("deny pattern" in record["reason"] for record in refusals)
    await close(guarded, forward_id)
    end = end_record(guarded_audit_path, forward_id)
    assert end["refused_connections"] == 4
    assert end["refused_destinations"] == {f"127.0.0.1:{http_port}": 3, f"localhost:{http_port}": 1}


# -- 4. lifecycle: connection lost, ownership, disconnect, limit, idle pool, shutdown -------------------------


async def test_a_lost_ssh_connection_closes_its_forwards(
    client: Client, fleet: SshFleet, http_port: int, audit_path: Path
) -> None:
    forward_id, port = opened(await forward(client, f"L:0:127.0.0.1:{http_port}", host="h02"))
    remote_id, _ = opened(await forward(client, f"R:0:127.0.0.1:{http_port}", host="h02"))
    fleet.stop_host("h02")
    assert await until(lambda: not accepts("127.0.0.1", port))
    assert forward_id not in await listed(client)
    assert remote_id not in await listed(client)
    assert end_record(audit_path, forward_id)["reason"] == "the SSH connection was lost"
    again = await client.call_tool("ssh_forward_close", {"forward_id": forward_id})
    assert "already closed (the SSH connection was lost)" in assert_error(again, "ForwardClosed")


async def test_forwards_belong_to_the_client_that_opened_them(tmp_path: Path, fleet: SshFleet, http_port: int) -> None:
    async with in_process(tmp_path, fleet) as (assembly, audit_path):
        async with Client(assembly.mcp, mode="legacy") as bob:
            bobs_id, bobs_port = opened(await forward(bob, f"L:0:127.0.0.1:{http_port}", host="h03"))
            async with Client(assembly.mcp, mode="legacy") as alice:
                alices_id, alices_port = opened(await forward(alice, f"L:0:127.0.0.1:{http_port}", host="h03"))
                assert list(await listed(alice)) == [alices_id]
                assert list(await listed(bob)) == [bobs_id]
                # Another client's forward gets exactly the answer an id that never existed gets.
                intrusion = await bob.call_tool("ssh_forward_close", {"forward_id": alices_id})
                never = await bob.call_tool("ssh_forward_close", {"forward_id": "f-0123456789ab"})
                assert_error(intrusion, "UnknownForward")
                assert text_of(intrusion).replace(alices_id, "ID") == text_of(never).replace("f-0123456789ab", "ID")
                assert accepts("127.0.0.1", alices_port)
            # alice disconnected: her forward is closed, bob's is not
            assert await until(lambda: not accepts("127.0.0.1", alices_port), 2.0)
            assert accepts("127.0.0.1", bobs_port)
            assert list(await listed(bob)) == [bobs_id]
        assert await until(lambda: len(records(audit_path, "forward:end")) == 2, 2.0)
        ends = {record["forward_id"]: record["reason"] for record in records(audit_path, "forward:end")}
        assert ends == {alices_id: "client disconnected", bobs_id: "client disconnected"}
        refused = [record for record in records(audit_path, "ssh_forward_close") if record["outcome"] == "error"]
        assert len(refused) == 2


async def test_the_number_of_forwards_is_bounded_for_all_and_per_client(
    tmp_path: Path, fleet: SshFleet, http_port: int
) -> None:
    async with (
        in_process(tmp_path, fleet, max_forwards=4, metrics_addr="127.0.0.1:0") as (assembly, _),
        Client(assembly.mcp, mode="legacy") as alice,
        Client(assembly.mcp, mode="legacy") as bob,
        Client(assembly.mcp, mode="legacy") as carol,
    ):
        # One client gets half of MAX_FORWARDS: it cannot take every slot.
        first, _ = opened(await forward(alice, f"L:0:127.0.0.1:{http_port}", host="h03"))
        opened(await forward(alice, "D:0", host="h03"))
        third = await forward(alice, f"R:0:127.0.0.1:{http_port}", host="h03")
        assert (
            "you have 2 forwards open, the most one client may have (2: half of RELAY_SHELL_MAX_FORWARDS=4); "
            "close one with ssh_forward_close"
        ) in assert_error(third, "ForwardLimit")
        opened(await forward(bob, "D:0", host="h03"))
        opened(await forward(bob, "D:0", host="h03"))
        # All together: MAX_FORWARDS.
        fifth = await forward(carol, "D:0", host="h03")
        assert "4 forwards are open (RELAY_SHELL_MAX_FORWARDS=4), most of them other clients'" in assert_error(
            fifth, "ForwardLimit"
        )
        full = assembly.metrics.exposition().decode()  # the gauges the dashboard shows (adr/0021)
        assert "relay_shell_ssh_forwards_open 4.0" in full and "relay_shell_ssh_forwards_max 4.0" in full
        await close(alice, first)
        assert "relay_shell_ssh_forwards_open 3.0" in assembly.metrics.exposition().decode()
        opened(await forward(alice, f"R:0:127.0.0.1:{http_port}", host="h03"))
        info = await alice.call_tool("server_info", {})
        assert fields(info)["info"]["ssh"]["max_forwards"] == 4


async def test_the_pool_keeps_a_forwards_connection_open(tmp_path: Path, fleet: SshFleet, http_port: int) -> None:
    async def connections(client: Client) -> int:
        info = await client.call_tool("server_info", {})
        return int(fields(info)["info"]["ssh"]["connections_open"])

    async with (
        in_process(tmp_path, fleet, ssh_idle_timeout=1) as (assembly, _),
        Client(assembly.mcp, mode="legacy") as client,
    ):
        forward_id, port = opened(await forward(client, f"L:0:127.0.0.1:{http_port}", host="h03"))
        await anyio.sleep(2.5)  # well past the idle timeout: the reaper runs every 0.5 s
        assert await connections(client) == 1
        body = await anyio.to_thread.run_sync(fetch, f"http://127.0.0.1:{port}/payload.bin")
        assert len(body) == PAYLOAD_BYTES
        await close(client, forward_id)
        deadline = time.monotonic() + 3.0
        while await connections(client) and time.monotonic() < deadline:
            await anyio.sleep(0.1)
        assert await connections(client) == 0  # idle once the forward is closed: reaped as usual


async def test_shutdown_closes_every_forward(tmp_path: Path, fleet: SshFleet, http_port: int) -> None:
    async with in_process(tmp_path, fleet) as (assembly, audit_path), Client(assembly.mcp, mode="legacy") as client:
        local_id, local_port = opened(await forward(client, f"L:0:127.0.0.1:{http_port}", host="h03"))
        socks_id, socks_port = opened(await forward(client, "D:0", host="h03"))
        remote_id, remote_port = opened(await forward(client, f"R:0:127.0.0.1:{http_port}", host="h03"))
        assert all(accepts("127.0.0.1", port) for port in (local_port, socks_port, remote_port))
        await assembly.shutdown()
        assert not accepts("127.0.0.1", local_port)
        assert not accepts("127.0.0.1", socks_port)
        assert await until(lambda: not accepts("127.0.0.1", remote_port), 2.0)
        assert await listed(client) == {}
    ends = {record["forward_id"]: record["reason"] for record in records(audit_path, "forward:end")}
    assert ends == {local_id: "server stopped", socks_id: "server stopped", remote_id: "server stopped"}


# -- 5. resources, audit volume, idleness and remote listeners (security review) --------------------------------


def limited_server(audit_path: Path, shell_limit: str, **settings: str) -> StdioServerParameters:
    """A stdio server started under `ulimit` (e.g. `-n 256`: soft and hard limit on open files)."""
    command = f"ulimit {shell_limit} && exec {shlex.quote(sys.executable)} -m relay_shell"
    return StdioServerParameters(command="sh", args=["-c", command], env=server_env(audit_path, **settings))


async def settled(client: Client, condition: Callable[[dict[str, dict[str, Any]]], bool], within: float) -> bool:
    deadline = time.monotonic() + within
    while not condition(await listed(client)):
        if time.monotonic() > deadline:
            return False
        await anyio.sleep(0.1)
    return True


async def test_forwarded_connections_together_stay_within_half_the_open_file_limit(
    tmp_path: Path, fleet: SshFleet
) -> None:
    from relay_shell.ssh.forwards.tunnel import MAX_OPEN_CONNECTIONS

    limit = 256
    budget = limit // 2
    per_forward = 150  # twice that is more than the whole limit, each under MAX_OPEN_CONNECTIONS
    assert per_forward < MAX_OPEN_CONNECTIONS
    holder = socket.create_server(("127.0.0.1", 0), backlog=1024)  # never accepts: sshd's connects stay open
    clients: list[socket.socket] = []
    params = limited_server(tmp_path / "audit.jsonl", f"-n {limit}", ssh_config=str(fleet.ssh_config))
    try:
        async with Client(params, mode="legacy") as client:
            ports = [opened(await forward(client, f"L:0:127.0.0.1:{holder.getsockname()[1]}"))[1] for _ in range(2)]

            def connect_all() -> None:
                for port in ports:
                    for _ in range(per_forward):
                        clients.append(socket.create_connection(("127.0.0.1", port), timeout=10))

            await anyio.to_thread.run_sync(connect_all)
            total = 2 * per_forward
            assert await settled(
                client, lambda items: sum(item["connections"] for item in items.values()) == total, 10.0
            )
            items = (await listed(client)).values()
            assert sum(item["open_connections"] for item in items) == budget
            assert sum(item["refused_connections"] for item in items) == total - budget
            # Descriptors are left for everything else: a command, another forward.
            done = await client.call_tool("shell_exec", {"command": "echo still serving"})
            assert not done.is_error and "still serving" in text_of(done), text_of(done)
            opened(await forward(client, "D:0"))
    finally:
        for connection in clients:
            connection.close()
        holder.close()


async def test_the_soft_open_file_limit_is_raised_to_the_hard_limit_at_startup(tmp_path: Path, fleet: SshFleet) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard == resource.RLIM_INFINITY or hard > 512, "this test needs a hard limit above 512"
    params = limited_server(tmp_path / "audit.jsonl", "-S -n 512")
    async with Client(params, mode="legacy") as client:
        # The server's children inherit its limits: a shell shows them.
        done = await client.call_tool("shell_exec", {"command": "ulimit -Sn; ulimit -Hn"})
        soft_now, hard_now = text_of(done).splitlines()[-2:]
        assert soft_now != "512"
        assert soft_now == hard_now or (hard_now == "unlimited" and int(soft_now) >= 1 << 20), text_of(done)


async def test_a_listener_that_gets_no_socket_is_a_clear_error(tmp_path: Path, fleet: SshFleet, http_port: int) -> None:
    """Out of descriptors (EMFILE, for real: this process's limit lowered and filled), asyncio returns a server
    without sockets; the result says ListenFailed, not an internal error."""
    async with (
        in_process(tmp_path, fleet) as (assembly, audit_path),
        Client(assembly.mcp, mode="legacy") as client,
    ):
        opened(await forward(client, f"L:0:127.0.0.1:{http_port}", host="h03"))  # the SSH connection is pooled
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        fillers: list[int] = []
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 16, hard))
            with contextlib.suppress(OSError):
                while True:
                    fillers.append(os.open(os.devnull, os.O_RDONLY))
            result = await forward(client, "D:0", host="h03")
        finally:
            for descriptor in fillers:
                os.close(descriptor)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        text = assert_error(result, "ListenFailed")
        assert "cannot listen on 127.0.0.1:0 on this machine: no socket could be opened" in text, text
        assert len(await listed(client)) == 1
        failed = [record for record in records(audit_path, "ssh_forward") if record["outcome"] == "error"]
        assert len(failed) == 1


async def test_refused_socks_connects_are_counted_not_each_recorded(
    guarded: Client, http_port: int, guarded_audit_path: Path
) -> None:
    """Any local process can connect to a SOCKS listener: 500 refused connects write at most 32 records (the
    first refusal of each of the first 32 destinations); the end record counts them all."""
    from relay_shell.ssh.forwards.traffic import MAX_REFUSED_DESTINATIONS

    forward_id, port = opened(await forward(guarded, "D:0"))

    def socks5_connect(destination_port: int) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
            request = b"\x05\x01\x00" + b"\x05\x01\x00\x01" + bytes([127, 0, 0, 1])
            connection.sendall(request + destination_port.to_bytes(2, "big"))
            answer = b""
            while chunk := connection.recv(64):
                answer += chunk
            return answer

    def flood() -> list[bytes]:
        answers = [socks5_connect(http_port) for _ in range(460)]
        return answers + [socks5_connect(20000 + offset) for offset in range(40)]

    answers = await anyio.to_thread.run_sync(flood)
    not_allowed = b"\x05\x00" + bytes([5, 2, 0, 1, 0, 0, 0, 0, 0, 0])  # method accepted, then "not allowed"
    assert set(answers) == {not_allowed}
    refusals = [
        record for record in records(guarded_audit_path, "forward:refused") if record["forward_id"] == forward_id
    ]
    assert len(refusals) == MAX_REFUSED_DESTINATIONS == 32
    expected = {f"127.0.0.1:{http_port}": 460, **{f"127.0.0.1:{20000 + offset}": 1 for offset in range(31)}}
    assert [record["destination"] for record in refusals] == list(expected)
    expected["others"] = 9
    item = (await listed(guarded))[forward_id]
    assert (item["connections"], item["refused_connections"]) == (500, 500)
    assert item["refused_destinations"] == expected
    await close(guarded, forward_id)
    end = end_record(guarded_audit_path, forward_id)
    assert end["refused_connections"] == 500
    assert end["refused_destinations"] == expected


async def test_every_remote_forward_is_tier_2(tmp_path: Path, fleet: SshFleet, http_port: int) -> None:
    """An R listener lets whoever reaches it on the SSH host into this machine, loopback included: guarded mode
    refuses it without an allow rule, even bound to the SSH host's loopback."""
    spec = f"R:0:127.0.0.1:{http_port}"
    (tmp_path / "guarded").mkdir()
    async with (
        in_process(tmp_path / "guarded", fleet, policy_mode="guarded") as (assembly, audit_path),
        Client(assembly.mcp, mode="legacy") as client,
    ):
        refused = await forward(client, spec, host="h03")
        assert text_of(refused).startswith(
            "[DENIED tier 2 (stateful): mode guarded refuses tier 2 without an allow pattern: a listener reachable "
            "from other hosts (bind_address 127.0.0.1:0 (on the SSH host))"
        ), text_of(refused)
        local = await forward(client, f"L:0:127.0.0.1:{http_port}", host="h03")
        assert fields(local)["tier"] == 1  # the same destination through a local listener: tier 1
        assert list(await listed(client)) == [fields(local)["forward_id"]]
        denied = [record for record in records(audit_path, "ssh_forward") if record["denied"]]
        assert [(record["args"]["spec"], record["tier"]) for record in denied] == [(spec, 2)]
    (tmp_path / "allowed").mkdir()
    allow = json.dumps([r"\(on the SSH host\)$"])
    async with (
        in_process(tmp_path / "allowed", fleet, policy_mode="guarded", policy_allow=allow) as (assembly, _),
        Client(assembly.mcp, mode="legacy") as client,
    ):
        admitted = await forward(client, spec, host="h03")
        opened(admitted)
        assert fields(admitted)["tier"] == 2


async def test_forwards_of_clients_that_never_disconnect_close_when_idle(tmp_path: Path, fleet: SshFleet) -> None:
    """Over HTTP without an MCP session (the 2026-07-28 era) the owner is the token's principal, which never
    disconnects: an idle forward is closed by the reaper, one carrying a connection is not; and one client may
    hold half of MAX_FORWARDS."""
    from tests.e2e.http.server import TOKENS, start, stop, write_token_file
    from tests.e2e.http.server import client as http_client

    server = start(
        tmp_path,
        token_file=str(write_token_file(tmp_path / "tokens", TOKENS)),
        ssh_config=str(fleet.ssh_config),
        forward_idle_timeout="1",
        max_forwards="4",
    )
    sink = HashingSink()  # answers and closes once its client half-closes: the forwarded connection then ends

    def ended() -> dict[str, str]:
        return {record["forward_id"]: record["reason"] for record in records(server.audit_path, "forward:end")}

    try:
        async with http_client(server, TOKENS["alice"]) as alice:
            socks_id, socks_port = opened(await forward(alice, "D:0", host="h03"))
            held_id, held_port = opened(await forward(alice, f"L:0:127.0.0.1:{sink.port}", host="h03"))
            third = await forward(alice, "D:0", host="h03")
            assert "you have 2 forwards open, the most one client may have (2: half of" in assert_error(
                third, "ForwardLimit"
            )
        async with http_client(server, TOKENS["bob"]) as bob:
            bobs_id, _ = opened(await forward(bob, "D:0", host="h03"))
        # alice's client has gone, but her owner (principal:alice) never disconnects. Nothing may connect to the
        # idle listeners while waiting: a connection is activity.
        with socket.create_connection(("127.0.0.1", held_port), timeout=10):
            assert await until(lambda: socks_id in ended() and bobs_id in ended(), 6.0), ended()
            await anyio.sleep(1.5)  # past the idle timeout again: the forward with a connection stays
            assert held_id not in ended()
        assert await until(lambda: held_id in ended(), 6.0), ended()
        assert ended() == {socks_id: "idle for 1s", bobs_id: "idle for 1s", held_id: "idle for 1s"}
        assert not accepts("127.0.0.1", socks_port)
        assert not accepts("127.0.0.1", held_port)
        async with http_client(server, TOKENS["alice"]) as alice:
            assert await listed(alice) == {}
            closed = await alice.call_tool("ssh_forward_close", {"forward_id": socks_id})
            assert "already closed (idle for 1s)" in assert_error(closed, "ForwardClosed")
    finally:
        sink.close()
        stop(server)
