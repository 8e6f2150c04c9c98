"""End to end: a server without CAP_SYS_ADMIN (run as `nobody` with setpriv) traces with no_new_privs on the
traced trees only, and says so: server_info (state, no_new_privs, why), and a set-user-ID program run by a call
(`su --version`) is marked in its entry and named in the call's result, since it ran without its privilege. A
program that makes itself non-dumpable (PR_SET_DUMPABLE 0) before its exec cannot be read by such a server: the
exec is listed as unreadable all the same, and refused when RELAY_SHELL_EXEC_DENY is configured (fail closed).
Needs root to switch users; fails (does not skip) where it cannot. The server runs an interpreter nobody can read
(tests/unprivileged.py: this run's own, or a mirror of it when it lives under /root, as pyenv's do)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.conftest import fields, read_records, server_env, text_of
from tests.e2e.trace.attacks import NODUMP, compile_program
from tests.unprivileged import as_nobody, unprivileged_python

pytestmark = pytest.mark.anyio


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory `nobody` may write (pytest's tmp_path is root's alone)."""
    directory = Path(tempfile.mkdtemp(prefix="relay-trace-nobody-"))
    os.chmod(directory, 0o777)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def server_as_nobody(shared_dir: Path, **settings: str) -> StdioServerParameters:
    """relay-shell as nobody; the trace `on` unless `exec_trace` says otherwise ("" for the default, auto)."""
    assert os.geteuid() == 0, "this test switches to nobody with setpriv: run it as root"
    python = unprivileged_python()
    settings = {"exec_trace": "on", **settings}
    if not settings["exec_trace"]:
        del settings["exec_trace"]
    env = server_env(shared_dir / "audit.jsonl", **settings)
    env["HOME"] = str(shared_dir)
    env.update(python.env)
    command = as_nobody([python.executable, "-m", "relay_shell"])
    return StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=shared_dir)


def last_end(audit_path: Path) -> dict[str, Any]:
    return [record for record in read_records(audit_path) if record.get("phase") == "end"][-1]


async def test_unprivileged_server_traces_with_no_new_privs_and_says_so(shared_dir: Path) -> None:
    audit_path = shared_dir / "audit.jsonl"
    nodump = compile_program(NODUMP, shared_dir / "nodump")
    async with Client(server_as_nobody(shared_dir)) as client:  # type: ignore[arg-type]
        info = fields(await client.call_tool("server_info", {}))["info"]["exec_trace"]
        assert info["state"] == "on" and info["no_new_privs"] is True, info
        assert "set-user-ID" in info["reason"], info
        result = await client.call_tool("shell_exec", {"command": "id -u; su --version"})
        text = text_of(result)
        assert fields(result)["status"] == "ok", text
        assert "set-user-ID program(s) ran without their privilege" in text
        end = last_end(audit_path)
        entries = end["execs"]["entries"]
        su = [entry for entry in entries if entry["path"].endswith("/su")]
        assert su and su[0]["setid_dropped"] is True and end["execs"]["setid_dropped"] == 1
        assert any(entry["argv"] == ["id", "-u"] for entry in entries)
        # A program this server may not read: its exec runs (no EXEC_DENY here) and is listed as unreadable.
        result = await client.call_tool("shell_exec", {"command": [str(nodump), "MARK-nodump"], "use_shell": False})
        assert "MARK-nodump" in text_of(result)
        execs = last_end(audit_path)["execs"]
        unreadable = [entry for entry in execs["entries"] if entry.get("error") == "unreadable"]
        assert execs["count"] == 2 and len(unreadable) == 1, execs
        assert unreadable[0]["path"] is None and unreadable[0]["ok"] is True and unreadable[0]["ppid"] > 0


async def test_an_unreadable_exec_is_refused_when_exec_deny_is_configured(shared_dir: Path) -> None:
    """EXEC_DENY cannot check an exec it cannot read: it fails closed, and the result says so."""
    nodump = compile_program(NODUMP, shared_dir / "nodump")
    async with Client(server_as_nobody(shared_dir, exec_deny='["^/never/matches$"]')) as client:  # type: ignore[arg-type]
        result = await client.call_tool("shell_exec", {"command": [str(nodump), "MARK-nodump"], "use_shell": False})
        text = text_of(result)
        assert "MARK-nodump" not in text.splitlines() and "could not be read" in text, text
        execs = last_end(shared_dir / "audit.jsonl")["execs"]
        refused = [entry for entry in execs["entries"] if entry.get("error") == "unreadable"]
        assert execs["denied"] == 1 and len(refused) == 1 and refused[0]["denied"] is True, execs


async def test_by_default_a_users_open_server_is_untraced_and_says_why(shared_dir: Path) -> None:
    """`auto` (adr/0027): tracing here would need no_new_privs on every command, which takes sudo and su from
    them; an open or guarded server run as a user is left untraced, and says so."""
    async with Client(server_as_nobody(shared_dir, exec_trace="")) as client:  # type: ignore[arg-type]
        info = fields(await client.call_tool("server_info", {}))["info"]["exec_trace"]
        assert (info["state"], info["setting"], info["no_new_privs"]) == ("off", "auto", False), info
        assert info["reason"].startswith("auto: not root") and "set-user-ID" in info["reason"], info
        result = await client.call_tool("shell_exec", {"command": "su --version"})
        assert "set-user-ID" not in text_of(result)  # nothing ran without its privilege
    assert "execs" not in last_end(shared_dir / "audit.jsonl")


async def test_by_default_a_users_readonly_server_is_traced(shared_dir: Path) -> None:
    """`auto` in readonly mode: every tree gets no_new_privs there anyway, so the trace takes nothing more."""
    async with Client(server_as_nobody(shared_dir, exec_trace="", policy_mode="readonly")) as client:  # type: ignore[arg-type]
        info = fields(await client.call_tool("server_info", {}))["info"]["exec_trace"]
        assert (info["state"], info["setting"], info["no_new_privs"]) == ("on", "auto", True), info
        assert info["reason"].startswith("auto: readonly mode"), info
        result = await client.call_tool("shell_exec", {"command": "ls / >/dev/null; id -u"})
        assert fields(result)["status"] == "ok", text_of(result)
    entries = last_end(shared_dir / "audit.jsonl")["execs"]["entries"]
    assert [entry["argv"] for entry in entries][-2:] == [["ls", "/"], ["id", "-u"]], entries
