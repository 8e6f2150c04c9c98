"""Reading one JSON-RPC message from hostile bytes, for every transport (adr/0016).

A message is read within fixed bounds: no value inside more than `MAX_NESTING` containers (the message
object counts) and integers of at most `MAX_INTEGER_DIGITS` digits (the SDK's own reader, pydantic-core,
stops there too). The fast path is the SDK's reader; only a message it refuses takes the slow path, which
reads it with Python's `json` to find out what it is and what JSON-RPC says to answer:

- not JSON at all: -32700; JSON but not one object (a batch, a number): -32600; both with the id found where
  clients write it (see `oversized`), else id null;
- an id that is not a string or an integer (MCP's rule): -32600, answered with that id when JSON-RPC lets a
  response carry it (a number with a fraction or an exponent, `1.5`, `1e3`, written back as it came), else
  with id null (a boolean, an object, an array, null);
- nested too deep, a number too long, a lone surrogate outside a tool call's arguments, a wrong shape: -32600
  with the request's id (an integer id too long to read is echoed digit for digit);
- a lone UTF-16 surrogate inside a tools/call's `name` or `arguments` is written as the six characters
  `\\udXXX` and the places are listed in `params._meta["relay-shell/lone-surrogates"]`: the call reaches the
  tool gate, which refuses it as an InvalidArgument naming the argument, with an audit record like any call;
- notifications and responses never get an answer.

A message too long for the transport is not read at all: `oversized` answers it with the id found in its
first or last bytes, when a client put it there (the Python SDK writes the id first, the TypeScript SDK last).

Every `tools/call` answered with an error here (its `method` read, or seen at the head or the tail of a
message that could not be read) comes with a `RefusedCall`: what could be read of it and the digest of the
message, which the transport has the runner record, so that no tools/call reaches the server unrecorded.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, replace
from typing import Any

import mcp_types as types
from pydantic import ValidationError

from relay_shell import wire_lenient
from relay_shell.wire_lenient import BOM

MAX_NESTING = 200  # containers around any value, the message object included; pydantic-core stops there too
MAX_INTEGER_DIGITS = 4300  # digits of one integer (Python's int/str limit; pydantic-core stops there too)
LONE_SURROGATES = "relay-shell/lone-surrogates"  # params._meta key: where a tool call held lone surrogates
CLIENT_INFO = "io.modelcontextprotocol/clientInfo"  # params._meta key: a 2026-07-28 request's client
ID_SCAN_BYTES = 65536  # how far into the head and the tail of an unreadable message its id is looked for

PARSE_ERROR = -32700
INVALID_REQUEST = -32600

_SURROGATE = re.compile("[\ud800-\udfff]")
_ID_VALUE = rb'-?(?:0|[1-9][0-9]{0,4299})|"(?:[^"\\\x00-\x1f]|\\.){0,1024}"'
_JSON_ID = rb"(" + _ID_VALUE + rb")"
# The short top-level members around the id and the method at the head of a message (the Python SDK writes jsonrpc
# and id first, the TypeScript SDK method first) or at its tail, before the closing brace: any key with a scalar.
_SCALAR = rb"(?:" + _ID_VALUE + rb"|-?[0-9][0-9.eE+-]{0,64}|true|false|null)"
_MEMBER = rb'"(?:[^"\\]|\\.){1,64}"\s*:\s*' + _SCALAR
_METHOD = rb'"method"\s*:\s*"((?:[^"\\]|\\.){1,64})"'
_LEADING_ID = rb"\s*\{\s*(?:" + _MEMBER + rb'\s*,\s*){0,8}"id"\s*:\s*' + _JSON_ID
_TRAILING_ID = rb',\s*"id"\s*:\s*' + _JSON_ID + rb"(?:\s*,\s*" + _MEMBER + rb"){0,8}\s*\}\s*$"
_LEADING_METHOD = rb"\s*\{\s*(?:" + _MEMBER + rb"\s*,\s*){0,8}" + _METHOD
_TRAILING_METHOD = rb",\s*" + _METHOD + rb"(?:\s*,\s*" + _MEMBER + rb"){0,8}\s*\}\s*$"


@dataclass(frozen=True)
class RefusedCall:
    """A tools/call answered with a JSON-RPC error before any tool saw it (its id, its encoding, its shape, its
    size): what could be read of it, for its audit record. The digest is over the message's bytes as received
    (over stdio without the newline that ends the line)."""

    request_id: str | None  # as records keep ids: a string id as is, any other id as its JSON text as sent
    tool: Any = None  # params.name as read (None when the message could not be read)
    arguments: Any = None  # params.arguments as read (None when not read, or nested deeper than MAX_NESTING)
    client_name: str | None = None  # the client the message itself names (a 2026-07-28 envelope)
    reason: str = ""  # the error the client was answered with
    message_len: int = 0
    message_sha256: str = ""
    http_status: int | None = None  # over HTTP, the status the refusal was answered with


@dataclass(frozen=True)
class Reading:
    """What one message is: a message to serve (`message`, read from `data`), an error to send back
    (`answer`, one JSON object), or neither (a notification or response nobody answers). `refused` holds the
    tools/calls the answer refuses (a batch holds several), one record each."""

    message: types.JSONRPCMessage | None = None
    data: bytes | None = None
    answer: bytes | None = None
    refused: tuple[RefusedCall, ...] = ()


class _Unreadable(Exception):
    def __init__(
        self, code: int, message: str, id_json: bytes = b"null", calls: tuple[RefusedCall, ...] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.id_json = id_json
        self.calls = calls  # None: not known from the parsed message; what its bytes show is looked for


class _LongNumber(str):
    """A number literal longer than MAX_INTEGER_DIGITS digits, kept as its text."""


class _Float(float):
    """A number with a fraction or an exponent, and the text it was written as (an id is answered with it)."""

    text = ""


def read_message(data: bytes) -> Reading:
    try:
        message = types.jsonrpc_message_adapter.validate_json(data, by_name=False)
    except ValidationError:
        return _read_slowly(data)
    if isinstance(message, types.JSONRPCNotification) and "id" in json.loads(data):
        # An id the SDK's request model would not take (a float, a boolean, an object, null) turns a request
        # into a notification, which is never answered: it is an invalid request instead.
        return _read_slowly(data)
    return Reading(message=message, data=data)


def declared_client(message: types.JSONRPCMessage) -> str | None:
    """The client name a request declares: initialize's clientInfo, or a 2026-07-28 request's envelope."""
    if not isinstance(message, types.JSONRPCRequest) or message.params is None:
        return None
    if message.method == "initialize":
        info = message.params.get("clientInfo")
    else:
        meta = message.params.get("_meta")
        info = meta.get(CLIENT_INFO) if isinstance(meta, dict) else None
    name = info.get("name") if isinstance(info, dict) else None
    return name[:64] if isinstance(name, str) else None


def error_body(code: int, id_json: bytes, message: str) -> bytes:
    """One JSON-RPC error object (no newline); `id_json` is the id as JSON text (`null`, `7`, `"a"`)."""
    error = json.dumps({"code": code, "message": message}, ensure_ascii=True).encode()
    return b'{"jsonrpc":"2.0","id":' + id_json + b',"error":' + error + b"}"


def oversized(head: bytes, tail: bytes, size: int, limit: int, sha256: str, calls_seen: int = 0) -> Reading:
    """The answer to a message longer than the transport reads: -32600 with its id when the first or last
    bytes show it, else with id null (JSON-RPC: an id that cannot be detected is answered as null); a
    RefusedCall for each tools/call it holds: `calls_seen` by a CallScanner over the whole message, or at
    least the one its first or last bytes show. `sha256` is the digest of the whole message."""
    message = (
        f"Invalid Request: the message is {size} bytes, longer than this transport reads ({limit} bytes); nothing ran"
    )
    id_json = _visible_id(head, tail)
    calls = _unread_calls(calls_seen, head, tail)
    refused = tuple(replace(call, reason=message, message_len=size, message_sha256=sha256) for call in calls)
    return Reading(answer=error_body(INVALID_REQUEST, id_json, message), refused=refused)


def _unread_calls(count: int, head: bytes, tail: bytes) -> tuple[RefusedCall, ...]:
    """`count` tools/calls seen in a message that could not be read, at least the one its head or tail shows; the
    first with the id its head or tail shows (the message's own id: that of the call it is)."""
    id_json = _visible_id(head, tail)
    shown = _visible_call(head, tail, id_json)
    count = max(count, 1 if shown is not None else 0)
    if count and shown is None:
        shown = RefusedCall(request_id=_id_text(id_json))
    return tuple(shown if index == 0 and shown else RefusedCall(request_id=None) for index in range(count))


def _visible_id(head: bytes, tail: bytes) -> bytes:
    # re's cache compiles the patterns on the first unreadable message, not at every server start.
    head = head[:ID_SCAN_BYTES].removeprefix(BOM)
    found = re.match(_LEADING_ID, head) or re.search(_TRAILING_ID, tail[-ID_SCAN_BYTES:])
    return found.group(1) if found else b"null"


def _visible_call(head: bytes, tail: bytes, id_json: bytes) -> RefusedCall | None:
    """A RefusedCall for a message that could not be read when its first or last bytes show it is a tools/call
    (the id as found there, or None)."""
    head = head[:ID_SCAN_BYTES].removeprefix(BOM)
    found = re.match(_LEADING_METHOD, head) or re.search(_TRAILING_METHOD, tail[-ID_SCAN_BYTES:])
    if found is None or _json_text(found.group(1)) != "tools/call":
        return None
    return RefusedCall(request_id=_id_text(id_json))


def _id_text(id_json: bytes) -> str | None:
    """An id found at a message's head or tail as records keep it: a string of at most 1,024 characters or an
    integer's digits, both read back safely; None for null."""
    if id_json == b"null":
        return None
    return _json_text(id_json) if id_json.startswith(b'"') else id_json.decode()


def _json_text(string: bytes) -> str | None:
    """A JSON string's text (its escapes resolved: `tools\\/call`), without or with its quotes; None if it is not
    one."""
    quoted = string if string.startswith(b'"') else b'"' + string + b'"'
    try:
        text = json.loads(quoted)
    except ValueError:
        return None
    return text if isinstance(text, str) else None


def _read_slowly(data: bytes) -> Reading:
    try:
        parsed = _parse(data)
        return _classify(parsed)
    except _Unreadable as refused:
        calls, id_json = refused.calls, refused.id_json
        if calls is None:  # the message could not be read as JSON-RPC: what do its bytes show?
            calls, shown_id = _shown_in(data)
            id_json = shown_id if id_json == b"null" and shown_id is not None else id_json
        reason = str(refused)
        digest = hashlib.sha256(data).hexdigest() if calls else ""
        calls = tuple(replace(call, reason=reason, message_len=len(data), message_sha256=digest) for call in calls)
        return Reading(answer=error_body(refused.code, id_json, reason), refused=calls)


def _shown_in(data: bytes) -> tuple[tuple[RefusedCall, ...], bytes | None]:
    """The tools/calls a message that is not JSON-RPC shows (wire_lenient.py): those of the JSON value it holds,
    read leniently, each with what could be read of it, and one whose tool is unknown for each further
    `"method": "tools/call"` member outside that value; and the id to answer with, if that value shows one."""
    values = wire_lenient.lenient_values(data, _LENIENT_DECODER)
    if not values:
        scanned = max(wire_lenient.count_tool_calls(text) for text in wire_lenient.texts_of(data))
        return _unread_calls(scanned, data, data), None
    # The first value that holds calls (`{}` in a comment before a message is no message), else the first.
    value, before, after = next((found for found in values if _calls_in(found[0])), values[0])
    calls = _calls_in(value)
    outside = wire_lenient.count_tool_calls(before) + wire_lenient.count_tool_calls(after)
    shown_id = _answer_id(value["id"]) if isinstance(value, dict) and "id" in value else None
    if calls:  # the calls outside the value that was read: their ids are not known
        return (*calls, *(RefusedCall(request_id=None) for _ in range(outside))), shown_id
    # A value inside a message broken around it (its params, say): the message's own id, if its ends show it.
    return _unread_calls(outside, data, data), shown_id


def _calls_in(value: Any) -> tuple[RefusedCall, ...]:
    """A RefusedCall for each tools/call in a message or a batch, nested batches included (one record per call),
    in the order they were written."""
    calls = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, dict) and item.get("method") == "tools/call":
            calls.append(seen_call(item, _survey(item)[0]))
    return tuple(calls)


def _parse(data: bytes) -> Any:
    text = data.decode("utf-8", errors="replace")
    try:
        return json.loads(text, parse_int=_integer, parse_float=_float, parse_constant=_no_constant)
    except RecursionError:
        message = f"Invalid Request: the message is nested deeper than {MAX_NESTING} levels; nothing ran"
        raise _Unreadable(INVALID_REQUEST, message, _visible_id(data, data)) from None
    except ValueError as exc:
        message = f"Parse error: the message is not JSON ({exc})"
        raise _Unreadable(PARSE_ERROR, message, _visible_id(data, data)) from None


def _integer(text: str) -> int | _LongNumber:
    return _LongNumber(text) if len(text) - text.startswith("-") > MAX_INTEGER_DIGITS else int(text)


def _float(text: str) -> _Float | _LongNumber:
    whole = re.split("[.eE]", text.lstrip("-"), maxsplit=1)[0]
    if len(whole) > MAX_INTEGER_DIGITS:
        return _LongNumber(text)
    number = _Float(text)
    number.text = text
    return number


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


# For what a refused message shows only: NaN and Infinity are read (the SDK's reader takes them too).
_LENIENT_DECODER = json.JSONDecoder(parse_int=_integer, parse_float=_float)


def _classify(parsed: Any) -> Reading:
    if isinstance(parsed, list):
        batch = "Invalid Request: batches are not part of MCP; send one message per line"
        raise _Unreadable(INVALID_REQUEST, batch, calls=_calls_in(parsed))
    if not isinstance(parsed, dict):
        raise _Unreadable(INVALID_REQUEST, "Invalid Request: a message is one JSON object", calls=())
    if "method" not in parsed and ("result" in parsed or "error" in parsed):
        return Reading()  # a response the SDK could not read: JSON-RPC never answers a response
    has_id = "id" in parsed
    request_id = parsed.get("id")
    id_json = _answer_id(request_id) if has_id else b"null"
    depth, long_number, surrogates = _survey(parsed)
    calls = (seen_call(parsed, depth),) if has_id and _is_tool_call(parsed) else ()
    if has_id and not _mcp_id(request_id):
        raise _Unreadable(
            INVALID_REQUEST,
            f"Invalid Request: id {_shown(request_id)} is not a string or an integer (MCP: a request id is a "
            "string or an integer, never null); nothing ran",
            id_json,
            calls,
        )
    outside = [path for path in surrogates if not _in_tool_call_arguments(parsed, path)]
    problem = None
    if depth > MAX_NESTING:
        problem = f"nested deeper than {MAX_NESTING} levels"
    elif long_number is not None:
        problem = (
            f"a number of {len(long_number.lstrip('-'))} digits at {_path_text(long_number.path)}; this server "
            f"reads numbers of at most {MAX_INTEGER_DIGITS} digits"
        )
    elif outside:
        problem = f"{_path_text(outside[0])} holds a lone UTF-16 surrogate, which is not Unicode text"
    if problem is not None:
        if not has_id:
            return Reading()  # a notification is never answered, not even to say it was dropped
        raise _Unreadable(INVALID_REQUEST, f"Invalid Request: {problem}; nothing ran", id_json, calls)
    if surrogates:
        parsed = _mark_surrogates(parsed, surrogates)
    data = _dump(parsed).encode("utf-8")
    try:
        message = types.jsonrpc_message_adapter.validate_json(data, by_name=False)
    except ValidationError:
        message = None
    if message is not None and not (has_id and isinstance(message, types.JSONRPCNotification)):
        return Reading(message=message, data=data)
    if not has_id:
        return Reading()  # a malformed notification: JSON-RPC does not answer it
    raise _Unreadable(
        INVALID_REQUEST,
        'Invalid Request: not a JSON-RPC 2.0 request (it needs "jsonrpc": "2.0", a string "method" and '
        '"params" as an object when present)',
        id_json,
        calls,
    )


def _is_tool_call(message: dict[str, Any]) -> bool:
    return message.get("method") == "tools/call" and "id" in message


def seen_call(message: dict[str, Any], depth: int) -> RefusedCall:
    """What a tools/call refused here keeps for its record: its id (None when it has none), and its tool name,
    arguments and declared client unless the message is nested too deep to keep them (its digest still
    identifies it)."""
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    request_id = _recorded_id(message["id"]) if "id" in message else None
    if depth > MAX_NESTING:
        return RefusedCall(request_id=request_id)
    meta = params.get("_meta")
    info = meta.get(CLIENT_INFO) if isinstance(meta, dict) else None
    name = info.get("name") if isinstance(info, dict) else None
    return RefusedCall(
        request_id=request_id,
        tool=_escape_surrogates(params.get("name")),
        arguments=_escape_surrogates(params.get("arguments")),
        client_name=_escape_surrogates(name)[:64] if isinstance(name, str) else None,
    )


def _mcp_id(request_id: Any) -> bool:
    """An id MCP takes: a string or an integer (one too long to read is refused for its length)."""
    if isinstance(request_id, _LongNumber):
        return re.fullmatch(r"-?[0-9]+", request_id) is not None
    return isinstance(request_id, str | int) and not isinstance(request_id, bool)


def _answer_id(request_id: Any) -> bytes:
    """The id to answer with, as JSON text: the id as sent when a JSON-RPC response may carry it (a string, or a
    number of any form, written back as it came), else null (a boolean, an object, an array)."""
    if isinstance(request_id, _LongNumber):
        return str(request_id).encode()
    if isinstance(request_id, _Float):
        return request_id.text.encode()
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        return b"null"
    return json.dumps(request_id, ensure_ascii=True).encode()


def _recorded_id(request_id: Any) -> str | None:
    """The id as audit records keep ids: a string as is (the record bounds it), any other id as its JSON text
    as sent (`1.5`, `1e3`, `true`, `{"a":1}`)."""
    if isinstance(request_id, _LongNumber):
        return str(request_id)
    if isinstance(request_id, _Float):
        return request_id.text
    if isinstance(request_id, str):
        return _escape_surrogates(request_id)
    try:
        return _dump(request_id)
    except RecursionError:  # an object id nested too deep to write: its kind, the message digest says the rest
        return type(request_id).__name__


def _shown(value: Any) -> str:
    if isinstance(value, _LongNumber):
        text = str(value)
    elif isinstance(value, _Float):
        text = value.text
    else:
        text = json.dumps(value, ensure_ascii=True) if not isinstance(value, dict | list) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


class _Located(str):
    path: tuple[Any, ...] = ()


def _survey(parsed: Any) -> tuple[int, _Located | None, list[tuple[Any, ...]]]:
    """Depth (the most containers around any value, the message object included), the first number too long
    to read, and the paths of strings (values or keys) holding a lone surrogate. Iterative: depth is what it
    measures."""
    deepest = 0
    long_number: _Located | None = None
    surrogates: list[tuple[Any, ...]] = []
    stack: list[tuple[Any, int, tuple[Any, ...]]] = [(parsed, 0, ())]
    while stack:
        value, depth, path = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(value, dict):
            for key, item in value.items():
                if _SURROGATE.search(key):
                    surrogates.append((*path, key))
                stack.append((item, depth + 1, (*path, key)))
        elif isinstance(value, list):
            stack.extend((item, depth + 1, (*path, index)) for index, item in enumerate(value))
        elif isinstance(value, _LongNumber):
            if long_number is None:
                long_number = _Located(value)
                long_number.path = path
        elif isinstance(value, str) and _SURROGATE.search(value):
            surrogates.append(path)
    return deepest, long_number, surrogates


def _in_tool_call_arguments(message: dict[str, Any], path: tuple[Any, ...]) -> bool:
    """A lone surrogate the tool gate refuses with an audit record: in a tools/call's name or arguments."""
    return (
        message.get("method") == "tools/call"
        and len(path) >= 2
        and path[0] == "params"
        and path[1]
        in (
            "name",
            "arguments",
        )
    )


def _mark_surrogates(message: dict[str, Any], paths: list[tuple[Any, ...]]) -> dict[str, Any]:
    params = message["params"]
    if not isinstance(params, dict):
        return message
    places = sorted(
        {
            _escape_surrogates(str(path[2]) if path[1] == "arguments" and len(path) > 2 else str(path[1]))
            for path in paths
        }
    )
    escaped = {key: _escape_surrogates(value) for key, value in params.items() if key in ("name", "arguments")}
    meta = params.get("_meta")
    meta = meta if isinstance(meta, dict) else {}
    return {**message, "params": {**params, **escaped, "_meta": {**meta, LONE_SURROGATES: places}}}


def _escape_surrogates(value: Any) -> Any:
    """The value with lone surrogates written as `\\udXXX`, and plain `str` and `float` in place of this reader's
    own number types (the SDK and the audit log's encoder take only those)."""
    if isinstance(value, str):
        return str(_SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", value))
    if isinstance(value, float):
        return float(value)
    if isinstance(value, dict):
        return {_escape_surrogates(key): _escape_surrogates(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_escape_surrogates(item) for item in value]
    return value


def _path_text(path: tuple[Any, ...]) -> str:
    shown = ".".join(str(part) for part in path[:4]) or "the message"
    return _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", shown)[:120]


def _dump(value: Any) -> str:
    """JSON text of a message read by `_parse` (depth already bounded): infinities as numbers that read back
    as infinities (`1e999`), as the SDK's own reader gives them to the server."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("1e999" if value > 0 else "-1e999")
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(key)}:{_dump(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dump(item) for item in value) + "]"
    return json.dumps(value, ensure_ascii=False)
