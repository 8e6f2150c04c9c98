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

# The suite's bounded run (tests/e2e/hostile/test_fuzz_bounded.py; `benchmarks.fuzz_long --bounded` repeats it):
# messages per transport with this seed, at least BOUNDED_TOOL_CALLS of them tool calls (about 85% of the
# messages are; the rest are context requests and malformed messages), within BOUNDED_SECONDS (issue 21).
BOUNDED_SEED = 21
BOUNDED_PLAN = {"stdio": 1300, "http": 1150}
BOUNDED_TOOL_CALLS = 2000
BOUNDED_SECONDS = 90.0


async def run_bounded(server_dir: Path, seed: int = BOUNDED_SEED) -> tuple[dict[str, Report], float]:
    """The bounded run: one campaign per transport of BOUNDED_PLAN, one after the other; the reports and the
    seconds the whole run took."""
    started = time.monotonic()
    reports = {
        transport: await run_campaign(transport, messages, seed, server_dir)
        for transport, messages in BOUNDED_PLAN.items()
    }
    return reports, time.monotonic() - started


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
    """`calls` messages against a server started from `server_dir`; a Report of what broke (no `violations`:
    nothing). A server that exits is counted and replaced by a fresh one, so one run shows every class."""
    rng = random.Random(seed)
    report = Report()
    segment = Segment(transport, server_dir, era, rng, huge_bytes, report)
    with tempfile.TemporaryDirectory(dir=work_dir) as scratch:
        await segment.start(Path(scratch) / "audit-0.jsonl")
        report.rss_start_kib = rss_kib(segment.peer.pid)
        window = asyncio.Semaphore(in_flight)
        pending: set[asyncio.Task[None]] = set()
        next_id = 1000
        for number in range(calls):
            if deadline is not None and time.monotonic() > deadline:
                break
            if not segment.peer.alive():
                await _drain(pending)
                tail = " | ".join(list(segment.peer.stderr_tail)[-4:])
                report.server_exits += 1
                report.fail("server exited", f"after {number} messages: {tail}")
                await segment.finish()
                await segment.start(Path(scratch) / f"audit-{report.server_exits}.jsonl")
            next_id += 1
            if number == calls // 3 and era == "legacy":
                await _drain(pending)
                await segment.second_initialize(next_id)
                continue
            roll = rng.random()
            if roll < 0.07:
                # Malformed messages one at a time: an answer with id null must be attributable to them.
                await _drain(pending)
                await segment.probe(malformed(rng, next_id, era, CLIENT, huge_bytes))
                continue
            request_id: Any = next_id if rng.random() < 0.8 else f"r-{next_id}"
            probe = (
                context_request(rng, request_id, era, CLIENT) if roll < 0.15 else segment.factory.tool_call(request_id)
            )
            await window.acquire()
            task = asyncio.create_task(segment.probe(probe, window))
            pending.add(task)
            task.add_done_callback(pending.discard)
        await _drain(pending)
        if oversized_line and transport == "stdio":
            await segment.oversized_line(next_id + 1)
        await segment.still_serving(next_id + 2)
        report.rss_end_kib = rss_kib(segment.peer.pid)
        if report.rss_end_kib - report.rss_start_kib > MAX_RSS_GROWTH_KIB:
            report.fail(
                "server RSS unbounded", f"grew from {report.rss_start_kib // 1024} to {report.rss_end_kib // 1024} MiB"
            )
        await segment.finish(last=True)
    return report


class Segment:
    """One server process of a run, the messages sent to it, and its audit log."""

    def __init__(self, transport: str, server_dir: Path, era: str, rng: random.Random, huge: int, report: Report):
        self.transport = transport
        self.server_dir = server_dir
        self.era = era
        self.rng = rng
        self.huge_bytes = huge
        self.report = report
        self.sent: list[tuple[Probe, dict[str, Any] | None]] = []

    async def start(self, audit_path: Path) -> None:
        self.audit_path = audit_path
        self.sent = []
        self.peer: StdioPeer | HttpPeer
        if self.transport == "stdio":
            self.peer = await StdioPeer.start(self.server_dir, audit_path, **SERVER_SETTINGS)
        else:
            self.peer = await HttpPeer.start(self.server_dir, audit_path, **SERVER_SETTINGS)
        tools = await _open(self.peer, self.era, self.report, self.sent)
        self.checker = ResultChecker(tools, self.report)
        self.factory = CallFactory(tools, self.rng, self.huge_bytes, self.era, CLIENT)

    async def probe(self, probe: Probe, window: asyncio.Semaphore | None = None) -> None:
        try:
            if self.transport == "http" and not probe.line.strip():
                probe.expect = "null"  # a POST is always answered: an empty body with a parse error
            elif self.transport == "http" and probe.expect == "none":
                # Streamable HTTP: a notification or response the server does not accept gets a 4xx whose body
                # MAY be a JSON-RPC error without an id (an accepted one: 202, no body).
                probe.expect = "none_or_null"
            self.report.by_kind[probe.kind] += 1
            self.report.calls += 1
            answers = await self.peer.exchange(probe.line, probe.key, probe.expect) if self.peer.alive() else None
            self.sent.append((probe, self.checker.check(probe, answers)))
        finally:
            if window is not None:
                window.release()

    async def second_initialize(self, request_id: int) -> None:
        await _second_initialize(self.peer, request_id, self.report, self.sent)

    async def oversized_line(self, request_id: int) -> None:
        await _oversized_line(self.peer, request_id, self.report, self.sent, self.checker, self.era)

    async def still_serving(self, request_id: int) -> None:
        await _still_serving(self.peer, request_id, self.era, self.report)

    async def finish(self, last: bool = False) -> None:
        # A server already dead here was counted when it was found dead (mid-run, or by still_serving).
        counted = not self.peer.alive()
        code = await self.peer.close()
        if last and self.transport == "stdio" and code != 0:
            self.report.fail("server exited", f"exit status {code} when its stdin closed")
            self.report.server_exits += 0 if counted else 1
        check_log(self.audit_path, self.sent, self.report, self.server_dir, {CLIENT})


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


__all__ = ["envelope", "run_bounded", "run_campaign"]
