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

Where the compiled library is built (trace/spares.c; not with RELAY_EXEC_TRACE_ANSWERER=python, nor on glibc < 2.34)
no spare thread is made at all (`NativeSparePool`, adr/0037 "Round 7"): the same creator carries out each spawn
itself in C (trace/spawn.py `spawn_natively` submits it), and the tree's first process makes its own Landlock domain
before its exec, so no thread of the server is ever in a tree's domain and none needs a guard; nothing takes the GIL.
"""

from __future__ import annotations

import _thread
import contextlib
import ctypes
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from relay_shell.trace import native

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


class ConfinedSpawn(native.NativeSpare):
    """The native pool taken for one spawn: `submit` as native.NativeSpare's, and a child whose Landlock domain the
    kernel refused (it ran nothing) raised as `refused(why)` says (ConfinementFailed), not as a program that could not
    run."""

    def __init__(self, pool: NativeSparePool, handle: int) -> None:
        super().__init__(pool.library, pool.handle, handle, pool.answerer)
        self.owner = pool

    def submit(self, request: native.SpawnRequest) -> None:
        super().submit(request)
        if request.stage != native.SPAWNED and self.owner.domain_error():
            raise self.owner.refused(f"landlock_restrict_self: {os.strerror(request.error)}")


class NativeSparePool:
    """SparePool's spares made in C as a confined spawner (trace/spares.c, adr/0037 "Round 7"): the creator is a Python
    thread that runs `prepare` on itself once, then waits in C for the rest of the server's life and carries out each
    spawn request itself, never taking the GIL: it enters the call's unit and clones a vfork-style child that inherits
    what the creator carries and makes its own Landlock domain (`ruleset`, `landlock_flags`) before its exec. No thread
    is made per tree and none shares a tree's domain. `take` on the event loop gives a ConfinedSpawn whose `submit`
    hands the creator the request (None before the creator serves, or once the kernel refused a domain: the call
    confines a thread of its own). `answerer`: traced spawns' first exec is let go by the compiled answerer.
    `refused(why)`: the exception a refused domain raises."""

    def __init__(
        self,
        library: ctypes.CDLL,
        prepare: Callable[[], None],
        ruleset: int,
        landlock_flags: int,
        refused: Callable[[str], BaseException],
        start: StartOn | None = None,
        answerer: native.Answerer | None = None,
    ) -> None:
        handle = library.spares_new(ruleset, landlock_flags)
        if not handle:
            raise MemoryError("readonly's confined spawner")
        self.library = library
        self.handle = ctypes.c_void_p(handle)
        self.prepare = prepare
        self.refused = refused
        self.answerer = answerer
        self.taken = 0
        self.short = 0
        self.creator_problem = ""
        self.creator_id = 0
        (start or _run_here)(self._begin)

    @property
    def serving(self) -> bool:
        """The creator waits for requests (spawns are submitted to it)."""
        error = ctypes.c_int32(0)
        return bool(self.library.spares_state(self.handle, ctypes.byref(error)))

    def domain_error(self) -> int:
        error = ctypes.c_int32(0)
        self.library.spares_state(self.handle, ctypes.byref(error))
        return int(error.value)

    @property
    def problem(self) -> str:
        """Why no spawn is submitted any more ("" while they are)."""
        error = self.domain_error()
        return self.creator_problem or (f"a tree's Landlock domain was refused: {os.strerror(error)}" if error else "")

    def take(self) -> ConfinedSpawn | None:
        """The confined spawner for one spawn, or None."""
        handle = self.library.spares_take(self.handle)
        if not handle:
            self.short += 1
            return None
        self.taken += 1
        return ConfinedSpawn(self, handle)

    def replace(self) -> None:
        """Nothing to make: the creator spawns every tree itself."""

    def _begin(self) -> None:
        _thread.start_new_thread(self._create, ())

    def _create(self) -> None:
        self.creator_id = threading.get_native_id()
        try:
            self.prepare()
        except OSError as exc:
            self.creator_problem = str(exc)
            return
        self.library.spares_serve(self.handle)  # never returns: the GIL released, the creator waits in C


def native_library() -> ctypes.CDLL | None:
    """The compiled library when native spares can be made here (built, allowed, glibc ≥ 2.34), else None: the Python
    spares above."""
    library, _ = native.load()
    if library is None or not library.spares_available():
        return None
    return library
