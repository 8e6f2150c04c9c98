"""Whether the exec trace works here, found at startup by a copy of the server, so that the banner, the
`server:start` record and server_info say it before any call while the server itself holds nothing of trace/
until its first traced tree (adr/0030 "Round 7: idle RSS").

The copy is a fork taken as soon as the settings are read (`start_probe`, serve.py: one thread, nothing open but
stdio, ~30 MiB to copy). It starts the tracer exactly as the server would (trace/tracer.py `ExecTracer`: the
spawner thread installing the exec filter on itself, the kernel's notification sizes, the listener watched, the
compiled answerer and native spawner loaded), writes what the tracer says (`status()`) into a pipe and ends
(`os._exit`: nothing of the server's runs there after). It runs no program, and it has ended before the launcher
is assembled, which waits for its answer (`probed_trace`). Same kernel, credentials, capabilities, inherited
seccomp filters and no_new_privs as the server's: what stops the filter or the answerer there stops it here.

The launcher then holds a `TraceProbed` saying what the copy found; the first traced tree starts the tracer
itself (`TraceProbed.start`): an idle server keeps none of the trace's code, threads or tables (0.6-0.9 MiB,
adr/0030 Round 6), and the first traced call pays for loading them (a few ms, adr/0030 Round 7). Should the
tracer fail then where the copy's did not, it says so from then on (`unavailable` and why, in server_info) and the
trees run untraced, as when the tracer stops later (adr/0027).

Where the copy gives no answer (fork failed, it died, or it took PROBE_WAIT seconds), and in readonly mode, whose
confined spares the spawner thread makes ahead (adr/0031), the launcher starts the tracer at startup, as before."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import orjson

from relay_shell.launch_trace_default import trace_default

if TYPE_CHECKING:
    from relay_shell.metrics import Metrics
    from relay_shell.settings.model import Settings
    from relay_shell.trace.tracer import ExecTracer

PROBE_WAIT = 10.0  # seconds the launcher waits for the copy's answer, at most (it takes ~10-30 ms)
LateWriter = Callable[[str | None, dict[str, Any]], None]


@dataclass
class _Probe:
    pid: int
    answer: int  # the pipe's reading end


_started: list[_Probe] = []  # the copy this server started (serve.py), until the launcher takes its answer


def start_probe(settings: Settings) -> None:
    """Fork the copy that finds whether the exec trace works, when the settings want it and the mode is not
    readonly. Called once, with nothing but the main thread running."""
    wanted, _ = trace_default(settings.trace.exec_trace, settings.policy.policy_mode)
    if not wanted or settings.policy.policy_mode == "readonly":
        return
    if len(os.listdir("/proc/self/task")) != 1:  # a fork beside another thread could copy a lock it holds
        return
    answer, told = os.pipe()
    try:
        pid = os.fork()
    except OSError:  # no copy: the launcher starts the tracer itself
        os.close(answer)
        os.close(told)
        return
    if pid == 0:
        try:
            os.close(answer)
            os.write(told, _found(settings))
        finally:
            os._exit(0)
    os.close(told)
    _started.append(_Probe(pid, answer))


def _found(settings: Settings) -> bytes:
    """In the copy: the tracer started as the server would start it, and what it says about itself."""
    try:
        from relay_shell.trace.tracer import ExecTracer

        tracer = ExecTracer(settings.trace.exec_deny, settings.trace.exec_trace_entries)
        return orjson.dumps(tracer.status())
    except BaseException:  # no answer: the server starts the tracer itself and meets the failure there
        return b""


def _answer(probe: _Probe) -> dict[str, Any] | None:
    """The copy's answer (None: none within PROBE_WAIT), the copy reaped."""
    chunks = []
    deadline = time.monotonic() + PROBE_WAIT
    try:
        while (left := deadline - time.monotonic()) > 0 and select.select([probe.answer], [], [], left)[0]:
            chunk = os.read(probe.answer, 65536)
            if not chunk:
                break
            chunks.append(chunk)
        else:
            with contextlib.suppress(OSError):
                os.kill(probe.pid, signal.SIGKILL)
    finally:
        os.close(probe.answer)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(probe.pid, 0)
    with contextlib.suppress(ValueError):
        report = orjson.loads(b"".join(chunks))
        if isinstance(report, dict) and report.get("state") in ("on", "unavailable"):
            return report
    return None


def start_tracer(settings: Settings, metrics: Metrics | None, on_late: LateWriter, default_reason: str) -> ExecTracer:
    """The server's exec tracer (trace/tracer.py), started now."""
    from relay_shell.trace.tracer import ExecTracer

    tracer = ExecTracer(settings.trace.exec_deny, settings.trace.exec_trace_entries, metrics)
    tracer.on_late = on_late
    if settings.trace.exec_trace == "auto" and tracer.active:
        tracer.reason = f"{default_reason}; {tracer.reason}"
    return tracer


class TraceProbed:
    """The exec trace as the copy found it, not started yet: `on` (the first traced tree calls `start`) or
    `unavailable` (never started: every tree untraced). Says what the tracer would say before any call."""

    active: Literal[False] = False  # no tree is traced by this object: the launcher starts the tracer first

    def __init__(
        self,
        report: dict[str, Any],
        settings: Settings,
        metrics: Metrics | None,
        on_late: LateWriter,
        default_reason: str,
    ) -> None:
        self.report = report
        self.state: str = report["state"]
        self.reason: str = report["reason"]
        if settings.trace.exec_trace == "auto" and self.state == "on":
            self.reason = f"{default_reason}; {self.reason}"
        self.no_new_privs: bool = report["no_new_privs"]
        self.settings = settings
        self.metrics = metrics
        self.on_late = on_late
        self.default_reason = default_reason

    def start(self) -> ExecTracer:
        return start_tracer(self.settings, self.metrics, self.on_late, self.default_reason)

    def flush_late(self) -> None:
        pass

    def status(self) -> dict[str, Any]:
        return {**self.report, "reason": self.reason}


def probed_trace(
    settings: Settings, metrics: Metrics | None, on_late: LateWriter, default_reason: str
) -> TraceProbed | None:
    """What the copy this server started found (None: no copy was started, or it gave no answer)."""
    if not _started:
        return None
    report = _answer(_started.pop())
    if report is None:
        return None
    return TraceProbed(report, settings, metrics, on_late, default_reason)
