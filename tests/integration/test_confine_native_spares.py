"""Readonly's spares made in C (trace/spares.c, confine/spares.py `NativeSparePool`, adr/0037 "Round 6"), with real
processes, the exec trace on and off, each case in a fresh interpreter: where the compiled library is built, a
readonly one-shot tree is spawned by a native spare — no Python spare thread runs (`SpareThread.run` is never
called), the traced spawn is not handed over through the spawner's turn to a Python spare (`Spawner.run_on`), the
tree's first exec is let go by the compiled answerer (it reports the child's pid) — and the spare thread ends after
its one spawn. With RELAY_EXEC_TRACE_ANSWERER=python the pool is Python's, as before, and every probe of
test_confine_spares.py (a domain of its own, the filters, the signals it cannot send) holds on it too; against the
native spares they run in that file as they are."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from relay_shell.trace import native
from tests.conftest import REPO_ROOT, server_env
from tests.integration import test_confine_spares as spare_cases

PROGRAM = r"""
import asyncio, json, os, sys, time
from relay_shell.settings.model import Settings
from relay_shell.containment.start import start_containment
from relay_shell.containment.units import scope_of
from relay_shell.confine import spares
from relay_shell.launch import start_launcher
from relay_shell.metrics import Metrics
from relay_shell.trace import spawners

TRACE, AUDIT = sys.argv[1:3]
counted = {"spare_thread_run": 0, "run_on": 0}

def counting(name, function):
    def wrapper(*args, **kwargs):
        counted[name] += 1
        return function(*args, **kwargs)
    return wrapper

spares.SpareThread.run = counting("spare_thread_run", spares.SpareThread.run)
spawners.Spawner.run_on = counting("run_on", spawners.Spawner.run_on)

def ready(pool):
    # The thread that spawns next: Python's last spare made, or the native pool's creator.
    deadline = time.monotonic() + 10
    while not (pool.serving if hasattr(pool, "serving") else len(pool.ready) >= 4):
        assert time.monotonic() < deadline, f"spares not made: {pool.problem}"
        time.sleep(0.01)
    return [pool.creator_id] if hasattr(pool, "serving") else [spare.thread_id for spare in pool.ready]

async def main():
    settings = Settings(audit={"audit_path": AUDIT}, trace={"exec_trace": TRACE}, policy={"policy_mode": "readonly"})
    containment = start_containment("auto", scope_of(AUDIT))
    launcher = start_launcher(settings, containment, Metrics(enabled=False), lambda call_id, execs: None)
    confinement = launcher.confinement
    pool = confinement.traced_spares or confinement.spares
    found = {"pool": type(pool).__name__}
    try:
        spawning = ready(pool)[-1]  # the next spawn takes the last one made
        taken = pool.taken
        threads_before = sorted(os.listdir("/proc/self/task"))
        tree = launcher.call_tree("b")
        child = await tree.start_command(["/bin/sh", "-c", "/bin/true; echo $$"], None, None, False, True)
        found["child_pid_said"] = int(child.stdout.read().decode())
        found["child_pid"] = child.pid
        child.wait(10)
        found["taken"] = pool.taken - taken
        tracer = launcher.tracer
        answerer = getattr(tracer, "answerer", None)
        if answerer is not None:
            found["first_answered"] = answerer.first_answered(tracer.lineage.token_of[tree.tracing.execs])
        tree.release()
        deadline = time.monotonic() + 5
        while os.path.exists(f"/proc/self/task/{spawning}") and time.monotonic() < deadline:
            time.sleep(0.01)
        found["spare_ended"] = not os.path.exists(f"/proc/self/task/{spawning}")
        found["threads_same"] = sorted(os.listdir("/proc/self/task")) == threads_before
        found["counted"] = counted
    finally:
        await launcher.shutdown(1.0)
    print(json.dumps(found))

asyncio.run(main())
"""


def run_program(tmp_path: Path, trace: str) -> dict[str, Any]:
    (tmp_path / "case.py").write_text(PROGRAM)
    audit = tmp_path / "audit.jsonl"
    argv = [sys.executable, str(tmp_path / "case.py"), trace, str(audit)]
    ran = subprocess.run(argv, env=server_env(audit), capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert ran.returncode == 0, ran.stderr[-4000:]
    found: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])
    return found


def _built() -> bool:
    library, _ = native.load()
    return library is not None and bool(library.spares_available())


@pytest.mark.parametrize("trace", ["on", "off"])
def test_readonly_trees_spawn_on_native_spares(tmp_path: Path, trace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(native.FORCE_PYTHON, raising=False)
    if not _built():  # a build without a compiler, or glibc < 2.34: the Python spares (the fallback, below)
        found = run_program(tmp_path, trace)
        assert found["pool"] == "SparePool", found
        return
    found = run_program(tmp_path, trace)
    assert found["pool"] == "NativeSparePool", found
    assert found["taken"] == 1 and found["child_pid_said"] == found["child_pid"], found
    assert found["counted"] == {"spare_thread_run": 0, "run_on": 0}, found  # no Python spare, no Python hand-over
    if trace == "on":  # the compiled answerer let the tree's first exec go: the creator's vfork-style child
        assert found["first_answered"] == found["child_pid"], found
    # The creator spawned it and goes on serving; no thread was made or ended for the tree (adr/0037 "Round 7").
    assert not found["spare_ended"] and found["threads_same"], found


@pytest.mark.parametrize("trace", ["on", "off"])
def test_the_fallback_keeps_python_spares(tmp_path: Path, trace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native.FORCE_PYTHON, "python")
    found = run_program(tmp_path, trace)
    assert found["pool"] == "SparePool", found
    assert found["taken"] == 1 and found["counted"]["spare_thread_run"] >= 4, found
    assert found["counted"]["run_on"] == (1 if trace == "on" else 0), found
    assert found["spare_ended"], found
    # Every probe of the Python spares holds as before.
    (tmp_path / "probes").mkdir()
    spare_cases.test_a_spare_tree_is_confined_in_a_domain_of_its_own(tmp_path / "probes", trace)


REFUSED = r"""
import json, os, sys, time
from relay_shell.confine.confinement import Confinement
from relay_shell.confine.landlock import abi_version, restrict_flags
from relay_shell.confine.spares import NativeSparePool
from relay_shell.errors import ToolError
from relay_shell.metrics import Metrics
from relay_shell.trace import native
from relay_shell.trace.spawn import spawn_natively

MARKER = sys.argv[1]
confinement = Confinement(abi_version(), "auto", Metrics(enabled=False))
library, _ = native.load()
# A ruleset descriptor that is not one: the kernel refuses the child's landlock_restrict_self (EBADF).
pool = NativeSparePool(library, confinement.confine_creator, -1, restrict_flags(confinement.abi), confinement.refused)
deadline = time.monotonic() + 10
while not pool.serving:
    assert time.monotonic() < deadline
    time.sleep(0.01)
found = {}
spare = pool.take()
try:
    spawn_natively(spare, 0, ["/bin/sh", "-c", f"echo ran > {MARKER}"], None, None, False, True, "/bin/sh", (-1, -1))
    found["outcome"] = "ran"
except ToolError as exc:
    found["outcome"] = exc.kind
found["problem"] = pool.problem
found["next_take"] = pool.take() is not None
found["failures"] = confinement.failures
print(json.dumps(found))
"""


def test_a_tree_whose_domain_is_refused_runs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The native pool's child makes its own Landlock domain before its exec: when the kernel refuses it, the child
    runs nothing (no file written), the call says ConfinementFailed, and the pool submits no spawn any more (calls
    then confine a thread of their own, which refuses the same way)."""
    monkeypatch.delenv(native.FORCE_PYTHON, raising=False)
    if not _built():  # no native pool here: the Python spares confine themselves (their refusal: test_confinement)
        from relay_shell.confine.spares import native_library

        assert native_library() is None
        return
    (tmp_path / "case.py").write_text(REFUSED)
    marker = tmp_path / "marker"
    audit = tmp_path / "audit.jsonl"
    argv = [sys.executable, str(tmp_path / "case.py"), str(marker)]
    ran = subprocess.run(argv, env=server_env(audit), capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert ran.returncode == 0, ran.stderr[-4000:]
    found = json.loads(ran.stdout.strip().splitlines()[-1])
    assert found["outcome"] == "ConfinementFailed" and not marker.exists(), found
    assert "Bad file descriptor" in found["problem"] and not found["next_take"], found
    assert found["failures"] == 1, found
