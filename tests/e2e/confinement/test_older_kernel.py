"""Readonly on a kernel whose Landlock is older than ABI 6 (adr/0024, Round 4): no signal or abstract-socket
scoping, so a readonly tree can signal any process of the server's user, the server's own threads included
(kill(2) of a thread id is a process-directed signal: the server dies). `RELAY_SHELL_READONLY_ENFORCEMENT=required`
refuses to start there, naming the ABI found and what is missing; `auto` runs and says it everywhere.

A SIMULATED older kernel: this machine's kernel has Landlock ABI 7 and no older kernel can be booted here (one
kernel per machine, and a VM is not available), so the server is told by the test-only
RELAY_SHELL_TEST_SIMULATE_LANDLOCK_ABI to use Landlock as a kernel with that ABI would offer it: the rights and
scopes of a newer ABI are left out of its rulesets exactly as they are on such a kernel (confine/landlock.py
handled_rights). The kernel still enforces what the ruleset holds; what a real ABI-5 kernel leaves open is open
here too, which the signal test shows."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import fields, server_env, text_of
from tests.e2e.confinement.helpers import serve
from tests.procs import server_pid

pytestmark = pytest.mark.anyio
SIMULATE = "RELAY_SHELL_TEST_SIMULATE_LANDLOCK_ABI"


def _relay_shell(tmp_path: Path, abi: int, enforcement: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = server_env(tmp_path / "audit.jsonl", policy_mode="readonly", readonly_enforcement=enforcement)
    env[SIMULATE] = str(abi)
    command = [sys.executable, "-m", "relay_shell", *args]
    return subprocess.run(command, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args", [[], ["--check-config"]], ids=["serve", "check-config"])
def test_required_refuses_a_kernel_below_abi_6_naming_what_is_missing(tmp_path: Path, args: list[str]) -> None:
    refused = _relay_shell(tmp_path, 5, "required", *args)
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1, refused
    line = lines[0]
    assert line.startswith("relay-shell: configuration error: RELAY_SHELL_READONLY_ENFORCEMENT=required: "), line
    assert "this kernel's Landlock is ABI 5" in line and "needs ABI 6 (Linux 6.12)" in line, line
    assert "signals to processes outside the call, the server's own threads included" in line, line
    assert "abstract unix sockets" in line and "TCP" not in line, line
    assert line.endswith("or a kernel with Landlock ABI 6"), line
    older = _relay_shell(tmp_path, 3, "required", *args)
    assert older.returncode == 2 and "ABI 3" in older.stderr and "listening on TCP ports" in older.stderr, older
    # ABI 6 gives all of it: required starts (--check-config says how, with no warning).
    if args:
        whole = _relay_shell(tmp_path, 6, "required", *args)
        assert whole.returncode == 0, whole.stderr
        assert "readonly enforced by landlock ABI 6)" in whole.stdout, whole.stdout
        assert "partly" not in whole.stderr, whole.stderr


def test_auto_starts_below_abi_6_and_says_it_loudly(tmp_path: Path) -> None:
    served = _relay_shell(tmp_path, 5, "auto")  # stdin at EOF: the banner, then the end
    assert served.returncode == 0, served.stderr
    banner = [line for line in served.stderr.splitlines() if line.startswith("relay-shell 0")]
    assert banner and banner[0].endswith("| readonly enforced by landlock ABI 5, partly"), served.stderr
    warnings = [line for line in served.stderr.splitlines() if "WARNING: readonly is only partly" in line]
    assert len(warnings) == 1 and "the server's own threads included" in warnings[0], served.stderr
    assert "READONLY_ENFORCEMENT=required refuses to start instead" in warnings[0]
    simulated = [line for line in served.stderr.splitlines() if f"WARNING: {SIMULATE} is set" in line]
    assert len(simulated) == 1, served.stderr
    checked = _relay_shell(tmp_path, 5, "auto", "--check-config")
    assert checked.returncode == 0 and "readonly enforced by landlock ABI 5, partly)" in checked.stdout, checked
    assert "WARNING: readonly is only partly" in checked.stderr, checked.stderr


def _server_threads(audit_path: Path) -> tuple[int, list[int]]:
    """The stdio server under test: its pid, and the ids of its other threads."""
    pid = server_pid(audit_path)
    return pid, sorted(int(task) for task in os.listdir(f"/proc/{pid}/task") if int(task) != pid)


KILL_PROBE = "kill -0 {target} && echo sent || echo refused"


@pytest.mark.parametrize("abi", [5, None], ids=["simulated-abi-5", "this-kernel"])
async def test_below_abi_6_a_readonly_tree_reaches_the_servers_threads_as_server_info_says(
    tmp_path: Path, abi: int | None
) -> None:
    """What `auto` reports is what happens: at ABI 5 a tree's `kill -0` reaches a server thread (signal 0 only
    checks; SIGKILL there would end the server), at this kernel's ABI the signal scope refuses it. The server's
    pid is refused at both (the syscall filter). server_info, the operating guide and the metric say it."""
    audit_path = tmp_path / "audit.jsonl"
    extra = {SIMULATE: str(abi)} if abi is not None else {}
    async with serve(audit_path, extra, policy_mode="readonly", metrics_addr="127.0.0.1:0") as client:
        info = fields(await client.call_tool("server_info", {}))["info"]
        pid, threads = _server_threads(audit_path)
        assert threads, "the server runs more than one thread"
        to_thread = await client.call_tool("shell_exec", {"command": KILL_PROBE.format(target=threads[0])})
        to_server = await client.call_tool("shell_exec", {"command": KILL_PROBE.format(target=pid)})
        guide = await client.get_prompt("operating_guide", {})
        port = info["metrics"]["listen_port"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            exposition = response.read().decode()
    enforcement = info["enforcement"]
    guide_text = guide.messages[0].content.text  # type: ignore[union-attr]
    assert text_of(to_server).strip().endswith("refused"), text_of(to_server)
    if abi is None:
        assert enforcement["not_enforced"] == [], enforcement
        assert text_of(to_thread).strip().endswith("refused"), text_of(to_thread)
        assert "only partly" not in guide_text
        return
    assert enforcement["readonly"] == "landlock ABI 5" and enforcement["landlock_abi"] == 5, enforcement
    assert any("the server's own threads included" in item for item in enforcement["not_enforced"]), enforcement
    assert not any("signals" in item for item in enforcement["refused"]), enforcement
    assert text_of(to_thread).strip().endswith("\nsent"), text_of(to_thread)
    assert "WARNING: only partly (Landlock ABI 5)" in guide_text and "send no signals" in guide_text, guide_text
    assert "\nrelay_shell_readonly_kernel_enforcement 5.0\n" in exposition, exposition
