"""End to end: the exec trace's counters on the metrics listener agree with server_info, and promtool accepts
the exposition."""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import connect, fields

pytestmark = pytest.mark.anyio


async def test_traced_and_denied_execs_are_counted(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    standin = bindir / "nc"
    standin.write_text("#!/bin/sh\necho standin\n")
    standin.chmod(0o755)
    path = f"{bindir}:/usr/bin:/bin"
    async with connect(tmp_path / "audit.jsonl", metrics_addr="127.0.0.1:0", exec_deny=r"(^|/)nc( |$)") as client:
        await client.call_tool("shell_exec", {"command": "ls / >/dev/null; nc -h; true", "env": {"PATH": path}})
        info = fields(await client.call_tool("server_info", {}))["info"]
        with urllib.request.urlopen(f"http://127.0.0.1:{info['metrics']['listen_port']}/metrics", timeout=10) as got:
            exposition = got.read().decode()
    traced = info["exec_trace"]
    assert traced["execs_traced"] == 3 and traced["execs_denied"] == 1  # sh -c, ls, the refused nc
    assert "relay_shell_execs_traced_total 3.0" in exposition
    assert "relay_shell_execs_denied_total 1.0" in exposition
    checked = subprocess.run(["promtool", "check", "metrics"], input=exposition, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
