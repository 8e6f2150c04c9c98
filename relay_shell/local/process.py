"""One-shot local processes: own session and process group, a containment unit, bounded capture, kill
escalation — and, when the call yields (adr/0028), the same process running on as a job.

The child starts a new session (so it is its own process-group leader with no controlling terminal) through
the launch point (launch.py): inside its containment unit, which also holds what leaves the group (setsid,
double forks, daemons), and under the exec trace when it is on. On timeout, cancellation or a stop (session_kill
of its job, the server's stop) the group and the unit get the first signal (SIGTERM), a grace period, then
SIGKILL, so no descendant survives, escaped or not.

Exit is observed through a pidfd, not through the pipes: asyncio's `Process.wait()` only returns once every
pipe is closed, so `sleep 600 & echo started` would hold the call for ten minutes. Here, after the command
exits, output is drained only while it keeps arriving (DRAIN_QUIET), for at most DRAIN_MAX seconds.

`LocalCommand.wait(until)` returns at the command's end, or at `until` (the call's yield) with the command still
running; waiting again continues where it left off. Nothing is cleaned up until the end (`finish`).
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

from relay_shell.capture import CapturedText
from relay_shell.errors import ToolError
from relay_shell.launch import Child, ProcessTree
from relay_shell.outputs import OutputStore, StreamSink
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
    """Non-blocking reads from one pipe into a sink, driven by the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, sink: StreamSink, activity: list[float]) -> None:
        self.loop = loop
        self.fd = fd
        self.sink = sink
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
        self.sink.feed(chunk)
        self.activity[0] = time.monotonic()

    def stop(self) -> None:
        self.loop.remove_reader(self.fd)
        if not self.closed.done():
            self.closed.set_result(None)


async def _no_progress(produced: int) -> None:
    pass


class LocalCommand:
    """A command's process from its start to its end: its output into sinks, its stdin, its exit, its timeout,
    a stop asked for from outside (`stop`), and the kill of its group and unit."""

    def __init__(
        self,
        tree: ProcessTree,  # the call's processes: their unit and exec trace (launch.py)
        outputs: OutputStore,
        budget: int,
        merge_stderr: bool,
        timeout: float,
        kill_grace: float,
        progress: ProgressFn,
    ) -> None:
        self.tree = tree
        self.merge_stderr = merge_stderr
        self.stdout = outputs.sink(budget if merge_stderr else budget - budget // 4)
        self.stderr = None if merge_stderr else outputs.sink(budget // 4)
        self.deadline = time.monotonic() + timeout
        self.kill_grace = kill_grace
        self.progress = progress
        self.timed_out = False
        self.stop_signal: int | None = None  # set by stop(): the first signal of the kill
        self.stdin_open = False
        self.pid = 0
        self.where = "local"
        self.closed = False

    async def start(
        self, argv: list[str], cwd: str | None, env: dict[str, str] | None, stdin: bytes | None, stdin_open: bool
    ) -> None:
        """Start the process (`env` None inherits the server's); stdin gets `stdin`, then EOF unless `stdin_open`."""
        loop = asyncio.get_running_loop()
        try:
            process = await self.tree.start_command(argv, cwd, env, stdin is not None or stdin_open, self.merge_stderr)
        except BaseException:
            self.tree.release()
            raise
        self.process: Child = process
        self.pid = process.pid
        self.pidfd = os.pidfd_open(process.pid)
        self.exited: asyncio.Future[None] = loop.create_future()
        self.wake: asyncio.Future[None] = loop.create_future()  # stop() or a shortened wait
        loop.add_reader(self.pidfd, self._on_exit)
        self.activity = [time.monotonic()]
        assert process.stdout is not None
        self.pipes = [_Pipe(loop, process.stdout.fileno(), self.stdout, self.activity)]
        if self.stderr is not None:
            assert process.stderr is not None
            self.pipes.append(_Pipe(loop, process.stderr.fileno(), self.stderr, self.activity))
        self.stdin_open = stdin_open
        self.writer = asyncio.ensure_future(_feed_stdin(process, stdin, stdin_open)) if stdin is not None else None
        self.loop = loop

    def _on_exit(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    async def wait(self, until: float | None) -> bool:
        """Until the command ended (True: drained, ready to `finish`) or `until` came (False: still running).
        The timeout or a stop ends it here; so does a cancellation, which is raised once the unit is ended."""
        try:
            while not self.exited.done():
                now = time.monotonic()
                if self.stop_signal is not None:
                    await self._kill(self.stop_signal)
                    break
                remaining = self.deadline - now
                if remaining <= 0:
                    self.timed_out = True
                    await self._kill(signal.SIGTERM)
                    break
                if until is not None and now >= until:
                    return False
                step = min(PROGRESS_TICK, remaining, until - now if until is not None else PROGRESS_TICK)
                await asyncio.wait([self.exited, self.wake], timeout=step, return_when=asyncio.FIRST_COMPLETED)
                if not self.exited.done() and not self.wake.done():
                    await self.progress(self.produced())
            await _drain(self.pipes, self.activity)
        except BaseException:
            # Cancellation (MCP notifications/cancelled, client gone, shutdown): nothing may outlive the call.
            with anyio.CancelScope(shield=True):
                await self._kill(signal.SIGTERM)
                self.finish()
            raise
        return True

    def finish(self) -> ProcessOutcome:
        """After `wait` returned True: stop reading, reap the leader, release the tree; how it ended."""
        if not self.closed:
            self.closed = True
            self._close()
        stderr = self.stderr.capture.result() if self.stderr is not None else None
        return _outcome(self.process.returncode, self.timed_out, self.stdout.capture.result(), stderr)

    def _close(self) -> None:
        try:
            if self.timed_out or self.stop_signal is not None:
                # Descendants that ignored SIGTERM after the leader died are still in the group.
                _signal_group(self.pid, signal.SIGKILL)
            if self.writer is not None and not self.writer.done():
                self.writer.cancel()
            for pipe in self.pipes:
                pipe.stop()
            self.loop.remove_reader(self.pidfd)
            os.close(self.pidfd)
            for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
            # The leader has exited (pidfd fired) or was SIGKILLed: reap it so no zombie is left.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=self.kill_grace)
        finally:
            self.tree.release()  # after the leader was reaped; a unit whose background jobs run on stays

    def produced(self) -> int:
        return self.stdout.total + (self.stderr.total if self.stderr is not None else 0)

    # -- from outside, while it runs as a job ----------------------------------------------------------------

    def stop(self, first_signal: int | None) -> None:
        """End the command and its whole unit: `first_signal` (default TERM), the grace, then KILL."""
        if self.stop_signal is None:
            self.stop_signal = first_signal or signal.SIGTERM
        if not self.wake.done():
            self.wake.set_result(None)

    async def send_signal(self, signal_number: int) -> None:
        """To the command's process group (what started in a new group or session of its own is not reached)."""
        _signal_group(self.pid, signal_number)

    async def write(self, data: bytes, deadline: float) -> None:
        """Write to the command's stdin (opened with stdin_open); TimeoutError when it stops reading."""
        stdin = self.process.stdin
        if not self.stdin_open or stdin is None or stdin.closed:
            raise ToolError("StdinClosed", "the job's stdin is closed (it was not opened with stdin_open, or ctrl-d)")
        if self.writer is not None and not self.writer.done():
            await asyncio.wait_for(asyncio.shield(self.writer), max(0.01, deadline - time.monotonic()))
        await _write_all(stdin.fileno(), data, deadline)

    def close_stdin(self) -> None:
        stdin = self.process.stdin
        self.stdin_open = False
        if stdin is not None and (self.writer is None or self.writer.done()):
            with contextlib.suppress(OSError):
                stdin.close()

    async def _kill(self, first_signal: int) -> None:
        await _kill_group(self.exited, self.pid, self.kill_grace, self.tree, first_signal)


async def run_process(
    argv: list[str],
    *,
    tree: ProcessTree,
    cwd: str | None,
    env: dict[str, str] | None,
    stdin: bytes | None,
    merge_stderr: bool,
    timeout: float,
    budget: int,
    kill_grace: float,
    progress: ProgressFn,
) -> ProcessOutcome:
    """A command from its start to its end, as a one-shot call runs it when it may not yield: no output is kept
    beyond its capture."""
    command = LocalCommand(tree, OutputStore(0, 0.0), budget, merge_stderr, timeout, kill_grace, progress)
    await command.start(argv, cwd, env, stdin, False)
    await command.wait(None)
    return command.finish()


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


async def _feed_stdin(process: Child, data: bytes, keep_open: bool) -> None:
    """Write stdin without blocking the loop, then close it (unless kept open for a job) so a command reading
    stdin sees EOF."""
    assert process.stdin is not None
    try:
        await _write_all(process.stdin.fileno(), data, None)
    except OSError:  # the command closed its stdin (EPIPE): the rest is not wanted
        keep_open = False
    finally:
        if not keep_open:
            with contextlib.suppress(OSError):
                process.stdin.close()


async def _write_all(fd: int, data: bytes, deadline: float | None) -> None:
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    view = memoryview(data)
    writable = asyncio.Event()
    loop.add_writer(fd, writable.set)
    try:
        while view:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(f"the job's stdin took {len(data) - len(view)} of {len(data)} bytes")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(writable.wait(), remaining)
            writable.clear()
            try:
                written = os.write(fd, view[:READ_CHUNK])
            except BlockingIOError:
                continue
            view = view[written:]
    finally:
        loop.remove_writer(fd)


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


async def _kill_group(
    exited: asyncio.Future[None], process_group: int, grace: float, tree: ProcessTree, first_signal: int
) -> None:
    _signal_group(process_group, first_signal)
    tree.signal_all((first_signal,))  # escaped processes too: they get the same chance to clean up
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(exited), grace)
    # SIGKILL the whole group even if the leader exited: its children may ignore SIGTERM.
    _signal_group(process_group, signal.SIGKILL)
    await tree.kill(grace)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(exited), grace)


def _signal_group(process_group: int, signal_number: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process_group, signal_number)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"
