"""The audit log failing at run time: refuse (default) never runs the call; continue runs it and says so."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import connect, read_records, text_of

pytestmark = pytest.mark.anyio


def break_log_directory(directory: Path) -> None:
    # Replace the directory with a regular file: the log path can no longer be opened, even by root.
    # A real filesystem fault, no mock.
    shutil.rmtree(directory)
    directory.write_text("not a directory")


def repair_log_directory(directory: Path) -> None:
    directory.unlink()
    directory.mkdir(mode=0o700)


async def test_fail_closed_refuses_before_running(tmp_path: Path) -> None:
    log_directory = tmp_path / "logs"
    audit_path = log_directory / "audit.jsonl"
    marker = tmp_path / "ran"
    async with connect(audit_path) as client:
        ok = await client.call_tool("shell_exec", {"command": "echo fine"})
        assert text_of(ok) == "[exit 0]\nfine\n"
        break_log_directory(log_directory)
        refused = await client.call_tool("shell_exec", {"command": f"touch {marker}"})
        assert refused.is_error
        assert text_of(refused).startswith("[ERROR: AuditUnavailable: ")
        assert "refused" in text_of(refused)
        assert not marker.exists()
        repair_log_directory(log_directory)
        again = await client.call_tool("shell_exec", {"command": "echo back"})
        assert text_of(again) == "[exit 0]\nback\n"
        info = await client.call_tool("server_info", {})
        assert info.structured_content is not None
        assert info.structured_content["info"]["audit"]["write_errors"] >= 1
    records = read_records(audit_path)
    assert records[0]["tool"] == "audit:continue"  # the new file links back to the lost one


async def test_continue_mode_runs_and_reports_degraded(tmp_path: Path) -> None:
    log_directory = tmp_path / "logs"
    audit_path = log_directory / "audit.jsonl"
    marker = tmp_path / "ran"
    async with connect(audit_path, audit_on_failure="continue") as client:
        await client.call_tool("shell_exec", {"command": "true"})
        break_log_directory(log_directory)
        result = await client.call_tool("shell_exec", {"command": f"touch {marker} && echo done"})
        assert text_of(result) == "[exit 0]\ndone\n"
        info = await client.call_tool("server_info", {})
        assert info.structured_content is not None
        assert info.structured_content["info"]["audit"]["healthy"] is False
        assert "cannot" in info.structured_content["info"]["audit"]["last_error"]
    assert marker.exists()


async def test_record_lost_after_the_run_withholds_the_output(tmp_path: Path) -> None:
    import anyio

    log_directory = tmp_path / "logs"
    audit_path = log_directory / "audit.jsonl"
    async with connect(audit_path) as client:
        await client.call_tool("shell_exec", {"command": "true"})

        async def break_while_running() -> None:
            await anyio.sleep(0.5)
            break_log_directory(log_directory)

        async with anyio.create_task_group() as group:
            group.start_soon(break_while_running)
            result = await client.call_tool("shell_exec", {"command": "sleep 1.5; echo secret-output"})
        assert result.is_error
        text = text_of(result)
        assert text.startswith("[ERROR: AuditWriteFailed: the call ran ([exit 0])")
        assert "output withheld" in text and "secret-output" not in text
