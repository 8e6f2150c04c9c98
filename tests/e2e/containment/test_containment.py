"""End to end: nothing a call or a session starts outlives it, escapes included.

Each workload starts three processes that leave their process group and session — a `setsid` grandchild, a
double-forked daemon and a `nohup` job — each a `sleep` with a unique duration so /proc finds it. They are
counted before (all three run, while the call is still in flight) and after the event that must end them: a
timeout, an MCP cancellation, session_kill, session reaping, the client disconnecting, SIGTERM of the server.
The timeout and session_kill tests add an escape that also drops the unit's marker: only cgroup membership
finds it (under the subreaper it runs on until the server stops, as adr/0015 says). Every test runs under both
containments: the subreaper fallback (as CI runs it, forced with RELAY_SHELL_CONTAINMENT=subreaper) and a
cgroup2 subtree this test creates and starts the server in (as a systemd unit with Delegate=yes would; needs
root — on a machine where it cannot be made the test fails and says why, it does not skip).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import CallToolResult

from tests.conftest import fields, server_env, text_of
from tests.procs import live_argvs

pytestmark = pytest.mark.anyio

MODES = ["subreaper", "cgroup"]
KILL_GRACE = 1.0
SLACK = 5.0  # on top of the kill grace, for a loaded machine: never a timing assertion
ESCAPE_KINDS = {"1": "setsid grandchild", "2": "double-forked daemon", "3": "nohup job", "4": "unmarked escape"}
PROMPT = "READY> "


# -- the workload ------------------------------------------------------------------------------------------


def new_token() -> str:
    """A unique sleep duration prefix (days long): `sleep <token>1` … `sleep <token>3`."""
    return f"{secrets.randbelow(900000) + 100000}.{secrets.randbelow(9000) + 1000}"


def escapes(token: str) -> str:
    """Shell text that starts the three escapes and returns at once: each leaves the command's process group
    and session, and none is a child of the command's shell any more."""
    daemon = (
        "import os; os.fork() and os._exit(0); os.setsid(); os.fork() and os._exit(0); "
        f"os.execvp('sleep', ['sleep', '{token}2'])"
    )
    return f'(setsid sleep {token}1 &); python3 -c "{daemon}"; (setsid nohup sleep {token}3 >/dev/null 2>&1 &); '


def unmarked_escape(token: str) -> str:
    """Shell text: a `setsid` escape that also drops the unit's marker (`sleep <token>4`), re-parented away from
    the command's tree at once. Nothing but its cgroup says which unit it belongs to."""
    return f"env -u RELAY_SHELL_UNIT setsid sh -c 'sleep {token}4 &'; "


def moved_out(token: str, levels: int) -> str:
    """Shell text: `sleep <token>` that drops the unit's marker, leaves the command's session and (at once, as
    its subshell exits) its process tree, and moves itself `levels` cgroups up from its unit (1: the server
    instance's own directory; 2: the cgroup the server was started in), as any process of the server's uid may
    in a delegated subtree."""
    up = "/.." * levels
    target = f'"{cgroup2_mount()}$(sed -n s/^0:://p /proc/self/cgroup){up}/cgroup.procs"'
    return f"(env -u RELAY_SHELL_UNIT setsid sh -c 'echo $$ > {target} && exec sleep {token}' &); "


def running(token: str) -> dict[int, str]:
    """Live processes `sleep <token>N`, by pid, with what they are."""
    found = {}
    for pid, argv in live_argvs().items():
        if argv[0] == b"sleep" and len(argv) > 1 and argv[1].startswith(token.encode()):
            found[pid] = ESCAPE_KINDS.get(argv[1].decode()[len(token) :], argv[1].decode())
    return found


def wait_running(token: str, count: int = 3, within: float = 15.0) -> dict[int, str]:
    deadline = time.monotonic() + within
    while True:
        found = running(token)
        if len(found) >= count or time.monotonic() > deadline:
            assert len(found) >= count, f"the workload did not start: {found}"
            return found
        time.sleep(0.02)


def survivors(token: str, within: float = KILL_GRACE + SLACK) -> dict[int, str]:
    """What of the workload still runs `within` seconds from now (returns as soon as nothing does)."""
    deadline = time.monotonic() + within
    while True:
        found = running(token)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


async def call_while_running(
    client: Client, tool: str, arguments: dict[str, Any], tokens: dict[str, int]
) -> CallToolResult:
    """Make the call and return its result, after checking that the workload (`tokens`: how many processes of
    each) was running while the call was still in flight: so what is counted afterwards was really ended."""
    results: list[CallToolResult] = []

    async def call() -> None:
        results.append(await client.call_tool(tool, arguments))

    async with anyio.create_task_group() as group:
        group.start_soon(call)
        try:
            for token, count in tokens.items():
                await anyio.to_thread.run_sync(lambda token=token, count=count: wait_running(token, count))
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the call: {text_of(results[0]) if results else 'still running'}") from None
        assert not results, f"the call ended before its workload was seen running: {text_of(results[0])}"
    return results[0]


def end_strays(token: str) -> None:
    """After a failed test: leave nothing running (by pid, only this test's processes)."""
    for pid in running(token):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# -- servers under each containment ------------------------------------------------------------------------


def cgroup2_mount() -> Path:
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            before, _, after = line.partition(" - ")
            if after.split(" ", 1)[0] == "cgroup2":
                return Path(before.split()[4])
    pytest.fail("this machine has no cgroup2 mount: the cgroup containment cannot be tested here")


def cgroup_subtree() -> Iterator[Path]:
    """A fresh cgroup2 subtree to start a server in, as a delegated cgroup; removed afterwards."""
    if os.geteuid() != 0:
        pytest.fail("not root: cannot create a cgroup2 subtree, so the cgroup containment is NOT tested here")
    # Not named like a server instance's directory (relay-shell-…): nothing of any server may take it for one.
    directory = cgroup2_mount() / f"rs-containment-test-{secrets.token_hex(4)}"
    try:
        directory.mkdir()
    except OSError as exc:
        pytest.fail(f"cannot create a cgroup2 subtree at {directory} ({exc}): the cgroup containment is NOT tested")
    print(f"cgroup containment tested in {directory}")
    yield directory
    left = _remove_tree(directory)
    assert not left, f"processes were still in the test's cgroup: {left}"


def _remove_tree(directory: Path) -> list[str]:
    left: list[str] = []
    for child in [path for path in directory.iterdir() if path.is_dir()]:
        left += _remove_tree(child)
    procs = (directory / "cgroup.procs").read_text().split()
    if procs:
        (directory / "cgroup.kill").write_text("1")
        deadline = time.monotonic() + 5
        while "populated 1" in (directory / "cgroup.events").read_text() and time.monotonic() < deadline:
            time.sleep(0.01)
    directory.rmdir()
    return left + procs


def server_params(audit_path: Path, mode: str, cgroup: Path | None, **settings: str) -> StdioServerParameters:
    env = server_env(audit_path, **{"containment": mode, "kill_grace": str(KILL_GRACE), **settings})
    if mode != "cgroup":
        return StdioServerParameters(command=sys.executable, args=["-m", "relay_shell"], env=env)
    assert cgroup is not None, "the cgroup mode needs the cgroup_parent fixture"
    # Enter the test's cgroup, then become the server (same pid): like a service started in its own cgroup.
    script = 'echo $$ > "$1/cgroup.procs" && exec "$0" -m relay_shell'
    return StdioServerParameters(command="/bin/sh", args=["-c", script, sys.executable, str(cgroup)], env=env)


@asynccontextmanager
async def contained(audit_path: Path, mode: str, cgroup: Path | None, **settings: str) -> AsyncIterator[Client]:
    async with Client(server_params(audit_path, mode, cgroup, **settings), mode="auto") as client:  # type: ignore[arg-type]
        info = await client.call_tool("server_info", {})
        containment = fields(info)["info"]["containment"]
        assert containment["mode"] == mode, containment
        if mode == "cgroup":
            assert str(cgroup) in containment["cgroup"], containment
        yield client


async def server_pid(client: Client) -> int:
    """The server's pid, as its own command sees it (the shell's parent)."""
    result = await client.call_tool("shell_exec", {"command": "echo $PPID"})
    return int(text_of(result).split("\n")[1])


async def spawn_shell(client: Client) -> str:
    result = await client.call_tool(
        "shell_spawn", {"env": {"PS1": PROMPT}, "until": f"^{PROMPT}$", "timeout": 10, "command": "bash --norc"}
    )
    assert not result.is_error, text_of(result)
    return str(fields(result)["session_id"])


async def start_in_session(client: Client, session_id: str, token: str, more: str = "") -> None:
    """Type the workload (and `more` shell text) into the session's shell; it ends with a long `sleep`."""
    result = await client.call_tool(
        "session_send",
        {"session_id": session_id, "data": escapes(token) + more + "sleep 3000", "until": "(?!)", "timeout": 0.5},
    )
    assert "[ERROR" not in text_of(result), text_of(result)


# -- the events --------------------------------------------------------------------------------------------


async def test_timeout_ends_every_escape(tmp_path: Path, mode: str, cgroup: Path | None, token: str) -> None:
    unmarked = new_token()
    try:
        async with contained(tmp_path / "audit.jsonl", mode, cgroup) as client:
            for number, timeout in enumerate((2, 5), start=1):
                command = escapes(token) + unmarked_escape(unmarked) + "sleep 300"
                arguments = {"command": command, "timeout": timeout}
                # Under the subreaper the unmarked escapes of both calls run; a cgroup ends each with its call.
                expected = {token: 3, unmarked: number if mode == "subreaper" else 1}
                result = await call_while_running(client, "shell_exec", arguments, expected)
                assert text_of(result).startswith(f"[TIMEOUT after {timeout}s]"), text_of(result)
                # All ran while the call was in flight (they are days long): 0 only because they were ended.
                assert survivors(token) == {}
                if mode == "cgroup":
                    assert survivors(unmarked) == {}, "the cgroup holds the escape that dropped its marker"
                else:  # nothing ties it to its call any more: it runs until the server stops (adr/0015)
                    assert len(running(unmarked)) == number
        assert survivors(unmarked) == {}, "the server's stop ends every descendant, unmarked ones included"
    finally:
        end_strays(unmarked)


async def test_workload_really_escapes_its_process_group(
    tmp_path: Path, mode: str, cgroup: Path | None, token: str
) -> None:
    """The proof the workload is worth testing: each escape has left the command's session and is no child of
    its shell (so neither killing the process group nor walking the shell's children reaches it)."""
    shell_pid = tmp_path / "shell.pid"
    async with contained(tmp_path / "audit.jsonl", mode, cgroup) as client:
        async with anyio.create_task_group() as group:
            command = f"echo $$ > {shell_pid}; " + escapes(token) + "sleep 300"
            group.start_soon(client.call_tool, "shell_exec", {"command": command, "timeout": 30})
            found = await anyio.to_thread.run_sync(wait_running, token)
            shell = int(shell_pid.read_text())
            placed = {pid: _session_and_parent(pid) for pid in found}
            assert len({session for session, _ in placed.values()}) == 3, placed
            assert all(session != shell and parent != shell for session, parent in placed.values()), placed
            group.cancel_scope.cancel()
        assert survivors(token) == {}


def _session_and_parent(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/stat", "rb") as handle:
        stat = handle.read()
    fields = stat[stat.rfind(b")") + 2 :].split()
    return int(fields[3]), int(fields[1])


async def call_quietly(client: Client, tool: str, arguments: dict[str, Any]) -> None:
    """A call that is still running when its server stops or its client leaves: its error is expected."""
    with contextlib.suppress(Exception):
        await client.call_tool(tool, arguments)


async def test_cancellation_ends_every_escape(tmp_path: Path, mode: str, cgroup: Path | None, token: str) -> None:
    async with contained(tmp_path / "audit.jsonl", mode, cgroup) as client:
        with anyio.move_on_after(30) as scope:
            async with anyio.create_task_group() as group:

                async def cancel_when_running() -> None:
                    await anyio.to_thread.run_sync(wait_running, token)
                    group.cancel_scope.cancel()  # the SDK client sends notifications/cancelled

                group.start_soon(cancel_when_running)
                await client.call_tool("shell_exec", {"command": escapes(token) + "sleep 300", "timeout": 600})
        assert not scope.cancelled_caught, "the workload never started"
        assert survivors(token) == {}
        alive = await client.call_tool("shell_exec", {"command": "echo still serving"})
        assert text_of(alive) == "[exit 0]\nstill serving\n"


async def test_session_kill_ends_every_escape(tmp_path: Path, mode: str, cgroup: Path | None, token: str) -> None:
    unmarked = new_token()
    try:
        async with contained(tmp_path / "audit.jsonl", mode, cgroup) as client:
            session_id = await spawn_shell(client)
            await start_in_session(client, session_id, token, unmarked_escape(unmarked))
            assert len(wait_running(token)) == 3 and len(wait_running(unmarked, 1)) == 1
            killed = await client.call_tool("session_kill", {"session_id": session_id})
            assert not killed.is_error, text_of(killed)
            assert survivors(token) == {}
            if mode == "cgroup":
                assert survivors(unmarked) == {}, "the cgroup holds the escape that dropped its marker"
            else:  # nothing ties it to its session any more: it runs until the server stops (adr/0015)
                assert len(running(unmarked)) == 1
        assert survivors(unmarked) == {}, "the server's stop ends every descendant, unmarked ones included"
    finally:
        end_strays(unmarked)


async def test_session_reaping_ends_every_escape(tmp_path: Path, mode: str, cgroup: Path | None, token: str) -> None:
    async with contained(tmp_path / "audit.jsonl", mode, cgroup, session_idle_timeout="3") as client:
        session_id = await spawn_shell(client)
        await start_in_session(client, session_id, token)
        assert len(wait_running(token)) == 3
        # No call on the session for 3 s: the reaper closes it.
        assert survivors(token, within=3 + 1 + KILL_GRACE + SLACK) == {}


async def test_disconnect_ends_calls_sessions_and_background_jobs(
    tmp_path: Path, mode: str, cgroup: Path | None
) -> None:
    in_call, in_session, background = new_token(), new_token(), new_token()
    try:
        async with anyio.create_task_group() as group:
            async with contained(tmp_path / "audit.jsonl", mode, cgroup) as client:
                session_id = await spawn_shell(client)
                await start_in_session(client, session_id, in_session)
                left = await client.call_tool("shell_exec", {"command": escapes(background) + "echo left running"})
                assert text_of(left) == "[exit 0]\nleft running\n"
                group.start_soon(call_quietly, client, "shell_exec", {"command": escapes(in_call) + "sleep 300"})
                for token in (in_call, in_session, background):
                    assert len(await anyio.to_thread.run_sync(wait_running, token)) == 3
            # The client closed its end with the call in flight: the server stops and ends everything.
            left_over = {token: survivors(token) for token in (in_call, in_session, background)}
        assert left_over == {in_call: {}, in_session: {}, background: {}}
    finally:
        for token in (in_call, in_session, background):
            end_strays(token)


async def test_sigterm_ends_calls_sessions_and_background_jobs(tmp_path: Path, mode: str, cgroup: Path | None) -> None:
    in_call, in_session, background = new_token(), new_token(), new_token()
    checked: dict[str, dict[int, str]] = {}
    try:
        async with contained(tmp_path / "audit.jsonl", mode, cgroup) as client:
            server = await server_pid(client)
            session_id = await spawn_shell(client)
            await start_in_session(client, session_id, in_session)
            left = await client.call_tool("shell_exec", {"command": escapes(background) + "echo left running"})
            assert text_of(left) == "[exit 0]\nleft running\n"
            async with anyio.create_task_group() as group:
                group.start_soon(call_quietly, client, "shell_exec", {"command": escapes(in_call) + "sleep 300"})
                for token in (in_call, in_session, background):
                    assert len(await anyio.to_thread.run_sync(wait_running, token)) == 3
                os.kill(server, signal.SIGTERM)
                for token in (in_call, in_session, background):
                    checked[token] = await anyio.to_thread.run_sync(survivors, token)
                group.cancel_scope.cancel()
    except Exception:
        if len(checked) < 3:  # the client may report its server gone; only what was counted matters
            raise
    finally:
        for token in (in_call, in_session, background):
            end_strays(token)
    assert checked == {in_call: {}, in_session: {}, background: {}}


async def test_background_job_runs_on_in_its_unit_and_is_counted(
    tmp_path: Path, mode: str, cgroup: Path | None, token: str
) -> None:
    """`sh -c` semantics: a job left running after a normal exit keeps running, and server_info counts it."""
    async with contained(tmp_path / "audit.jsonl", mode, cgroup) as client:
        result = await client.call_tool("shell_exec", {"command": escapes(token) + "echo started"})
        assert text_of(result) == "[exit 0]\nstarted\n"
        assert len(wait_running(token)) == 3
        time.sleep(KILL_GRACE + 0.5)
        assert len(running(token)) == 3, "a background job of a call that ended normally must run on"
        info = fields(await client.call_tool("server_info", {}))["info"]["containment"]
        assert info["background_units"] == 1, info
        assert info["background_processes"] >= 3, info
        if mode == "cgroup":
            unit_threads: set[str] = set()  # units are threaded cgroups: they list threads (here: processes)
            for unit in Path(info["cgroup"]).iterdir():
                if unit.is_dir():
                    unit_threads.update((unit / "cgroup.threads").read_text().split())
            assert {str(pid) for pid in running(token)} <= unit_threads, "the jobs stay in their call's cgroup"


async def test_many_forks_are_all_ended(tmp_path: Path, mode: str, cgroup: Path | None, token: str) -> None:
    """A bounded fork-bomb-like workload: a tree of subshells, each daemonizing a sleep (128 of them), all
    gone at the timeout."""
    tree = f"f() {{ if [ $1 -gt 0 ]; then f $(($1-1)) & f $(($1-1)); wait; else setsid sleep {token}9 & fi; }}; f 7; "
    async with contained(tmp_path / "audit.jsonl", mode, cgroup) as client:
        async with anyio.create_task_group() as group:
            group.start_soon(client.call_tool, "shell_exec", {"command": tree + "sleep 300", "timeout": 20})
            assert len(await anyio.to_thread.run_sync(lambda: wait_running(token, count=128, within=30))) == 128
            # Each escaped sleep is a session leader of its own; the timeout must end them all.
        assert survivors(token) == {}


async def test_subreaper_waits_for_the_orphans_it_inherits(tmp_path: Path) -> None:
    """Orphans re-parented to the server are its children: when they exit, the server reaps them (no zombie
    piles up), without taking the children asyncio or the executors wait for."""
    async with contained(tmp_path / "audit.jsonl", "subreaper", None) as client:
        server = await server_pid(client)
        result = await client.call_tool("shell_exec", {"command": "for i in 1 2 3 4 5; do (setsid sleep 0.5 &); done"})
        assert text_of(result) == "[exit 0]"
        time.sleep(1.0)  # the orphans have ended by now: until reaped they are zombies of the server
        deadline = time.monotonic() + 10
        while (zombies := _zombie_children(server)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert zombies == [], "orphans that ended are still zombies of the server"
        again = await client.call_tool("shell_exec", {"command": "echo fine"})  # its own child is still its own
        assert text_of(again) == "[exit 0]\nfine\n"


def _zombie_children(parent: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    stat = handle.read()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2 :].split()
            if fields[0] == b"Z" and int(fields[1]) == parent:
                found.append(int(entry))
    return found


async def test_server_info_says_which_containment_and_why(tmp_path: Path, mode: str, cgroup: Path | None) -> None:
    async with contained(tmp_path / "audit.jsonl", mode, cgroup) as client:
        info = fields(await client.call_tool("server_info", {}))["info"]["containment"]
        assert info["mode"] == mode
        assert info["reason"].startswith("asked for")
        assert info["marker_variable"] == "RELAY_SHELL_UNIT"
        assert info["kill"] == ("freeze + SIGKILL per process" if mode == "cgroup" else "SIGKILL per process")
        marker = await client.call_tool("shell_exec", {"command": 'echo "$RELAY_SHELL_UNIT"'})
        assert ":call-" in text_of(marker)


async def test_unknown_containment_setting_stops_startup(tmp_path: Path) -> None:
    env = server_env(tmp_path / "audit.jsonl", containment="jail")
    finished = await anyio.run_process([sys.executable, "-m", "relay_shell"], env=env, check=False)
    assert finished.returncode == 2
    message = finished.stderr.decode()
    assert "RELAY_SHELL_CONTAINMENT='jail'" in message
    assert "auto" in message and "subreaper" in message
