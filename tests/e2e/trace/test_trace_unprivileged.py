"""End to end: a server without CAP_SYS_ADMIN (run as `nobody` with setpriv) traces with no_new_privs on the
traced trees only, and says so: server_info (state, no_new_privs, why), and a set-user-ID program run by a call
(`su --version`) is marked in its entry and named in the call's result, since it ran without its privilege.
Needs root to switch users; fails (does not skip) where it cannot."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.conftest import fields, read_records, server_env, text_of

pytestmark = pytest.mark.anyio


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory `nobody` may write (pytest's tmp_path is root's alone)."""
    directory = Path(tempfile.mkdtemp(prefix="relay-trace-nobody-"))
    os.chmod(directory, 0o777)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


async def test_unprivileged_server_traces_with_no_new_privs_and_says_so(shared_dir: Path) -> None:
    assert os.geteuid() == 0, "this test switches to nobody with setpriv: run it as root"
    setpriv = shutil.which("setpriv")
    assert setpriv is not None, "setpriv (util-linux) is needed"
    audit_path = shared_dir / "audit.jsonl"
    env = server_env(audit_path, exec_trace="on")
    env["HOME"] = str(shared_dir)
    params = StdioServerParameters(
        command=setpriv,
        args=["--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-m", "relay_shell"],
        env=env,
    )
    async with Client(params) as client:  # type: ignore[arg-type]
        info = fields(await client.call_tool("server_info", {}))["info"]["exec_trace"]
        assert info["state"] == "on" and info["no_new_privs"] is True, info
        assert "set-user-ID" in info["reason"], info
        result = await client.call_tool("shell_exec", {"command": "id -u; su --version"})
        text = text_of(result)
        assert fields(result)["status"] == "ok", text
        assert "set-user-ID program(s) ran without their privilege" in text
    end = [record for record in read_records(audit_path) if record["tool"] == "shell_exec" and record["phase"] == "end"]
    entries = end[-1]["execs"]["entries"]
    su = [entry for entry in entries if entry["path"].endswith("/su")]
    assert su and su[0]["setid_dropped"] is True and end[-1]["execs"]["setid_dropped"] == 1
    assert any(entry["argv"] == ["id", "-u"] for entry in entries)
