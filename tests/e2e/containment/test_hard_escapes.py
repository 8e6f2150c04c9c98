"""End to end, the harder escapes: processes that move themselves out of their unit's cgroup (a same-uid command
may write to any cgroup.procs of the delegated subtree), a fork loop that keeps making processes while its unit
is ended, and the time a unit takes to end (adr/0015 states the bound: 2 × KILL_GRACE after the end begins);
and the one process outside every unit that is no escape, a ProxyCommand of the server's SSH pool. Helpers and
the two containments are those of test_containment.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from relay_shell.containment import proc
from tests.conftest import text_of
from tests.e2e.containment.test_containment import (
    KILL_GRACE,
    call_while_running,
    contained,
    end_strays,
    escapes,
    moved_out,
    new_token,
    running,
    spawn_shell,
    survivors,
    wait_running,
)
from tests.procs import live_argvs
from tests.sshd import SshFleet
from tests.unprivileged import unprivileged_python

pytestmark = pytest.mark.anyio

MARGIN = 3.0  # seconds on top of a stated bound, for a loaded machine: the bound itself is what is checked


def with_text(token: str) -> dict[int, str]:
    """Live processes whose command line holds `token` (a fork loop's shells and their sleeps)."""
    wanted = token.encode()
    commands = {pid: b" ".join(argv) for pid, argv in live_argvs().items()}
    return {pid: command.decode(errors="replace") for pid, command in commands.items() if wanted in command}


def end_with_text(token: str) -> None:
    for pid in with_text(token):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def test_processes_that_leave_their_unit_cgroup(tmp_path: Path, cgroup_parent: Path, token: str) -> None:
    """cgroup mode. One escape moves itself into the instance directory: outside every unit, it is ended with
    the call all the same (at every unit's end, what sits there that is not the server's own is an escape). One
    moves further up, into the cgroup the server was started in: no unit's end finds it, but the server is a
    child subreaper in cgroup mode too, so it stays the server's descendant and the server's stop ends it."""
    instance, outside = new_token(), new_token()
    try:
        async with contained(tmp_path / "audit.jsonl", "cgroup", cgroup_parent) as client:
            command = escapes(token) + moved_out(instance, 1) + moved_out(outside, 2) + "sleep 300"
            arguments = {"command": command, "timeout": 2}
            result = await call_while_running(client, "shell_exec", arguments, {token: 3, instance: 1, outside: 1})
            assert text_of(result).startswith("[TIMEOUT after 2s]"), text_of(result)
            (moved,) = running(outside)
            assert str(moved) in (cgroup_parent / "cgroup.procs").read_text().split(), "it left the instance"
            assert survivors(token) == {}
            assert survivors(instance) == {}, "a process that moved into the instance directory is an escape"
            assert len(running(outside)) == 1, "beyond the instance directory no unit's end reaches it (adr/0015)"
        assert survivors(outside) == {}, "as the subreaper's descendant it is ended when the server stops"
    finally:
        end_strays(instance)
        end_strays(outside)


async def test_a_fork_loop_is_stopped_then_killed(tmp_path: Path, mode: str, cgroup: Path | None) -> None:
    """Four daemonized loops start daemonized sleeps as fast as they can, 2,000 in all (their own cap: the tests
    run as root, so RLIMIT_NPROC would not bound them); the timeout fires while they are still forking. The unit
    is stopped (SIGSTOP, until a scan finds nothing new) before it is killed: nothing survives."""
    token = new_token()
    done = tmp_path / "done"
    loop = f"n=0; while [ $n -lt 500 ]; do (setsid sleep {token}5 &); n=$((n+1)); done; echo >> {done}"
    command = f"for i in 1 2 3 4; do (setsid sh -c '{loop}' &); done; sleep 300"
    try:
        # Untraced: the exec trace (adr/0019) answers a storm of execs one by one, oldest first, so the loops'
        # sleeps would appear only seconds after they forked — the premise (sleeps running while the loops still
        # fork) is about containment's timing without it. Under the trace the same storm is ended at the timeout
        # too: tests/e2e/trace/test_exec_trace.py, test_an_exec_storm_is_ended_at_its_timeout.
        async with contained(tmp_path / "audit.jsonl", mode, cgroup, exec_trace="off") as client:
            arguments = {"command": command, "timeout": 1}
            result = await call_while_running(client, "shell_exec", arguments, {token: 50})
            assert text_of(result).startswith("[TIMEOUT after 1s]"), text_of(result)
            left = with_text(token)
            finished = len(done.read_text().splitlines()) if done.exists() else 0
            assert finished < 4, "every loop finished before the timeout: the test did not kill a fork loop"
            assert left == {}, f"{len(left)} processes of the fork loop survived its call: {list(left.values())[:5]}"
            alive = await client.call_tool("shell_exec", {"command": "echo still serving"})
            assert text_of(alive) == "[exit 0]\nstill serving\n"
    finally:
        end_with_text(token)


async def test_a_unit_ends_within_twice_the_kill_grace(tmp_path: Path, mode: str, cgroup: Path | None) -> None:
    """adr/0015's bound: SIGTERM, up to KILL_GRACE for the command to exit, then SIGKILL sweeps bounded by
    another KILL_GRACE; the result comes back once the unit is empty. Everything here ignores SIGTERM and SIGHUP
    (an ignored signal stays ignored across exec), so the whole grace is spent and only SIGKILL ends them."""
    in_call, in_session = new_token(), new_token()
    deaf = "trap '' TERM HUP; "
    try:
        async with contained(tmp_path / "audit.jsonl", mode, cgroup) as client:
            started = time.monotonic()
            arguments = {"command": deaf + escapes(in_call) + "sleep 300", "timeout": 2}
            result = await call_while_running(client, "shell_exec", arguments, {in_call: 3})
            elapsed = time.monotonic() - started
            assert text_of(result).startswith("[TIMEOUT after 2s]"), text_of(result)
            assert running(in_call) == {}, "the result came back before the unit was empty"
            assert 2 + KILL_GRACE <= elapsed <= 2 + 2 * KILL_GRACE + MARGIN, elapsed

            session_id = await spawn_shell(client)
            data = deaf + escapes(in_session) + "sleep 3000"
            await client.call_tool("session_send", {"session_id": session_id, "data": data, "timeout": 0.5})
            assert len(wait_running(in_session)) == 3
            started = time.monotonic()
            killed = await client.call_tool("session_kill", {"session_id": session_id})
            elapsed = time.monotonic() - started
            assert not killed.is_error, text_of(killed)
            assert running(in_session) == {}, "session_kill returned before the unit was empty"
            assert KILL_GRACE <= elapsed <= 2 * KILL_GRACE + MARGIN, elapsed
    finally:
        end_strays(in_call)
        end_strays(in_session)


def proxy_config(fleet: SshFleet, path: Path, wrapper: str = "{}") -> Path:
    """An ssh_config whose host `viaproxy` is h01 reached through a ProxyCommand (`ssh -W` through h02), the
    command put into `wrapper`."""
    target = fleet.host("h01")
    proxy = wrapper.format(f"ssh -F {fleet.ssh_config} -o BatchMode=yes -W %h:%p h02")
    path.write_text(
        f"Host viaproxy\n    HostName {target.address}\n    Port {target.port}\n    User root\n"
        f"    IdentityFile {fleet.client_key}\n    ProxyCommand {proxy}\n\n" + fleet.ssh_config.read_text()
    )
    return path


def environ_of(pid: int) -> bytes:
    with open(f"/proc/{pid}/environ", "rb") as handle:
        return b"\0" + handle.read()


def proxy_helpers(fleet: SshFleet) -> set[int]:
    """The ProxyCommand processes running (`ssh -F <the fleet's ssh_config> … -W`)."""
    return {pid for pid, cmdline in with_text(str(fleet.ssh_config)).items() if " -W " in cmdline}


# How a ProxyCommand is run, and how many of its processes show `ssh -F <config> … -W`: as it is (it inherits the
# server's marker); clearing the environment (as `env -i` or sudo's env_reset do); and, also clearing it, with the
# ssh a child of the helper in a session of its own (as sudo's `use_pty` runs its command): what a helper starts.
PROXY_WRAPPERS = {
    "plain": ("{}", 1),
    "marker dropped": ("env -u RELAY_SHELL_UNIT {}", 1),
    "child of the helper": ("env -u RELAY_SHELL_UNIT sh -c 'setsid {}; :'", 2),
}


@pytest.mark.fleet(hosts=2)
@pytest.mark.parametrize("wrapping", PROXY_WRAPPERS)
async def test_a_proxycommand_helper_is_no_stray(
    tmp_path: Path, cgroup_parent: Path, fleet: SshFleet, wrapping: str
) -> None:
    """cgroup mode: the ProxyCommand asyncssh starts for a pooled connection sits in the instance directory
    outside every unit, like a stray — but it is the server's own (born in the server's session, whatever its
    environment says): a call's timeout, which ends the strays (the escape that moved itself into the instance
    directory, `<token>9`, is checked ended), leaves it and its connection alone."""
    token = new_token()
    wrapper, count = PROXY_WRAPPERS[wrapping]
    config = proxy_config(fleet, tmp_path / "proxied_ssh_config", wrapper)
    try:
        async with contained(tmp_path / "audit.jsonl", "cgroup", cgroup_parent, ssh_config=str(config)) as client:
            first = await client.call_tool("ssh_exec", {"host": "viaproxy", "command": "echo one"})
            assert text_of(first) == "[exit 0]\none\n", text_of(first)
            helpers = proxy_helpers(fleet)
            assert len(helpers) == count, helpers
            if wrapping != "plain":
                assert all(b"RELAY_SHELL_UNIT=" not in environ_of(pid) for pid in helpers), "the marker is still set"
            arguments = {"command": escapes(token) + moved_out(token + "9", 1) + "sleep 300", "timeout": 2}
            result = await call_while_running(client, "shell_exec", arguments, {token: 3})
            assert text_of(result).startswith("[TIMEOUT after 2s]"), text_of(result)
            assert survivors(token) == {}, "the escape into the instance directory (and the others) survived"
            assert proxy_helpers(fleet) == helpers, "a call's end took the server's ProxyCommand for a stray"
            second = await client.call_tool("ssh_exec", {"host": "viaproxy", "command": "echo two"})
            assert text_of(second) == "[exit 0]\ntwo\n", text_of(second)
            assert proxy_helpers(fleet) == helpers, "the pooled connection through the ProxyCommand was lost"
    finally:
        end_strays(token)


def test_stop_all_does_not_wait_for_a_process_it_may_not_stop(tmp_path: Path) -> None:
    """A process whose SIGSTOP is refused (another uid's: here a root `sleep`, stopped from a child process that
    switched to nobody) counts as settled: stop_all returns after two searches instead of searching the whole
    time up to its deadline with the event loop held."""
    sleeper = subprocess.Popen(["sleep", "60"])
    script = (
        "import asyncio, os, sys, time\n"
        "os.setgid(65534); os.setuid(65534)\n"
        "from relay_shell.containment.stopping import stop_all\n"
        "searches = []\n"
        "def find():\n"
        "    searches.append(time.monotonic())\n"
        f"    return {{{sleeper.pid}}}\n"
        "began = time.monotonic()\n"
        "asyncio.run(stop_all(find, [], began + 10.0))\n"
        "print(len(searches), round(time.monotonic() - began, 3))\n"
    )
    try:
        python = unprivileged_python()  # what the child reads after it switched to nobody (tests/unprivileged.py)
        env = {**os.environ, **python.env}
        done = subprocess.run([python.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        searches, elapsed = done.stdout.split()
        assert int(searches) <= 3 and float(elapsed) < 2.0, done.stdout
        assert proc.read_entry(sleeper.pid) is not None and proc.read_entry(sleeper.pid).state == "S"
    finally:
        sleeper.kill()
        sleeper.wait()
