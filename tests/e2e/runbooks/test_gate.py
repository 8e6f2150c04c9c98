"""The briefing gate (RELAY_SHELL_GATE=briefing) end to end over stdio, with the 40-file corpus: the first call
that would run something is answered [GATED …] with the runbooks its words select and every priority-10 one, and
did not run (a marker file stays absent); the identical call repeated runs; begin_session opens the gate up
front; another client is still gated; tier-0 calls never are; server_info, the audit log and the metrics show it.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import jsonschema
import pytest
from mcp import Client

from relay_shell.audit.log import AuditLog
from relay_shell.runbooks.retrieval import Retrieval
from relay_shell.server import build_server
from relay_shell.settings.model import Settings
from tests.conftest import read_records, text_of
from tests.e2e.runbooks.helpers import GUARDS, runbook_client, sha256_of, write_corpus

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("gate-corpus") / "runbooks")


@pytest.fixture
def audit_path(tmp_path: Path) -> Path:
    return tmp_path / "audit.jsonl"


@pytest.fixture
async def gated(audit_path: Path, corpus: Path) -> AsyncIterator[Client]:
    async with runbook_client(audit_path, corpus, "legacy", gate="briefing", metrics_addr="127.0.0.1:0") as client:
        yield client


async def test_the_first_call_is_briefed_instead_of_run_and_the_repeat_runs(
    gated: Client, audit_path: Path, corpus: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    # Only echoed: the words (restart, postgresql) select the runbook; nothing is restarted on the test machine.
    command = f"echo systemctl restart postgresql; touch {marker}"
    first = await gated.call_tool("shell_exec", {"command": command})
    assert first.is_error
    text = text_of(first)
    assert text.startswith("[GATED: this MCP session has not been briefed on the team's runbooks")
    assert not marker.exists()  # nothing ran
    assert "Never restart or fail over the primary database" in text  # a priority-10 runbook, in full
    assert "db-restart-replica" in text  # selected by the call's words (restart, postgresql)
    assert "begin_session" in text and "repeat the identical call" in text
    structured = first.structured_content
    assert structured is not None and structured["status"] == "gated" and structured["exit_code"] is None
    schema = next(tool.output_schema for tool in (await gated.list_tools()).tools if tool.name == "shell_exec")
    assert schema is not None and set(structured) == set(schema["properties"])  # shell_exec's own fields, all
    jsonschema.validate(structured, schema)
    record = read_records(audit_path)[-1]
    assert record["tool"] == "gate:brief" and record["gated_tool"] == "shell_exec" and record["outcome"] == "gated"
    assert record["tier"] >= 1 and record["args"]["command"] == command
    shown = {item["name"]: item["sha256"] for item in record["runbooks"]}
    assert set(GUARDS) <= set(shown)
    assert shown["guard-primary-db"] == sha256_of(corpus / "guards" / "primary.md")

    second = await gated.call_tool("shell_exec", {"command": command})
    assert not second.is_error and text_of(second) == "[exit 0]\nsystemctl restart postgresql\n"
    assert marker.exists()
    # A different call is still briefed first: the gate opens per call, or for the session with begin_session.
    other = await gated.call_tool("shell_exec", {"command": f"touch {tmp_path}/other"})
    assert text_of(other).startswith("[GATED:")
    observe = await gated.call_tool("shell_exec", {"command": "echo observe"})  # tier 0: never held
    assert text_of(observe) == "[exit 0]\nobserve\n"


async def test_tier_0_calls_are_never_gated(gated: Client) -> None:
    for tool, arguments in [
        ("server_info", {}),
        ("audit_tail", {"lines": 1}),
        ("runbook_search", {"tags": ["postgres"]}),
        ("session_list", {}),
    ]:
        result = await gated.call_tool(tool, arguments)
        assert not text_of(result).startswith("[GATED"), (tool, text_of(result))
    info = (await gated.call_tool("server_info", {})).structured_content
    assert info is not None
    assert info["info"]["gate"] == {
        "mode": "briefing",
        "this_session": "closed",
        "briefed_calls": 0,
        "sessions_open": 0,
    }


async def test_begin_session_opens_the_gate_and_another_client_stays_gated(
    gated: Client, audit_path: Path, corpus: Path, tmp_path: Path
) -> None:
    briefing = await gated.call_tool("begin_session", {"tags": ["postgres", "failover", "db1", "replica", "primary"]})
    assert not briefing.is_error, text_of(briefing)
    found = briefing.structured_content
    assert found is not None and found["gate"] == "open"
    names = [item["name"] for item in found["runbooks"]]
    assert set(names[:2]) == set(GUARDS) and "db-failover" in names
    assert "The briefing gate is now open for this session" in text_of(briefing)
    records = read_records(audit_path)
    opened = [record for record in records if record["tool"] == "gate:open"]
    assert len(opened) == 1 and {item["name"] for item in opened[0]["runbooks"]} == set(names)
    assert records[-1]["tool"] == "begin_session"
    info = (await gated.call_tool("server_info", {})).structured_content
    assert info is not None and info["info"]["gate"]["this_session"] == "open"

    marker = tmp_path / "opened"
    ran = await gated.call_tool("shell_exec", {"command": f"touch {marker}"})
    assert text_of(ran) == "[exit 0]" and marker.exists()

    async with runbook_client(tmp_path / "other-audit.jsonl", corpus, "legacy", gate="briefing") as other:
        second_marker = tmp_path / "other"
        held = await other.call_tool("shell_exec", {"command": f"touch {second_marker}"})
        assert text_of(held).startswith("[GATED:") and not second_marker.exists()


async def test_begin_session_opens_the_gate_for_a_2026_client(tmp_path: Path, corpus: Path) -> None:
    """The other era (each request its own message). Two clients of one server: test_http.py."""
    async with runbook_client(tmp_path / "audit.jsonl", corpus, "auto", gate="briefing") as modern:
        opened = await modern.call_tool("begin_session", {"tags": ["deploy"]})
        assert (opened.structured_content or {})["gate"] == "open"
        ran = await modern.call_tool("shell_exec", {"command": f"touch {tmp_path}/modern"})
        assert text_of(ran) == "[exit 0]" and (tmp_path / "modern").exists()


async def test_gated_calls_are_counted_in_the_metrics(gated: Client, tmp_path: Path) -> None:
    held = await gated.call_tool("shell_exec", {"command": f"touch {tmp_path}/counted"})
    assert text_of(held).startswith("[GATED:")
    info = (await gated.call_tool("server_info", {})).structured_content
    assert info is not None
    port = info["info"]["metrics"]["listen_port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        exposition = response.read().decode()
    assert 'relay_shell_gated_calls_total{tool="shell_exec"} 1.0' in exposition
    assert 'relay_shell_tool_calls_total{outcome="gated",tier="1",tool="gate:brief"} 1.0' in exposition


async def test_without_the_gate_nothing_is_held(tmp_path: Path, corpus: Path) -> None:
    async with runbook_client(tmp_path / "audit.jsonl", corpus, "legacy") as client:
        ran = await client.call_tool("shell_exec", {"command": f"touch {tmp_path}/free"})
        assert text_of(ran) == "[exit 0]"
        briefing = await client.call_tool("begin_session", {"tags": ["postgres"]})
        assert (briefing.structured_content or {})["gate"] == "off"
        assert "gate:open" not in {record["tool"] for record in read_records(tmp_path / "audit.jsonl")}
        assert json.dumps((await client.call_tool("server_info", {})).structured_content)


async def test_a_begin_session_whose_briefing_failed_leaves_the_gate_shut(
    tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Simulated fault: no runbook directory makes a briefing fail once the server runs (unreadable files are
    skipped, changed ones re-read), so the briefing is replaced by one that raises, in an in-process server with a
    real client. The failed begin_session must not open the gate."""

    def failing_briefing(self: Retrieval, keywords: list[str], max_bytes: int) -> None:
        raise RuntimeError("briefing failed")

    monkeypatch.setattr(Retrieval, "session_briefing", failing_briefing)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    audit_path = tmp_path / "audit.jsonl"
    audit_log = AuditLog(audit_path, chain=True, fsync=False)
    audit_log.open()
    assembly = build_server(
        Settings(audit={"audit_path": audit_path}, runbooks={"runbook_dir": corpus, "gate": "briefing"}), audit_log
    )
    try:
        async with Client(assembly.mcp, mode="legacy") as client:
            failed = await client.call_tool("begin_session", {"tags": ["postgres", "replica"]})
            assert failed.is_error and text_of(failed).startswith("[ERROR: Internal: RuntimeError")
            info = (await client.call_tool("server_info", {})).structured_content
            assert info is not None and info["info"]["gate"]["this_session"] == "closed"
            marker = tmp_path / "marker"
            held = await client.call_tool("shell_exec", {"command": f"touch {marker}"})
            assert text_of(held).startswith("[GATED:") and not marker.exists()
    finally:
        await assembly.shutdown()
        audit_log.close()
    labels = [record["tool"] for record in read_records(audit_path)]
    assert "gate:open" not in labels and labels.count("gate:brief") == 1
