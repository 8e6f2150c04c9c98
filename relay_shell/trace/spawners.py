"""The spawner thread: the one thread of the server that carries the exec filter (adr/0027).

A seccomp filter belongs to the thread that installs it and is inherited by the processes that thread creates, so
every traced tree is started from this thread: the filter is installed on it once, at startup (no TSYNC: the
server's other threads stay unfiltered), with one listener the tracer's service thread answers. The thread lives
as long as the server: it starts each call's and each terminal's first process in turn, handed over by the event
loop, which waits for the spawn through plain locks as it waits for Popen's (a spawn takes a fraction of a
millisecond; going through the loop would cost more than it saves).

Before this, each tree had a spawner thread of its own, made ahead and let go after the spawn, and with it a
filter and listener of its own (adr/0019): making and ending a Python thread per call cost ~0.3–0.45 ms of the
server's time per call back to back. One thread, one filter: the listener no longer says whose an exec is, the
process's ancestry and unit do (lineage.py).

A terminal's program (ptyprocess forks it) gets a parent-death signal that fires when the *thread* that forked it
ends: this thread ends with the server, so a terminal's program lives as long as the terminal, as it did when its
spawner thread was kept parked until the terminal closed.

Other work may be posted to it (`post`): run between spawns without anyone waiting for it. Readonly's traced spare
threads are made so (confine/spares.py): a thread made by this one carries its exec filter.

Where the native spawner is built (trace/spawner.c, adr/0036) the thread waits in it, without the GIL: a one-shot
tree's first process is spawned there (`submit`), its first exec answered by the compiled answerer, and no
hand-over of the spawn needs the GIL; work for Python (`run`, `post`, closing) makes it return to this same thread,
which runs the work and waits in it again.
"""

from __future__ import annotations

import _thread
import threading
from collections.abc import Callable

from relay_shell.trace import native, seccomp


class Spawner:
    """The thread with the exec filter installed on itself (or the reason it could not be)."""

    def __init__(self, no_new_privs: bool) -> None:
        self.no_new_privs = no_new_privs
        self.made = threading.Event()
        # Plain locks: waking a thread through a lock costs less than through an Event (a Condition, a new
        # waiter lock per wait), and both hand-overs are on every call's path.
        self.go = _thread.allocate_lock()
        self.go.acquire()
        self.done = _thread.allocate_lock()
        self.done.acquire()
        # Spawns from another thread than the loop's wait their turn; re-entered by a spare's hand (its refill).
        self.one_at_a_time = threading.RLock()
        self.listener: int | None = None
        self.problem = ""
        self.thread_id = 0
        self.work: Callable[[], None] | None = None
        self.posted = False  # posted work runs or ran, and `done` was not yet taken back for it
        self.closed = False
        self.native = native.spawner()  # None: the thread waits on `go` (no compiler, or the Python path forced)

    def start(self) -> Spawner:
        _thread.start_new_thread(self._run, ())
        self.made.wait()
        return self

    def _run(self) -> None:
        self.thread_id = threading.get_native_id()
        try:
            self.listener = seccomp.install_listener(self.no_new_privs)
        except (OSError, seccomp.TraceUnavailable) as exc:
            self.problem = str(exc)
        self.made.set()
        if self.listener is None:
            return
        while True:
            if self.native is not None:
                self.native.serve()  # spawns what is submitted, until work for Python is posted
            else:
                self.go.acquire()
            work = self.work
            if work is None:  # closed: the thread ends, and the filter with it
                self.done.release()
                return
            try:
                work()
            finally:
                self.work = None
                self.done.release()

    def run(self, work: Callable[[], None]) -> None:
        """Run `work` on the spawner thread and wait for it (it must not raise: it keeps its own outcome)."""
        with self.one_at_a_time:
            if self.closed:
                raise RuntimeError("the spawner thread has ended")
            self._posted_done(wait=True)
            self.work = work
            self._wake()
            self.done.acquire()

    def submit(self, request: native.SpawnRequest) -> None:
        """A tree's first process spawned natively on the spawner thread (trace/spawn.py `spawn_natively`), waited
        for with the GIL released."""
        assert self.native is not None
        with self.one_at_a_time:
            if self.closed:
                raise RuntimeError("the spawner thread has ended")
            self.native.submit(request)

    def _wake(self) -> None:
        if self.native is not None:
            self.native.python()
        else:
            self.go.release()

    def run_on(self, hand: Callable[[Callable[[], None]], object], work: Callable[[], None]) -> None:
        """Run `work` through `hand` (on a thread this one made) in the spawners' turn: one tree's first process
        starts at a time (the service thread knows it by the one tree `starting`)."""
        with self.one_at_a_time:
            hand(work)

    def post(self, work: Callable[[], None]) -> None:
        """Run `work` on the spawner thread without waiting for it; dropped while work posted before has not
        ended (the caller asks again later). It must not raise. The next `run` waits for it."""
        with self.one_at_a_time:
            if self.closed or not self._posted_done(wait=False):
                return
            self.work = work
            self.posted = True
            self._wake()

    def _posted_done(self, wait: bool) -> bool:
        """Under one_at_a_time: whether no posted work runs any more (waiting for it when `wait`)."""
        if self.posted:
            if not self.done.acquire(wait):
                return False
            self.posted = False
        return True

    def close(self) -> None:
        """End the thread (the server stops, or the tracer did)."""
        with self.one_at_a_time:
            if self.closed or self.listener is None:
                self.closed = True
                return
            self.closed = True
            self._posted_done(wait=True)
            self.work = None
            self._wake()
            self.done.acquire()
