"""What a session step costs the server beyond the program's own answer (issue 15 item 5): stripping escape
codes from plain output costs about a copy (measured in benchmarks/bench_strip_ansi.py), and the cheaper paths
of a send (escape stripping, the last output line a tier-3 confirmation shows, the pre-parse of JSON-looking
arguments) give exactly what the straightforward versions gave. Real PTYs and a real server; no mocks."""

from __future__ import annotations

import os
import random
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp import Client
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata

from relay_shell.audit.log import AuditLog
from relay_shell.containment.start import start_containment
from relay_shell.launch import Launcher, TraceOff
from relay_shell.server import build_server
from relay_shell.sessions.ansi import strip_ansi
from relay_shell.sessions.local_pty import start_local_pty
from relay_shell.sessions.registry import SessionRegistry
from relay_shell.sessions.send_plan import confirm_state
from relay_shell.settings.model import Settings
from relay_shell.surface.build import LazyArguments
from tests.conftest import text_of

pytestmark = pytest.mark.anyio

# The escape-code pattern as it was written first (one alternative starting with a class): the reference
# that the faster form must agree with, byte for byte.
_REFERENCE_ESCAPES = re.compile(
    rb"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    rb"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    rb"|\x1b\[[0-?]*[ -/]*[@-~]"
    rb"|\x1b[ -/]*[0-~]"
    rb"|[\x07\x0e\x0f]"
)


def test_stripping_gives_what_the_reference_pattern_gives() -> None:
    randomness = random.Random(15)
    alphabet = b"\x1b\x07\x0e\x0f\\[]PX^_ ;?0m~@/-\r\na\xc3\xa9"
    samples = [bytes(randomness.choice(alphabet) for _ in range(randomness.randint(0, 60))) for _ in range(20_000)]
    samples += [
        b"\x1b[1;32muser@host\x1b[0m:\x1b[34m~\x1b[0m$ ",
        b"\x1b]0;title\x07prompt\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\",
        b"\x1bP1$r0m\x1b\\after",
        b"\x1b(B\x1b=\x0e\x0fbell\x07",
        b"plain\r\ntext\r\n",
        b"",
    ]
    for sample in samples:
        assert strip_ansi(sample) == _REFERENCE_ESCAPES.sub(b"", sample).replace(b"\r\n", b"\n"), sample


def _reference_last_line(recent: str) -> str:
    """The last line with something on it, as first written: every line, from the end."""
    for line in reversed(recent.split("\n")):
        redrawn = line.rsplit("\r", 1)[-1]
        if line.strip():
            return redrawn if redrawn.strip() else line
    return ""


async def test_the_line_a_confirmation_shows_is_the_last_line_with_something_on_it() -> None:
    launcher = Launcher(start_containment("off", "test"), TraceOff("RELAY_SHELL_EXEC_TRACE=off", 0, 64))
    registry = SessionRegistry(
        max_sessions=1,
        buffer_bytes=4096,
        idle_timeout=600.0,
        max_lifetime=600.0,
        kill_grace=1.0,
        on_end=lambda _: None,
        launcher=launcher,
    )
    tree = launcher.session_tree(registry.new_id())
    terminal = await start_local_pty(tree, ["cat"], None, {**os.environ, "TERM": "xterm-256color"}, 80, 24)
    session = registry.add(registry.new_id(), "a", "test", "cat", terminal, 80, 24, None)
    try:
        randomness = random.Random(5)
        pieces = ["a", "b ", " ", "\t", "\r", "\n", "\r\n", "\x0b", "\u2028", "\u3000", "é", ">>> ", "$ ", "\x1b[0m"]
        for _ in range(3000):
            # The callback the terminal calls on each read: thousands of outputs without thousands of programs.
            output = "".join(randomness.choice(pieces) for _ in range(randomness.randint(0, 12)))
            session.on_output(output.encode())
            ring = session.ring
            recent = strip_ansi(ring.read(max(ring.start, ring.end - 2048)).data).decode("utf-8", errors="replace")
            assert confirm_state(session, 0)["last_output"] == _reference_last_line(recent)[-200:], recent[-40:]
    finally:
        await registry.close_all("test over")


@pytest.mark.parametrize(
    "value",
    [
        "^>>> ",
        "",
        "null",
        "true",
        "false",
        " \t\r\n[1, 2]",
        '["^>>> ", "\\\\$ $"]',
        '{"a": 1}',
        "\u00a0[1]",
        "\ufeff[1]",
        "NaN",
        "-Infinity",
        '"quoted"',
        "tru",
        "nul",
        "[unclosed",
        "12",
        "n",
    ],
)
def test_arguments_are_pre_parsed_as_the_sdk_does(value: str) -> None:
    # Clients that send a list as a JSON string (`keys='["ctrl-c"]'`) still get it read as a list; a string
    # that cannot become a list, an object, true, false or null skips the attempt.
    async def session_send(
        session_id: str, data: str = "", keys: list[str] | None = None, until: str | list[str] | None = None
    ) -> None: ...

    ours = LazyArguments.of(session_send)
    sdk = FuncMetadata(arg_model=ours.model())
    for arguments in ({"session_id": "s-1", "data": value}, {"session_id": "s-1", "until": value, "keys": value}):
        assert ours.pre_parse_json(arguments) == sdk.pre_parse_json(arguments)


@asynccontextmanager
async def _serve(tmp_path: Path) -> AsyncIterator[Client]:
    audit_log = AuditLog(tmp_path / "audit.jsonl")
    audit_log.open()
    assembly = build_server(Settings(audit={"audit_path": tmp_path / "audit.jsonl"}), audit_log)
    try:
        async with Client(assembly.mcp, mode="legacy") as client:
            yield client
    finally:
        await assembly.shutdown()
        audit_log.close()


async def test_a_repl_dialogue_with_keys_and_patterns_sent_as_json_strings(tmp_path: Path) -> None:
    async with _serve(tmp_path) as client:
        spawned = await client.call_tool("shell_spawn", {"command": "python3 -q", "until": "^>>> ", "timeout": 10})
        assert spawned.structured_content is not None, text_of(spawned)
        session_id = spawned.structured_content["session_id"]
        for step in range(20):  # the same pattern each step: compiled once, matched every time
            sent = await client.call_tool(
                "session_send", {"session_id": session_id, "data": f"{step}*{step}", "until": "^>>> "}
            )
            assert sent.structured_content is not None and sent.structured_content["wait"] == "match", text_of(sent)
            assert f"\r\n{step * step}\r\n" in text_of(sent)
        # A list sent as a JSON string is still a list of patterns, and keys as a JSON string still keys.
        listed = await client.call_tool(
            "session_send", {"session_id": session_id, "data": "6*7", "until": '["^never$", "^42$"]', "timeout": 5}
        )
        assert listed.structured_content is not None, text_of(listed)
        assert listed.structured_content["match_index"] == 1, text_of(listed)
        typed = await client.call_tool(
            "session_send", {"session_id": session_id, "data": "import time; time.sleep(30)"}
        )
        assert not typed.is_error, text_of(typed)
        interrupted = await client.call_tool(
            "session_send", {"session_id": session_id, "keys": '["ctrl-c"]', "until": "KeyboardInterrupt", "timeout": 5}
        )
        assert interrupted.structured_content is not None, text_of(interrupted)
        assert interrupted.structured_content["wait"] == "match", text_of(interrupted)
