"""Issue 21, class 3: a tool call that reaches the server is answered with a result, never a JSON-RPC error
or `Internal`, and leaves exactly one audit record: an integer beyond 64 bits for `operation_confirm`, a NUL
byte in `key_path`, `max_output` / `max_bytes` / `max_output_per_host` beyond any float, and a lone surrogate
in any argument (refused as an InvalidArgument naming it, the record keeping it as the text `\\udXXX`).

The SDK's client sends what it can; what it cannot encode (a lone surrogate, `1e309`) goes as a raw line.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from relay_shell.audit.verify import verify_files
from tests.conftest import read_records, text_of
from tests.fuzz.peers import StdioPeer, ask, initialize, sdk_client, server_dir

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def audit_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("unaudited") / "audit.jsonl"


@pytest.fixture(scope="module")
async def client(audit_path: Path) -> AsyncIterator[Client]:
    async with sdk_client(audit_path, policy_mode="readonly", ssh_config="") as connected:
        yield connected


def records_for(audit_path: Path, tool: str) -> list[dict[str, Any]]:
    """One per call: its end record (a call that ran also has a start record with the same call_id)."""
    return [record for record in read_records(audit_path) if record["tool"] == tool and record.get("phase") != "start"]


@pytest.mark.parametrize(
    ("tool", "arguments", "expected"),
    [
        ("operation_confirm", {"token": 2**70}, "InvalidArgument: token: Input should be a valid string"),
        ("ssh_check", {"hosts": ["127.0.0.2:1"], "key_path": "/tmp/a\x00b"}, "InvalidArgument: key_path:"),
        ("ssh_exec", {"host": "127.0.0.2:1", "command": "true", "key_path": "\x00"}, "InvalidArgument: key_path:"),
        ("shell_exec", {"command": "true", "max_output": 10**400}, "[exit 0]\n[NOTE: max_output 1.000e+400 lowered"),
        ("session_recv", {"session_id": "s-000000000000", "max_bytes": 10**400}, "UnknownSession"),
        (
            "ssh_fanout",
            {"command": "true", "hosts": "127.0.0.2:1", "max_output_per_host": 10**400},
            "[NOTE: max_output_per_host 1.000e+400 lowered",
        ),
    ],
)
async def test_a_call_that_reaches_the_server_is_a_result_with_one_record(
    client: Client, audit_path: Path, tool: str, arguments: dict[str, Any], expected: str
) -> None:
    before = len(records_for(audit_path, tool))
    result = await client.call_tool(tool, arguments)  # a JSON-RPC error would raise here
    text = text_of(result)
    assert expected in text and "Internal" not in text, text
    assert len(records_for(audit_path, tool)) == before + 1


@pytest.fixture(scope="module")
async def raw(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[StdioPeer]:
    peer = await StdioPeer.start(
        server_dir(), tmp_path_factory.mktemp("raw") / "audit.jsonl", policy_mode="readonly", ssh_config=""
    )
    await initialize(peer)
    yield peer
    await peer.close()


@pytest.mark.parametrize(
    ("request_id", "line", "expected"),
    [
        (
            11,
            b'{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"shell_exec",'
            b'"arguments":{"command":"echo \\ud800 hi"}}}',
            "InvalidArgument: command: holds a lone UTF-16 surrogate",
        ),
        (
            12,
            b'{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"shell_exec",'
            b'"arguments":{"command":"true","env":{"X\\udfff":"1"}}}}',
            "InvalidArgument: env: holds a lone UTF-16 surrogate",
        ),
        (
            13,
            b'{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"shell_exec",'
            b'"arguments":{"command":"true","max_output":1e309}}}',
            "InvalidArgument: max_output:",
        ),
        (
            14,
            b'{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"session_recv",'
            b'"arguments":{"session_id":"s-1","max_bytes":-1e309}}}',
            "InvalidArgument: max_bytes:",
        ),
    ],
)
async def test_calls_a_client_library_cannot_send_are_results_with_one_record(
    raw: StdioPeer, request_id: int, line: bytes, expected: str
) -> None:
    answer = await ask(raw, line, ("int", str(request_id)))
    assert answer is not None and "result" in answer, answer
    text = answer["result"]["content"][0]["text"]
    assert text.startswith("[ERROR: " + expected), text
    records = [record for record in read_records(raw.audit_path) if record.get("request_id") == str(request_id)]
    assert len(records) == 1 and records[0]["outcome"] == "error"
    if request_id == 11:
        assert records[0]["args"]["command"] == "echo \\ud800 hi"  # the six characters, not a surrogate
    assert verify_files([raw.audit_path]).ok


async def test_a_tier3_call_with_an_integer_beyond_64_bits_is_offered_for_confirmation(tmp_path: Path) -> None:
    # Binding the call for its token, and showing it to the human, take integers of any length. The command
    # is tier 3 and harmless even if it ran: the device does not exist.
    async with sdk_client(tmp_path / "audit.jsonl", confirm_tier3="token") as connected:
        command = "mkfs.ext4 /dev/relay-shell-no-such-device"
        result = await connected.call_tool("shell_exec", {"command": command, "max_output": 2**70})
    text = text_of(result)
    assert text.startswith("[CONFIRM REQUIRED tier 3: ") and "1.180e+21" in text, text
    assert len(records_for(tmp_path / "audit.jsonl", "shell_exec")) == 1
