"""Which traced tree an exec belongs to (adr/0027). Every tree is started from one long-lived spawner thread that
carries one filter and one listener, so the listener no longer says whose an exec is: the process does.

First the quick way, two system calls and no /proc (`quick`): every tree's leader starts a session of its own
(posix_spawn's setsid, a terminal's setsid) and a process cannot join another session, so its session id is its
tree leader's pid, unless it made a session of its own (then that session's leader is learnt the full way, and
known while a pidfd says it lives). An open tree's leader is not reaped before its call ends, so its pid cannot
name another process meanwhile; a closed tree's is checked against its start time. That answers nearly every exec.

Else the full way (`tree_of`, reading /proc/PID/stat: the first open of a new process's /proc entry costs ~20–50
µs here), in the order of what a process can least change:
1. the process itself, when it was learnt before: its pid and start time;
2. its parent, and so on up its ancestry, each with its session and process group (a process cannot choose its
   parent; `setsid` makes a session of the caller's own pid, `setpgid` only joins a group of its own session);
3. its containment unit (adr/0015): the unit's cgroup (in cgroup mode), else the RELAY_SHELL_UNIT marker of its
   environment. A process re-parented to the server (the subreaper) after its parent and its session's leader
   are gone is found here. Both can be changed by the process itself (it can write a cgroup.procs of its unit's
   tree, and its own environment): they come last.
4. a child of the server no unit claims while a terminal is being started (containment off): that terminal's.
A process none of these finds is recorded all the same, as unattributed (tracer.py).

Closed trees stay known (their leader, unit and learnt processes) for the late execs of their background jobs,
the most recent CLOSED_KEPT of them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import select
from collections import OrderedDict
from dataclasses import dataclass, field

from relay_shell.trace.native import Answerer
from relay_shell.trace.record import ExecTrace

KNOWN_MAX = 4096  # learnt processes before the dead ones are pruned
CLOSED_KEPT = 1024  # closed trees kept known for their late execs
ANCESTRY_DEPTH = 32  # parents looked at, at most
_KCMP_NUMBERS = {"x86_64": 312, "aarch64": 272}
KCMP_VM = 1
MARKER = b"RELAY_SHELL_UNIT="
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


@dataclass(slots=True, frozen=True)
class ProcStat:
    """The fields of /proc/PID/stat attribution needs."""

    ppid: int
    pgid: int
    sid: int
    start: int  # clock ticks after boot: with the pid, names one process for good


def read_stat(pid: int) -> ProcStat | None:
    """None when the process is gone."""
    try:
        descriptor = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(descriptor, 1024)
    except OSError:
        return None
    finally:
        os.close(descriptor)
    fields = data[data.rfind(b")") + 2 :].split(None, 20)
    if len(fields) < 20:
        return None
    return ProcStat(int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]))


def shares_memory(pid: int) -> bool:
    """kcmp(KCMP_VM): the process shares the server's address space. Only a vfork-style child of the server
    does, and the only ones under the filter are the spawner thread's posix_spawn children, which run no code of
    their own before their exec (adr/0027): a process of a tree cannot pass this test."""
    number = _KCMP_NUMBERS.get(platform.machine())
    if number is None:
        return False
    server = os.getpid()
    result = _libc.syscall(
        ctypes.c_long(number), ctypes.c_long(server), ctypes.c_long(pid), ctypes.c_long(KCMP_VM), 0, 0
    )
    return bool(result == 0)


@dataclass(eq=False, slots=True)
class Unit:
    """What a tree's containment unit is called where a process shows it."""

    marker: str | None = None  # RELAY_SHELL_UNIT's value
    cgroup: str | None = None  # the end of its cgroup path: `<instance directory>/<unit directory>`


@dataclass(eq=False)
class Lineage:
    server: int = field(default_factory=os.getpid)
    # Session leaders of trees: a tree's leader, or a process of it that ran setsid -> (start time or 0, tree,
    # pidfd or -1). A leader of an open tree is trusted as it is; any other is checked (pidfd, start time).
    leaders: dict[int, tuple[int, ExecTrace, int]] = field(default_factory=dict)
    leaders_of: dict[ExecTrace, set[int]] = field(default_factory=dict)  # the same, by tree (forget: no scan)
    known: dict[int, tuple[int, ExecTrace]] = field(default_factory=dict)  # learnt pid -> (start time, tree)
    pids: dict[ExecTrace, set[int]] = field(default_factory=dict)  # a tree's learnt processes
    by_marker: dict[str, ExecTrace] = field(default_factory=dict)
    by_cgroup: dict[str, ExecTrace] = field(default_factory=dict)
    units: dict[ExecTrace, Unit] = field(default_factory=dict)  # every tree known, open or closed
    closed: OrderedDict[ExecTrace, None] = field(default_factory=OrderedDict)  # oldest first
    # The compiled answerer (trace/native.py), when there is one: it answers an open tree's execs found the quick
    # way (the leaders it is told of) and names trees by token.
    answerer: Answerer | None = None
    tokens: dict[int, ExecTrace] = field(default_factory=dict)
    token_of: dict[ExecTrace, int] = field(default_factory=dict)
    _starting: ExecTrace | None = None
    # The tree the native spawner is starting (adr/0036), until the pid of its first exec, which the compiled
    # answerer let go, is learnt here (learn_first).
    native_first: ExecTrace | None = None
    _next_token: int = 0

    @property
    def starting(self) -> ExecTrace | None:
        """The tree whose first process the spawner thread is starting (its first exec is told by kcmp, in
        Python: the answerer hands every exec over meanwhile)."""
        return self._starting

    @starting.setter
    def starting(self, tree: ExecTrace | None) -> None:
        self._starting = tree
        if self.answerer is not None and self.native_first is None:
            self.answerer.starting(tree is not None)

    def start_natively(self, tree: ExecTrace) -> None:
        """The native spawner (adr/0036) starts `tree`: its first exec is answered by the compiled answerer, which
        tells it by the spawn's own pointers and kcmp (answer_first) and needs no `starting` to hand the other
        trees' execs to Python meanwhile (adr/0036 "Round 3"); Python still tells it by kcmp should it come here."""
        self.native_first = tree
        self._starting = tree

    def started(self) -> None:
        """The spawn returned (natively or not): no tree is starting."""
        if self.native_first is None and self._starting is not None and self.answerer is not None:
            self.answerer.starting(False)
        self._starting = self.native_first = None

    def register(self, tree: ExecTrace, unit: Unit) -> None:
        self._next_token += 1
        self.tokens[self._next_token] = tree
        self.token_of[tree] = self._next_token
        self.units[tree] = unit
        self.pids.setdefault(tree, set())
        self.answer_quickly(tree)
        if unit.marker:
            self.by_marker[unit.marker] = tree
        if unit.cgroup:
            self.by_cgroup[unit.cgroup] = tree

    def leader(self, pid: int, tree: ExecTrace) -> None:
        """The tree's first process (a session leader by posix_spawn's or the terminal's setsid)."""
        self._set_leader(pid, (0, tree, -1))
        token = self.token_of.get(tree)
        if self.answerer is not None and token is not None and not tree.closed:
            self.answerer.leader(pid, token)

    def learn_first(self) -> None:
        """Under the tracer's lock: the first exec the compiled answerer let go for the native spawner (adr/0036),
        as `ExecTracer._ready` learns the Python path's: its pid into the tree's held first entry, its session's
        leader known (the answerer knows it already), before a later exec of the tree is attributed or recorded."""
        tree = self.native_first
        if tree is None or self.answerer is None:
            return
        pid = self.answerer.first_answered(self.token_of.get(tree, 0))
        if pid == 0:
            return
        self.native_first = None
        self._set_leader(pid, (0, tree, -1))
        if tree.first is not None and tree.first[1] == 0:
            tree.first[1] = pid

    def answer_quickly(self, tree: ExecTrace) -> None:
        """Under the tracer's lock, when a tree is registered, after a batch was recorded and when a window opens:
        how many more entries its record (or a session_send window's) may list, so that the compiled answerer reads
        the parents of that many of its execs and no more (the parent of an exec that is not listed is not needed)."""
        token = self.token_of.get(tree)
        if self.answerer is not None and token is not None and not tree.closed:
            self.answerer.listed(token, tree.entries_left())

    def session_leader(self, pid: int, start: int, tree: ExecTrace) -> None:
        """A process of the tree that made a session of its own: its session's execs are found the quick way
        while a pidfd says it lives (after that, its pid may name another process)."""
        if pid in self.leaders:
            return
        try:
            descriptor = os.pidfd_open(pid)
        except OSError:
            return
        self._set_leader(pid, (start, tree, descriptor))

    def closing(self, tree: ExecTrace) -> None:
        """Under the tracer's lock, before the tree's record is taken: the compiled answerer hands its later execs
        to Python (a closed tree's leader may be reaped; they are late), so every exec it answered for the tree is
        in the batch the record is built from."""
        token = self.token_of.get(tree)
        if self.answerer is not None and token is not None:
            self.answerer.forget_tree(token)

    def close(self, tree: ExecTrace) -> None:
        """The tree's record is written (its leader reaped). It stays known for its late execs, among the most
        recent CLOSED_KEPT closed trees."""
        self.closed[tree] = None  # `closing` told the answerer already
        while len(self.closed) > CLOSED_KEPT:
            oldest, _ = self.closed.popitem(last=False)
            self.forget(oldest)

    def forget(self, tree: ExecTrace) -> None:
        token = self.token_of.pop(tree, None)
        if token is not None:
            del self.tokens[token]
            if self.answerer is not None and not tree.closed:  # a closed tree's `closing` told it already
                self.answerer.forget_tree(token)
        unit = self.units.pop(tree, Unit())
        self.closed.pop(tree, None)
        if unit.marker and self.by_marker.get(unit.marker) is tree:
            del self.by_marker[unit.marker]
        if unit.cgroup and self.by_cgroup.get(unit.cgroup) is tree:
            del self.by_cgroup[unit.cgroup]
        for pid in self.pids.pop(tree, set()):
            if self.known.get(pid, (0, None))[1] is tree:
                del self.known[pid]
        for pid in self.leaders_of.pop(tree, set()):
            entry = self.leaders.get(pid)
            if entry is not None and entry[1] is tree:
                self._drop_leader(pid, entry[2])

    def _set_leader(self, pid: int, entry: tuple[int, ExecTrace, int]) -> None:
        previous = self.leaders.get(pid)
        if previous is not None:  # the pid named another leader before: its index entry and pidfd go
            self.leaders_of.get(previous[1], set()).discard(pid)
            if previous[2] >= 0 and previous[2] != entry[2]:
                os.close(previous[2])
        self.leaders[pid] = entry
        self.leaders_of.setdefault(entry[1], set()).add(pid)

    def _drop_leader(self, pid: int, descriptor: int) -> None:
        _, tree, _ = self.leaders.pop(pid)
        self.leaders_of.get(tree, set()).discard(pid)
        if descriptor >= 0:
            os.close(descriptor)

    def learn(self, pid: int, start: int, tree: ExecTrace) -> None:
        previous = self.known.get(pid)
        if previous is not None and previous[1] is not tree:
            self.pids.get(previous[1], set()).discard(pid)
        self.known[pid] = (start, tree)
        self.pids.setdefault(tree, set()).add(pid)
        if len(self.known) > KNOWN_MAX:
            self.prune()

    def prune(self) -> None:
        """Forget learnt processes that ended (or whose pid now names another process)."""
        for pid, (start, tree) in list(self.known.items()):
            current = read_stat(pid)
            if current is None or current.start != start:
                del self.known[pid]
                self.pids.get(tree, set()).discard(pid)

    # -- finding a process's tree ------------------------------------------------------------------------------

    def quick(self, pid: int) -> ExecTrace | None:
        """The tree whose session (or process group) leader the process's session (or group) is; None when that
        does not say (then tree_of)."""
        try:
            sid = os.getsid(pid)
        except OSError:
            return None
        tree = self._leading(sid, pid)
        if tree is not None:
            return tree
        with contextlib.suppress(OSError):
            return self._leading(os.getpgid(pid), pid)
        return None

    def _leading(self, group: int, pid: int) -> ExecTrace | None:
        """The tree `group` (the session or process group id of process `pid`) is led by, if that leader is still
        the one learnt: an open tree's leader is (the server has not reaped it); a pidfd says whether a learnt
        session leader lives. A closed tree's leader is gone, and its session's number stays taken only while
        the session has a process: the number may since name another tree's session, so the process's unit
        must not say otherwise (nothing to ask with containment off)."""
        entry = self.leaders.get(group)
        if entry is None:
            return None
        _, tree, descriptor = entry
        if descriptor >= 0:
            if not _ended(descriptor):
                return tree
            self._drop_leader(group, descriptor)
            return None
        if not tree.closed:
            return tree
        unit = self.units.get(tree)
        if unit is None or not (unit.marker or unit.cgroup):
            return tree
        claimed = self._unit_of(pid)
        return tree if claimed is None or claimed is tree else None

    def tree_of(self, pid: int, stat: ProcStat) -> ExecTrace | None:
        """The tree process `pid` (whose stat was read while its exec waits) belongs to; None when nothing says."""
        known = self.known.get(pid)
        if known is not None and known[0] == stat.start:
            return known[1]
        walked: ProcStat | None = stat
        current = pid
        for _ in range(ANCESTRY_DEPTH):
            if walked is None:
                break
            for group in (walked.sid, walked.pgid):
                found = self._leading(group, pid)
                if found is not None:
                    return found
            parent = walked.ppid
            if parent <= 1 or parent == self.server:
                break
            known = self.known.get(parent)
            parent_stat = read_stat(parent)
            if known is not None and parent_stat is not None and parent_stat.start == known[0]:
                return known[1]
            current, walked = parent, parent_stat
        found = self._unit_of(pid)
        if found is not None:
            return found
        if stat.ppid == self.server and current == pid and self.starting is not None:
            return self.starting
        return None

    def _unit_of(self, pid: int) -> ExecTrace | None:
        """The unit the process's cgroup, else its environment's marker, names."""
        if self.by_cgroup:
            with contextlib.suppress(OSError), open(f"/proc/{pid}/cgroup", "rb") as cgroups:
                for line in cgroups.read().splitlines():
                    if line.startswith(b"0::"):
                        path = line[3:].decode(errors="replace")
                        for name, tree in self.by_cgroup.items():
                            if path.endswith("/" + name):
                                return tree
        if self.by_marker:
            with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as environ:
                for item in environ.read().split(b"\0"):
                    if item.startswith(MARKER):
                        return self.by_marker.get(item[len(MARKER) :].decode(errors="replace"))
        return None

    def sessions_alive(self, trees: set[ExecTrace]) -> set[ExecTrace]:
        """Which of `trees` still have a process in one of their sessions (a scan of /proc: only while late
        execs wait for their record)."""
        wanted = {pid: tree for pid, (_, tree, _) in self.leaders.items() if tree in trees}
        alive: set[ExecTrace] = set()
        with contextlib.suppress(OSError):
            for name in os.listdir("/proc"):
                if name.isdigit():
                    with contextlib.suppress(OSError):
                        tree = wanted.get(os.getsid(int(name)))
                        if tree is not None:
                            alive.add(tree)
        return alive


def _ended(pidfd: int) -> bool:
    """A pidfd is readable once its process ended."""
    readable, _, _ = select.select([pidfd], [], [], 0)
    return bool(readable)
