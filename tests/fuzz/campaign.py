"""One fuzz run against one real server (stdio or HTTP, either protocol era): the lifecycle first (calls
before `initialize`, later a second `initialize`), then a seeded mix of generated tool calls, context
requests and malformed messages, several in flight at once; then the audit log is checked.

Run it against any checkout (`server_dir`): the server is started from there, the fuzzer from here.
Everything runs in `readonly` mode with SSH targets that resolve nowhere or are closed ports on loopback.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.fuzz.calls import (
    PROTOCOL,
    CallFactory,
    Probe,
    context_request,
    envelope,
    id_key,
    malformed,
    request,
)
from tests.fuzz.checks import Report, ResultChecker, check_log
from tests.fuzz.peers import HttpPeer, StdioPeer, rss_kib

CLIENT = "fuzz"
IMPOSTOR = "impostor"
MAX_RSS_GROWTH_KIB = 512 * 1024  # the server's RSS may grow by this much over a run, oversized lines included
SERVER_SETTINGS = {
    "policy_mode": "readonly",  # nothing the fuzzer generates may change this machine
    "ssh_config": "",  # no ssh_config aliases: every target is one of the fuzzer's own
    "ssh_connect_timeout": "2",
    "max_concurrent_calls": "10000",
}


async def run_campaign(
    transport: str,
    calls: int,
    seed: int,
    server_dir: Path,
    *,
    era: str = "legacy",
    in_flight: int = 8,
    huge_bytes: int = 256 * 1024,
    oversized_line: bool = False,
    deadline: float | None = None,
    work_dir: Path | None = None,
) -> Report:
    """`calls` messages against a fresh server; a Report of what broke (empty `violations`: nothing)."""
    rng = random.Random(seed)
    report = Report()
    with tempfile.TemporaryDirectory(dir=work_dir) as scratch:
        audit_path = Path(scratch) / "audit.jsonl"
        peer: StdioPeer | HttpPeer
        if transport == "stdio":
            peer = await StdioPeer.start(server_dir, audit_path, **SERVER_SETTINGS)
        else:
            peer = await HttpPeer.start(server_dir, audit_path, **SERVER_SETTINGS)
        sent: list[tuple[Probe, dict[str, Any] | None]] = []
        try:
            tools = await _open(peer, era, report, sent)
            checker = ResultChecker(tools, report)
            factory = CallFactory(tools, rng, huge_bytes, era, CLIENT)
            await asyncio.sleep(0.5)
            report.rss_start_kib = rss_kib(peer.pid)
            next_id = 1000
            window = asyncio.Semaphore(in_flight)
            pending: set[asyncio.Task[None]] = set()
            second_initialize_at = calls // 3

            async def one(probe: Probe) -> None:
                try:
                    answers = await peer.exchange(probe.line, probe.key, probe.expect)
                    sent.append((probe, checker.check(probe, answers)))
                finally:
                    window.release()

            for number in range(calls):
                if deadline is not None and time.monotonic() > deadline:
                    break
                if not peer.alive():
                    report.server_exits += 1
                    report.fail("server exited", f"after {number} messages: {' | '.join(list(peer.stderr_tail)[-5:])}")
                    break
                next_id += 1
                roll = rng.random()
                if number == second_initialize_at and era == "legacy":
                    await _drain(pending)
                    await _second_initialize(peer, next_id, report, sent)
                    continue
                if roll < 0.07:
                    # Malformed messages one at a time: an answer with id null must be attributable to them.
                    await _drain(pending)
                    probe = malformed(rng, next_id, era, CLIENT, huge_bytes)
                    report.by_kind[probe.kind] += 1
                    answers = await peer.exchange(probe.line, probe.key, probe.expect)
                    sent.append((probe, checker.check(probe, answers)))
                    continue
                request_id: Any = next_id if rng.random() < 0.8 else f"r-{next_id}"
                probe = context_request(rng, request_id, era, CLIENT) if roll < 0.15 else factory.tool_call(request_id)
                report.by_kind[probe.kind] += 1
                await window.acquire()
                task = asyncio.create_task(one(probe))
                pending.add(task)
                task.add_done_callback(pending.discard)
            await _drain(pending)
            if oversized_line and transport == "stdio":
                await _oversized_line(peer, next_id + 1, report, sent, checker, era)
            report.calls = len(sent)
            await _still_serving(peer, next_id + 2, era, report)
            report.rss_end_kib = rss_kib(peer.pid)
            if report.rss_end_kib - report.rss_start_kib > MAX_RSS_GROWTH_KIB:
                report.fail(
                    "server RSS unbounded",
                    f"grew from {report.rss_start_kib // 1024} to {report.rss_end_kib // 1024} MiB",
                )
        finally:
            code = await peer.close()
            if transport == "stdio" and code not in (0, None) and not report.server_exits:
                report.fail(
                    "server exited", f"exit status {code} at the end: {' | '.join(list(peer.stderr_tail)[-3:])}"
                )
        check_log(audit_path, sent, report, server_dir, {CLIENT})
    return report


async def _drain(pending: set[asyncio.Task[None]]) -> None:
    if pending:
        await asyncio.gather(*list(pending))


async def _open(
    peer: StdioPeer | HttpPeer, era: str, report: Report, sent: list[tuple[Probe, dict[str, Any] | None]]
) -> list[dict[str, Any]]:
    """The lifecycle: before initialize, a tool call and tools/list must be refused (nothing runs); then the
    handshake (or, in the 2026-07-28 era, none); returns the tool definitions."""
    if era == "legacy" and isinstance(peer, StdioPeer):
        for request_id, method, params in (
            (1, "tools/call", {"name": "server_info", "arguments": {}}),
            (2, "tools/list", None),
        ):
            probe = Probe(request(request_id, method, params, era, CLIENT), method, "error", id_key(request_id))
            probe.kind = "lifecycle:before initialize"
            answers = await peer.exchange(probe.line, probe.key, "answer")
            answer = answers[0] if answers else None
            if answer is None or "error" not in answer:
                report.fail("a request before initialize was served", f"{method} -> {str(answer)[:200]}")
            sent.append((probe, answer))
    if era == "legacy":
        initialize = request(
            3,
            "initialize",
            {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": CLIENT, "version": "1"}},
            era,
            CLIENT,
        )
        if isinstance(peer, HttpPeer):
            status, messages, headers = await peer.post(initialize)
            peer.session_id = headers.get("mcp-session-id")
            if status != 200 or not messages:
                raise RuntimeError(f"initialize over HTTP failed: {status} {messages}")
        else:
            await peer.exchange(initialize, ("int", "3"), "answer")
        await peer.exchange(b'{"jsonrpc":"2.0","method":"notifications/initialized"}', None, "none")
    answers = await peer.exchange(request(4, "tools/list", None, era, CLIENT), ("int", "4"), "answer")
    if not answers or "result" not in answers[0]:
        raise RuntimeError(f"tools/list failed: {answers}")
    tools: list[dict[str, Any]] = answers[0]["result"]["tools"]
    return tools


async def _second_initialize(
    peer: StdioPeer | HttpPeer, request_id: int, report: Report, sent: list[tuple[Probe, dict[str, Any] | None]]
) -> None:
    """A second initialize in the middle of a session must be refused: the client's identity is fixed."""
    line = request(
        request_id,
        "initialize",
        {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": IMPOSTOR, "version": "1"}},
        "legacy",
        CLIENT,
    )
    answers = await peer.exchange(line, id_key(request_id), "answer")
    answer = answers[0] if answers else None
    if answer is None or "error" not in answer:
        report.fail("a second initialize was accepted", str(answer)[:200])
    report.by_kind["lifecycle:second initialize"] += 1


async def _oversized_line(
    peer: StdioPeer | HttpPeer,
    request_id: int,
    report: Report,
    sent: list[tuple[Probe, dict[str, Any] | None]],
    checker: ResultChecker,
    era: str,
) -> None:
    """A single line over the stdio transport's 256 MiB limit: answered with its id, and the server goes on."""
    head = request(request_id, "tools/call", {"name": "shell_exec", "arguments": {"command": "@"}}, era, CLIENT)
    before, after = head.split(b'"@"', 1)
    line = before + b'"' + b"A" * (257 * 1024 * 1024) + b'"' + after
    probe = Probe(line, "tools/call", "answer", id_key(request_id), kind="malformed:line over 256 MiB")
    report.by_kind[probe.kind] += 1
    answers = await peer.exchange(probe.line, probe.key, probe.expect)
    probe.line = line[:200]  # the report quotes the head; the rest is not kept
    sent.append((probe, checker.check(probe, answers)))


async def _still_serving(peer: StdioPeer | HttpPeer, request_id: int, era: str, report: Report) -> None:
    line = request(request_id, "tools/call", {"name": "server_info", "arguments": {}}, era, CLIENT)
    answers = await peer.exchange(line, id_key(request_id), "answer")
    if not answers or "result" not in answers[0]:
        report.server_exits += 0 if peer.alive() else 1
        report.fail(
            "server no longer serving at the end", f"{str(answers)[:200]} | {' | '.join(list(peer.stderr_tail)[-3:])}"
        )


__all__ = ["envelope", "run_campaign"]
