"""Issue 21, class 1: one line must never stop the server. A request nested 1,000 deep (valid JSON), a line of
unbalanced brackets and a line over the stdio transport's 256 MiB limit are each answered, and the same
server goes on serving; over HTTP the same bodies (and one over the SDK's 4 MiB limit) are answered too.

Each of these lines that is a tools/call has its audit record all the same (issue 30): the digest and length of
the message as received, and the id found at its head.

Raw JSON-RPC peers on the real transports (tests/fuzz/peers.py): the SDK's client cannot send these lines.
HOSTILE_TEST_SERVER_DIR=/path/to/another/checkout runs the same tests against that checkout's server.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import read_records
from tests.fuzz.peers import HttpPeer, StdioPeer, ask, initialize, rss_kib, server_dir, tool_call

pytestmark = pytest.mark.anyio

DEEP = "[" * 1000 + "]" * 1000


@pytest.fixture
async def stdio(tmp_path: Path) -> AsyncIterator[StdioPeer]:
    peer = await StdioPeer.start(server_dir(), tmp_path / "audit.jsonl", policy_mode="readonly")
    await initialize(peer)
    yield peer
    await peer.close()


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[HttpPeer]:
    peer = await HttpPeer.start(server_dir(), tmp_path / "audit.jsonl", policy_mode="readonly")
    await initialize(peer)
    yield peer
    await peer.close()


def refusal_record(peer: StdioPeer | HttpPeer, request_id: str) -> dict[str, object]:
    """The one record of a tools/call the transport refused (it carries the digest of the message)."""
    [record] = [
        record
        for record in read_records(peer.audit_path)
        if record.get("request_id") == request_id and "message_sha256" in record
    ]
    assert record["outcome"] == "error" and record["client_id"] == f"{peer.transport}:hostile", record
    return record


async def still_serving(peer: StdioPeer | HttpPeer, request_id: int) -> None:
    answer = await ask(peer, tool_call(request_id, "server_info", {}), ("int", str(request_id)))
    assert answer is not None and answer["result"]["content"][0]["text"].startswith("[ok]"), answer
    assert peer.alive()


async def test_deep_and_unbalanced_lines_are_answered_and_the_server_goes_on(stdio: StdioPeer) -> None:
    deep = b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"shell_exec","arguments":{"command":'
    answer = await ask(stdio, deep + DEEP.encode() + b"}}}", ("int", "5"))
    assert answer is not None and answer["error"]["code"] == -32600 and "nested deeper" in answer["error"]["message"]
    assert refusal_record(stdio, "5")["message_sha256"] == hashlib.sha256(deep + DEEP.encode() + b"}}}").hexdigest()
    for unbalanced in (b"[" * 100_000, b'{"a":[' * 50_000):
        answer = await ask(stdio, unbalanced, None)
        assert answer is not None and answer["id"] is None and answer["error"]["code"] in (-32700, -32600)
    await still_serving(stdio, 6)


async def test_a_line_over_256_mib_is_answered_with_its_id_and_the_server_goes_on(stdio: StdioPeer) -> None:
    start_rss = rss_kib(stdio.pid)
    head = b'{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"shell_exec","arguments":{"command":"'
    line = head + b"A" * (257 * 1024 * 1024) + b'"}}}'
    started = time.monotonic()
    answer = await ask(stdio, line, ("int", "41"))
    size, digest = len(line), hashlib.sha256(line).hexdigest()
    del line
    assert answer is not None, "the server did not answer a line over 256 MiB"
    assert answer["error"]["code"] == -32600 and "longer than this transport reads" in answer["error"]["message"]
    record = refusal_record(stdio, "41")
    assert (record["message_len"], record["message_sha256"], record["tool"]) == (size, digest, "unknown")
    await still_serving(stdio, 42)
    print(
        f"257 MiB line answered in {time.monotonic() - started:.1f}s; server RSS {start_rss // 1024} -> "
        f"{rss_kib(stdio.pid) // 1024} MiB"
    )


async def test_http_answers_deep_unbalanced_and_oversized_bodies_and_goes_on(http: HttpPeer) -> None:
    deep = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"server_info","arguments":{"x":'
    status, messages, _ = await http.post(deep + DEEP.encode() + b"}}}")
    assert status == 400 and messages[0]["id"] == 7 and "nested deeper" in messages[0]["error"]["message"]
    assert refusal_record(http, "7")["message_len"] == len(deep + DEEP.encode() + b"}}}")
    status, messages, _ = await http.post(b"[" * 100_000)
    assert status == 400 and messages[0]["id"] is None
    big = b'{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"shell_exec","arguments":{"command":"'
    body = big + b"B" * (5 * 1024 * 1024) + b'"}}}'
    status, messages, _ = await http.post(body)
    assert status == 413 and messages[0]["id"] == 8, (status, messages)
    record = refusal_record(http, "8")
    assert (record["message_len"], record["message_sha256"]) == (len(body), hashlib.sha256(body).hexdigest())
    await still_serving(http, 9)


async def test_the_server_answers_a_tool_call_nested_just_within_the_bound(stdio: StdioPeer) -> None:
    # 197 arrays in an argument: the innermost sits inside 200 containers (message, params, arguments).
    inner = "[" * 197 + "]" * 197
    line = tool_call(10, "shell_exec", {"command": "true"}).replace(b'"true"', inner.encode())
    answer = await ask(stdio, line, ("int", "10"))
    assert answer is not None and answer["result"]["isError"] is True
    assert json.dumps(answer["result"]["content"][0]["text"]).find("command") > 0
