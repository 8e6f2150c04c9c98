"""A remote PTY: an SSH session channel with a terminal, driven by the same session registry and tools as a
local PTY (write, resize, signal, close; output and exit through two callbacks).

What differs from a local terminal, and why:
- Signals. INT, QUIT and TSTP are typed as the terminal's own keys (^C, ^\\, ^Z) so they reach the remote
  foreground job, as they do locally; the SSH "signal" request would only reach the login shell.
- Echo. The remote terminal's modes are not visible from here, so "a password prompt is waiting" is judged
  from the output: its last line asks for a password, passphrase, PIN or passcode (ADR 0007).
- Closing. Closing the channel makes sshd hang up the terminal, which sends SIGHUP to its session.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import time
from collections.abc import Callable
from typing import Any, cast

import asyncssh

from relay_shell.launch import UNTRACED, TreeRecords
from relay_shell.sessions.ansi import strip_ansi
from relay_shell.ssh.pool import PooledConnection, SshPool

TERMINAL_KEYS = {signal.SIGINT: b"\x03", signal.SIGQUIT: b"\x1c", signal.SIGTSTP: b"\x1a"}
TAIL_KEPT = 512
_PASSWORD_PROMPT = re.compile(
    rb"(?i)(password|passphrase|passcode|\bpin\b|verification code|one-time code)[^\n]{0,80}[:?]\s*$"
)


class _TerminalSession(asyncssh.SSHClientSession[bytes]):
    def __init__(self, terminal: SshTerminal) -> None:
        self.terminal = terminal

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        self.terminal.received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.terminal.ended()


class SshTerminal:
    kind = "ssh"
    pid: int | None = None
    exec_trace: TreeRecords = UNTRACED  # the programs run on the remote host: not traced (adr/0019)
    kernel_confined = False  # no Landlock of ours on the remote host

    def directories(self) -> tuple[str, ...]:
        return ()  # the remote shell's directory is not visible

    def __init__(self, pool: SshPool, connection: PooledConnection, where: str) -> None:
        self.pool = pool
        self.connection = connection
        self.where = f"on {where}"
        self.channel: asyncssh.SSHClientChannel[bytes] | None = None
        self.on_output: Callable[[bytes], None] = lambda data: None
        self.on_exit: Callable[[int | None, str | None], None] = lambda code, name: None
        self.early: list[bytes] = []  # output that arrived before start()
        self.started = False
        self.finished = False
        self.released = False
        self.tail = b""

    async def open(
        self, command: str | None, term_type: str, cols: int, rows: int, env: dict[str, str]
    ) -> tuple[asyncssh.SSHClientChannel[bytes], asyncssh.SSHClientSession[bytes]]:
        channel, session = await self.connection.connection.create_session(
            lambda: _TerminalSession(self),
            command if command is not None else (),
            request_pty="force",
            term_type=term_type,
            term_size=(cols, rows),
            env=cast(Any, env) if env else (),
            encoding=None,
        )
        self.channel = channel
        self.connection.channels_open += 1
        return channel, session

    def start(self, on_output: Callable[[bytes], None], on_exit: Callable[[int | None, str | None], None]) -> None:
        self.on_output = on_output
        self.on_exit = on_exit
        self.started = True
        for data in self.early:
            on_output(data)
        self.early.clear()
        if self.finished:
            self._report_exit()

    # -- channel events ----------------------------------------------------------------------------------

    def received(self, data: bytes) -> None:
        self.tail = (self.tail + data)[-TAIL_KEPT:]
        if self.started:
            self.on_output(data)
        else:
            self.early.append(data)

    def ended(self) -> None:
        if self.finished:
            return
        self.finished = True
        self._release()
        if self.started:
            self._report_exit()

    def _report_exit(self) -> None:
        assert self.channel is not None
        exit_signal = self.channel.get_exit_signal()
        if exit_signal is not None:
            name = exit_signal[0]
            self.on_exit(None, name if name.startswith("SIG") else f"SIG{name}")
        else:
            self.on_exit(self.channel.get_exit_status(), None)

    def _release(self) -> None:
        if not self.released:
            self.released = True
            if self.channel is not None:
                self.connection.channels_open -= 1
            self.pool.release(self.connection)

    # -- the byte stream ---------------------------------------------------------------------------------

    async def write(self, data: bytes, deadline: float) -> None:
        if self.channel is None or self.finished:
            raise OSError("the remote terminal is closed")
        self.channel.write(data)
        # asyncssh buffers what the peer's window does not take yet; wait while that buffer is large.
        while self.channel.get_write_buffer_size() > 256 * 1024:
            if time.monotonic() >= deadline:
                raise TimeoutError("the remote terminal is not taking input")
            await asyncio.sleep(0.01)

    def resize(self, cols: int, rows: int) -> None:
        if self.channel is not None and not self.finished:
            self.channel.change_terminal_size(cols, rows)

    def send_signal(self, signal_number: int) -> None:
        if self.channel is None or self.finished:
            return
        key = TERMINAL_KEYS.get(signal.Signals(signal_number))
        if key is not None:
            self.channel.write(key)
            return
        with contextlib.suppress(Exception):
            self.channel.send_signal(signal.Signals(signal_number).name.removeprefix("SIG"))

    def password_mode(self) -> bool:
        return _PASSWORD_PROMPT.search(strip_ansi(self.tail)) is not None

    def shell_reads_line(self) -> bool:
        return False  # the remote process table is not visible: the prompt decides (sessions/passwords.py)

    def reader_waiting(self, whole: int = 0) -> bool:
        return True  # the remote process table is not visible: the prompt decides (adr/0026 says what is left)

    def keeps_lines(self, length: int) -> bool:
        # The remote process table is not visible: a program there may read a part of the line and leave the rest
        # to the remote shell (review W3), so every rest of every line is classified (adr/0026 Round 7).
        return False

    def reader_wait(self) -> float:
        return 0.0  # the remote process table is not visible

    def line_settings(self) -> list[object] | None:
        return None  # the remote terminal's settings are not visible (adr/0026)

    def interrupt_clears_line(self) -> bool:
        return False  # the remote terminal's ISIG is not visible: a line typed before Ctrl-C may still be there

    async def close(self, grace: float, first_signal: int | None = None) -> None:
        """Signal (if asked), hang up (close the channel: sshd sends SIGHUP to the remote session), and wait
        up to `grace` for the channel to finish closing."""
        if self.channel is None:
            self._release()
            return
        if first_signal is not None and not self.finished:
            with contextlib.suppress(Exception):
                self.channel.send_signal(signal.Signals(first_signal).name.removeprefix("SIG"))
        self.channel.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.channel.wait_closed(), grace)
        self.ended()
