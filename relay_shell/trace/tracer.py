"""The exec tracer: installs the exec filter on a short-lived spawner thread per call or session, so the process
tree that thread starts (and only that tree) is traced; services each tree's listener on the event loop until
the kernel says no process of the tree is left (POLLHUP), so a background job that execs after its call ended
is answered too (counted as late); refuses the execs RELAY_SHELL_EXEC_DENY matches with EPERM.

Never fails or hangs a call because of tracing: if the filter cannot be installed the tree runs untraced and its
record says so; every notification is answered (CONTINUE) whatever goes wrong while reading it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import re
import select
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio

from relay_shell.trace import memory, seccomp
from relay_shell.trace.record import ExecTrace, entry_of

logger = logging.getLogger("relay_shell")
T = TypeVar("T")
_CAP_SYS_ADMIN = 21
DENY_TEXT_MAX = 8192  # characters of `path argv…` the deny patterns see (bounded matching time)


class ExecTracer:
    def __init__(self, setting: str, deny_patterns: list[str], max_entries: int, metrics: Any = None) -> None:
        self.setting = setting
        self.deny = [re.compile(pattern) for pattern in deny_patterns]
        self.max_entries = max_entries
        self.metrics = metrics
        self.state = "off"
        self.reason = "RELAY_SHELL_EXEC_TRACE=off"
        self.no_new_privs = False  # traced trees get no_new_privs (the server lacks CAP_SYS_ADMIN)
        self.traced = 0
        self.denied = 0
        self.late = 0  # execs of a tree whose call had already ended (background jobs)
        self.untraced_trees = 0  # trees the filter could not be installed for
        self.faults = 0  # notifications that could not be read (answered CONTINUE all the same)
        self.open_trees = 0
        if setting == "on":
            self._probe()

    @property
    def active(self) -> bool:
        return self.state == "on"

    def _probe(self) -> None:
        """Install the filter once on a throwaway thread: tells whether this kernel and this process may."""
        self.no_new_privs = not _has_sys_admin() and not seccomp.no_new_privs_set()
        problem: list[str] = []

        def attempt() -> None:
            try:
                os.close(seccomp.install_listener(self.no_new_privs))
            except (OSError, seccomp.TraceUnavailable) as exc:
                problem.append(str(exc))

        thread = threading.Thread(target=attempt, name="relay-shell-trace-probe")
        thread.start()
        thread.join()
        if problem:
            self.state = "unavailable"
            self.reason = f"the exec filter cannot be installed here ({problem[0]}); calls run untraced"
            self.no_new_privs = False
            return
        self.state = "on"
        self.reason = "seccomp user notification on every execve/execveat of the trees calls and sessions start"
        if self.no_new_privs:
            self.reason += (
                "; without CAP_SYS_ADMIN the traced trees run with no_new_privs: set-user-ID programs (sudo, su) "
                "run without their privilege (RELAY_SHELL_EXEC_TRACE=off restores it)"
            )

    def new_trace(self) -> ExecTrace | None:
        return ExecTrace(self.max_entries) if self.active else None

    async def spawn(self, trace: ExecTrace | None, start: Callable[[], T], hold: threading.Event | None = None) -> T:
        """Run `start` (which starts the tree's first process) on a new thread carrying the exec filter; the
        loop answers the tree's notifications. Untraced (on the calling thread) without a trace. With `hold`
        the thread stays (idle) until it is set: a PTY's program gets SIGKILL as its parent-death signal, and
        the kernel sends that when the thread that forked it ends, not the server."""
        if trace is None:
            return start()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()

        def settle(result: T | None, failure: BaseException | None) -> None:
            if done.cancelled():
                return
            if failure is not None:
                done.set_exception(failure)
            else:
                done.set_result(result)  # type: ignore[arg-type]

        def spawner() -> None:
            listener = None
            try:
                listener = seccomp.install_listener(self.no_new_privs)
            except (OSError, seccomp.TraceUnavailable) as exc:
                trace.state = f"untraced: {exc}"
            if listener is not None:
                loop.call_soon_threadsafe(self._watch, listener, trace)
            try:
                result = start()
            except BaseException as exc:
                loop.call_soon_threadsafe(settle, None, exc)
                return
            loop.call_soon_threadsafe(settle, result, None)
            if hold is not None:
                hold.wait()
            # The thread ends here and its filter with it: only the tree it started keeps the filter.

        thread = threading.Thread(target=spawner, name="relay-shell-spawn", daemon=True)
        with anyio.CancelScope(shield=True):  # a cancelled call still gets its process, to end it
            thread.start()
            result = await done
        if trace.state != "traced":
            self.untraced_trees += 1
        return result

    # -- the listener, on the event loop ---------------------------------------------------------------------

    def _watch(self, listener: int, trace: ExecTrace) -> None:
        self.open_trees += 1
        poller = select.poll()
        poller.register(listener, select.POLLIN)
        notifications = seccomp.Notifications(listener)
        loop = asyncio.get_running_loop()
        loop.add_reader(listener, self._on_ready, loop, listener, poller, notifications, trace)

    def _on_ready(
        self,
        loop: asyncio.AbstractEventLoop,
        listener: int,
        poller: select.poll,
        notifications: seccomp.Notifications,
        trace: ExecTrace,
    ) -> None:
        events = poller.poll(0)
        revents = events[0][1] if events else 0
        if not revents & select.POLLIN:
            if revents & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
                # No process of the tree is left: nothing can exec under this filter any more.
                loop.remove_reader(listener)
                os.close(listener)
                self.open_trees -= 1
            return
        try:
            received = notifications.receive()
        except OSError as exc:
            # A listener that cannot be read would leave the tree's next exec waiting for ever: closed instead,
            # the kernel fails that exec and every later one of the tree with ENOSYS (a fault, never a hang).
            self.faults += 1
            trace.state = f"broken: the listener could not be read ({exc}); later execs of the tree failed"
            loop.remove_reader(listener)
            os.close(listener)
            self.open_trees -= 1
            return
        if received is None:
            return
        notif_id, pid, number, args = received
        outcome = "ok"
        request = None
        denied_text = None
        answer = 0
        setid = False
        try:
            execveat = number in seccomp.EXECVEAT_NUMBERS
            if execveat:
                request = memory.read_request(pid, True, args[0], args[1], args[2], args[4])
            else:
                request = memory.read_request(pid, False, 0, args[0], args[1], 0)
            outcome, setid = memory.predict(pid, request.path)
            if self.deny and outcome == "ok":
                text = " ".join([request.path, *request.argv])[:DENY_TEXT_MAX]
                if any(pattern.search(text) for pattern in self.deny):
                    outcome, answer, denied_text = "denied", errno.EPERM, text
            if not notifications.valid(notif_id):
                request = None  # the process is gone: what was read may not have been its memory
        except Exception:  # never leave a process waiting: it is answered below whatever happened here
            self.faults += 1
            request = None
            setid = False
        finally:
            try:
                notifications.answer(notif_id, answer)
            except OSError:
                self.faults += 1
        if request is None:
            return
        if outcome == "ENOENT":
            trace.missed()
            return
        self._count(outcome)
        if trace.closed:
            self.late += 1
            return
        ppid = memory.parent_of(pid)
        entry, digest_line = entry_of(
            trace.started, pid, ppid, request.path, request.argv, request.argc, request.argv_cut, outcome
        )
        if setid and self.no_new_privs and outcome == "ok":
            entry["setid_dropped"] = True
        shown_denied = None
        if denied_text is not None:
            shown_denied = " ".join(str(item) for item in [request.path, *entry["argv"][1:]])[:300]
        trace.add(entry, digest_line, shown_denied)

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
            "trees_open": self.open_trees,
        }


def _has_sys_admin() -> bool:
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> _CAP_SYS_ADMIN & 1)
    return False


def refusal_notes(trace: ExecTrace | None) -> list[str]:
    """What a call's result says about its tree: the programs RELAY_SHELL_EXEC_DENY refused, and set-user-ID
    programs that ran without their privilege."""
    if trace is None:
        return []
    notes = [f"exec refused by RELAY_SHELL_EXEC_DENY (EPERM): {text}" for text in trace.denied_execs]
    if trace.denied > len(trace.denied_execs):
        notes.append(f"{trace.denied - len(trace.denied_execs)} more execs refused by RELAY_SHELL_EXEC_DENY")
    if trace.setid_dropped:
        notes.append(
            f"{trace.setid_dropped} set-user-ID program(s) ran without their privilege: the exec trace needs "
            "no_new_privs here (RELAY_SHELL_EXEC_TRACE=off restores it)"
        )
    return notes


def denied_first(trace: ExecTrace) -> str:
    """The error of a call or session whose first program RELAY_SHELL_EXEC_DENY refused: nothing ran."""
    shown = trace.denied_execs[0] if trace.denied_execs else "the program"
    return f"{shown} was refused by RELAY_SHELL_EXEC_DENY (EPERM); nothing ran"


def session_execs(session: Any) -> dict[str, Any]:
    """The `execs` summary of a local session's whole tree, for its `session:end` record (none over SSH)."""
    trace = getattr(session.terminal, "exec_trace", None)
    if trace is None:
        return {}
    trace.closed = True  # what the tree still executes is late now
    return {"execs": trace.record()}
