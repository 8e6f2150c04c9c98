"""Readonly's spare confined threads (confine/spares.py, adr/0031, adr/0037) with real processes, the exec trace on
and off: a traced call's tree spawned on a spare made ahead by a creator thread the trace's spawner thread made is
traced (its programs are in the record, its processes carry the exec filter) and confined (no_new_privs, Landlock:
it cannot write; the creator's syscall filter: it cannot chmod); no tree can signal another call's tree, the
server, a spare waiting for the next call, the spare that spawned it or its creator; back-to-back calls keep
finding spares ready; a spawn that fails on a spare counts no confined tree. Each case runs in a fresh interpreter
(containment and confinement change the whole process); at this kernel's ABI and at a simulated ABI 5, where no
signal scope helps and only the filters (the creator's, naming the server and itself, and the spare's own, naming
the spare) refuse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from relay_shell.confine import landlock
from tests.conftest import REPO_ROOT, server_env

ABI = landlock.abi_version()

# Run by the tree of call B: signals (signal 0) to call A's process, the server, and each spare thread waiting
# for a later call; a file created; what the kernel says of its filters.
PROBE = r"""
import errno, json, os, sys
targets = json.loads(sys.argv[1])
out = {}
for name, pid in targets.items():
    try:
        os.kill(pid, 0)
        out[name] = "ok"
    except OSError as exc:
        out[name] = errno.errorcode.get(exc.errno, str(exc.errno))
try:
    os.chmod(__file__, 0o644)  # the file exists: Landlock does not handle modes, the syscall filter does
    out["chmod"] = "ok"
except OSError as exc:
    out["chmod"] = errno.errorcode.get(exc.errno, str(exc.errno))
try:
    os.close(os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT, 0o644))
    out["create"] = "ok"
except OSError as exc:
    out["create"] = errno.errorcode.get(exc.errno, str(exc.errno))
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
out["no_new_privs"] = status["NoNewPrivs"].strip()
out["seccomp_filters"] = int(status["Seccomp_filters"].strip())
out["cgroup"] = open("/proc/self/cgroup").read().strip().splitlines()[-1]
out["cap_effective"] = status["CapEff"].strip()
# The shell's, as it was spawned (Python ignores SIGPIPE and SIGXFSZ itself at its start).
shell = dict(line.split(":", 1) for line in sys.argv[3].split(";") if ":" in line)
out["signals_ignored"] = int(shell["SigIgn"].strip(), 16)
out["signals_blocked"] = int(shell["SigBlk"].strip(), 16)
print(json.dumps(out))
"""

PROGRAM = r"""
import asyncio, json, os, sys, time
from relay_shell.settings.model import Settings
from relay_shell.containment.start import start_containment
from relay_shell.containment.units import scope_of
from relay_shell.launch import start_launcher
from relay_shell.metrics import Metrics
from relay_shell.plan import Plan, Subject

TRACE, AUDIT, PROBE_FILE, WORK = sys.argv[1:5]
found = {}

async def nothing(progress):
    raise AssertionError("not run")

def ready(pool):
    # The spare threads waiting (Python pool), oldest first; the native pool has none: its creator spawns.
    deadline = time.monotonic() + 10
    while not (pool.serving if hasattr(pool, "serving") else len(pool.ready) >= 4):
        assert time.monotonic() < deadline, f"spares not made: {pool.problem}"
        time.sleep(0.01)
    return [] if hasattr(pool, "serving") else [spare.thread_id for spare in pool.ready]

async def call(launcher, call_id, argv):
    tree = launcher.call_tree(call_id)
    child = await tree.start_command(argv, None, None, False, True)
    return tree, child

def record(tree, call_id):
    plan = Plan(subject=Subject(fixed_tier=0), execute=nothing)
    plan.call_id = call_id
    tree.trace.finish_into(plan)
    return plan.record_fields or {}

async def main():
    settings = Settings(audit={"audit_path": AUDIT}, trace={"exec_trace": TRACE}, policy={"policy_mode": "readonly"})
    containment = start_containment("auto", scope_of(AUDIT))  # a cgroup where it can: the tree born in its unit
    launcher = start_launcher(settings, containment, Metrics(enabled=False), lambda call_id, execs: None)
    confinement = launcher.confinement
    traced = confinement.traced_spares
    found["traced_pool"] = traced is not None
    pool = traced if traced is not None else confinement.spares
    try:
        spare_ids = ready(pool)
        # Call A runs on: its tree is another call's for call B.
        tree_a, child_a = await call(launcher, "a", ["/bin/sleep", "30"])
        waiting = ready(pool)  # the spare A took was replaced: four wait again, none of them A's
        targets = {"other_call": child_a.pid, "server": os.getpid(), "creator": pool.creator_id}
        targets.update({f"spare_{index}": tid for index, tid in enumerate(waiting[:-1])})
        # The thread that spawns B: Python's pool, the last spare (in B's domain); the native one, its creator.
        targets["own_spare"] = waiting[-1] if waiting else pool.creator_id
        if confinement.spares is not None and traced is not None:  # the untraced pool's spares wait too
            targets.update({f"untraced_spare_{i}": tid for i, tid in enumerate(ready(confinement.spares))})
            targets["untraced_creator"] = confinement.spares.creator_id
        # Every other thread of the server (the event loop's is the pid): outside B's domain from ABI 6.
        named = set(targets.values())
        threads = [int(tid) for tid in os.listdir("/proc/self/task") if int(tid) not in named]
        targets.update({f"thread_{tid}": tid for tid in threads})
        found["native"] = hasattr(pool, "serving")
        found["threads_before_b"] = len(os.listdir("/proc/self/task"))
        taken_before = pool.taken
        # The shell's signal masks passed on, read by builtins only (the execs listed stay sh, true, python).
        shell = 'while IFS= read -r l; do s="$s$l;"; done </proc/$$/status; '
        shell += '/bin/true && exec "$0" -I "$1" "$2" "$3" "$s"'
        argv = ["/bin/sh", "-c", shell, sys.executable, PROBE_FILE,
                json.dumps(targets), os.path.join(WORK, "created")]
        tree_b, child_b = await call(launcher, "b", argv)
        found["probe"] = json.loads(child_b.stdout.read().decode())
        found["threads_after_b"] = len(os.listdir("/proc/self/task"))
        child_b.wait(10)
        found["b_on_spare"] = pool.taken == taken_before + 1
        found["b_spare_was_waiting"] = True
        found["b_record"] = record(tree_b, "b")
        found["b_unit"] = tree_b.unit.cgroup.name if tree_b.unit.cgroup is not None else None
        found["spares_before_a"] = len(spare_ids)
        child_a.stdout.close()
        os.kill(child_a.pid, 9)
        child_a.wait(10)
        record(tree_a, "a")
        tree_a.release()
        tree_b.release()
        # Back to back: each call finds a spare ready (the one it replaced was made while the previous went on).
        short_before = pool.short
        for index in range(30):
            tree, child = await call(launcher, f"c{index}", ["/bin/true"])
            child.wait(10)
            record(tree, f"c{index}")
            tree.release()
            await asyncio.sleep(0.002)  # what a client's round trip leaves at least between two calls
        found["back_to_back_short"] = pool.short - short_before
        # A spawn that fails on a spare (no such program) started no tree: not counted as one.
        trees_before, taken_before = confinement.trees, pool.taken
        tree = launcher.call_tree("f")
        try:
            await tree.start_command(["/nonexistent/program"], None, None, False, True)
            found["failed_spawn"] = "started"
        except OSError as exc:
            found["failed_spawn"] = type(exc).__name__
        record(tree, "f")
        tree.release()
        found["failed_spawn_counted"] = [pool.taken - taken_before, confinement.trees - trees_before]
        found["status"] = confinement.status()
    finally:
        await launcher.shutdown(1.0)
    print(json.dumps(found))

asyncio.run(main())
"""


def run_case(tmp_path: Path, trace: str, abi: int | None = None) -> dict[str, Any]:
    (tmp_path / "work").mkdir()
    (tmp_path / "probe.py").write_text(PROBE)
    (tmp_path / "case.py").write_text(PROGRAM)
    audit = tmp_path / "audit.jsonl"
    argv = [sys.executable, str(tmp_path / "case.py"), trace, str(audit), str(tmp_path / "probe.py")]
    argv.append(str(tmp_path / "work"))
    env = server_env(audit)
    if abi is not None:
        env[landlock.SIMULATED_ABI_VARIABLE] = str(abi)
    ran = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert ran.returncode == 0, ran.stderr[-4000:]
    found: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])
    return found


@pytest.mark.parametrize("trace", ["on", "off"])
def test_a_spare_tree_is_confined_in_a_domain_of_its_own(tmp_path: Path, trace: str) -> None:
    found = run_case(tmp_path, trace)
    probe = found["probe"]
    assert found["traced_pool"] == (trace == "on"), found
    assert found["b_on_spare"], found
    assert probe["create"] == "EACCES" and probe["no_new_privs"] == "1", probe
    assert not (tmp_path / "work" / "created").exists()
    assert probe["chmod"] == "EPERM", probe  # the readonly syscall filter, inherited from the spare's creator
    # The capabilities the creator cut (root keeps cap_dac_read_search, cap_net_raw, cap_syslog; others none).
    assert probe["cap_effective"] == ("0000000400002004" if os.geteuid() == 0 else "0000000000000000"), probe
    # Born in its call's unit: the spare entered it for the spawn (the calling thread does not, adr/0037).
    if found["b_unit"] is not None:
        assert probe["cgroup"].endswith("/" + found["b_unit"]), (probe["cgroup"], found["b_unit"])
    # The creator's readonly filter, under the trace the spawner thread's exec filter the creator inherited, and with
    # Python's spares the spare's own guard (its id: it shares the tree's domain while it spawns). The native pool's
    # tree makes its domain itself, in its first process: no server thread shares it, there is nothing to guard.
    guards = 0 if found["native"] else 1
    assert probe["seccomp_filters"] == (2 if trace == "on" else 1) + guards, probe
    assert probe["server"] == "EPERM", probe  # the filter refuses the server's pid at every ABI
    # The thread that spawned the tree (a Python spare: in its domain, its own guard refuses it; the native pool's
    # creator: outside it) and the creator (its id is in the creator's filter, which the tree inherits).
    assert probe["own_spare"] == "EPERM" and probe["creator"] == "EPERM", probe
    if found["native"] and trace == "on":
        assert probe["untraced_creator"] == ("EPERM" if ABI >= 6 else "ok"), probe  # another pool's: the scope's
    # The server's threads were not added to for B (the native pool makes none per tree).
    if found["native"]:
        assert found["threads_after_b"] == found["threads_before_b"], found
    waiting = [name for name in probe if "spare_" in name]
    assert len(waiting) >= (0 if found["native"] else 3), probe  # Python's: the spares waiting for later calls
    threads = [name for name in probe if name.startswith("thread_")]
    assert threads, probe  # the server's other threads (the spawner's, the trace's, the containment's, ...)
    others = {name: probe[name] for name in [*waiting, *threads, "other_call"]}
    # Signals out of the tree's domain: refused from Landlock ABI 6 (signal scoping); below it the classic filter
    # cannot list the server's other thread ids nor other trees (adr/0024 "Below ABI 6").
    assert set(others.values()) == ({"EPERM"} if ABI >= 6 else {"ok"}), probe
    # As Popen's child: no signal blocked, SIGPIPE and SIGXFSZ at their defaults (the server ignores both).
    assert probe["signals_blocked"] == 0, probe
    assert probe["signals_ignored"] & ((1 << 12) | (1 << 24)) == 0, probe
    execs = found["b_record"].get("execs")
    if trace == "on":  # traced: the first exec (the server's own), then what the tree ran
        paths = [entry["path"] for entry in execs["entries"]]
        assert paths[:2] == ["/bin/sh", "/bin/true"] and paths[2] == sys.executable, execs
        assert execs["count"] == 3, execs
    else:
        assert execs is None, found["b_record"]
    assert found["b_record"]["confinement"] == f"landlock ABI {ABI}"
    assert found["back_to_back_short"] == 0, found
    assert found["status"]["confinement_failures"] == 0, found["status"]
    # A, B and the thirty back to back; the failed spawn took a spare and started no tree.
    assert found["failed_spawn"] == "FileNotFoundError", found
    assert found["failed_spawn_counted"] == [1, 0], found
    assert found["status"]["trees_confined"] == 32, found["status"]


@pytest.mark.parametrize("trace", ["on", "off"])
def test_below_signal_scoping_the_filters_guard_the_spare_and_its_creator(tmp_path: Path, trace: str) -> None:
    """At Landlock ABI 5 (no signal scope) a tree may signal processes of the server's user outside the call
    (adr/0024 "Below ABI 6"), but not the server, the spare that spawned it (its own filter), nor that spare's
    creator (the creator's filter, which the tree inherits, names it)."""
    found = run_case(tmp_path, trace, abi=5)
    probe = found["probe"]
    assert found["b_on_spare"] and found["status"]["landlock_abi"] == 5, found
    assert probe["create"] == "EACCES" and probe["chmod"] == "EPERM", probe
    assert probe["seccomp_filters"] == (2 if trace == "on" else 1) + (0 if found["native"] else 1), probe
    assert probe["server"] == "EPERM" and probe["own_spare"] == "EPERM" and probe["creator"] == "EPERM", probe
    # What only the scope refuses: another call's tree, the spares waiting (Python's pool), the server's other threads.
    scoped = {probe[name] for name in probe if name.startswith(("spare_", "thread_"))}
    assert probe["other_call"] == "ok" and scoped == {"ok"}, probe
