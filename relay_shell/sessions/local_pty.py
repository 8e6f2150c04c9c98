"""A local PTY: the child runs in its own session with the PTY as its controlling terminal (ptyprocess),
so job control works and Ctrl-C reaches the foreground job.

This is one kind of terminal the session registry drives; an SSH channel is another. Both are a byte
stream with write, resize, signal and close, and report output and exit through two callbacks.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import termios
import time
from collections.abc import Callable

from ptyprocess import PtyProcess

from relay_shell.launch import ProcessTree
from relay_shell.sessions.foreground import ForegroundWatch, processes_where
from relay_shell.sessions.line_settings import echo_off, interrupts
from relay_shell.sessions.reader import keeps_lines, reader_wait, reads_terminal, reads_whole_line, shell_reads_commands

READ_CHUNK = 64 * 1024
DRAIN_QUIET = 0.05  # after the leader exits, output still arriving within this window belongs to it
DRAIN_MAX = 1.0
_PR_SET_PDEATHSIG = 1

OutputCallback = Callable[[bytes], None]
ExitCallback = Callable[[int | None, str | None], None]


def _prepare_child(confine: Callable[[], None]) -> None:
    """In the child, before exec. Python ignores SIGPIPE and SIGXFSZ, and exec keeps ignored signals: give
    the program the defaults (`yes | head -1` must end quietly, as in any terminal). And SIGKILL the program
    if the server dies, so even `kill -9` of the server does not leave the shell behind. Last, what the launch
    point asks (readonly: the child confines itself; an exception fails the spawn)."""
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    confine()


async def start_local_pty(
    tree: ProcessTree, argv: list[str], cwd: str | None, env: dict[str, str], cols: int, rows: int
) -> LocalPty:
    """Start the terminal's program through its tree (launch.py: in its unit; traced, on a spawner thread).
    Raises FileNotFoundError when argv[0] is not found and OSError when exec fails."""
    process = await tree.start_terminal(
        lambda child_env, confine: PtyProcess.spawn(
            argv, cwd=cwd, env=child_env, dimensions=(rows, cols), preexec_fn=lambda: _prepare_child(confine)
        ),
        env,
    )
    return LocalPty(process, tree)


class LocalPty:
    kind = "local"

    def __init__(self, process: PtyProcess, tree: ProcessTree) -> None:
        # The terminal's processes live in the tree's containment unit (or in its session alone, containment
        # off), so closing it ends those that left the terminal's session too (setsid, daemons).
        self.tree = tree
        self.exec_trace = tree.trace  # every exec of the terminal's tree; session_send takes windows of it
        self.process = process
        self.pid = process.pid
        self.where = f"pid {self.pid}"
        self.kernel_confined = bool(tree.confinement.record_fields())  # Unconfined has none
        self.fd = self.process.fd
        self.loop = asyncio.get_running_loop()
        self.on_output: OutputCallback = lambda data: None
        self.on_exit: ExitCallback = lambda code, name: None
        self.exit_code: int | None = None
        self.signal_name: str | None = None
        self.leader_exited = False
        self.output_closed = False
        self.ended = False
        self.last_output = time.monotonic()
        self.exited_at = 0.0
        os.set_blocking(self.fd, False)
        self.pidfd = os.pidfd_open(self.pid)
        # Who reads the terminal, read from /proc and reused while nothing in the terminal's tree has run.
        cgroup = getattr(tree.unit, "cgroup", None)  # containment's unit: every process the session started
        self.foreground = ForegroundWatch(self.fd, self.pid, None if cgroup is None else f"{cgroup}/cgroup.threads")

    def start(self, on_output: OutputCallback, on_exit: ExitCallback) -> None:
        self.on_output = on_output
        self.on_exit = on_exit
        self.loop.add_reader(self.fd, self._on_readable)
        self.loop.add_reader(self.pidfd, self._on_leader_exit)

    # -- the byte stream ---------------------------------------------------------------------------------

    async def write(self, data: bytes, deadline: float) -> None:
        """Write everything, waiting while the terminal's input queue is full; TimeoutError at the deadline."""
        try:  # the usual case: the terminal takes it all at once, no need to involve the event loop
            written = os.write(self.fd, data)
        except BlockingIOError:
            written = 0
        if written == len(data):
            return
        view = memoryview(data)[written:]
        writable = asyncio.Event()
        self.loop.add_writer(self.fd, writable.set)
        try:
            while view:
                try:
                    written = os.write(self.fd, view)
                    view = view[written:]
                    continue
                except BlockingIOError:
                    pass
                writable.clear()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"the terminal accepted {len(data) - len(view)} of {len(data)} bytes")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(writable.wait(), remaining)
        finally:
            with contextlib.suppress(ValueError, OSError):
                self.loop.remove_writer(self.fd)

    def resize(self, cols: int, rows: int) -> None:
        self.process.setwinsize(rows, cols)  # the kernel sends SIGWINCH to the foreground job

    def directories(self) -> tuple[str, ...]:
        """The shell's working directory and the foreground group leader's, where it is another (`sh -c 'cd /etc
        && exec sh'` types into a shell in /etc while the leader stays where it was: attack 5, C1)."""
        found: list[str] = []
        with contextlib.suppress(OSError):
            found.append(os.readlink(f"/proc/{self.pid}/cwd"))
        with contextlib.suppress(OSError):
            group = os.tcgetpgrp(self.fd)
            if group != self.pid:
                found.append(os.readlink(f"/proc/{group}/cwd"))
        return tuple(dict.fromkeys(found))

    def send_signal(self, signal_number: int) -> None:
        """Deliver to the foreground job, as the terminal's own keys would."""
        try:
            group = os.tcgetpgrp(self.fd)
        except OSError:
            group = self.pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal_number)

    def password_mode(self) -> bool:
        """True while a line is read with echo off (getpass, sudo, ssh; or a shell after `stty -echo`): canonical
        mode without ECHO. Line editors (readline) and full-screen programs turn canonical mode off."""
        attributes = self.line_settings()
        return attributes is not None and echo_off(attributes)

    def shell_reads_line(self) -> bool:
        """True while the foreground process group holds a shell reading its commands (sessions/reader.py): what
        is typed is a command, whatever the echo and the prompt say."""
        reading = self.foreground.current()
        return reading is not None and shell_reads_commands(reading)

    def reader_waiting(self, whole: int = 0) -> bool:
        """True while a process of the foreground group is blocked reading the terminal (sessions/reader.py); with
        `whole`, only while what reads would take all of `whole` bytes typed now (reader.reads_whole_line)."""
        reading = self.foreground.current()
        if reading is None:
            return False
        return reads_whole_line(reading, whole) if whole else reads_terminal(reading)

    def keeps_lines(self, length: int) -> bool | None:
        """True while input of `length` bytes typed now is read whole by what reads it (reader.keeps_lines): no
        program in the foreground can take a part of it and leave the rest to the shell; None while nothing waits
        on the terminal."""
        reading = self.foreground.current()
        return False if reading is None else keeps_lines(reading, length)

    def reader_wait(self) -> float:
        """Seconds to give the foreground program to reach its read of the terminal (reader.reader_wait)."""
        reading = self.foreground.current()
        return 0.0 if reading is None else reader_wait(reading)

    def line_settings(self) -> list[object] | None:
        """The terminal's input settings as the line discipline and readline use them now (termios: iflag,
        oflag, cflag, lflag, speeds, special characters); None when they cannot be read."""
        try:
            return list(termios.tcgetattr(self.fd))
        except termios.error:
            return None

    def interrupt_clears_line(self) -> bool:
        """Ctrl-C becomes SIGINT (ISIG is on): the shell or the tty driver discards the line being typed."""
        attributes = self.line_settings()
        return attributes is not None and interrupts(attributes)

    async def close(self, grace: float, first_signal: int | None = None) -> None:
        """Stop every process in the terminal's session and its containment unit (`first_signal`, HUP +
        TERM, grace, KILL), then close the PTY. Interactive shells ignore TERM but not HUP; stopped jobs need
        CONT to act on either."""
        members = session_members(self.pid)
        signals = [first_signal] if first_signal is not None else []
        signals += [signal.SIGHUP, signal.SIGCONT, signal.SIGTERM]
        for pid in members:
            for signal_number in signals:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal_number)
        members = sorted(set(members) | self.tree.signal_all(signals))
        deadline = time.monotonic() + grace
        while members and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            members = [pid for pid in members if _alive(pid)]
        for pid in session_members(self.pid) + members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        await self.tree.kill(grace)
        end = time.monotonic() + grace
        while not self.leader_exited and time.monotonic() < end:
            await asyncio.sleep(0.01)
            self._reap()
        self._shutdown_io()
        self.tree.release()  # the spawner thread a traced terminal kept may end now

    # -- events ------------------------------------------------------------------------------------------

    def _on_readable(self) -> None:
        try:
            data = os.read(self.fd, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            # EIO: every process closed the terminal's other side. Any other error ends the stream too, rather
            # than firing this callback forever.
            data = b""
        if not data:
            self.output_closed = True
            with contextlib.suppress(ValueError, OSError):
                self.loop.remove_reader(self.fd)
            self._maybe_end()
            return
        self.last_output = time.monotonic()
        self.on_output(data)

    def _on_leader_exit(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            self.loop.remove_reader(self.pidfd)
        self._reap()
        self._maybe_end()

    def _reap(self) -> None:
        if self.leader_exited:
            return
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            pid, status = self.pid, 0
        if pid == 0:
            return
        self.leader_exited = True
        self.exited_at = time.monotonic()
        if os.WIFSIGNALED(status):
            self.signal_name = _signal_name(os.WTERMSIG(status))
        else:
            self.exit_code = os.waitstatus_to_exitcode(status)
        # ptyprocess must not wait for (or signal) a pid we reaped.
        self.process.terminated = True
        self.process.exitstatus = self.exit_code
        self.process.signalstatus = None if self.signal_name is None else os.WTERMSIG(status)

    def _maybe_end(self) -> None:
        """The session ends when the leader has exited and its output is drained: the terminal closed, or
        quiet for DRAIN_QUIET (a background job may keep the terminal open; its output is still kept)."""
        if self.ended or not self.leader_exited:
            return
        now = time.monotonic()
        quiet = now - max(self.last_output, self.exited_at) >= DRAIN_QUIET
        if self.output_closed or quiet or now - self.exited_at >= DRAIN_MAX:
            self.ended = True
            self.foreground.close()
            self.on_exit(self.exit_code, self.signal_name)
            return
        self.loop.call_later(DRAIN_QUIET, self._maybe_end)

    def _shutdown_io(self) -> None:
        for descriptor in (self.fd, self.pidfd):
            with contextlib.suppress(ValueError, OSError):
                self.loop.remove_reader(descriptor)
        if not self.process.closed:
            with contextlib.suppress(OSError):
                self.process.fileobj.close()
            self.process.fd = -1
            self.process.closed = True
        with contextlib.suppress(OSError):
            os.close(self.pidfd)
        self.foreground.close()
        if not self.ended:
            self.ended = True
            self.on_exit(self.exit_code, self.signal_name)


def session_members(session_id: int) -> list[int]:
    """Every process whose session is `session_id` (the PTY's leader and all its jobs)."""
    return processes_where(3, session_id)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            stat = stat_file.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] != b"Z"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"
