"""Hostile input, unit by unit (issue 21): reading one JSON-RPC message within bounds and answering what cannot
be served (`wire`), the shared bound of audited fields and the record cap (`audit.record`), numbers no float
holds in clamps, host names no resolver takes, and `until` patterns `regex` would unroll into gigabytes."""

from __future__ import annotations

import hashlib
import json
import random
import time
from pathlib import Path

import orjson
import pytest

from relay_shell import wire_lenient
from relay_shell.arguments import clamp
from relay_shell.audit.log import AuditLog
from relay_shell.audit.record import MAX_RECORD_BYTES, audit_arguments, bound_record
from relay_shell.audit.verify import verify_files
from relay_shell.errors import ArgumentError
from relay_shell.sessions.expect import compile_until
from relay_shell.ssh.target import parse_host_spec
from relay_shell.wire import LONE_SURROGATES, MAX_INTEGER_DIGITS, MAX_NESTING, oversized, read_message


def answer_of(data: bytes) -> dict[str, object]:
    reading = read_message(data)
    assert reading.answer is not None and reading.message is None, reading
    answer = json.loads(reading.answer)
    assert isinstance(answer, dict)
    return answer


def call(request_id: str, arguments: str) -> bytes:
    return (
        f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call",'
        f'"params":{{"name":"shell_exec","arguments":{arguments}}}}}'
    ).encode()


@pytest.mark.parametrize("levels", [MAX_NESTING - 1, 1000, 100_000])
def test_a_message_nested_too_deep_is_answered_with_its_id(levels: int) -> None:
    # The message object, params and arguments are three containers around the value: the innermost of
    # MAX_NESTING - 1 arrays sits inside MAX_NESTING + 1 containers.
    answer = answer_of(call("5", '{"command":' + "[" * levels + "]" * levels + "}"))
    assert answer["id"] == 5 and answer["error"]["code"] == -32600  # type: ignore[index]
    assert f"nested deeper than {MAX_NESTING} levels" in answer["error"]["message"]  # type: ignore[index]


def test_the_deepest_message_read_is_read_by_both_paths() -> None:
    levels = MAX_NESTING - 2  # the innermost empty array sits inside MAX_NESTING containers
    fast = read_message(call("5", '{"command":' + "[" * levels + "]" * levels + "}"))
    slow = read_message(call("5", '{"command":' + "[" * levels + "]" * levels + ',"x":"\\ud800"}'))
    assert fast.message is not None and slow.message is not None


def test_the_id_of_a_message_too_deep_for_python_is_found_at_either_end() -> None:
    deep = "[" * 50_000 + "]" * 50_000
    first = b'{"jsonrpc":"2.0","id":"head-id","method":"tools/call","params":{"x":' + deep.encode() + b"}}"
    last = b'{"method":"tools/call","params":{"x":' + deep.encode() + b'},"jsonrpc":"2.0","id":77}'
    assert answer_of(first)["id"] == "head-id"
    assert answer_of(last)["id"] == 77


def test_unbalanced_brackets_get_an_error_with_id_null() -> None:
    for data in (b"[" * 100_000, b'{"a":[' * 50_000, b"not json", b"\xef\xbb\xbf{}"):
        answer = answer_of(data)
        assert answer["id"] is None and answer["error"]["code"] in (-32700, -32600)  # type: ignore[index]


@pytest.mark.parametrize("request_id", ["1.5", "1.0", "1e3", "-2.5E-3", "1e400", "7" * 5000 + ".5"])
def test_a_number_id_that_is_no_integer_gets_invalid_request_with_that_id_as_written(request_id: str) -> None:
    # JSON-RPC allows number ids (MCP does not): the answer carries the id, written back as it came.
    reading = read_message(call(request_id, '{"command":"true"}'))
    assert reading.answer is not None
    assert reading.answer.startswith(b'{"jsonrpc":"2.0","id":' + request_id.encode() + b',"error":{"code": -32600')
    assert b"not a string or an integer" in reading.answer


@pytest.mark.parametrize("request_id", ["true", "false", '{"a":1}', "[1]", "null"])
def test_an_id_that_is_no_string_or_number_gets_invalid_request_with_id_null(request_id: str) -> None:
    answer = answer_of(call(request_id, '{"command":"true"}'))
    assert answer["id"] is None and answer["error"]["code"] == -32600  # type: ignore[index]
    assert "not a string or an integer" in answer["error"]["message"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("request_id", "recorded"),
    [("1.5", "1.5"), ("1e3", "1e3"), ("true", "true"), ('{"a": 1}', '{"a":1}'), ("[1]", "[1]"), ("null", "null")],
)
def test_a_tool_call_refused_for_its_id_comes_with_what_its_record_keeps(request_id: str, recorded: str) -> None:
    data = call(request_id, '{"command":"true","env":{"X":"\\ud800"}}')
    (refused,) = read_message(data).refused
    assert refused.request_id == recorded and refused.tool == "shell_exec"
    assert refused.arguments == {"command": "true", "env": {"X": "\\ud800"}}  # the six characters
    assert refused.message_len == len(data) and refused.message_sha256 == hashlib.sha256(data).hexdigest()
    assert "is not a string or an integer" in refused.reason and refused.reason.endswith("; nothing ran")


def test_every_tool_call_refused_here_comes_with_a_refused_call_and_nothing_else_does() -> None:
    deep = "[" * 300 + "]" * 300
    for data in (
        call("5", '{"command":' + deep + "}"),  # nested too deep: the arguments are not kept
        call("5", '{"command":"true","max_output":' + "1" * 5000 + "}"),
        call('"\\ud800"', '{"command":"true"}'),
        b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":[1]}',
        b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"shell_exec","arguments":{"comm',
        b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
        b'{"method":"tools/call","params":{"x":' + b"[" * 100_000 + b"]" * 100_000 + b'},"jsonrpc":"2.0","id":5}',
    ):
        (refused,) = read_message(data).refused
        assert refused.request_id in ("5", "\\ud800"), data[:80]
        assert refused.message_sha256 == hashlib.sha256(data).hexdigest()
    assert read_message(call("5", '{"command":' + deep + "}")).refused[0].arguments is None
    # What the record keeps is made of plain Python values, which the log's encoder takes.
    (kept,) = read_message(call("1.5", '{"timeout":2.5,"max_output":' + "1" * 5000 + "}")).refused
    assert isinstance(kept.arguments, dict)
    assert type(kept.arguments["timeout"]) is float and type(kept.arguments["max_output"]) is str
    orjson.dumps(kept.arguments)
    batch = read_message(b'[{"jsonrpc":"2.0","id":7,"method":"tools/call"}]')
    assert [(refused.request_id, refused.tool) for refused in batch.refused] == [("7", None)]
    for data in (
        b'{"jsonrpc":"2.0","id":5,"method":"ping","params":{"x":' + b"[" * 300 + b"]" * 300 + b"}}",
        b'{"jsonrpc":"2.0","method":"tools/call","params":{"x":' + b"[" * 300 + b"]" * 300 + b"}}",  # no id
        b"not json",
        b'[{"jsonrpc":"2.0","id":7,"method":"ping"}]',
        call("5", '{"command":"true"}'),  # served: the tool gate records it
    ):
        assert read_message(data).refused == (), data[:80]


def test_a_message_that_is_not_json_is_answered_with_the_id_its_head_shows() -> None:
    answer = answer_of(b'{"jsonrpc":"2.0","id":"t-1","method":"tools/call","params":{"name":"x","argum')
    assert answer["id"] == "t-1" and answer["error"]["code"] == -32700  # type: ignore[index]


def test_an_integer_id_too_long_to_read_is_echoed_digit_for_digit() -> None:
    digits = "7" * (MAX_INTEGER_DIGITS + 700)
    reading = read_message(call(digits, '{"command":"true"}'))
    assert reading.answer is not None and reading.answer.startswith(b'{"jsonrpc":"2.0","id":' + digits.encode() + b",")
    assert b"-32600" in reading.answer


def test_integer_ids_beyond_64_bits_and_the_longest_readable_are_served() -> None:
    for request_id in (str(2**80), "7" * MAX_INTEGER_DIGITS):
        reading = read_message(call(request_id, '{"command":"true"}'))
        assert reading.message is not None and reading.answer is None


def test_a_number_too_long_to_read_in_the_arguments_is_answered_with_the_id() -> None:
    answer = answer_of(call('"x-1"', '{"command":"true","max_output":' + "1" * 5000 + "}"))
    assert answer["id"] == "x-1" and "5000 digits at params.arguments.max_output" in answer["error"]["message"]  # type: ignore[index]


def test_a_lone_surrogate_in_tool_arguments_reaches_the_gate_marked_and_escaped() -> None:
    reading = read_message(call("9", '{"command":"echo \\ud800","env":{"X\\udc00":"1"}}'))
    assert reading.message is not None and reading.data is not None
    params = json.loads(reading.data)["params"]
    assert params["arguments"]["command"] == "echo \\ud800"  # six characters, valid UTF-8
    assert params["_meta"][LONE_SURROGATES] == ["command", "env"]
    reading.data.decode("utf-8")  # surrogate-free


@pytest.mark.parametrize(
    "data",
    [
        b'{"jsonrpc":"2.0","id":9,"method":"ping\\ud800"}',
        b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":"\\ud800"}}}',
        b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}',
    ],
)
def test_a_lone_surrogate_anywhere_else_is_an_invalid_request_with_the_id(data: bytes) -> None:
    answer = answer_of(data)
    assert answer["id"] in (9, "\ud800") and "lone UTF-16 surrogate" in answer["error"]["message"]  # type: ignore[index]


def test_notifications_and_responses_are_never_answered() -> None:
    for data in (
        b'{"jsonrpc":"2.0","method":"notifications/bogus","params":5}',
        b'{"jsonrpc":"2.0","id":7,"result":{}}',
        b'{"jsonrpc":"2.0","id":7,"result":5}',
        b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"\\ud800"}}',
        b'{"jsonrpc":"2.0","method":"notifications/x","params":{"a":' + b"[" * 300 + b"]" * 300 + b"}}",
        b'{"jsonrpc":"2.0","id":7,"result":{"a":"\\ud800"}}',
    ):
        assert read_message(data).answer is None


def test_wrong_shapes_with_an_id_are_answered_with_it() -> None:
    for data in (
        b'{"jsonrpc":"1.0","id":7,"method":"ping"}',
        b'{"id":7,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":7}',
        b'{"jsonrpc":"2.0","id":7,"method":5}',
        b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":[1]}',
    ):
        assert answer_of(data)["id"] == 7
    assert answer_of(b'[{"jsonrpc":"2.0","id":7,"method":"ping"}]')["id"] is None  # a batch: MCP has none


def test_an_oversized_message_is_answered_with_the_id_at_either_end() -> None:
    head = b'{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"x":"aaaa'
    first = oversized(head, b'aaa"}}', 10**9, 256, "d1")
    assert first.answer is not None and json.loads(first.answer)["id"] == 42
    assert [(refused.request_id, refused.message_sha256) for refused in first.refused] == [("42", "d1")]
    tail = b'aaaa"}},"jsonrpc":"2.0","id":"ts-1"}\n'
    last = oversized(b'{"method":"tools/call","params":{"x":"aa', tail, 10**9, 256, "d2")
    assert last.answer is not None and json.loads(last.answer)["id"] == "ts-1"
    assert [(refused.request_id, refused.message_len) for refused in last.refused] == [("ts-1", 10**9)]
    neither = oversized(b"aaaa", b"aaaa", 10**9, 256, "d3")
    assert neither.answer is not None and json.loads(neither.answer)["id"] is None and neither.refused == ()
    # The method as the last member: a tools/call too, with no id to be found.
    trailing = oversized(b'{"params":{"x":"aa', b'aa"},"method":"tools/call"}', 10**9, 256, "d4")
    assert [refused.request_id for refused in trailing.refused] == [None]


# -- the shared bound of audited fields ---------------------------------------------------------------------


def test_every_audited_field_is_bounded_names_lists_and_nesting_included() -> None:
    nested: object = "leaf"
    for _ in range(40):
        nested = {"a": nested}
    arguments = {
        "n" * 70_000: 1,
        "env": {"E" * 1_048_576: "v", "LANG": "C"},
        "hosts": ["127.0.0.2:1"] * 100_000,
        "deep": nested,
        "big": 10**400,
        "text": "x\ud800" * 2000,
    }
    record = bound_record({"tool": "ssh_check", "args": audit_arguments(arguments), "request_id": "r" * 1_048_576})
    encoded = orjson.dumps(record)  # a lone surrogate or a 400-digit integer would make orjson refuse
    assert len(encoded) < MAX_RECORD_BYTES
    args = record["args"]
    long_name = next(name for name in args if name.startswith("nnn"))
    assert "70000 characters, sha256 " + hashlib.sha256(b"n" * 70_000).hexdigest() in long_name
    assert len(args["hosts"]) == 65 and args["hosts"][-1]["omitted"] == 100_000 - 64
    assert args["big"] == str(10**400)
    assert record["request_id"]["len"] == 1_048_576 and len(record["request_id"]["head"]) == 256
    assert "\\ud800" in args["text"]["head"]
    depth, value = 0, args["deep"]
    while isinstance(value, dict) and "a" in value:
        depth, value = depth + 1, value["a"]
    assert depth < 20 and value["kept"] == "nested deeper than the record keeps"
    assert bound_record(record) == record  # a bounded record bounds to itself (the log bounds what it is given)


def test_a_record_over_64_kib_is_cut_to_fit_by_digesting_its_largest_fields(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    log.open()
    many = {f"name-{index}-" + "n" * 1000: "v" * 1000 for index in range(64)}  # each within bounds, 128 KiB all
    log.write({"v": 1, "ts": "t", "tool": "shell_exec", "args": many, "target": {"hosts": ["h"] * 64}})
    line = (tmp_path / "audit.jsonl").read_bytes().splitlines()[-1]
    record = orjson.loads(line)
    assert len(line) <= MAX_RECORD_BYTES and record["bounded"] == ["args"] and record["args"]["len"] > 64 * 1024
    assert verify_files([tmp_path / "audit.jsonl"]).ok


# -- numbers, host names, patterns --------------------------------------------------------------------------


def test_clamps_name_numbers_no_float_can_hold() -> None:
    value, note = clamp("max_output", 10**400, 256, 1048576)
    assert value == 1048576 and note == "max_output 1.000e+400 lowered to 1048576 (allowed 256 to 1048576)"
    assert clamp("timeout", 1e308, 0.1, 10)[1] == "timeout 1e+308 lowered to 10 (allowed 0.1 to 10)"


@pytest.mark.parametrize("host", ["a" * 64 + ".example", "a..b", ".example", "x." * 10 + "y" * 64])
def test_a_host_name_no_resolver_takes_is_an_invalid_argument(host: str) -> None:
    with pytest.raises(ArgumentError, match=r"hosts: host .* has (a label of \d+ characters|an empty label)"):
        parse_host_spec("hosts", host)
    assert parse_host_spec("hosts", "a" * 63 + ".example.").host == "a" * 63 + ".example."


def test_until_patterns_that_regex_would_unroll_are_refused_at_once() -> None:
    started = time.process_time()
    for pattern in (r"\d{1000000}", r"(?:\d{1000}){1000}", r"(a|b){100000}", [r"\d{20000}", r"\w{20000}"]):
        with pytest.raises(ArgumentError, match="repeats too much"):
            compile_until(pattern)
    assert time.process_time() - started < 1.0  # refused before compiling (each would take ~0.3 s and ~270 MB)
    assert len(compile_until([r"^\$ $", r"\d{1000}", r"[{]{5}", r"x{,5}"])) == 4


SPELLINGS = [
    b'"method":"tools/call"',
    b'"method" :\t"tools\\/call"',
    b'"\\u006dethod":"tools/\\u0063all"',
    b'"\\u006Dethod"\n:\n"\\u0074ools\\u002Fcall"',
    b'"method":' + b" " * 100_000 + b'"tools/call"',  # whitespace longer than a scanner's carry
]


@pytest.mark.parametrize("spelling", SPELLINGS, ids=range(len(SPELLINGS)))
def test_a_tools_call_member_is_found_in_any_json_spelling_in_chunks_of_any_size(spelling: bytes) -> None:
    """Review S1: the scan over a message too long to keep counts each `"method": "tools/call"` member once,
    wherever the chunks split it, in UTF-8 and UTF-16."""
    message = b'{"params":{"x":"' + b"a" * 3000 + b'"},' + spelling + b',"id":1} [{' + spelling + b"}]"
    assert wire_lenient.count_tool_calls(message.decode()) == 2
    for size in (1, 7, 100, 513, 4096, len(message)):
        for encoding in ("utf-8", "utf-16-le", "utf-16-be"):
            encoded = message.decode().encode(encoding)
            if size < 100 and len(encoded) > 50_000:
                continue  # a byte at a time through 200 KB: slow, and no other split than the smaller message's
            scanner = wire_lenient.CallScanner()
            for start in range(0, len(encoded), size):
                scanner.feed(encoded[start : start + size])
            assert scanner.finish() == 2, (size, encoding)
    assert wire_lenient.count_tool_calls('{"method":"tools/list","x":"tools/call","tools/call":"method"}') == 0


@pytest.mark.parametrize(
    ("data", "ids"),
    [
        (b"\xef\xbb\xbf" + call("1", "{}"), ["1"]),
        (b"\x00\xc2\xa0/*{}*/" + call("2", "{}") + b"trailing", ["2"]),
        (call("3", "{}").decode().encode("utf-16-le"), ["3"]),
        (call("4", "{}").decode().encode("utf-16"), ["4"]),
        (b"[[" + call("5", "{}") + b"],[" + call("6", "{}") + b"]]", ["5", "6"]),
        (call("7", "{}") + call("8", "{}"), ["7", None]),  # after the first value: seen, not read
        (call("9", "{}")[:-9] + b"\x00" + call("10", "{}")[-9:], ["9"]),  # the head shows its id
    ],
)
def test_a_refused_message_records_every_call_it_shows(data: bytes, ids: list[str | None]) -> None:
    reading = read_message(data)
    assert reading.answer is not None and reading.message is None
    assert [refused.request_id for refused in reading.refused] == ids
    assert all(refused.message_sha256 == hashlib.sha256(data).hexdigest() for refused in reading.refused)


def test_an_oversized_message_counts_the_calls_its_scanner_saw() -> None:
    reading = oversized(b'{"params":{"x":"aa', b'aa"},"\\u006dethod":"tools/call","id":5,"x":1}', 10**9, 256, "d", 3)
    assert [refused.request_id for refused in reading.refused] == ["5", None, None]
    assert reading.answer is not None and json.loads(reading.answer)["id"] == 5


def test_the_chunked_scan_counts_what_the_whole_message_holds() -> None:
    """A differential test: random messages of members in every spelling, quotes, escapes and whitespace runs of
    any length, cut into random chunks, counted as the scan of the whole text counts them."""
    rng = random.Random(30)
    pieces = [*SPELLINGS[:4], b'"method"', b'"tools/call"', b":", b'"', b"\\u00", b"x", b'"\\u006dethod"']
    for _ in range(300):
        parts = [rng.choice(pieces) if rng.random() < 0.8 else b" " * rng.choice([1, 600, 3000]) for _ in range(12)]
        message = b"{" + b"".join(parts) + b"}"
        expected = wire_lenient.count_tool_calls(message.decode())
        for encoding in ("utf-8", "utf-16-le"):
            encoded = message.decode().encode(encoding)
            scanner = wire_lenient.CallScanner()
            position = 0
            while position < len(encoded):
                size = rng.choice([1, 2, 3, 50, 511, 512, 513, 2048])
                scanner.feed(encoded[position : position + size])
                position += size
            assert scanner.finish() == expected, (message[:200], encoding)
