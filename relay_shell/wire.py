"""Reading one JSON-RPC message from hostile bytes, for every transport (adr/0016).

A message is read within fixed bounds: no value inside more than `MAX_NESTING` containers (the message
object counts) and integers of at most `MAX_INTEGER_DIGITS` digits (the SDK's own reader, pydantic-core,
stops there too). The fast path is the SDK's reader; only a message it refuses takes the slow path, which
reads it with Python's `json` to find out what it is and what JSON-RPC says to answer:

- not JSON at all: -32700 with id null; JSON but not one object (a batch, a number): -32600 with id null;
- an id that is not a string or an integer (a float, a boolean, an object, null, which MCP forbids): -32600
  with id null, since JSON-RPC answers an id it cannot take with null;
- nested too deep, a number too long, a lone surrogate outside a tool call's arguments, a wrong shape: -32600
  with the request's id (an integer id too long to read is echoed digit for digit);
- a lone UTF-16 surrogate inside a tools/call's `name` or `arguments` is written as the six characters
  `\\udXXX` and the places are listed in `params._meta["relay-shell/lone-surrogates"]`: the call reaches the
  tool gate, which refuses it as an InvalidArgument naming the argument, with an audit record like any call;
- notifications and responses never get an answer.

A message too long for the transport is not read at all: `oversized` answers it with the id found in its
first or last bytes, when a client put it there (the Python SDK writes the id first, the TypeScript SDK last).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from pydantic import ValidationError

MAX_NESTING = 200  # containers around any value, the message object included; pydantic-core stops there too
MAX_INTEGER_DIGITS = 4300  # digits of one integer (Python's int/str limit; pydantic-core stops there too)
LONE_SURROGATES = "relay-shell/lone-surrogates"  # params._meta key: where a tool call held lone surrogates
ID_SCAN_BYTES = 65536  # how far into the head and the tail of an unreadable message its id is looked for

PARSE_ERROR = -32700
INVALID_REQUEST = -32600

_SURROGATE = re.compile("[\ud800-\udfff]")
_JSON_ID = rb'(-?(?:0|[1-9][0-9]{0,4299})|"(?:[^"\\\x00-\x1f]|\\.){0,1024}")'
_LEADING_ID = rb'\s*\{\s*(?:"(?:jsonrpc|method)"\s*:\s*"[^"\\]{0,64}"\s*,\s*){0,2}"id"\s*:\s*' + _JSON_ID
_TRAILING_ID = rb',\s*"id"\s*:\s*' + _JSON_ID + rb"\s*\}\s*$"


@dataclass(frozen=True)
class Reading:
    """What one message is: a message to serve (`message`, read from `data`), an error to send back
    (`answer`, one JSON object), or neither (a notification or response nobody answers)."""

    message: types.JSONRPCMessage | None = None
    data: bytes | None = None
    answer: bytes | None = None


class _Unreadable(Exception):
    def __init__(self, code: int, message: str, id_json: bytes = b"null") -> None:
        super().__init__(message)
        self.code = code
        self.id_json = id_json


class _LongNumber(str):
    """A number literal longer than MAX_INTEGER_DIGITS digits, kept as its text."""


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


def error_body(code: int, id_json: bytes, message: str) -> bytes:
    """One JSON-RPC error object (no newline); `id_json` is the id as JSON text (`null`, `7`, `"a"`)."""
    error = json.dumps({"code": code, "message": message}, ensure_ascii=True).encode()
    return b'{"jsonrpc":"2.0","id":' + id_json + b',"error":' + error + b"}"


def oversized(head: bytes, tail: bytes, size: int, limit: int) -> bytes:
    """The answer to a message longer than the transport reads: -32600 with its id when the first or last
    bytes show it, else with id null (JSON-RPC: an id that cannot be detected is answered as null)."""
    message = (
        f"Invalid Request: the message is {size} bytes, longer than this transport reads ({limit} bytes); nothing ran"
    )
    return error_body(INVALID_REQUEST, _visible_id(head, tail), message)


def _visible_id(head: bytes, tail: bytes) -> bytes:
    # re's cache compiles the two patterns on the first unreadable message, not at every server start.
    found = re.match(_LEADING_ID, head[:ID_SCAN_BYTES]) or re.search(_TRAILING_ID, tail[-ID_SCAN_BYTES:])
    return found.group(1) if found else b"null"


def _read_slowly(data: bytes) -> Reading:
    try:
        parsed = _parse(data)
        return _classify(parsed)
    except _Unreadable as refused:
        return Reading(answer=error_body(refused.code, refused.id_json, str(refused)))


def _parse(data: bytes) -> Any:
    text = data.decode("utf-8", errors="replace")
    try:
        return json.loads(text, parse_int=_integer, parse_float=_float, parse_constant=_no_constant)
    except RecursionError:
        raise _Unreadable(
            INVALID_REQUEST,
            f"Invalid Request: the message is nested deeper than {MAX_NESTING} levels; nothing ran",
            _visible_id(data, data),
        ) from None
    except ValueError as exc:
        raise _Unreadable(PARSE_ERROR, f"Parse error: the message is not JSON ({exc})") from None


def _integer(text: str) -> int | _LongNumber:
    return _LongNumber(text) if len(text) - text.startswith("-") > MAX_INTEGER_DIGITS else int(text)


def _float(text: str) -> float | _LongNumber:
    whole = re.split("[.eE]", text.lstrip("-"), maxsplit=1)[0]
    return _LongNumber(text) if len(whole) > MAX_INTEGER_DIGITS else float(text)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _classify(parsed: Any) -> Reading:
    if isinstance(parsed, list):
        raise _Unreadable(INVALID_REQUEST, "Invalid Request: batches are not part of MCP; send one message per line")
    if not isinstance(parsed, dict):
        raise _Unreadable(INVALID_REQUEST, "Invalid Request: a message is one JSON object")
    if "method" not in parsed and ("result" in parsed or "error" in parsed):
        return Reading()  # a response the SDK could not read: JSON-RPC never answers a response
    has_id = "id" in parsed
    request_id = parsed.get("id")
    id_json = _id_json(request_id) if has_id else b"null"
    if has_id and id_json == b"null":
        raise _Unreadable(
            INVALID_REQUEST,
            f"Invalid Request: id {_shown(request_id)} is not a string or an integer (MCP: a request id is a "
            "string or an integer, never null)",
        )
    depth, long_number, surrogates = _survey(parsed)
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
        raise _Unreadable(INVALID_REQUEST, f"Invalid Request: {problem}; nothing ran", id_json)
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
    )


def _id_json(request_id: Any) -> bytes:
    """The id as JSON text for the answer, or `null` when it is not an id a request may carry."""
    if isinstance(request_id, _LongNumber):
        return str(request_id).encode() if re.fullmatch(r"-?[0-9]+", request_id) else b"null"
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
        return b"null"
    return json.dumps(request_id, ensure_ascii=True).encode()


def _shown(value: Any) -> str:
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
    if isinstance(value, str):
        return _SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", value)
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
