"""Which tools/calls a transport passed on to the SDK reached the call router (review finding S3).

From the call router on, the runner writes a call's records. A tools/call the SDK answers with an error before
(over HTTP its session or its headers, over stdio the 2026-07-28 envelope in a handshake connection) has none, so
the transport records it, as it records the calls it refuses itself (wire.py, adr/0016). To tell the two apart the
transport sends each tools/call to the SDK with a `CallRouted` in the context variable ROUTING: the SDK runs the
handler in the context the message was sent from (its context streams carry it, as they carry the token's
identity), so the router marks it (`call_routed`) the moment the call reaches it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import replace
from typing import Any

import mcp_types as types
from mcp.shared.message import SessionMessage

from relay_shell.wire import RefusedCall, seen_call


class CallRouted:
    """A tools/call passed on to the SDK; `reached` once the call router has it."""

    __slots__ = ("reached",)

    def __init__(self) -> None:
        self.reached = False


ROUTING: ContextVar[CallRouted | None] = ContextVar("relay_shell_call_routing", default=None)


def call_routed() -> None:
    """The call router has the call of this context (a no-op outside a transport's tools/call)."""
    routed = ROUTING.get()
    if routed is not None:
        routed.reached = True


def sdk_refusal(message: types.JSONRPCRequest, data: bytes, reason: str, http_status: int | None) -> RefusedCall:
    """The RefusedCall of a tools/call the SDK answered with an error before the call router saw it."""
    call = seen_call({"id": message.id, "params": message.params}, 0)
    digest = hashlib.sha256(data).hexdigest()
    return replace(call, reason=reason, message_len=len(data), message_sha256=digest, http_status=http_status)


class CallsInFlight:
    """A connection's tools/calls passed on to the SDK that the call router has not seen yet (stdio: one connection
    per process), and the client name the connection declared first. `answered` records one the SDK answers with
    an error. A call the router saw is the runner's to record: it is dropped when answered, or when the table
    grows (a cancelled call is never answered)."""

    def __init__(self, on_refused: Callable[[str, RefusedCall], None] | None) -> None:
        self.on_refused = on_refused
        self.client_name: str | None = None
        self.waiting: dict[Any, list[tuple[CallRouted, types.JSONRPCRequest, bytes]]] = {}
        self.limit = 64

    def record(self, refused: RefusedCall) -> None:
        """A refused call's one record, under the name the connection declared (else the message's own)."""
        if self.on_refused is not None:
            self.on_refused(self.client_name or refused.client_name or "unknown", refused)

    async def pass_on(self, stream: Any, message: types.JSONRPCMessage, line: bytes) -> None:
        """Send a message to the SDK; a tools/call with its CallRouted in the context it is sent from."""
        if not isinstance(message, types.JSONRPCRequest) or message.method != "tools/call":
            await stream.send(SessionMessage(message))
            return
        token = ROUTING.set(self.add(message, line))
        try:
            await stream.send(SessionMessage(message))
        finally:
            ROUTING.reset(token)

    def add(self, request: types.JSONRPCRequest, line: bytes) -> CallRouted:
        if len(self.waiting) >= self.limit:
            for key, entries in list(self.waiting.items()):
                entries[:] = [entry for entry in entries if not entry[0].reached]
                if not entries:
                    del self.waiting[key]
            self.limit = max(64, 2 * len(self.waiting))
        routed = CallRouted()
        self.waiting.setdefault(request.id, []).append((routed, request, line))
        return routed

    def answered(self, message: types.JSONRPCMessage) -> None:
        """An answer is going out: if it is the SDK's refusal of a call the router never saw, record the call."""
        if not self.waiting or not isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            return
        waiting = self.waiting.get(message.id)
        if not waiting:
            return
        # Two calls may share an id: an error goes with one the router never saw, a result with one it did.
        refused = isinstance(message, types.JSONRPCError)
        entry = next((item for item in waiting if item[0].reached != refused), None)
        if entry is None:
            return
        waiting.remove(entry)
        if not waiting:
            del self.waiting[message.id]
        if isinstance(message, types.JSONRPCError):
            _, request, line = entry
            data = line[:-1] if line.endswith(b"\n") else line
            self.record(sdk_refusal(request, data, f"{message.error.message}; nothing ran", None))
