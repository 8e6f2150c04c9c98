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
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from relay_shell.audit.verify import verify_files
from relay_shell.wire import MAX_INTEGER_DIGITS
from tests.conftest import read_records
from tests.fuzz.peers import HttpPeer, StdioPeer, ask, initialize, server_dir, server_env

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
    "a batch": (b"[" + call_line("107") + b"]", None, "107", "server_info"),  # each call of a batch: read
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


def method_first(id_json: str) -> bytes:
    """A tools/call with its members in another order: the method first, the id last (as the TypeScript SDK)."""
    params = '{"name":"server_info","arguments":{}}'
    return f'{{"method":"tools/call","params":{params},"jsonrpc":"2.0","id":{id_json}}}'.encode()


BOM = b"\xef\xbb\xbf"

# Issue 30 review S1: what a JSON-RPC reader refuses but whose bytes show tools/calls, in any JSON spelling.
# name: (message, the answer's id as the peer reads it (None: id null), [(request_id, tool) of each record])
FRAMED: dict[str, tuple[bytes, tuple[str, str] | None, list[tuple[str | None, str]]]] = {
    "a byte order mark, jsonrpc and id first": (BOM + call_line("201"), ("int", "201"), [("201", "server_info")]),
    "a byte order mark, method first": (BOM + method_first("202"), ("int", "202"), [("202", "server_info")]),
    "trailing garbage": (call_line("203") + b" xyz", ("int", "203"), [("203", "server_info")]),
    "trailing garbage, params first": (
        b'{"params":{"name":"server_info","arguments":{}},"method":"tools/call","jsonrpc":"2.0","id":204} xyz',
        ("int", "204"),
        [("204", "server_info")],
    ),
    "tools\\/call and garbage": (
        call_line("205").replace(b'"tools/call"', b'"tools\\/call"') + b"garbage",
        ("int", "205"),
        [("205", "server_info")],
    ),
    "tools/\\u0063all and garbage": (
        call_line("206").replace(b'"tools/call"', b'"tools/\\u0063all"') + b"}",
        ("int", "206"),
        [("206", "server_info")],
    ),
    "a nested batch": (b"[[" + call_line("207") + b"]]", None, [("207", "server_info")]),
    "a batch of three": (
        b"[" + call_line("208") + b"," + call_line("209") + b"," + call_line("210") + b"]",
        None,
        [("208", "server_info"), ("209", "server_info"), ("210", "server_info")],
    ),
    "a NUL before": (b"\x00" + call_line("211"), ("int", "211"), [("211", "server_info")]),
    "UTF-16": (call_line("212").decode().encode("utf-16-le"), ("int", "212"), [("212", "server_info")]),
    "a no-break space before": (b"\xc2\xa0" + call_line("213"), ("int", "213"), [("213", "server_info")]),
    "a comment before": (b"/*x*/" + call_line("214"), ("int", "214"), [("214", "server_info")]),
    "a form feed before": (b"\x0c" + call_line("215"), ("int", "215"), [("215", "server_info")]),
    "a NUL inside (the tool cannot be read)": (
        call_line("216").replace(b'"jsonrpc"', b'"jsonrpc"\x00'),
        None,
        [(None, "unknown")],
    ),
    "garbage with an escaped method member in it": (
        b'garbage {"\\u006dethod" : "tools\\/call" garbage',
        None,
        [(None, "unknown")],
    ),
}


@pytest.mark.parametrize("case", list(FRAMED))
async def test_a_message_refused_for_its_framing_records_every_tools_call_it_shows(
    peer: StdioPeer | HttpPeer, case: str
) -> None:
    line, answer_key, expected = FRAMED[case]
    answer = await ask(peer, line, answer_key)
    assert answer is not None, f"no answer with the id the client sent ({answer_key})"
    assert answer["error"]["code"] in (-32600, -32700), answer
    digest = hashlib.sha256(line).hexdigest()
    records = [record for record in read_records(peer.audit_path) if record.get("message_sha256") == digest]
    assert [(record["request_id"], record["tool"]) for record in records] == expected
    for record in records:
        assert record["client_id"] == f"{peer.transport}:{CLIENT}" and record["message_len"] == len(line)
        assert (record["outcome"], record["phase"], record["reason"]) == ("error", "end", answer["error"]["message"])
    assert verify_files([peer.audit_path]).ok


async def test_an_oversized_http_body_with_its_params_first_is_recorded_with_its_id(tmp_path: Path) -> None:
    """A body over the SDK's 4 MiB whose method and id come after 5 MiB of arguments: 413, with the id, and one
    record (found by the scan of the body as it streams past, in bounded memory)."""
    peer = await HttpPeer.start(server_dir(), tmp_path / "audit.jsonl", policy_mode="readonly")
    try:
        await initialize(peer, client=CLIENT)
        body = (
            b'{"params":{"name":"shell_exec","arguments":{"command":"' + b"a" * (5 * 1024 * 1024) + b'"}},'
            b'"method":"tools/call","id":301,"jsonrpc":"2.0","x":1}'
        )
        status, messages, _ = await peer.post(body)
        assert status == 413 and messages[0]["id"] == 301, (status, messages)
        spelled = body.replace(b'"method":"tools/call","id":301', b'"\\u006dethod" : "tools\\/call","id":302')
        status, messages, _ = await peer.post(spelled)
        assert status == 413 and messages[0]["id"] == 302, (status, messages)
    finally:
        await peer.close()
    for sent, request_id in ((body, "301"), (spelled, "302")):
        digest = hashlib.sha256(sent).hexdigest()
        records = [record for record in read_records(peer.audit_path) if record.get("message_sha256") == digest]
        assert [(record["request_id"], record["tool"], record["message_len"]) for record in records] == [
            (request_id, "unknown", len(sent))
        ]


def test_stdin_from_a_regular_file_goes_through_the_same_reader(tmp_path: Path) -> None:
    """`relay-shell < in.jsonl > out.jsonl`: epoll cannot watch a regular file, and the SDK's own transport (which
    it fell back to) has none of the transport's bounds nor its refusal records. A call refused for its id and a
    batch are recorded, and every answer reaches the output file."""
    lines = [
        b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},'
        b'"clientInfo":{"name":"' + CLIENT.encode() + b'","version":"1"}}}',
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
        call_line("1.5"),
        b"[" + call_line("401") + b"," + call_line("402") + b"]",
        call_line("403", '{"name":"server_info","arguments":{"x":' + DEEP + "}}"),
    ]
    (tmp_path / "in.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    audit_path = tmp_path / "audit.jsonl"
    env = server_env(audit_path, server_dir(), policy_mode="readonly", ssh_config="")
    with open(tmp_path / "in.jsonl", "rb") as stdin, open(tmp_path / "out.jsonl", "wb") as stdout:
        completed = subprocess.run(
            [sys.executable, "-m", "relay_shell"], stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, env=env,
            cwd=server_dir(), timeout=60,
        )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-500:]
    answers = [json.loads(line) for line in (tmp_path / "out.jsonl").read_bytes().splitlines()]
    by_id = {json.dumps(answer.get("id")): answer for answer in answers}
    assert by_id["1.5"]["error"]["code"] == -32600 and by_id["null"]["error"]["code"] == -32600
    assert "nested deeper than 200" in by_id["403"]["error"]["message"]
    records = {str(record.get("request_id")): record for record in read_records(audit_path)}
    assert {request_id: records[request_id]["tool"] for request_id in ("1.5", "401", "402", "403")} == {
        "1.5": "server_info",
        "401": "server_info",
        "402": "server_info",
        "403": "unknown",
    }
    assert all(records[request_id]["client_id"] == f"stdio:{CLIENT}" for request_id in ("1.5", "401", "402"))


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
