"""After `kill -9` of the server: the next start finds what it left by marker (and, with a cgroup, by the dead
instance's cgroup) and ends it, so `sleep 30; touch M` never touches M. Which leftovers end and which are kept
(a background job a call left running on purpose) is `find_leftovers`' decision, tested here on the leftovers
of a real server killed with -9.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from relay_shell.containment import proc
from relay_shell.containment.cgroup import INSTANCE_PREFIX, CgroupPlace, CgroupTree
from relay_shell.containment.leftovers import find_leftovers
from relay_shell.containment.units import Containment, instance_of_this_process, scope_of
from tests.conftest import fields, read_records, text_of
from tests.e2e.containment.test_containment import (
    KILL_GRACE,
    call_quietly,
    cgroup2_mount,
    contained,
    end_strays,
    moved_out,
    new_token,
    running,
    server_pid,
    spawn_shell,
    start_in_session,
    survivors,
    wait_running,
)

pytestmark = pytest.mark.anyio


def kill_9(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while proc.live(pid) and time.monotonic() < deadline:
        time.sleep(0.01)


async def run_then_kill_9(audit_path: Path, mode: str, cgroup: Path | None, command: str, token: str) -> None:
    """Start `command` as a call and kill the server with -9 while it runs."""
    killed: list[int] = []
    try:
        async with anyio.create_task_group() as group, contained(audit_path, mode, cgroup) as client:
            server = await server_pid(client)
            group.start_soon(call_quietly, client, "shell_exec", {"command": command, "timeout": 600})
            await anyio.to_thread.run_sync(lambda: wait_running(token, count=1))
            kill_9(server)
            killed.append(server)
    except Exception:  # the client reports its server vanishing; anything before the kill is a failure
        if not killed:
            raise


async def test_kill_9_then_restart_ends_the_interrupted_call(tmp_path: Path, mode: str, cgroup: Path | None) -> None:
    token = new_token()
    audit_path = tmp_path / "audit.jsonl"
    marker = tmp_path / "M"
    thirty = f"30.{token.replace('.', '')}"  # 30 seconds, and a name no other process has
    started = time.monotonic()
    await run_then_kill_9(audit_path, mode, cgroup, f"sleep {thirty}; touch {marker}", thirty)
    assert running(thirty), "the interrupted call's sleep outlives the server killed with -9 (nothing else ends it)"
    # The next start, right away: it ends what its predecessor left before it serves.
    async with contained(audit_path, mode, cgroup) as client:
        assert survivors(thirty, within=2.0) == {}
        result = await client.call_tool("shell_exec", {"command": "echo serving"})
        assert text_of(result) == "[exit 0]\nserving\n"
    # The log says what happened: the call's start record has no end record, `audit verify` passes and lists it
    # as interrupted, and the next start's `server:start` record names the call and the processes it ended.
    records = read_records(audit_path)
    ended_calls = {record["call_id"] for record in records if record.get("phase") == "end"}
    (start,) = [record for record in records if record.get("phase") == "start" and record["call_id"] not in ended_calls]
    assert thirty in start["args"]["command"]
    restart = [record for record in records if record["tool"] == "server:start"][-1]
    assert [call["call_id"] for call in restart["interrupted"]] == [start["call_id"]]
    ended = [leftover for leftover in restart["leftover_processes"] if leftover["call_id"] == start["call_id"]]
    assert ended and all(leftover["ended"] for leftover in ended), restart["leftover_processes"]
    verified = subprocess.run(
        [sys.executable, "-m", "relay_shell", "audit", "verify", str(audit_path)], capture_output=True, text=True
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "interrupted" in verified.stdout and start["call_id"] in verified.stdout, verified.stdout
    # The shell that would have run `touch M` was ended too: M never appears.
    while time.monotonic() - started < 32:
        assert not marker.exists(), "the interrupted call ran on after the restart"
        await anyio.sleep(0.5)
    assert not marker.exists()


async def test_leftovers_of_a_killed_server_ended_or_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An interrupted call and a session are ended; a background job of a call that ended normally is kept
    and adopted (it ends when the adopting server stops); nothing of a live server is touched."""
    audit_path = tmp_path / "audit.jsonl"
    interrupted, job, in_session = new_token(), new_token(), new_token()
    unit_file = tmp_path / "unit"
    killed: list[int] = []
    try:
        try:
            async with anyio.create_task_group() as group, contained(audit_path, "subreaper", None) as client:
                server = await server_pid(client)
                left = await client.call_tool("shell_exec", {"command": f"setsid sleep {job}1 & echo ok"})
                assert text_of(left) == "[exit 0]\nok\n"
                session_id = await spawn_shell(client)
                await start_in_session(client, session_id, in_session)
                command = f'echo "$RELAY_SHELL_UNIT" > {unit_file}; setsid sleep {interrupted}1 & sleep 300'
                group.start_soon(call_quietly, client, "shell_exec", {"command": command})
                for token in (interrupted, job, in_session):
                    await anyio.to_thread.run_sync(lambda token=token: wait_running(token, count=1))
                kill_9(server)
                killed.append(server)
        except Exception:  # the client reports its server vanishing; anything before the kill is a failure
            if not killed:
                raise
        interrupted_call = unit_file.read_text().strip().rsplit(":call-", 1)[1]
        # A fresh containment of the same audit log (this process is neither a subreaper nor in a cgroup: only
        # finding, ending and adopting are exercised). It sets the marker in this process's environment.
        monkeypatch.setenv("RELAY_SHELL_UNIT", "")
        containment = Containment("subreaper", "test", scope_of(audit_path))
        found = find_leftovers(containment, interrupted_call_ids={interrupted_call})
        by_unit = {leftover.unit: leftover for leftover in found}
        assert by_unit[f"call-{interrupted_call}"].ended
        assert [leftover.ended for leftover in found if leftover.unit.startswith("session-")] == [True]
        kept = [leftover for leftover in found if not leftover.ended]
        assert len(kept) == 1 and kept[0].unit.startswith("call-"), found
        assert "on purpose" in kept[0].reason
        assert survivors(interrupted) == {} and survivors(in_session) == {}
        assert len(running(job)) == 1, "the background job left on purpose must run on"
        assert set(running(job)) <= set(containment.adopted), "it is adopted: the new server ends it when it stops"
        assert all(record["instance"].startswith(str(server)) for record in (lo.record() for lo in found))
        # A second look finds only the adopted job, still kept: the report is stable across restarts.
        again = find_leftovers(containment, interrupted_call_ids=set())
        assert [leftover.ended for leftover in again] == [False]
    finally:
        for token in (interrupted, job, in_session):
            end_strays(token)


async def test_adopted_leftovers_in_a_cgroup_end_when_the_server_stops(
    tmp_path: Path, cgroup_parent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cgroup mode: the dead server's instance cgroup is found; its interrupted call is ended, and so is a process
    that left its unit for the instance's own cgroup and dropped its marker (a `stray`: nothing says it was left
    running on purpose); the kept job is moved into the new instance's cgroup, the dead instance's cgroups are
    removed, and the new instance's shutdown ends the adopted job."""
    audit_path = tmp_path / "audit.jsonl"
    interrupted, job, stray = new_token(), new_token(), new_token()
    unit_file = tmp_path / "unit"
    killed: list[int] = []
    try:
        try:
            async with anyio.create_task_group() as group, contained(audit_path, "cgroup", cgroup_parent) as client:
                server = await server_pid(client)
                # This job drops the marker: only its cgroup still says where it belongs.
                dropped = f"env -u RELAY_SHELL_UNIT setsid sleep {job}1 & echo ok"
                assert text_of(await client.call_tool("shell_exec", {"command": dropped})) == "[exit 0]\nok\n"
                moved = moved_out(stray, 1) + "echo ok"
                assert text_of(await client.call_tool("shell_exec", {"command": moved})) == "[exit 0]\nok\n"
                command = f'echo "$RELAY_SHELL_UNIT" > {unit_file}; sleep {interrupted}1'
                group.start_soon(call_quietly, client, "shell_exec", {"command": command})
                for token in (interrupted, job, stray):
                    await anyio.to_thread.run_sync(lambda token=token: wait_running(token, count=1))
                kill_9(server)
                killed.append(server)
        except Exception:  # the client reports its server vanishing; anything before the kill is a failure
            if not killed:
                raise
        dead = [path for path in cgroup_parent.iterdir() if path.name.startswith(INSTANCE_PREFIX)]
        assert len(dead) == 1 and str(server) in dead[0].name
        interrupted_call = unit_file.read_text().strip().rsplit(":call-", 1)[1]
        # The new instance's cgroup tree, made by hand: setup() would move this test process between cgroups.
        monkeypatch.setenv("RELAY_SHELL_UNIT", "")
        scope = scope_of(audit_path)
        name = f"{INSTANCE_PREFIX}{scope}-{instance_of_this_process()}"  # a live instance: this test process
        tree = CgroupTree(CgroupPlace(mount=cgroup2_mount(), own=cgroup_parent), name)
        tree.directory.mkdir()
        tree.can_freeze = True
        containment = Containment("cgroup", "test", scope, tree)
        found = find_leftovers(containment, interrupted_call_ids={interrupted_call})
        assert {(leftover.unit.split("-")[0], leftover.ended) for leftover in found} == {
            ("call", True),
            ("call", False),
            ("stray", True),
        }, found
        assert survivors(interrupted) == {} and survivors(stray) == {}
        job_pids = set(running(job))
        assert len(job_pids) == 1
        in_instance = set((tree.directory / "cgroup.procs").read_text().split())
        assert {str(pid) for pid in job_pids} <= in_instance, "the kept job moved into the new instance's cgroup"
        assert not dead[0].exists(), "the dead instance's cgroups are removed"
        assert containment.status()["adopted_processes"] == 1
        await containment.shutdown(KILL_GRACE)
        assert survivors(job) == {}
        assert not tree.directory.exists()
    finally:
        for token in (interrupted, job, stray):
            end_strays(token)


async def test_a_live_servers_units_are_never_leftovers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Two containments of one audit log: the second finds nothing of the first while the first runs."""
    monkeypatch.setenv("RELAY_SHELL_UNIT", "")
    scope = scope_of(tmp_path / "audit.jsonl")
    first = Containment("subreaper", "test", scope)
    sleeper = new_token()
    unit = first.open_unit("call", "live-" + secrets.token_hex(3))
    assert unit is not None
    with unit.spawning(None) as env:
        child = subprocess.Popen(["sleep", f"{sleeper}1"], env=env, start_new_session=True)
    unit.started(child.pid)
    try:
        # vfork resumes the server as soon as exec starts, before the new environment is in place: wait for it.
        deadline = time.monotonic() + 5
        while proc.read_marker(child.pid) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc.read_marker(child.pid) == unit.marker
        second = Containment("subreaper", "test", scope)
        second.instance = "1-1"  # another (dead-looking) instance name, same process: the first is alive
        second.instance_prefix = f"{scope}:{second.instance}:"
        assert find_leftovers(second, interrupted_call_ids=None) == []
        assert proc.live(child.pid)
    finally:
        child.kill()
        child.wait()
        unit.release()


async def test_a_cgroup_merely_named_like_an_instance_is_left_alone(
    tmp_path: Path, cgroup_parent: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only `relay-shell-<scope>-<pid>-<start time>` is a server instance's directory: an operator's cgroup named
    `relay-shell-test` (with empty cgroups below it) next to the server's is neither ended nor emptied."""
    monkeypatch.setenv("RELAY_SHELL_UNIT", "")
    foreign = cgroup_parent / f"{INSTANCE_PREFIX}test-{secrets.token_hex(3)}"
    (foreign / "spare").mkdir(parents=True)
    try:
        scope = scope_of(tmp_path / "audit.jsonl")
        name = f"{INSTANCE_PREFIX}{scope}-{instance_of_this_process()}"
        tree = CgroupTree(CgroupPlace(mount=cgroup2_mount(), own=cgroup_parent), name)
        tree.directory.mkdir()
        containment = Containment("cgroup", "test", scope, tree)
        assert [path for path, _, _ in tree.instances()] == [tree.directory]
        assert find_leftovers(containment, interrupted_call_ids=None) == []
        assert (foreign / "spare").is_dir(), "a cgroup that is no instance was emptied"
        tree.remove(tree.directory)
    finally:
        (foreign / "spare").rmdir()
        foreign.rmdir()


async def start_then_kill_9(audit_path: Path, cgroup: Path, command: str | None = None) -> None:
    """A cgroup-mode server of this audit log starts (and so deals with its predecessors' leftovers), runs
    `command` to its normal end if given, and is killed with -9."""
    killed: list[int] = []
    try:
        async with contained(audit_path, "cgroup", cgroup) as client:
            server = await server_pid(client)
            if command is not None:
                result = await client.call_tool("shell_exec", {"command": command})
                assert text_of(result) == "[exit 0]", text_of(result)
            kill_9(server)
            killed.append(server)
    except Exception:  # the client reports its server vanishing; anything before the kill is a failure
        if not killed:
            raise


async def test_an_adopted_job_without_its_marker_stays_kept_across_restarts(
    tmp_path: Path, cgroup_parent: Path
) -> None:
    """cgroup mode, two crashes. Server 1's call ends normally and leaves a background job that dropped its
    marker; server 1 is killed with -9. Server 2 adopts the job (moved into its instance directory) and is killed
    with -9 too. Server 3 must keep it again: unmarked, outside every unit, it looks like a stray, but server 2
    recorded it as adopted. It ends when server 3 stops."""
    audit_path = tmp_path / "audit.jsonl"
    job = new_token()
    try:
        await start_then_kill_9(audit_path, cgroup_parent, f"sh -c 'env -u RELAY_SHELL_UNIT sleep {job}1 >/dev/null &'")
        (pid,) = wait_running(job, count=1)
        await start_then_kill_9(audit_path, cgroup_parent)
        assert list(running(job)) == [pid], "server 2 kept the job"
        async with contained(audit_path, "cgroup", cgroup_parent) as client:
            assert list(running(job)) == [pid], "server 3 ended the job server 2 had adopted"
            info = fields(await client.call_tool("server_info", {}))["info"]["containment"]
            assert info["adopted_processes"] == 1, info
            _, second, third = [record for record in read_records(audit_path) if record["tool"] == "server:start"]
            kept_by_second = [leftover for leftover in second["leftover_processes"] if pid in leftover["pids"]]
            assert [leftover["ended"] for leftover in kept_by_second] == [False], second["leftover_processes"]
            kept_by_third = [leftover for leftover in third["leftover_processes"] if pid in leftover["pids"]]
            assert [(leftover["unit"], leftover["ended"]) for leftover in kept_by_third] == [("adopted", False)], third
        assert survivors(job) == {}, "the adopted job ends when the server that adopted it stops"
    finally:
        end_strays(job)


def test_a_start_that_fails_before_serving_leaves_no_instance_cgroup(cgroup_parent: Path) -> None:
    """cli.serve fails between ContainmentStart and result() (an import error, the open files limit): cancel()
    moves the process back to its own cgroup and removes the instance directory and its spares."""
    script = (
        "import sys\n"
        "from relay_shell.containment.start import ContainmentStart\n"
        "start = ContainmentStart('cgroup', '0123456789ab')\n"
        "start.thread.join()\n"
        "made = start.tree is not None and start.tree.directory.is_dir() and len(start.tree.spares) > 0\n"
        "start.cancel()\n"
        "print(made, [line for line in open('/proc/self/cgroup') if line.startswith('0::')][0].strip())\n"
    )
    enter = 'echo $$ > "$1/cgroup.procs" && exec "$0" -c "$2"'
    done = subprocess.run(
        ["/bin/sh", "-c", enter, sys.executable, str(cgroup_parent), script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    made, cgroup = done.stdout.split()
    assert made == "True", "the thread made no instance directory with spares: nothing was tested"
    assert cgroup.endswith(cgroup_parent.name), cgroup
    assert [path.name for path in cgroup_parent.iterdir() if path.is_dir()] == []
