"""Metrics on the loopback listener while serving stdio, checked by promtool."""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import connect, fields, read_records, text_of

pytestmark = pytest.mark.anyio


async def test_metrics_listener_passes_promtool(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    settings = {"policy_deny": '["forbidden-word"]', "max_sessions": "5", "max_concurrent_calls": "7"}
    async with connect(audit_path, metrics_addr="127.0.0.1:0", **settings) as client:
        await client.call_tool("shell_exec", {"command": "true"})
        await client.call_tool("shell_exec", {"command": "false"})
        await client.call_tool("shell_exec", {"command": "echo forbidden-word"})
        await client.call_tool("shell_exec", {"command": "true", "cwd": "/nope"})
        await client.call_tool('evil"tool{x="1"}', {})
        await client.get_prompt("operating_guide")
        await client.call_tool("shell_spawn", {"command": "cat", "timeout": 0})
        ending = await client.call_tool("shell_spawn", {"command": "head -n 1", "timeout": 0})
        ended = await client.call_tool(
            "session_send",
            {"session_id": fields(ending)["session_id"], "data": "bye", "until": r"(?!)", "timeout": 5},
        )
        assert fields(ended)["state"] == "exited", text_of(ended)
        info = await client.call_tool("server_info", {})
        assert info.structured_content is not None
        assert info.structured_content["info"]["sessions"]["open"] == 2
        port = info.structured_content["info"]["metrics"]["listen_port"]
        assert isinstance(port, int) and port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            exposition = response.read().decode()
        # Every record in the log so far went through the counter: server:start, each call's end record, and a
        # start record for each call that ran something.
        records_in_log = len(read_records(audit_path))

    assert 'relay_shell_tool_calls_total{outcome="ok",tier="0",tool="shell_exec"} 1.0' in exposition
    assert 'relay_shell_tool_calls_total{outcome="exit_nonzero",tier="0",tool="shell_exec"} 1.0' in exposition
    assert 'outcome="denied"' in exposition
    # The one denial also in the unlabelled total the burst alert reads (created at 0 at start-up: adr/0021).
    assert "relay_shell_denied_calls_total 1.0" in exposition
    assert 'relay_shell_tool_calls_total{outcome="error",tier="0",tool="unknown"} 1.0' in exposition
    assert 'tool="prompt:operating_guide"' in exposition
    assert "evil" not in exposition  # label values are server-authored, never caller text
    assert "relay_shell_tool_call_duration_seconds_bucket" in exposition
    assert records_in_log == 17  # the ended session adds its session:end
    assert f"relay_shell_audit_records_total {records_in_log}.0" in exposition
    assert "relay_shell_audit_refused_calls_total 0.0" in exposition
    assert "relay_shell_sessions_open 2.0" in exposition
    assert "relay_shell_sessions_max 5.0" in exposition  # the limits the alerts compare with (adr/0021)
    assert "relay_shell_sessions_running 1.0" in exposition  # cat waits for input, head has ended
    assert "relay_shell_calls_in_flight_max 7.0" in exposition
    assert "relay_shell_calls_in_flight 0.0" in exposition  # server_info had returned before the scrape
    assert "relay_shell_busy_refused_calls_total 0.0" in exposition
    assert "relay_shell_ssh_forwards_open 0.0" in exposition
    # 1 ms to 10 min (adr/0021)
    assert 'relay_shell_tool_call_duration_seconds_bucket{le="0.001",tool="shell_exec"}' in exposition
    assert 'relay_shell_tool_call_duration_seconds_bucket{le="600.0",tool="shell_exec"}' in exposition
    assert "relay_shell_audit_errors_total 0.0" in exposition
    assert "relay_shell_audit_degraded 0.0" in exposition

    checked = subprocess.run(["promtool", "check", "metrics"], input=exposition, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
