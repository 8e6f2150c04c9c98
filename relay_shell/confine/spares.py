"""Spare confined threads for one-shot commands that are not traced (adr/0024, "Cost").

Confining a thread costs ~0.13 ms of CPU here (most of it the kernel compiling the syscall filter), a twentieth
of a `shell_exec true`. So a filler thread makes a few ahead, off the call's path: each is a new thread that
confines itself (its own Landlock domain, its own id in its filter) and waits for the one spawn it will do. A
call hands its spawn to one (which first joins the call's cgroup unit, then spawns, then ends); the filler makes
the missing ones once no spare was taken for REFILL_IDLE, so that their confining does not compete with calls
that come back to back for the GIL and the CPU. With none ready (a burst, or a thread the kernel would not
confine), the call confines a new thread of its own, as a traced tree always does: its spawner thread's exec
filter must be inherited.

A spare waits in no process tree's domain: nothing runs in its domain until its spawn, after which it ends. The
filler was started at startup, outside every unit, so spares are born in the server's own cgroup.
"""

from __future__ import annotations

import _thread
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
SPARES = 4
REFILL_IDLE = 0.002  # seconds without a spare taken before the filler makes the missing ones


class SpareThread:
    """One thread, confined, waiting for its spawn."""

    def __init__(self, confine: Callable[[], None]) -> None:
        self.confine = confine
        self.go = _thread.allocate_lock()
        self.go.acquire()
        self.done = _thread.allocate_lock()
        self.done.acquire()
        self.work: Callable[[], Any] | None = None
        self.outcome: list[Any] = []

    def run(self, pool: SparePool) -> None:
        try:
            self.confine()
        except OSError as exc:
            pool.problem = str(exc)  # this thread never spawns; calls make their own meanwhile
            return
        pool.add(self)
        self.go.acquire()
        work = self.work
        if work is None:
            return
        try:
            self.outcome.append(work())
        except BaseException as exc:  # handed to the waiting thread, raised there
            self.outcome.append(exc)
        finally:
            self.done.release()

    def hand(self, work: Callable[[], T]) -> T:
        """Run `work` on this thread (it then ends); the calling thread waits for it, the GIL released."""
        self.work = work
        self.go.release()
        self.done.acquire()
        result = self.outcome[0]
        if isinstance(result, BaseException):
            raise result
        return result


class SparePool:
    def __init__(self, confine: Callable[[], None]) -> None:
        self.confine = confine
        self.lock = threading.Lock()
        self.ready: list[SpareThread] = []
        self.missing = SPARES
        self.last_take = 0.0
        # Released when spares are missing: a plain lock wakes the filler cheaper than an Event, on the call's path.
        self.wake = _thread.allocate_lock()
        self.problem = ""
        _thread.start_new_thread(self._fill, ())

    def take(self) -> SpareThread | None:
        with self.lock:
            spare = self.ready.pop() if self.ready else None
            if spare is not None:
                self.missing += 1
                self.last_take = time.monotonic()
        if spare is not None:
            with contextlib.suppress(RuntimeError):  # already released: the filler is awake
                self.wake.release()
        return spare

    def add(self, spare: SpareThread) -> None:
        with self.lock:
            self.ready.append(spare)

    def _fill(self) -> None:
        """The filler thread, for the server's life: the missing spares, made at an idle moment."""
        while True:
            while True:
                delay = self.last_take + REFILL_IDLE - time.monotonic()
                if delay <= 0:
                    break
                time.sleep(delay)
            with self.lock:
                count, self.missing = self.missing, 0
            for _ in range(count):
                _thread.start_new_thread(SpareThread(self.confine).run, (self,))
            self.wake.acquire()
