"""How the HTTP message guard reads the SDK's refusal of a tools/call it passed on (review finding S3): the reason
from an error answer's body, JSON or an SSE event, matched to the call's id. The end-to-end cases are in
tests/e2e/http/test_refused_by_the_sdk.py; a JSON-RPC error in a 200 answer has no case there the SDK produces
today, so its reading is checked here."""

from __future__ import annotations

from relay_shell.http import _error_for, _refusal_reason


def test_an_http_error_is_said_by_its_json_rpc_message_or_its_status() -> None:
    body = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Bad Request: Missing session ID"}}'
    assert _refusal_reason(body, 400) == "Bad Request: Missing session ID (HTTP 400); nothing ran"
    assert _refusal_reason(b"", 406) == "Not Acceptable (HTTP 406); nothing ran"
    assert _refusal_reason(b"Request body too large", 413) == "Request body too large (HTTP 413); nothing ran"
    assert _refusal_reason(b"", 599) == "refused (HTTP 599); nothing ran"


def test_a_json_rpc_error_in_a_200_answer_is_found_for_the_calls_id_only() -> None:
    error = b'{"jsonrpc":"2.0","id":7,"error":{"code":-32600,"message":"not on this connection"}}'
    assert _error_for(error, 7) == "not on this connection"
    assert _error_for(error, 8) is None
    assert _error_for(error, "7") is None  # a string id is another id
    sse = b"event: message\r\ndata: " + error + b"\r\n\r\n"
    assert _error_for(sse, 7) == "not on this connection"
    result = b'event: message\r\ndata: {"jsonrpc":"2.0","id":7,"result":{"content":[],"error":1}}\r\n\r\n'
    assert _error_for(result, 7) is None
    assert _error_for(b": ping\r\n\r\n", 7) is None
