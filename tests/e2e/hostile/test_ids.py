"""Issue 21, class 2: every request with an id is answered, with that id, over stdio and HTTP (adr/0016).

- an id that is a number but not an integer (`1.5`, `1.0`, `1e3`) gets -32600 with that id, written back as it
  came (JSON-RPC allows number ids; MCP does not); a boolean, an object, an array or null gets -32600 with id
  null, as JSON-RPC answers an id a response cannot carry (issue 30);
- an integer id too long to read (over 4,300 digits) gets -32600 with the same digits;
- integer ids beyond 64 bits, the longest readable integer and a 1 MiB string id are served and recorded
  (the record keeps a long id as head + tail + length + SHA-256).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator

import pytest

from relay_shell.wire import MAX_INTEGER_DIGITS
from tests.conftest import read_records
from tests.fuzz.peers import HttpPeer, StdioPeer, ask, initialize, server_dir, tool_call

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", params=["stdio", "http"])
async def peer(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[StdioPeer | HttpPeer]:
    kind = StdioPeer if request.param == "stdio" else HttpPeer
    started = await kind.start(server_dir(), tmp_path_factory.mktemp("ids") / "audit.jsonl", policy_mode="readonly")
    await initialize(started)
    yield started
    await started.close()


def server_info_call(id_json: str) -> bytes:
    return tool_call(0, "server_info", {}).replace(b'"id": 0', b'"id": ' + id_json.encode())


@pytest.mark.parametrize("id_json", ["1.5", "1.0", "1e3", "-0.25"])
async def test_a_number_id_that_is_no_integer_is_answered_with_that_id(
    peer: StdioPeer | HttpPeer, id_json: str
) -> None:
    answer = await ask(peer, server_info_call(id_json), ("str", str(float(id_json))))
    assert answer is not None, f"no answer with id {id_json} to a tools/call with id {id_json}"
    assert answer["error"]["code"] == -32600 and "not a string or an integer" in answer["error"]["message"]
    assert await ask(peer, tool_call(2, "server_info", {}), ("int", "2")) is not None  # and the server goes on


@pytest.mark.parametrize("id_json", ["true", "false", '{"a": 1}', "[1]", "null"])
async def test_an_id_that_is_no_string_or_number_is_answered_with_id_null(
    peer: StdioPeer | HttpPeer, id_json: str
) -> None:
    answer = await ask(peer, server_info_call(id_json), None)
    assert answer is not None, f"no answer to a tools/call with id {id_json}"
    assert answer["id"] is None and answer["error"]["code"] == -32600
    assert "not a string or an integer" in answer["error"]["message"]
    assert await ask(peer, tool_call(2, "server_info", {}), ("int", "2")) is not None  # and the server goes on


async def test_an_integer_id_too_long_to_read_is_answered_with_its_digits(peer: StdioPeer | HttpPeer) -> None:
    digits = "7" * (MAX_INTEGER_DIGITS + 700)
    answer = await ask(peer, server_info_call(digits), ("int", digits))
    assert answer is not None, "the answer does not carry the request's id"
    assert answer["error"]["code"] == -32600 and f"{len(digits)} digits at id" in answer["error"]["message"]


@pytest.mark.parametrize("kind", ["beyond 64 bits", "longest readable", "1 MiB string"])
async def test_long_ids_are_served_with_that_id_and_recorded_bounded(peer: StdioPeer | HttpPeer, kind: str) -> None:
    if kind == "beyond 64 bits":
        id_json, key = str(2**80), ("int", str(2**80))
    elif kind == "longest readable":
        digits = "7" * MAX_INTEGER_DIGITS
        id_json, key = digits, ("int", digits)
    else:
        text = "i" * 1_048_576
        id_json, key = json.dumps(text), ("str", text)
    answer = await ask(peer, server_info_call(id_json), key)
    assert answer is not None and "result" in answer, str(answer)[:300]
    expected = (
        {
            "head": key[1][:256],
            "tail": key[1][-256:],
            "len": len(key[1]),
            "sha256": hashlib.sha256(key[1].encode()).hexdigest(),
        }
        if len(key[1]) > 1024
        else key[1]
    )
    records = [record for record in read_records(peer.audit_path) if record.get("request_id") == expected]
    assert len(records) == 1 and records[0]["tool"] == "server_info"
    assert max(len(line) for line in peer.audit_path.read_bytes().splitlines()) <= 64 * 1024


async def test_a_string_id_with_a_lone_surrogate_is_answered_with_that_id(peer: StdioPeer | HttpPeer) -> None:
    answer = await ask(peer, server_info_call('"id-\\ud800"'), ("str", "id-\ud800"))
    assert answer is not None and answer["error"]["code"] == -32600
