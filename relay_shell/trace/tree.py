"""One process tree's exec trace, as the launch point drives it (launch.py; adr/0019, adr/0027). The tree starts on
the spawner thread, which carries the exec filter: a one-shot command through glibc's posix_spawn, its first exec
(the server's own) resolved, checked and recorded before the spawn; a terminal as its executor starts it. What the
tree executed goes into the records: a call's end record takes the whole tree (`finish_into`), shell_spawn what
ran until its first output settled (`snapshot_into`), each session_send a window of the session's trace
(`window_into`), session:end the session's whole tree (`end_fields`). With the trace off, launch.py's UNTRACED stands
in for it.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol, TypeVar

from relay_shell.errors import ToolError
from relay_shell.plan import Plan
from relay_shell.trace import resolve
from relay_shell.trace.answer import UNDETERMINED_REFUSED
from relay_shell.trace.deny import refusal
from relay_shell.trace.lineage import Unit
from relay_shell.trace.native import NativeSpare
from relay_shell.trace.record import ExecTrace
from relay_shell.trace.spawn import SPAWN_MISSING, SPAWN_READY, SpawnedChild, resolve_program, spawn, spawn_natively
from relay_shell.trace.tracer import ExecTracer

T = TypeVar("T")
C = TypeVar("C")


class Spawning(Protocol):
    """The tree's containment unit starting its process (containment/units.py `Unit.spawning`): the environment
    with the unit's marker, the spawning thread in the unit's cgroup (or, `elsewhere`, the unit's and the
    instance's cgroup.threads for the native spawner to enter and leave itself). The launcher hands it over; trace/
    imports nothing of containment."""

    def __call__(
        self, env: dict[str, str] | None, elsewhere: list[int] | None = None
    ) -> AbstractContextManager[dict[str, str] | None]: ...


# Readonly confinement (launch.py, confine/): runs the spawn on a new thread that confined itself first (made by
# the spawner thread, so it inherits the exec filter), or just runs it when nothing is confined.
Confined = Callable[[Callable[[], SpawnedChild]], SpawnedChild]


class TracedTree:
    def __init__(self, tracer: ExecTracer, call_id: str | None, unit: Unit) -> None:
        self.tracer = tracer
        self.unit = unit  # how its processes show their containment unit (marker, cgroup): attribution's last word
        self.execs = ExecTrace(tracer.max_entries)
        self.execs.call_id = call_id  # execs after its record was written are recorded under it (`exec:late`)

    async def place(self, start: Callable[[], T]) -> T:
        """Run `start` (which starts the tree's first process) on the spawner thread, which carries the filter."""
        return await self.tracer.spawn(self.execs, start, self.unit)

    async def start_command(
        self,
        argv: list[str],
        cwd: str | None,
        env: dict[str, str] | None,
        with_stdin: bool,
        merge_stderr: bool,
        spawning: Spawning,
        untraced: Callable[[], C],
        confined: Confined,
    ) -> SpawnedChild | C:
        """A one-shot command's first process, by posix_spawn on the spawner thread (Popen's vfork would deadlock
        under the filter, adr/0019) or, in readonly, on a confined spare the spawner thread made ahead (adr/0031);
        `untraced()` (Popen) where glibc lacks what that needs, said in the record."""
        if not SPAWN_READY:
            self.execs.state = f"untraced: {SPAWN_MISSING}"
            self.tracer.untraced_trees += 1
            return untraced()
        spare = self.tracer.spares() if self.tracer.spares is not None else None  # readonly: adr/0031
        # A readonly spare made in C (adr/0037 "Round 6"), or not readonly (nothing to confine: launch.py gives a
        # tracer spares exactly then): the spawn itself is the native spare's or the native spawner's (adr/0036),
        # handed over and waited for without the GIL; the rest below on this thread.
        native_spare = spare if isinstance(spare, NativeSpare) else None
        native = native_spare is not None or (
            self.tracer.spares is None and self.tracer.native_spawns and self.tracer.active
        )
        hand = None if isinstance(spare, NativeSpare) else spare

        def start() -> SpawnedChild:
            """On the spawner thread (or the spare; natively: on the event loop's thread, up to the spawn), while
            the event loop waits for it. The server's own environment (env None) gets the unit's marker for the
            spawn, as it does for Popen (containment/units.py), and is passed as it is: nothing copied or
            encoded."""
            threads: list[int] | None = [] if native else None
            with spawning(env, threads) as child_env:
                path = resolve_program(argv[0], child_env, cwd)

                def one() -> SpawnedChild:
                    if threads is not None:
                        where = (path, threads, native_spare)
                        return self._spawn_natively(argv, cwd, child_env, with_stdin, merge_stderr, *where)
                    if hand is not None:  # on the spare, confined already
                        return spawn(argv, cwd, child_env, with_stdin, merge_stderr, path)
                    return confined(lambda: spawn(argv, cwd, child_env, with_stdin, merge_stderr, path))

                if not self.tracer.first_unread:  # read by the service thread like any other exec
                    return one()
                # The server's own exec, the tree's first: recorded here (the service thread lets it go unread).
                # Recorded absolute, like every other entry (a relative path is the child's working directory's).
                self.first_exec(os.path.normpath(os.path.join(cwd or os.getcwd(), path)), argv, cwd)
                try:
                    child = one()
                except OSError as exc:
                    self._first_outcome(0, exc)
                    raise
                self._first_outcome(child.pid, None)
                return child

        try:
            return await self.tracer.spawn(self.execs, start, self.unit, hand, native)
        except OSError as exc:
            if exc.errno != errno.ENOSYS or self.tracer.active:
                raise
            # The tracer stopped while this tree's first exec waited (its listener closed): run it untraced.
            self.execs.state = f"untraced: {self.tracer.reason}"
            self.tracer.untraced_trees += 1
            return untraced()

    def _spawn_natively(
        self,
        argv: list[str],
        cwd: str | None,
        env: dict[str, str] | None,
        with_stdin: bool,
        merge_stderr: bool,
        path: str,
        threads: list[int],
        spare: NativeSpare | None,
    ) -> SpawnedChild:
        spawner = self.tracer.spawner
        assert spawner is not None
        token = self.tracer.lineage.token_of[self.execs]
        cgroup_threads = tuple(threads) if threads else (-1, -1, -1)
        if spare is None:
            return spawn_natively(spawner, token, argv, cwd, env, with_stdin, merge_stderr, path, cgroup_threads)
        with spawner.one_at_a_time:  # one tree's first exec expected at a time (the answerer has one slot)
            return spawn_natively(spare, token, argv, cwd, env, with_stdin, merge_stderr, path, cgroup_threads)

    def first_exec(self, path: str, argv: list[str], cwd: str | None) -> None:
        """The server's own exec, checked like any other: resolved (links, a `#!` chain: a relative interpreter is
        the call's working directory's), matched against EXEC_DENY, refused when its program cannot be determined
        while patterns are set."""
        deny = self.tracer.deny
        where = os.path.abspath(cwd or ".")
        if deny:
            found = resolve.locate(os.getpid(), path, cwd=where)
        else:
            found = resolve.locate_cached(os.getpid(), path, cwd=where)
        denied = False
        if deny and found.outcome == "ok":
            why = refusal(deny, found, argv, os.getpid(), cwd=where)
            denied = why is not None
            if why:
                found.refusal = f"{UNDETERMINED_REFUSED}: {why}"
        self._hold_first(path, argv, found, denied)

    def _hold_first(self, path: str, argv: list[str], found: resolve.Target, denied: bool) -> None:
        """Before the spawn: the exec about to happen (nothing of the tree runs yet, so it is first), held until
        its outcome is known (its entry is built then, off the spawn's path). PermissionError when EXEC_DENY
        refuses it (recorded as refused; nothing is spawned)."""
        tracer, trace = self.tracer, self.execs
        setid = found.setid and tracer.no_new_privs and not denied
        with tracer.lock:
            tracer.count_exec("denied" if denied else "ok")
            trace.first = [time.monotonic(), 0, os.getpid(), path, argv, found, "denied" if denied else "ok", setid]
            if denied:
                trace.flush_first()
                raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), path)

    def _first_outcome(self, pid: int, error: OSError | None) -> None:
        """After the spawn: the first exec's pid, or why it failed (posix_spawn said: nothing of the tree ran)."""
        with self.tracer.lock:
            first = self.execs.first
            if first is not None and error is not None:
                first[6] = errno.errorcode.get(error.errno or 0, "error")
            elif first is not None:
                first[1] = pid

    def raise_if_refused(self) -> None:
        """After the start failed with EPERM: ExecDenied when RELAY_SHELL_EXEC_DENY refused every exec of the tree,
        its first program included (nothing ran)."""
        execs = self.execs
        if execs.denied and execs.count == execs.denied:
            shown = execs.denied_execs[0] if execs.denied_execs else "the program"
            message = f"{shown} was refused by RELAY_SHELL_EXEC_DENY (EPERM); nothing ran"
            raise ToolError("ExecDenied", message) from None

    def finish_into(self, plan: Plan) -> None:
        """A call's end: what the tree executed goes into its end record; later execs (background jobs) are late."""
        _into(plan, self.tracer.finish(self.execs), self.execs)

    def snapshot_into(self, plan: Plan) -> None:
        """shell_spawn: what ran until the first output settled. Execs after session:end are recorded under this
        call."""
        self.execs.call_id = plan.call_id
        _into(plan, self.tracer.snapshot(self.execs), self.execs)

    @contextmanager
    def window_into(self, plan: Plan) -> Iterator[None]:
        """session_send: the programs the session started while the send is handled."""
        window = ExecTrace(self.execs.max_entries)
        self.tracer.open_window(self.execs, window)
        try:
            yield
        finally:
            # Under the lock the service thread holds while it records, the waiting batch built first: an exec
            # answered before the window closed is in it.
            _into(plan, self.tracer.detach(self.execs, window), window)

    def end_fields(self) -> dict[str, Any]:
        """session:end: the summary of the session's whole tree (what it still executes is late now)."""
        return {"execs": self.tracer.finish(self.execs)}


def _into(plan: Plan, execs: dict[str, Any], trace: ExecTrace) -> None:
    plan.record_fields = {**(plan.record_fields or {}), "execs": execs}
    plan.notes.extend(refusal_notes(trace))


def refusal_notes(trace: ExecTrace) -> list[str]:
    """What a call's result says about its tree: the programs RELAY_SHELL_EXEC_DENY refused, and set-user-ID
    programs that ran without their privilege."""
    notes = [f"exec refused by RELAY_SHELL_EXEC_DENY (EPERM): {text}" for text in trace.denied_execs]
    if trace.denied > len(trace.denied_execs):
        notes.append(f"{trace.denied - len(trace.denied_execs)} more execs refused by RELAY_SHELL_EXEC_DENY")
    if trace.setid_dropped:
        notes.append(
            f"{trace.setid_dropped} set-user-ID program(s) ran without their privilege: the tree runs with "
            "no_new_privs (readonly's confinement sets it; elsewhere the exec trace needs it here, and "
            "RELAY_SHELL_EXEC_TRACE=off restores it)"
        )
    return notes
