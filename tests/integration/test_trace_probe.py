"""Whether the exec trace works, found at startup by a copy of the server (launch_trace_probe.py, adr/0030 "Round 7:
idle RSS"): the launcher says what the copy found before any tree starts — what the tracer says of itself — while
the server has loaded nothing of trace/; the first traced tree starts the tracer, and its execs are recorded; the
copy is reaped before the launcher is assembled. Where the copy gives no answer (killed here: a real fault), and in
readonly mode (no copy is made), the launcher starts the tracer at startup, as before. Through a real server: an
idle traced server that answered initialize and server_info has loaded nothing of trace/, its banner and
server_info say the trace is on, and its first call's execs are in the call's record.

Each case runs in a fresh interpreter: the copy is a fork of the process, and the trace installs a filter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, read_records, server_env
from tests.integration.test_startup_imports import answer, probe, result_of, send

PROGRAM = r"""
import asyncio, json, os, signal, sys
from relay_shell.containment.start import start_containment
from relay_shell.launch import start_launcher
from relay_shell.launch_trace_probe import _started, start_probe
from relay_shell.metrics import Metrics
from relay_shell.plan import Plan, Subject
from relay_shell.settings.model import Settings

CASE, AUDIT = sys.argv[1:3]
found = {}

async def nothing(progress):
    raise AssertionError("not run")

def reaped(pid):
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False

async def main():
    policy = "readonly" if CASE == "readonly" else "open"
    settings = Settings(audit={"audit_path": AUDIT}, trace={"exec_trace": "on"}, policy={"policy_mode": policy})
    start_probe(settings)
    copies = [started.pid for started in _started]
    found["copies"] = len(copies)
    if CASE == "killed":
        os.kill(copies[0], signal.SIGKILL)
    launcher = start_launcher(settings, start_containment("off", "test"), Metrics(enabled=False), lambda *_: None)
    found["holds"] = type(launcher.tracer).__name__
    found["banner"] = launcher.banner()
    found["status"] = launcher.trace_status()
    found["trace_loaded"] = sorted(name for name in sys.modules if name.startswith("relay_shell.trace"))
    found["copies_reaped"] = all(reaped(pid) for pid in copies)
    tree = launcher.call_tree("c1")
    child = await tree.start_command(["/bin/sh", "-c", "/bin/true; exec /bin/echo probed"], None, None, False, True)
    found["output"] = child.stdout.read().decode()
    child.wait(10)
    plan = Plan(subject=Subject(fixed_tier=0), execute=nothing)
    plan.call_id = "c1"
    tree.trace.finish_into(plan)
    tree.release()
    execs = (plan.record_fields or {}).get("execs") or {}
    found["programs"] = [entry["path"] for entry in execs.get("entries", [])]
    found["holds_after"] = type(launcher.tracer).__name__
    found["status_after"] = launcher.trace_status()
    await launcher.shutdown(1.0)
    print(json.dumps(found))

asyncio.run(main())
"""
SAID_BEFORE_ANY_TREE = ("setting", "state", "reason", "no_new_privs", "deny_patterns", "entries_kept", "answerer")


def run_case(tmp_path: Path, case: str) -> dict[str, Any]:
    script = tmp_path / "probe_case.py"
    script.write_text(PROGRAM)
    argv = [sys.executable, str(script), case, str(tmp_path / "audit.jsonl")]
    ran = subprocess.run(
        argv, env=server_env(tmp_path / "audit.jsonl"), capture_output=True, text=True, timeout=120, cwd=REPO_ROOT
    )
    assert ran.returncode == 0, ran.stderr[-4000:]
    found: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])
    return found


def test_the_copy_says_the_trace_is_on_and_the_first_traced_tree_starts_it(tmp_path: Path) -> None:
    found = run_case(tmp_path, "probed")
    assert found["copies"] == 1 and found["copies_reaped"], found
    assert found["holds"] == "TraceProbed" and found["trace_loaded"] == [], found
    assert "exec trace on" in found["banner"] and found["status"]["state"] == "on", found
    assert found["status"]["execs_traced"] == 0 and found["status"]["trees_open"] == 0, found["status"]
    # The tree started the tracer, which recorded what the tree ran.
    assert found["holds_after"] == "ExecTracer" and found["output"] == "probed\n", found
    assert found["programs"] == ["/bin/sh", "/bin/true", "/bin/echo"], found["programs"]
    # What was said before the tracer started is what the tracer says of itself (the counters aside).
    before, after = found["status"], found["status_after"]
    assert sorted(before) == sorted(after), (before, after)
    assert {key: before[key] for key in SAID_BEFORE_ANY_TREE} == {key: after[key] for key in SAID_BEFORE_ANY_TREE}
    assert after["execs_traced"] == 3, after


@pytest.mark.parametrize("case", ["killed", "readonly"])
def test_without_the_copys_answer_the_tracer_starts_at_startup(tmp_path: Path, case: str) -> None:
    found = run_case(tmp_path, case)
    assert found["copies"] == (1 if case == "killed" else 0) and found["copies_reaped"], found
    assert found["holds"] == "ExecTracer" and "relay_shell.trace.tracer" in found["trace_loaded"], found
    assert found["status"]["state"] == "on", found["status"]
    assert found["programs"] == ["/bin/sh", "/bin/true", "/bin/echo"], found["programs"]


def test_an_idle_traced_server_has_loaded_nothing_of_the_trace_yet_says_it_is_on(tmp_path: Path) -> None:
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}}
    audit_path = tmp_path / "audit.jsonl"
    result_path = tmp_path / "loaded.json"
    process = probe(result_path, audit_path, exec_trace="on")
    try:
        send(process, {"id": 1, "method": "initialize", "params": hello})
        assert "result" in answer(process, 1)
        send(process, {"method": "notifications/initialized"})
        send(process, {"id": 2, "method": "tools/call", "params": {"name": "server_info", "arguments": {}}})
        info = answer(process, 2)["result"]["structuredContent"]["info"]["exec_trace"]
    finally:
        assert process.stdin is not None
        process.stdin.close()
    assert process.stderr is not None
    banner = [line for line in process.stderr.read().decode().splitlines() if line.startswith("relay-shell 0")]
    loaded = result_of(result_path, process)
    assert [name for name in loaded["relay_shell"] if name.startswith("relay_shell.trace")] == []
    assert info["state"] == "on" and info["execs_traced"] == 0, info
    assert banner and "exec trace on" in banner[0], banner
    start = [record for record in read_records(audit_path) if record["tool"] == "server:start"]
    assert start[-1]["policy"]["exec_trace"] == "on", start[-1]
