"""A hand-written OAuth client for the cases a well-behaved client never produces, the operator's side of the
approval page, and token storage for the SDK's own OAuth client."""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from tests.e2e.http.server import TOKENS, HttpServer, start, write_token_file

REDIRECT = "http://127.0.0.1:33418/callback"


def start_oauth(tmp_path: Path, **settings: str) -> HttpServer:
    state_dir = tmp_path / "oauth"
    return start(
        tmp_path,
        token_file=str(write_token_file(tmp_path / "tokens", TOKENS)),
        oauth_state_dir=str(state_dir),
        **settings,
    )


def base_of(server: HttpServer) -> str:
    return server.url.removesuffix("/mcp")


# -- a minimal hand-written OAuth client ------------------------------------------------------------------------


@dataclass
class Registered:
    client_id: str
    client_secret: str | None


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


async def register(http: httpx2.AsyncClient, base: str, **metadata: Any) -> httpx2.Response:
    body = {"redirect_uris": [REDIRECT], "client_name": "Test Client", **metadata}
    return await http.post(f"{base}/register", json=body)


async def registered(http: httpx2.AsyncClient, base: str) -> Registered:
    response = await register(http, base)
    assert response.status_code == 201, response.text
    info = response.json()
    return Registered(info["client_id"], info.get("client_secret"))


async def approval_url(
    http: httpx2.AsyncClient, base: str, client: Registered, challenge: str, **extra: str
) -> httpx2.Response:
    query = {
        "response_type": "code",
        "client_id": client.client_id,
        "redirect_uri": REDIRECT,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "state-123",
        **extra,
    }
    return await http.get(f"{base}/authorize?{urlencode(query)}")


async def operator_answer(
    http: httpx2.AsyncClient, approve_url: str, token: str, decision: str = "approve", **headers: str
) -> httpx2.Response:
    """The operator's browser: load the approval page, then post the decision with an operator token."""
    page = await http.get(approve_url)
    assert page.status_code == 200, page.text
    request_id = parse_qs(urlsplit(approve_url).query)["request"][0]
    parts = urlsplit(approve_url)
    form = {"request": request_id, "token": token, "decision": decision}
    return await http.post(f"{parts.scheme}://{parts.netloc}/oauth/approve", data=form, headers=headers)


async def authorization_code(http: httpx2.AsyncClient, base: str, client: Registered, challenge: str) -> str:
    authorize = await approval_url(http, base, client, challenge)
    assert authorize.status_code == 302, authorize.text
    answer = await operator_answer(http, authorize.headers["location"], TOKENS["alice"])
    assert answer.status_code == 303, answer.text
    location = answer.headers["location"]
    assert location.startswith(REDIRECT + "?")
    query = parse_qs(urlsplit(location).query)
    assert query["state"] == ["state-123"]
    return query["code"][0]


async def token_request(http: httpx2.AsyncClient, base: str, client: Registered, **form: str) -> httpx2.Response:
    data = {"client_id": client.client_id, **form}
    if client.client_secret:
        data["client_secret"] = client.client_secret
    return await http.post(f"{base}/token", data=data)


async def full_grant(http: httpx2.AsyncClient, base: str) -> tuple[Registered, dict[str, Any]]:
    client = await registered(http, base)
    verifier, challenge = pkce()
    code = await authorization_code(http, base, client, challenge)
    response = await token_request(
        http, base, client, grant_type="authorization_code", code=code, code_verifier=verifier, redirect_uri=REDIRECT
    )
    assert response.status_code == 200, response.text
    return client, response.json()


async def mcp_status(http: httpx2.AsyncClient, server: HttpServer, token: str) -> int:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Authorization": f"Bearer {token}",
    }
    response = await http.post(server.url, json=initialize, headers=headers)
    return response.status_code


class MemoryStorage:
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info
