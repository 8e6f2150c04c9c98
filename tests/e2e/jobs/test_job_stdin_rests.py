"""A job's stdin read in two parts (review J2 of /work/plan/attack3-findings.md; adr/0026 Round 5), through a real
relay-shell over stdio: `dd bs=1 count=1; sh` takes one byte and the shell runs the rest, so every rest of a line
sent to a job is classified as its stdin too; a Python job's lines are not read as shell text for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import connect, fields, text_of

pytestmark = pytest.mark.anyio


async def test_the_rest_of_a_line_a_one_byte_reader_leaves_to_the_shell_is_classified(tmp_path: Path) -> None:
    doomed = tmp_path / "doomed"
    (doomed / "sub").mkdir(parents=True)
    (doomed / "sub" / "keep.txt").write_text("precious")
    async with connect(tmp_path / "audit.jsonl", policy_mode="guarded") as client:
        started = await client.call_tool(
            "shell_exec",
            {"command": "dd bs=1 count=1 >/dev/null 2>&1; sh", "stdin_open": True, "yield_after": 1, "timeout": 30},
        )
        job_id = fields(started)["job_id"]
        sent = await client.call_tool("session_send", {"session_id": job_id, "data": f"Xrm -rf {doomed}", "timeout": 1})
        # On main: admitted at tier 1 (`Xrm`), dd read `X`, sh deleted the tree.
        assert text_of(sent).startswith("[DENIED tier 3 "), text_of(sent)
        harmless = await client.call_tool("session_send", {"session_id": job_id, "data": "Xecho done", "timeout": 1})
        assert not harmless.is_error, text_of(harmless)
        ended = await client.call_tool("session_send", {"session_id": job_id, "keys": ["ctrl-d"], "timeout": 10})
        assert text_of(ended).startswith("[exit 0]"), text_of(ended)
    assert (doomed / "sub" / "keep.txt").read_text() == "precious"


async def test_a_python_job_is_not_refused_for_what_its_lines_would_be_as_shell_text(tmp_path: Path) -> None:
    async with connect(tmp_path / "audit.jsonl", policy_mode="guarded") as client:
        started = await client.call_tool(
            "shell_exec", {"command": "python3 -u", "stdin_open": True, "yield_after": 1, "timeout": 30}
        )
        job_id = fields(started)["job_id"]
        sent = await client.call_tool(
            "session_send", {"session_id": job_id, "data": "print('platform', 'chmod', 'kill')", "timeout": 1}
        )
        assert not sent.is_error, text_of(sent)
        ended = await client.call_tool("session_send", {"session_id": job_id, "keys": ["ctrl-d"], "timeout": 10})
        assert "platform chmod kill" in text_of(ended), text_of(ended)
