"""The launch point: every process tree a call or a session starts is started here, and the processes the server
starts for itself are announced here. Executors ask the Launcher for a ProcessTree per call (local/plans.py) or
local PTY session (sessions/plans.py) and start its first process through it (local/process.py,
sessions/local_pty.py); they never assemble units, traces and spawner threads themselves.

A tree starts under what the server's settings turned on, each a null object when off, so no executor asks:
- **containment** (adr/0015, containment/): the tree's unit holds every process it starts, escapes included, and
  ends them as a whole; with RELAY_SHELL_CONTAINMENT=off the process group alone (`NoUnit`).
- **the exec trace** (adr/0019, trace/): the tree starts on a spawner thread carrying the exec filter, and what it
  executed goes into the call's records (`TracedTree`); with RELAY_SHELL_EXEC_TRACE=off, or the trace unavailable
  here, `UNTRACED`: started on the calling thread, no `execs` in the records. Nothing under trace/ is imported
  while the trace is off; with it on, a copy of the server finds at startup whether it works, and the first traced
  tree starts the tracer (launch_trace_probe.py: an idle server holds none of it).
- **readonly confinement** (adr/0024, confine/): in readonly mode every tree runs in a Landlock domain of its
  own with no_new_privs, a syscall filter and root's capabilities cut down, inherited by every descendant. A
  one-shot command is spawned in its unit on a thread confined first (a spare made ahead, by the trace's spawner
  thread when traced: adr/0031), a terminal's child confines itself before its exec (`prepare_child`), a
  ProxyCommand runs through `python -m relay_shell.confine.run` (`helper_argv`); their records say so
  (`confinement`). Outside readonly, or where the kernel has no Landlock, `Unconfined`: nothing is confined
  (nothing under confine/ is imported); in readonly everything says `classifier-only` (launch_readonly.py, which
  also says what a kernel below Landlock ABI 6 leaves unenforced).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import IO, TYPE_CHECKING, Any, Literal, Protocol, TypeVar

import anyio

from relay_shell.containment.units import Containment, NoUnit, Unit
from relay_shell.launch_readonly import UNCONFINED, Unconfined, enforced_by, readonly_warnings, start_confinement
from relay_shell.launch_trace_default import trace_default
from relay_shell.launch_trace_probe import TraceProbed, probed_trace, start_tracer
from relay_shell.plan import Plan
from relay_shell.settings.model import Settings

if TYPE_CHECKING:
    from relay_shell.confine.confinement import Confinement
    from relay_shell.metrics import Metrics
    from relay_shell.trace.native import NativeSpare
    from relay_shell.trace.tracer import ExecTracer

T = TypeVar("T")
LateWriter = Callable[[str | None, dict[str, Any]], None]  # writes an `exec:late` record: (call_id, execs)
Confined = Callable[[Callable[[], Any]], Any]  # a confinement's run_confined: the spawn on a confined thread


class Spawning(Protocol):
    """A unit's `spawning` (containment/units.py)."""

    def __call__(
        self, env: dict[str, str] | None, elsewhere: list[int] | None = None
    ) -> AbstractContextManager[dict[str, str] | None]: ...


class Child(Protocol):
    """A one-shot command's first process: subprocess.Popen, or trace/spawn.py's SpawnedChild under the trace."""

    pid: int
    stdin: IO[bytes] | None
    stdout: IO[bytes] | None
    stderr: IO[bytes] | None
    returncode: int | None

    def wait(self, timeout: float | None = None) -> int: ...


class Started(Protocol):
    """A terminal's program (ptyprocess's PtyProcess)."""

    pid: int


S = TypeVar("S", bound=Started)


class TreeTrace(Protocol):
    """A tree's exec trace: trace/tree.py's TracedTree, or UNTRACED."""

    async def place(self, start: Callable[[], T]) -> T: ...

    async def start_command(
        self,
        argv: list[str],
        cwd: str | None,
        env: dict[str, str] | None,
        with_stdin: bool,
        merge_stderr: bool,
        spawning: Spawning,
        untraced: Callable[[], Child],
        confined: Confined,
    ) -> Child: ...

    def raise_if_refused(self) -> None: ...

    def finish_into(self, plan: Plan) -> None: ...

    def snapshot_into(self, plan: Plan) -> None: ...

    def window_into(self, plan: Plan) -> AbstractContextManager[None]: ...

    def end_fields(self) -> dict[str, Any]: ...


class Untraced:
    """A tree without the exec trace (off, unavailable here, or a remote terminal): started on the calling
    thread, and its records carry no `execs`."""

    async def place(self, start: Callable[[], T]) -> T:
        return start()

    async def start_command(
        self,
        argv: list[str],
        cwd: str | None,
        env: dict[str, str] | None,
        with_stdin: bool,
        merge_stderr: bool,
        spawning: Spawning,
        untraced: Callable[[], Child],
        confined: Confined,
    ) -> Child:
        return untraced()  # confined there (_popen)

    def raise_if_refused(self) -> None:
        pass

    def finish_into(self, plan: Plan) -> None:
        pass

    def snapshot_into(self, plan: Plan) -> None:
        pass

    def window_into(self, plan: Plan) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    def end_fields(self) -> dict[str, Any]:
        return {}


UNTRACED = Untraced()


class TraceOff:
    """The exec trace off (RELAY_SHELL_EXEC_TRACE=off, or `auto` where tracing would take something from the
    commands): every tree is UNTRACED; server_info says so, and why, as the tracer would."""

    state = "off"
    no_new_privs = False
    active: Literal[False] = False

    def __init__(self, reason: str, deny_patterns: int, entries_kept: int) -> None:
        self.reason = reason
        self.deny_patterns = deny_patterns
        self.entries_kept = entries_kept

    def flush_late(self) -> None:
        pass

    def status(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "reason": self.reason,
            "no_new_privs": self.no_new_privs,
            "deny_patterns": self.deny_patterns,
            "entries_kept": self.entries_kept,
            "execs_traced": 0,
            "execs_denied": 0,
            "late_execs": 0,
            "unattributed_execs": 0,
            "untraced_trees": 0,
            "read_faults": 0,
            "trees_open": 0,
            "answerer": f"none (the trace is {self.state})",
            "execs_answered_compiled": 0,
        }


class TreeRecords(Protocol):
    """What a tree's executor writes into its records: the trace's fields (`execs`) and the confinement's."""

    def finish_into(self, plan: Plan) -> None: ...

    def snapshot_into(self, plan: Plan) -> None: ...

    def window_into(self, plan: Plan) -> AbstractContextManager[None]: ...

    def end_fields(self) -> dict[str, Any]: ...


class ConfinedRecords:
    """A confined tree's records: each the trace fills also says how the tree was confined (`confinement`:
    `landlock ABI N`, or `classifier-only` in a readonly mode the kernel cannot enforce)."""

    def __init__(self, trace: TreeTrace, fields: dict[str, Any]) -> None:
        self.trace = trace
        self.fields = fields

    def finish_into(self, plan: Plan) -> None:
        self._into(plan)
        self.trace.finish_into(plan)

    def snapshot_into(self, plan: Plan) -> None:
        self._into(plan)
        self.trace.snapshot_into(plan)

    def window_into(self, plan: Plan) -> AbstractContextManager[None]:
        self._into(plan)
        return self.trace.window_into(plan)

    def end_fields(self) -> dict[str, Any]:
        return {**self.fields, **self.trace.end_fields()}

    def _into(self, plan: Plan) -> None:
        plan.record_fields = {**(plan.record_fields or {}), **self.fields}


class ProcessTree:
    """The processes of one call or one session: the unit that holds them, the trace that records them and the
    confinement they run under."""

    def __init__(self, unit: Unit | NoUnit, trace: TreeTrace, confinement: Confinement | Unconfined) -> None:
        self.unit = unit
        self.confinement = confinement
        self.tracing = trace  # starts the tree (launch.py only)
        fields = confinement.record_fields()
        self.trace: TreeRecords = ConfinedRecords(trace, fields) if fields else trace  # what executors record

    async def start_command(
        self, argv: list[str], cwd: str | None, env: dict[str, str] | None, with_stdin: bool, merge_stderr: bool
    ) -> Child:
        """A one-shot command's first process, in a new session, with pipes for stdout (and stderr unless merged)
        and stdin (or /dev/null); `env` None inherits the server's. OSError as Popen raises it when the program
        cannot run; ExecDenied when RELAY_SHELL_EXEC_DENY refused it (nothing ran)."""
        try:
            child = await self.tracing.start_command(
                argv,
                cwd,
                env,
                with_stdin,
                merge_stderr,
                self.unit.spawning,
                lambda: _popen(argv, cwd, env, with_stdin, merge_stderr, self.unit, self.confinement),
                self.confinement.run_confined,
            )
        except PermissionError:
            self.tracing.raise_if_refused()
            raise
        self.confinement.started_child()
        self.unit.started(child.pid)
        return child

    async def start_terminal(self, spawn: Callable[[dict[str, str], Callable[[], None]], S], env: dict[str, str]) -> S:
        """A terminal's program, started by `spawn` with the environment the tree gives it and what its child
        must run between fork and exec (readonly: confine itself); traced, on the spawner thread (which lives as
        long as the server: the program's parent-death signal fires when the thread that forked it ends). Whatever
        fails, nothing of the tree is left; a PermissionError is ExecDenied when RELAY_SHELL_EXEC_DENY refused the
        program (ptyprocess reports a refused exec as a plain OSError with errno EPERM, which passes through as it
        is)."""

        def start() -> S:
            with self.unit.spawning(env) as child_env:
                assert child_env is not None
                return spawn(child_env, self.confinement.prepare_child)

        try:
            process = await self.tracing.place(start)
        except PermissionError:
            self.release()
            self.tracing.raise_if_refused()
            raise
        except BaseException:
            self.release()
            raise
        self.confinement.started_child()
        self.unit.started(process.pid)
        return process

    def signal_all(self, signals: Iterable[int]) -> set[int]:
        """Each signal to every process of the unit, escapes included (containment off: none; the owner signals
        the process group). Returns them."""
        return self.unit.send(signals)

    async def kill(self, grace: float) -> None:
        """SIGKILL every process of the unit until none runs (or `grace` passed)."""
        await self.unit.kill(grace)

    def release(self) -> None:
        """The leader ended and was reaped (or never started): a unit whose background jobs still run stays until
        they end or the server stops."""
        self.unit.release()


class Launcher:
    """A server's launch point: the containment chosen at its start, its exec trace (or TraceOff; or TraceProbed,
    replaced by the tracer at the first traced tree) and its readonly confinement (or Unconfined)."""

    def __init__(
        self,
        containment: Containment,
        tracer: ExecTracer | TraceOff | TraceProbed,
        confinement: Confinement | Unconfined = UNCONFINED,
        setting: str = "on",
    ) -> None:
        self.containment = containment
        self.tracer = tracer
        self.confinement = confinement
        self.setting = setting  # RELAY_SHELL_EXEC_TRACE: auto, on or off

    def call_tree(self, call_id: str | None) -> ProcessTree:
        """A one-shot command's or script's tree. Its unit is named after the call, so its processes (their
        marker, their cgroup) lead to the call's audit records, after a restart too; its execs after the end
        record (background jobs) go into `exec:late` records under the call's id."""
        unit = self.containment.open_unit("call", call_id)
        return ProcessTree(unit, self._trace(call_id, unit), self.confinement)

    def session_tree(self, session_id: str) -> ProcessTree:
        """A local PTY session's tree, its unit named after the session. Its trace learns the id of the call that
        spawned it from shell_spawn's record (`snapshot_into`)."""
        unit = self.containment.open_unit("session", session_id)
        return ProcessTree(unit, self._trace(None, unit), self.confinement)

    def _trace(self, call_id: str | None, unit: Unit | NoUnit) -> TreeTrace:
        tracer = self.tracer
        if isinstance(tracer, TraceProbed) and tracer.state == "on":  # the first traced tree starts the tracer
            tracer = self.tracer = tracer.start()
        if tracer.active:  # on: not off, nor unavailable here, nor stopped since
            from relay_shell.trace.lineage import Unit as ShownUnit  # trace/ is loaded only with the trace on
            from relay_shell.trace.tree import TracedTree

            # How the tree's processes show their unit, for the exec trace's attribution (trace/lineage.py).
            shown = ShownUnit()
            if isinstance(unit, Unit):
                shown.marker = unit.marker
                tree = self.containment.tree
                if unit.cgroup is not None and tree is not None:
                    shown.cgroup = f"{tree.directory.name}/{unit.cgroup.name}"
            return TracedTree(tracer, call_id, shown)
        return UNTRACED

    def helper_argv(self, argv: list[str]) -> list[str]:
        """The command line of a program the server starts for itself on a call's behalf (an ssh_config
        ProxyCommand): in readonly mode it runs confined like a call's tree."""
        return self.confinement.helper_argv(argv)

    def helper_started(self, pid: int) -> None:
        """The server started `pid` for itself, outside every unit (an ssh_config ProxyCommand, told by the SSH
        pool as soon as it runs): containment never takes it for an escape."""
        self.containment.helper_started(pid)

    async def maintain_forever(self) -> None:
        await self.containment.maintain_forever()

    def flush_late(self) -> None:
        """The late execs not yet written, as `exec:late` records (before the trees are ended at shutdown)."""
        self.tracer.flush_late()

    async def shutdown(self, grace: float) -> None:
        """The server stops, its sessions and SSH connections closed: end what the calls left running (background
        jobs, escapes), then write the late execs not yet written (their trees are gone now)."""
        await self.containment.shutdown(grace)
        await anyio.sleep(0)  # those the trace's thread handed to the loop first
        self.tracer.flush_late()

    def banner(self) -> str:
        """The startup banner's part for what processes start under."""
        chosen = " (auto)" if self.setting == "auto" and self.tracer.state != "unavailable" else ""
        banner = f"containment {self.containment.mode} | exec trace {self.tracer.state}{chosen}"
        if self.confinement.state != "off":
            banner += f" | readonly enforced by {enforced_by(self.confinement)}"
        return banner

    def banner_notes(self) -> list[str]:
        """Lines said once at startup after the banner: why the trace is unavailable, why `auto` left it off, what
        it costs a server that is not root (no_new_privs), and readonly left to the classifier alone."""
        notes = []
        if self.tracer.state == "unavailable":
            notes.append(f"exec trace unavailable: {self.tracer.reason}")
        elif self.tracer.state == "off" and self.setting == "auto":
            notes.append(f"exec trace off: {self.tracer.reason}")
        elif self.tracer.no_new_privs:
            notes.append(f"exec trace: {self.tracer.reason}")
        if self.confinement.state == "classifier-only":
            notes.append(
                f"WARNING: readonly is NOT enforced by the kernel here ({self.confinement.reason}): the classifier "
                "alone decides what runs; RELAY_SHELL_READONLY_ENFORCEMENT=required refuses to start instead"
            )
        notes += readonly_warnings(self.confinement)
        return notes

    def trace_status(self) -> dict[str, Any]:
        """server_info's `exec_trace`: the tracer's status and the setting it came from."""
        return {"setting": self.setting, **self.tracer.status()}


def start_launcher(settings: Settings, containment: Containment, metrics: Metrics, on_late: LateWriter) -> Launcher:
    """The server's launcher: the containment chosen at startup (cli.serve) and the exec trace the settings ask
    for (`auto`: trace_default) and the readonly confinement the mode asks for. `on_late` writes an `exec:late`
    record (through the runner; trace/ imports nothing above it)."""
    confinement = start_confinement(settings, metrics)
    setting = settings.trace.exec_trace
    deny_patterns = settings.trace.exec_deny
    wanted, reason = trace_default(setting, settings.policy.policy_mode)
    if not wanted:
        trace_off = TraceOff(reason, len(deny_patterns), settings.trace.exec_trace_entries)
        return Launcher(containment, trace_off, confinement, setting)
    probed = probed_trace(settings, metrics, on_late, reason)  # what a copy of the server found (serve.py)
    if probed is not None and isinstance(confinement, Unconfined):
        return Launcher(containment, probed, confinement, setting)  # the first traced tree starts the tracer
    tracer = start_tracer(settings, metrics, on_late, reason)
    if tracer.spawner is not None and tracer.active and not isinstance(confinement, Unconfined):
        answerer = tracer.answerer if tracer.native_spawns else None  # native spares' first exec let go by it
        tracer.spares = confinement.spare_traces(tracer.spawner.run, answerer)  # their creator made by the spawner
    return Launcher(containment, tracer, confinement, setting)


def _popen(
    argv: list[str],
    cwd: str | None,
    env: dict[str, str] | None,
    with_stdin: bool,
    merge_stderr: bool,
    unit: Unit | NoUnit,
    confinement: Confinement | Unconfined,
) -> Child:
    """An untraced command's first process, on the calling thread (readonly: a spare confined thread, which
    enters the unit itself, so the calling thread does not: adr/0037; made in C where it can be, `natively`)."""

    def start() -> Child:
        with unit.spawning(env) as child_env:
            # Raises OSError (missing program, E2BIG for a huge command line, bad cwd): the runner reports it.
            return subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if with_stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                cwd=cwd,
                env=child_env,
                start_new_session=True,
                close_fds=True,
            )

    def natively(spare: NativeSpare) -> Child:
        """On a spare made in C (adr/0037 "Round 6"): the spawn submitted to it, which enters the unit itself."""
        from relay_shell.trace.spawn import resolve_program, spawn_natively

        threads: list[int] = []
        with unit.spawning(env, threads) as child_env:
            path = resolve_program(argv[0], child_env, cwd)
            cgroup_threads = (threads[0], threads[1]) if threads else (-1, -1)
            return spawn_natively(spare, 0, argv, cwd, child_env, with_stdin, merge_stderr, path, cgroup_threads)

    return confinement.run_on_spare(start, natively)
