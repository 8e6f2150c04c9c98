"""The log the report tests read: written by real relay-shell servers over stdio, driven by the SDK client.

Server A (exec trace on, transcripts in RECORD_DIR, tier-3 confirmation by token, signed checkpoints, a deny rule,
the module's sshd fleet): local calls, a denied call, a tier-3 `shred` confirmed with operation_confirm, a PTY session
typing a line, a fan-out over two real sshd hosts, a call whose output is cut, a timeout, and a command that carries
markup (`</script><img onerror=…>`), to show it stays text. Server B is killed with SIGKILL in the middle of a call;
server C (guarded mode) starts on the same log and names the call B left interrupted.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from mcp import Client

from tests.conftest import connect, fields, read_records, server_env, text_of
from tests.e2e.audit.test_write_ahead import end_process_groups_running, wait_for_start_record
from tests.integration.test_stdio_transport import INITIALIZE, INITIALIZED, exchange
from tests.sshd import SshFleet

PROMPT = "REPORT> "
TYPED = "echo typed-$((6*7))"
LOCAL = "echo report-local | tr a-z A-Z"
DENIED = "curl http://192.0.2.1/"
SHRED = "shred -u victim"
CUT = "seq 1 200000"
SLOW = "sleep 5"
MARKUP = "echo '</script><script>window.pwned=1</script><img src=x onerror=\"window.pwned=2\">'; sleep 5"
CRASHED = "sleep 30; echo never-{token}"


@dataclass(frozen=True)
class Served:
    audit: Path
    casts: Path
    public_key: Path
    session_id: str
    crashed_call_id: str
    fanout_hosts: tuple[str, ...]

    def records(self) -> list[dict[str, Any]]:
        return read_records(self.audit)

    def call_of(self, command: str, tool: str = "shell_exec") -> dict[str, Any]:
        """The last end record of the call that ran `command`."""
        found = [
            record
            for record in self.records()
            if record.get("tool") == tool and record.get("phase") == "end" and record["args"].get("command") == command
        ]
        assert found, command
        return found[-1]


async def _server_a(client: Client, work: Path, hosts: tuple[str, ...]) -> str:
    assert text_of(await client.call_tool("shell_exec", {"command": LOCAL})).startswith("[exit 0]")
    assert (await client.call_tool("shell_exec", {"command": DENIED})).is_error
    victim = work / "victim"
    victim.write_text("precious\n")
    asked = await client.call_tool("shell_exec", {"command": SHRED, "cwd": str(work)})
    token = fields(asked)["confirm_token"]
    assert not (await client.call_tool("operation_confirm", {"token": token})).is_error
    ran = await client.call_tool("shell_exec", {"command": SHRED, "cwd": str(work)})
    assert not ran.is_error and not victim.exists(), text_of(ran)
    spawned = await client.call_tool(
        "shell_spawn",
        {"command": "bash --norc --noprofile", "env": {"PS1": PROMPT}, "until": f"^{PROMPT}$", "timeout": 10},
    )
    session_id = str(fields(spawned)["session_id"])
    typed = await client.call_tool(
        "session_send", {"session_id": session_id, "data": TYPED, "until": f"^{PROMPT}$", "timeout": 10}
    )
    assert "typed-42" in text_of(typed), text_of(typed)
    await client.call_tool("session_recv", {"session_id": session_id})
    assert not (await client.call_tool("session_kill", {"session_id": session_id})).is_error
    fanout = await client.call_tool("ssh_fanout", {"command": "hostname", "hosts": ",".join(hosts), "timeout": 20})
    assert not fanout.is_error, text_of(fanout)
    assert "[TRUNCATED" in text_of(await client.call_tool("shell_exec", {"command": CUT}))
    assert (await client.call_tool("shell_exec", {"command": SLOW, "timeout": 1})).is_error
    assert (await client.call_tool("shell_exec", {"command": MARKUP, "timeout": 1})).is_error  # listed: a timeout
    return session_id


def _crash_server_b(audit: Path, token: str) -> str:
    """Server B on the same log, killed with SIGKILL while its call runs: the call's start record stays alone."""
    command = CRASHED.format(token=token)
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "shell_exec", "arguments": {"command": command, "timeout": 120}},
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "relay_shell"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=server_env(audit),
    )
    try:
        exchange(server, [orjson.dumps(INITIALIZE), INITIALIZED])
        assert server.stdin is not None
        server.stdin.write(orjson.dumps(call) + b"\n")
        server.stdin.flush()
        started = wait_for_start_record(audit, command)
        server.send_signal(signal.SIGKILL)
        assert server.wait(timeout=10) == -signal.SIGKILL
    finally:
        if server.poll() is None:
            server.kill()
        end_process_groups_running(f"never-{token}")
    return str(started["call_id"])


async def serve(directory: Path, fleet: SshFleet) -> Served:
    audit = directory / "audit.jsonl"
    casts = directory / "casts"
    key = directory / "signing.key"
    made = subprocess.run(
        [sys.executable, "-m", "relay_shell", "audit", "keygen", str(key)], capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    work = directory / "work"
    work.mkdir()
    hosts = ("h01", "h02")
    settings = {
        "exec_trace": "on",
        "record_dir": str(casts),
        "confirm_tier3": "token",
        "ssh_config": str(fleet.ssh_config),
        "policy_deny": r"^curl ",
        "audit_signing_key": str(key),
    }
    async with connect(audit, **settings) as client:
        session_id = await _server_a(client, work, hosts)
    crashed = _crash_server_b(audit, directory.name)
    async with connect(audit, policy_mode="guarded") as client:
        assert not (await client.call_tool("shell_exec", {"command": "echo after-the-crash"})).is_error
    return Served(audit, casts, Path(f"{key}.pub"), session_id, crashed, hosts)
