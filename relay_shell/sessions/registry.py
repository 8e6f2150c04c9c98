"""The session registry: every PTY session (local now, SSH later) with its output ring, owner and lifecycle.

A session wraps a *terminal*: any byte stream with write, resize, signal and close that reports output
and exit through callbacks (`LocalPty`; an SSH channel plugs in the same way). The registry enforces the
limits (count, idle timeout, absolute lifetime) with a reaper that runs on its own schedule, and closes a
client's sessions when its connection ends and every session when the server stops.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

import anyio

from relay_shell.errors import ToolError
from relay_shell.launch import Launcher, TreeRecords
from relay_shell.sessions.expect import SEARCH_WINDOW, Match, Patterns, find
from relay_shell.sessions.ring import OutputRing, RingRead
from relay_shell.sessions.transcript import Transcript
from relay_shell.sessions.typed import Typing
from relay_shell.settings.patterns import Regex
from relay_shell.settings.sessions import DEFAULT_PASSPROMPT

SHUTDOWN_GRACE = 0.5  # disconnect and shutdown: everything must be gone within 2 s
EXITED_LINGER = 300.0  # an ended session stays readable this long after its last use
CLOSED_REMEMBERED = 4096  # ids of closed sessions kept to answer "closed" rather than "unknown"

WaitReason = Literal["match", "quiet", "timeout", "eof"]


class Terminal(Protocol):
    kind: str  # "local" or "ssh"
    pid: int | None  # the local program's pid; None for a remote one
    where: str  # for the spawn result: "pid 1234", "on root@db1:22"
    # The kernel refuses writes by what it runs (readonly's Landlock): a rest of a line that would only write
    # need not be refused by reading (sessions/reading.py). False on a remote host and where readonly is
    # classifier-only.
    kernel_confined: bool
    exec_trace: TreeRecords  # every exec of a local terminal's tree (launch.py); UNTRACED for a remote one

    def start(self, on_output: Callable[[bytes], None], on_exit: Callable[[int | None, str | None], None]) -> None: ...

    async def write(self, data: bytes, deadline: float) -> None: ...

    def resize(self, cols: int, rows: int) -> None: ...

    def send_signal(self, signal_number: int) -> None: ...

    def password_mode(self) -> bool: ...  # a line is read with echo off (remote: the output asks for one)

    def shell_reads_line(self) -> bool: ...  # a shell reads its commands (never a password prompt); False: unknown

    # A process is blocked reading the terminal (remote: True, unknown); with `whole`, one that takes all of
    # `whole` bytes typed now.
    def reader_waiting(self, whole: int = 0) -> bool: ...

    # `length` bytes typed now are read whole (remote: False, unknown); None: nothing waits on the terminal now.
    def keeps_lines(self, length: int) -> bool | None: ...

    def reader_wait(self) -> float: ...  # seconds a program about to read the terminal is given to reach its read

    def line_settings(self) -> list[object] | None: ...  # termios as tcgetattr gives it; None: not visible

    def interrupt_clears_line(self) -> bool: ...  # Ctrl-C is known to discard the line being typed

    # Where what reads a typed line runs now: the shell's and the foreground program's working directories (remote:
    # none, not visible); the policy reads a line's relative words there too (attack 5, C1).
    def directories(self) -> tuple[str, ...]: ...

    async def close(self, grace: float, first_signal: int | None = None) -> None: ...


@dataclass
class _Waiter:
    future: asyncio.Future[None]
    ready: Callable[[], bool]  # run on each output: resume the waiting call when true


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@dataclass(frozen=True)
class WaitResult:
    reason: WaitReason
    match: Match | None = None


class Session:
    def __init__(
        self,
        session_id: str,
        owner: str,
        client_id: str,
        command: str,
        terminal: Terminal,
        buffer_bytes: int,
        cols: int,
        rows: int,
        transcript: Transcript | None,
        on_end: Callable[[Session], None],
    ) -> None:
        self.session_id = session_id
        self.owner = owner
        self.client_id = client_id
        self.command = command
        self.terminal = terminal
        self.ring = OutputRing(buffer_bytes)
        self.cols = cols
        self.rows = rows
        self.transcript = transcript
        self.on_end = on_end
        self.created = time.monotonic()
        self.created_wall = time.time()
        self.last_activity = self.created  # last tool call on this session
        self.last_output = self.created
        self.ended_at: float | None = None
        self.read_cursor = 0
        self.typing = Typing()  # the line typed so far without Enter, as the policy keeps it (sessions/typed.py)
        self.history: list[str] = []  # the lines submitted, most recent last: what `!…` may expand to
        self.open_input = ""  # submitted lines inside a construct not yet closed (sessions/open_input.py)
        self.passprompt: tuple[Regex, ...] = DEFAULT_PASSPROMPT  # what a password prompt looks like (passwords.py)
        self.input_version = 0  # counts writes and signals: a send (or a confirmation) is void after another one
        self.state: Literal["running", "exited", "closed"] = "running"
        self.exit_code: int | None = None
        self.signal_name: str | None = None
        self.end_reason: str | None = None
        self.transcript_sha256: str | None = None
        self.closing = False
        self.input_lock = asyncio.Lock()  # concurrent sends must not interleave their bytes
        self.waiters: list[_Waiter] = []

    # -- terminal callbacks ------------------------------------------------------------------------------

    def on_output(self, data: bytes) -> None:
        self.ring.append(data)
        if self.transcript is not None:
            self.transcript.output(data)
        self.last_output = time.monotonic()
        self._notify()

    def on_exit(self, exit_code: int | None, signal_name: str | None) -> None:
        if self.state != "running":
            return
        self.state = "exited"
        self.exit_code = exit_code
        self.signal_name = signal_name
        self.ended_at = time.monotonic()
        if self.transcript is not None:
            self.transcript_sha256 = self.transcript.close()
        self.on_end(self)
        self._notify(ended=True)

    def _notify(self, ended: bool = False) -> None:
        """Wake the waiters whose condition now holds (checked here, in the output callback, so a waiting
        call is resumed once, on its match, not on every chunk), or all of them when the session ended."""
        waiting = []
        for waiter in self.waiters:
            if waiter.future.done():
                continue
            if ended or waiter.ready():
                waiter.future.set_result(None)
            else:
                waiting.append(waiter)
        self.waiters = waiting

    # -- reading -----------------------------------------------------------------------------------------

    def read(self, since: int | None, end: int | None = None) -> RingRead:
        """Output after `since` (default: after the last read) up to `end` (default: all); moves the read
        cursor to where this read ended."""
        start = self.read_cursor if since is None else since
        limit = None if end is None else max(0, end - max(start, self.ring.start))
        result = self.ring.read(start, limit)
        self.read_cursor = max(self.read_cursor, result.end) if since is None else result.end
        return result

    async def wait(
        self,
        match_from: int,
        patterns: Patterns,
        timeout: float,
        settle: float,
        settle_from_start: bool,
        echo: str | None = None,
    ) -> WaitResult:
        """Wait until a pattern matches output after `match_from`, the session ends, or the timeout passes.
        Without patterns: until output has been quiet for `settle` seconds (after some output arrived,
        or counted from the start when `settle_from_start`)."""
        started = time.monotonic()
        deadline = started + timeout
        loop = asyncio.get_running_loop()
        matched: list[Match] = []
        failed: list[ToolError] = []

        def pattern_matched() -> bool:
            # Runs in the terminal's output callback: an error is handed to the waiting call, not raised here.
            try:
                found = self._search(match_from, patterns, echo)
            except ToolError as exc:
                failed.append(exc)
                return True
            if found is not None:
                matched.append(found)
            return found is not None

        # Just after the write nothing has arrived yet, and an empty window is only a prefix of a non-empty echo
        # (expect.find finds nothing in it, whatever the patterns): the search waits for the first output.
        unsearched = bool(echo) and self.ring.end <= match_from
        found = self._search(match_from, patterns, echo) if patterns and not unsearched else None
        while True:
            if found is not None:
                return WaitResult("match", found)
            if self.state != "running":
                return WaitResult("eof")
            now = time.monotonic()
            wake_at = deadline
            ready: Callable[[], bool] = pattern_matched
            if not patterns:
                produced = self.ring.end > match_from
                if produced or settle_from_start:
                    quiet_since = max(self.last_output, started) if produced else started
                    if now - quiet_since >= settle:
                        return WaitResult("quiet")
                    wake_at = min(deadline, quiet_since + settle)
                # Only the first output matters to a quiet wait; after that the timer re-checks.
                ready = (lambda: False) if produced else (lambda: True)
            if now >= deadline:
                return WaitResult("timeout")
            waiter = _Waiter(loop.create_future(), ready)
            self.waiters.append(waiter)
            timer = loop.call_later(wake_at - now, _wake, waiter.future)
            try:
                await waiter.future
            finally:
                timer.cancel()
                if waiter in self.waiters:
                    self.waiters.remove(waiter)
            if failed:
                raise failed[0]
            found = matched.pop() if matched else None

    def _search(self, match_from: int, patterns: Patterns, echo: str | None) -> Match | None:
        window_start = max(match_from, self.ring.end - SEARCH_WINDOW, self.ring.start)
        # The echo is at `match_from`: a window that starts later has none to skip.
        return find(patterns, self.ring.read(window_start).data, echo if window_start == match_from else None)

    def describe(self) -> dict[str, object]:
        now = time.monotonic()
        return {
            "session_id": self.session_id,
            "kind": self.terminal.kind,
            "command": self.command,
            "pid": self.terminal.pid,
            "cols": self.cols,
            "rows": self.rows,
            "age_s": round(now - self.created, 1),
            "idle_s": round(now - self.last_activity, 1),
            "cursor": self.ring.end,
            "read_cursor": self.read_cursor,
            "unread_bytes": self.ring.end - max(self.read_cursor, self.ring.start),
            "dropped_bytes": max(0, self.ring.start - self.read_cursor),
            "state": self.state,
            "exit_code": self.exit_code,
            "signal": self.signal_name,
        }


class SessionRegistry:
    def __init__(
        self,
        max_sessions: int,
        buffer_bytes: int,
        idle_timeout: float,
        max_lifetime: float,
        kill_grace: float,
        on_end: Callable[[Session], None],
        launcher: Launcher,  # starts local terminals (their unit, their exec trace)
        connected: Callable[[str], bool] = lambda owner: True,
    ) -> None:
        self.connected = connected
        self.launcher = launcher
        self.max_sessions = max_sessions
        self.buffer_bytes = buffer_bytes
        self.idle_timeout = idle_timeout
        self.max_lifetime = max_lifetime
        self.kill_grace = kill_grace
        self.on_end = on_end
        self.sessions: dict[str, Session] = {}
        self.closed: OrderedDict[str, tuple[str, str]] = OrderedDict()  # id -> (owner, how it ended)

    @staticmethod
    def new_id() -> str:
        return "s-" + secrets.token_hex(6)

    async def reserve(self) -> None:
        """Make room for one more session: close the least recently used ended one, or refuse."""
        while len(self.sessions) >= self.max_sessions:
            if any(session.closing for session in self.sessions.values()):
                await anyio.sleep(0.01)  # a close under way will make room
                continue
            ended = [session for session in self.sessions.values() if session.state != "running"]
            if not ended:
                raise ToolError(
                    "SessionLimit",
                    f"{len(self.sessions)} sessions are running (RELAY_SHELL_MAX_SESSIONS={self.max_sessions}); "
                    "close one with session_kill or reuse one (session_list)",
                )
            await self.close(min(ended, key=lambda session: session.last_activity), "evicted for a new session")

    def add(
        self,
        session_id: str,
        owner: str,
        client_id: str,
        command: str,
        terminal: Terminal,
        cols: int,
        rows: int,
        transcript: Transcript | None,
    ) -> Session:
        session = Session(
            session_id,
            owner,
            client_id,
            command,
            terminal,
            self.buffer_bytes,
            cols,
            rows,
            transcript,
            self.on_end,
        )
        self.sessions[session_id] = session
        terminal.start(session.on_output, session.on_exit)
        return session

    def get(self, owner: str, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is not None:
            if session.owner != owner:
                raise ToolError(
                    "SessionNotOwned", f"session {session_id!r} belongs to another client; sessions are private"
                )
            return session
        remembered = self.closed.get(session_id)
        if remembered is not None and remembered[0] == owner:
            raise ToolError("SessionClosed", f"session {session_id!r} is closed ({remembered[1]}); spawn a new one")
        if remembered is not None:
            raise ToolError(
                "SessionNotOwned", f"session {session_id!r} belongs to another client; sessions are private"
            )
        raise ToolError(
            "UnknownSession", f"no session {session_id[:64]!r}; session_list shows yours (ids look like s-1a2b3c4d5e6f)"
        )

    def owned_by(self, owner: str) -> list[Session]:
        return [session for session in self.sessions.values() if session.owner == owner]

    async def close(
        self, session: Session, reason: str, grace: float | None = None, first_signal: int | None = None
    ) -> None:
        """End the session's processes (if still running) and remove it."""
        if session.closing or session.state == "closed":
            return
        session.closing = True
        if session.state == "running":
            session.end_reason = reason
        with anyio.CancelScope(shield=True):
            await session.terminal.close(self.kill_grace if grace is None else grace, first_signal)
        self._forget(session, reason)

    async def close_disconnected(self) -> None:
        """Close the sessions of clients whose connection has ended."""
        gone = [session for session in self.sessions.values() if not self.connected(session.owner)]
        await self._close_many(gone, "client disconnected")

    async def close_all(self, reason: str) -> None:
        await self._close_many(list(self.sessions.values()), reason)

    async def reap(self) -> None:
        await self.close_disconnected()
        now = time.monotonic()
        expired: list[tuple[Session, str]] = []
        for session in list(self.sessions.values()):
            if session.closing:
                continue
            if session.state == "running" and now - session.created >= self.max_lifetime:
                expired.append((session, f"max lifetime {self.max_lifetime:g}s reached"))
            elif session.state == "running" and now - session.last_activity >= self.idle_timeout:
                expired.append((session, f"idle for {self.idle_timeout:g}s"))
            elif session.state == "exited" and now - max(session.last_activity, session.ended_at or now) >= min(
                EXITED_LINGER, self.idle_timeout
            ):
                expired.append((session, "ended and unused"))
        async with anyio.create_task_group() as group:
            for session, reason in expired:
                group.start_soon(self.close, session, reason)

    async def reap_forever(self) -> None:
        interval = max(0.1, min(1.0, self.idle_timeout / 4, self.max_lifetime / 4))
        while True:
            await anyio.sleep(interval)
            await self.reap()

    async def _close_many(self, sessions: list[Session], reason: str) -> None:
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as group:
                for session in sessions:
                    group.start_soon(self.close, session, reason, min(SHUTDOWN_GRACE, self.kill_grace))

    def _forget(self, session: Session, reason: str | None = None) -> None:
        if self.sessions.pop(session.session_id, None) is None:
            return
        if session.state != "closed":
            ended = (
                f"exited with {session.exit_code}"
                if session.exit_code is not None
                else f"killed by {session.signal_name}"
                if session.signal_name
                else "ended"
            )
            session.state = "closed"
            self.closed[session.session_id] = (session.owner, f"{reason}; {ended}" if reason else ended)
            while len(self.closed) > CLOSED_REMEMBERED:
                self.closed.popitem(last=False)
