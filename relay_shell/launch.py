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
  while the trace is off.
- Next (issue 26), **readonly confinement** (Landlock and no_new_privs, inherited by every descendant) joins them
  here: applied where a tree's first process is placed (`ProcessTree.start_command`, `start_terminal`, on the
  thread that spawns it), told to the banner (`Launcher.banner`), a null object outside readonly mode.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import IO, TYPE_CHECKING, Any, Literal, Protocol, TypeVar

import anyio

from relay_shell.containment.units import Containment, NoUnit, Unit
from relay_shell.plan import Plan
from relay_shell.settings.model import Settings

if TYPE_CHECKING:
    from relay_shell.metrics import Metrics
    from relay_shell.trace.tracer import ExecTracer

T = TypeVar("T")
_CAP_SYS_ADMIN = 21
Spawning = Callable[[dict[str, str] | None], AbstractContextManager[dict[str, str] | None]]  # a unit's `spawning`
LateWriter = Callable[[str | None, dict[str, Any]], None]  # writes an `exec:late` record: (call_id, execs)


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
    ) -> Child:
        return untraced()

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
        }


class ProcessTree:
    """The processes of one call or one session: the unit that holds them and the trace that records them."""

    def __init__(self, unit: Unit | NoUnit, trace: TreeTrace) -> None:
        self.unit = unit
        self.trace = trace

    async def start_command(
        self, argv: list[str], cwd: str | None, env: dict[str, str] | None, with_stdin: bool, merge_stderr: bool
    ) -> Child:
        """A one-shot command's first process, in a new session, with pipes for stdout (and stderr unless merged)
        and stdin (or /dev/null); `env` None inherits the server's. OSError as Popen raises it when the program
        cannot run; ExecDenied when RELAY_SHELL_EXEC_DENY refused it (nothing ran)."""
        try:
            child = await self.trace.start_command(
                argv,
                cwd,
                env,
                with_stdin,
                merge_stderr,
                self.unit.spawning,
                lambda: _popen(argv, cwd, env, with_stdin, merge_stderr, self.unit),
            )
        except PermissionError:
            self.trace.raise_if_refused()
            raise
        self.unit.started(child.pid)
        return child

    async def start_terminal(self, spawn: Callable[[dict[str, str]], S], env: dict[str, str]) -> S:
        """A terminal's program, started by `spawn` with the environment the tree gives it; traced, on the spawner
        thread (which lives as long as the server: the program's parent-death signal fires when the thread that
        forked it ends). Whatever fails, nothing of the tree is left; a PermissionError is
        ExecDenied when RELAY_SHELL_EXEC_DENY refused the program (ptyprocess reports a refused exec as a plain
        OSError with errno EPERM, which passes through as it is)."""

        def start() -> S:
            with self.unit.spawning(env) as child_env:
                assert child_env is not None
                return spawn(child_env)

        try:
            process = await self.trace.place(start)
        except PermissionError:
            self.release()
            self.trace.raise_if_refused()
            raise
        except BaseException:
            self.release()
            raise
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
    """A server's launch point: the containment chosen at its start and its exec trace (or TraceOff)."""

    def __init__(self, containment: Containment, tracer: ExecTracer | TraceOff, setting: str = "on") -> None:
        self.containment = containment
        self.tracer = tracer
        self.setting = setting  # RELAY_SHELL_EXEC_TRACE: auto, on or off

    def call_tree(self, call_id: str | None) -> ProcessTree:
        """A one-shot command's or script's tree. Its unit is named after the call, so its processes (their
        marker, their cgroup) lead to the call's audit records, after a restart too; its execs after the end
        record (background jobs) go into `exec:late` records under the call's id."""
        unit = self.containment.open_unit("call", call_id)
        return ProcessTree(unit, self._trace(call_id, unit))

    def session_tree(self, session_id: str) -> ProcessTree:
        """A local PTY session's tree, its unit named after the session. Its trace learns the id of the call that
        spawned it from shell_spawn's record (`snapshot_into`)."""
        unit = self.containment.open_unit("session", session_id)
        return ProcessTree(unit, self._trace(None, unit))

    def _trace(self, call_id: str | None, unit: Unit | NoUnit) -> TreeTrace:
        tracer = self.tracer
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
        return f"containment {self.containment.mode} | exec trace {self.tracer.state}{chosen}"

    def banner_notes(self) -> list[str]:
        """Lines said once at startup after the banner: why the trace is unavailable, why `auto` left it off,
        and what it costs a server that is not root (no_new_privs)."""
        if self.tracer.state == "unavailable":
            return [f"exec trace unavailable: {self.tracer.reason}"]
        if self.tracer.state == "off" and self.setting == "auto":
            return [f"exec trace off: {self.tracer.reason}"]
        if self.tracer.no_new_privs:
            return [f"exec trace: {self.tracer.reason}"]
        return []

    def trace_status(self) -> dict[str, Any]:
        """server_info's `exec_trace`: the tracer's status and the setting it came from."""
        return {"setting": self.setting, **self.tracer.status()}


def start_launcher(settings: Settings, containment: Containment, metrics: Metrics, on_late: LateWriter) -> Launcher:
    """The server's launcher: the containment chosen at startup (cli.serve) and the exec trace the settings ask
    for (`auto`: trace_default). `on_late` writes an `exec:late` record (through the runner; trace/ imports
    nothing above it)."""
    setting = settings.trace.exec_trace
    deny_patterns = settings.trace.exec_deny
    wanted, reason = trace_default(setting, settings.policy.policy_mode)
    if not wanted:
        return Launcher(containment, TraceOff(reason, len(deny_patterns), settings.trace.exec_trace_entries), setting)
    from relay_shell.trace.tracer import ExecTracer

    tracer = ExecTracer(deny_patterns, settings.trace.exec_trace_entries, metrics)
    tracer.on_late = on_late
    if setting == "auto" and tracer.active:
        tracer.reason = f"{reason}; {tracer.reason}"
    return Launcher(containment, tracer, setting)


def trace_default(setting: str, mode: str) -> tuple[bool, str]:
    """Whether the exec trace runs, and why (adr/0027). `auto` traces wherever tracing takes nothing from the
    commands: a server with CAP_SYS_ADMIN (root) installs the filter without no_new_privs; a server that runs with
    no_new_privs already (systemd's NoNewPrivileges=yes) loses nothing more; in readonly mode every tree gets
    no_new_privs anyway (adr/0024). Elsewhere (a user's open or guarded server) the filter needs no_new_privs on
    the traced trees, which takes set-user-ID and file-capability programs (sudo, su, passwd) from their commands:
    an upgrade must not do that silently, so `auto` leaves the trace off there and says so; `on` traces anyway."""
    if setting != "auto":
        return setting == "on", f"RELAY_SHELL_EXEC_TRACE={setting}"
    capabilities, no_new_privs = _own_privileges()
    if capabilities >> _CAP_SYS_ADMIN & 1:
        return True, "auto: the server has CAP_SYS_ADMIN, so tracing needs no no_new_privs"
    if no_new_privs:
        return True, "auto: the server runs with no_new_privs already, so tracing takes nothing more"
    if mode == "readonly":
        return True, "auto: readonly mode gives every tree no_new_privs anyway"
    return False, (
        "auto: not root, and tracing here would need no_new_privs on every command, which takes set-user-ID "
        "programs (sudo, su) from them; RELAY_SHELL_EXEC_TRACE=on traces anyway"
    )


def _own_privileges() -> tuple[int, bool]:
    """The server's effective capabilities and its no_new_privs flag, from /proc/self/status."""
    capabilities, no_new_privs = 0, False
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                capabilities = int(line.split()[1], 16)
            elif line.startswith("NoNewPrivs:"):
                no_new_privs = line.split()[1] == "1"
    return capabilities, no_new_privs


def _popen(
    argv: list[str],
    cwd: str | None,
    env: dict[str, str] | None,
    with_stdin: bool,
    merge_stderr: bool,
    unit: Unit | NoUnit,
) -> subprocess.Popen[bytes]:
    """An untraced command's first process, on the calling thread."""
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
