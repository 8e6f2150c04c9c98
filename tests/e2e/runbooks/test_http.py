"""Runbooks over streamable HTTP: a real relay-shell HTTP process with the 40-file corpus, the SDK client in both
protocol eras: prompts, resources, search, live reload with list_changed notifications (the 2025-11-25 client on
its standalone stream, the 2026-07-28 client on its listen stream), the readonly mode hiding a mode-restricted
runbook, and per-session briefing gates."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from tests.conftest import read_records, text_of
from tests.e2e.http.server import TOKENS, HttpServer, client, start, stop, write_token_file
from tests.e2e.runbooks.helpers import (
    ABSENT,
    GUARDS,
    HIDDEN_IN_READONLY,
    LOADED,
    Notifications,
    as_if_hidden,
    prompt_text,
    reload_steps,
    without_volatile,
    write,
    write_corpus,
)

pytestmark = pytest.mark.anyio

WAIT = 20.0


@asynccontextmanager
async def listening_client(server: HttpServer, token: str, notifications: Notifications) -> AsyncIterator[Client]:
    """A 2025-11-25 client over HTTP that hands notifications (on its standalone GET stream) to `notifications`."""
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    transport = streamable_http_client(server.url, http_client=http)
    async with Client(transport, mode="legacy", message_handler=notifications) as connected:  # type: ignore[arg-type]
        yield connected


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The server inherits this process's environment: its runbook parse cache goes to the test's directory.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "runbooks")


@pytest.fixture
def server(tmp_path: Path, corpus: Path, private_cache: None) -> Iterator[HttpServer]:
    running = start(tmp_path, runbook_dir=str(corpus), token_file=str(write_token_file(tmp_path / "tokens", TOKENS)))
    yield running
    if running.process.poll() is None:
        stop(running)


async def test_prompts_resources_and_search_over_http_in_both_eras(server: HttpServer, corpus: Path) -> None:
    for mode in ("legacy", "auto"):
        async with client(server, TOKENS["alice"], mode=mode) as alice:
            prompts = {prompt.name for prompt in (await alice.list_prompts()).prompts}
            assert "db-failover" in prompts and len([name for name in prompts if "-" in name]) == LOADED
            text = prompt_text(await alice.get_prompt("db-failover", {"host": "db2"}))
            assert "| db2\n" in text and text.endswith("Run `pg_ctl promote` on the chosen replica.\n")
            raw = await alice.read_resource("relay-shell://runbooks/db-failover")
            assert raw.contents[0].text == (corpus / "db" / "failover.md").read_text()  # type: ignore[union-attr]
            index = json.loads((await alice.read_resource("relay-shell://runbooks")).contents[0].text)  # type: ignore[union-attr]
            assert len(index["runbooks"]) == LOADED and index["not_loaded_count"] == 1
            found = await alice.call_tool("runbook_search", {"tags": ["tls", "certificates"], "max_bytes": 1500})
            names = [item["name"] for item in (found.structured_content or {})["runbooks"]]
            assert set(names[:2]) == set(GUARDS) and names[2] == "edge-rotate-certs"
            assert len(text_of(found).encode()) <= 1500 + 8
    labels = [record["tool"] for record in read_records(server.audit_path)]
    assert labels.count("prompt:db-failover") == 2 and labels.count("runbook_search") == 2
    calls = [record for record in read_records(server.audit_path) if record["tool"] != "server:start"]
    assert {record["client_id"] for record in calls} == {"http:alice"}


async def test_a_mode_restricted_runbook_is_hidden_in_readonly_over_http(
    tmp_path: Path, corpus: Path, private_cache: None
) -> None:
    running = start(
        tmp_path,
        runbook_dir=str(corpus),
        policy_mode="readonly",
        token_file=str(write_token_file(tmp_path / "tokens", TOKENS)),
    )
    try:
        for mode in ("legacy", "auto"):
            async with client(running, TOKENS["alice"], mode=mode) as alice:
                listed = {prompt.name for prompt in (await alice.list_prompts()).prompts}
                assert "deploy-rollout" not in listed and "db-failover" in listed
                resources = {str(resource.uri) for resource in (await alice.list_resources()).resources}
                assert "relay-shell://runbooks/deploy-rollout" not in resources
                assert "relay-shell://runbooks/db-failover" in resources
                # Asked for by name, it answers exactly as a name no file has (issue 30).
                for hidden, absent in (
                    (alice.get_prompt(HIDDEN_IN_READONLY), alice.get_prompt(ABSENT)),
                    (
                        alice.read_resource(f"relay-shell://runbooks/{HIDDEN_IN_READONLY}"),
                        alice.read_resource(f"relay-shell://runbooks/{ABSENT}"),
                    ),
                ):
                    with pytest.raises(MCPError) as hidden_refused:
                        await hidden
                    with pytest.raises(MCPError) as absent_refused:
                        await absent
                    assert hidden_refused.value.code == absent_refused.value.code == INVALID_PARAMS
                    assert hidden_refused.value.message == absent_refused.value.message.replace(
                        ABSENT, HIDDEN_IN_READONLY
                    )
                found = await alice.call_tool("runbook_search", {"tags": ["rollout", "release"]})
                assert "deploy-rollout" not in [item["name"] for item in (found.structured_content or {})["runbooks"]]
                assert "Canary first" not in text_of(found)
                index = json.loads((await alice.read_resource("relay-shell://runbooks")).contents[0].text)  # type: ignore[union-attr]
                assert "hidden_in_this_mode" not in index
                assert "deploy-rollout" not in {item["name"] for item in index["runbooks"]}
    finally:
        stop(running)
    refused = [record for record in read_records(running.audit_path) if record["outcome"] == "error"]
    assert [record["tool"] for record in refused] == ["prompt:unknown"] * 2 + ["resource:runbooks"] * 2 + [
        "prompt:unknown"
    ] * 2 + ["resource:runbooks"] * 2
    for hidden, absent in zip(refused[::2], refused[1::2], strict=True):
        assert without_volatile(hidden) == as_if_hidden(absent), hidden
    assert {record["client_id"] for record in refused} == {"http:alice"}


async def test_list_changed_reaches_a_2025_client_over_http(server: HttpServer, corpus: Path) -> None:
    write(corpus / "base.md", "---\ntags: [base]\n---\nBase.\n")
    notifications = Notifications()
    async with listening_client(server, TOKENS["alice"], notifications) as alice:
        await alice.list_prompts()  # a request on the session: the server knows the connection

        async def wait_for_change(step: int) -> list[str]:
            methods = await notifications.wait(2 * step)
            assert len(methods) == 2 * step, methods
            return methods[-2:]

        await reload_steps(alice, corpus, wait_for_change)


async def test_list_changed_reaches_a_2026_client_over_http(server: HttpServer, corpus: Path) -> None:
    write(corpus / "base.md", "---\ntags: [base]\n---\nBase.\n")
    async with client(server, TOKENS["bob"], mode="auto") as bob:
        assert bob.protocol_version == "2026-07-28"
        events: list[str] = []
        arrived = anyio.Event()
        async with bob.listen(prompts_list_changed=True, resources_list_changed=True) as subscription:

            async def collect() -> None:
                async for event in subscription:
                    events.append(type(event).__name__)
                    arrived.set()

            async with anyio.create_task_group() as group:
                group.start_soon(collect)

                async def wait_for_change(step: int) -> list[str]:
                    nonlocal arrived
                    with anyio.move_on_after(WAIT):
                        while len(events) < 2 * step:
                            arrived = anyio.Event()
                            await arrived.wait()
                    assert len(events) == 2 * step, events
                    return ["notifications/prompts/list_changed", "notifications/resources/list_changed"]

                await reload_steps(bob, corpus, wait_for_change)
                group.cancel_scope.cancel()


async def test_each_http_session_has_its_own_gate(tmp_path: Path, corpus: Path, private_cache: None) -> None:
    running = start(
        tmp_path,
        runbook_dir=str(corpus),
        gate="briefing",
        token_file=str(write_token_file(tmp_path / "tokens", TOKENS)),
    )
    try:
        # Two MCP sessions of one token (2025-11-25): the gate is per session.
        async with (
            client(running, TOKENS["alice"], mode="legacy") as first,
            client(running, TOKENS["alice"], mode="legacy") as second,
        ):
            opened = await first.call_tool("begin_session", {"tags": ["postgres", "replica"]})
            assert (opened.structured_content or {})["gate"] == "open"
            ran = await first.call_tool("shell_exec", {"command": f"touch {tmp_path}/first"})
            assert text_of(ran) == "[exit 0]" and (tmp_path / "first").exists()
            held = await second.call_tool("shell_exec", {"command": f"touch {tmp_path}/second"})
            assert text_of(held).startswith("[GATED:") and not (tmp_path / "second").exists()
            info = (await second.call_tool("server_info", {})).structured_content
            assert info is not None and info["info"]["gate"]["this_session"] == "closed"
            assert info["info"]["gate"]["sessions_open"] == 1
        # 2026-07-28 over HTTP has no MCP session: the gate is the token's. Bob's is not Alice's.
        async with (
            client(running, TOKENS["alice"], mode="auto") as alice,
            client(running, TOKENS["bob"], mode="auto") as bob,
        ):
            await alice.call_tool("begin_session", {"tags": ["deploy"]})
            assert text_of(await alice.call_tool("shell_exec", {"command": f"touch {tmp_path}/a"})) == "[exit 0]"
            assert text_of(await bob.call_tool("shell_exec", {"command": f"touch {tmp_path}/b"})).startswith("[GATED:")
    finally:
        stop(running)
    gate_records = [record for record in read_records(running.audit_path) if record["tool"].startswith("gate:")]
    assert [record["tool"] for record in gate_records] == ["gate:open", "gate:brief", "gate:open", "gate:brief"]
