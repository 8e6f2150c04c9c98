"""The streamable HTTP transport (`RELAY_SHELL_TRANSPORT=http`): the SDK's app at /mcp with MCP session ids,
bearer tokens from a token file, Host and Origin allowlists (DNS-rebinding protection), and /metrics.

Safe by default: it binds 127.0.0.1, and it refuses to serve a non-loopback address without authentication.
Tokens are stored as SHA-256 hashes, one named client per line; the name becomes the audit record's
`client_id` (never a metric label). The token file must not be readable by group or others.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import re
import signal
import socket
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from relay_shell.config import ConfigError, Settings

if TYPE_CHECKING:
    from mcp.server.auth.provider import AccessToken
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.requests import Request
    from starlette.responses import Response

    from relay_shell.oauth import OAuthProvider
    from relay_shell.server import Assembly

_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
_DIGEST = re.compile(r"[0-9a-f]{64}")
SHUTDOWN_GRACE = 5.0  # seconds in-flight calls get after SIGTERM before they are cancelled (and their processes killed)


@dataclass(frozen=True)
class NamedToken:
    name: str
    sha256: str


def load_tokens(path: Path) -> list[NamedToken]:
    """`NAME SHA256-HEX` per line (`#` comments, blank lines ignored). Refused if group or others may read
    or write it: a token file anyone can read is a password anyone can use."""
    variable = "RELAY_SHELL_TOKEN_FILE"
    try:
        # Opened once, not through a symlink; everything is checked on the open file, then read from it.
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise ConfigError(f"{variable}={str(path)!r}: cannot open it ({exc.strerror}; symlinks are refused)") from None
    with os.fdopen(descriptor, encoding="utf-8", errors="replace") as handle:
        status = os.fstat(handle.fileno())
        mode = status.st_mode
        if not stat.S_ISREG(mode):
            raise ConfigError(f"{variable}={str(path)!r}: not a regular file")
        if mode & 0o077:
            raise ConfigError(
                f"{variable}={str(path)!r}: mode {stat.S_IMODE(mode):04o} lets group or others read or write it; "
                "allowed: 0600 or 0400 (chmod 600 it)"
            )
        if status.st_uid != os.geteuid():
            raise ConfigError(f"{variable}={str(path)!r}: owned by uid {status.st_uid}, not by the server's user")
        text = handle.read()
    tokens: list[NamedToken] = []
    names: set[str] = set()
    digests: set[str] = set()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or not _NAME.fullmatch(parts[0]) or not _DIGEST.fullmatch(parts[1].lower()):
            raise ConfigError(
                f"{variable}: line {number} is not `NAME SHA256-HEX` (a name of letters, digits, _.@-, then the "
                "64-hex-digit SHA-256 of the token; `relay-shell token NAME` prints one)"
            )
        if parts[0] in names:
            raise ConfigError(f"{variable}: line {number}: the name {parts[0]!r} is used twice")
        if parts[1].lower() in digests:  # one token, two names: the audit log could name the wrong client
            raise ConfigError(f"{variable}: line {number}: this token is already listed under another name")
        names.add(parts[0])
        digests.add(parts[1].lower())
        tokens.append(NamedToken(parts[0], parts[1].lower()))
    if not tokens:
        raise ConfigError(f"{variable}={str(path)!r}: holds no token")
    return tokens


class TokenFileVerifier:
    """The SDK's TokenVerifier over the token file: constant-time comparison of SHA-256 digests."""

    def __init__(self, tokens: list[NamedToken]) -> None:
        self.tokens = tokens

    def name_of(self, token: str) -> str | None:
        digest = hashlib.sha256(token.encode("utf-8", errors="surrogateescape")).hexdigest()
        found = None
        for candidate in self.tokens:  # every entry is compared: the time does not tell which one matched
            if hmac.compare_digest(candidate.sha256, digest):
                found = candidate.name
        return found

    async def verify_token(self, token: str) -> AccessToken | None:
        from mcp.server.auth.provider import AccessToken

        name = self.name_of(token)
        if name is None:
            return None
        # The raw token is not kept: the record of who called is the name.
        return AccessToken(token=hashlib.sha256(token.encode()).hexdigest(), client_id=name, scopes=[])


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class HttpAuth:
    """How /mcp requests authenticate: nothing (loopback only), the token file, or OAuth 2.1 plus the token
    file (whose tokens also approve OAuth clients)."""

    tokens: TokenFileVerifier | None = None
    oauth: OAuthProvider | None = None


def check_http_settings(settings: Settings) -> HttpAuth:
    """Refuse unsafe combinations before anything listens; load the tokens and the OAuth state."""
    verifier = TokenFileVerifier(load_tokens(settings.token_file)) if settings.token_file else None
    if verifier is None and not is_loopback(settings.http_host):
        raise ConfigError(
            f"RELAY_SHELL_HTTP_HOST={settings.http_host!r}: serving a non-loopback address needs authentication; "
            "set RELAY_SHELL_TOKEN_FILE, or bind 127.0.0.1"
        )
    if settings.oauth_state_dir is None:
        return HttpAuth(tokens=verifier)
    if verifier is None:
        raise ConfigError(
            "RELAY_SHELL_OAUTH_STATE_DIR needs RELAY_SHELL_TOKEN_FILE: an operator approves each OAuth client "
            "with a token from that file"
        )
    if settings.oauth_issuer:
        issuer_problem = _issuer_problem(settings.oauth_issuer)
        if issuer_problem:
            raise ConfigError(f"RELAY_SHELL_OAUTH_ISSUER={settings.oauth_issuer!r}: {issuer_problem}")
    elif not is_loopback(settings.http_host):
        raise ConfigError(
            "RELAY_SHELL_OAUTH_ISSUER: required when serving a non-loopback address: the https:// URL clients use "
            "(OAuth needs https except on loopback; put a TLS proxy in front, see deploy/)"
        )
    from relay_shell.oauth import OAuthProvider

    oauth = OAuthProvider(
        settings.oauth_state_dir,
        verifier,
        access_ttl=settings.oauth_access_ttl,
        refresh_ttl=settings.oauth_refresh_ttl,
        lock_first_client=settings.oauth_lock_first_client,
    )
    return HttpAuth(tokens=verifier, oauth=oauth)


def _issuer_problem(issuer: str) -> str | None:
    parts = urlsplit(issuer)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        return "not a URL; allowed: https://HOST[:PORT][/PATH]"
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        return "OAuth needs https:// except on loopback"
    if parts.query or parts.fragment:
        return "must not have a query or fragment"
    return None


def issuer_of(settings: Settings, port: int) -> str:
    if settings.oauth_issuer:
        return settings.oauth_issuer.rstrip("/")
    shown = f"[{settings.http_host}]" if ":" in settings.http_host else settings.http_host
    return f"http://{shown}:{port}"


def _allowlists(settings: Settings, port: int) -> tuple[list[str], list[str]]:
    extra_hosts = [item.strip() for item in settings.http_allowed_hosts.split(",") if item.strip()]
    extra_origins = [item.strip() for item in settings.http_allowed_origins.split(",") if item.strip()]
    if settings.oauth_issuer:  # the public URL a TLS proxy forwards: browsers and clients come through it
        public = urlsplit(settings.oauth_issuer)
        extra_hosts.append(public.netloc)
        extra_origins.append(f"{public.scheme}://{public.netloc}")
    host = settings.http_host
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

    listener = socket.socket(socket.AF_INET6 if ":" in settings.http_host else socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((settings.http_host.strip("[]"), settings.http_port))
    listener.listen(2048)  # connections queue from the moment the banner says where to connect
    port = int(listener.getsockname()[1])
    hosts, origins = _allowlists(settings, port)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )
    add_metrics_route(assembly, settings, auth.tokens, security)
    if auth.oauth is not None:
        from relay_shell.server import oauth_settings

        # The issuer names the listener's real port (HTTP_PORT=0 picks one at bind time).
        auth.oauth.set_issuer(issuer_of(settings, port))
        assembly.mcp.settings.auth = oauth_settings(auth.oauth)
        add_approval_route(assembly, auth.oauth, security)
    app = assembly.mcp.streamable_http_app(transport_security=security, host=settings.http_host)
    config = uvicorn.Config(
        app, log_level="warning", timeout_graceful_shutdown=int(SHUTDOWN_GRACE), lifespan="on", access_log=False
    )
    server = uvicorn.Server(config)
    shown = f"[{settings.http_host}]" if ":" in settings.http_host else settings.http_host
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
            await server.serve(sockets=[listener])
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
            if name is None or (settings.metrics_token_name and name != settings.metrics_token_name):
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

    from relay_shell.oauth import approval_endpoint

    host_check = TransportSecurityMiddleware(security)

    @assembly.mcp.custom_route("/oauth/approve", methods=["GET", "POST"])
    async def approve(request: Request) -> Response:
        refused = await host_check.validate_request(request)
        if refused is not None:
            return refused
        return await approval_endpoint(oauth, request)
