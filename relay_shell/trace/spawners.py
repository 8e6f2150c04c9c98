"""Spawner threads (adr/0019): the exec filter is installed on a thread, and the tree that thread starts (only
that tree) inherits it. A thread can carry one listener's filter only, for good, so each call or session gets a
thread of its own, which ends once its tree is started (a PTY's thread stays until the terminal closes: the
program's parent-death signal fires when the thread that forked it ends).

Making the thread and installing its filter cost ~0.13 ms, a tenth of a `shell_exec true`: so they are made
ahead, a few at a time, by the tracer's service thread while the server is idle (REFILL_IDLE), like the cgroup
units' spares; a call finds one waiting, filter installed, and hands it its spawn. A burst that uses them up
makes the next ones on the call's path. Used threads are let go at the same idle moments, so their exit does not
compete for the GIL with the call that used them.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import threading
from collections.abc import Callable

from relay_shell.trace import seccomp

SPARES = 2  # spawner threads kept ready
REFILL_IDLE = 0.001  # seconds without an exec to answer before the service thread makes spares
USED_KEPT = 8  # used spawner threads waiting for an idle moment to end, at most


class Spawner:
    """One thread with the exec filter installed on itself (or the reason it could not be), waiting for the one
    spawn it will do."""

    def __init__(self, no_new_privs: bool) -> None:
        self.no_new_privs = no_new_privs
        self.made = threading.Event()
        # A plain lock, held until the spawn is handed over: waking a thread through a lock costs less than
        # through an Event (a Condition, a new waiter lock per wait), and this hand-over is on the call's path.
        self.go = _thread.allocate_lock()
        self.go.acquire()
        self.release = threading.Event()  # the thread may end (for a PTY: the terminal closed)
        self.listener: int | None = None
        self.problem = ""
        self.work: Callable[[int | None, str], None] | None = None

    def run(self) -> None:
        try:
            self.listener = seccomp.install_listener(self.no_new_privs)
        except (OSError, seccomp.TraceUnavailable) as exc:
            self.problem = str(exc)
        self.made.set()
        self.go.acquire()
        if self.work is not None:
            self.work(self.listener, self.problem)
        self.release.wait()
        # The thread ends here and its filter with it: only the tree it started keeps the filter.

    def start_thread(self) -> Spawner:
        # _thread, not threading.Thread: start() would wait for the new thread to run, and the service thread
        # that makes spares must go back to answering execs at once.
        _thread.start_new_thread(self.run, ())
        return self

    def hand_over(self) -> None:
        self.go.release()

    def discard(self) -> None:
        """Not used after all (the tracer stopped): the thread ends without spawning."""
        self.work = None
        self.release.set()
        self.go.release()


class SparePool:
    def __init__(self, no_new_privs: bool, first: Spawner | None = None) -> None:
        self.no_new_privs = no_new_privs
        # Written when a spawner is taken or done with: wakes the service thread (in epoll_wait) to refill.
        self.wake = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self.lock = threading.Lock()
        self.ready: list[Spawner] = [first] if first is not None else []
        self.used: list[Spawner] = []  # done spawning, to be let go at the next idle moment

    def take(self) -> Spawner:
        """A ready spawner; made now (and waited for) when none is."""
        with self.lock:
            spawner = self.ready.pop() if self.ready else None
        if spawner is None:
            spawner = Spawner(self.no_new_privs).start_thread()
        spawner.made.wait()
        return spawner

    def done_with(self, spawner: Spawner) -> None:
        with self.lock:
            self.used.append(spawner)
            # Never idle (execs to answer all the time): the oldest are let go now, so they do not pile up.
            while len(self.used) > USED_KEPT:
                self.used.pop(0).release.set()
        with contextlib.suppress(OSError):
            os.eventfd_write(self.wake, 1)

    def woken(self) -> None:
        with contextlib.suppress(OSError):
            os.eventfd_read(self.wake)

    def needs_refill(self) -> bool:
        return len(self.ready) < SPARES or bool(self.used)

    def refill(self) -> None:
        """On the service thread when idle: let the used threads end, make spares."""
        with self.lock:
            used, self.used = self.used, []
            missing = SPARES - len(self.ready)
        for spawner in used:
            spawner.release.set()
        made = [Spawner(self.no_new_privs).start_thread() for _ in range(max(missing, 0))]
        with self.lock:
            self.ready.extend(made)

    def close(self) -> None:
        with self.lock:
            ready, self.ready = self.ready, []
            used, self.used = self.used, []
        for spawner in ready:
            spawner.made.wait()
            if spawner.listener is not None:
                seccomp.close_quietly(spawner.listener)
            spawner.discard()
        for spawner in used:
            spawner.release.set()
