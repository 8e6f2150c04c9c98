"""Issue 30, item 1: every tools/call that reaches the server has one audit record, also when the transport
refuses it for its encoding (a number of more than 4,300 digits, an id that is no string or integer, nesting
too deep, a lone surrogate outside the arguments, a wrong shape, a message that is not JSON or is too long), over
stdio and HTTP. The record names the client the connection declared, keeps the id as sent and the SHA-256 of the
message, and the answer carries the id the client sent wherever JSON-RPC lets it (a number that is no integer
included); a call with a huge id is found in the log by the digest its record keeps (README, "Hostile input").

Raw JSON-RPC peers on real servers (tests/fuzz/peers.py): the SDK's client cannot send these messages.
HOSTILE_TEST_SERVER_DIR=/path/to/another/checkout runs the same tests against that checkout's server.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from relay_shell.audit.verify import verify_files
from relay_shell.wire import MAX_INTEGER_DIGITS
from tests.conftest import read_records
from tests.fuzz.peers import HttpPeer, StdioPeer, ask, initialize, server_dir

pytestmark = pytest.mark.anyio

CLIENT = "refused-calls"


@pytest.fixture(scope="module", params=["stdio", "http"])
async def peer(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[StdioPeer | HttpPeer]:
    kind = StdioPeer if request.param == "stdio" else HttpPeer
    audit_path = tmp_path_factory.mktemp("refused") / "audit.jsonl"
    started = await kind.start(server_dir(), audit_path, policy_mode="readonly", ssh_config="")
    await initialize(started, client=CLIENT)
    yield started
    await started.close()


def call_line(id_json: str, params: str = '{"name":"server_info","arguments":{}}') -> bytes:
    return f'{{"jsonrpc":"2.0","id":{id_json},"method":"tools/call","params":{params}}}'.encode()


def shell_exec(arguments: str) -> str:
    return '{"name":"shell_exec","arguments":' + arguments + "}"


DEEP = "[" * 250 + "]" * 250
TOO_DEEP_FOR_PYTHON = "[" * 100_000 + "]" * 100_000
LONG_DIGITS = "7" * (MAX_INTEGER_DIGITS + 1)

# name: (message, the answer's id as the peer reads it (None: id null), the record's request_id, its tool)
CASES: dict[str, tuple[bytes, tuple[str, str] | None, str | None, str]] = {
    "a number over 4,300 digits": (
        call_line("101", shell_exec('{"command":"true","timeout":2.5,"max_output":' + "1" * 5000 + "}")),
        ("int", "101"),
        "101",
        "shell_exec",
    ),
    "id 1.5": (call_line("1.5"), ("str", "1.5"), "1.5", "server_info"),
    "id 1e3": (call_line("1e3"), ("str", "1000.0"), "1e3", "server_info"),
    "id 10^400 written as 1e400": (call_line("1e400"), ("str", "inf"), "1e400", "server_info"),
    "id true": (call_line("true"), None, "true", "server_info"),
    "id an object": (call_line('{"a":1}'), None, '{"a":1}', "server_info"),
    "id a list": (call_line("[1]"), None, "[1]", "server_info"),
    "id null": (call_line("null"), None, "null", "server_info"),
    "an integer id over 4,300 digits": (call_line(LONG_DIGITS), ("int", LONG_DIGITS), LONG_DIGITS, "server_info"),
    "nested deeper than 200": (
        call_line("102", shell_exec('{"command":' + DEEP + "}")),
        ("int", "102"),
        "102",
        "unknown",
    ),
    "too deep for Python's parser": (
        call_line("103", shell_exec('{"command":' + TOO_DEEP_FOR_PYTHON + "}")),
        ("int", "103"),
        "103",
        "unknown",
    ),
    "a lone surrogate in _meta": (
        call_line("104", '{"name":"server_info","arguments":{},"_meta":{"progressToken":"\\ud800"}}'),
        ("int", "104"),
        "104",
        "server_info",
    ),
    "params not an object": (call_line("105", "[1,2]"), ("int", "105"), "105", "unknown"),
    "not JSON (cut short)": (call_line("106", shell_exec('{"command":"tr'))[:-3], ("int", "106"), "106", "unknown"),
    "a batch": (b"[" + call_line("107") + b"]", None, None, "unknown"),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_tool_call_refused_for_its_encoding_is_answered_and_has_one_record(
    peer: StdioPeer | HttpPeer, case: str
) -> None:
    line, answer_key, request_id, tool = CASES[case]
    answer = await ask(peer, line, answer_key)
    assert answer is not None, f"no answer with the id the client sent ({answer_key})"
    assert answer["error"]["code"] in (-32600, -32700) and "Internal" not in answer["error"]["message"], answer
    digest = hashlib.sha256(line).hexdigest()
    records = [record for record in read_records(peer.audit_path) if record.get("message_sha256") == digest]
    assert len(records) == 1, f"{len(records)} records for the refused call"
    refused = records[0]
    bounded_id = request_id
    if request_id is not None and len(request_id) > 1024:
        bounded_id = {  # type: ignore[assignment]
            "head": request_id[:256],
            "tail": request_id[-256:],
            "len": len(request_id),
            "sha256": hashlib.sha256(request_id.encode()).hexdigest(),
        }
    assert refused["request_id"] == bounded_id and refused["tool"] == tool, refused
    assert (refused["outcome"], refused["tier"], refused["phase"], refused["denied"]) == ("error", 0, "end", False)
    assert refused["client_id"] == f"{peer.transport}:{CLIENT}" and refused["message_len"] == len(line)
    assert refused["reason"] == answer["error"]["message"][:512]
    assert verify_files([peer.audit_path]).ok


async def test_a_refused_call_keeps_what_could_be_read_of_its_arguments(peer: StdioPeer | HttpPeer) -> None:
    line = call_line("1.25", shell_exec('{"command":"echo hi","env":{"API_TOKEN":"s3cr3t-value"}}'))
    answer = await ask(peer, line, ("str", "1.25"))
    assert answer is not None and answer["error"]["code"] == -32600
    digest = hashlib.sha256(line).hexdigest()
    [refused] = [record for record in read_records(peer.audit_path) if record.get("message_sha256") == digest]
    assert refused["args"]["command"] == "echo hi" and "s3cr3t" not in json.dumps(refused)  # redacted like any call


async def test_a_huge_id_is_found_in_the_log_by_the_digest_its_record_keeps(
    peer: StdioPeer | HttpPeer, tmp_path: Path
) -> None:
    """The README's recipe: the SHA-256 of the id's text (a string's characters, a number as written), then
    grep the log for it. Ids of at most 1,024 characters are kept whole."""
    ids: list[tuple[str, str, tuple[str, str]]] = [  # (JSON text, the id's text, the answer's key)
        (json.dumps("k" * 100_000), "k" * 100_000, ("str", "k" * 100_000)),
        (json.dumps("m" * 1_048_576), "m" * 1_048_576, ("str", "m" * 1_048_576)),
        (str(10**400), str(10**400), ("int", str(10**400))),
        ("9" * 5000, "9" * 5000, ("int", "9" * 5000)),  # refused: too long to read
    ]
    for id_json, id_text, key in ids:
        answer = await ask(peer, call_line(id_json), key)
        assert answer is not None, f"no answer to an id of {len(id_text)} characters"
        if len(id_text) <= 1024:
            pattern = f'"request_id":"{id_text}"'
        else:
            (tmp_path / "id").write_text(id_text)
            digest = subprocess.run(["sha256sum", tmp_path / "id"], capture_output=True, text=True, check=True)
            pattern = '"sha256":"' + digest.stdout[:64] + '"'
        found = subprocess.run(["grep", "-c", "-F", pattern, peer.audit_path], capture_output=True, text=True)
        count = int(found.stdout)
        assert count == 1, f"an id of {len(id_text)} characters: {count} records found by the recipe"


async def test_a_page_in_a_browser_gets_the_sdk_refusal_and_writes_no_record(tmp_path: Path) -> None:
    """A refused call from another origin (DNS rebinding, a cross-site POST) is refused for its Origin, Host or
    Content-Type as the SDK refuses any such request: no answer from the message guard, and no record."""
    peer = await HttpPeer.start(server_dir(), tmp_path / "audit.jsonl", policy_mode="readonly")
    try:
        await initialize(peer, client=CLIENT)
        before = len(read_records(peer.audit_path))
        for headers, status in (
            ({"Origin": "http://evil.example"}, 403),
            ({"Host": "evil.example"}, 421),
            ({"Content-Type": "text/plain"}, 400),
        ):
            line = call_line("1.5")
            response = await peer.client.post(peer.url, content=line, headers={**peer.headers(), **headers})
            assert response.status_code == status, (headers, response.status_code, response.text)
        assert len(read_records(peer.audit_path)) == before
    finally:
        await peer.close()


async def test_over_authenticated_http_a_refused_call_is_recorded_under_the_token_name(tmp_path: Path) -> None:
    """The record names the client as every record over authenticated HTTP does: by its token's name, not by
    what the client declared; a request without a valid token gets its 401 before its body is read, and no
    record."""
    token = "tok-" + "7" * 40
    token_file = tmp_path / "tokens"
    token_file.write_text(f"alice {hashlib.sha256(token.encode()).hexdigest()}\n")
    token_file.chmod(0o600)
    peer = await HttpPeer.start(
        server_dir(), tmp_path / "audit.jsonl", policy_mode="readonly", token_file=str(token_file)
    )
    try:
        unauthenticated = await peer.client.post(peer.url, content=call_line("1.5"), headers=peer.headers())
        assert unauthenticated.status_code == 401
        peer.client.headers["Authorization"] = f"Bearer {token}"
        await initialize(peer, client=CLIENT)
        line = call_line("2.5")
        answer = await ask(peer, line, ("str", "2.5"))
        assert answer is not None and answer["error"]["code"] == -32600
    finally:
        await peer.close()
    refused = [record for record in read_records(peer.audit_path) if "message_sha256" in record]
    assert [(record["request_id"], record["client_id"]) for record in refused] == [("2.5", "http:alice")]
