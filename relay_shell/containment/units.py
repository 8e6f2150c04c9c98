"""Process containment: every process a call or a session starts belongs to a unit the server can end as a
whole, whatever it does to its process group or session (setsid, double fork, nohup, daemonizing).

Two kinds of unit, chosen at startup (`RELAY_SHELL_CONTAINMENT`, containment/start.py, adr/0015):

- **cgroup**: a threaded cgroup v2 per unit (containment/cgroup.py), frozen and killed as a whole. The server
  is a child subreaper here too (it costs one prctl): an orphan stays its descendant even after it left its
  unit's cgroup, so the server's stop still finds it.
- **subreaper**: where no cgroup is ours to manage, the server is a child subreaper (orphans of its
  descendants are re-parented to it, never to init) and every unit's processes carry a marker in their
  environment, `RELAY_SHELL_UNIT=<scope>:<instance>:<unit>`, read back from /proc/PID/environ. A unit is
  the processes with its marker plus everything below its leader (and below those), so a process that
  drops the marker is still found while it stays in the tree.

Both modes set the marker: it also finds processes that left a cgroup, and after a `kill -9` of the server
the next start finds what its predecessor left (containment/leftovers.py). `off` keeps only the process
groups of before (NoUnit; for measurements).

A unit is opened per call or session (by the launch point, launch.py); its first process is started inside
`spawning()`; its owner ends it with `send()` (TERM, HUP, … to every member, escapes included), a grace, then
`kill()` (SIGSTOP to every member until none is left running, then SIGKILL: a stopped process cannot fork, so a
fork loop cannot outrun the sweeps); `release()` after a normal end keeps a unit whose background jobs still run
(`sh -c` semantics) until they end or the server stops (`shutdown()`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import secrets
import signal
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from relay_shell.containment import proc
from relay_shell.containment.cgroup import CgroupTree, pids_directly_in, pids_in, populated
from relay_shell.containment.proc import MARKER_VARIABLE
from relay_shell.containment.stopping import POLL, stop_all

Mode = Literal["cgroup", "subreaper", "off"]
Setting = Literal["auto", "cgroup", "subreaper", "off"]
_SAFE_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MAINTAIN_INTERVAL = 1.0
_ANCESTRY_DEPTH = 64  # parents looked at to tell a stray from the server's own helper (deeper: a stray)


def scope_of(audit_path: Path) -> str:
    """Markers are scoped to one audit log: a restart finds the leftovers of its own predecessors, not of
    another relay-shell on the same host that writes another log."""
    return hashlib.sha256(os.path.abspath(audit_path).encode()).hexdigest()[:12]


def instance_of_this_process() -> str:
    """pid and start time: names this server process for good, and tells a dead one from a live one."""
    return f"{os.getpid()}-{proc.starttime_of(os.getpid())}"


def instance_alive(instance: str) -> bool:
    pid_text, _, start_text = instance.partition("-")
    if not (pid_text.isdigit() and start_text.isdigit()):
        return False
    return proc.live(int(pid_text), int(start_text))


@dataclass
class Unit:
    containment: Containment
    kind: str  # "call" or "session"
    unit_id: str
    cgroup: Path | None = None
    threads_fd: int | None = None  # the unit's cgroup.threads, open until its first process started
    leader: int | None = None  # the process the unit started, until it is reaped (its pid cannot be reused)
    released: bool = False
    given_back: bool = False  # its cgroup, empty, went back to the spares: another unit's from then on

    def __post_init__(self) -> None:
        self.name = f"{self.kind}-{self.unit_id}"
        self.marker = self.containment.instance_prefix + self.name
        self.seen: dict[int, int] = {}  # pid -> start time of every member found so far

    # -- starting ----------------------------------------------------------------------------------------

    @contextmanager
    def spawning(
        self, env: dict[str, str] | None, elsewhere: list[int] | None = None
    ) -> Iterator[dict[str, str] | None]:
        """Start the unit's process inside this block, with the environment it yields: the marker is in it
        (put into the server's own environment for an inherited one: copying ~100 variables per spawn costs
        more than spawning `true`), and in cgroup mode the server stands in the unit, so the child is born
        there. `elsewhere`: another thread spawns and enters the unit itself (the exec trace's native spawner,
        adr/0036): the unit's and the instance's cgroup.threads and the unit's cgroup directory (for clone3's
        CLONE_INTO_CGROUP, adr/0036 "Round 2") are put in it, and this thread does not enter."""
        tree = self.containment.tree
        if env is None:
            os.environ[MARKER_VARIABLE] = self.marker
            child_env = None
        else:
            child_env = {**env, MARKER_VARIABLE: self.marker}
        entered = False
        directory = -1
        try:
            if tree is not None and self.threads_fd is not None:
                if elsewhere is not None:
                    assert tree.home_threads is not None and self.cgroup is not None
                    directory = os.open(self.cgroup, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                    elsewhere.extend((self.threads_fd, tree.home_threads, directory))
                else:
                    tree.enter(self.threads_fd)
                    entered = True
            yield child_env
        finally:
            if entered:
                assert tree is not None
                tree.leave()
            if env is None:
                os.environ[MARKER_VARIABLE] = self.containment.server_marker
            if directory >= 0:
                os.close(directory)
            if self.threads_fd is not None:
                os.close(self.threads_fd)
                self.threads_fd = None

    def started(self, pid: int) -> None:
        """The unit's leader: never reaped by the containment (its owner waits for it)."""
        self.leader = pid
        self.containment.leaders.add(pid)
        if self.containment.tree is not None:
            self.containment.tree.started()

    # -- ending ------------------------------------------------------------------------------------------

    def members(self) -> set[int]:
        """The running processes of the unit: its cgroup's, those carrying its marker, and everything below
        the leader and every member found before (while the same process: pid and start time)."""
        table = proc.scan()
        roots = {pid for pid, marker in proc.markers(table, self.marker).items() if marker == self.marker}
        if self.leader is not None:
            roots.add(self.leader)
        roots.update(pid for pid, start in self.seen.items() if pid in table and table[pid].starttime == start)
        if self.cgroup is not None and not self.given_back:
            roots.update(pids_in(self.cgroup))
        found = proc.descendants(table, roots)
        found.discard(os.getpid())
        running = {pid for pid in found if table[pid].state != "Z"}
        self.seen.update((pid, table[pid].starttime) for pid in running)
        return running

    def send(self, signals: Iterable[int]) -> set[int]:
        """Send each signal to every process of the unit; returns them."""
        members = self.members()
        for pid in members:
            for signal_number in signals:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal_number)
        return members

    async def kill(self, grace: float) -> None:
        """SIGKILL every process of the unit, escapes included, until none runs (or `grace` passed). In cgroup
        mode the processes that moved themselves out of every unit into the instance directory go too."""
        deadline = time.monotonic() + grace
        tree = self.containment.tree
        cgroup = None if self.given_back else self.cgroup
        if tree is not None and cgroup is not None and self.containment.can_freeze:
            tree.kill(cgroup)
            while populated(cgroup) and time.monotonic() < deadline:
                await asyncio.sleep(POLL / 2)
                tree.kill(cgroup)  # what was still starting: frozen or not, it goes now
        # Every mode: processes outside the cgroup (moved out by their owner) or outside any cgroup
        # (subreaper mode), and without a freezer the cgroup's own. Stopped first, so that nothing forks while
        # the SIGKILL sweeps run (without a freezer, a fork loop in the cgroup could otherwise keep it populated
        # until the deadline).
        frozen = [cgroup] if cgroup is not None and self.containment.can_freeze else []
        await stop_all(lambda: self.members() | self.containment.strays(), frozen, deadline)
        while True:
            members = self.members() | self.containment.strays()
            for pid in members:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            self.containment.reap(set(self.seen))
            if not members or time.monotonic() >= deadline:
                break
            await asyncio.sleep(POLL)
        self.containment.reap(set(self.seen))

    def release(self) -> None:
        """The leader ended and was reaped. An empty unit's cgroup goes back to the filler thread now, which
        makes it a spare again (adr/0030 "Round 7": left to the next maintenance tick, a second's calls beyond the
        spares each made a new cgroup and removed one, a mkdir and an rmdir holding the kernel's cgroup mutex);
        one whose background jobs still run stays until they end (the tick looks again) or the server stops.
        Without a cgroup the marker alone keeps finding them."""
        if self.leader is not None:
            self.containment.leaders.discard(self.leader)
            self.leader = None
        if self.released:
            return
        self.released = True
        if self.cgroup is None:
            self.containment.units.pop(self.name, None)
        elif self.containment.tree is not None and not populated(self.cgroup):
            self.containment.units.pop(self.name, None)
            self.given_back = True
            self.containment.tree.discard(self.cgroup)


class NoUnit:
    """RELAY_SHELL_CONTAINMENT=off: the tree is its process group alone, which its owner signals itself (the
    behaviour before containment: escapes escape). Nothing is marked, found, signalled or killed here."""

    leader: int | None = None

    @contextmanager
    def spawning(
        self, env: dict[str, str] | None, elsewhere: list[int] | None = None
    ) -> Iterator[dict[str, str] | None]:
        yield env

    def started(self, pid: int) -> None:
        pass

    def send(self, signals: Iterable[int]) -> set[int]:
        return set()

    async def kill(self, grace: float) -> None:
        pass

    def release(self) -> None:
        pass


NO_UNIT = NoUnit()


class Containment:
    def __init__(self, mode: Mode, reason: str, scope: str, tree: CgroupTree | None = None) -> None:
        self.mode = mode
        self.reason = reason
        self.scope = scope
        self.instance = instance_of_this_process()
        self.instance_prefix = f"{scope}:{self.instance}:"
        self.server_marker = self.instance_prefix + "server"  # what the server's own helpers inherit
        self.tree = tree
        self.units: dict[str, Unit] = {}
        self.leaders: set[int] = set()
        self.zombies_seen: set[int] = set()  # zombie children not ours to wait for, seen at the last tick
        self.adopted: dict[int, int] = {}  # leftovers kept at startup (pid -> start time), ended at shutdown
        self.helpers: dict[int, int] = {}  # processes the server started for itself outside units (pid -> start)
        self.subreaper = False  # orphans of the server's descendants are re-parented to it (set by start_containment)
        self.can_freeze = tree is not None and tree.can_freeze
        if mode != "off":
            # Once, before any thread runs: later changes only replace this entry's value, so the environ
            # array is never reallocated under a thread reading it.
            os.environ[MARKER_VARIABLE] = self.server_marker

    # -- units -------------------------------------------------------------------------------------------

    def open_unit(self, kind: str, unit_id: str | None = None) -> Unit | NoUnit:
        """A unit for a call or a session, named after its id (a call's `call_id`, a session's id; one is
        generated when none is given). With containment off, the process group alone (NoUnit)."""
        if self.mode == "off":
            return NO_UNIT
        if unit_id is None or not _SAFE_ID.fullmatch(unit_id):
            unit_id = secrets.token_hex(6) if unit_id is None else hashlib.sha256(unit_id.encode()).hexdigest()[:16]
        unit = Unit(self, kind, unit_id)
        while unit.name in self.units:  # an id reused while its unit lingers: keep both apart
            unit = Unit(self, kind, f"{unit_id}.{secrets.token_hex(2)}")
        if self.tree is not None:
            unit.cgroup, unit.threads_fd = self.tree.take(unit.name)
        self.units[unit.name] = unit
        return unit

    def reap(self, candidates: set[int]) -> None:
        """Wait for the zombie children among `candidates` (members of a unit being ended, re-parented to the
        subreaper) and for zombie children seen at an earlier tick; never for a leader (its owner waits for it)
        nor for a fresh zombie of unknown origin (asyncio's child watcher waits for its own children by pid)."""
        zombies = {pid for pid in proc.own_children() if (entry := proc.read_entry(pid)) and entry.state == "Z"}
        for pid in zombies - self.leaders:
            if pid in candidates or pid in self.zombies_seen:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
        self.zombies_seen = zombies - self.leaders - candidates

    async def maintain_forever(self) -> None:
        """Remove lingering units once empty; wait for orphans re-parented to the server."""
        while True:
            await asyncio.sleep(MAINTAIN_INTERVAL)
            self.maintain()

    def maintain(self) -> None:
        if self.tree is not None:
            for unit in [unit for unit in self.units.values() if unit.released]:
                if unit.cgroup is None or not populated(unit.cgroup):
                    self.units.pop(unit.name, None)
                    if unit.cgroup is not None:
                        unit.given_back = True
                        self.tree.discard(unit.cgroup)
        if self.subreaper or os.getpid() == 1:  # only then do orphans come to the server
            self.reap(set())

    # -- stopping ----------------------------------------------------------------------------------------

    def instance_members(self) -> set[int]:
        """Every running process of this server's units (lingering background jobs included) and adopted
        leftovers; as a subreaper, every descendant of the server (orphans that dropped their marker and left
        their unit are re-parented to it); in cgroup mode, everything in the instance directory but the server
        (helpers too: the SSH connections, and with them any ProxyCommand, are closed before this runs)."""
        table = proc.scan()
        marked = proc.markers(table, self.instance_prefix)
        roots = {pid for pid, marker in marked.items() if marker != self.server_marker}
        roots.update(pid for pid, start in self.adopted.items() if pid in table and table[pid].starttime == start)
        if self.tree is not None:
            roots.update(pids_directly_in(self.tree.directory))
            for unit_directory in _unit_directories(self.tree.directory):
                roots.update(pids_in(unit_directory))
        if self.subreaper:
            roots.update(proc.own_children())
        found = proc.descendants(table, roots)
        found.discard(os.getpid())
        return {pid for pid in found if table[pid].state != "Z"}

    def strays(self) -> set[int]:
        """cgroup mode: the processes that left their unit for the instance directory itself (any cgroup of a
        delegated subtree is writable by the server's uid, so a command of the same uid can move itself there),
        with whatever runs below them. Not the server; not a process whose marker names a unit still running
        (that unit's end takes it); not one of the server's own (`_servers_own`: its helpers, adopted leftovers,
        and what those started)."""
        if self.tree is None:
            return set()
        me = os.getpid()
        listed = pids_directly_in(self.tree.directory) - {me}
        if not listed:
            return set()  # the usual case: one read of cgroup.threads
        running_markers = {unit.marker for unit in self.units.values() if not unit.released}
        found = set()
        for pid in listed:
            entry = proc.read_entry(pid)
            if entry is None or entry.state == "Z" or self._servers_own(entry):
                continue
            marker = proc.read_marker(pid)
            if marker == self.server_marker or marker in running_markers:
                continue
            found.add(pid)
        if not found:
            return found
        table = proc.scan()
        return {pid for pid in proc.descendants(table, found) if table[pid].state != "Z"} - {me}

    def helper_started(self, pid: int) -> None:
        """The server started `pid` outside every unit for itself (an ssh_config ProxyCommand, told by the SSH
        pool as soon as it runs): never a stray, nor what it starts. Entries of ended helpers are dropped here."""
        self.helpers = {known: start for known, start in self.helpers.items() if proc.live(known, start)}
        start = proc.starttime_of(pid)
        if start is not None:
            self.helpers[pid] = start

    def _servers_own(self, entry: proc.ProcessEntry) -> bool:
        """The process, or one it descends from, is the server's own: a helper it started (`helper_started`)
        or a leftover it adopted at startup. The marker is no proof of a helper: one run through `sudo` or
        `env -i`, or another uid's, has none or shows none. Nor is the parent: an escape re-parented to the
        server (a child subreaper) has the server as its parent too, so the walk stops at the server."""
        me = os.getpid()
        for _ in range(_ANCESTRY_DEPTH):
            if entry.pid == me or entry.pid <= 1:
                return False
            if self.helpers.get(entry.pid) == entry.starttime or self.adopted.get(entry.pid) == entry.starttime:
                return True
            parent = proc.read_entry(entry.ppid)
            if parent is None:
                return False
            entry = parent
        return False

    async def shutdown(self, grace: float) -> None:
        """The server stops: TERM every process of every unit (background jobs too), up to `grace`, then KILL
        until none runs; remove the instance's cgroups."""
        if self.mode == "off":
            return
        if self.tree is not None:
            self.tree.stop_filling()  # the instance is going away
        members = self.instance_members()
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
                os.kill(pid, signal.SIGCONT)
        deadline = time.monotonic() + grace
        while members and time.monotonic() < deadline:
            await asyncio.sleep(POLL * 2)
            members = {pid for pid in members if proc.live(pid)}
        if self.tree is not None:
            for unit_directory in _unit_directories(self.tree.directory):
                self.tree.kill(unit_directory)  # frozen: nothing forks any more
        deadline = time.monotonic() + max(grace, 1.0)
        # What no freezer holds (subreaper mode, strays): stopped first, so a fork loop cannot outrun the sweeps.
        frozen = _unit_directories(self.tree.directory) if self.tree is not None and self.can_freeze else []
        await stop_all(self.instance_members, frozen, deadline)
        while True:
            members = self.instance_members()
            for pid in members:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            self.reap(members | self.zombies_seen)
            if not members or time.monotonic() >= deadline:
                break
            await asyncio.sleep(POLL)
        self.units.clear()
        if self.tree is not None:
            for unit_directory in _unit_directories(self.tree.directory):
                while populated(unit_directory) and time.monotonic() < deadline:
                    await asyncio.sleep(POLL / 2)
                self.tree.remove(unit_directory)
            self.tree.step_out()
            self.tree.remove(self.tree.directory)  # unless something the server started outside a unit runs there

    # -- reporting ---------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """For server_info: the mode and why, units running, and background jobs left by finished calls."""
        running = [unit for unit in self.units.values() if not unit.released]
        status: dict[str, Any] = {
            "mode": self.mode,
            "reason": self.reason,
            "marker_variable": MARKER_VARIABLE if self.mode != "off" else None,
            "cgroup": str(self.tree.directory) if self.tree is not None else None,
            "kill": _kill_method(self),
            "units_running": len(running),
        }
        if self.mode == "off":
            return status
        table = proc.scan()
        running_markers = {unit.marker for unit in running}
        background: dict[str, int] = {}
        for marker in proc.markers(table, self.instance_prefix).values():
            if marker not in running_markers and marker != self.server_marker:
                background[marker] = background.get(marker, 0) + 1
        if self.tree is not None:
            for unit in self.units.values():
                if unit.released and unit.cgroup is not None:
                    background[unit.marker] = max(background.get(unit.marker, 0), len(pids_in(unit.cgroup)))
        status["background_units"] = sum(1 for count in background.values() if count)
        status["background_processes"] = sum(background.values())
        status["adopted_processes"] = sum(
            1 for pid, start in self.adopted.items() if pid in table and table[pid].starttime == start
        )
        return status


def _unit_directories(directory: Path) -> list[Path]:
    with contextlib.suppress(OSError):
        return [path for path in directory.iterdir() if path.is_dir()]
    return []


def _kill_method(containment: Containment) -> str:
    if containment.tree is not None:
        return "freeze + SIGKILL per process" if containment.tree.can_freeze else "SIGKILL per process"
    return "SIGKILL per process" if containment.mode != "off" else "process group"
