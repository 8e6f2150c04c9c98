"""The stdio transport: the protocol stream is the server's alone, and stdin that is not a pipe still works."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from relay_shell.audit.verify import verify_files
from tests.conftest import server_env

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'


def start_server(audit_path: Path) -> subprocess.Popen[bytes]:
    """relay-shell on pipes, driven with raw JSON-RPC lines."""
    return subprocess.Popen(
        [sys.executable, "-m", "relay_shell"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=server_env(audit_path),
    )


def exchange(server: subprocess.Popen[bytes], messages: list[bytes]) -> list[dict[str, Any]]:
    """Send each message; wait for the answer to each request (EOF would cancel calls still running)."""
    assert server.stdin is not None and server.stdout is not None
    responses = []
    for message in messages:
        server.stdin.write(message + b"\n")
        server.stdin.flush()
        if b'"id"' in message:
            responses.append(orjson.loads(server.stdout.readline()))
    return responses


def test_nothing_the_server_starts_can_write_into_the_protocol_stream(tmp_path: Path) -> None:
    # The command forges a JSON-RPC response on the server's own fd 1. If fd 1 were still the wire, the
    # forged line would reach the client.
    forged = '{"jsonrpc":"2.0","id":99,"result":{"forged":true}}'
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "shell_exec", "arguments": {"command": f"echo '{forged}' > /proc/$PPID/fd/1; echo ok"}},
    }
    server = start_server(tmp_path / "audit.jsonl")
    responses = exchange(server, [orjson.dumps(INITIALIZE), INITIALIZED, orjson.dumps(call)])
    assert server.stdin is not None and server.stdout is not None
    server.stdin.close()
    assert server.wait(timeout=30) == 0
    assert server.stderr is not None
    rest, stderr = server.stdout.read(), server.stderr.read()
    assert rest == b""  # nothing after the two answers
    assert [response["id"] for response in responses] == [1, 2]
    assert responses[1]["result"]["content"][0]["text"] == "[exit 0]\nok\n"
    assert b"forged" in stderr  # where fd 1 points while serving


@pytest.mark.parametrize("stdin_kind", ["file", "pipe"])
def test_initialize_over_a_pipe_or_a_regular_file(tmp_path: Path, stdin_kind: str) -> None:
    request = orjson.dumps(INITIALIZE) + b"\n"
    command = [sys.executable, "-m", "relay_shell"]
    env = server_env(tmp_path / "audit.jsonl")
    if stdin_kind == "file":  # epoll cannot watch a regular file: the SDK's threaded transport takes over
        (tmp_path / "in.jsonl").write_bytes(request)
        with open(tmp_path / "in.jsonl", "rb") as stdin:
            completed = subprocess.run(command, stdin=stdin, capture_output=True, env=env, timeout=30)
    else:
        completed = subprocess.run(command, input=request, capture_output=True, env=env, timeout=30)
    assert completed.returncode == 0, completed.stderr.decode()
    response = orjson.loads(completed.stdout.splitlines()[0])
    assert response["id"] == 1
    assert response["result"]["serverInfo"]["name"] == "relay-shell"


def test_stdin_from_dev_null_ends_the_server_at_once(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "relay_shell"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=server_env(tmp_path / "audit.jsonl"),
        timeout=30,
    )
    assert completed.returncode == 0, completed.stderr.decode()
    assert completed.stdout == b""


def test_an_argument_too_large_for_the_log_encoder_is_still_audited(tmp_path: Path) -> None:
    # A 65-bit integer is valid JSON but more than the log's encoder takes: the command must not run
    # without its record.
    marker = tmp_path / "ran"
    audit_path = tmp_path / "audit.jsonl"
    call = (
        '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"shell_exec","arguments":'
        f'{{"command":"touch {marker}; echo done","max_output":{2**64}}}}}}}'
    )
    server = start_server(audit_path)
    responses = exchange(server, [orjson.dumps(INITIALIZE), INITIALIZED, call.encode()])
    assert server.stdin is not None
    server.stdin.close()
    assert server.wait(timeout=30) == 0
    result = responses[1]["result"]
    assert result["content"][0]["text"].startswith("[exit 0]\n[NOTE: max_output 18446744073709551616 lowered")
    assert marker.exists()
    records = [orjson.loads(line) for line in audit_path.read_bytes().splitlines()]
    shell_records = [record for record in records if record["tool"] == "shell_exec"]
    assert [record["phase"] for record in shell_records] == ["start", "end"]  # the start before it ran
    assert all(record["args"]["max_output"] == str(2**64) for record in shell_records)
    assert verify_files([audit_path]).ok


def test_a_client_that_stops_reading_ends_the_server_cleanly(tmp_path: Path) -> None:
    server = start_server(tmp_path / "audit.jsonl")
    assert exchange(server, [orjson.dumps(INITIALIZE)])[0]["id"] == 1
    assert server.stdin is not None and server.stdout is not None and server.stderr is not None
    server.stdout.close()  # the client is gone: the next answer has nowhere to go
    for request_id in (2, 3, 4):
        server.stdin.write(orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": "ping"}) + b"\n")
        server.stdin.flush()
        time.sleep(0.2)
    server.stdin.close()
    assert server.wait(timeout=30) == 0
    assert b"Traceback" not in server.stderr.read()


def test_an_unreadable_line_gets_an_error_reply_not_silence(tmp_path: Path) -> None:
    # Without a reply the client would wait for its answer forever. A lone surrogate is valid JSON (Python
    # reads it) but not Unicode: the call reaches the tool gate and is refused there as a result (adr/0016).
    surrogate_call = (
        b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"shell_exec",'
        b'"arguments":{"command":"echo \\ud800"}}}'
    )
    server = start_server(tmp_path / "audit.jsonl")
    responses = exchange(server, [orjson.dumps(INITIALIZE), INITIALIZED])
    assert server.stdin is not None and server.stdout is not None
    for line in (b"not json {", surrogate_call, b'{"jsonrpc":"2.0","method":"notifications/bogus"', b"[1, 2]"):
        server.stdin.write(line + b"\n")
    server.stdin.write(b'{"jsonrpc":"2.0","id":8,"method":"ping"}\n')
    server.stdin.flush()
    for _ in range(5):
        responses.append(orjson.loads(server.stdout.readline()))
    server.stdin.close()
    assert server.wait(timeout=30) == 0
    # The transport answers unreadable lines at once; the tool call's result comes from the server, in its time.
    answers = [(response.get("id"), response.get("error", {}).get("code")) for response in responses[1:]]
    assert sorted(answers, key=repr) == sorted(
        [
            (None, -32700),
            (7, None),  # a result: InvalidArgument, audited
            (None, -32700),  # a truncated notification is not JSON either
            (None, -32600),
            (8, None),  # and the server still answers
        ],
        key=repr,
    )
    (refused,) = [response for response in responses if response.get("id") == 7]
    assert refused["result"]["content"][0]["text"].startswith("[ERROR: InvalidArgument: command: holds a lone")
