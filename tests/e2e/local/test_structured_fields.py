"""End to end: every tool's structuredContent carries every field of its outputSchema, defaults included.

The contract (docs/contract.md, "Results") says a result carries `status`, `exit_code`, `signal`, `timed_out`,
`truncated`, `output`, `output_bytes`, `duration_ms` and the tool's own fields: a client that reads
`result["timed_out"]` must not get a KeyError. So every property a tool's outputSchema declares is in every
result, success or error, and the schema lists every one of them as required. Every listed tool is called
(local ones and the SSH ones against a real sshd), and each result is validated against the tool's
outputSchema with `jsonschema`, error results included (the SDK client validates only successful ones).
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from mcp import Client
from mcp_types import CallToolResult

from tests.conftest import connect, text_of
from tests.sshd import SshFleet

pytestmark = [pytest.mark.anyio, pytest.mark.fleet(hosts=1)]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("structured-fields")


@pytest.fixture(scope="module")
async def client(workdir: Path, fleet: SshFleet) -> AsyncIterator[Client]:
    runbooks = workdir / "runbooks"  # one runbook: runbook_search's entries are checked against their schema too
    runbooks.mkdir()
    (runbooks / "guard.md").write_text("---\npriority: 10\n---\nA guardrail: every briefing names it.\n")
    settings = {"ssh_config": str(fleet.ssh_config), "runbook_dir": str(runbooks)}
    async with connect(workdir / "audit.jsonl", **settings) as server:
        yield server


async def output_schemas(client: Client) -> dict[str, dict[str, Any]]:
    tools = (await client.list_tools()).tools
    schemas = {tool.name: tool.output_schema for tool in tools}
    missing = sorted(name for name, schema in schemas.items() if schema is None)
    assert not missing, f"tools without an outputSchema: {missing}"
    return {name: schema for name, schema in schemas.items() if schema is not None}


def check(schema: dict[str, Any], tool: str, result: CallToolResult) -> dict[str, Any]:
    """The result carries every declared field, nothing undeclared, and validates against the schema."""
    structured = result.structured_content
    assert structured is not None, (tool, text_of(result))
    declared = set(schema["properties"])
    assert set(schema.get("required", [])) == declared, (tool, declared - set(schema.get("required", [])))
    missing, extra = declared - set(structured), set(structured) - declared
    assert not missing and not extra, (tool, "missing", missing, "undeclared", extra)
    jsonschema.validate(structured, schema)
    return structured


def free_port() -> int:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        return int(listener.getsockname()[1])


async def test_every_tool_returns_every_field_of_its_output_schema(client: Client, workdir: Path) -> None:
    schemas = await output_schemas(client)
    called: set[str] = set()
    errors: set[str] = set()

    async def call(tool: str, arguments: dict[str, Any], error: bool = False) -> dict[str, Any]:
        result = await client.call_tool(tool, arguments)
        assert bool(result.is_error) == error, (tool, arguments, text_of(result))
        called.add(tool)
        if error:
            errors.add(tool)
        return check(schemas[tool], tool, result)

    upload_source = workdir / "upload.txt"
    upload_source.write_text("hello\n")

    # Local one-shot commands: success, timeout, an execution error, an invalid argument.
    await call("shell_exec", {"command": "echo hi", "merge_stderr": False})
    timed = await call("shell_exec", {"command": "sleep 5", "timeout": 0.3}, error=True)
    assert timed["timed_out"] is True and timed["status"] == "timeout"
    await call("shell_exec", {"command": "true", "cwd": str(workdir / "nowhere")}, error=True)
    await call("shell_exec", {"command": "true", "timeout": "soon"}, error=True)
    await call("shell_script", {"script": "echo one\necho two"})
    await call("shell_script", {"script": "echo hi", "interpreter": "cobol"}, error=True)

    # Sessions.
    spawned = await call("shell_spawn", {"command": "cat"})
    session_id = spawned["session_id"]
    await call("session_send", {"session_id": session_id, "data": "ping", "until": "^ping$"})
    await call("session_recv", {"session_id": session_id, "timeout": 0.2})
    await call("session_resize", {"session_id": session_id, "cols": 100, "rows": 30})
    await call("session_list", {})
    await call("session_kill", {"session_id": session_id})
    await call("session_recv", {"session_id": "s-000000000000"}, error=True)

    # SSH against the fleet's one host.
    await call("ssh_exec", {"host": "h01", "command": "true"})
    await call("ssh_exec", {"host": "not-a-host.invalid", "command": "true"}, error=True)
    remote = await call("ssh_spawn", {"host": "h01", "command": "cat", "timeout": 5})
    await call("session_kill", {"session_id": remote["session_id"]})
    await call("ssh_check", {"hosts": ["h01"]})
    await call("ssh_fanout", {"command": "true", "hosts": ["h01"]})
    await call("ssh_keyscan", {"hosts": ["h01"]})
    await call("ssh_hosts", {})
    await call("ssh_upload", {"host": "h01", "local_path": str(upload_source), "remote_path": str(workdir / "up")})
    await call("ssh_download", {"host": "h01", "remote_path": str(workdir / "up"), "local_path": str(workdir / "dn")})
    forward = await call("ssh_forward", {"host": "h01", "spec": f"L:0:127.0.0.1:{free_port()}"})
    await call("ssh_forward_list", {})
    await call("ssh_forward_close", {"forward_id": forward["forward_id"]})
    await call("ssh_forward_close", {"forward_id": "f-nope"}, error=True)

    # Diagnostics.
    await call("server_info", {})
    await call("audit_tail", {"lines": 3})
    await call("audit_tail", {"lines": 0}, error=True)
    await call("operation_confirm", {"token": "not-a-token"}, error=True)

    # Runbooks: every field of an entry, as its schema declares.
    entry_schema = schemas["runbook_search"]["$defs"]["RunbookEntry"]
    assert set(entry_schema["required"]) == set(entry_schema["properties"])
    found = await call("runbook_search", {"tags": ["postgres"]})
    assert [set(entry) for entry in found["runbooks"]] == [set(entry_schema["properties"])]
    await call("runbook_search", {"tags": []}, error=True)
    await call("begin_session", {"tags": ["postgres"]})

    assert called == set(schemas), f"tools not exercised: {sorted(set(schemas) - called)}"
    assert {"shell_exec", "session_recv", "ssh_exec", "audit_tail", "operation_confirm"} <= errors


async def test_a_plain_exec_carries_the_contract_fields_at_their_defaults(client: Client) -> None:
    result = await client.call_tool("shell_exec", {"command": "true"})
    assert not result.is_error, text_of(result)
    structured = result.structured_content
    assert structured is not None
    assert structured["signal"] is None
    assert structured["timed_out"] is False
    assert structured["truncated"] is False
    assert structured["exit_code"] == 0 and structured["notes"] == [] and structured["error"] is None
