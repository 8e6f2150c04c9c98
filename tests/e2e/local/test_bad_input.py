"""Bad input gets a clear error naming the argument, the problem and what is allowed; and it is audited."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import connect, read_records, text_of

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def audit_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bad") / "audit.jsonl"


@pytest.fixture(scope="module")
async def client(audit_path: Path) -> AsyncIterator[Client]:
    async with connect(audit_path) as connected:
        yield connected


@pytest.mark.parametrize(
    ("tool", "arguments", "fragments"),
    [
        ("shell_exec", {"command": "true", "bogus": 1}, ["unknown argument 'bogus'", "allowed: command, timeout"]),
        ("shell_exec", {"command": "true", "timeout": "soon"}, ["timeout:", "got 'soon'", "allowed:"]),
        ("shell_exec", {"command": "true", "env": "PATH=/x"}, ["env:", "allowed:"]),
        ("shell_exec", {"command": 42}, ["command:", "allowed:"]),
        ("shell_exec", {}, ["command: is required"]),
        ("shell_exec", {"command": "   "}, ["command: is empty"]),
        ("shell_exec", {"command": []}, ["command: a list is an argv and needs use_shell=false"]),
        (
            "shell_exec",
            {"command": "true", "cwd": "/definitely/not/here"},
            ["cwd: '/definitely/not/here' does not exist"],
        ),
        ("shell_exec", {"command": "true", "cwd": "/etc/hostname"}, ["cwd: '/etc/hostname' is not a directory"]),
        ("shell_exec", {"command": "true", "env": {"A=B": "x"}}, ["env: 'A=B' is not a valid variable name"]),
        ("shell_exec", {"command": "cat", "stdin": "a\x00b"}, ["stdin: contains a NUL byte"]),
        ("shell_exec", {"command": "echo 'unclosed", "use_shell": False}, ["command: cannot split into argv"]),
        (
            "shell_script",
            {"script": "print(1)", "interpreter": "ruby"},
            ["interpreter: 'ruby' is not supported", "bash, sh, python"],
        ),
        ("shell_script", {"script": ""}, ["script: is empty"]),
        ("audit_tail", {"lines": 0}, ["lines: 0 is out of range; allowed: 1 to 1000"]),
        ("audit_tail", {"tier": 7}, ["tier: 7 is out of range; allowed: 0 to 3"]),
        ("no_such_tool", {}, ["UnknownTool: 'no_such_tool' is not a tool", "shell_exec"]),
    ],
)
async def test_bad_input_is_a_clear_audited_error(
    client: Client, audit_path: Path, tool: str, arguments: dict[str, object], fragments: list[str]
) -> None:
    before = len(read_records(audit_path))
    result = await client.call_tool(tool, arguments)
    assert result.is_error
    text = text_of(result)
    assert text.startswith("[ERROR: ")
    assert "Traceback" not in text
    for fragment in fragments:
        assert fragment in text, text
    records = read_records(audit_path)[before:]
    assert len(records) == 1
    assert records[0]["outcome"] == "error"
    assert records[0]["tool"] == (tool if tool != "no_such_tool" else "unknown")  # the reason names it


@pytest.mark.parametrize("forged", ["oauth:approve", "session:end", "confirm:elicitation", "prompt:x", "forward:end"])
async def test_a_client_cannot_write_records_that_pass_for_server_events(
    client: Client, audit_path: Path, forged: str
) -> None:
    before = len(read_records(audit_path))
    result = await client.call_tool(forged, {})
    assert result.is_error and "UnknownTool" in text_of(result)
    records = read_records(audit_path)[before:]
    assert [(record["tool"], record["outcome"]) for record in records] == [("unknown", "error")]
    assert forged in records[0]["reason"]


async def test_out_of_range_limits_are_clamped_and_said(client: Client) -> None:
    result = await client.call_tool("shell_exec", {"command": "echo ok", "timeout": 999999, "max_output": 10**9})
    text = text_of(result)
    assert not result.is_error
    assert text.splitlines()[:3] == [
        "[exit 0]",
        "[NOTE: timeout 999999 lowered to 3600 (allowed 0.1 to 3600)]",
        "[NOTE: max_output 1000000000 lowered to 1048576 (allowed 256 to 1048576)]",
    ]
    assert result.structured_content is not None and len(result.structured_content["notes"]) == 2
    low = await client.call_tool("shell_exec", {"command": "echo ok", "timeout": -5})
    assert "[NOTE: timeout -5 raised to 0.1 (allowed 0.1 to 3600)]" in text_of(low)
