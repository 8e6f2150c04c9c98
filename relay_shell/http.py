"""The streamable HTTP transport (`RELAY_SHELL_TRANSPORT=http`): the SDK's app at /mcp with MCP session ids,
bearer tokens from a token file, Host and Origin allowlists (DNS-rebinding protection), and /metrics.

Safe by default: it binds 127.0.0.1, and it refuses to serve a non-loopback address without authentication.
Tokens are stored as SHA-256 hashes, one named client per line; the name becomes the audit record's
`client_id` (never a metric label). The token file must not be readable by group or others.
"""

from __future__ import annotations

import hashlib
import json
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import replace
from http import HTTPStatus
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import mcp_types as types

from relay_shell.auth.setup import HttpAuth, is_loopback, issuer_of
from relay_shell.auth.tokens import TokenFileVerifier
from relay_shell.identity import authenticated_name
from relay_shell.settings.model import Settings
from relay_shell.wire import (
    ID_SCAN_BYTES,
    Reading,
    RefusedCall,
    declared_client,
    oversized,
    read_message,
)
from relay_shell.wire_lenient import CallScanner
from relay_shell.wire_routed import ROUTING, CallRouted, sdk_refusal

if TYPE_CHECKING:
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from relay_shell.auth.oauth import OAuthProvider
    from relay_shell.server import Assembly

KEEP_ALIVE = 75  # seconds an idle HTTP connection stays open
SHUTDOWN_GRACE = 5.0  # seconds in-flight calls get after SIGTERM before they are cancelled (and their processes killed)
MAX_SESSION_NAMES = 4096  # MCP sessions whose declared client name the guard remembers (the oldest are forgotten)


def _allowlists(settings: Settings, port: int) -> tuple[list[str], list[str]]:
    extra_hosts = list(settings.http.http_allowed_hosts)
    extra_origins = list(settings.http.http_allowed_origins)
    if settings.auth.oauth_issuer:  # the public URL a TLS proxy forwards: browsers and clients come through it
        public = urlsplit(settings.auth.oauth_issuer)
        extra_hosts.append(public.netloc)
        extra_origins.append(f"{public.scheme}://{public.netloc}")
    host = settings.http.http_host
    if is_loopback(host):
        hosts = [f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"]
        origins = [f"http://127.0.0.1:{port}", f"http://localhost:{port}", f"http://[::1]:{port}"]
    else:
        shown = f"[{host}]" if ":" in host else host
        hosts = [f"{shown}:{port}"]
        origins = [f"http://{shown}:{port}", f"https://{shown}:{port}"]
    return hosts + extra_hosts, origins + extra_origins


def serve_http(assembly: Assembly, settings: Settings, auth: HttpAuth) -> None:
    """Listen, serve until SIGTERM/SIGINT, then give in-flight calls a grace period and close everything."""
    import anyio
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    listener = socket.socket(socket.AF_INET6 if ":" in settings.http.http_host else socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((settings.http.http_host.strip("[]"), settings.http.http_port))
    listener.listen(2048)  # connections queue from the moment the banner says where to connect
    port = int(listener.getsockname()[1])
    hosts, origins = _allowlists(settings, port)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )
    add_metrics_route(assembly, settings, auth.tokens, security)
    if auth.oauth is not None:
        from relay_shell.auth.setup import oauth_settings

        # The issuer names the listener's real port (HTTP_PORT=0 picks one at bind time).
        auth.oauth.set_issuer(issuer_of(settings, port))
        assembly.mcp.settings.auth = oauth_settings(auth.oauth)
        add_approval_route(assembly, auth.oauth, security)
    app = assembly.mcp.streamable_http_app(transport_security=security, host=settings.http.http_host)
    guard_messages(app, assembly.runner.refused_by_transport, security)
    # An idle connection is kept longer than clients keep theirs (httpx and the TypeScript SDK: 5 s, uvicorn's own
    # default): with equal timeouts a client reuses the connection the moment the server closes it and the request
    # dies with a read error (seen with 4 clients x 250 calls on a loaded machine). 75 s is nginx's default.
    config = uvicorn.Config(
        app,
        log_level="warning",
        timeout_graceful_shutdown=int(SHUTDOWN_GRACE),
        timeout_keep_alive=KEEP_ALIVE,
        lifespan="on",
        access_log=False,
    )
    server = uvicorn.Server(config)
    shown = f"[{settings.http.http_host}]" if ":" in settings.http.http_host else settings.http.http_host
    if auth.oauth is not None:
        how = f"OAuth 2.1 (issuer {auth.oauth.issuer}) or token-file bearer tokens required"
    elif auth.tokens is not None:
        how = "bearer tokens required"
    else:
        how = "no authentication (loopback only)"
    print(f"relay-shell: speaking MCP at http://{shown}:{port}/mcp ({how}); metrics at /metrics", file=sys.stderr)
    sys.stderr.flush()

    async def run() -> None:
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(assembly.launcher.maintain_forever)
                await server.serve(sockets=[listener])
                group.cancel_scope.cancel()
        finally:
            await assembly.shutdown()

    # uvicorn turns SIGTERM/SIGINT into a graceful shutdown (in-flight calls get SHUTDOWN_GRACE seconds, then
    # are cancelled and their processes killed), and afterwards re-raises the signal to the handler that was
    # there before: this one, which only asks for the stop already under way, so relay-shell closes sessions
    # and connections and exits 0, as a service manager expects.
    # Until uvicorn installs its own handlers, a signal asks it to stop all the same.
    for signal_number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signal_number, lambda number, frame: setattr(server, "should_exit", True))
    anyio.run(run)


def add_metrics_route(
    assembly: Assembly, settings: Settings, verifier: TokenFileVerifier | None, security: TransportSecuritySettings
) -> None:
    """GET /metrics on the same server; with authentication on, only with a valid bearer token (or the one
    named by METRICS_TOKEN_NAME), so the metrics endpoint is never an open door. Host and Origin are checked
    as for /mcp (a DNS-rebinding page must not read it either)."""
    from mcp.server.transport_security import TransportSecurityMiddleware
    from starlette.responses import PlainTextResponse

    host_check = TransportSecurityMiddleware(security)

    @assembly.mcp.custom_route("/metrics", methods=["GET"])
    async def metrics(request: Request) -> Response:
        refused = await host_check.validate_request(request)
        if refused is not None:
            return refused
        if verifier is not None:
            header = request.headers.get("authorization", "")
            scheme, _, token = header.partition(" ")
            name = verifier.name_of(token.strip()) if scheme.lower() == "bearer" else None
            if name is None or (settings.metrics.metrics_token_name and name != settings.metrics.metrics_token_name):
                return PlainTextResponse(
                    "a valid bearer token is required\n", status_code=401, headers={"WWW-Authenticate": "Bearer"}
                )
        return PlainTextResponse(
            assembly.metrics.exposition().decode(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )


def add_approval_route(assembly: Assembly, oauth: OAuthProvider, security: TransportSecuritySettings) -> None:
    """/oauth/approve: where /authorize sends the browser for an operator to approve the client. Host and
    Origin are checked as for /mcp, so another site's page cannot submit the form."""
    from mcp.server.transport_security import TransportSecurityMiddleware

    from relay_shell.auth.oauth_approval import approval_endpoint

    host_check = TransportSecurityMiddleware(security)

    @assembly.mcp.custom_route("/oauth/approve", methods=["GET", "POST"])
    async def approve(request: Request) -> Response:
        refused = await host_check.validate_request(request)
        if refused is not None:
            return refused
        return await approval_endpoint(oauth, request)


def guard_messages(
    app: Starlette,
    on_refused: Callable[[str, RefusedCall], None],
    security: TransportSecuritySettings,
    path: str = "/mcp",
) -> None:
    """Put `MessageGuard` in front of the MCP endpoint, behind authentication (an unauthenticated request
    gets its 401 from the SDK before its body is read)."""
    for route in app.routes:
        if getattr(route, "path", None) == path:
            route.app = MessageGuard(route.app, on_refused, security)  # type: ignore[attr-defined]


class MessageGuard:
    """Every POSTed message is read by `wire.read_message` before the SDK sees it (adr/0016): a body the SDK
    could not read, or would read as something it is not, is answered here with the JSON-RPC error its id
    deserves; a tool call holding lone surrogates reaches the tool gate rewritten; a body over the SDK's limit
    is answered with its id (413) after reading it in bounded memory.

    A tools/call answered here is recorded through `on_refused`, with the client named as the runner names it:
    the token's name when authenticated, else the name the MCP session declared in its initialize (remembered
    here), else the name the message itself declares. A request the SDK would refuse for its Host, Origin or
    Content-Type (a page in a browser, through DNS rebinding) gets that refusal instead, and no record.

    A tools/call passed on that the SDK then refuses before the call router sees it (no or an unknown MCP
    session, its Accept or MCP-Protocol-Version header, the session limit, the 2026-07-28 envelope in a
    handshake session) is recorded here too, before its answer leaves: the router marks the call it reaches
    (`wire_routed.CallRouted`), and an error answered to a call it never reached is the SDK's refusal."""

    def __init__(
        self, app: ASGIApp, on_refused: Callable[[str, RefusedCall], None], security: TransportSecuritySettings
    ) -> None:
        from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, TransportSecurityMiddleware

        self.app = app
        self.max_body = DEFAULT_MAX_REQUEST_BODY_SIZE
        self.on_refused = on_refused
        self.host_check = TransportSecurityMiddleware(security)
        self.session_names: dict[bytes, str] = {}  # MCP session id -> the client name its initialize declared

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = scope.get("user")
        if scope["type"] != "http" or scope["method"] != "POST" or (user is not None and not user.is_authenticated):
            await self.app(scope, receive, send)
            return
        body = bytearray()
        head = b""
        tail = b""
        size = 0
        digest = hashlib.sha256()  # of an oversized body, as it streams past
        scanner = CallScanner()  # the tools/calls an oversized body holds, as it streams past
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            more = message.get("more_body", False)
            size += len(chunk)
            if size <= self.max_body:
                body += chunk
                continue
            # Over the limit: keep reading (the client is still sending) but keep only the ends and the digest.
            head = head or bytes(body[:ID_SCAN_BYTES]) or chunk[:ID_SCAN_BYTES]
            tail = (bytes(body[-ID_SCAN_BYTES:]) + chunk)[-ID_SCAN_BYTES:]
            digest.update(body)
            digest.update(chunk)
            scanner.feed(bytes(body))
            scanner.feed(chunk)
            body.clear()
        if size > self.max_body:
            reading = oversized(head, tail, size, self.max_body, digest.hexdigest(), scanner.finish())
            await self.refuse(scope, receive, send, 413, reading)
            return
        received = bytes(body)
        reading = read_message(received)
        if reading.answer is not None:
            await self.refuse(scope, receive, send, 400, reading)
            return
        data = reading.data if reading.data is not None else received  # unanswered: the SDK says 202/400
        if len(data) != len(body):
            headers = [(name, value) for name, value in scope["headers"] if name != b"content-length"]
            scope = {**scope, "headers": [*headers, (b"content-length", str(len(data)).encode())]}
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": data, "more_body": False}
            return await receive()

        request = reading.message
        if isinstance(request, types.JSONRPCRequest) and request.method == "tools/call":
            routed = CallRouted()
            token = ROUTING.set(routed)
            try:
                await self.app(scope, replay, self.record_refusal(scope, send, routed, request, received))
            finally:
                ROUTING.reset(token)
            return
        if isinstance(request, types.JSONRPCRequest) and request.method == "initialize":
            name = declared_client(request)
            opens_session = all(header != b"mcp-session-id" for header, _ in scope["headers"])
            if name is not None and opens_session:  # a later initialize in the session renames nothing
                send = self.remember_session(send, name)
        await self.app(scope, replay, send)

    async def refuse(self, scope: Scope, receive: Receive, send: Send, status: int, reading: Reading) -> None:
        """Answer a message the SDK must not see; a refused tools/call is recorded first."""
        from starlette.requests import Request

        refused = await self.host_check.validate_request(Request(scope), is_post=True)
        if refused is not None:
            await refused(scope, receive, send)
            return
        for call in reading.refused:  # one record per tools/call (a batch holds several)
            self.on_refused(self.client_of(scope, call), replace(call, http_status=status))
        assert reading.answer is not None
        await _answer(send, status, reading.answer)

    def client_of(self, scope: Scope, call: RefusedCall) -> str:
        session = dict(scope["headers"]).get(b"mcp-session-id", b"")
        return authenticated_name() or self.session_names.get(session) or call.client_name or "unknown"

    def record_refusal(
        self, scope: Scope, send: Send, routed: CallRouted, message: types.JSONRPCRequest, body: bytes
    ) -> Send:
        """`send` for a tools/call passed on to the SDK: until the call router has the call, an error answer is
        the SDK's refusal, recorded before it is sent (an HTTP error is held until its body, which says why)."""
        held: list[Message] = []
        status = 0

        def record(reason: str) -> None:
            routed.reached = True  # one record: nothing later is recorded again
            call = sdk_refusal(message, body, reason, status)
            self.on_refused(self.client_of(scope, call), call)

        async def send_or_record(event: Message) -> None:
            nonlocal status
            if routed.reached:
                await send(event)
                return
            if event["type"] == "http.response.start":
                status = event["status"]
                if status >= 400:
                    held.append(event)
                    return
            elif event["type"] == "http.response.body":
                if status >= 400:
                    held.append(event)
                    if event.get("more_body", False):
                        return
                    record(_refusal_reason(b"".join(part.get("body", b"") for part in held[1:]), status))
                    for part in held:
                        await send(part)
                    return
                found = _error_for(event.get("body", b""), message.id)
                if found is not None:  # a JSON-RPC error in a 200 answer (JSON or an SSE event)
                    record(f"{found} (HTTP {status}); nothing ran")
            await send(event)

        return send_or_record

    def remember_session(self, send: Send, name: str) -> Send:
        """`send` for an initialize: the MCP session id the SDK answers with is remembered with the name."""

        async def send_and_remember(message: Message) -> None:
            if message["type"] == "http.response.start":
                session = dict(message.get("headers", [])).get(b"mcp-session-id")
                if session is not None:
                    if len(self.session_names) >= MAX_SESSION_NAMES:
                        del self.session_names[next(iter(self.session_names))]
                    self.session_names.setdefault(session, name)
            await send(message)

        return send_and_remember


async def _answer(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _refusal_reason(body: bytes, status: int) -> str:
    """Why the SDK refused a request, as its error answer says (a JSON-RPC error's message, or the status)."""
    text = None
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        text = answer["error"].get("message")
    if not isinstance(text, str) or not text:
        text = body.decode("utf-8", errors="replace").strip()[:200] or _phrase(status)
    return f"{text} (HTTP {status}); nothing ran"


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "refused"


def _error_for(body: bytes, request_id: object) -> str | None:
    """The message of a JSON-RPC error answering `request_id` in a response body (JSON, or SSE `data:` lines)."""
    if b'"error"' not in body:
        return None
    texts = [body]
    if not body.lstrip().startswith(b"{"):
        lines = body.replace(b"\r\n", b"\n").split(b"\n")
        texts = [line[5:] for line in lines if line.startswith(b"data:")]
    for text in texts:
        try:
            answer = json.loads(text)
        except ValueError:
            continue
        if isinstance(answer, dict) and answer.get("id") == request_id and isinstance(answer.get("error"), dict):
            return str(answer["error"].get("message") or "error")
    return None
