"""End to end, through a real stdio client: readonly enforced by the kernel without the classifier's help
(adr/0024). The classifier admits `cat /etc/hostname`, `whoami` and `uptime` (tier 0); the server's PATH makes
them a static binary, a shell script and an awk program that write, chmod, rename, unlink, run `sudo -n true` and
kill a process outside the call (tests/e2e/confinement/programs.py). In readonly every one of those fails with
EACCES/EPERM and the call's record says it ran confined; the same commands in open mode succeed."""

from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import fields, read_records, text_of
from tests.e2e.confinement.helpers import end_record, serve, start_victim
from tests.e2e.confinement.programs import prepare_probe_dir, probe_env

pytestmark = pytest.mark.anyio
REFUSED = ("Permission denied", "Operation not permitted")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("exec_trace", ["off", "on"])
async def test_readonly_the_kernel_refuses_what_the_classifier_admitted(
    tmp_path: Path, probe_bin: Path, probe_dir: Path, victim: int, exec_trace: str
) -> None:
    """Untraced, the command spawns on a spare confined thread; traced, on a thread the trace's spawner thread
    confines for it (adr/0024): the same refusals either way, and the trace records what ran."""
    audit_path = tmp_path / "audit.jsonl"
    async with serve(
        audit_path,
        probe_env(probe_bin, probe_dir, victim),
        policy_mode="readonly",
        metrics_addr="127.0.0.1:0",
        exec_trace=exec_trace,
    ) as client:
        static = await client.call_tool("shell_exec", {"command": "cat /etc/hostname"})
        script = await client.call_tool("shell_exec", {"command": "whoami"})
        awk = await client.call_tool("shell_exec", {"command": "uptime"})
        kill_zero = await client.call_tool("shell_exec", {"command": f"kill -0 {victim}"})
        everything = fields(await client.call_tool("server_info", {}))["info"]
        with urllib.request.urlopen(f"http://127.0.0.1:{everything['metrics']['listen_port']}/metrics") as response:
            exposition = response.read().decode()
    info = everything["enforcement"]
    text = text_of(static)
    # Reads work; every write, privilege gain and outside signal was refused by the kernel.
    assert open("/etc/hostname").read().strip() in text, text
    assert "devnull: ok" in text, text
    for attempt in ("write", "chmod", "rename", "unlink", "kill"):
        line = next(line for line in text.splitlines() if line.startswith(f"{attempt}: "))
        assert line.split(": ", 1)[1] in REFUSED, text
    assert "sudo: exit 1" in text, text
    assert fields(static)["exit_code"] == 6, text  # write, chmod, rename, unlink, sudo, kill
    assert not (probe_dir / "marker-static").exists()
    assert (probe_dir / "existing").stat().st_mode & 0o7777 == 0o644
    assert (probe_dir / "doomed").exists() and not (probe_dir / "renamed").exists()
    for result in (script, awk):
        assert any(refused in text_of(result) for refused in REFUSED), text_of(result)
        assert "write: ok" not in text_of(result) and "sudo: ok" not in text_of(result), text_of(result)
        assert "kill: ok" not in text_of(result)
    assert not (probe_dir / "marker-sh").exists() and not (probe_dir / "marker-awk").exists()
    assert "Operation not permitted" in text_of(kill_zero), text_of(kill_zero)
    assert _alive(victim)
    # The records say the trees ran confined, and how each ended.
    record = end_record(audit_path, 0)
    assert record["tier"] == 0 and record["confinement"] == info["readonly"]
    assert info["readonly"] == f"landlock ABI {info['landlock_abi']}"
    assert record["exit_code"] == 6
    if exec_trace == "on":  # the static binary's own exec, then the sudo it started (which gained nothing)
        paths = [entry["path"] for entry in record["execs"]["entries"]]
        assert paths[-1] == "/usr/bin/sudo" and paths[-2].endswith("/cat"), record["execs"]
    assert all(end_record(audit_path, index)["confinement"].startswith("landlock ABI ") for index in range(4))
    start = next(r for r in read_records(audit_path) if r.get("tool") == "server:start")
    assert start["policy"]["readonly_enforcement"] == info["readonly"], start
    assert f"\nrelay_shell_readonly_kernel_enforcement {info['landlock_abi']}.0\n" in exposition
    assert "\nrelay_shell_confined_trees_total 4.0\n" in exposition, exposition
    assert info["trees_confined"] == 4 and info["confinement_failures"] == 0, info


async def test_open_mode_the_same_commands_succeed(
    tmp_path: Path, probe_bin: Path, probe_dir: Path, victim: int, request: pytest.FixtureRequest
) -> None:
    second = start_victim()
    request.addfinalizer(lambda: (second.kill(), second.wait()))
    audit_path = tmp_path / "audit.jsonl"
    async with serve(audit_path, probe_env(probe_bin, probe_dir, victim), policy_mode="open") as client:
        static = await client.call_tool("shell_exec", {"command": "cat /etc/hostname"})
        prepare_probe_dir(probe_dir)  # the static binary renamed and removed them
        awk = await client.call_tool("shell_exec", {"command": "uptime"})
        script = await client.call_tool("shell_exec", {"command": "whoami", "env": {"PROBE_VICTIM": str(second.pid)}})
    text = text_of(static)
    assert fields(static)["exit_code"] == 0, text
    for attempt in ("devnull", "write", "chmod", "rename", "unlink", "kill"):
        assert f"{attempt}: ok" in text, text
    assert "sudo: exit 0" in text, text
    assert "write: ok" in text_of(script) and "sudo: ok" in text_of(script) and "kill: ok" in text_of(script)
    assert fields(awk)["exit_code"] == 0, text_of(awk)
    for marker in ("marker-static", "marker-sh", "marker-awk"):
        assert (probe_dir / marker).exists(), marker
    second.wait(timeout=10)  # killed by the calls
    assert not _alive(victim)
    assert "confinement" not in end_record(audit_path, 0)  # open mode: nothing confined, records as before


async def test_a_readonly_terminal_session_is_confined(
    tmp_path: Path, probe_bin: Path, probe_dir: Path, victim: int
) -> None:
    """shell_spawn's program runs confined in its terminal; the session's own terminal (by its name, and as
    /dev/tty) stays writable."""
    audit_path = tmp_path / "audit.jsonl"
    async with serve(audit_path, probe_env(probe_bin, probe_dir, victim), policy_mode="readonly") as client:
        spawned = await client.call_tool(
            "shell_spawn", {"command": "cat /etc/hostname", "until": "kill: .*\\n", "timeout": 10}
        )
        assert fields(spawned)["status"] == "ok", text_of(spawned)
        await client.call_tool("session_kill", {"session_id": fields(spawned)["session_id"]})
    text = text_of(spawned)
    assert "pts-write: ok" in text and "tty-write: ok" in text, text
    assert "write: Permission denied" in text and "sudo: exit 1" in text, text
    assert "kill: Operation not permitted" in text, text
    assert not (probe_dir / "marker-static").exists() and _alive(victim)
    records = read_records(audit_path)
    spawn = next(r for r in records if r.get("tool") == "shell_spawn" and r.get("phase") == "end")
    session_end = next(r for r in records if r.get("tool") == "session:end")
    for record in (spawn, session_end):
        assert record["confinement"].startswith("landlock ABI "), record


async def test_without_landlock_readonly_is_classifier_only_and_says_so(
    tmp_path: Path, probe_bin: Path, probe_dir: Path, victim: int
) -> None:
    """Debian 12's kernel without `landlock` in its LSM list (tests/refuse_syscall.py): readonly
    still runs, classifier-only, and server_info, the operating guide, the records and the metric say so. The
    probe's write then succeeds: proof the kernel stood in the way above."""
    from tests.e2e.confinement.helpers import NO_LANDLOCK

    audit_path = tmp_path / "audit.jsonl"
    async with serve(
        audit_path,
        probe_env(probe_bin, probe_dir, victim),
        launcher=[*NO_LANDLOCK, "EOPNOTSUPP"],
        policy_mode="readonly",
        metrics_addr="127.0.0.1:0",
    ) as client:
        info = fields(await client.call_tool("server_info", {}))["info"]
        static = await client.call_tool("shell_exec", {"command": "cat /etc/hostname"})
        guide = await client.get_prompt("operating_guide", {})
        port = info["metrics"]["listen_port"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            exposition = response.read().decode()
    enforcement = info["enforcement"]
    assert enforcement["readonly"] == "classifier-only", enforcement
    assert "lsm=" in enforcement["reason"], enforcement
    assert "write: ok" in text_of(static), text_of(static)
    assert end_record(audit_path, 0)["confinement"] == "classifier-only"
    guide_text = guide.messages[0].content.text  # type: ignore[union-attr]
    assert "NOT enforced by the kernel" in guide_text and "lsm=" in guide_text
    assert "\nrelay_shell_readonly_kernel_enforcement 0.0\n" in exposition, exposition


def test_the_banner_warns_and_required_refuses_to_start(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.conftest import server_env
    from tests.e2e.confinement.helpers import NO_LANDLOCK

    command = [sys.executable, *NO_LANDLOCK, "ENOSYS", sys.executable, "-m", "relay_shell"]
    env = server_env(tmp_path / "audit.jsonl", policy_mode="readonly")
    started = time.monotonic()
    auto = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    banner = [line for line in auto.stderr.splitlines() if line.startswith("relay-shell ")]
    assert banner and "readonly enforced by classifier-only" in banner[0], auto.stderr
    warnings = [line for line in auto.stderr.splitlines() if "NOT enforced by the kernel" in line]
    assert len(warnings) == 1 and "no Landlock" in warnings[0], auto.stderr
    env["RELAY_SHELL_READONLY_ENFORCEMENT"] = "required"
    required = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert required.returncode == 2, required.stderr
    lines = required.stderr.strip().splitlines()
    assert len(lines) == 1 and "RELAY_SHELL_READONLY_ENFORCEMENT=required" in lines[0], required.stderr
    assert "no Landlock" in lines[0]
    # --check-config says the same without serving.
    check = [*command, "--check-config"]
    refused = subprocess.run(check, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "RELAY_SHELL_READONLY_ENFORCEMENT=required" in refused.stderr, refused
    env["RELAY_SHELL_READONLY_ENFORCEMENT"] = "auto"
    said = subprocess.run(check, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert said.returncode == 0 and "readonly enforced by classifier-only" in said.stdout, said
    here = subprocess.run(
        [sys.executable, "-m", "relay_shell", "--check-config"], env=env, capture_output=True, text=True, timeout=60
    )
    assert here.returncode == 0 and "readonly enforced by landlock ABI " in here.stdout, here
    assert time.monotonic() - started < 60
