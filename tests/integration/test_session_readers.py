"""Who reads a terminal's line, and whether whole (sessions/reader.py; review W1/W2/S1, adr/0026 Round 5): real
programs in a real PTY, read from /proc."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ptyprocess import PtyProcess

from relay_shell.sessions.foreground import ForegroundWatch, ProcFiles, Reading, read_group
from relay_shell.sessions.reader import KEEPS_WAIT, keeps_lines, reader_wait, reads_whole_line

LINE = 40  # bytes of a typed line


def now(group: int, leader: int | None = None) -> Reading:
    """The group as /proc shows it now, below the terminal's `leader` (or by scanning every process)."""
    return read_group(group, leader, ProcFiles(keep=False))


@pytest.fixture
def terminal() -> Iterator[list[PtyProcess]]:
    started: list[PtyProcess] = []
    yield started
    for process in started:
        process.kill(9)


def reading(started: list[PtyProcess], argv: list[str]) -> int:
    """Start `argv` in a PTY and wait until it waits on the terminal; the terminal's foreground group (the
    terminal's leader is `started[-1].pid`)."""
    process = PtyProcess.spawn(argv, env={**os.environ, "PS1": "READY> "})
    started.append(process)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.05)
        with open(f"/proc/{process.pid}/syscall") as syscall_file:
            call = syscall_file.read().split()[0]
        if call in ("0", "7", "23", "270", "271"):
            time.sleep(0.05)
            return os.tcgetpgrp(process.fd)
    raise AssertionError(f"{argv} never waited on its terminal")


@pytest.mark.parametrize(
    "argv",
    [
        ["dd", "bs=1", "count=1"],
        ["head", "-c", "2"],
        ["bash", "--norc", "-c", "read -n1 x"],
        ["less", "/etc/hostname"],
    ],
)
def test_a_reader_of_a_part_keeps_no_line_whole(terminal: list[PtyProcess], argv: list[str]) -> None:
    group = reading(terminal, argv)
    for leader in (None, terminal[-1].pid):  # found by scanning every process, and below the terminal's leader
        assert keeps_lines(now(group, leader), LINE) is False  # a reader of a part waits (None: nobody waits)
        assert not reads_whole_line(now(group, leader), LINE)


@pytest.mark.parametrize(
    "argv",
    [
        ["bash", "--norc", "--noprofile", "-i"],
        ["sh", "-i"],
        [sys.executable, "-q"],
        ["cat"],
        ["bash", "--norc", "-c", "read -s x"],
        [sys.executable, "-c", "import getpass; getpass.getpass()"],
    ],
)
def test_a_shell_a_repl_or_a_reader_of_the_whole_line_keeps_it(terminal: list[PtyProcess], argv: list[str]) -> None:
    group = reading(terminal, argv)
    assert keeps_lines(now(group), LINE) is True and keeps_lines(now(group, terminal[-1].pid), LINE) is True


def test_a_one_byte_password_program_reads_the_whole_line_and_a_copy_of_dd_under_its_name_does_not(
    terminal: list[PtyProcess], tmp_path: Path
) -> None:
    keygen = reading(terminal, ["ssh-keygen", "-q", "-t", "ed25519", "-f", str(tmp_path / "key")])
    assert reads_whole_line(now(keygen, terminal[-1].pid), LINE)  # it reads a byte at a time to the end of its line
    impostor = tmp_path / "ssh-keygen"
    shutil.copy(shutil.which("dd") or "/bin/dd", impostor)
    copied = reading(terminal, [str(impostor), "bs=1", "count=1"])
    assert not reads_whole_line(now(copied, terminal[-1].pid), LINE)
    assert keeps_lines(now(copied, terminal[-1].pid), LINE) is False


def test_a_thread_that_reads_one_byte_beside_a_main_thread_that_reads_the_line_is_seen(
    terminal: list[PtyProcess],
) -> None:
    code = "import os, threading; threading.Thread(target=os.read, args=(0, 1)).start(); os.read(0, 4096)"
    group = reading(terminal, [sys.executable, "-c", code])
    time.sleep(0.2)  # the second thread reaches its read
    assert keeps_lines(now(group, terminal[-1].pid), LINE) is False
    assert not reads_whole_line(now(group, terminal[-1].pid), LINE)


def test_nothing_waiting_on_the_terminal_is_said_so_and_the_wait_is_the_callers(terminal: list[PtyProcess]) -> None:
    """A busy foreground program: keeps_lines answers at once (None) instead of sleeping on the event loop's
    thread; how long to wait for a reader is reader_wait's answer, spent by the caller with asyncio."""
    process = PtyProcess.spawn(["sleep", "30"])
    terminal.append(process)
    time.sleep(0.2)
    group = os.tcgetpgrp(process.fd)
    started = time.monotonic()
    assert keeps_lines(now(group, process.pid), LINE) is None
    assert time.monotonic() - started < 0.04  # no wait inside (it waited 50 ms before)
    assert reader_wait(now(group)) == KEEPS_WAIT


LATE_ONE_BYTE_READERS = {
    "a thread": "threading.Thread(target=lambda: (time.sleep(2), os.read(0, 1))).start()",
    "a child": "threading.Thread(target=lambda: (time.sleep(2), subprocess.run(['dd', 'bs=1', 'count=1']))).start()",
    # The process's threads change: the next reading must list them again, not take the last reading's (one more
    # thread; or as many threads, one of them new).
    "a new thread": "threading.Thread(target=lambda: (time.sleep(2), threading.Thread(target=os.read, args=(0, 1))"
    ".start(), time.sleep(60))).start()",
    "a thread in place of another": "threading.Thread(target=lambda: (time.sleep(2), threading.Thread(target=os.read,"
    " args=(0, 1)).start())).start()",
}


@pytest.mark.parametrize("late", LATE_ONE_BYTE_READERS.values(), ids=LATE_ONE_BYTE_READERS.keys())
def test_a_reading_is_reused_only_until_a_process_below_the_terminal_runs(
    terminal: list[PtyProcess], late: str
) -> None:
    """A terminal's reading of its foreground group (sessions/foreground.py) is reused while no thread below the
    terminal's leader has run: here the main thread reads the whole line while a second thread sleeps, then wakes
    and reads one byte itself or starts dd to read one. The reading that said the line was kept must not outlive
    the wake-up (with the pgid alone as its key, it did: the group is the same)."""
    code = f"import os, subprocess, threading, time; {late}; os.read(0, 4096)"
    reading(terminal, [sys.executable, "-c", code])
    process = terminal[-1]
    watch = ForegroundWatch(process.fd, process.pid)
    first = watch.current()
    assert first is not None and first.reusable, first
    assert keeps_lines(first, LINE) is True  # the main thread reads 4096 bytes; the other sleeps
    assert watch.current() is first  # nothing below the leader has run: the same reading, not read again
    deadline = time.monotonic() + 10
    while not one_byte_read_below(process.pid):
        assert time.monotonic() < deadline, "the late reader never reached its read"
        time.sleep(0.02)
    later = watch.current()
    assert later is not first and later is not None
    assert keeps_lines(later, LINE) is False
    # Each process's threads as the reading took them are its threads now (listed or not).
    for pid, tasks in later.listed.items():
        assert sorted(tasks) == sorted(os.listdir(f"/proc/{pid}/task")), (pid, tasks)
    watch.close()


def one_byte_read_below(leader: int) -> bool:
    """Whether a thread of `leader` or of one of its children is in read(2) of one byte from descriptor 0."""
    children = [int(child) for task in Path(f"/proc/{leader}/task").iterdir() for child in children_of(task)]
    for pid in [leader, *children]:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                fields = (task / "syscall").read_text().split()
                if fields[:2] == ["0", "0x0"] and fields[3:4] == ["0x1"]:
                    return True
    return False


def children_of(task: Path) -> list[str]:
    """The children a thread started (/proc/PID/task/TID/children: each thread's own)."""
    try:
        return (task / "children").read_text().split()
    except OSError:
        return []
