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
the spares are made in C (`NativeSparePool`, adr/0037 "Round 6"): the same creator, the same domain and guard per
spare, set in C, and the spawn submitted to the spare (trace/spawn.py `spawn_natively`) — no spare takes the GIL.
"""

from __future__ import annotations

import _thread
import contextlib
import ctypes
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from relay_shell.confine.syscall_filter import Program
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


@dataclass(frozen=True, slots=True)
class ReadySpare:
    """A native spare waiting for its spawn (what tests and status read of it)."""

    thread_id: int


class NativeSparePool:
    """SparePool's spares made in C (trace/spares.c, adr/0037 "Round 6"): the creator is a Python thread that runs
    `prepare` on itself once, then waits in C for the rest of the server's life and makes each missing spare as a
    pthread, which confines itself in C (`landlock_restrict_self` on `ruleset`, `guard` installed with its own id),
    waits, carries out one spawn request and ends, never taking the GIL. `take` on the event loop gives a
    native.NativeSpare whose `submit` hands it the request; the creator is asked for the replacement when the spawn
    is done (in the same foreign call). `answerer`: traced spawns' first exec is let go by the compiled answerer."""

    def __init__(
        self,
        library: ctypes.CDLL,
        prepare: Callable[[], None],
        ruleset: int,
        landlock_flags: int,
        guard: Program,
        start: StartOn | None = None,
        answerer: native.Answerer | None = None,
    ) -> None:
        slots = (ctypes.c_uint * len(guard.thread_slots))(*(offset // 8 for offset in guard.thread_slots))
        handle = library.spares_new(
            ruleset, landlock_flags, guard.code, len(guard.code) // 8, slots, len(slots), SPARES
        )
        if not handle:
            raise MemoryError("readonly's native spares")
        self.library = library
        self.handle = ctypes.c_void_p(handle)
        self.prepare = prepare
        self.answerer = answerer
        self.taken = 0
        self.short = 0
        self.creator_problem = ""
        self.creator_id = 0
        (start or _run_here)(self._begin)

    @property
    def ready(self) -> list[ReadySpare]:
        return [ReadySpare(thread_id) for thread_id in self._ready()[0]]

    @property
    def problem(self) -> str:
        """Why no spare is made any more ("" while they are)."""
        error = self._ready()[1]
        return self.creator_problem or (
            f"a native spare could not confine itself: {os.strerror(error)}" if error else ""
        )

    def _ready(self) -> tuple[list[int], int]:
        thread_ids = (ctypes.c_int32 * 32)()
        error = ctypes.c_int32(0)
        count = self.library.spares_ready(self.handle, thread_ids, 32, ctypes.byref(error))
        return list(thread_ids[:count]), int(error.value)

    def take(self) -> native.NativeSpare | None:
        """A ready spare, or None (then `replace()`)."""
        handle = self.library.spares_take(self.handle)
        if not handle:
            self.short += 1
            return None
        self.taken += 1
        return native.NativeSpare(self.library, self.handle, handle, self.answerer)

    def replace(self) -> None:
        """After a spawn that found no spare: the creator makes the missing ones (after a spawn on a spare, the
        spare's submit asked already)."""
        self.library.spares_replace(self.handle)

    def _begin(self) -> None:
        _thread.start_new_thread(self._create, ())

    def _create(self) -> None:
        self.creator_id = threading.get_native_id()
        try:
            self.prepare()
        except OSError as exc:
            self.creator_problem = str(exc)
            return
        self.library.spares_create(self.handle)  # never returns: the GIL released, the creator waits in C


def native_library() -> ctypes.CDLL | None:
    """The compiled library when native spares can be made here (built, allowed, glibc ≥ 2.34), else None: the Python
    spares above."""
    library, _ = native.load()
    if library is None or not library.spares_available():
        return None
    return library
