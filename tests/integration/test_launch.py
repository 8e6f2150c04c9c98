"""The launch point (launch.py) on its own, with real processes under each containment (off, subreaper, a cgroup2
subtree) and the exec trace off and on: a command's and a terminal's tree start in their unit, an escape ends
with its tree, the trace (or its null object) puts `execs` (or nothing) into the plan, the execs a session_send
starts go into its window, and RELAY_SHELL_EXEC_DENY refusing the first program is ExecDenied with nothing of the
tree left; in readonly mode (adr/0024) every process of both trees runs confined (no_new_privs, Landlock), the
command spawned on a spare confined thread that joined the unit first. Each case runs in a fresh interpreter:
containment changes the whole process (a child subreaper, its cgroup, the marker in its environment) and must not
leak into the test runner."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, server_env
from tests.e2e.containment.test_containment import cgroup_subtree, end_strays, new_token

PROGRAM = r"""
import asyncio, errno, json, os, select, signal, sys, time
from ptyprocess import PtyProcess
from relay_shell.settings.model import Settings
from relay_shell.containment import proc
from relay_shell.containment.cgroup import pids_in
from relay_shell.containment.start import start_containment
from relay_shell.containment.units import scope_of
from relay_shell.errors import ToolError
from relay_shell.launch import start_launcher
from relay_shell.metrics import Metrics
from relay_shell.plan import Plan, Subject

MODE, TRACE, AUDIT, TOKEN, POLICY = sys.argv[1:6]
found = {}

async def nothing(progress):
    raise AssertionError("not run")

def new_plan(call_id):
    plan = Plan(subject=Subject(fixed_tier=0), execute=nothing)
    plan.call_id = call_id
    return plan

def alive(pid):
    entry = proc.read_entry(pid)
    return entry is not None and entry.state != "Z"

def read_until(process, wanted, timeout=10.0):
    seen = b""
    deadline = time.monotonic() + timeout
    while wanted not in seen:
        assert time.monotonic() < deadline, f"no {wanted!r} in {seen!r}"
        if select.select([process.fd], [], [], 0.1)[0]:
            seen += os.read(process.fd, 4096)
    return seen

def settle(escape):
    "The escape has exec'd its shell (its argv names the token) and started its sleep."
    deadline = time.monotonic() + 10
    while True:
        with open(f"/proc/{escape}/cmdline", "rb") as cmdline:
            execd = TOKEN.encode() in cmdline.read()
        if execd and any(entry.ppid == escape for entry in proc.scan().values()):
            return
        assert time.monotonic() < deadline, "the escape did not start"
        time.sleep(0.01)

def in_unit(tree, pid):
    "Where containment holds pid: its marker, whether its unit's cgroup lists it, and whether it is confined."
    cgroup = getattr(tree.unit, "cgroup", None)
    with open(f"/proc/{pid}/status") as status:
        confined = "NoNewPrivs:\t1" in status.read()
    return {"marker": proc.read_marker(pid), "in_cgroup": cgroup is not None and pid in pids_in(cgroup),
            "confined": confined}

async def command(launcher):
    tree = launcher.call_tree("c1")
    script = f"setsid /bin/sh -c 'sleep 300; true' {TOKEN} </dev/null >/dev/null 2>&1 & echo $!"
    child = await tree.start_command(["/bin/sh", "-c", script], None, None, False, True)
    escape = int(child.stdout.read().decode().split()[0])
    found["command_exit"] = child.wait(10)
    settle(escape)
    found["command_leader"] = tree.unit.leader == child.pid
    found["escape"] = in_unit(tree, escape)
    plan = new_plan("c1")
    tree.trace.finish_into(plan)
    found["command_execs"] = (plan.record_fields or {}).get("execs")
    found["command_confinement"] = (plan.record_fields or {}).get("confinement")
    found["command_first_pid"] = child.pid
    found["escape_members"] = escape in tree.signal_all(())
    await tree.kill(2.0)
    found["escape_alive_after_kill"] = alive(escape)
    if alive(escape):  # containment off: the escape escaped, as before containment
        os.killpg(escape, signal.SIGKILL)
    tree.release()

async def terminal(launcher):
    tree = launcher.session_tree("s1")
    env = {**os.environ, "TERM": "dumb", "PS1": "$ "}
    process = await tree.start_terminal(
        lambda child_env, confine: PtyProcess.spawn(["/bin/sh"], env=child_env, preexec_fn=confine), env
    )
    found["terminal_leader"] = tree.unit.leader == process.pid
    found["terminal"] = in_unit(tree, process.pid)
    process.write(b"echo re''ady\n")  # the output, not the terminal's echo of the line
    read_until(process, b"ready\r\n")
    spawned = new_plan("spawn-call")
    tree.trace.snapshot_into(spawned)
    found["spawn_execs"] = (spawned.record_fields or {}).get("execs")
    sent = new_plan("send-call")
    with tree.trace.window_into(sent):
        process.write(b"/bin/echo mark$((40+2))\n")
        read_until(process, b"mark42")  # answered before it ran: in the window, however soon it closes
    found["send_execs"] = (sent.record_fields or {}).get("execs")
    found["terminal_members"] = process.pid in tree.signal_all((signal.SIGKILL,))
    if not found["terminal_members"]:  # containment off: its owner ends it
        os.kill(process.pid, signal.SIGKILL)
    await tree.kill(2.0)
    os.waitpid(process.pid, 0)
    process.terminated = True  # reaped here: ptyprocess must not wait for it again
    found["end_fields"] = tree.trace.end_fields()
    tree.release()

async def refused(launcher):
    tree = launcher.call_tree("c2")
    try:
        child = await tree.start_command(["/usr/bin/id"], None, None, False, True)
        found["refused_command"] = f"ran: exit {child.wait(10)}"
    except ToolError as exc:
        found["refused_command"] = f"{exc.kind}: {exc}"
        found["refused_command_leader"] = tree.unit.leader
    tree.release()
    # The dynamic loader told to load a name it would search for: its program cannot be determined (adr/0027).
    tree = launcher.call_tree("c3")
    try:
        child = await tree.start_command(["/lib64/ld-linux-x86-64.so.2", "id"], None, None, False, True)
        found["refused_loader"] = f"ran: exit {child.wait(10)}"
    except ToolError as exc:
        found["refused_loader"] = f"{exc.kind}: {exc}"
    found["refused_loader_execs"] = tree.trace.end_fields()
    tree.release()
    tree = launcher.session_tree("s2")
    try:
        process = await tree.start_terminal(
            lambda env, _confine: PtyProcess.spawn(["/usr/bin/id"], env=env), dict(os.environ)
        )
        found["refused_terminal"] = "ran"
        os.waitpid(process.pid, 0)
        process.terminated = True
        tree.release()
    except ToolError as exc:
        found["refused_terminal"] = exc.kind
    except OSError as exc:  # ptyprocess raises the child's exec error as a plain OSError
        found["refused_terminal"] = errno.errorcode.get(exc.errno or 0, "?")
    found["refused_terminal_execs"] = tree.trace.end_fields()

async def main():
    settings = Settings(
        audit={"audit_path": AUDIT},
        trace={"exec_trace": TRACE, "exec_deny": '["^/usr/bin/id( |$)"]'},
        policy={"policy_mode": POLICY},
    )
    containment = start_containment(MODE, scope_of(AUDIT))
    launcher = start_launcher(settings, containment, Metrics(enabled=False), lambda call_id, execs: None)
    found["banner"] = launcher.banner()
    found["notes"] = launcher.banner_notes()
    found["status"] = launcher.tracer.status()
    found["marker_prefix"] = containment.instance_prefix
    try:
        await command(launcher)
        await terminal(launcher)
        await refused(launcher)
        found["units_running"] = [name for name, unit in containment.units.items() if not unit.released]
    finally:
        await launcher.shutdown(1.0)  # whatever failed: nothing of the case is left running
    print(json.dumps(found))

asyncio.run(main())
"""

CASES = [(mode, trace, "open") for mode in ("off", "subreaper", "cgroup") for trace in ("off", "on")]
CASES += [("off", "off", "readonly"), ("subreaper", "on", "readonly"), ("cgroup", "off", "readonly")]
CASES += [("cgroup", "on", "readonly")]
# `auto`, the default: on for this root test run (adr/0027).
CASES += [("subreaper", "auto", "open"), ("cgroup", "auto", "readonly")]


@pytest.fixture(name="token")
def token_fixture() -> Iterator[str]:
    value = new_token()
    yield value
    end_strays(value)


def launch(tmp_path: Path, mode: str, trace: str, token: str, cgroup: Path | None, policy: str) -> dict[str, Any]:
    script = tmp_path / "launch_case.py"
    script.write_text(PROGRAM)
    argv = [sys.executable, str(script), mode, trace, str(tmp_path / "audit.jsonl"), token, policy]
    if cgroup is not None:  # like a service started in its own cgroup: enter it, then become the interpreter
        argv = ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && shift && exec "$@"', str(cgroup), "-", *argv]
    env = server_env(tmp_path / "audit.jsonl")
    ran = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert ran.returncode == 0, ran.stderr[-4000:]
    found: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])
    return found


@pytest.mark.parametrize(("mode", "trace", "policy"), CASES)
def test_every_tree_starts_through_the_launcher(tmp_path: Path, mode: str, trace: str, policy: str, token: str) -> None:
    cgroups = cgroup_subtree() if mode == "cgroup" else iter([None])
    cgroup = next(cgroups)
    try:
        found = launch(tmp_path, mode, trace, token, cgroup, policy)
    finally:
        if cgroup is not None:  # a case that died before its shutdown left its (empty) unit cgroups
            for directory in sorted(cgroup.glob("*/*"), reverse=True) + list(cgroup.glob("*")):
                with contextlib.suppress(OSError):
                    directory.rmdir()
        next(cgroups, None)  # removes the subtree, and fails if a process was left in it
    contained = mode != "off"
    traced = trace in ("on", "auto")
    state = "on" if traced else "off"
    readonly = policy == "readonly"
    chosen = " (auto)" if trace == "auto" else ""
    confined = " | readonly enforced by landlock ABI " if readonly else ""
    assert found["banner"].startswith(f"containment {mode} | exec trace {state}{chosen}{confined}"), found["banner"]
    assert found["status"]["state"] == state and found["status"]["deny_patterns"] == 1, found["status"]
    # The same server_info shape, on or off (every key the tracer reports, the compiled answerer's included).
    expected_keys = {"state", "reason", "no_new_privs", "deny_patterns", "entries_kept", "execs_traced", "late_execs"}
    expected_keys |= {"unattributed_execs", "untraced_trees", "read_faults", "trees_open", "answerer"}
    expected_keys |= {"execs_denied", "execs_answered_compiled"}
    assert expected_keys == set(found["status"]), found["status"]
    assert found["notes"] == []  # root: no no_new_privs line; the trace is available here

    # A command: its leader and its escape (setsid) are in its unit, and the unit's end ends the escape.
    assert found["command_exit"] == 0
    assert found["command_leader"] is contained
    unit_marker = found["marker_prefix"] + "call-c1"
    assert found["escape"]["marker"] == (unit_marker if contained else None), found["escape"]
    assert found["escape"]["in_cgroup"] is (mode == "cgroup"), found["escape"]
    assert found["escape_members"] is contained
    assert found["escape"]["confined"] is readonly and (found["command_confinement"] is not None) is readonly
    assert found["escape_alive_after_kill"] is not contained
    if traced:  # the tree's first exec is the server's own posix_spawn of /bin/sh, recorded with its pid
        execs = found["command_execs"]
        first = execs["entries"][0]
        assert (first["path"], first["pid"], first["ok"]) == ("/bin/sh", found["command_first_pid"], True), execs
    else:
        assert found["command_execs"] is None  # no `execs` in the record at all

    # A terminal: in its unit; traced, shell_spawn's snapshot and a send's window hold what each started.
    assert found["terminal_leader"] is contained
    assert found["terminal"]["marker"] == (found["marker_prefix"] + "session-s1" if contained else None)
    assert found["terminal"]["in_cgroup"] is (mode == "cgroup")
    assert found["terminal"]["confined"] is readonly
    assert found["terminal_members"] is contained
    if traced:
        assert [entry["path"] for entry in found["spawn_execs"]["entries"]] == ["/bin/sh"], found["spawn_execs"]
        window = [entry["argv"] for entry in found["send_execs"]["entries"]]
        assert window == [["/bin/echo", "mark42"]], found["send_execs"]
        assert found["end_fields"]["execs"]["count"] == 2, found["end_fields"]
    else:
        assert found["spawn_execs"] is None and found["send_execs"] is None and "execs" not in found["end_fields"]
    assert found["end_fields"].get("confinement", "").startswith("landlock ABI ") is readonly, found["end_fields"]

    # EXEC_DENY refuses the first program only under the trace: then ExecDenied, and nothing of the tree stays.
    if traced:
        assert found["refused_command"].startswith("ExecDenied: /usr/bin/id was refused"), found["refused_command"]
        assert found["refused_command_leader"] is None
        # The terminal's first exec is read like any other (ptyprocess forks first): refused, and the error is
        # the program's EPERM as ptyprocess reports it.
        assert found["refused_terminal"] in ("ExecDenied", "EPERM"), found["refused_terminal"]
        execs = found["refused_terminal_execs"]["execs"]
        assert execs["count"] == execs["denied"] == 1 and execs["entries"][0]["path"] == "/usr/bin/id", execs
        # The first exec refused because what it loads cannot be determined: its program is named, the reason is
        # the entry's `refusal` (not `undetermined`, which says the path itself led nowhere).
        assert found["refused_loader"].startswith("ExecDenied: ") and "library directories" in found["refused_loader"]
        [entry] = found["refused_loader_execs"]["execs"]["entries"]
        assert "library directories" in entry["refusal"] and "undetermined" not in entry, entry
    else:
        assert found["refused_command"] == "ran: exit 0" and found["refused_terminal"] == "ran"
        assert found["refused_loader"] == "ran: exit 127"  # the loader found no `id` in the library directories
        assert "execs" not in found["refused_terminal_execs"]
    assert found["units_running"] == []
