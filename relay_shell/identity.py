"""Who is calling: the client label of the audit record (`identify`), and the owner of sessions and forwards
(`owner_of`): the MCP client connection that opened them.

A connection is identified by the SDK's per-stream JSON-RPC dispatcher (one per stdio stream, in-memory
client or stateful HTTP session, i.e. per MCP session id), reached through the request context. That holds
in both protocol eras on streams: a 2026-07-28 client gets a fresh `Connection` object per request, but
every request on one stream shares the dispatcher. Another client cannot name, list or drive a session it
does not own, and once the owning stream closes its sessions are closed (`connected` turns false).

Over HTTP in the 2026-07-28 era there is no MCP session: every request stands alone. There the owner is the
authenticated principal (the token's name; for OAuth, the client with the operator who approved it), and
without authentication every such client is one anonymous owner — give each client a token when several
share a server. These owners never "disconnect"; their sessions end by session_kill, the idle timeout or
shutdown.

Jobs and kept outputs (adr/0028) belong to the principal over authenticated HTTP in both eras (`job_owner_of`):
a client whose stream broke reconnects with its token, under a new MCP session, and finds them again. Over stdio
and unauthenticated HTTP their owner is the connection's, as for sessions.
"""

from __future__ import annotations

import secrets
import weakref
from dataclasses import dataclass
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.context import ServerRequestContext

_owner_by_channel: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_name_by_channel: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_channel_by_owner: dict[str, weakref.ref[Any]] = {}
_OWNER_PREFIX = "client-"
_PRINCIPAL_PREFIX = "principal:"


def owner_of(request_context: ServerRequestContext[Any, Any] | None) -> str:
    if request_context is None:
        return "server"
    over_http = request_context.request is not None  # the transport attached the HTTP request
    if over_http and getattr(request_context.session._connection, "session_id", None) is None:
        # stateless HTTP (no MCP session id): the token says who it is
        return _principal() or _PRINCIPAL_PREFIX + "anonymous"
    channel = _channel_of(request_context)
    owner = _owner_by_channel.get(channel)
    if owner is None:
        for gone in [name for name in _channel_by_owner if not connected(name)]:
            del _channel_by_owner[gone]
        owner = _OWNER_PREFIX + secrets.token_hex(8)
        _owner_by_channel[channel] = owner
        _channel_by_owner[owner] = weakref.ref(channel)
    return owner


def job_owner_of(request_context: ServerRequestContext[Any, Any] | None) -> str:
    """The owner of the jobs and kept outputs a call opens: its authenticated principal over HTTP, so that they
    outlive the stream; otherwise the connection, as owner_of."""
    if request_context is not None and request_context.request is not None:
        principal = _principal()
        if principal is not None:
            return principal
    return owner_of(request_context)


def _principal() -> str | None:
    access = get_access_token()
    if access is None:
        return None
    # An OAuth grant is one operator's approval of one client: two operators' grants for the same registered
    # client are two owners.
    subject = f"/{access.subject}" if access.subject else ""
    return _PRINCIPAL_PREFIX + access.client_id + subject


def connected(owner: str) -> bool:
    """False once the owner's stream has closed or is gone. Owners not made here ("server") stay connected."""
    if not owner.startswith(_OWNER_PREFIX):
        return True
    reference = _channel_by_owner.get(owner)
    channel = reference() if reference is not None else None
    return channel is not None and not getattr(channel, "_closed", False)


def _channel_of(request_context: ServerRequestContext[Any, Any]) -> Any:
    # SDK internals (mcp 2.x has no public accessor): ServerSession -> request DispatchContext (wrapped in
    # the modern era) -> its JSONRPCDispatcher, present on every stream transport (stdio, in-memory streams,
    # HTTP). Without one (the SDK's direct in-process dispatch), the Connection object, which is per
    # connection in the handshake era.
    session = request_context.session
    dispatch_context = getattr(session, "_request_outbound", None)
    dispatch_context = getattr(dispatch_context, "_inner", dispatch_context)
    dispatcher = getattr(dispatch_context, "_dispatcher", None)
    return dispatcher if dispatcher is not None else session._connection


def declared_client(request_context: ServerRequestContext[Any, Any]) -> str | None:
    """The name the client gave in its initialize (or its 2026-07-28 envelope); None before it did."""
    params = request_context.session.client_params
    return None if params is None or params.client_info is None else params.client_info.name[:64]


def initialized(request_context: ServerRequestContext[Any, Any]) -> bool:
    """Whether the connection may take requests: initialize done (or a 2026-07-28 connection, born ready).
    The SDK's own gate reads the same fact (mcp 2.x keeps it on the connection, without a public accessor)."""
    connection = request_context.session._connection
    return bool(getattr(connection, "initialize_accepted", True))


@dataclass(frozen=True)
class Identity:
    request_id: str | None
    client_id: str


def authenticated_name() -> str | None:
    """The client's name when this HTTP request was authenticated: the token's name from the token file (for
    OAuth, approver/client), never what the client says it is."""
    access = get_access_token()
    return None if access is None else (access.claims or {}).get("relay_shell_name") or access.client_id


def identify(request_context: ServerRequestContext[Any, Any] | None, transport: str) -> Identity:
    if request_context is None:
        return Identity(request_id=None, client_id=transport)
    client_name = authenticated_name()  # over HTTP with a token: its name, not what the client says it is
    params = request_context.session.client_params
    if client_name is None and params is not None and params.client_info is not None:
        # The client's self-declared name, kept as a label in the record (never in metrics). The first name
        # a connection declares is its name for good: a 2026-07-28 client declares it on every request.
        channel = _channel_of(request_context)
        client_name = _name_by_channel.setdefault(channel, params.client_info.name[:64])
    request_id = request_context.request_id
    client_name = "unknown" if client_name is None else client_name
    return Identity(request_id=None if request_id is None else str(request_id), client_id=f"{transport}:{client_name}")
