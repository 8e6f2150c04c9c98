"""Which authentication the HTTP transport serves with: the token file and OAuth settings checked at startup
(loopback by default; a non-loopback address needs tokens), the issuer, and the SDK's auth settings.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from relay_shell.auth.tokens import TokenFileVerifier, load_tokens
from relay_shell.errors import ConfigError
from relay_shell.settings.model import Settings

if TYPE_CHECKING:
    from mcp.server.auth.provider import TokenVerifier
    from mcp.server.auth.settings import AuthSettings

    from relay_shell.auth.oauth import OAuthProvider


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
    verifier = TokenFileVerifier(load_tokens(settings.auth.token_file)) if settings.auth.token_file else None
    if verifier is None and not is_loopback(settings.http.http_host):
        raise ConfigError(
            f"RELAY_SHELL_HTTP_HOST={settings.http.http_host!r}: serving a non-loopback address needs authentication; "
            "set RELAY_SHELL_TOKEN_FILE, or bind 127.0.0.1"
        )
    if settings.auth.oauth_state_dir is None:
        return HttpAuth(tokens=verifier)
    if verifier is None:
        raise ConfigError(
            "RELAY_SHELL_OAUTH_STATE_DIR needs RELAY_SHELL_TOKEN_FILE: an operator approves each OAuth client "
            "with a token from that file"
        )
    if settings.auth.oauth_issuer:
        issuer_problem = _issuer_problem(settings.auth.oauth_issuer)
        if issuer_problem:
            raise ConfigError(f"RELAY_SHELL_OAUTH_ISSUER={settings.auth.oauth_issuer!r}: {issuer_problem}")
    elif not is_loopback(settings.http.http_host):
        raise ConfigError(
            "RELAY_SHELL_OAUTH_ISSUER: required when serving a non-loopback address: the https:// URL clients use "
            "(OAuth needs https except on loopback; put a TLS proxy in front, see deploy/)"
        )
    from relay_shell.auth.oauth import OAuthProvider

    oauth = OAuthProvider(
        settings.auth.oauth_state_dir,
        verifier,
        access_ttl=settings.auth.oauth_access_ttl,
        refresh_ttl=settings.auth.oauth_refresh_ttl,
        lock_first_client=settings.auth.oauth_lock_first_client,
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
    if settings.auth.oauth_issuer:
        return settings.auth.oauth_issuer.rstrip("/")
    shown = f"[{settings.http.http_host}]" if ":" in settings.http.http_host else settings.http.http_host
    return f"http://{shown}:{port}"


def server_auth(
    settings: Settings, token_verifier: TokenVerifier | None, oauth: OAuthProvider | None
) -> dict[str, Any]:
    """Bearer tokens on the HTTP transport: the SDK's auth middleware checks every /mcp request."""
    if oauth is not None:
        # The issuer is set again once the listener's port is known (serve_http).
        oauth.set_issuer(oauth.issuer or f"http://127.0.0.1:{settings.http.http_port or 80}")
        return {"auth": oauth_settings(oauth), "auth_server_provider": oauth}
    if token_verifier is None:
        return {}
    from mcp.server.auth.settings import AuthSettings

    # No OAuth authorization server and no protected-resource metadata: the tokens come from the token file.
    host = f"[{settings.http.http_host}]" if ":" in settings.http.http_host else settings.http.http_host
    base = f"http://{host}:{settings.http.http_port or 80}"
    return {"auth": AuthSettings(issuer_url=base, resource_server_url=None), "token_verifier": token_verifier}


def oauth_settings(oauth: OAuthProvider) -> AuthSettings:
    """The SDK's authorization-server routes (metadata, /register, /authorize, /token, /revoke) and the
    protected-resource metadata that tells a client where to get a token for /mcp."""
    from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions

    return AuthSettings(
        issuer_url=oauth.issuer,
        resource_server_url=oauth.resource,
        client_registration_options=ClientRegistrationOptions(enabled=True),
        revocation_options=RevocationOptions(enabled=True),
        # The provider refuses an authorization for any other resource, so every token it issues is for /mcp;
        # token-file tokens carry no resource.
        validate_token_resource=False,
    )
