"""Spare confined threads for one-shot commands (adr/0024 "Cost", adr/0031, adr/0037).

Confining a thread costs ~0.13–0.2 ms of CPU here (most of it the kernel compiling the syscall filter), a tenth of
a `shell_exec true`. So a few are made ahead, off the call's path: each is a new thread that confines itself and
waits for the one spawn it will do. A call hands its spawn to one (which spawns, then ends); once the spawn is done
the missing one is made, on another thread than the call's, while the call goes on. With none ready (a burst, or
a thread the kernel would not confine), the call confines a new thread of its own.

A thread is born with what its creator carries: its seccomp filters, its cgroup, no_new_privs, its capabilities
and securebits. So each pool has a **creator thread** of its own that carries what every tree shares, set once
(`prepare`: no_new_privs, the capabilities cut, the whole syscall filter with the creator's own id), and each spare
it makes inherits that and adds only what is its own (`confine`: its own Landlock domain, the filter's rules naming
its own id) — adr/0037. The creator itself is never in a Landlock domain and never spawns. It is made:
- **untraced calls**: at startup, outside every unit and filter, so its spares are born in the server's own cgroup
  with nothing of the exec trace; a spare enters the call's unit itself for its spawn (launch.py `_popen`);
- **traced calls**: by the exec trace's spawner thread (`start`, run there once), so it and each spare carry the
  exec filter and the server's cgroup, as a thread the spawner made for the call did before (adr/0024); the traced
  spawn enters the call's unit on the spare itself.
Before the first spare is made, calls confine a thread of their own.

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
StartOn = Callable[[Callable[[], None]], None]  # runs work on another thread (the spawner) and waits for it


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
    """SPARES confined threads kept ready, made by a creator thread of the pool's own: it runs `prepare` on itself
    once, then makes the spares, each of which runs `confine` on itself. `start(work)` runs `work` (which starts the
    creator) on the thread that must be the creator's parent; None: the calling thread."""

    def __init__(self, prepare: Callable[[], None], confine: Callable[[], None], start: StartOn | None = None) -> None:
        self.prepare = prepare
        self.confine = confine
        self.lock = threading.Lock()
        self.ready: list[SpareThread] = []
        self.missing = SPARES
        self.taken = 0  # spawns handed to a spare
        self.short = 0  # spawns that found none ready (the call confined a thread of its own)
        self.problem = ""
        self.creator_id = 0
        # Released when spares are missing: a plain lock wakes the creator cheaper than an Event, on the call's path.
        self.wake = _thread.allocate_lock()
        (start or _run_here)(self._begin)

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
        """After a spawn (on a spare or not): the missing spares are made now, by the creator, while the call goes
        on — not while it spawns, which would compete with the spawn for the GIL and a core."""
        with self.lock:
            wanted = self.missing > 0 and not self.problem
        if wanted:
            with contextlib.suppress(RuntimeError):  # already released: the creator is awake
                self.wake.release()

    def add(self, spare: SpareThread) -> None:
        with self.lock:
            self.ready.append(spare)

    def failed(self, problem: str) -> None:
        """The creator or a spare could not confine itself: none is made any more (what refuses one refuses the
        next)."""
        with self.lock:
            self.problem = problem

    def _begin(self) -> None:
        _thread.start_new_thread(self._create, ())

    def _create(self) -> None:
        """The creator thread, for the server's life: what every spare shares set on itself, then the missing
        spares made, each a new thread of this one, as soon as a call asks."""
        self.creator_id = threading.get_native_id()
        try:
            self.prepare()
        except OSError as exc:
            self.failed(str(exc))
            return
        while True:
            with self.lock:
                count, self.missing = self.missing, 0
            for _ in range(count):
                _thread.start_new_thread(SpareThread(self.confine).run, (self,))
            self.wake.acquire()


def _run_here(work: Callable[[], None]) -> None:
    work()
