"""End to end with an independent client: the MCP Inspector CLI (Node) driving relay-shell over stdio."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import read_records
from tests.e2e.clients.node import inspect


@pytest.fixture
def audit_path(tmp_path: Path) -> Path:
    return tmp_path / "audit.jsonl"


def test_inspector_lists_tools(tmp_path: Path, audit_path: Path) -> None:
    code, payload, output = inspect(tmp_path, audit_path, "--method", "tools/list")
    assert code == 0, output
    names = {tool["name"] for tool in payload["tools"]}
    assert {"shell_exec", "shell_script", "server_info", "audit_tail"} <= names
    shell_exec = next(tool for tool in payload["tools"] if tool["name"] == "shell_exec")
    assert shell_exec["annotations"]["destructiveHint"] is True
    assert "outputSchema" in shell_exec


def test_inspector_calls_shell_exec(tmp_path: Path, audit_path: Path) -> None:
    code, payload, output = inspect(
        tmp_path,
        audit_path,
        "--method",
        "tools/call",
        "--tool-name",
        "shell_exec",
        "--tool-arg",
        "command=echo inspected",
    )
    assert code == 0, output
    assert payload["content"][0]["text"] == "[exit 0]\ninspected\n"
    assert payload["structuredContent"]["exit_code"] == 0
    records = read_records(audit_path)
    # The server's own start, then the call: a start record before it ran and an end record, one call_id.
    assert [(record["tool"], record.get("phase")) for record in records] == [
        ("server:start", None),
        ("shell_exec", "start"),
        ("shell_exec", "end"),
    ]
    assert records[1]["call_id"] == records[2]["call_id"]
    assert records[1]["client_id"].startswith("stdio:")


def test_inspector_sees_tool_errors(tmp_path: Path, audit_path: Path) -> None:
    code, _payload, output = inspect(
        tmp_path,
        audit_path,
        "--method",
        "tools/call",
        "--tool-name",
        "shell_exec",
        "--tool-arg",
        "command=echo hi",
        "--tool-arg",
        "cwd=/no/such/dir",
    )
    assert code == 5, output
    assert "cwd: '/no/such/dir' does not exist" in output


def test_inspector_prompt_and_resource(tmp_path: Path, audit_path: Path) -> None:
    code, payload, output = inspect(tmp_path, audit_path, "--method", "prompts/get", "--prompt-name", "operating_guide")
    assert code == 0, output
    assert "relay-shell operating guide" in json.dumps(payload)
    code, payload, output = inspect(
        tmp_path, audit_path, "--method", "resources/read", "--uri", "relay-shell://audit/recent"
    )
    assert code == 0, output
    assert payload["contents"][0]["uri"] == "relay-shell://audit/recent"
    assert [record["tool"] for record in read_records(audit_path)] == [
        "server:start",  # each Inspector command starts the server anew
        "prompt:operating_guide",
        "server:start",
        "resource:audit_recent",
    ]
