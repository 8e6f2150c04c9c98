"""One-shot local processes: own session and process group, a containment unit, bounded capture, kill
escalation.

The child starts a new session (so it is its own process-group leader with no controlling terminal) through
the launch point (launch.py): inside its containment unit, which also holds what leaves the group (setsid,
double forks, daemons), and under the exec trace when it is on. On timeout or cancellation the group and the
unit get SIGTERM, a grace period, then SIGKILL, so no descendant survives, escaped or not.

Exit is observed through a pidfd, not through the pipes: asyncio's `Process.wait()` only returns once every
pipe is closed, so `sleep 600 & echo started` would hold the call for ten minutes. Here, after the command
exits, output is drained only while it keeps arriving (DRAIN_QUIET), for at most DRAIN_MAX seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import subprocess
import time
from dataclasses import dataclass

import anyio

from relay_shell.capture import BoundedCapture, CapturedText
from relay_shell.launch import Child, ProcessTree
from relay_shell.plan import ProgressFn

READ_CHUNK = 1024 * 1024
PIPE_SIZE = 1024 * 1024  # fewer wake-ups for chatty commands; the kernel caps it at pipe-max-size
DRAIN_QUIET = 0.05  # stop draining after this long without output once the command has exited
DRAIN_MAX = 1.0  # and never drain longer than this
PROGRESS_TICK = 1.0


@dataclass
class ProcessOutcome:
    exit_code: int | None
    signal: str | None
    timed_out: bool
    stdout: CapturedText
    stderr: CapturedText | None


class _Pipe:
    """Non-blocking reads from one pipe into a capture, driven by the event loop."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, fd: int, capture: BoundedCapture, activity: list[float]
    ) -> None:
        self.loop = loop
        self.fd = fd
        self.capture = capture
        self.activity = activity
        self.closed: asyncio.Future[None] = loop.create_future()
        os.set_blocking(fd, False)
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        loop.add_reader(fd, self.on_readable)

    def on_readable(self) -> None:
        try:
            chunk = os.read(self.fd, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.stop()
            return
        self.capture.feed(chunk)
        self.activity[0] = time.monotonic()

    def stop(self) -> None:
        self.loop.remove_reader(self.fd)
        if not self.closed.done():
            self.closed.set_result(None)


async def run_process(
    argv: list[str],
    *,
    tree: ProcessTree,  # the call's processes: their unit and exec trace (launch.py)
    cwd: str | None,
    env: dict[str, str] | None,  # None: inherit the server's environment
    stdin: bytes | None,
    merge_stderr: bool,
    timeout: float,
    budget: int,
    kill_grace: float,
    progress: ProgressFn,
) -> ProcessOutcome:
    try:
        return await _run(tree, argv, cwd, env, stdin, merge_stderr, timeout, budget, kill_grace, progress)
    finally:
        tree.release()  # after the leader was reaped; a unit whose background jobs run on stays


async def _run(
    tree: ProcessTree,
    argv: list[str],
    cwd: str | None,
    env: dict[str, str] | None,
    stdin: bytes | None,
    merge_stderr: bool,
    timeout: float,
    budget: int,
    kill_grace: float,
    progress: ProgressFn,
) -> ProcessOutcome:
    loop = asyncio.get_running_loop()
    stdout_capture = BoundedCapture(budget if merge_stderr else budget - budget // 4)
    stderr_capture = None if merge_stderr else BoundedCapture(budget // 4)
    process = await tree.start_command(argv, cwd, env, stdin is not None, merge_stderr)
    process_group = process.pid
    pidfd = os.pidfd_open(process.pid)
    exited: asyncio.Future[None] = loop.create_future()

    def on_exit() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(pidfd, on_exit)
    activity = [time.monotonic()]
    assert process.stdout is not None
    pipes = [_Pipe(loop, process.stdout.fileno(), stdout_capture, activity)]
    if stderr_capture is not None:
        assert process.stderr is not None
        pipes.append(_Pipe(loop, process.stderr.fileno(), stderr_capture, activity))
    writer = asyncio.ensure_future(_feed_stdin(process, stdin)) if stdin is not None else None

    timed_out = False
    try:
        deadline = time.monotonic() + timeout
        while not exited.done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                await _kill_group(exited, process_group, kill_grace, tree)
                break
            await asyncio.wait([exited], timeout=min(PROGRESS_TICK, remaining))
            if not exited.done():
                await progress(_produced(stdout_capture, stderr_capture))
        await _drain(pipes, activity)
    except BaseException:
        # Cancellation (MCP notifications/cancelled, client gone, shutdown): nothing may outlive the call.
        with anyio.CancelScope(shield=True):
            await _kill_group(exited, process_group, kill_grace, tree)
        raise
    finally:
        if timed_out:
            # Descendants that ignored SIGTERM after the leader died are still in the group.
            _signal_group(process_group, signal.SIGKILL)
        if writer is not None and not writer.done():
            writer.cancel()
        for pipe in pipes:
            pipe.stop()
        loop.remove_reader(pidfd)
        os.close(pidfd)
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        # The leader has exited (pidfd fired) or was SIGKILLed: reap it so no zombie is left.
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=kill_grace)
    stderr = stderr_capture.result() if stderr_capture is not None else None
    return _outcome(process.returncode, timed_out, stdout_capture.result(), stderr)


def _outcome(
    return_code: int | None, timed_out: bool, stdout: CapturedText, stderr: CapturedText | None
) -> ProcessOutcome:
    """A negative return code is the signal that ended the command."""
    signal_name = None
    exit_code = return_code
    if return_code is not None and return_code < 0:
        signal_name = _signal_name(-return_code)
        exit_code = None
    return ProcessOutcome(exit_code=exit_code, signal=signal_name, timed_out=timed_out, stdout=stdout, stderr=stderr)


def _produced(stdout: BoundedCapture, stderr: BoundedCapture | None) -> int:
    return stdout.total + (stderr.total if stderr is not None else 0)


async def _feed_stdin(process: Child, data: bytes) -> None:
    """Write stdin without blocking the loop, then close it so a command reading stdin sees EOF."""
    assert process.stdin is not None
    loop = asyncio.get_running_loop()
    fd = process.stdin.fileno()
    os.set_blocking(fd, False)
    view = memoryview(data)
    writable = asyncio.Event()
    loop.add_writer(fd, writable.set)
    try:
        while view:
            await writable.wait()
            writable.clear()
            try:
                written = os.write(fd, view[:READ_CHUNK])
            except BlockingIOError:
                continue
            except OSError:  # the command closed its stdin (EPIPE): the rest is not wanted
                break
            view = view[written:]
    finally:
        loop.remove_writer(fd)
        with contextlib.suppress(OSError):
            process.stdin.close()


async def _drain(pipes: list[_Pipe], activity: list[float]) -> None:
    """Collect what is left in the pipes; give up once output stops, so `sleep 600 &` cannot hold us."""
    exited_at = time.monotonic()
    deadline = exited_at + DRAIN_MAX
    while True:
        pending = [pipe.closed for pipe in pipes if not pipe.closed.done()]
        if not pending:
            return
        now = time.monotonic()
        # Quiet is measured from the exit too: the last bytes may still be in the pipe when the exit fires.
        if now >= deadline or now - max(activity[0], exited_at) >= DRAIN_QUIET:
            return
        await asyncio.wait(pending, timeout=DRAIN_QUIET)


async def _kill_group(exited: asyncio.Future[None], process_group: int, grace: float, tree: ProcessTree) -> None:
    _signal_group(process_group, signal.SIGTERM)
    tree.signal_all((signal.SIGTERM,))  # escaped processes too: they get the same chance to clean up
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(exited), grace)
    # SIGKILL the whole group even if the leader exited: its children may ignore SIGTERM.
    _signal_group(process_group, signal.SIGKILL)
    await tree.kill(grace)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(exited), grace)


def _signal_group(process_group: int, signal_number: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process_group, signal_number)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"
