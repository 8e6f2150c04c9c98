"""One command on one host over a pooled connection: bounded capture of stdout and stderr, stdin then EOF,
exit status or signal, and a timeout that really ends the remote command.

sshd starts every exec in a new session (setsid), so the remote shell's pid is also its process group and
session id. The command is prefixed with `printf 'RELAY-PID-<nonce> %s\\n' "$$" >&2`: a stderr line found
behind its per-call nonce, consumed here and never shown, so that on timeout the whole remote session can be
killed (`pkill -s`), not only the shell: closing an SSH channel without a terminal does not stop what the
command started. This assumes a POSIX-style login shell on the remote side, as Ansible does (ADR 0007).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import asyncssh

from relay_shell.capture import BoundedCapture, CapturedText
from relay_shell.errors import ToolError
from relay_shell.outputs import OutputStore, StreamSink
from relay_shell.plan import ProgressFn
from relay_shell.ssh.pool import PooledConnection, SshPool, connect_error
from relay_shell.ssh.target import Route

PID_SEARCH = 64 * 1024  # stderr bytes (shell start-up noise) searched for the pid line
KILL_TIMEOUT = 5.0
CHANNEL_RETRIES = 3
PROGRESS_EVERY = 0.5
T = TypeVar("T")
Sink = BoundedCapture | StreamSink  # where a stream's bytes go: a capture, or a job's sink (outputs.py)


@dataclass
class RemoteOutcome:
    exit_code: int | None
    signal: str | None
    timed_out: bool
    stdout: CapturedText
    stderr: CapturedText | None
    host_key: str | None
    accepted_new_key: bool


class _ExecSession(asyncssh.SSHClientSession[bytes]):
    """Feeds stdout and stderr into their sinks; takes the remote shell's pid line out of stderr."""

    def __init__(self, stdout: Sink, stderr: Sink, marker: bytes) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.marker = marker  # b"RELAY-PID-<nonce> ": never in the command's own output by chance
        self.pid: int | None = None
        self.searching = True
        self.held = b""  # stderr before the pid line: shell start-up messages, passed on once seen whole
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.produced = 0

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        if datatype != asyncssh.EXTENDED_DATA_STDERR:
            self.stdout.feed(data)
            self.produced += len(data)
            return
        if self.searching:
            data = self._take_pid_line(data)
        if data:
            self.stderr.feed(data)
            self.produced += len(data)

    def _take_pid_line(self, data: bytes) -> bytes:
        self.held += data
        start = self.held.find(self.marker)
        end = self.held.find(b"\n", start) if start >= 0 else -1
        if end >= 0:
            digits = self.held[start + len(self.marker) : end]
            self.pid = int(digits) if digits.isdigit() else None
            self.searching = False
            rest, self.held = self.held[:start] + self.held[end + 1 :], b""
            return rest
        if len(self.held) > PID_SEARCH:  # no marker where it must be: pass everything on, kill by shell only
            self.searching = False
            rest, self.held = self.held, b""
            return rest
        return b""

    def connection_lost(self, exc: Exception | None) -> None:
        if self.held:
            self.stderr.feed(self.held)
            self.produced += len(self.held)
            self.held = b""
        if not self.done.done():
            self.done.set_result(None)


class RemoteCommand:
    """One remote command from its start to its end, in a task of its own (`wait` can return while it runs)."""

    def __init__(
        self,
        pool: SshPool,
        route: Route,
        outputs: OutputStore,
        budget: int,
        merge_stderr: bool,
        progress: ProgressFn,
    ) -> None:
        self.pool = pool
        self.route = route
        self.stdout = outputs.sink(budget)
        self.stderr = None if merge_stderr else outputs.sink(budget)
        self.progress = progress
        self.pid: int | None = None  # the remote shell's pid lives on the remote host
        self.where = f"on {route.target.describe()}"
        self.host_key: str | None = None
        self.stdin_open = False
        self.stop_signal: int | None = None
        self.channel: asyncssh.SSHClientChannel[bytes] | None = None
        self.session: _ExecSession | None = None
        self.wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def start(self, command: str, stdin: bytes | None, stdin_open: bool, timeout: float) -> None:
        self.stdin_open = stdin_open
        self.task = asyncio.ensure_future(
            run_remote(
                self.pool,
                self.route,
                command,
                stdin=stdin,
                timeout=timeout,
                budget=self.stdout.capture.budget,
                merge_stderr=self.stderr is None,
                progress=None,
                control=self,
            )
        )

    async def wait(self, until: float | None) -> bool:
        """Until the command ended (True) or `until` came (False: it runs on); a cancellation kills it first."""
        try:
            timeout = None if until is None else max(0.0, until - time.monotonic())
            await asyncio.wait([self.task], timeout=timeout)
        except BaseException:
            self.task.cancel()  # run_remote kills the remote session before it ends
            with contextlib.suppress(BaseException):
                await asyncio.shield(self.task)
            raise
        return self.task.done()

    async def outcome(self) -> RemoteOutcome:
        return await self.task

    def produced(self) -> int:
        return self.session.produced if self.session is not None else 0

    async def report(self, produced: int) -> None:
        await self.progress(produced)

    # -- from outside, while it runs as a job ----------------------------------------------------------------

    def stop(self, first_signal: int | None) -> None:
        """End it as a timeout would: the remote session killed, then the channel closed."""
        self.stop_signal = first_signal or signal.SIGTERM
        if not self.wake.done():
            self.wake.set_result(None)

    async def send_signal(self, signal_number: int) -> None:
        """To the remote session's process group (`kill -SIG -- -PID` on another channel: sshd may refuse an SSH
        signal request)."""
        pid = self.session.pid if self.session is not None else None
        if pid is None:
            raise ToolError("NoRemotePid", "the remote shell's pid is not known yet: nothing to signal")
        name = signal.Signals(signal_number).name.removeprefix("SIG")

        async def send(connection: PooledConnection) -> None:
            await connection.connection.run(f"kill -{name} -- -{pid} 2>/dev/null; true", check=False)

        await on_channel(self.pool, self.route, time.monotonic() + KILL_TIMEOUT, send)

    async def write(self, data: bytes, deadline: float) -> None:
        if not self.stdin_open or self.channel is None:
            raise ToolError("StdinClosed", "the job's stdin is closed (it was not opened with stdin_open, or ctrl-d)")
        self.channel.write(data)

    def close_stdin(self) -> None:
        if self.stdin_open and self.channel is not None:
            self.stdin_open = False
            with contextlib.suppress(Exception):
                self.channel.write_eof()


async def run_remote(
    pool: SshPool,
    route: Route,
    command: str,
    *,
    stdin: bytes | None,
    timeout: float,
    budget: int,
    merge_stderr: bool,
    progress: ProgressFn | None,
    control: RemoteCommand | None = None,
) -> RemoteOutcome:
    """Connect (or reuse), run, capture. Connection failures raise ConnectFailed by kind. With `control` (a job's
    command: ssh_exec) its sinks take the output, and it may stop the command or keep stdin open."""
    deadline = time.monotonic() + timeout
    stdout: Sink
    stderr: Sink
    if control is not None:
        stdout = control.stdout
        stderr = control.stderr or stdout
    else:
        stdout = BoundedCapture(budget)
        stderr = stdout if merge_stderr else BoundedCapture(budget)
    wake = control.wake if control is not None else None

    async def run(connection: PooledConnection) -> RemoteOutcome:
        marker = f"RELAY-PID-{secrets.token_hex(8)} "
        session = _ExecSession(stdout, stderr, marker.encode())
        prefixed = f"printf '{marker}%s\\n' \"$$\" >&2; {command}"
        channel = await open_channel(
            pool,
            connection,
            deadline,
            lambda: connection.connection.create_session(lambda: session, prefixed, encoding=None),
        )
        if control is not None:
            control.channel, control.session, control.host_key = channel, session, connection.host_key
        connection.channels_open += 1
        try:
            if stdin:
                channel.write(stdin)
            if control is None or not control.stdin_open:
                channel.write_eof()  # a command reading stdin sees EOF instead of waiting forever
            timed_out = False
            try:
                await _wait(session, deadline, control.report if control is not None else progress, wake)
            except TimeoutError:
                timed_out = control is None or control.stop_signal is None  # a stop is no timeout
                await _kill(pool, route, channel, session)
            except BaseException:  # cancelled by the client: the remote command must not outlive the call
                with contextlib.suppress(Exception):
                    await asyncio.shield(_kill(pool, route, channel, session))
                raise
        finally:
            connection.channels_open -= 1
        exit_signal = channel.get_exit_signal()
        return RemoteOutcome(
            exit_code=None if timed_out else channel.get_exit_status() if exit_signal is None else None,
            signal=None if timed_out or exit_signal is None else _signal_name(exit_signal[0]),
            timed_out=timed_out,
            stdout=_captured(stdout),
            stderr=None if stderr is stdout else _captured(stderr),
            host_key=connection.host_key,
            accepted_new_key=connection.decision.announce_new_key(),
        )

    return await on_channel(pool, route, deadline, run)


def _captured(sink: Sink) -> CapturedText:
    return sink.capture.result() if isinstance(sink, StreamSink) else sink.result()


async def open_channel(
    pool: SshPool,
    connection: PooledConnection,
    deadline: float,
    open_session: Callable[[], Awaitable[tuple[asyncssh.SSHClientChannel[bytes], asyncssh.SSHClientSession[bytes]]]],
) -> asyncssh.SSHClientChannel[bytes]:
    """Open a channel before the deadline. A server that does not answer (stopped, wedged) is dropped from the
    pool, so the next call dials afresh instead of waiting on it too."""
    try:
        # A timeout on this task, not wait_for's task around the open: one task and one turn of the loop less
        # per channel (ADR 0029 Round 6).
        async with asyncio.timeout(max(0.01, deadline - time.monotonic())):
            channel, _ = await open_session()
    except TimeoutError:
        pool.discard(connection)
        raise ToolError(
            "ServerNotResponding",
            f"{connection.identity[-1].describe()}: the server did not open a channel in time; the connection "
            "was dropped (the next call reconnects)",
        ) from None
    return channel


async def on_channel(
    pool: SshPool, route: Route, deadline: float, use: Callable[[PooledConnection], Awaitable[T]]
) -> T:
    """Run `use` with a pooled connection that has a channel reserved for it. A refused channel (the server's
    MaxSessions is lower than ours, or its sessions are still held by dying processes) or a connection lost
    on the way is retried on another connection for the same identity."""
    for attempt in range(CHANNEL_RETRIES):
        try:
            connection = await pool.acquire(route, max(0.01, deadline - time.monotonic()))
        except TimeoutError:
            raise ToolError("ConnectTimeout", f"{route.target.describe()}: no connection in time") from None
        try:
            return await use(connection)
        except asyncssh.ChannelOpenError as exc:
            pool.channel_refused(connection)
            if attempt == CHANNEL_RETRIES - 1:
                raise ToolError(
                    "ChannelRefused", f"{route.target.describe()}: the server refused a channel ({exc.reason})"
                ) from None
        except (asyncssh.DisconnectError, asyncssh.ConnectionLost, ConnectionError) as exc:
            connection.closed = True
            if attempt == CHANNEL_RETRIES - 1:
                raise connect_error(route.target, exc, connection.decision) from None
        finally:
            pool.release(connection)
    raise AssertionError("unreachable")


async def _wait(
    session: _ExecSession, deadline: float, progress: ProgressFn | None, wake: asyncio.Future[None] | None
) -> None:
    """Until the channel closes; TimeoutError at the deadline, or when `wake` is set (a job's command stopped).
    Reports progress every half second."""
    if progress is None and wake is None:  # nothing to report on the way (a fan-out's host): one plain wait
        async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
            await asyncio.shield(session.done)  # a cancelled wait leaves the session's own future alone
        return
    waited = [session.done] if wake is None else [session.done, wake]
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or (wake is not None and wake.done()):
            raise TimeoutError
        done, _ = await asyncio.wait(
            waited, timeout=min(remaining, PROGRESS_EVERY), return_when=asyncio.FIRST_COMPLETED
        )
        if session.done in done:
            return
        if not done and progress is not None and time.monotonic() < deadline:
            await progress(session.produced)


async def _kill(pool: SshPool, route: Route, channel: asyncssh.SSHClientChannel[bytes], session: _ExecSession) -> None:
    """End the remote command and everything it started: its whole remote session (`pkill -s`, on any pooled
    connection for the same identity: sshd refuses SSH signal requests for some logins, root's among them,
    and this command's own connection may have no channel to spare), then the channel."""
    with contextlib.suppress(Exception):
        channel.send_signal("KILL")
    pid = session.pid
    if pid:

        async def kill_session(connection: PooledConnection) -> None:
            await connection.connection.run(
                f"pkill -KILL -s {pid} 2>/dev/null || kill -KILL -- -{pid} 2>/dev/null; true",
                check=False,
                stdin=asyncssh.DEVNULL,
            )

        with contextlib.suppress(Exception):  # a connection that is gone took its exec sessions with it
            await asyncio.wait_for(on_channel(pool, route, time.monotonic() + KILL_TIMEOUT, kill_session), KILL_TIMEOUT)
    channel.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(asyncio.shield(session.done), 1.0)


def _signal_name(name: str) -> str:
    return name if name.startswith("SIG") else f"SIG{name}"
