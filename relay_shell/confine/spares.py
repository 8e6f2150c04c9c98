"""Spare confined threads for one-shot commands (adr/0024 "Cost", adr/0031).

Confining a thread costs ~0.13–0.2 ms of CPU here (most of it the kernel compiling the syscall filter), a tenth of
a `shell_exec true`. So a few are made ahead, off the call's path: each is a new thread that confines itself (its
own Landlock domain, its own id in its filter) and waits for the one spawn it will do. A call hands its spawn to
one (which spawns, then ends); once the spawn is done the missing one is made, on another thread than the
call's, while the call goes on. With none ready (a burst, or a thread the kernel would not confine), the call
confines a new thread of its own.

A thread is born with what its creator carries: its seccomp filters, its cgroup, no_new_privs. So spares are made
by the thread whose children they must be:
- **untraced calls**: a filler thread of the pool's own, started at startup outside every unit and filter, so its
  spares are born in the server's own cgroup with nothing of the exec trace; a spare joins the call's unit first.
- **traced calls**: the exec trace's spawner thread (`fill_on`: the pool hands it the refill, the spawner runs it
  between spawns), so each spare carries the exec filter and the server's cgroup, as a thread the spawner made
  for the call did before (adr/0024); the traced spawn enters the call's unit on the spare itself.
Before the first spare of the traced pool was made, traced calls confine a thread of their own on the spawner.

A spare waits in no process tree's domain: nothing runs in its domain until its spawn, after which it ends. Two
spares are two domains (every `landlock_restrict_self` makes a new one), so no two trees share one.
"""

from __future__ import annotations

import _thread
import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
SPARES = 4
FillOn = Callable[[Callable[[], None]], None]  # runs work on another thread without waiting for it


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
        self.thread_id = 0

    def run(self, pool: SparePool) -> None:
        self.thread_id = threading.get_native_id()
        try:
            self.confine()
        except OSError as exc:
            pool.failed(str(exc))  # this thread never spawns; calls make their own meanwhile
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
    """SPARES confined threads kept ready. `fill_on(work)` runs `work` (the refill) on the thread that must be the
    spares' creator without waiting for it; None: a filler thread of the pool's own, started now."""

    def __init__(
        self, confine: Callable[[], None], fill_on: Callable[[Callable[[], None]], None] | None = None
    ) -> None:
        self.confine = confine
        self.lock = threading.Lock()
        self.ready: list[SpareThread] = []
        self.missing = SPARES
        self.taken = 0  # spawns handed to a spare
        self.short = 0  # spawns that found none ready (the call confined a thread of its own)
        self.problem = ""
        self.fill_on = fill_on
        # Released when spares are missing: a plain lock wakes the filler cheaper than an Event, on the call's path.
        self.wake = _thread.allocate_lock()
        if fill_on is None:
            _thread.start_new_thread(self._fill, ())

    def take(self) -> SpareThread | None:
        """A ready spare, or None; `replace()` once its spawn is done."""
        with self.lock:
            spare = self.ready.pop() if self.ready else None
            if spare is not None:
                self.missing += 1
                self.taken += 1
            else:
                self.short += 1
        return spare

    def replace(self) -> None:
        """After a spawn (on a spare or not): the missing spares are made now, on their creator's thread, while the
        call goes on — not while it spawns, which would compete with the spawn for the GIL and a core."""
        with self.lock:
            wanted = self.missing > 0 and not self.problem
        if not wanted:
            return
        if self.fill_on is not None:
            self.fill_on(self.refill)
            return
        with contextlib.suppress(RuntimeError):  # already released: the filler is awake
            self.wake.release()

    def add(self, spare: SpareThread) -> None:
        with self.lock:
            self.ready.append(spare)

    def failed(self, problem: str) -> None:
        """A spare could not confine itself: none is made any more (what refuses one refuses the next)."""
        with self.lock:
            self.problem = problem

    def refill(self) -> None:
        """Make the missing spares, each a new thread of the calling thread (which they take after)."""
        with self.lock:
            count, self.missing = self.missing, 0
        for _ in range(count):
            _thread.start_new_thread(SpareThread(self.confine).run, (self,))

    def _fill(self) -> None:
        """The filler thread, for the server's life: the missing spares, made as soon as a call asks."""
        while True:
            self.refill()
            self.wake.acquire()
