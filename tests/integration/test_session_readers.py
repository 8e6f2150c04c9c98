"""Who reads a terminal's line, and whether whole (sessions/reader.py; review W1/W2/S1, adr/0026 Round 5): real
programs in a real PTY, read from /proc."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ptyprocess import PtyProcess

from relay_shell.sessions.reader import keeps_lines, reads_whole_line

LINE = 40  # bytes of a typed line


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
        assert not keeps_lines(group, LINE, leader)
        assert not reads_whole_line(group, LINE, leader)


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
    assert keeps_lines(group, LINE) and keeps_lines(group, LINE, terminal[-1].pid)


def test_a_one_byte_password_program_reads_the_whole_line_and_a_copy_of_dd_under_its_name_does_not(
    terminal: list[PtyProcess], tmp_path: Path
) -> None:
    keygen = reading(terminal, ["ssh-keygen", "-q", "-t", "ed25519", "-f", str(tmp_path / "key")])
    assert reads_whole_line(keygen, LINE, terminal[-1].pid)  # it reads a byte at a time to the end of its line
    impostor = tmp_path / "ssh-keygen"
    shutil.copy(shutil.which("dd") or "/bin/dd", impostor)
    copied = reading(terminal, [str(impostor), "bs=1", "count=1"])
    assert not reads_whole_line(copied, LINE, terminal[-1].pid)
    assert not keeps_lines(copied, LINE, terminal[-1].pid)


def test_a_thread_that_reads_one_byte_beside_a_main_thread_that_reads_the_line_is_seen(
    terminal: list[PtyProcess],
) -> None:
    code = "import os, threading; threading.Thread(target=os.read, args=(0, 1)).start(); os.read(0, 4096)"
    group = reading(terminal, [sys.executable, "-c", code])
    time.sleep(0.2)  # the second thread reaches its read
    assert not keeps_lines(group, LINE, terminal[-1].pid)
    assert not reads_whole_line(group, LINE, terminal[-1].pid)
