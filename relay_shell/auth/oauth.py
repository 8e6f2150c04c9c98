"""The OAuth 2.1 authorization server for hosted MCP clients (`RELAY_SHELL_OAUTH_STATE_DIR`), through the
SDK's authorization-server provider interface.

A client registers itself (dynamic client registration, optionally only the first one), sends its user's
browser to /authorize with PKCE, and an operator approves it on relay-shell's own page by entering a token
from the token file: the approver's token name becomes the grant's subject and, with the client's name, the
`client_id` of every audit record the client causes. The SDK checks PKCE, the exact redirect URI and the
code's expiry; this module adds what the SDK leaves to the provider:

- every code and token is random, kept only as its SHA-256, and checked for expiry at every use;
- access tokens are short-lived; refresh tokens rotate and are single use. A used refresh token or code
  presented again revokes the whole grant (it was stolen or replayed);
- access, refresh and code are separate kinds with their own prefix: a refresh token is never an access token;
- state lives in one JSON file, 0600 in a 0700 directory, replaced atomically (temp file, fsync, rename).

Client secrets minted at registration are the one credential kept as issued: the SDK's client authentication
compares the stored secret with the presented one. A secret alone grants nothing (see ADR 0008).
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import os
import re
import secrets
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    RefreshToken,
    RegistrationError,
    TokenError,
    construct_redirect_uri,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from relay_shell.errors import ConfigError

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from relay_shell.auth.tokens import TokenFileVerifier

ACCESS_PREFIX = "rsat_"
REFRESH_PREFIX = "rsrt_"
CODE_PREFIX = "rsac_"
STATE_FILE = "oauth.json"
CODE_TTL = 300  # seconds from approval to the code's exchange
APPROVAL_TTL = 600  # seconds an operator has to approve a pending authorization
MAX_CLIENTS = 64
MAX_PENDING = 64  # authorizations waiting for an operator
MAX_GRANTS_PER_CLIENT = 16  # live approvals per client; the oldest is revoked beyond it
MAX_APPROVAL_ATTEMPTS = 5  # wrong operator tokens before a pending authorization is dropped
MAX_FORM_BYTES = 8192
MAX_CLIENT_BYTES = 16384  # a registration's metadata, as stored
MAX_REDIRECT_URIS = 8
MAX_PENDING_PER_CLIENT = 4  # one client's waiting authorizations; its oldest goes first
MAX_USED_REFRESH = 16  # used refresh tokens remembered per grant, to recognise a replay
UNUSED_CLIENT_TTL = 86400  # seconds a registration that no operator approved is kept
_CLIENT_NAME = re.compile(r"[^A-Za-z0-9 ._-]")

# Called with an event label (`oauth:register`, `oauth:approve`, …), who caused it, and the record's fields.
EventFn = Callable[[str, str, dict[str, Any]], None]


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", errors="surrogateescape")).hexdigest()


def same_resource(first: str, second: str) -> bool:
    return first.rstrip("/") == second.rstrip("/")


@dataclass
class Pending:
    client_id: str
    params: AuthorizationParams
    expires_at: float
    attempts: int = 0


class OAuthProvider:
    """The SDK's OAuthAuthorizationServerProvider, and the bearer-token check for /mcp: OAuth access tokens
    and, as before, the tokens of the token file."""

    def __init__(
        self,
        state_dir: Path,
        token_file: TokenFileVerifier,
        *,
        access_ttl: int,
        refresh_ttl: int,
        lock_first_client: bool,
        on_event: EventFn | None = None,
    ) -> None:
        self.state_dir = state_dir
        self.token_file = token_file
        self.access_ttl = access_ttl
        self.refresh_ttl = refresh_ttl
        self.lock_first_client = lock_first_client
        self.on_event = on_event
        self.issuer = ""  # set once the listener's address is known (`set_issuer`)
        self.resource = ""
        self.clients: dict[str, dict[str, Any]] = {}
        # grant id -> {client_id, subject, scopes, resource, created}: one operator approval, kept across rotation
        self.grants: dict[str, dict[str, Any]] = {}
        # sha256 -> {kind: access | refresh | used_refresh, grant, expires_at}
        self.tokens: dict[str, dict[str, Any]] = {}
        self.codes: dict[str, AuthorizationCode] = {}  # sha256 of a code -> the code (in memory: minutes long)
        self.used_codes: dict[str, tuple[str, float]] = {}  # sha256 of an exchanged code -> (grant, expiry)
        self.pending: dict[str, Pending] = {}
        self._load()

    def set_issuer(self, issuer: str) -> None:
        self.issuer = issuer.rstrip("/")
        self.resource = self.issuer + "/mcp"

    # -- state file ------------------------------------------------------------------------------------------

    def _load(self) -> None:
        variable = "RELAY_SHELL_OAUTH_STATE_DIR"
        directory = self.state_dir
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            status = os.lstat(directory)
        except OSError as exc:
            raise ConfigError(f"{variable}={str(directory)!r}: cannot create it ({exc.strerror})") from None
        if not stat.S_ISDIR(status.st_mode):
            raise ConfigError(f"{variable}={str(directory)!r}: not a directory (symlinks are refused)")
        if status.st_uid != os.geteuid():
            raise ConfigError(f"{variable}={str(directory)!r}: owned by uid {status.st_uid}, not the server's user")
        if status.st_mode & 0o077:
            raise ConfigError(
                f"{variable}={str(directory)!r}: mode {stat.S_IMODE(status.st_mode):04o} lets group or others in; "
                "allowed: 0700 (chmod 700 it)"
            )
        path = directory / STATE_FILE
        try:
            descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise ConfigError(f"{variable}: cannot open {str(path)!r} ({exc.strerror}; symlinks are refused)") from None
        with os.fdopen(descriptor, "rb") as handle:
            file_status = os.fstat(handle.fileno())
            if file_status.st_mode & 0o077 or file_status.st_uid != os.geteuid():
                raise ConfigError(f"{variable}: {str(path)!r} must be owned by the server's user and mode 0600")
            raw = handle.read()
        try:
            state = orjson.loads(raw)
            self.clients = dict(state["clients"])
            self.grants = dict(state["grants"])
            self.tokens = dict(state["tokens"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            raise ConfigError(
                f"{variable}: {str(path)!r} is not a relay-shell OAuth state file; move it away to start afresh "
                "(every client then registers again)"
            ) from None

    def _save(self) -> None:
        """Drop what expired, then replace the state file atomically: a crash leaves the old file or the new."""
        now = time.time()
        self.tokens = {key: entry for key, entry in self.tokens.items() if entry["expires_at"] > now}
        live = {entry["grant"] for entry in self.tokens.values()}
        self.grants = {key: grant for key, grant in self.grants.items() if key in live}
        if not self.lock_first_client:  # a registration no operator approved within a day is dropped
            approved = {grant["client_id"] for grant in self.grants.values()}
            self.clients = {
                key: client
                for key, client in self.clients.items()
                if key in approved or client.get("client_id_issued_at", now) > now - UNUSED_CLIENT_TTL
            }
        data = orjson.dumps({"v": 1, "clients": self.clients, "grants": self.grants, "tokens": self.tokens})
        temporary = self.state_dir / f".{STATE_FILE}.{secrets.token_hex(6)}"
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, self.state_dir / STATE_FILE)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        directory = os.open(self.state_dir, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def revoke_orphaned_grants(self) -> None:
        """At startup, once events are audited: end the grants of operators no longer in the token file."""
        for grant_id in [key for key, grant in self.grants.items() if not self._operator_known(grant)]:
            self._revoke_grant(grant_id, "its operator is no longer in the token file")

    def _event(self, label: str, who: str, fields: dict[str, Any]) -> None:
        if self.on_event is not None:
            self.on_event(label, who, fields)

    # -- clients ---------------------------------------------------------------------------------------------

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        stored = self.clients.get(client_id)
        return None if stored is None else OAuthClientInformationFull.model_validate(stored)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        if self.lock_first_client and self.clients:
            raise RegistrationError(
                "invalid_client_metadata",
                "registration is closed: this server accepts only the client registered first "
                "(RELAY_SHELL_OAUTH_LOCK_FIRST_CLIENT)",
            )
        if len(self.clients) >= MAX_CLIENTS:
            raise RegistrationError("invalid_client_metadata", f"registration is full ({MAX_CLIENTS} clients)")
        uris = [str(uri) for uri in client_info.redirect_uris or []]
        if len(uris) > MAX_REDIRECT_URIS:
            raise RegistrationError("invalid_redirect_uri", f"{len(uris)} redirect URIs; allowed: {MAX_REDIRECT_URIS}")
        for uri in uris:
            problem = redirect_uri_problem(uri)
            if problem is not None:
                raise RegistrationError("invalid_redirect_uri", f"{uri[:200]!r}: {problem}")
        stored = client_info.model_dump(mode="json", exclude_none=True)
        if len(orjson.dumps(stored)) > MAX_CLIENT_BYTES:
            raise RegistrationError("invalid_client_metadata", f"client metadata over {MAX_CLIENT_BYTES} bytes")
        assert client_info.client_id is not None  # the SDK mints it before calling the provider
        self.clients[client_info.client_id] = stored
        self._save()
        self._event(
            "oauth:register",
            f"oauth:{client_label(client_info)}",
            {"oauth_client": client_info.client_id, "redirect_uris": [uri[:200] for uri in uris]},
        )

    # -- authorization: the operator approves on /oauth/approve ----------------------------------------------

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        if params.resource is not None and not same_resource(params.resource, self.resource):
            raise AuthorizeError("invalid_target", f"this server is the resource {self.resource}")
        now = time.time()
        self.pending = {key: item for key, item in self.pending.items() if item.expires_at > now}
        assert client.client_id is not None
        # Registration needs no credentials, so waiting authorizations are bounded per client and in all;
        # the oldest make room (insertion order), so a fresh request from a real user always gets its page.
        mine = [key for key, item in self.pending.items() if item.client_id == client.client_id]
        for key in mine[: max(0, len(mine) - MAX_PENDING_PER_CLIENT + 1)]:
            del self.pending[key]
        while len(self.pending) >= MAX_PENDING:
            del self.pending[next(iter(self.pending))]
        request_id = secrets.token_urlsafe(24)
        self.pending[request_id] = Pending(client.client_id, params, now + APPROVAL_TTL)
        return f"{self.issuer}/oauth/approve?request={request_id}"

    def approve(self, request_id: str, operator_token: str, approved: bool) -> tuple[str, str | None]:
        """The operator's answer: (where to send the browser, None), or (what is wrong, the page to show)."""
        pending = self.pending.get(request_id)
        if pending is None or pending.expires_at <= time.time():
            self.pending.pop(request_id, None)
            return "This authorization request is unknown or has expired. Start again from the client.", "expired"
        client = self.clients.get(pending.client_id, {})
        params = pending.params
        if not approved:
            del self.pending[request_id]
            self._event("oauth:deny", f"oauth:{client_label_of(client)}", {"oauth_client": pending.client_id})
            redirect = construct_redirect_uri(str(params.redirect_uri), error="access_denied", state=params.state)
            return redirect, None
        operator = self.token_file.name_of(operator_token)
        if operator is None:
            pending.attempts += 1
            self._event(
                "oauth:approve_refused",
                f"oauth:{client_label_of(client)}",
                {
                    "oauth_client": pending.client_id,
                    "reason": "not a valid operator token",
                    "attempt": pending.attempts,
                },
            )
            if pending.attempts >= MAX_APPROVAL_ATTEMPTS:
                del self.pending[request_id]
                return "Too many wrong tokens: this authorization request was dropped.", "expired"
            return "That is not a valid operator token.", "retry"
        del self.pending[request_id]
        code = CODE_PREFIX + secrets.token_urlsafe(32)
        self.codes[digest(code)] = AuthorizationCode(
            code=digest(code),
            scopes=params.scopes or [],
            expires_at=time.time() + CODE_TTL,
            client_id=pending.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject=operator,
        )
        self._event(
            "oauth:approve",
            f"http:{operator}",
            {"oauth_client": pending.client_id, "client_name": client_label_of(client), "scopes": params.scopes},
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state), None

    # -- codes and tokens ------------------------------------------------------------------------------------

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        key = digest(authorization_code)
        used = self.used_codes.get(key)
        if used is not None:
            # A code is single use: presented again, whoever holds it is not the client; revoke what it bought.
            self._revoke_grant(used[0], "authorization code replayed")
            return None
        code = self.codes.get(key)
        if code is None or code.client_id != client.client_id:
            return None
        if code.expires_at <= time.time():
            del self.codes[key]
            return None
        return code

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        if self.codes.pop(authorization_code.code, None) is None:  # exchanged meanwhile by a concurrent request
            raise TokenError("invalid_grant", "authorization code already used")
        grant_id = secrets.token_hex(12)
        now = time.time()
        self.used_codes = {key: value for key, value in self.used_codes.items() if value[1] > now}
        self.used_codes[authorization_code.code] = (grant_id, now + CODE_TTL)
        assert client.client_id is not None
        self.grants[grant_id] = {
            "client_id": client.client_id,
            "subject": authorization_code.subject,
            "scopes": authorization_code.scopes,
            "resource": authorization_code.resource,
            "created": int(now),
        }
        self._limit_grants(client.client_id)
        return self._issue(grant_id, authorization_code.scopes)

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        if not refresh_token.startswith(REFRESH_PREFIX):
            return None
        key = digest(refresh_token)
        entry = self.tokens.get(key)
        if entry is None or entry["expires_at"] <= time.time():
            return None
        grant = self.grants.get(entry["grant"])
        if grant is None or grant["client_id"] != client.client_id:
            return None
        if not self._operator_known(grant):
            self._revoke_grant(entry["grant"], "its operator is no longer in the token file")
            return None
        if entry["kind"] == "used_refresh":
            self._revoke_grant(entry["grant"], "refresh token reused")
            return None
        if entry["kind"] != "refresh":
            return None
        return RefreshToken(
            token=key,
            client_id=grant["client_id"],
            scopes=grant["scopes"],
            expires_at=int(entry["expires_at"]),
            resource=grant["resource"],
            subject=grant["subject"],
        )

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        entry = self.tokens.get(refresh_token.token)
        if entry is None or entry["kind"] != "refresh" or entry["expires_at"] <= time.time():
            if entry is not None and entry["kind"] == "used_refresh":  # two requests raced with one token
                self._revoke_grant(entry["grant"], "refresh token reused")
            raise TokenError("invalid_grant", "refresh token is not valid")
        entry["kind"] = "used_refresh"  # kept to recognise a replay (the newest few, until they would expire)
        grant_id = entry["grant"]
        self.grants[grant_id]["scopes"] = scopes
        used = sorted(
            (item["expires_at"], key)
            for key, item in self.tokens.items()
            if item["grant"] == grant_id and item["kind"] == "used_refresh"
        )
        stale = {key for _, key in used[: max(0, len(used) - MAX_USED_REFRESH)]}
        # The new access token replaces the grant's earlier ones: one live access token per grant.
        stale |= {key for key, item in self.tokens.items() if item["grant"] == grant_id and item["kind"] == "access"}
        self.tokens = {key: item for key, item in self.tokens.items() if key not in stale}
        return self._issue(grant_id, scopes)

    async def load_access_token(self, token: str) -> AccessToken | None:
        """The bearer check for every /mcp request: an OAuth access token, or a token from the token file."""
        if not token.startswith(ACCESS_PREFIX):
            return await self.token_file.verify_token(token)
        key = digest(token)
        entry = self.tokens.get(key)
        if entry is None or entry["kind"] != "access" or entry["expires_at"] <= time.time():
            return None
        grant = self.grants.get(entry["grant"])
        if grant is None:
            return None
        if not self._operator_known(grant):
            self._revoke_grant(entry["grant"], "its operator is no longer in the token file")
            return None
        client = self.clients.get(grant["client_id"], {})
        return AccessToken(
            token=key,
            client_id=grant["client_id"],
            scopes=grant["scopes"],
            expires_at=int(entry["expires_at"]),
            resource=grant["resource"],
            subject=grant["subject"],
            # The name audit records carry: who approved, which client (never a metric label).
            claims={"relay_shell_name": f"{grant['subject']}/{client_label_of(client)}#{grant['client_id'][:8]}"},
        )

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        entry = self.tokens.get(token.token)
        if entry is not None:
            self._revoke_grant(entry["grant"], "revoked by the client")

    # -- internals -------------------------------------------------------------------------------------------

    def _issue(self, grant_id: str, scopes: list[str]) -> OAuthToken:
        access = ACCESS_PREFIX + secrets.token_urlsafe(32)
        refresh = REFRESH_PREFIX + secrets.token_urlsafe(32)
        now = time.time()
        self.tokens[digest(access)] = {"kind": "access", "grant": grant_id, "expires_at": now + self.access_ttl}
        self.tokens[digest(refresh)] = {"kind": "refresh", "grant": grant_id, "expires_at": now + self.refresh_ttl}
        self._save()
        return OAuthToken(
            access_token=access,
            expires_in=self.access_ttl,
            scope=" ".join(scopes) if scopes else None,
            refresh_token=refresh,
        )

    def _revoke_grant(self, grant_id: str, reason: str) -> None:
        grant = self.grants.pop(grant_id, None)
        self.tokens = {key: entry for key, entry in self.tokens.items() if entry["grant"] != grant_id}
        self._save()
        if grant is not None:
            self._event(
                "oauth:revoke",
                f"http:{grant['subject']}",
                {"oauth_client": grant["client_id"], "reason": reason},
            )

    def _operator_known(self, grant: dict[str, Any]) -> bool:
        """A grant lasts only while the operator who approved it is in the token file: removing an operator
        (and restarting) ends their approvals too."""
        return any(token.name == grant["subject"] for token in self.token_file.tokens)

    def _limit_grants(self, client_id: str) -> None:
        mine = sorted((grant["created"], key) for key, grant in self.grants.items() if grant["client_id"] == client_id)
        for _, key in mine[: max(0, len(mine) - MAX_GRANTS_PER_CLIENT)]:
            self._revoke_grant(key, f"more than {MAX_GRANTS_PER_CLIENT} approvals for one client")


def client_label(client: OAuthClientInformationFull) -> str:
    return client_label_of(client.model_dump(mode="json"))


def client_label_of(client: dict[str, Any]) -> str:
    """The client's self-declared name, reduced to plain characters: it ends up in audit records and pages."""
    return _CLIENT_NAME.sub("", str(client.get("client_name") or "client"))[:32] or "client"


def redirect_uri_problem(uri: str) -> str | None:
    """OAuth 2.1 redirect URIs: https, http to a loopback host, or a native app's private-use scheme (RFC 8252,
    like com.example.app:/callback); never a fragment. The SDK then requires an exact match at /authorize."""
    parts = urlsplit(uri)
    if parts.fragment:
        return "must not have a fragment"
    if parts.scheme == "https" and parts.hostname:
        return None
    if parts.scheme == "http" and parts.hostname in ("localhost", "127.0.0.1", "::1"):
        return None
    if "." in parts.scheme:
        return None
    return "allowed: https://…, http:// to localhost, 127.0.0.1 or [::1], or a private-use scheme (com.example.app:/…)"


# -- the approval page -----------------------------------------------------------------------------------------

_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>relay-shell: approve a client</title>
<style>body{{font-family:sans-serif;max-width:40em;margin:3em auto}}code{{word-break:break-all}}</style></head>
<body><h1>Approve an MCP client?</h1>
<p><b>{client_name}</b> (client id <code>{client_id}</code>) asks to operate this relay-shell server: run commands
on this host and its SSH fleet, under this server's policy and audit log.</p>
<p>After approval the browser returns to <code>{redirect_uri}</code>.</p>
<p style="color:#a00">{message}</p>
<form method="post" action="/oauth/approve">
<input type="hidden" name="request" value="{request_id}">
<label>Operator token (a token from relay-shell's token file):
<input type="password" name="token" autocomplete="off" size="50"></label>
<p><button name="decision" value="approve">Approve</button> <button name="decision" value="deny">Deny</button></p>
</form></body></html>
"""

_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",  # no clickjacking of the approve button
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
}


def approval_page(provider: OAuthProvider, request_id: str, message: str, status_code: int = 200) -> Response:
    from starlette.responses import HTMLResponse

    pending = provider.pending.get(request_id)
    if pending is None:
        return HTMLResponse(
            "<!doctype html><p>This authorization request is unknown or has expired. Start again from the client.",
            status_code=400,
            headers=_HEADERS,
        )
    client = provider.clients.get(pending.client_id, {})
    page = _PAGE.format(
        client_name=html.escape(client_label_of(client)),
        client_id=html.escape(pending.client_id),
        redirect_uri=html.escape(str(pending.params.redirect_uri)),
        message=html.escape(message),
        request_id=html.escape(request_id),
    )
    return HTMLResponse(page, status_code=status_code, headers=_HEADERS)


async def approval_endpoint(provider: OAuthProvider, request: Request) -> Response:
    """GET shows the pending authorization; POST takes the operator's decision and token."""
    from starlette.responses import HTMLResponse, RedirectResponse

    if request.method == "GET":
        return approval_page(provider, request.query_params.get("request", ""), "")
    if int(request.headers.get("content-length") or 0) > MAX_FORM_BYTES:
        return HTMLResponse("form too large", status_code=413, headers=_HEADERS)
    form = await request.form(max_files=0, max_fields=8)
    request_id = str(form.get("request") or "")
    answer, problem = provider.approve(request_id, str(form.get("token") or ""), form.get("decision") == "approve")
    if problem == "retry":
        return approval_page(provider, request_id, answer, status_code=401)
    if problem is not None:
        return HTMLResponse(f"<!doctype html><p>{html.escape(answer)}", status_code=400, headers=_HEADERS)
    return RedirectResponse(answer, status_code=303, headers={"Cache-Control": "no-store"})
