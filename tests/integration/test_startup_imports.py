"""Startup stays free of asyncssh: importing it costs about 250 ms (ssh/access.py), paid on the first SSH call,
not by every server start. A fresh interpreter imports the command line and both transports, then runs the real
startup (`relay_shell.cli.main`, the code `relay-shell` runs): stdio answering initialize, tools/list and a
shell_exec, HTTP until it listens and serves /metrics. At exit it writes down which asyncssh modules it loaded."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from tests.conftest import REPO_ROOT, server_env

# Runs as `python -c PROBE RESULT_PATH [relay-shell arguments]`: imports what startup imports, serves, and at the
# end records what the interpreter loaded.
PROBE = """
import json, sys
import relay_shell.cli, relay_shell.http, relay_shell.server, relay_shell.stdio
code = relay_shell.cli.main(sys.argv[2:])
asyncssh = sorted(name for name in sys.modules if name == "asyncssh" or name.startswith("asyncssh."))
ours = sorted(name for name in sys.modules if name.startswith("relay_shell"))
with open(sys.argv[1], "w") as result:
    json.dump({"exit": code, "asyncssh": asyncssh, "relay_shell": ours}, result)
"""


def probe(result_path: Path, audit_path: Path, *arguments: str, **settings: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", PROBE, str(result_path), *arguments],
        env=server_env(audit_path, **settings),
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def answer(process: subprocess.Popen[bytes], request_id: int) -> dict[str, Any]:
    assert process.stdout is not None
    while True:
        line = process.stdout.readline()
        assert line, f"the server closed stdout before answering request {request_id}"
        message: dict[str, Any] = orjson.loads(line)
        if message.get("id") == request_id:
            return message


def send(process: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert process.stdin is not None
    process.stdin.write(orjson.dumps({"jsonrpc": "2.0", **message}) + b"\n")
    process.stdin.flush()


def result_of(result_path: Path, process: subprocess.Popen[bytes]) -> dict[str, Any]:
    """What the probe loaded, once the server has stopped (it exits 0, as after any clean stop)."""
    try:
        process.wait(timeout=30)
    finally:
        process.kill()  # no-op once it has exited
    assert process.stderr is not None
    stderr = process.stderr.read().decode()
    assert process.returncode == 0, stderr
    loaded: dict[str, Any] = json.loads(result_path.read_text())
    assert loaded["exit"] == 0, stderr
    return loaded


def test_a_stdio_server_starts_lists_its_tools_and_runs_a_command_without_asyncssh(tmp_path: Path) -> None:
    result_path = tmp_path / "loaded.json"
    process = probe(result_path, tmp_path / "audit.jsonl")
    try:
        hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}
        send(process, {"id": 1, "method": "initialize", "params": hello})
        assert "result" in answer(process, 1)
        send(process, {"method": "notifications/initialized"})
        send(process, {"id": 2, "method": "tools/list"})
        tools = {tool["name"] for tool in answer(process, 2)["result"]["tools"]}
        assert {"shell_exec", "ssh_exec", "ssh_fanout", "ssh_forward"} <= tools  # the SSH tools are listed all the same
        call = {"name": "shell_exec", "arguments": {"command": "echo hi"}}
        send(process, {"id": 3, "method": "tools/call", "params": call})
        assert answer(process, 3)["result"]["content"][0]["text"].startswith("[exit 0]")
    finally:
        assert process.stdin is not None
        process.stdin.close()  # end of input: the server shuts down and the probe writes what it loaded
    loaded = result_of(result_path, process)
    assert "relay_shell.ssh.access" in loaded["relay_shell"]  # the SSH side was assembled, lazily
    assert "relay_shell.policy.classify" in loaded["relay_shell"]  # the call loaded the classifier
    assert loaded["asyncssh"] == [], "startup imported asyncssh (ssh/access.py: it belongs to the first SSH call)"


# Loaded on first use, not by a start that answers initialize (bench_startup: the start within 1.15x of a bare
# MCPServer): the policy classifier with its rule modules and tables (the first call), the result models (a tool's
# first call, or tools/list on a cold schema cache), the runbook search (the first briefing).
LAZY_AT_START = ("relay_shell.policy.classify", "relay_shell.result_models", "relay_shell.runbooks.search")
INITIALIZE_ONLY = """
import json, sys
import relay_shell.cli
code = relay_shell.cli.main(sys.argv[2:])
ours = sorted(name for name in sys.modules if name.startswith("relay_shell"))
with open(sys.argv[1], "w") as result:
    json.dump({"exit": code, "relay_shell": ours}, result)
"""


def test_a_start_that_only_answers_initialize_loads_no_classifier_result_models_or_runbook_search(
    tmp_path: Path,
) -> None:
    environment = server_env(tmp_path / "audit.jsonl")
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}
    for round_number in range(2):  # the first start may build the schema cache (which needs the result models)
        result_path = tmp_path / f"loaded-{round_number}.json"
        process = subprocess.Popen(
            [sys.executable, "-c", INITIALIZE_ONLY, str(result_path)],
            env=environment,
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            send(process, {"id": 1, "method": "initialize", "params": hello})
            assert "result" in answer(process, 1)
        finally:
            assert process.stdin is not None
            process.stdin.close()
        loaded = result_of(result_path, process)
    assert "relay_shell.server" in loaded["relay_shell"]  # the probe did start the whole server
    assert [name for name in LAZY_AT_START if name in loaded["relay_shell"]] == []


def test_an_http_server_starts_and_serves_without_asyncssh(tmp_path: Path) -> None:
    result_path = tmp_path / "loaded.json"
    process = probe(result_path, tmp_path / "audit.jsonl", "--transport", "http", http_port="0")
    assert process.stderr is not None
    url = None
    deadline = time.monotonic() + 20
    while url is None and time.monotonic() < deadline:
        line = process.stderr.readline().decode()
        assert line, "the HTTP server exited before it listened"
        found = re.search(r"speaking MCP at (http://\S+)/mcp", line)
        url = found.group(1) if found else None
    try:
        assert url is not None, "the HTTP server did not say where it listens"
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as metrics:
            assert b"relay_shell" in metrics.read()
    finally:
        process.send_signal(signal.SIGTERM)  # a graceful stop: the probe writes what it loaded
    loaded = result_of(result_path, process)
    assert "relay_shell.http" in loaded["relay_shell"]
    assert loaded["asyncssh"] == [], "startup imported asyncssh (ssh/access.py: it belongs to the first SSH call)"


def test_with_the_exec_trace_off_nothing_of_the_trace_is_loaded(tmp_path: Path) -> None:
    """The exec trace is off by default, and then nothing under relay_shell/trace/ is imported, neither at start
    nor by a command or a PTY session (the launch point's null objects stand in for it). The same start with the
    trace on loads it: the probe sees what it is looking for."""
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}
    loaded: dict[str, list[str]] = {}
    for setting in ("off", "on"):
        result_path = tmp_path / f"loaded-{setting}.json"
        process = probe(result_path, tmp_path / f"audit-{setting}.jsonl", exec_trace=setting)
        try:
            send(process, {"id": 1, "method": "initialize", "params": hello})
            assert "result" in answer(process, 1)
            send(process, {"method": "notifications/initialized"})
            call = {"name": "shell_exec", "arguments": {"command": "echo hi"}}
            send(process, {"id": 2, "method": "tools/call", "params": call})
            assert answer(process, 2)["result"]["content"][0]["text"].startswith("[exit 0]")
            spawn = {"name": "shell_spawn", "arguments": {"command": "echo spawned", "timeout": 5}}
            send(process, {"id": 3, "method": "tools/call", "params": spawn})
            assert "spawned" in answer(process, 3)["result"]["content"][0]["text"]
        finally:
            assert process.stdin is not None
            process.stdin.close()
        modules = result_of(result_path, process)["relay_shell"]
        loaded[setting] = [name for name in modules if name.startswith("relay_shell.trace")]
    assert loaded["off"] == [], "the exec trace is off, yet the server imported " + ", ".join(loaded["off"])
    assert "relay_shell.trace.tracer" in loaded["on"] and "relay_shell.trace.tree" in loaded["on"], loaded["on"]
