"""The native spawner (adr/0036): a traced one-shot tree's first process spawned by the spawner thread in C, its
first exec answered by the compiled answerer, none of it waiting for the GIL. Real launchers in child interpreters
(cgroup containment in a fresh cgroup2 subtree, the real filter and listener), the same calls run twice: with the
native spawner, and with RELAY_EXEC_TRACE_ANSWERER=python (the Python path, as before). What must hold:

- natively, the tree's first exec is answered by the answerer (it reports the child's pid), and no Python work runs
  on the spawner thread for the spawn (`Spawner.run` is not called); on the Python path the reverse (this is what
  fails without the native spawner);
- the records are the Python path's: the same entries (path, argv, program, outcome; the first exec's pid is the
  child's, its parent the server), count and digest;
- the child is born in its unit's cgroup, and the spawner thread is back in the server's cgroup after the spawn;
- a spawn failure is reported as before: a missing program, a missing working directory, a name not on PATH (the
  OSError, its errno and the name it gives), the first exec recorded with its error; RELAY_SHELL_EXEC_DENY refusing
  the first program (ExecDenied, nothing spawned) or a later one (EPERM, decided in Python);
- work posted to the spawner thread (`run`, `post`: readonly's confined spares are made so) still runs on it;
- natively on x86_64 the child is born in its unit by clone3(CLONE_INTO_CGROUP), the spawner thread never entering
  it (adr/0036 "Round 2"); where clone3 fails with ENOSYS (a third run, under tests/refuse_syscall.py's clone3
  filter: an old kernel, or a container's seccomp profile) the unit is entered and left around posix_spawn, with
  the same records, cgroups and spawn semantics (session, descriptors, signal dispositions and mask, working
  directory) as the Python path's.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, server_env
from tests.e2e.containment.test_containment import cgroup_subtree

PROGRAM = r"""
import asyncio, errno, json, os, sys, threading
from pathlib import Path
from relay_shell.containment.start import start_containment
from relay_shell.containment.units import scope_of
from relay_shell.errors import ToolError
from relay_shell.launch import start_launcher
from relay_shell.metrics import Metrics
from relay_shell.plan import Plan, Subject
from relay_shell.settings.model import Settings
from relay_shell.trace import native as native_module
from relay_shell.trace.spawners import Spawner

AUDIT = Path(sys.argv[1])
found = {}
runs = []
real_run = Spawner.run
def counted_run(self, work):
    runs.append(1)
    return real_run(self, work)
Spawner.run = counted_run

async def nothing(*args, **kwargs):
    return None

def cgroup_of(path):
    return [line for line in Path(path).read_text().splitlines() if line.startswith("0::")][0][3:]

async def call(launcher, name, argv, cwd=None):
    tree = launcher.call_tree(name)
    before = len(runs)
    out = {"unit_cgroup": str(tree.unit.cgroup)}
    try:
        child = await tree.start_command(argv, cwd, None, False, True)
        out["run_calls"] = len(runs) - before
        tracer = launcher.tracer
        token = tracer.lineage.token_of[tree.trace.execs]
        out["answered_natively"] = tracer.answerer is not None and tracer.answerer.first_answered(token) == child.pid
        out["output"] = child.stdout.read().decode()
        child.wait(10)
        out["pid"] = child.pid
        out["exit"] = child.returncode
    except ToolError as exc:
        out["error"] = exc.kind
    except OSError as exc:
        out["error"] = [errno.errorcode.get(exc.errno, "?"), exc.filename]
    plan = Plan(subject=Subject(fixed_tier=0), execute=nothing)
    plan.call_id = name
    tree.trace.finish_into(plan)
    tree.release()
    out["execs"] = (plan.record_fields or {}).get("execs")
    found[name] = out

async def main():
    settings = Settings(
        audit={"audit_path": AUDIT}, trace={"exec_trace": "on", "exec_deny": '["^/usr/bin/id( |$)"]'},
        policy={"policy_mode": "open"},
    )
    containment = start_containment("cgroup", scope_of(AUDIT))
    launcher = start_launcher(settings, containment, Metrics(enabled=False), lambda call_id, execs: None)
    tracer = launcher.tracer
    found["native_spawns"] = tracer.native_spawns
    found["server"] = os.getpid()
    spawner_cgroup = f"/proc/self/task/{tracer.spawner.thread_id}/cgroup"
    found["spawner_home"] = cgroup_of(spawner_cgroup)
    try:
        await call(launcher, "c1", ["/bin/sh", "-c", "/bin/true; /bin/echo hi; cat /proc/self/cgroup"])
        found["spawner_after"] = cgroup_of(spawner_cgroup)
        await call(launcher, "c2", ["sh", "-c", "exec /bin/echo two words"])
        await call(launcher, "missing", ["/nonexistent/program", "x"])
        await call(launcher, "missing_cwd", ["/bin/true"], cwd="/nonexistent/directory")
        await call(launcher, "not_on_path", ["no-such-program-here"])
        await call(launcher, "denied_first", ["/usr/bin/id"])
        await call(launcher, "denied_later", ["/bin/sh", "-c", "/usr/bin/id; echo after $?"])
        ran_on = []
        tracer.spawner.run(lambda: ran_on.append(threading.get_native_id()))
        posted = threading.Event()
        tracer.spawner.post(lambda: (ran_on.append(threading.get_native_id()), posted.set()))
        posted.wait(10)
        await call(launcher, "after_post", ["/bin/echo", "after"])
        found["work_on_spawner"] = ran_on == [tracer.spawner.thread_id] * 2
        inheritable = os.open("/dev/null", os.O_RDONLY)  # a descriptor of the server's without close-on-exec
        os.set_inheritable(inheritable, True)
        await call(launcher, "semantics", ["/bin/sh", "-c", SEMANTICS], cwd="/tmp")
        os.close(inheritable)
        found["spawner_after_all"] = cgroup_of(spawner_cgroup)
        found["born_in_unit"] = native_module.born_in_unit()
    finally:
        await launcher.shutdown(1.0)
    print(json.dumps(found))

# What the child was given: its working directory, its descriptors, the session it leads, its signals' dispositions
# and mask (cat's, after sh's exec: what was ignored at the spawn stays ignored across exec).
SEMANTICS = (
    "pwd; ls /proc/self/fd; read p c st pp pg s rest < /proc/$$/stat; [ $s = $$ ] && echo leader;"
    " grep -E '^Sig(Blk|Ign)' /proc/self/status"
)

asyncio.run(main())
"""


REFUSE_SYSCALL = Path(__file__).parents[2] / "refuse_syscall.py"


def launch(tmp_path: Path, cgroup: Path, force_python: bool, no_clone3: bool = False) -> dict[str, Any]:
    script = tmp_path / "native_case.py"
    script.write_text(PROGRAM)
    audit = tmp_path / ("python" if force_python else "no_clone3" if no_clone3 else "native") / "audit.jsonl"
    audit.parent.mkdir()
    argv = ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && shift && exec "$@"', str(cgroup), "-"]
    if no_clone3:
        argv += [sys.executable, str(REFUSE_SYSCALL), "clone3", "ENOSYS"]
    argv += [sys.executable, str(script), str(audit)]
    env = server_env(audit)
    env.pop("RELAY_EXEC_TRACE_ANSWERER", None)  # both ways here, whatever the suite's run says
    if force_python:
        env["RELAY_EXEC_TRACE_ANSWERER"] = "python"
    ran = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert ran.returncode == 0, ran.stderr[-4000:]
    found: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])
    return found


@pytest.fixture(scope="module", name="both")
def both_fixture(tmp_path_factory: pytest.TempPathFactory) -> dict[Any, dict[str, Any]]:
    cgroups = cgroup_subtree()
    cgroup = next(cgroups)
    try:
        found = {force: launch(tmp_path_factory.mktemp("native"), cgroup, force) for force in (False, True)}
        found["no_clone3"] = launch(tmp_path_factory.mktemp("native"), cgroup, False, no_clone3=True)
        return found
    finally:
        for directory in sorted(cgroup.glob("*/*"), reverse=True) + list(cgroup.glob("*")):
            with contextlib.suppress(OSError):
                directory.rmdir()
        next(cgroups, None)


def comparable(execs: dict[str, Any]) -> dict[str, Any]:
    """A record without what differs between two runs of the same calls: pids and times."""
    entries = [{k: v for k, v in entry.items() if k not in ("pid", "ppid", "t_ms")} for entry in execs["entries"]]
    return {**execs, "entries": entries}


CALLS = ["c1", "c2", "missing", "missing_cwd", "not_on_path", "denied_first", "denied_later", "after_post", "semantics"]


def test_the_first_exec_is_answered_natively_without_python_on_the_spawner_thread(
    both: dict[Any, dict[str, Any]],
) -> None:
    native, python = both[False], both[True]
    assert native["native_spawns"] is True and python["native_spawns"] is False
    for name in ("c1", "c2", "after_post"):
        assert native[name]["answered_natively"] is True, (name, native[name])
        assert native[name]["run_calls"] == 0, (name, native[name])
        assert python[name]["answered_natively"] is False, (name, python[name])
        assert python[name]["run_calls"] == 1, (name, python[name])


def test_the_records_are_the_python_paths(both: dict[Any, dict[str, Any]]) -> None:
    native, python = both[False], both[True]
    for name in CALLS:
        assert comparable(native[name]["execs"]) == comparable(python[name]["execs"]), name
        assert native[name].get("error") == python[name].get("error"), name
        assert native[name].get("output") == python[name].get("output") or name == "c1", name
    first = native["c1"]["execs"]["entries"][0]
    assert (first["pid"], first["ppid"], first["path"], first["program"]) == (
        native["c1"]["pid"], native["server"], "/bin/sh", "/usr/bin/dash"
    ), first  # fmt: skip
    paths = [entry["path"] for entry in native["c1"]["execs"]["entries"]]
    assert paths == ["/bin/sh", "/bin/true", "/bin/echo", "/usr/bin/cat"], paths
    assert native["c2"]["output"] == "two words\n"


def test_the_child_is_born_in_its_unit_and_the_spawner_goes_home(both: dict[Any, dict[str, Any]]) -> None:
    native = both[False]
    child_cgroup = next(line for line in native["c1"]["output"].splitlines() if line.startswith("0::"))[3:]
    unit_cgroup = native["c1"]["unit_cgroup"]
    assert "/unit-" in child_cgroup and unit_cgroup.endswith(child_cgroup), (child_cgroup, unit_cgroup)
    assert native["c1"]["output"].startswith("hi\n")
    assert native["spawner_after"] == native["spawner_home"] and "/unit-" not in native["spawner_home"], native


def test_spawn_failures_are_reported_as_before(both: dict[Any, dict[str, Any]]) -> None:
    native = both[False]
    assert native["missing"]["error"] == ["ENOENT", "/nonexistent/program"]
    [entry] = native["missing"]["execs"]["entries"]
    assert (entry["path"], entry["ok"], entry["error"]) == ("/nonexistent/program", False, "ENOENT"), entry
    assert native["missing_cwd"]["error"] == ["ENOENT", "/nonexistent/directory"]
    assert native["not_on_path"]["error"] == ["ENOENT", "no-such-program-here"]
    assert native["denied_first"]["error"] == "ExecDenied"
    assert native["denied_first"]["execs"]["count"] == 1 and native["denied_first"]["execs"]["entries"][0]["denied"]
    later = native["denied_later"]
    assert later["output"] == "/bin/sh: 1: /usr/bin/id: Operation not permitted\nafter 126\n", later["output"]
    assert [entry["path"] for entry in later["execs"]["entries"]] == ["/bin/sh", "/usr/bin/id"], later["execs"]
    assert later["execs"]["entries"][1].get("denied") is True, later["execs"]


def test_work_for_python_still_runs_on_the_spawner_thread(both: dict[Any, dict[str, Any]]) -> None:
    for found in both.values():
        assert found["work_on_spawner"] is True
        assert found["after_post"]["output"] == "after\n"


def test_the_child_is_born_in_its_unit_by_clone3_where_it_can_be(both: dict[Any, dict[str, Any]]) -> None:
    native, refused, python = both[False], both["no_clone3"], both[True]
    # Every native spawn that had a unit went by clone3 (the calls that spawned: c1, c2, denied_later, after_post,
    # semantics; not the three failures, whose children could not exec), none where clone3 fails or from Python.
    assert native["born_in_unit"] == 5, native["born_in_unit"]
    assert refused["born_in_unit"] == 0 and python["born_in_unit"] == 0, (refused, python)
    assert refused["native_spawns"] is True
    for name in ("c1", "c2", "after_post", "semantics"):
        assert refused[name]["answered_natively"] is True, (name, refused[name])
        assert refused[name]["run_calls"] == 0, (name, refused[name])
    for name in CALLS:
        assert comparable(refused[name]["execs"]) == comparable(python[name]["execs"]), name
        assert refused[name].get("error") == python[name].get("error"), name
    for found in (native, refused):
        child_cgroup = next(line for line in found["c1"]["output"].splitlines() if line.startswith("0::"))[3:]
        assert "/unit-" in child_cgroup and found["c1"]["unit_cgroup"].endswith(child_cgroup), found["c1"]
        assert found["spawner_after_all"] == found["spawner_home"], found


def test_the_spawn_gives_the_child_what_the_python_path_gives(both: dict[Any, dict[str, Any]]) -> None:
    python = both[True]["semantics"]["output"]
    assert python.splitlines() == [
        "/tmp", "0", "1", "2", "3", "leader", "SigBlk:\t0000000000000000", "SigIgn:\t0000000000000000"
    ], python  # fmt: skip
    assert both[False]["semantics"]["output"] == python
    assert both["no_clone3"]["semantics"]["output"] == python
