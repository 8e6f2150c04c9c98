"""The exec tracer: installs the exec filter on a short-lived spawner thread per call or session, so the process
tree that thread starts (and only that tree) is traced; answers every exec of every traced tree on one service
thread until the kernel says no process of the tree is left (EPOLLHUP), so a background job that execs after its
call ended is answered too, and recorded in an `exec:late` record under the call's id; refuses the execs
RELAY_SHELL_EXEC_DENY matches with EPERM (RE2: linear time, matched outside the lock the event loop may take).

Why a thread of its own, not the event loop: an exec waits for its answer, so the answer's latency is the
trace's cost. Served from asyncio a round trip cost ~70 µs more than from a thread blocked in epoll_wait (the
loop's wake-up and callback machinery), on top of reading the request (adr/0019 has the figures). The service
thread needs the GIL only while it answers; the event loop sleeps in epoll meanwhile.

Never fails or hangs a call because of tracing: if the filter cannot be installed the tree runs untraced and its
record says so; every notification is answered whatever goes wrong while reading it (CONTINUE, or EPERM when
EXEC_DENY is configured: an exec that cannot be read cannot be checked, so it fails closed); if the service
thread itself fails, every listener is closed (the trees' later execs fail with ENOSYS, none waits for ever).
"""

from __future__ import annotations

import _thread
import asyncio
import contextlib
import errno
import logging
import os
import select
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from relay_shell.settings.patterns import Regex
from relay_shell.trace import memory, seccomp
from relay_shell.trace.deny import denies, deny_text, refusal_shown
from relay_shell.trace.record import ExecTrace, digest_line, entry_of, redacted_argv, unreadable_entry
from relay_shell.trace.spawners import REFILL_IDLE, SparePool, Spawner

logger = logging.getLogger("relay_shell")
T = TypeVar("T")
_CAP_SYS_ADMIN = 21
_HANGUP = select.EPOLLHUP | select.EPOLLERR
UNWATCHED = "untraced: the listener could not be watched"
LATE_BATCH = 64  # late execs of one call written as one `exec:late` record, at most
LATE_WAIT = 60.0  # seconds a late exec waits at most for its record (the next late exec or hangup writes it)
LATE_SWEEP = 5.0  # seconds between looks for late execs that waited LATE_WAIT, while the server is idle
LateWriter = Callable[[str | None, dict[str, Any]], None]


@dataclass(slots=True)
class _Paused:
    """What the service thread learnt of a paused exec before answering it."""

    raw: tuple[bytes, list[bytes], int, bool] | None = None  # path, argv, argc, argv cut; None: not its memory
    path: str = ""  # absolute, when it had to be resolved while the process waits (relative, execveat, EXEC_DENY)
    outcome: str = ""  # predicted while it waits only for EXEC_DENY
    setid: bool = False
    ppid: int = 0
    denied_text: str | None = None
    answer: int = 0  # 0: CONTINUE, else the errno it fails with
    unreadable: bool = False  # still waiting, but its request could not be read


class ExecTracer:
    """The exec trace of a server with RELAY_SHELL_EXEC_TRACE=on (the launcher, launch.py, makes one only then):
    `unavailable` with the reason when the filter cannot be installed here, else `on`."""

    def __init__(self, deny_patterns: Sequence[Regex], max_entries: int, metrics: Any = None) -> None:
        self.deny = list(deny_patterns)  # compiled (RE2) by the settings
        self.max_entries = max_entries
        self.metrics = metrics
        self.state = "unavailable"  # until the probe says
        self.reason = ""
        self.no_new_privs = False  # traced trees get no_new_privs (the server lacks CAP_SYS_ADMIN)
        self.traced = 0
        self.denied = 0
        self.late = 0  # execs of a tree whose call had already ended (background jobs)
        self.untraced_trees = 0  # trees the filter could not be installed for
        self.faults = 0  # notifications that could not be read (recorded as unreadable when still waiting)
        self.on_late: LateWriter | None = None  # writes an `exec:late` record (set by the server's assembly)
        self.loop: asyncio.AbstractEventLoop | None = None  # where on_late runs (the loop of the calls)
        # Held by the service thread from an exec's answer until it is recorded (never while it reads or matches
        # EXEC_DENY): whoever takes a trace's record takes it first, so an exec answered before the program that
        # ran it exited is in it.
        self.lock = threading.Lock()
        self.watched: dict[int, tuple[seccomp.Notifications, ExecTrace]] = {}
        self.epoll: Any = None
        self.spares: SparePool | None = None  # spawner threads made ahead (trace/spawners.py)
        self._probe()
        if self.state == "on":
            assert self.spares is not None
            self.epoll = select.epoll()
            self.epoll.register(self.spares.wake, select.EPOLLIN)
            threading.Thread(target=self._serve, name="relay-shell-exec-trace", daemon=True).start()

    @property
    def active(self) -> bool:
        return self.state == "on"

    def _probe(self) -> None:
        """Install the filter once, on the first spare spawner thread: tells whether this kernel and this
        process may."""
        self.no_new_privs = not _has_sys_admin() and not seccomp.no_new_privs_set()
        first = Spawner(self.no_new_privs).start_thread()
        first.made.wait()
        if first.listener is None:
            first.discard()
            self.state = "unavailable"
            self.reason = f"the exec filter cannot be installed here ({first.problem}); calls run untraced"
            self.no_new_privs = False
            return
        try:
            seccomp.check_notif_sizes()
        except seccomp.TraceUnavailable as exc:
            seccomp.close_quietly(first.listener)
            first.discard()
            self.state = "unavailable"
            self.reason = f"the exec filter cannot be used here ({exc}); calls run untraced"
            self.no_new_privs = False
            return
        self.spares = SparePool(self.no_new_privs, first)
        self.state = "on"
        self.reason = "seccomp user notification on every execve/execveat of the trees calls and sessions start"
        if self.no_new_privs:
            self.reason += (
                "; without CAP_SYS_ADMIN the traced trees run with no_new_privs: set-user-ID programs (sudo, su) "
                "run without their privilege (RELAY_SHELL_EXEC_TRACE=off restores it)"
            )

    async def spawn(self, trace: ExecTrace, start: Callable[[], T], hold: threading.Event | None = None) -> T:
        """Run `start` (which starts the tree's first process) on a spawner thread carrying the exec filter
        (trace/spawners.py); the service thread answers the tree's execs. With `hold` the spawner thread stays
        until it is set (a PTY: until it closes).

        The event loop waits for the spawn without returning to the loop, as it waits for Popen's: a spawn
        takes a fraction of a millisecond, and going through the loop (a future set from the other thread)
        cost ~0.1 ms more per call. It cannot deadlock: the execs the spawn waits for are answered by the
        service thread, never by the loop."""
        if self.spares is None:  # the probe failed (the launcher then makes no traced tree)
            return start()
        self.loop = asyncio.get_running_loop()
        outcome: list[tuple[T | None, BaseException | None]] = []
        finished = _thread.allocate_lock()  # released by the spawner thread when the spawn is done
        finished.acquire()

        def work(listener: int | None, problem: str) -> None:
            """On the spawner thread."""
            try:
                if listener is None:
                    trace.state = f"untraced: {problem}"
                    result = start()
                elif not self._watch(listener, trace):
                    # Unserviced, the filter would leave every exec of the tree waiting: the listener is closed
                    # and the spawn done by the event loop's thread, which has no filter (a thread started from
                    # this one would inherit it).
                    seccomp.close_quietly(listener)
                    trace.state = UNWATCHED
                    outcome.append((None, None))
                    return
                else:
                    result = start()
                outcome.append((result, None))
            except BaseException as exc:
                outcome.append((None, exc))
            finally:
                finished.release()

        spawner = self.spares.take()
        spawner.work = work
        if hold is not None:
            spawner.release = hold
        spawner.hand_over()
        finished.acquire()
        if hold is None:
            self.spares.done_with(spawner)
        if trace.state != "traced":
            self.untraced_trees += 1
        if trace.state == UNWATCHED:
            return start()
        result, failure = outcome[0]
        if failure is not None:
            raise failure
        return result  # type: ignore[return-value]

    def finish(self, trace: ExecTrace) -> dict[str, Any]:
        """The call's `execs` field; later execs of its tree count as late."""
        with self.lock:
            trace.closed = True
            return trace.record()

    def snapshot(self, trace: ExecTrace) -> dict[str, Any]:
        """The `execs` field of a trace that goes on (a session's, at its spawn or a send's window)."""
        with self.lock:
            return trace.record()

    # -- the service thread ----------------------------------------------------------------------------------

    def _watch(self, listener: int, trace: ExecTrace) -> bool:
        """On the spawner thread, before it starts anything: the service thread answers from now on."""
        notifications = seccomp.Notifications(listener)
        with self.lock:
            self.watched[listener] = (notifications, trace)
        try:
            self.epoll.register(listener, select.EPOLLIN)
        except OSError:
            with self.lock:
                self.watched.pop(listener, None)
            return False
        return True

    def _serve(self) -> None:
        try:
            while True:
                assert self.spares is not None
                timeout = REFILL_IDLE if self.spares.needs_refill() else -1
                if timeout < 0 and any(trace.late is not None for _, trace in list(self.watched.values())):
                    timeout = LATE_SWEEP  # late execs wait for their record at most LATE_WAIT (and this)
                events = self.epoll.poll(timeout)
                if not events:
                    self.spares.refill()  # idle: spares for the next calls
                    with self.lock:
                        for _, trace in list(self.watched.values()):
                            self._write_late(trace, now=False)
                    continue
                for listener, mask in events:
                    if listener == self.spares.wake:
                        self.spares.woken()  # a spawner was used: refill at the next idle moment
                    else:
                        self._ready(listener, mask)
        except BaseException as exc:  # the thread must not end with listeners open: their trees would hang
            logger.exception("the exec tracer stopped")
            with self.lock:
                self.state = "unavailable"
                self.reason = f"the exec tracer stopped ({type(exc).__name__}: {exc}); calls run untraced"
                for listener in list(self.watched):
                    self._unwatch(listener)

    def _unwatch(self, listener: int) -> None:
        """Under the lock. A call's late execs not yet written are written now."""
        watched = self.watched.pop(listener, None)
        with contextlib.suppress(OSError):
            self.epoll.unregister(listener)
        with contextlib.suppress(OSError):
            os.close(listener)
        if watched is not None:
            self._write_late(watched[1], now=True)

    def _ready(self, listener: int, mask: int) -> None:
        watched = self.watched.get(listener)
        if watched is None:
            return
        notifications, trace = watched
        if not mask & select.EPOLLIN:
            if mask & _HANGUP:
                with self.lock:
                    self._unwatch(listener)  # no process of the tree is left: nothing can exec under it any more
            return
        try:
            received = notifications.receive()
        except OSError as exc:
            # A listener that cannot be read would leave the tree's next exec waiting for ever: closed instead,
            # the kernel fails that exec and every later one of the tree with ENOSYS (a fault, never a hang).
            self.faults += 1
            trace.state = f"broken: the listener could not be read ({exc}); later execs of the tree failed"
            with self.lock:
                self._unwatch(listener)
            return
        if received is None:
            return
        notif_id, pid, number, arch, args = received
        if trace.server_first:
            # The listener's first notification: the server's own exec (the spawned process is the tree's only
            # one until it is answered), recorded by first_exec already. Let go without reading it.
            trace.server_first = False
            notifications.answer(notif_id, 0)
            return
        target = trace.late_trace() if trace.closed else trace
        listed = target.wants_entry()
        paused = self._read_paused(notifications, notif_id, pid, number, arch, args, listed)
        with self.lock:
            try:
                notifications.answer(notif_id, paused.answer)
            except OSError:
                self.faults += 1
            target = trace.late_trace() if trace.closed else trace  # the call may have ended meanwhile
            if paused.unreadable:
                self._unreadable(trace, target, pid, paused.ppid, paused.answer != 0)
            elif paused.raw is not None:
                self._record(trace, target, listed, pid, paused)

    def _read_paused(
        self,
        notifications: seccomp.Notifications,
        notif_id: int,
        pid: int,
        number: int,
        arch: int,
        args: tuple[int, ...],
        listed: bool,
    ) -> _Paused:
        """Only what must be read while the process waits (each microsecond here delays the exec): its request;
        where the path is relative, the directory it is relative to (a descriptor closed on exec, a process that
        exits at once); the parent of a listed entry; for EXEC_DENY the verdict (RE2, out of the lock).
        Decoding, the file's state, redaction and the digest come once it is on its way."""
        paused = _Paused()
        try:
            compat = seccomp.compat_abi(arch, number)
            if compat:
                args = tuple(value & 0xFFFFFFFF for value in args)
            execveat = number in seccomp.EXECVEAT_NUMBERS
            path_address, argv_address = (args[1], args[2]) if execveat else (args[0], args[1])
            raw = paused.raw = memory.read_request(pid, path_address, argv_address, 4 if compat else 8)
            if execveat or not raw[0].startswith(b"/"):
                paused.path = memory.absolute(pid, memory.decode(raw[0]), execveat, args[0], args[4])
            if listed:
                paused.ppid = memory.parent_of(pid)
            if self.deny:
                paused.path = paused.path or memory.absolute(pid, memory.decode(raw[0]), False, 0, 0)
                paused.outcome, paused.setid = memory.predict(pid, paused.path)
                arguments = list(map(memory.decode, raw[1]))
                text = deny_text(paused.path, arguments)
                if paused.outcome == "ok" and denies(self.deny, text, pid, paused.path, arguments):
                    paused.outcome, paused.answer, paused.denied_text = "denied", errno.EPERM, text
            if not notifications.valid(notif_id):
                paused.raw = None  # the process is gone: what was read may not have been its memory
        except Exception:  # never leave a process waiting: it is answered whatever happened here
            self.faults += 1
            paused.raw = None
            # Still waiting: an exec that could not be read. Recorded as such; with EXEC_DENY it cannot be
            # checked, so it is refused (fail closed).
            paused.unreadable = notifications.valid(notif_id)
            paused.answer = errno.EPERM if paused.unreadable and self.deny else 0
            if paused.unreadable:
                paused.ppid = memory.parent_of(pid)
        return paused

    def _unreadable(self, trace: ExecTrace, target: ExecTrace, pid: int, ppid: int, refused: bool) -> None:
        outcome = "unreadable-denied" if refused else "unreadable"
        self._count("denied" if refused else outcome)
        entry = unreadable_entry(target.started, pid, ppid, refused) if target.wants_entry() else None
        shown_denied = None
        if refused:
            shown_denied = f"an exec of pid {pid} that could not be read (RELAY_SHELL_EXEC_DENY fails closed)"
        target.add(entry, digest_line(None, [], outcome), shown_denied, False)
        self._late_added(trace, target)

    def _record(self, trace: ExecTrace, target: ExecTrace, listed: bool, pid: int, paused: _Paused) -> None:
        """Under the lock, once the exec was answered: its entry, its digest line, the counters."""
        assert paused.raw is not None
        raw_path, raw_argv, argc, cut = paused.raw
        path = paused.path or memory.absolute(pid, memory.decode(raw_path), False, 0, 0)
        outcome, setid = paused.outcome, paused.setid
        if not outcome:
            outcome, setid = memory.predict_cached(pid, path)
        if outcome == "ENOENT":
            target.missed()
            return
        self._count(outcome)
        argv = [memory.decode(item) for item in raw_argv]
        shown = redacted_argv(argv)
        entry = None
        if listed and target.wants_entry():
            entry = entry_of(target.started, pid, paused.ppid, path, shown, argc, len(argv), cut, outcome)
        dropped = setid and self.no_new_privs and outcome == "ok"
        if entry is not None and dropped:
            entry["setid_dropped"] = True
        shown_denied = refusal_shown(path, shown) if paused.denied_text is not None else None
        target.add(entry, digest_line(path, shown, outcome), shown_denied, dropped)
        self._late_added(trace, target)

    # -- late execs: after the call's record was written ---------------------------------------------------------

    def _late_added(self, trace: ExecTrace, target: ExecTrace) -> None:
        if target is trace:
            return
        self.late += 1
        self._write_late(trace, now=False)

    def _write_late(self, trace: ExecTrace, now: bool) -> None:
        """Under the lock: the late execs of a call as one `exec:late` record, when its tree is gone (`now`), or
        LATE_BATCH of them are waiting, or the oldest has waited LATE_WAIT seconds."""
        late = trace.late
        if late is None or not late.count:
            return
        if not now and late.count < LATE_BATCH and time.monotonic() - trace.late_since < LATE_WAIT:
            return
        trace.late = None
        record = late.record()
        if self.on_late is None:
            return
        if self.loop is not None and not self.loop.is_closed():  # on the service thread: written by the loop
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (the server is gone)
                self.loop.call_soon_threadsafe(self.on_late, trace.call_id, record)

    def flush_late(self) -> None:
        """At shutdown, on the event loop: every call's late execs not yet written."""
        with self.lock:
            for _, trace in list(self.watched.values()):
                late = trace.late
                if late is None or not late.count:
                    continue
                trace.late = None
                if self.on_late is not None:
                    self.on_late(trace.call_id, late.record())

    # -- the tree's first exec: the server's own posix_spawn, answered unread (trace.server_first) ---------------

    def first_exec(self, trace: ExecTrace, path: str, argv: list[str]) -> None:
        """Before the spawn, on the spawner thread: the entry of the exec about to happen (nothing of the tree
        runs yet, so it is first), its digest line held until its outcome is known. PermissionError when
        EXEC_DENY refuses it (recorded as refused; nothing is spawned)."""
        outcome = "ok"
        if self.deny and denies(self.deny, deny_text(path, argv), os.getpid(), os.path.abspath(path), argv):
            outcome = "denied"
        shown = redacted_argv(argv)
        setid = memory.predict(os.getpid(), path)[1] and self.no_new_privs and outcome == "ok"
        entry = entry_of(trace.started, 0, os.getpid(), path, shown, len(argv), len(argv), False, outcome)
        if setid:
            entry["setid_dropped"] = True
        with self.lock:
            self._count(outcome)
            if outcome == "denied":
                trace.add(entry, digest_line(path, shown, outcome), refusal_shown(path, shown), False)
                raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), path)
            trace.add(entry if trace.wants_entry() else None, b"", None, setid)
            trace.first_line = digest_line(path, shown, outcome)
            trace.first_entry = entry
            trace.server_first = True

    def first_exec_started(self, trace: ExecTrace, pid: int) -> None:
        with self.lock:
            trace.first_entry["pid"] = pid

    def first_exec_failed(self, trace: ExecTrace, error: OSError) -> None:
        """The exec failed (posix_spawn said why): nothing of the tree ran."""
        outcome = errno.errorcode.get(error.errno or 0, "error")
        with self.lock:
            entry = trace.first_entry
            entry["ok"] = False
            entry["error"] = outcome
            trace.first_line = digest_line(entry["path"], entry["argv"], outcome)

    def _count(self, outcome: str) -> None:
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
            "untraced_trees": self.untraced_trees,
            "read_faults": self.faults,
            "trees_open": len(self.watched),
        }


def _has_sys_admin() -> bool:
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> _CAP_SYS_ADMIN & 1)
    return False
