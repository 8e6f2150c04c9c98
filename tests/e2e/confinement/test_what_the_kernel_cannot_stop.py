"""End to end: what the kernel cannot stop in readonly (adr/0024, "What the kernel cannot stop"): asking a daemon
to write. The test runs a daemon on a unix socket (as docker.sock, systemd's D-Bus or a database's socket are);
a confined call can still connect and send. The classifier is what refuses the clients that would ask for a
change; a request it admits (an HTTP GET) or a program it cannot read reaches the daemon. Abstract unix sockets,
unlike paths, are scoped by the kernel (ABI 6)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import fields, read_records, text_of
from tests.e2e.confinement.helpers import Daemon, serve

pytestmark = pytest.mark.anyio

# Under the name of a read-only command: what a classifier miss looks like (it cannot read the script).
HOSTNAME_SH = """#!/bin/sh
curl -s --unix-socket "$DAEMON_SOCKET" -X POST http://daemon/containers/web/stop -o /dev/null \\
  && echo "asked the daemon"
curl -s --abstract-unix-socket "$DAEMON_ABSTRACT" http://daemon/abstract -o /dev/null || echo "abstract refused"
"""


async def test_a_confined_call_can_still_ask_a_daemon_the_classifier_refuses_the_clients(tmp_path: Path) -> None:
    assert shutil.which("curl"), "curl is needed"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "hostname").write_text(HOSTNAME_SH)
    (bin_dir / "hostname").chmod(0o755)
    socket_path = tmp_path / "daemon.sock"
    daemon = Daemon(socket_path)
    audit_path = tmp_path / "audit.jsonl"
    env = {
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "DAEMON_SOCKET": str(socket_path),
        "DAEMON_ABSTRACT": daemon.abstract_name,
    }
    refused_clients = [
        f"curl --unix-socket {socket_path} -X POST http://daemon/containers/web/stop",
        f"nc -U {socket_path}",
        f"socat - UNIX-CONNECT:{socket_path}",
        "docker stop web",
        "systemctl stop nginx",
        "busctl call org.freedesktop.systemd1 /org/freedesktop/systemd1 org.freedesktop.systemd1.Manager "
        "StopUnit ss nginx.service replace",
        "psql -c 'DELETE FROM users'",
        "redis-cli -s /run/redis.sock config set dir /etc",
    ]
    try:
        async with serve(audit_path, env, policy_mode="readonly") as client:
            denied = [await client.call_tool("shell_exec", {"command": command}) for command in refused_clients]
            assert daemon.requests == []  # nothing of them ran
            get = await client.call_tool(
                "shell_exec", {"command": f"curl -s --unix-socket {socket_path} http://daemon/containers/json"}
            )
            missed = await client.call_tool("shell_exec", {"command": "hostname"})
    finally:
        daemon.close()
    for command, result in zip(refused_clients, denied, strict=True):
        assert fields(result)["status"] == "denied", (command, text_of(result))
    assert fields(get)["status"] == "ok" and text_of(get).rstrip().endswith("{}"), text_of(get)
    # The classifier admitted `hostname`; the kernel let the confined script reach the daemon by its path, and
    # refused it the abstract socket.
    assert "asked the daemon" in text_of(missed) and "abstract refused" in text_of(missed), text_of(missed)
    assert daemon.requests == ["GET /containers/json HTTP/1.1", "POST /containers/web/stop HTTP/1.1"]
    ends = [r for r in read_records(audit_path) if r.get("tool") == "shell_exec" and r.get("phase") == "end"]
    assert ends[-1]["confinement"].startswith("landlock ABI ")
