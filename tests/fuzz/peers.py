"""Raw JSON-RPC peers of a real relay-shell process: over its stdin/stdout pipes, and over streamable HTTP.

The SDK's client refuses to send what a hostile client sends (a float id, a lone surrogate, an unbalanced
line), so these peers write the bytes themselves and read answers as text: integer ids are kept as their
digits when Python cannot hold them (`IntText`), so an id of 5,000 digits can be compared with what was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.fuzz.calls import PROTOCOL, id_key

REPO = Path(__file__).resolve().parents[2]
ANSWER_TIMEOUT = 30.0  # seconds a request may take before it counts as unanswered (no fuzzed call runs long)
NULL_TIMEOUT = 5.0  # seconds to wait for an answer with id null (the server writes those at once)


class IntText(str):
    """An integer too long for Python's int (over 4,300 digits), as its digits."""


def _integer(text: str) -> int | IntText:
    return IntText(text) if len(text) > 4300 else int(text)


def parse_answer(text: str | bytes) -> Any:
    return json.loads(text, parse_int=_integer)


def answer_key(answer: dict[str, Any]) -> tuple[str, str] | None:
    value = answer.get("id")
    if isinstance(value, IntText):
        return ("int", str(value))
    return id_key(value)


def server_dir() -> Path:
    """The checkout whose server the hostile-input tests start: this one, or another one named by
    HOSTILE_TEST_SERVER_DIR (to show a test fails on the code before its fix)."""
    return Path(os.environ.get("HOSTILE_TEST_SERVER_DIR") or REPO)


@asynccontextmanager
async def sdk_client(audit_path: Path, mode: str = "legacy", **settings: str) -> AsyncIterator[Client]:
    """The SDK's own client over stdio, to a server started from `server_dir()`."""
    where = server_dir()
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "relay_shell"], env=server_env(audit_path, where, **settings), cwd=where
    )
    async with Client(params, mode=mode) as client:  # type: ignore[arg-type]
        yield client


def server_env(audit_path: Path, server_dir: Path, **settings: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("RELAY_SHELL_")}
    env["RELAY_SHELL_AUDIT_PATH"] = str(audit_path)
    env["PYTHONPATH"] = str(server_dir)  # the checkout under test, not the one running the fuzzer
    env.update({f"RELAY_SHELL_{name.upper()}": value for name, value in settings.items()})
    return env


def rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class StdioPeer:
    """A relay-shell process on pipes; answers are matched to requests by id (several may be in flight)."""

    transport = "stdio"

    def __init__(self, process: asyncio.subprocess.Process, audit_path: Path) -> None:
        self.process = process
        self.audit_path = audit_path
        self.answers: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.null_answers: deque[dict[str, Any]] = deque()
        self.unreadable: list[bytes] = []  # lines on stdout that are not JSON
        self.arrived = asyncio.Condition()
        self.stderr_tail: deque[str] = deque(maxlen=200)
        self.tasks = [asyncio.create_task(self._read()), asyncio.create_task(self._drain_stderr())]

    @classmethod
    async def start(cls, server_dir: Path, audit_path: Path, **settings: str) -> StdioPeer:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "relay_shell",
            cwd=server_dir,
            env=server_env(audit_path, server_dir, **settings),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=256 * 1024 * 1024,
        )
        return cls(process, audit_path)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.returncode is None

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while True:
            try:
                line = await self.process.stdout.readline()
            except (ValueError, asyncio.LimitOverrunError):
                self.unreadable.append(b"<an answer longer than the reader's limit>")
                continue
            if not line:
                break
            try:
                answer = parse_answer(line)
            except ValueError:
                self.unreadable.append(line[:200])
                continue
            async with self.arrived:
                if isinstance(answer, dict) and answer.get("id") is None and "id" in answer:
                    self.null_answers.append(answer)
                elif isinstance(answer, dict) and "id" in answer:
                    key = answer_key(answer)
                    assert key is not None
                    self.answers.setdefault(key, []).append(answer)
                # server requests and notifications (no id, or a method) are not answers to us
                self.arrived.notify_all()
        async with self.arrived:
            self.arrived.notify_all()

    async def _drain_stderr(self) -> None:
        assert self.process.stderr is not None
        while True:
            line = await self.process.stderr.readline()
            if not line:
                break
            self.stderr_tail.append(line.decode("utf-8", errors="replace").rstrip("\n"))

    async def send(self, line: bytes) -> bool:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(line + b"\n")
            await self.process.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            return False
        return True

    async def wait_answer(self, key: tuple[str, str], timeout: float = ANSWER_TIMEOUT) -> dict[str, Any] | None:
        async def arrived() -> dict[str, Any]:
            async with self.arrived:
                await self.arrived.wait_for(lambda: key in self.answers or not self.alive() or self._eof())
                found = self.answers.get(key)
                return found[0] if found else {}

        try:
            answer = await asyncio.wait_for(arrived(), timeout)
        except TimeoutError:
            return None
        return answer or None

    async def wait_null(self, timeout: float = NULL_TIMEOUT) -> dict[str, Any] | None:
        async def arrived() -> dict[str, Any]:
            async with self.arrived:
                await self.arrived.wait_for(lambda: bool(self.null_answers) or self._eof())
                return self.null_answers.popleft() if self.null_answers else {}

        try:
            answer = await asyncio.wait_for(arrived(), timeout)
        except TimeoutError:
            return None
        return answer or None

    def _eof(self) -> bool:
        return self.tasks[0].done()

    async def exchange(self, line: bytes, key: tuple[str, str] | None, expect: str) -> list[dict[str, Any]] | None:
        """Send one message; the answers that belong to it (None: the server did not answer at all)."""
        if not await self.send(line):
            return None
        if expect == "none":
            return []
        if expect == "null":
            answer = await self.wait_null()
            return None if answer is None else [answer]
        if expect == "null_or_id":
            assert key is not None
            waiting = [asyncio.create_task(self.wait_null()), asyncio.create_task(self.wait_answer(key, NULL_TIMEOUT))]
            done, pending = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            found = [task.result() for task in done if task.result() is not None]
            if not found and pending:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.gather(*pending)
            return found or None
        assert key is not None
        answer = await self.wait_answer(key)
        return None if answer is None else [answer]

    async def close(self) -> int:
        if self.process.stdin is not None and not self.process.stdin.is_closing():
            self.process.stdin.close()
        try:
            code = await asyncio.wait_for(self.process.wait(), 20)
        except TimeoutError:
            self.process.kill()
            code = await self.process.wait()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        return code


class HttpPeer:
    """A relay-shell process serving streamable HTTP on loopback; each POST carries one message."""

    transport = "http"

    def __init__(
        self, process: asyncio.subprocess.Process, url: str, stderr_tail: deque[str], audit_path: Path
    ) -> None:
        self.process = process
        self.audit_path = audit_path
        self.url = url
        self.session_id: str | None = None
        self.protocol = PROTOCOL
        self.stderr_tail = stderr_tail
        self.client = httpx2.AsyncClient(timeout=ANSWER_TIMEOUT)
        self.drain = asyncio.create_task(self._drain_stderr())

    @classmethod
    async def start(cls, server_dir: Path, audit_path: Path, **settings: str) -> HttpPeer:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "relay_shell",
            cwd=server_dir,
            env=server_env(audit_path, server_dir, transport="http", http_port="0", **settings),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        assert process.stderr is not None
        tail: deque[str] = deque(maxlen=200)
        while True:
            line = (await asyncio.wait_for(process.stderr.readline(), 30)).decode(errors="replace")
            if not line:
                raise RuntimeError("the HTTP server did not start: " + " | ".join(tail))
            tail.append(line.rstrip("\n"))
            found = re.search(r"speaking MCP at (http://\S+/mcp)", line)
            if found:
                return cls(process, found.group(1), tail, audit_path)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.returncode is None

    async def _drain_stderr(self) -> None:
        assert self.process.stderr is not None
        while True:
            line = await self.process.stderr.readline()
            if not line:
                break
            self.stderr_tail.append(line.decode("utf-8", errors="replace").rstrip("\n"))

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        if self.session_id:
            headers["mcp-session-id"] = self.session_id
            headers["mcp-protocol-version"] = self.protocol
        return headers

    async def post(self, line: bytes) -> tuple[int, list[dict[str, Any]], dict[str, str]]:
        """The HTTP status, the JSON-RPC messages in the response body, and the response headers."""
        response = await self.client.post(self.url, content=line, headers=self.headers())
        body = response.content
        messages: list[dict[str, Any]] = []
        if "text/event-stream" in response.headers.get("content-type", ""):
            # SSE lines end at CR or LF only (str.splitlines would also split inside JSON at U+2028 and others)
            for event_line in body.decode("utf-8", errors="replace").replace("\r\n", "\n").split("\n"):
                if event_line.startswith("data:") and event_line[5:].strip():
                    with contextlib.suppress(ValueError):
                        messages.append(parse_answer(event_line[5:].strip()))
        elif body.strip():
            try:
                parsed = parse_answer(body)
            except ValueError:
                parsed = {"unreadable": body[:200].decode(errors="replace")}
            messages.extend(parsed if isinstance(parsed, list) else [parsed])
        return response.status_code, messages, dict(response.headers)

    async def exchange(self, line: bytes, key: tuple[str, str] | None, expect: str) -> list[dict[str, Any]] | None:
        try:
            status, messages, _ = await self.post(line)
        except httpx2.HTTPError:
            return None
        answers = [message for message in messages if isinstance(message, dict) and "id" in message]
        if status >= 500:
            return [{"http_status": status, "id": None, "error": {"code": -32603, "message": f"HTTP {status}"}}]
        if expect in ("none", "none_or_null"):
            return answers
        return answers or None

    async def close(self) -> int:
        await self.client.aclose()
        if self.process.returncode is None:
            self.process.terminate()
        try:
            code = await asyncio.wait_for(self.process.wait(), 20)
        except TimeoutError:
            self.process.kill()
            code = await self.process.wait()
        self.drain.cancel()
        await asyncio.gather(self.drain, return_exceptions=True)
        return code


async def initialize(peer: StdioPeer | HttpPeer, client: str = "hostile", request_id: int = 0) -> dict[str, Any]:
    """The 2025-11-25 handshake: initialize, then notifications/initialized; the initialize answer."""
    line = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "initialize",
            "params": {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": client, "version": "1"}},
        }
    ).encode()
    if isinstance(peer, HttpPeer):
        status, messages, headers = await peer.post(line)
        peer.session_id = headers.get("mcp-session-id")
        answer = messages[0] if messages else {"http_status": status}
    else:
        answers = await peer.exchange(line, ("int", str(request_id)), "answer")
        answer = answers[0] if answers else {}
    await peer.exchange(b'{"jsonrpc":"2.0","method":"notifications/initialized"}', None, "none")
    return answer


async def ask(peer: StdioPeer | HttpPeer, line: bytes, key: tuple[str, str] | None) -> dict[str, Any] | None:
    """Send one message and return its one answer (by id, or the answer with id null when `key` is None)."""
    answers = await peer.exchange(line, key, "null" if key is None else "answer")
    return answers[0] if answers else None


def tool_call(request_id: Any, name: str, arguments: Any) -> bytes:
    message = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    return json.dumps(message, ensure_ascii=True).encode()
