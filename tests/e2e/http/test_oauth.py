"""OAuth 2.1 end to end: a real relay-shell process serving HTTP with RELAY_SHELL_OAUTH_STATE_DIR, the SDK's own
OAuth client (discovery, dynamic registration, PKCE, token refresh) and a hand-written client for the cases a
well-behaved client never produces (replayed codes and refresh tokens, wrong verifiers, foreign redirect URIs).
The "browser" is httpx following the redirects by hand; the operator approves by posting a token-file token."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

from tests.conftest import read_records, server_env, text_of
from tests.e2e.http.oauth import (
    REDIRECT,
    MemoryStorage,
    Registered,
    approval_url,
    authorization_code,
    base_of,
    full_grant,
    mcp_status,
    operator_answer,
    pkce,
    register,
    registered,
    start_oauth,
    token_request,
)
from tests.e2e.http.server import TOKENS, HttpServer, start, stop, write_token_file
from tests.e2e.http.server import client as http_client

pytestmark = pytest.mark.anyio


# -- the SDK's OAuth client, end to end -------------------------------------------------------------------------


async def test_sdk_oauth_client_discovers_registers_is_approved_and_calls_tools(server: HttpServer) -> None:
    storage = MemoryStorage()
    authorization_urls: list[str] = []

    async def redirect_handler(url: str) -> None:
        authorization_urls.append(url)

    async def callback_handler() -> AuthorizationCodeResult:
        # The user's browser follows /authorize to the approval page; the operator approves.
        async with httpx2.AsyncClient() as browser:
            authorize = await browser.get(authorization_urls[-1])
            assert authorize.status_code == 302, authorize.text
            approve_url = authorize.headers["location"]
            page = await browser.get(approve_url)
            assert "Relay SDK Test" in page.text and page.headers["x-frame-options"] == "DENY"
            answer = await operator_answer(browser, approve_url, TOKENS["bob"])
        assert answer.status_code == 303, answer.text
        query = parse_qs(urlsplit(answer.headers["location"]).query)
        return AuthorizationCodeResult(code=query["code"][0], state=query["state"][0])

    oauth = OAuthClientProvider(
        server.url,
        OAuthClientMetadata(
            redirect_uris=[REDIRECT],  # type: ignore[list-item]
            client_name="Relay SDK Test",
            grant_types=["authorization_code", "refresh_token"],
        ),
        storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )
    transport = streamable_http_client(server.url, http_client=create_mcp_http_client(auth=oauth))
    async with Client(transport) as connected:  # type: ignore[arg-type]
        result = await connected.call_tool("shell_exec", {"command": "echo via-oauth"})
        assert text_of(result) == "[exit 0]\nvia-oauth\n"
    assert storage.tokens is not None and storage.tokens.refresh_token is not None
    assert storage.tokens.access_token.startswith("rsat_") and storage.tokens.refresh_token.startswith("rsrt_")
    assert storage.tokens.expires_in == 3600
    assert storage.client_info is not None and storage.client_info.client_id is not None
    client_id = storage.client_info.client_id

    records = read_records(server.audit_path)
    calls = [record for record in records if record["tool"] == "shell_exec"]
    assert [record["client_id"] for record in calls] == [f"http:bob/Relay SDK Test#{client_id[:8]}"] * 2  # start, end
    events = [record["tool"] for record in records if record["tool"].startswith("oauth:")]
    assert events == ["oauth:register", "oauth:approve"]

    # Stored hashed, 0600 in a 0700 directory: neither token appears in the state file, their digests do.
    state_dir = server.audit_path.parent / "oauth"
    state_file = state_dir / "oauth.json"
    assert oct(state_dir.stat().st_mode & 0o777) == "0o700"
    assert oct(state_file.stat().st_mode & 0o777) == "0o600"
    text = state_file.read_text()
    for token in (storage.tokens.access_token, storage.tokens.refresh_token):
        assert token not in text
        assert hashlib.sha256(token.encode()).hexdigest() in text
    assert not [path for path in state_dir.iterdir() if path.name != "oauth.json"]  # no temp file left behind
    assert stop(server) == 0
    verified = subprocess.run([sys.executable, "-m", "relay_shell", "audit", "verify", str(server.audit_path)])
    assert verified.returncode == 0


# -- tokens: rotation, single use, kinds, revocation ------------------------------------------------------------


async def test_refresh_tokens_rotate_and_a_replay_revokes_the_grant(server: HttpServer) -> None:
    base = base_of(server)
    async with httpx2.AsyncClient() as http:
        client, first = await full_grant(http, base)
        assert await mcp_status(http, server, first["access_token"]) == 200
        # A refresh token is never an access token, and an access token is never a refresh token.
        assert await mcp_status(http, server, first["refresh_token"]) == 401
        wrong_kind = await token_request(
            http, base, client, grant_type="refresh_token", refresh_token=first["access_token"]
        )
        assert wrong_kind.status_code == 400 and wrong_kind.json()["error"] == "invalid_grant"

        rotated = await token_request(
            http, base, client, grant_type="refresh_token", refresh_token=first["refresh_token"]
        )
        assert rotated.status_code == 200, rotated.text
        second = rotated.json()
        assert second["refresh_token"] != first["refresh_token"] and second["access_token"] != first["access_token"]
        assert await mcp_status(http, server, second["access_token"]) == 200

        # The first refresh token again: single use, so whoever presents it stole it. The grant is revoked,
        # including the tokens rotated from it.
        replay = await token_request(
            http, base, client, grant_type="refresh_token", refresh_token=first["refresh_token"]
        )
        assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
        assert await mcp_status(http, server, second["access_token"]) == 401
        after = await token_request(
            http, base, client, grant_type="refresh_token", refresh_token=second["refresh_token"]
        )
        assert after.status_code == 400
    revokes = [record for record in read_records(server.audit_path) if record["tool"] == "oauth:revoke"]
    assert [record["reason"] for record in revokes] == ["refresh token reused"]
    assert revokes[0]["client_id"] == "http:alice"


async def test_a_replayed_code_is_refused_and_revokes_its_tokens(server: HttpServer) -> None:
    base = base_of(server)
    async with httpx2.AsyncClient() as http:
        client = await registered(http, base)
        verifier, challenge = pkce()
        code = await authorization_code(http, base, client, challenge)
        exchange = {
            "grant_type": "authorization_code",
            "code": code,
            "code_verifier": verifier,
            "redirect_uri": REDIRECT,
        }
        first = await token_request(http, base, client, **exchange)
        assert first.status_code == 200
        again = await token_request(http, base, client, **exchange)
        assert again.status_code == 400 and again.json()["error"] == "invalid_grant"
        assert await mcp_status(http, server, first.json()["access_token"]) == 401


async def test_pkce_and_exact_redirect_uris_are_enforced(server: HttpServer) -> None:
    base = base_of(server)
    async with httpx2.AsyncClient() as http:
        client = await registered(http, base)
        _, challenge = pkce()
        code = await authorization_code(http, base, client, challenge)
        wrong_verifier = await token_request(
            http,
            base,
            client,
            grant_type="authorization_code",
            code=code,
            code_verifier="x" * 50,
            redirect_uri=REDIRECT,
        )
        assert wrong_verifier.status_code == 400 and wrong_verifier.json()["error"] == "invalid_grant"

        # No code challenge at all: PKCE is required.
        no_pkce = await http.get(
            f"{base}/authorize?"
            + urlencode({"response_type": "code", "client_id": client.client_id, "redirect_uri": REDIRECT})
        )
        assert no_pkce.status_code in (302, 400)
        assert "code" not in parse_qs(urlsplit(no_pkce.headers.get("location", "")).query)
        assert "error" in (parse_qs(urlsplit(no_pkce.headers.get("location", "")).query) or no_pkce.json())

        # A redirect URI that is not exactly a registered one: refused, never redirected to.
        for other in (REDIRECT + "/evil", REDIRECT.replace("33418", "33419"), "https://evil.example/callback"):
            response = await approval_url(http, base, client, challenge, redirect_uri=other)
            assert response.status_code == 400, (other, response.status_code)
            assert "evil" not in response.headers.get("location", "")

        # A token for another resource is refused at /authorize.
        other_resource = await approval_url(http, base, client, challenge, resource="http://127.0.0.1:1/mcp")
        location = parse_qs(urlsplit(other_resource.headers.get("location", "")).query)
        assert location.get("error") == ["invalid_target"], other_resource.text


async def test_registration_validates_redirect_uris_and_can_lock_to_the_first_client(tmp_path: Path) -> None:
    server = start_oauth(tmp_path, oauth_lock_first_client="true")
    base = base_of(server)
    try:
        async with httpx2.AsyncClient() as http:
            for bad in ("http://evil.example/cb", "javascript:alert(1)", "https://ok.example/cb#frag"):
                response = await register(http, base, redirect_uris=[bad])
                assert response.status_code == 400, bad
                assert response.json()["error"] in ("invalid_redirect_uri", "invalid_client_metadata"), response.text
            assert (await register(http, base, redirect_uris=["com.example.app:/cb"])).status_code == 201
            second = await register(http, base)
            assert second.status_code == 400
            assert "only the client registered first" in second.json()["error_description"]
    finally:
        stop(server)


# -- the approval page ------------------------------------------------------------------------------------------


async def test_the_operator_must_prove_themselves_and_may_deny(server: HttpServer) -> None:
    base = base_of(server)
    async with httpx2.AsyncClient() as http:
        client = await registered(http, base)
        _, challenge = pkce()

        denied = await operator_answer(
            http, (await approval_url(http, base, client, challenge)).headers["location"], "", decision="deny"
        )
        assert denied.status_code == 303
        query = parse_qs(urlsplit(denied.headers["location"]).query)
        assert query["error"] == ["access_denied"] and "code" not in query

        approve_url = (await approval_url(http, base, client, challenge)).headers["location"]
        wrong = await operator_answer(http, approve_url, "not-a-token")
        assert wrong.status_code == 401 and "not a valid operator token" in wrong.text
        # Another site's page cannot submit the form (Origin is checked like /mcp's).
        port = urlsplit(base).port
        forged = await operator_answer(http, approve_url, TOKENS["alice"], Origin="http://evil.example")
        assert forged.status_code == 403
        rebinding = await operator_answer(http, approve_url, TOKENS["alice"], Host=f"evil.example:{port}")
        assert rebinding.status_code in (400, 421)
        request_id = parse_qs(urlsplit(approve_url).query)["request"][0]
        for _ in range(3):  # the second to fourth wrong token
            assert (await operator_answer(http, approve_url, "still-wrong")).status_code == 401
        fifth = await http.post(
            f"{base}/oauth/approve", data={"request": request_id, "token": "x", "decision": "approve"}
        )
        assert fifth.status_code == 400 and "dropped" in fifth.text
        right_too_late = await http.post(
            f"{base}/oauth/approve", data={"request": request_id, "token": TOKENS["alice"], "decision": "approve"}
        )
        assert right_too_late.status_code == 400 and "unknown or has expired" in right_too_late.text
    records = read_records(server.audit_path)
    assert not [record for record in records if record["tool"] == "oauth:approve"]
    refused = [record for record in records if record["tool"] == "oauth:approve_refused"]
    assert [record["attempt"] for record in refused] == [1, 2, 3, 4, 5]
    assert not [record for record in records if TOKENS["alice"] in str(record)]


# -- persistence and expiry -------------------------------------------------------------------------------------


async def test_grants_survive_a_restart_and_expiry_is_checked_at_every_use(tmp_path: Path) -> None:
    server = start_oauth(tmp_path)
    base = base_of(server)
    async with httpx2.AsyncClient() as http:
        client, tokens = await full_grant(http, base)
    assert stop(server) == 0

    server = start_oauth(tmp_path)
    try:
        async with httpx2.AsyncClient() as http:
            assert await mcp_status(http, server, tokens["access_token"]) == 200  # the state file was reloaded
    finally:
        assert stop(server) == 0

    # Age every token in the state file (the server is stopped; the file is its own state): a token past its
    # expiry is refused on the next use, though nothing purged it yet.
    state_file = tmp_path / "oauth" / "oauth.json"
    state = json.loads(state_file.read_text())
    for entry in state["tokens"].values():
        entry["expires_at"] = 1.0 if entry["kind"] == "access" else entry["expires_at"]
    state_file.write_text(json.dumps(state))
    server = start_oauth(tmp_path)
    try:
        async with httpx2.AsyncClient() as http:
            assert await mcp_status(http, server, tokens["access_token"]) == 401
            refreshed = await token_request(
                http, base_of(server), client, grant_type="refresh_token", refresh_token=tokens["refresh_token"]
            )
            assert refreshed.status_code == 200, refreshed.text
            assert await mcp_status(http, server, refreshed.json()["access_token"]) == 200
            # Revocation: the client revokes its refresh token; the grant's access token stops working too.
            revoke = await http.post(
                f"{base_of(server)}/revoke",
                data={
                    "token": refreshed.json()["refresh_token"],
                    "client_id": client.client_id,
                    "client_secret": client.client_secret or "",
                },
            )
            assert revoke.status_code == 200, revoke.text
            assert await mcp_status(http, server, refreshed.json()["access_token"]) == 401
            # Token-file tokens keep working next to OAuth.
            assert await mcp_status(http, server, TOKENS["alice"]) == 200
    finally:
        assert stop(server) == 0


# -- configuration refused at startup ---------------------------------------------------------------------------


def startup_error(tmp_path: Path, **settings: str) -> tuple[int, str]:
    env = server_env(tmp_path / "audit.jsonl", transport="http", http_port="0", **settings)
    done = subprocess.run(
        [sys.executable, "-m", "relay_shell"], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True
    )
    return done.returncode, done.stderr


def test_unsafe_oauth_configurations_are_refused(tmp_path: Path) -> None:
    token_file = str(write_token_file(tmp_path / "tokens", TOKENS))
    code, stderr = startup_error(tmp_path, oauth_state_dir=str(tmp_path / "state"))
    assert code == 2 and "needs RELAY_SHELL_TOKEN_FILE" in stderr
    env = server_env(tmp_path / "audit.jsonl", transport="http", oauth_state_dir=str(tmp_path / "state"))
    checked = subprocess.run([sys.executable, "-m", "relay_shell", "--check-config"], env=env, capture_output=True)
    assert checked.returncode == 2 and b"needs RELAY_SHELL_TOKEN_FILE" in checked.stderr

    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    code, stderr = startup_error(tmp_path, token_file=token_file, oauth_state_dir=str(loose))
    assert code == 2 and "mode 0755" in stderr and "chmod 700" in stderr

    code, stderr = startup_error(
        tmp_path, token_file=token_file, oauth_state_dir=str(tmp_path / "s2"), http_host="0.0.0.0"
    )
    assert code == 2 and "RELAY_SHELL_OAUTH_ISSUER" in stderr

    code, stderr = startup_error(
        tmp_path, token_file=token_file, oauth_state_dir=str(tmp_path / "s3"), oauth_issuer="http://public.example"
    )
    assert code == 2 and "https" in stderr

    corrupt = tmp_path / "corrupt"
    corrupt.mkdir(mode=0o700)
    (corrupt / "oauth.json").write_text("{not json")
    (corrupt / "oauth.json").chmod(0o600)
    code, stderr = startup_error(tmp_path, token_file=token_file, oauth_state_dir=str(corrupt))
    assert code == 2 and "not a relay-shell OAuth state file" in stderr


async def test_metadata_points_clients_to_the_authorization_server(server: HttpServer) -> None:
    base = base_of(server)
    async with httpx2.AsyncClient() as http:
        unauthenticated = await http.post(server.url, json={}, headers={"Accept": "application/json"})
        resource = await http.get(f"{base}/.well-known/oauth-protected-resource/mcp")
        metadata = await http.get(f"{base}/.well-known/oauth-authorization-server")
    assert unauthenticated.status_code == 401
    assert "resource_metadata=" in unauthenticated.headers["www-authenticate"]
    assert resource.json()["resource"] == server.url
    assert resource.json()["authorization_servers"] == [base + "/"] or resource.json()["authorization_servers"] == [
        base
    ]
    body = metadata.json()
    assert body["registration_endpoint"] == f"{base}/register"
    assert body["code_challenge_methods_supported"] == ["S256"]
    assert "refresh_token" in body["grant_types_supported"]


async def approved_tokens(http: httpx2.AsyncClient, base: str, client: Registered, operator: str) -> dict[str, Any]:
    verifier, challenge = pkce()
    authorize = await approval_url(http, base, client, challenge)
    answer = await operator_answer(http, authorize.headers["location"], TOKENS[operator])
    code = parse_qs(urlsplit(answer.headers["location"]).query)["code"][0]
    response = await token_request(
        http, base, client, grant_type="authorization_code", code=code, code_verifier=verifier, redirect_uri=REDIRECT
    )
    assert response.status_code == 200, response.text
    return response.json()


async def test_two_operators_grants_for_one_client_are_two_owners(server: HttpServer) -> None:
    base = base_of(server)
    async with httpx2.AsyncClient() as http:
        client = await registered(http, base)
        alice_grant = await approved_tokens(http, base, client, "alice")
        bob_grant = await approved_tokens(http, base, client, "bob")
    # 2026-07-28 clients have no MCP session: the owner is the principal, here client + approving operator.
    async with http_client(server, alice_grant["access_token"]) as alice:
        spawned = await alice.call_tool("shell_spawn", {"command": "bash"})
        session_id = spawned.structured_content["session_id"]  # type: ignore[index]
    async with http_client(server, bob_grant["access_token"]) as bob:
        listed = await bob.call_tool("session_list", {})
        assert session_id not in text_of(listed)
        sent = await bob.call_tool("session_send", {"session_id": session_id, "data": "echo hi"})
        assert sent.is_error
    async with http_client(server, alice_grant["access_token"]) as alice:
        assert session_id in text_of(await alice.call_tool("session_list", {}))
        await alice.call_tool("session_kill", {"session_id": session_id})


async def test_removing_an_operator_ends_their_grants(tmp_path: Path) -> None:
    server = start_oauth(tmp_path)
    base = base_of(server)
    async with httpx2.AsyncClient() as http:
        client = await registered(http, base)
        alice_grant = await approved_tokens(http, base, client, "alice")
        bob_grant = await approved_tokens(http, base, client, "bob")
        # A refresh replaces the grant's access token: the earlier one stops working at once.
        rotated = await token_request(
            http, base, client, grant_type="refresh_token", refresh_token=bob_grant["refresh_token"]
        )
        assert await mcp_status(http, server, bob_grant["access_token"]) == 401
        bob_grant = rotated.json()
    assert stop(server) == 0
    write_token_file(tmp_path / "tokens", {"bob": TOKENS["bob"]})  # alice leaves
    server = start(tmp_path, token_file=str(tmp_path / "tokens"), oauth_state_dir=str(tmp_path / "oauth"))
    try:
        async with httpx2.AsyncClient() as http:
            assert await mcp_status(http, server, alice_grant["access_token"]) == 401
            refresh = await token_request(
                http, base_of(server), client, grant_type="refresh_token", refresh_token=alice_grant["refresh_token"]
            )
            assert refresh.status_code == 400
            assert await mcp_status(http, server, bob_grant["access_token"]) == 200
    finally:
        assert stop(server) == 0
    revokes = [record for record in read_records(server.audit_path) if record["tool"] == "oauth:revoke"]
    assert [record["reason"] for record in revokes] == ["its operator is no longer in the token file"]


async def test_registration_is_bounded(server: HttpServer) -> None:
    base = base_of(server)
    async with httpx2.AsyncClient() as http:
        many = await register(http, base, redirect_uris=[f"http://127.0.0.1:{port}/cb" for port in range(2000, 2009)])
        huge = await register(http, base, client_name="x" * 20000)
    assert many.status_code == 400 and "allowed: 8" in many.json()["error_description"]
    assert huge.status_code == 400
