"""End to end: where the exec filter cannot be installed (the server runs under a seccomp policy that forbids
seccomp(2), tests/refuse_syscall.py), calls still run, nothing is traced, and server_info and the startup
banner say so (the banner once)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.conftest import fields, read_records, server_env, text_of

pytestmark = pytest.mark.anyio
LAUNCHER = str(Path(__file__).parents[2] / "refuse_syscall.py")


def test_the_banner_says_once_that_the_trace_is_unavailable(tmp_path: Path) -> None:
    env = server_env(tmp_path / "audit.jsonl")
    finished = subprocess.run(
        [sys.executable, LAUNCHER, "seccomp", "EPERM", sys.executable, "-m", "relay_shell"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    banner = [line for line in finished.stderr.splitlines() if line.startswith("relay-shell ")]
    assert banner and "exec trace unavailable" in banner[0], finished.stderr
    explained = [line for line in finished.stderr.splitlines() if "exec trace unavailable:" in line]
    assert len(explained) == 1 and "Operation not permitted" in explained[0], finished.stderr


async def test_calls_run_untraced_and_server_info_says_why(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    params = StdioServerParameters(
        command=sys.executable,
        args=[LAUNCHER, "seccomp", "EPERM", sys.executable, "-m", "relay_shell"],
        env=server_env(audit_path),
    )
    async with Client(params) as client:  # type: ignore[arg-type]
        info = fields(await client.call_tool("server_info", {}))["info"]["exec_trace"]
        assert info["state"] == "unavailable" and "Operation not permitted" in info["reason"], info
        script = await client.call_tool(
            "shell_script", {"script": "ls / >/dev/null && echo listed", "interpreter": "sh"}
        )
        assert fields(script)["status"] == "ok" and "listed" in text_of(script)
        spawned = await client.call_tool("shell_spawn", {"command": ["sh"], "until": "[$#] $", "timeout": 10})
        assert fields(spawned)["status"] == "ok", text_of(spawned)
        session_id = fields(spawned)["session_id"]
        sent = await client.call_tool(
            "session_send", {"session_id": session_id, "data": "echo sent-$((6*7))", "until": "sent-42", "timeout": 10}
        )
        assert "sent-42" in text_of(sent)
        await client.call_tool("session_kill", {"session_id": session_id})
        info = fields(await client.call_tool("server_info", {}))["info"]["exec_trace"]
        assert info["execs_traced"] == 0
    records = read_records(audit_path)
    assert any(record["tool"] == "shell_script" and record.get("phase") == "end" for record in records)
    assert not any("execs" in record for record in records)
