"""The exec tracer (adr/0019, reshaped by adr/0027): one spawner thread carries the exec filter and starts every
traced tree (trace/spawners.py); one service thread answers every exec of every traced tree, attributes it to its
tree by the process's ancestry and unit (trace/lineage.py), and records it in that tree's trace (or, once the
call's record is written, in an `exec:late` record under the call's id); RELAY_SHELL_EXEC_DENY's matches are
refused with EPERM (RE2: linear time, matched outside the lock the event loop may take).

Why a thread of its own, not the event loop: an exec waits for its answer, so the answer's latency is the trace's
cost. Served from asyncio a round trip cost ~70 µs more than from a thread blocked in epoll_wait. The service
thread answers first and records later: after the answer it attributes the exec (the process may exit at once)
and queues it; the entries, redaction and digest are built in batches when no exec is waiting, or when a record is
taken (under the lock, so an exec answered before its program exited is always in its call's record).

Never fails or hangs a call because of tracing: if the filter cannot be installed the server runs untraced and
says so; every notification is answered whatever goes wrong while reading it (CONTINUE, or EPERM when EXEC_DENY
is configured: an exec that cannot be read cannot be checked, so it fails closed); if the service thread itself
fails, the listener is closed (the traced trees' later execs fail with ENOSYS, none waits for ever) and later
trees run untraced.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from relay_shell.settings.patterns import Regex
from relay_shell.trace import memory, native, seccomp
from relay_shell.trace.answer import Paused, read_paused
from relay_shell.trace.deny import refusal_shown
from relay_shell.trace.lineage import Lineage, ProcStat, Unit, read_stat, shares_memory
from relay_shell.trace.record import (
    ExecTrace,
    digest_line,
    entry_of,
    programs_of,
    redacted_argv,
    resolved_fields,
    unreadable_entry,
)
from relay_shell.trace.spawners import Spawner

logger = logging.getLogger("relay_shell")
T = TypeVar("T")
LATE_BATCH = 64  # late execs of one call written as one `exec:late` record, at most
LATE_WAIT = 60.0  # seconds a late exec waits at most for its record
SWEEP = 1.0  # seconds between looks at closed trees (late execs to write, trees to forget), while idle
KNOWN_SWEPT = 256  # learnt processes above which the idle sweep forgets those that ended
PENDING_MAX = 256  # answered execs waiting to be recorded before a batch is built anyway
LateWriter = Callable[[str | None, dict[str, Any]], None]
Hand = Callable[[Callable[[], Any]], Any]  # runs work on another thread and waits for it (a spare's `hand`)


@dataclass(slots=True)
class _Answered:
    """An exec answered and attributed, waiting for its record to be built."""

    tree: ExecTrace | None  # None: no tree claims it (recorded as unattributed)
    pid: int
    ppid: int
    at: float
    paused: Paused


class ExecTracer:
    """The exec trace of a server whose trace is on (the launcher, launch.py, makes one only then): `unavailable`
    with the reason when the filter cannot be installed here, else `on`."""

    def __init__(self, deny_patterns: Sequence[Regex], max_entries: int, metrics: Any = None) -> None:
        self.deny = list(deny_patterns)  # compiled (RE2) by the settings
        self.max_entries = max_entries
        self.metrics = metrics
        self.state = "unavailable"  # until the probe says
        self.reason = ""
        self.no_new_privs = False  # the spawner thread (and so every traced tree) has no_new_privs
        self.traced = 0
        self.denied = 0
        self.late = 0  # execs of a tree whose call had already ended (background jobs)
        self.untraced_trees = 0  # trees started untraced (glibc too old)
        self.faults = 0  # notifications that could not be read (recorded as unreadable when still waiting)
        self.unattributed = 0  # execs no tree claimed (recorded under no call)
        self.on_late: LateWriter | None = None  # writes an `exec:late` record (set by the server's assembly)
        self.loop: asyncio.AbstractEventLoop | None = None  # where on_late runs (the loop of the calls)
        # Held by the service thread while it attributes and records an exec (never while it reads or matches
        # EXEC_DENY): whoever takes a trace's record builds the waiting batch first, so an exec answered before
        # the program that ran it exited is in it.
        self.lock = threading.Lock()
        self.lineage = Lineage()
        self.pending: list[_Answered] = []
        self.stray = ExecTrace(max_entries)  # the trace of execs no tree claims: closed, so they go to its `late`
        self.stray.close()
        self.late_waiting: set[ExecTrace] = set()  # closed trees whose late execs wait for their record
        self.reader = memory.Reader()  # the service thread's buffer for the requests it reads
        self.spawner: Spawner | None = None
        # readonly: a confined spare whose creator the spawner made (adr/0031, adr/0037), Python's or native
        self.spares: Callable[[], Hand | native.NativeSpare | None] | None = None
        self.first_unread = False
        self.notifications: seccomp.Notifications | None = None
        self.epoll: Any = None
        self.answerer: native.Answerer | None = None  # the compiled answerer (adr/0032), when built and allowed
        self.answerer_state = ""  # why not, when not
        self.answered_natively = 0  # execs the compiled answerer answered
        self.native_spawns = False
        self._probe()
        if self.state == "on":
            threading.Thread(target=self._serve, name="relay-shell-exec-trace", daemon=True).start()

    @property
    def active(self) -> bool:
        return self.state == "on"

    def _probe(self) -> None:
        """Start the spawner thread, which installs the filter on itself: tells whether this kernel and this
        process may."""
        self.no_new_privs = not seccomp.has_sys_admin() and not seccomp.no_new_privs_set()
        spawner = Spawner(self.no_new_privs).start()
        problem = spawner.problem
        if spawner.listener is not None:
            try:
                seccomp.check_notif_sizes()
                self.epoll = select.epoll()
                self.epoll.register(spawner.listener, select.EPOLLIN)
            except (seccomp.TraceUnavailable, OSError) as exc:
                problem = str(exc)
                spawner.close()
                seccomp.close_quietly(spawner.listener)
        if problem:
            self.state = "unavailable"
            self.reason = f"the exec filter cannot be used here ({problem}); calls run untraced"
            self.no_new_privs = False
            return
        assert spawner.listener is not None
        self.spawner = spawner
        # kcmp tells the server's own first exec of a tree from any other; without it that exec is read like
        # any other (trace/tree.py then does not record it ahead).
        self.first_unread = shares_memory(os.getpid())
        self.notifications = seccomp.Notifications(spawner.listener)
        self.answerer, self.answerer_state = native.create(spawner.listener)
        if self.answerer is not None:
            self.answerer.enable(not self.deny)  # with EXEC_DENY every answer depends on what was read: Python's
            self.lineage.answerer = self.answerer
            if spawner.native is not None and self.first_unread:  # it answers the first exec of what it spawns
                spawner.native.attach(self.answerer)
                self.native_spawns = True  # a one-shot tree's first process is spawned natively (adr/0036)
        self.state = "on"
        self.reason = "seccomp user notification on every execve/execveat of the trees calls and sessions start"
        if self.no_new_privs:
            self.reason += (
                "; without CAP_SYS_ADMIN the traced trees run with no_new_privs: set-user-ID programs (sudo, su) "
                "run without their privilege (RELAY_SHELL_EXEC_TRACE=off restores it)"
            )

    async def spawn(
        self, trace: ExecTrace, start: Callable[[], T], unit: Unit, on: Hand | None = None, native: bool = False
    ) -> T:
        """Run `start` (which starts the tree's first process) on the spawner thread, or on `on` (readonly: a spare
        thread the spawner thread made, confined, carrying its filter: confine/spares.py), or (`native`) here,
        handing the spawn itself to the native spawner (adr/0036), the tree registered under its unit first. The
        event loop waits for the spawn without returning to the loop, as it waits for Popen's; it cannot deadlock:
        the execs the spawn waits for are answered by the service thread."""
        if self.spawner is None or not self.active:  # the trace stopped: the launcher makes no traced tree now
            return start() if on is None else on(start)  # a confined spawn stays on its confined thread
        self.loop = asyncio.get_running_loop()
        outcome: list[tuple[T | None, BaseException | None]] = []

        def work() -> None:
            try:
                outcome.append((start(), None))
            except BaseException as exc:
                outcome.append((None, exc))

        with self.lock:
            self.lineage.register(trace, unit)
            if native:
                self.lineage.start_natively(trace)
            else:
                self.lineage.starting = trace
        try:
            if native:
                work()
            elif on is None:
                self.spawner.run(work)
            else:
                self.spawner.run_on(on, work)
        finally:
            with self.lock:
                self.lineage.learn_first()
                self.lineage.started()
        result, failure = outcome[0]
        if failure is not None:
            raise failure
        return result  # type: ignore[return-value]

    def finish(self, trace: ExecTrace) -> dict[str, Any]:
        """The call's `execs` field; later execs of its tree count as late."""
        with self.lock:
            self.lineage.closing(trace)  # the answerer's execs of it from here on are Python's (late)
            self._settle(closing=trace)
            record = trace.record()
            trace.close()
            self.lineage.close(trace)
            return record

    def snapshot(self, trace: ExecTrace) -> dict[str, Any]:
        """The `execs` field of a trace that goes on (a session's, at its spawn or a send's window)."""
        with self.lock:
            self._settle()
            return trace.record()

    def open_window(self, trace: ExecTrace, window: ExecTrace) -> None:
        """A session_send's window opens: the session's execs are listed in it, so their parents are read again
        (by the compiled answerer too, until the window's entries are full)."""
        with self.lock:
            trace.window = window
            self.lineage.answer_quickly(trace)

    def detach(self, trace: ExecTrace, window: ExecTrace) -> dict[str, Any]:
        """A session_send's window closes: the execs answered until now are in it, later ones are not."""
        with self.lock:
            self._settle()
            if trace.window is window:
                trace.window = None
            return window.record()

    # -- the service thread ----------------------------------------------------------------------------------

    def _serve(self) -> None:
        assert self.notifications is not None
        last_sweep = time.monotonic()
        try:
            while True:
                timeout = 0 if self.pending else (SWEEP if self.late_waiting or self.stray.late else -1)
                if self.answerer is not None:  # waits in C, the GIL released: the common exec is answered there
                    status = self.answerer.wait(timeout)
                    if status == native.RECEIVED:
                        self._ready(self.notifications, self.answerer.received())
                        continue
                    with self.lock:
                        self._settle()
                    if status == native.FULL:
                        continue
                elif events := self.epoll.poll(timeout):
                    seccomp.check_not_hung_up(events[0][1])
                    self._ready(self.notifications)
                    continue
                if self.pending:
                    with self.lock:
                        self._settle()
                elif time.monotonic() - last_sweep >= SWEEP / 2:
                    last_sweep = time.monotonic()
                    with self.lock:
                        self._sweep()
        except BaseException as exc:  # the thread must not end with the listener open: its trees would hang
            if self.spawner is None or not self.spawner.closed:  # else closed on purpose: nothing holds the filter
                logger.exception("the exec tracer stopped")
            with self.lock:
                self.state = "unavailable"
                self.reason = f"the exec tracer stopped ({type(exc).__name__}: {exc}); calls run untraced"
                if self.spawner is not None and self.spawner.listener is not None:
                    seccomp.close_quietly(self.spawner.listener)
                self._settle()
                self._flush_late_locked()

    def _ready(self, notifications: seccomp.Notifications, received: Any = None) -> None:
        """One notification (received here, or handed over by the compiled answerer) read, answered, queued."""
        if received is None:
            received = notifications.receive()  # an OSError here stops the tracer: the listener is unusable
        if received is None:
            return
        notif_id, pid, number, arch, args = received
        lineage = self.lineage
        starting = lineage.starting
        if starting is not None and self.first_unread and shares_memory(pid):
            # The server's own exec of a tree's first program (posix_spawn's child, sharing the server's memory,
            # runs nothing of its own before it): recorded before the spawn, let go unread.
            with self.lock:
                lineage.leader(pid, starting)
                if starting.first is not None and starting.first[1] == 0:
                    # Its pid, before the program can exec anything else: the spawner thread learns it only when
                    # posix_spawn returns, and under load the tree's next exec may be recorded first.
                    starting.first[1] = pid
                notifications.answer(notif_id, 0)
            return
        tree = lineage.quick(pid)
        if tree is None and lineage.native_first is not None:  # the native spawn's first exec was let go in C
            with self.lock:
                lineage.learn_first()
            tree = lineage.quick(pid)
        stat = None
        if tree is None:  # the full way, while the process waits (it may exit as soon as it is answered)
            stat = read_stat(pid)
            if stat is not None:
                with self.lock:
                    tree = self._attribute(pid, stat)
        if stat is None and (tree is None or tree.closed or tree.wants_entry()):
            stat = read_stat(pid)  # a listed entry names its parent
        paused = read_paused(self.reader, notifications, notif_id, pid, number, arch, args, self.deny)
        # The lock from the answer until the exec waits in `pending`: a record taken meanwhile (the program may
        # exit, and its call end, as soon as it is answered) waits for it, so it is in its call's record.
        with self.lock:
            try:
                delivered = notifications.answer(notif_id, paused.answer)
            except OSError:
                self.faults += 1
                delivered = False
            if not delivered:
                return  # gone meanwhile (killed): nothing ran, and what was read may not have been its own
            if paused.unreadable:
                self.faults += 1
            self.pending.append(_Answered(tree, pid, stat.ppid if stat else 0, time.monotonic(), paused))
            if paused.quick and self.answerer is not None and paused.raw is not None:
                self.answerer.learn_path(paused.raw[0], memory.decode(paused.raw[0]))
            if len(self.pending) >= PENDING_MAX:
                self._settle()

    def _attribute(self, pid: int, stat: ProcStat) -> ExecTrace | None:
        """Under the lock: the full way (lineage.tree_of); what it finds is learnt, a session leader (a process
        that ran setsid) so that its session's execs are found the quick way."""
        lineage = self.lineage
        tree = lineage.tree_of(pid, stat)
        if tree is None:
            return None
        lineage.learn(pid, stat.start, tree)
        if stat.sid == pid:
            if tree is lineage.starting and stat.ppid == lineage.server:
                lineage.leader(pid, tree)  # a terminal's program (ptyprocess forked it)
            else:
                lineage.session_leader(pid, stat.start, tree)
        return tree

    def _settle(self, closing: ExecTrace | None = None) -> None:
        """Under the lock: the waiting execs into their traces, in the order they were answered (the compiled
        answerer's and the Python path's, both answered by the service thread one at a time). `closing`: a tree
        whose record is being taken, which the answerer has forgotten and is not told of again."""
        pending, self.pending = self.pending, []
        self.lineage.learn_first()  # its pid into the held first entry, before any later exec of the tree is added
        if self.answerer is not None:
            pending = self._answered_natively(pending)
        touched: set[ExecTrace] = set()
        for answered in pending:
            if answered.tree is not None:
                touched.add(answered.tree)
            tree = answered.tree if answered.tree is not None else self.stray
            target = tree.late_trace() if tree.closed else tree
            if answered.paused.unreadable:
                self._unreadable(target, answered)
            elif not self._record(target, answered):
                continue  # a PATH search's miss: counted, not listed, nothing ran
            if target is not tree:
                self.late += 1
                self.late_waiting.add(tree)
                self._write_late(tree, now=False)
        touched.discard(closing)
        for tree in touched:
            self.lineage.answer_quickly(tree)

    def _answered_natively(self, pending: list[_Answered]) -> list[_Answered]:
        """Under the lock: the compiled answerer's batch, merged with the Python path's by the time answered."""
        assert self.answerer is not None
        batch, faults = self.answerer.take()
        self.faults += faults
        self.answered_natively += len(batch)
        if not batch:
            return pending
        tokens = self.lineage.tokens
        for done in batch:
            paused = Paused(raw=(done.raw_path, done.argv, len(done.argv), False), target=done.target)
            pending.append(_Answered(tokens.get(done.tree), done.pid, done.ppid, done.at, paused))
        pending.sort(key=lambda answered: answered.at)
        return pending

    def _unreadable(self, target: ExecTrace, answered: _Answered) -> None:
        refused = answered.paused.answer != 0
        outcome = "unreadable-denied" if refused else "unreadable"
        self.count_exec("denied" if refused else outcome)
        entry = None
        if target.wants_entry():
            entry = unreadable_entry(target.started, answered.at, answered.pid, answered.ppid, refused)
        shown_denied = None
        if refused:
            shown_denied = f"an exec of pid {answered.pid} that could not be read (RELAY_SHELL_EXEC_DENY fails closed)"
        target.add(entry, digest_line(None, [], outcome), shown_denied, False)

    def _record(self, target: ExecTrace, answered: _Answered) -> bool:
        """Under the lock: an exec's entry, its digest line, the counters. False for a miss (ENOENT)."""
        paused = answered.paused
        assert paused.raw is not None and paused.target is not None
        _, raw_argv, argc, cut = paused.raw
        found = paused.target
        outcome = "denied" if paused.denied else found.outcome
        if outcome == "ENOENT":
            target.missed()
            return False
        self.count_exec(outcome)
        argv = [item.decode("utf-8", errors="backslashreplace") for item in raw_argv]
        shown = redacted_argv(argv)
        fields = resolved_fields(found)
        entry = None
        if target.wants_entry():
            entry = entry_of(
                target.started, answered.at, answered.pid, answered.ppid, found.path, shown, argc, len(argv), cut,
                outcome, fields,
            )  # fmt: skip
        dropped = found.setid and self.no_new_privs and outcome == "ok"
        if entry is not None and dropped:
            entry["setid_dropped"] = True
        shown_denied = None
        if paused.denied:
            shown_denied = refusal_shown(found.path, shown, found.refusal)
        target.add(entry, digest_line(found.path, shown, outcome, fields), shown_denied, dropped, programs_of(found))
        if answered.tree is None:
            self.unattributed += 1
        return True

    # -- closed trees: late execs, forgetting ------------------------------------------------------------------

    def _write_late(self, tree: ExecTrace, now: bool, direct: bool = False) -> None:
        """Under the lock: a call's late execs as one `exec:late` record, when nothing of its tree runs any more
        (`now`), or LATE_BATCH of them are waiting, or the oldest has waited LATE_WAIT seconds. Written by the
        event loop (the service thread hands it over), or at once when `direct` (on the loop, at shutdown)."""
        late = tree.late
        if late is None or not late.count:
            self.late_waiting.discard(tree)
            return
        if not now and late.count < LATE_BATCH and time.monotonic() - tree.late_since < LATE_WAIT:
            return
        tree.late = None
        self.late_waiting.discard(tree)
        record = late.record()
        if tree is self.stray:
            record["unattributed"] = True  # no tree claimed them: under no call (lineage.py says when)
        if self.on_late is None:
            return
        if direct:
            self.on_late(tree.call_id, record)
        elif self.loop is not None and not self.loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (the server is gone)
                self.loop.call_soon_threadsafe(self.on_late, tree.call_id, record)

    def _sweep(self) -> None:
        """Under the lock, while idle: the late execs of trees none of whose sessions has a process left are
        written now (the others when LATE_BATCH wait or the oldest waited LATE_WAIT); learnt processes that ended
        are forgotten."""
        alive = self.lineage.sessions_alive(self.late_waiting) if self.late_waiting else set()
        for tree in list(self.late_waiting):
            self._write_late(tree, now=tree not in alive)
        self._write_late(self.stray, now=False)
        if len(self.lineage.known) > KNOWN_SWEPT:
            self.lineage.prune()

    def flush_late(self) -> None:
        """At shutdown, on the event loop: every call's late execs not yet written."""
        with self.lock:
            self._settle()
            self._flush_late_locked(direct=True)

    def _flush_late_locked(self, direct: bool = False) -> None:
        for tree in [*self.late_waiting, self.stray]:
            self._write_late(tree, now=True, direct=direct)

    def count_exec(self, outcome: str) -> None:
        self.traced += 1
        if self.metrics is not None:
            self.metrics.execs_traced.inc()
        if outcome == "denied":
            self.denied += 1
            if self.metrics is not None:
                self.metrics.execs_denied.inc()

    def status(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "reason": self.reason,
            "no_new_privs": self.no_new_privs,
            "deny_patterns": len(self.deny),
            "entries_kept": self.max_entries,
            "execs_traced": self.traced,
            "execs_denied": self.denied,
            "late_execs": self.late,
            "unattributed_execs": self.unattributed,
            "untraced_trees": self.untraced_trees,
            "read_faults": self.faults,
            "trees_open": len(self.lineage.units),
            "answerer": "compiled" if self.answerer is not None else f"python ({self.answerer_state or self.state})",
            "execs_answered_compiled": self.answered_natively,
        }
