"""The streamable HTTP transport end to end: a real relay-shell process serving HTTP, the SDK client over HTTP,
bearer tokens, Host/Origin checks, per-client sessions, /metrics through promtool, and SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest

from relay_shell.auth.tokens import TokenFileVerifier, load_tokens
from tests.conftest import read_records, server_env, text_of
from tests.e2e.http.server import TOKENS, HttpServer, call, client, start, stop, write_token_file

pytestmark = pytest.mark.anyio


async def test_tools_run_over_http_and_the_audit_names_the_token(authed: HttpServer) -> None:
    for mode in ("legacy", "auto"):  # the 2025-11-25 initialize handshake and the 2026-07-28 era
        async with client(authed, TOKENS["alice"], mode=mode) as alice:
            result = await call(alice, "shell_exec", command="echo over-http")
            assert text_of(result) == "[exit 0]\nover-http\n"
    records = [record for record in read_records(authed.audit_path) if record["tool"] == "shell_exec"]
    assert [record["client_id"] for record in records] == ["http:alice"] * 4  # each call: start and end record
    assert stop(authed) == 0
    verified = subprocess.run(
        [sys.executable, "-m", "relay_shell", "audit", "verify", str(authed.audit_path)], capture_output=True
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


async def test_missing_or_wrong_tokens_get_401(authed: HttpServer) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with httpx2.AsyncClient() as http:
        none = await http.post(authed.url, json=initialize, headers=headers)
        wrong = await http.post(authed.url, json=initialize, headers={**headers, "Authorization": "Bearer nope"})
        right = await http.post(
            authed.url, json=initialize, headers={**headers, "Authorization": f"Bearer {TOKENS['bob']}"}
        )
        metrics_none = await http.get(authed.url.replace("/mcp", "/metrics"))
    assert none.status_code == 401 and wrong.status_code == 401
    assert right.status_code == 200, right.text
    assert metrics_none.status_code == 401
    assert not [record for record in read_records(authed.audit_path) if record["tool"] == "shell_exec"]


async def test_bad_host_or_origin_is_rejected(authed: HttpServer) -> None:
    port = authed.url.split(":")[2].split("/")[0]
    bearer = {"Authorization": f"Bearer {TOKENS['alice']}", "Accept": "application/json, text/event-stream"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx2.AsyncClient() as http:
        rebinding = await http.post(authed.url, json=body, headers={**bearer, "Host": f"evil.example:{port}"})
        origin = await http.post(authed.url, json=body, headers={**bearer, "Origin": "http://evil.example"})
    assert rebinding.status_code in (400, 421), rebinding.status_code
    assert origin.status_code == 403, origin.status_code


async def test_metrics_are_behind_the_host_check_too(tmp_path: Path) -> None:
    """Without tokens (loopback), /metrics is open to local clients, but not to a DNS-rebinding web page."""
    server = start(tmp_path)
    try:
        port = server.url.split(":")[2].split("/")[0]
        metrics_url = server.url.replace("/mcp", "/metrics")
        async with httpx2.AsyncClient() as http:
            local = await http.get(metrics_url)
            rebinding = await http.get(metrics_url, headers={"Host": f"evil.example:{port}"})
            origin = await http.get(metrics_url, headers={"Origin": "http://evil.example"})
        assert local.status_code == 200 and "relay_shell_audit_records_total" in local.text
        assert rebinding.status_code in (400, 421) and origin.status_code == 403
    finally:
        stop(server)


def test_an_idle_connection_outlives_the_clients_keep_alive(tmp_path: Path) -> None:
    """A connection idle for longer than a client keeps one (httpx, the TypeScript SDK: 5 s) is still open: with the
    server closing at the same moment, a client reusing it loses its request to a read error."""
    server = start(tmp_path)
    try:
        host, port = server.url.split("/")[2].rsplit(":", 1)
        request = f"GET /metrics HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
        with socket.create_connection((host, int(port)), timeout=10) as connection:
            for _ in range(2):
                connection.sendall(request)
                answer = b""
                while b"\r\n\r\n" not in answer:
                    chunk = connection.recv(65536)
                    assert chunk, "the server closed the idle connection"
                    answer += chunk
                head, body = answer.split(b"\r\n\r\n", 1)
                length = int(
                    next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")).split(
                        b":"
                    )[1]
                )
                while len(body) < length:
                    chunk = connection.recv(65536)
                    assert chunk, "the server closed the connection mid-answer"
                    body += chunk
                assert head.startswith(b"HTTP/1.1 200") and b"relay_shell_audit_records_total" in body
                time.sleep(6.5)  # past 5 s idle
    finally:
        stop(server)


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # per MCP session id; per token in the stateless era
async def test_one_client_cannot_see_drive_or_kill_another_clients_session(authed: HttpServer, mode: str) -> None:
    async with client(authed, TOKENS["alice"], mode) as alice, client(authed, TOKENS["bob"], mode) as bob:
        spawned = await call(alice, "shell_spawn", command="cat")
        session_id = spawned.structured_content["session_id"]
        for tool, arguments in [
            ("session_send", {"session_id": session_id, "data": "hi"}),
            ("session_recv", {"session_id": session_id}),
            ("session_kill", {"session_id": session_id}),
        ]:
            refused = await call(bob, tool, **arguments)
            assert refused.is_error and text_of(refused).startswith("[ERROR: SessionNotOwned"), text_of(refused)
        assert (await call(bob, "session_list")).structured_content["sessions"] == []
        mine = await call(alice, "session_send", session_id=session_id, data="still-mine", until="still-mine")
        assert not mine.is_error, text_of(mine)


async def test_metrics_need_a_token_and_pass_promtool(authed: HttpServer) -> None:
    async with client(authed, TOKENS["alice"]) as alice:
        await call(alice, "shell_exec", command="true")
    async with httpx2.AsyncClient() as http:
        response = await http.get(
            authed.url.replace("/mcp", "/metrics"), headers={"Authorization": f"Bearer {TOKENS['bob']}"}
        )
    assert response.status_code == 200
    assert 'relay_shell_tool_calls_total{outcome="ok",tier="0",tool="shell_exec"} 1.0' in response.text
    assert "alice" not in response.text  # client names are never metric labels
    checked = subprocess.run(["promtool", "check", "metrics"], input=response.text, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


async def test_sigterm_closes_sessions_and_exits_cleanly(authed: HttpServer) -> None:
    async with client(authed, TOKENS["alice"]) as alice:
        spawned = await call(alice, "shell_spawn", command="sleep 300")
        pid = spawned.structured_content["pid"]
        assert os.path.exists(f"/proc/{pid}")
        assert stop(authed) == 0
    deadline = time.monotonic() + 3
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{pid}")
    ends = [record for record in read_records(authed.audit_path) if record["tool"] == "session:end"]
    assert [record["reason"] for record in ends] == ["server stopped"]


def test_unsafe_configurations_are_refused_at_startup(tmp_path: Path) -> None:
    def refused(**settings: str) -> str:
        env = server_env(tmp_path / "audit.jsonl", transport="http", http_port="0", **settings)
        done = subprocess.run(
            [sys.executable, "-m", "relay_shell"], env=env, capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 2, done.stderr
        return done.stderr

    assert "needs authentication" in refused(http_host="0.0.0.0")
    loose = write_token_file(tmp_path / "loose", TOKENS, mode=0o644)
    assert "lets group or others read or write it" in refused(token_file=str(loose))
    malformed = tmp_path / "malformed"
    malformed.write_text("alice not-a-digest\n")
    malformed.chmod(0o600)
    assert "line 1 is not `NAME SHA256-HEX`" in refused(token_file=str(malformed))
    link = tmp_path / "link"
    link.symlink_to(write_token_file(tmp_path / "target", TOKENS))
    assert "symlinks are refused" in refused(token_file=str(link))
    shared = write_token_file(tmp_path / "shared", {"alice": "same-token", "bob": "same-token"})
    assert "already listed under another name" in refused(token_file=str(shared))


async def test_mcp_sessions_of_one_token_are_separate_and_closing_one_ends_its_sessions(authed: HttpServer) -> None:
    async with client(authed, TOKENS["alice"], "legacy") as second:
        async with client(authed, TOKENS["alice"], "legacy") as first:
            spawned = await call(first, "shell_spawn", command="sleep 300")
            session_id, pid = spawned.structured_content["session_id"], spawned.structured_content["pid"]
            refused = await call(second, "session_recv", session_id=session_id)
            assert text_of(refused).startswith("[ERROR: SessionNotOwned"), text_of(refused)
        # The first client closed its MCP session (DELETE): its terminal is closed within 2 s.
        deadline = time.monotonic() + 2
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{pid}")


async def test_sigterm_gives_in_flight_calls_a_grace_period_then_kills_them(authed: HttpServer) -> None:
    marker = f"sleep {300 + os.getpid() % 1000}.{int(time.time()) % 1000}"
    async with client(authed, TOKENS["alice"]) as alice:
        in_flight = asyncio.create_task(call(alice, "shell_exec", command=marker, timeout=600))
        deadline = time.monotonic() + 5
        while not subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        began = time.monotonic()
        authed.process.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(authed.process.wait, 20) == 0
        assert 4 <= time.monotonic() - began < 15  # the grace period, then the call is cancelled
        with contextlib.suppress(Exception):
            await asyncio.wait_for(in_flight, 5)
    assert not subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout  # its process is gone
    records = [record for record in read_records(authed.audit_path) if record["tool"] == "shell_exec"]
    assert [record.get("outcome", record["phase"]) for record in records] == ["start", "cancelled"]


async def scrape(server: HttpServer, token: str) -> str:
    async with httpx2.AsyncClient() as http:
        response = await http.get(server.url.replace("/mcp", "/metrics"), headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    return response.text


async def test_calls_beyond_the_bound_are_refused_as_busy(tmp_path: Path) -> None:
    server = start(tmp_path, token_file=str(write_token_file(tmp_path / "tokens", TOKENS)), max_concurrent_calls="2")
    try:
        async with client(server, TOKENS["alice"]) as alice:
            slow = [asyncio.create_task(call(alice, "shell_exec", command="sleep 1.5")) for _ in range(2)]
            await asyncio.sleep(0.7)
            busy = await scrape(server, TOKENS["alice"])
            refused = await call(alice, "shell_exec", command="echo should-not-run")
            assert refused.is_error and text_of(refused).startswith("[ERROR: Busy: 2 calls are running"), text_of(
                refused
            )
            assert [text_of(result) for result in await asyncio.gather(*slow)] == ["[exit 0]", "[exit 0]"]
            idle = await scrape(server, TOKENS["alice"])
            # What the RelayShellBusy alerts watch (deploy/prometheus/relay-shell-rules.yml)
            assert "relay_shell_calls_in_flight 2.0" in busy and "relay_shell_calls_in_flight_max 2.0" in busy
            assert "relay_shell_busy_refused_calls_total 0.0" in busy
            assert "relay_shell_calls_in_flight 0.0" in idle and "relay_shell_busy_refused_calls_total 1.0" in idle
            again = await call(alice, "shell_exec", command="echo runs-now")
            assert text_of(again) == "[exit 0]\nruns-now\n"
    finally:
        stop(server)
    records = read_records(server.audit_path)
    outcomes = [record.get("outcome", "start") for record in records if record["tool"] == "shell_exec"]
    assert sorted(outcomes) == ["error", "ok", "ok", "ok", "start", "start", "start"]  # Busy ran nothing: no start


async def test_four_clients_with_250_concurrent_calls_each(tmp_path: Path) -> None:
    tokens = {f"client{number}": f"token-{number}-{os.getpid()}" for number in range(4)}
    server = start(tmp_path, token_file=str(write_token_file(tmp_path / "tokens", tokens)), max_concurrent_calls="1000")
    try:

        async def one_client(name: str) -> list[Any]:
            async with client(server, tokens[name]) as connected:
                return await asyncio.gather(
                    *(call(connected, "shell_exec", command=f"echo {name}-{index}") for index in range(250))
                )

        results = await asyncio.gather(*(one_client(name) for name in tokens))
    finally:
        assert stop(server) == 0
    for name, client_results in zip(tokens, results, strict=True):
        assert [text_of(result) for result in client_results] == [f"[exit 0]\n{name}-{i}\n" for i in range(250)]
    # the pairing of start and end records is checked in test_write_ahead_concurrency.py
    records = [record for record in read_records(server.audit_path) if record["tool"] == "shell_exec"]
    records = [record for record in records if record["phase"] == "end"]
    assert len(records) == 1000
    for name in tokens:
        mine = [record for record in records if record["client_id"] == f"http:{name}"]
        assert len(mine) == 250 and all(record["args"]["command"].startswith(f"echo {name}-") for record in mine)
    verified = subprocess.run(
        [sys.executable, "-m", "relay_shell", "audit", "verify", str(server.audit_path)], capture_output=True
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


async def test_a_real_prometheus_scrapes_metrics_with_its_token(tmp_path: Path) -> None:
    tokens = {**TOKENS, "prometheus": "prometheus-token-51c2"}
    server = start(
        tmp_path, token_file=str(write_token_file(tmp_path / "tokens", tokens)), metrics_token_name="prometheus"
    )
    prometheus: subprocess.Popen[bytes] | None = None
    try:
        async with client(server, TOKENS["alice"]) as alice:
            await call(alice, "shell_exec", command="true")
        target = server.url.removeprefix("http://").removesuffix("/mcp")
        async with httpx2.AsyncClient() as http:  # only the named token may read /metrics
            other = await http.get(f"http://{target}/metrics", headers={"Authorization": f"Bearer {TOKENS['alice']}"})
        assert other.status_code == 401
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        web_port = listener.getsockname()[1]
        listener.close()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n"
            "scrape_configs:\n  - job_name: relay-shell\n"
            f"    authorization:\n      credentials: {tokens['prometheus']}\n"
            f"    static_configs:\n      - targets: ['{target}']\n"
        )
        prometheus = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={config}",
                f"--web.listen-address=127.0.0.1:{web_port}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        query = 'relay_shell_tool_calls_total{tool="shell_exec",outcome="ok"}'
        value = None
        deadline = time.monotonic() + 40
        async with httpx2.AsyncClient() as http:
            while value is None and time.monotonic() < deadline:
                await asyncio.sleep(1)
                with contextlib.suppress(httpx2.HTTPError):
                    answer = await http.get(f"http://127.0.0.1:{web_port}/api/v1/query", params={"query": query})
                    results = answer.json()["data"]["result"]
                    value = results[0]["value"][1] if results else None
        assert value == "1", value
    finally:
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(timeout=10)
        stop(server)


def test_relay_shell_token_makes_a_token_and_its_file_line(tmp_path: Path) -> None:
    made = subprocess.run(
        [sys.executable, "-m", "relay_shell", "token", "carol"], capture_output=True, text=True, timeout=30
    )
    assert made.returncode == 0, made.stderr
    token = made.stderr.strip().rsplit(" ", 1)[1]
    line = made.stdout.strip()
    assert line == f"carol {hashlib.sha256(token.encode()).hexdigest()}"
    tokens = tmp_path / "tokens"
    tokens.write_text(line + "\n")
    tokens.chmod(0o600)
    assert TokenFileVerifier(load_tokens(tokens)).name_of(token) == "carol"
    bad = subprocess.run([sys.executable, "-m", "relay_shell", "token", "no spaces"], capture_output=True, text=True)
    assert bad.returncode == 2 and "NAME must be" in bad.stderr
