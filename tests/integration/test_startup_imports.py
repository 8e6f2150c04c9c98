"""Startup stays free of asyncssh: importing it costs about 250 ms (ssh/access.py), paid on the first SSH call,
not by every server start. A fresh interpreter imports the command line and both transports, then runs the real
startup (`relay_shell.cli.main`, the code `relay-shell` runs): stdio answering initialize, tools/list and a
shell_exec, HTTP until it listens and serves /metrics. At exit it writes down which asyncssh modules it loaded."""

from __future__ import annotations

import hashlib
import importlib.util
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


# Loaded on first use, not by a start that answers initialize (bench_startup: the start within 1.10x of a bare
# MCPServer): the policy classifier with its rule modules and tables (the first call), the result models (a tool's
# first call, or tools/list on a cold schema cache), the runbook search (the first briefing), the session tools'
# plans and password check (their first call) and the audit tail (audit_tail, server_info, the audit resources):
# an idle server's RSS (bench_startup, issue 27: within 1.08x of a bare MCPServer; adr/0030 Round 5).
LAZY_AT_START = (
    "relay_shell.policy.classify",
    "relay_shell.result_models",
    "relay_shell.runbooks.search",
    "relay_shell.sessions.plans",
    "relay_shell.sessions.send_plan",
    "relay_shell.sessions.job_plans",
    "relay_shell.sessions.passwords",
    "relay_shell.diagnostics",
    "relay_shell.audit.tail",
)
# Libraries a start as an MCP client makes it (no arguments, no config file) does not load either (adr/0030): the
# option parser (~0.4 MiB), pydantic-settings and the providers it imports (~2 MiB, ~9 ms; a config file's reader).
LIBRARIES_NOT_AT_START = ("argparse", "pydantic_settings")
INITIALIZE_ONLY = """
import json, sys
import relay_shell.cli
code = relay_shell.cli.main(sys.argv[2:])
ours = sorted(name for name in sys.modules if name.startswith("relay_shell"))
with open(sys.argv[1], "w") as result:
    json.dump({"exit": code, "relay_shell": ours, "modules": sorted(sys.modules)}, result)
"""


def test_a_start_that_only_answers_initialize_loads_no_classifier_result_models_or_runbook_search(
    tmp_path: Path,
) -> None:
    environment = server_env(tmp_path / "audit.jsonl")
    # Its own schema cache: a server of another checkout (another cache key) must not replace it between the starts.
    environment["XDG_CACHE_HOME"] = str(tmp_path / "cache")
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
    assert [name for name in LIBRARIES_NOT_AT_START if name in loaded["modules"]] == []


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


# Startup pays only for what is on (issue 25): the modules only a feature needs, which a start with the feature off
# must not load. The names are checked to exist (a renamed module must not let the check pass by naming nothing),
# and a start with the feature on loads the first of each list.
FEATURE_MODULES = {
    "runbooks": ("relay_shell.runbooks.library", "relay_shell.runbooks.retrieval", "relay_shell.runbooks.gate"),
    "oauth": ("relay_shell.auth.oauth",),
    # CONFIRM_TIER3 is off by default; on, the dialogue still loads with the first call that needs it.
    "confirmation": ("relay_shell.runner.confirmation", "relay_shell.confirm.binding", "relay_shell.confirm.store"),
    "shipping": (
        "relay_shell.offhost.setup",
        "relay_shell.offhost.shipper",
        "relay_shell.offhost.syslog",
        "relay_shell.offhost.journald",
        "relay_shell.offhost.checkpoints",
    ),
}
# Runs as `python -c SERVE RESULT_PATH [relay-shell arguments]`: the real startup, and at the end what it loaded.
SERVE = INITIALIZE_ONLY


def loaded_by_a_stdio_start(tmp_path: Path, *requests: dict[str, Any], **settings: str) -> list[str]:
    """The relay_shell modules a stdio server loaded, having answered initialize and then `requests`."""
    environment = server_env(tmp_path / "audit.jsonl", **settings)
    environment["XDG_CACHE_HOME"] = str(tmp_path / "cache")  # this start's own schema cache
    result_path = tmp_path / "loaded.json"
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(result_path)],
        env=environment,
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}
    try:
        send(process, {"id": 1, "method": "initialize", "params": hello})
        assert "result" in answer(process, 1)
        send(process, {"method": "notifications/initialized"})
        for number, request in enumerate(requests, start=2):
            send(process, {"id": number, **request})
            assert "result" in answer(process, number), request
    finally:
        assert process.stdin is not None
        process.stdin.close()
    names: list[str] = result_of(result_path, process)["relay_shell"]
    return names


def test_the_feature_modules_named_here_exist() -> None:
    for feature, modules in FEATURE_MODULES.items():
        for module in modules:
            assert importlib.util.find_spec(module) is not None, f"{feature}: no module {module}; rename it here"


def test_a_start_with_runbooks_oauth_shipping_and_confirmation_off_loads_none_of_them(tmp_path: Path) -> None:
    # The defaults: no RUNBOOK_DIR, GATE=off, stdio (no OAuth), no syslog, journald or signing key, CONFIRM_TIER3
    # off. Listing the tools (runbook_search among them) and running a command need none of them either.
    call = {"name": "shell_exec", "arguments": {"command": "true"}}
    loaded = loaded_by_a_stdio_start(
        tmp_path, {"method": "tools/list"}, {"method": "tools/call", "params": call}, ssh_config=""
    )
    assert "relay_shell.server" in loaded and "relay_shell.policy.classify" in loaded  # it started, and ran a call
    for feature, modules in FEATURE_MODULES.items():
        assert [module for module in modules if module in loaded] == [], f"{feature} is off"
    assert [module for module in loaded if module.startswith("relay_shell.runbooks")] == []


def test_a_start_with_runbooks_a_signing_key_and_confirmation_loads_them(tmp_path: Path) -> None:
    runbooks = tmp_path / "runbooks"
    runbooks.mkdir()
    (runbooks / "disks.md").write_text("---\ntags: [disk]\n---\n# Disks\nCheck df first.\n")
    key = tmp_path / "signing.key"
    keygen = subprocess.run(
        [sys.executable, "-m", "relay_shell", "audit", "keygen", str(key)], capture_output=True, text=True
    )
    assert keygen.returncode == 0, keygen.stderr
    confirm = {"name": "operation_confirm", "arguments": {"token": "not-a-token"}}  # the dialogue's first use
    loaded = loaded_by_a_stdio_start(
        tmp_path,
        {"method": "tools/call", "params": confirm},
        runbook_dir=str(runbooks),
        gate="briefing",
        audit_signing_key=str(key),
        confirm_tier3="token",
        ssh_config="",
    )
    assert set(FEATURE_MODULES["runbooks"]) <= set(loaded)
    assert FEATURE_MODULES["shipping"][0] in loaded
    assert set(FEATURE_MODULES["confirmation"]) <= set(loaded)


def test_an_http_start_with_oauth_loads_it(tmp_path: Path) -> None:
    token_file = tmp_path / "tokens"
    token_file.write_text(f"operator {hashlib.sha256(b'operator-token').hexdigest()}\n")
    token_file.chmod(0o600)
    environment = server_env(
        tmp_path / "audit.jsonl",
        transport="http",
        http_port="0",
        token_file=str(token_file),
        oauth_state_dir=str(tmp_path / "oauth"),
    )
    result_path = tmp_path / "loaded.json"
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(result_path)],
        env=environment,
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
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
        with urllib.request.urlopen(f"{url}/.well-known/oauth-authorization-server", timeout=10) as metadata:
            assert json.loads(metadata.read())["issuer"].startswith("http://")  # it serves OAuth
    finally:
        process.send_signal(signal.SIGTERM)  # a graceful stop: the probe writes what it loaded
    assert FEATURE_MODULES["oauth"][0] in result_of(result_path, process)["relay_shell"]


def test_with_the_exec_trace_off_nothing_of_the_trace_is_loaded(tmp_path: Path) -> None:
    """With the exec trace off (a user's open server's default, adr/0027) nothing under relay_shell/trace/ is
    imported, neither at start nor by a command or a PTY session (the launch point's null objects stand in for
    it). The same start with the trace on loads it: the probe sees what it is looking for."""
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


def test_the_first_call_of_each_lazily_loaded_tool_works_and_loads_its_modules(tmp_path: Path) -> None:
    """The modules LAZY_AT_START names for the session and diagnostics tools are imported by the tools' first
    calls: each first call answers as it would on a server that had them loaded at start."""
    environment = server_env(tmp_path / "audit.jsonl")
    environment["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    result_path = tmp_path / "loaded.json"
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(result_path)],
        env=environment,
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}
    number = 1

    def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        nonlocal number
        number += 1
        send(process, {"id": number, "method": "tools/call", "params": {"name": name, "arguments": arguments}})
        result: dict[str, Any] = answer(process, number)["result"]
        return result

    try:
        send(process, {"id": 1, "method": "initialize", "params": hello})
        assert "result" in answer(process, 1)
        send(process, {"method": "notifications/initialized"})
        spawned = call("shell_spawn", {"command": "python3 -q", "until": "^>>> ", "timeout": 10})
        assert not spawned["isError"], spawned
        session_id = spawned["structuredContent"]["session_id"]
        sent = call("session_send", {"session_id": session_id, "data": "6*7", "until": "^>>> ", "timeout": 10})
        assert not sent["isError"] and sent["structuredContent"]["wait"] == "match", sent
        assert "42" in sent["structuredContent"]["output"].split(), sent  # the echo `6*7`, the answer, the prompt
        received = call("session_recv", {"session_id": session_id, "timeout": 0.5})
        assert not received["isError"], received
        assert not call("session_resize", {"session_id": session_id, "cols": 100, "rows": 30})["isError"]
        listed = call("session_list", {})
        assert [item["session_id"] for item in listed["structuredContent"]["sessions"]] == [session_id], listed
        assert call("session_send", {"session_id": "j-000000000000", "data": "x"})["isError"]  # job_plans' path
        assert not call("session_kill", {"session_id": session_id})["isError"]
        assert not call("server_info", {})["isError"]
        tail = call("audit_tail", {"lines": 5})
        assert not tail["isError"] and tail["structuredContent"]["records"], tail
        number += 1
        send(process, {"id": number, "method": "resources/read", "params": {"uri": "relay-shell://audit/recent"}})
        assert "session_send" in answer(process, number)["result"]["contents"][0]["text"]
    finally:
        assert process.stdin is not None
        process.stdin.close()
    loaded = result_of(result_path, process)["relay_shell"]
    lazy = [name for name in LAZY_AT_START if name.startswith(("relay_shell.sessions", "relay_shell.diagnostics"))]
    assert [name for name in lazy if name not in loaded] == []
    assert "relay_shell.audit.tail" in loaded
