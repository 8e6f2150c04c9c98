"""End to end: readonly confinement of a server that is not root (run as `nobody` with setpriv; adr/0024). Its
trees hold no capability to be fewer than, so what keeps them from the spawning thread, and through it from the
server's memory and descriptors, is the server being non-dumpable; and no_new_privs is what keeps a set-user-ID
program from gaining anything (a copy of `id` made set-user-ID root runs as root in open mode)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.conftest import fields, read_records, server_env, text_of
from tests.integration.test_confinement import WINDOW
from tests.unprivileged import as_nobody, unprivileged_python

pytestmark = pytest.mark.anyio


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory `nobody` may write (pytest's tmp_path is root's alone), with a set-user-ID root copy of `id`
    (in bin/, under its own name: the classifier admits `id` in readonly)."""
    directory = Path(tempfile.mkdtemp(prefix="relay-confine-nobody-"))
    os.chmod(directory, 0o777)
    (directory / "bin").mkdir(mode=0o755)
    setuid_id = directory / "bin" / "id"
    shutil.copy("/usr/bin/id", setuid_id)
    os.chown(setuid_id, 0, 0)
    os.chmod(setuid_id, 0o4755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def server_as_nobody(shared_dir: Path, mode: str) -> StdioServerParameters:
    assert os.geteuid() == 0, "this test switches to nobody with setpriv: run it as root"
    python = unprivileged_python()
    env = server_env(shared_dir / f"audit-{mode}.jsonl", policy_mode=mode)
    env["HOME"] = str(shared_dir)
    env.update(python.env)
    command = as_nobody([python.executable, "-m", "relay_shell"])
    return StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=shared_dir)


@pytest.mark.parametrize("mode", ["readonly", "open"])
async def test_an_unprivileged_server_confines_readonly_and_setuid_gains_nothing(shared_dir: Path, mode: str) -> None:
    async with Client(server_as_nobody(shared_dir, mode)) as client:  # type: ignore[arg-type]
        info = fields(await client.call_tool("server_info", {}))["info"]["enforcement"]
        effective = await client.call_tool(
            "shell_exec", {"command": [str(shared_dir / "bin" / "id"), "-u"], "use_shell": False}
        )
        status = await client.call_tool("shell_exec", {"command": "cat /proc/self/status"})
    if mode == "readonly":
        assert info["readonly"].startswith("landlock ABI ") and info["capabilities_kept"] == [], info
        # The set-user-ID bit did nothing (the exec trace, on in readonly by default, notes the privilege dropped).
        assert text_of(effective).splitlines()[-1] == "65534", text_of(effective)
        assert "NoNewPrivs:\t1" in text_of(status) and "CapEff:\t0000000000000000" in text_of(status)
        records = read_records(shared_dir / f"audit-{mode}.jsonl")
        ends = [r for r in records if r.get("tool") == "shell_exec" and r.get("phase") == "end"]
        assert all(end["confinement"].startswith("landlock ABI ") for end in ends), ends
    else:
        assert info["readonly"] == "off", info
        assert text_of(effective).splitlines()[1] == "0", text_of(effective)  # open mode: as before


def test_an_unprivileged_servers_spawning_thread_is_out_of_a_trees_reach(shared_dir: Path) -> None:
    """tests/integration/test_confinement.py's attack on the spawning thread, by a server that is nobody: the tree
    holds the same (no) capabilities as the thread, so the server's non-dumpability is what refuses it."""
    python = unprivileged_python()
    script = shared_dir / "window.py"
    script.write_text(WINDOW)
    env = {**os.environ, **python.env}
    command = as_nobody([python.executable, str(script)])
    finished = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=shared_dir, env=env)
    assert finished.returncode == 0, finished.stderr
    result = json.loads(finished.stdout)
    assert len(result) == 12 and all(outcome in ("EPERM", "EACCES") for outcome in result.values()), result
