"""Issue 21, class 6: answers stay inside the contract. An error result's first line is `[ERROR: Kind: …]`
(also when every host of ssh_check / ssh_keyscan / ssh_fanout failed), a timeout's is `[TIMEOUT after …]`,
every structuredContent validates against the tool's outputSchema (error results included, and a call naming
no tool still carries the fields every result shares), and a host name no resolver takes, or a `user` that is
no user name, is an InvalidArgument naming it, not `auth_failed` from a connection never tried."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from mcp import Client

from tests.conftest import text_of
from tests.fuzz.checks import ERROR_LINE
from tests.fuzz.peers import sdk_client

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def client(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    audit_path = tmp_path_factory.mktemp("grammar") / "audit.jsonl"
    async with sdk_client(audit_path, policy_mode="readonly", ssh_config="") as connected:
        yield connected


@pytest.fixture(scope="module")
async def schemas(client: Client) -> dict[str, dict[str, Any]]:
    return {tool.name: tool.output_schema or {} for tool in (await client.list_tools()).tools}


@pytest.mark.parametrize(
    ("tool", "arguments", "first"),
    [
        (
            "ssh_check",
            {"hosts": ["127.0.0.2:1", "nohost.invalid"]},
            "[ERROR: NoHostReached: check 2 hosts: 2 unreachable",
        ),
        (
            "ssh_fanout",
            {"command": "true", "hosts": "127.0.0.2:1"},
            "[ERROR: NoHostReached: fanout 1 hosts: 1 unreachable",
        ),
        ("ssh_keyscan", {"hosts": ["127.0.0.2"], "port": 1}, "[ERROR: NoHostReached: keyscan 1 hosts: 0 answered"),
    ],
)
async def test_every_host_failing_is_an_error_in_the_grammar(
    client: Client, schemas: dict[str, dict[str, Any]], tool: str, arguments: dict[str, Any], first: str
) -> None:
    result = await client.call_tool(tool, arguments)
    line = text_of(result).split("\n", 1)[0]
    assert result.is_error and line.startswith(first) and ERROR_LINE.fullmatch(line), line
    assert result.structured_content is not None and result.structured_content["status"] == "error"
    jsonschema.validate(result.structured_content, schemas[tool])
    assert all(host["status"] == "unreachable" for host in result.structured_content["hosts"])


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("session_list", {"bogus": 1}),
        ("session_list", {"n" * 5000: 1}),
        ("audit_tail", {"lines": 0}),
        ("audit_tail", {"tier": 2**70}),
        ("audit_tail", {"lines": "many", "tool": ["x"]}),
        ("session_recv", {"session_id": "s-000000000000", "until": r"\d{1000000}"}),
        ("shell_spawn", {"command": "true", "until": r"(?:\d{1000}){1000}"}),
    ],
)
async def test_error_results_validate_against_the_output_schema(
    client: Client, schemas: dict[str, dict[str, Any]], tool: str, arguments: dict[str, Any]
) -> None:
    result = await client.call_tool(tool, arguments)
    line = text_of(result).split("\n", 1)[0]
    assert result.is_error and ERROR_LINE.fullmatch(line), line
    jsonschema.validate(result.structured_content, schemas[tool])


async def test_a_call_naming_no_tool_carries_the_fields_every_result_shares(
    client: Client, schemas: dict[str, dict[str, Any]]
) -> None:
    result = await client.call_tool("no_such_tool", {})
    shared = set.intersection(*(set(schema["required"]) for schema in schemas.values()))
    assert result.is_error and shared <= set(result.structured_content or {})


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"hosts": ["a" * 64 + ".invalid"]}, "has a label of 64 characters (at most 63)"),
        ({"hosts": ["a..invalid"]}, "has an empty label"),
        ({"hosts": ["127.0.0.2:1"], "user": "x\x1b[31m"}, "user: 'x\\x1b[31m' is not a valid user name"),
    ],
)
async def test_a_host_or_user_no_connection_can_take_is_an_invalid_argument(
    client: Client, arguments: dict[str, Any], message: str
) -> None:
    result = await client.call_tool("ssh_check", arguments)
    text = text_of(result)
    assert text.startswith("[ERROR: InvalidArgument: ") and message in text, text
    assert "auth_failed" not in text and "KeyUnusable" not in text


async def test_a_session_wait_that_times_out_leads_with_the_timeout(client: Client, tmp_path: Path) -> None:
    # `cat` is tier 0, so readonly mode lets it run in a terminal; nothing it prints matches the pattern.
    result = await client.call_tool("shell_spawn", {"command": ["cat"], "until": "(?!)", "timeout": 0.2})
    line = text_of(result).split("\n", 1)[0]
    assert result.is_error and line.startswith("[TIMEOUT after 0.2s: no match for until | spawned s-"), line
    session_id = (result.structured_content or {})["session_id"]
    await client.call_tool("session_kill", {"session_id": session_id})
