"""Who reads a local terminal's line (adr/0026): whether the foreground process group holds a shell reading its
commands, as opposed to a program asking for a password.

A shell that turned echo off (`stty -echo`, in sh or in bash without line editing) reads its command lines with
echo off, and may print any prompt (`PS1='Password: '`): its lines are commands, recorded in full. A program that
reads a password (sudo, passwd, ssh, getpass, `read -s` in a script) is not a shell reading its commands.

A shell is known by its executable (the name, or the same file as a shell in /etc/shells: a link to one is
one), so renaming it (`exec -a passwd sh`, a symlink called `passwd`) changes nothing. It reads its commands from
the terminal when it has neither `-c` nor a script (or its script is the terminal: `sh /dev/stdin`), or when
`-s` or `-i` says so. A copy of a shell under another name is an unknown program, which is arbitrary code to the
policy already (guarded mode runs it as tier 1): it gains nothing from the log that it could not do directly.

Who reads a line matters as much as whether someone does (review W1/W2, adr/0026 Round 5): a program that takes a
part of the line (`dd bs=1 count=1`, `head -c1`, less quitting on `q`, `read -n1`) leaves the rest in the
terminal's input queue, and the shell runs it. A line is kept whole only by a reader that asks for at least all
of it in one read(2), by a shell (or Python's REPL) reading its commands through its line editor, or by a program
known to read a password through to the end of its line a byte at a time (sudo, ssh and their kind: the
installed file, not a copy under its name).

Each decision is made on a reading of the foreground group (sessions/foreground.py: every process below the
terminal's leader, each thread's system call), which a terminal reuses while nothing in its tree has run.
"""

from __future__ import annotations

import functools
import os
import re

from relay_shell.sessions.foreground import Member, Reading

SHELLS = frozenset(
    {"sh", "bash", "rbash", "dash", "ash", "hush", "zsh", "ksh", "ksh93", "mksh", "pdksh", "oksh", "posh", "yash"}
    | {"fish", "csh", "tcsh"}
)
_TERMINAL_SCRIPTS = ("/dev/stdin", "/dev/tty", "/dev/fd/0", "/proc/self/fd/0", "/dev/pts/", "-")
_OPTION_VALUES = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})
_MACHINE = os.uname().machine
READ_CALLS = {"x86_64": (0, 19), "aarch64": (63, 65)}.get(_MACHINE, ())  # read(2), readv(2)
READ = {"x86_64": 0, "aarch64": 63}.get(_MACHINE, -1)  # read(2): its third argument is how many bytes it asks for
# Waiting for input without reading yet: poll, select, pselect6, ppoll, epoll_wait, epoll_pwait, epoll_pwait2.
WAIT_CALLS = {"x86_64": (7, 23, 270, 271, 232, 281, 441), "aarch64": (73, 72, 22, 441)}.get(_MACHINE, ())
_WATCHED_CALLS = frozenset((*READ_CALLS, *WAIT_CALLS))
_PYTHON = re.compile(r"python[0-9.]*")
KEEPS_WAIT = 0.05  # seconds a program that is about to read the terminal is given to reach its read
SHELL_WAIT = 0.5  # the same for the shell itself in the foreground (after its prompt, before its read)
_BIN_DIRECTORIES = ("/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin", "/usr/local/sbin")
# Programs that ask for a password at the terminal and are commonly set-user-ID (their /proc entries are closed
# to a server that is not root); matched by the kernel's name of the process (15 characters at most).
PASSWORD_PROGRAMS = frozenset({"sudo", "su", "passwd", "chsh", "chfn", "pkexec", "gpasswd", "newgrp", "doas", "login"})
# Programs that read a password a byte at a time up to the end of its line (sudo's tgetpass, OpenSSH's
# readpassphrase): a read(2) of one byte is theirs to loop on, not a reader that stops early.
LINE_PASSWORD_PROGRAMS = PASSWORD_PROGRAMS | {"ssh", "ssh-keygen", "ssh-add", "scp", "sftp"}


def shell_reads_commands(reading: Reading) -> bool:
    """Whether a process of the foreground group is a shell reading its commands from the terminal."""
    return any(_shell_reading_commands(reading, member) for member in reading.members)


def reads_terminal(reading: Reading) -> bool:
    """Whether a process of the foreground group is blocked reading its terminal now: in read(2) or readv(2) on a
    descriptor that is its controlling terminal (or /dev/tty). A prompt on the screen with echo off is not
    enough (review A1): `stty -echo; printf 'Password: '; sleep 3` shows one while nothing reads, and the line
    typed meanwhile is read by the shell afterwards. A process the server may not look at (another user's: a
    set-user-ID program run by a server that is not root) counts as reading when it is one of the programs that
    ask for passwords (adr/0026)."""
    for member in reading.members:
        main = [fields for task, fields in member.threads if task == member.pid]
        if not main:
            continue
        fields = main[0]
        if fields is None:
            if member.name in PASSWORD_PROGRAMS:
                return True
            continue
        if len(fields) < 2 or not fields[0].isdigit() or int(fields[0]) not in READ_CALLS:
            continue
        try:
            device = _device(member.pid, int(fields[1], 16))
        except ValueError:
            continue
        if device in (member.terminal, os.makedev(5, 0)):
            return True
    return False


def reads_whole_line(reading: Reading, length: int) -> bool:
    """Whether input of `length` bytes typed now goes whole to one program of the foreground group that asked for
    a password: some process is blocked reading the terminal, and every process of the group waiting on it is in
    a read(2) of at least `length` bytes or is a program that reads a password to the end of its line. A reader
    of fewer bytes that stops (dd bs=1 count=1) would leave the rest to the shell."""
    readers = terminal_waiters(reading)
    return bool(readers) and all(
        (call == READ and count >= length) or _password_program(reading, pid) for pid, call, count in readers
    )


def keeps_lines(reading: Reading, length: int) -> bool | None:
    """Whether input of `length` bytes typed now is read whole by what reads it: each process of the foreground
    group that waits on the terminal is a shell (or Python's REPL) reading its commands through its line editor,
    reads at least `length` bytes in one read(2), or reads a password to the end of its line. None when nothing
    waits on the terminal right now (a program is busy, or the shell has not reached its read after its prompt):
    the caller decides how long to wait for one (reader_wait), never blocking the event loop here."""
    readers = terminal_waiters(reading)
    if not readers:
        return None
    for pid, call, count in readers:
        if call == READ and count >= length:
            continue
        if call in WAIT_CALLS and _reads_own_commands(reading, pid):
            continue
        if _password_program(reading, pid):
            continue
        return False
    return True


def reader_wait(reading: Reading) -> float:
    """How long a program that is about to read the terminal is given to reach its read: longer for the shell
    itself in the foreground (on a loaded machine the moment between its prompt and its read is longer)."""
    return SHELL_WAIT if shell_reads_commands(reading) else KEEPS_WAIT


def terminal_waiters(reading: Reading) -> list[tuple[int, int, int]]:
    """(pid, system call, its third argument) of every thread of every process of the group blocked in a read or
    wait on its terminal, as /proc/PID/task/TID/syscall shows it (a thread other than the main one may be the
    reader); a process whose entry is closed to the server (set-user-ID) counts as a one-byte reader."""
    known = reading.facts.get(("waiters", 0))
    if known is not None:
        return known  # type: ignore[return-value]
    found = []
    for member in [*reading.members, *reading.outsiders]:
        for _task, fields in member.threads:
            if fields is None:
                found.append((member.pid, READ, 1))
                break
            waiting = _waiting_on_terminal(member, fields)
            if waiting is not None:
                found.append(waiting)
    reading.facts[("waiters", 0)] = found
    return found


def _waiting_on_terminal(member: Member, fields: list[str]) -> tuple[int, int, int] | None:
    """(pid, call, count) when a thread's /proc syscall line is a read or wait on the process's terminal."""
    if len(fields) < 4 or not fields[0].isdigit() or int(fields[0]) not in _WATCHED_CALLS:
        return None
    call = int(fields[0])
    try:
        count = int(fields[3], 16)
        # Which descriptors a poll or select watches is in the process's memory: any of its standard
        # descriptors being the terminal is taken as waiting on it.
        watched = (0, 1, 2) if call in WAIT_CALLS else (int(fields[1], 16),)
    except ValueError:
        return None
    for descriptor in watched:
        if _device(member.pid, descriptor) in (member.terminal, os.makedev(5, 0)):
            return (member.pid, call, count)
    return None


def _device(pid: int, descriptor: int) -> int | None:
    """The device the process's descriptor is open on (None: not there, or not ours to look at)."""
    try:
        return os.stat(f"/proc/{pid}/fd/{descriptor}").st_rdev
    except OSError:
        return None


def _reads_own_commands(reading: Reading, pid: int) -> bool:
    """A shell reading its commands, or Python's interactive prompt: what it reads is its own next command.
    Memoised on the reading, as what it is derived from (the executable, argv) is: a send asks three times."""
    known = reading.facts.get(("own commands", pid))
    if known is None:
        known = reading.facts[("own commands", pid)] = _own_commands(reading, pid)
    return known  # type: ignore[return-value]


def _own_commands(reading: Reading, pid: int) -> bool:
    arguments = _arguments(reading, pid)
    if _is_shell(reading, pid, arguments):
        return reads_commands(arguments)
    program = _executable(reading, pid)
    if isinstance(program, OSError):
        return False
    return bool(_PYTHON.fullmatch(program[0])) and _python_reads_commands(arguments)


def _python_reads_commands(arguments: list[str]) -> bool:
    """From python's argv: the interactive prompt (no -c, -m or script; or -i)."""
    index = 1
    while index < len(arguments):
        word = arguments[index]
        if word == "-" or not word.startswith("-"):
            return word == "-" or "-i" in arguments[1:index]
        if word in ("-W", "-X", "--check-hash-based-pycs"):
            index += 2
            continue
        letters = word[1:]
        if "c" in letters or "m" in letters:
            return "i" in letters.split("c")[0].split("m")[0]
        index += 1
    return True


def _password_program(reading: Reading, pid: int) -> bool:
    """The process runs one of the installed programs that read a password to the end of its line (the file
    itself: a copy or a link elsewhere under the same name is not it). Closed to the server (set-user-ID, the
    server not root): by the kernel's name of the process."""
    program = _executable(reading, pid)
    if isinstance(program, PermissionError):
        return _name(reading, pid) in PASSWORD_PROGRAMS
    if isinstance(program, OSError):
        return False
    return program[1] in _installed(LINE_PASSWORD_PROGRAMS)


@functools.cache
def _installed(names: frozenset[str]) -> frozenset[tuple[int, int]]:
    identities = set()
    for directory in _BIN_DIRECTORIES:
        for name in names:
            try:
                status = os.stat(os.path.join(directory, name))
            except OSError:
                continue
            identities.add((status.st_dev, status.st_ino))
    return frozenset(identities)


def reads_commands(arguments: list[str]) -> bool:
    """From a shell's argv: no `-c` and no script other than the terminal, or `-s`/`-i`."""
    if arguments and os.path.basename(arguments[0]) == "busybox":
        arguments = arguments[1:]  # `busybox sh …`
    index = 1
    while index < len(arguments):
        word = arguments[index]
        if word == "--":
            index += 1
            break
        if word in _OPTION_VALUES:
            index += 2
            continue
        if word.startswith("--"):
            index += 1
            continue
        if word.startswith(("-", "+")) and len(word) > 1:
            letters = word[1:]
            if word[0] == "-" and ("s" in letters or "i" in letters):
                return True
            if word[0] == "-" and "c" in letters:
                return False
            index += 2 if letters[-1] in "oO" else 1  # `-eo pipefail`: the option's value follows
            continue
        break
    if index >= len(arguments):
        return True
    return arguments[index].startswith(_TERMINAL_SCRIPTS)


def _shell_reading_commands(reading: Reading, member: Member) -> bool:
    arguments = _arguments(reading, member.pid)
    return _is_shell(reading, member.pid, arguments) and reads_commands(arguments)


def _is_shell(reading: Reading, pid: int, arguments: list[str]) -> bool:
    program = _executable(reading, pid)
    if isinstance(program, OSError):
        # Not ours to read (a setuid program such as sudo, run by a server that is not root): its name.
        return _name(reading, pid) in SHELLS
    executable, identity = program
    if executable == "busybox":  # one binary, many programs: the one it runs is the name it was called by
        called = [os.path.basename(word) for word in arguments[:2]]
        return bool(set(called) & {"sh", "ash", "hush"})
    return executable in SHELLS or identity in _installed_shells()


def _executable(reading: Reading, pid: int) -> tuple[str, tuple[int, int]] | OSError:
    """The name of the file the process runs and its device and inode, or the error reading them gave."""
    known = reading.facts.get(("exe", pid))
    if known is None:
        try:
            status = os.stat(f"/proc/{pid}/exe")
            known = (os.path.basename(os.readlink(f"/proc/{pid}/exe")), (status.st_dev, status.st_ino))
        except OSError as error:
            known = error
        reading.facts[("exe", pid)] = known
    return known  # type: ignore[return-value]


def _name(reading: Reading, pid: int) -> str:
    return next((member.name for member in [*reading.members, *reading.outsiders] if member.pid == pid), "")


def _arguments(reading: Reading, pid: int) -> list[str]:
    known = reading.facts.get(("arguments", pid))
    if known is None:
        try:
            raw = reading.files.read(f"/proc/{pid}/cmdline")
            known = [word.decode(errors="replace") for word in raw.split(b"\0")[:-1]] or [""]
        except OSError:
            known = []
        reading.facts[("arguments", pid)] = known
    return known  # type: ignore[return-value]


@functools.cache
def _installed_shells() -> frozenset[tuple[int, int]]:
    """The files of the shells /etc/shells lists (and the usual paths), by device and inode."""
    paths = {f"/bin/{name}" for name in SHELLS} | {f"/usr/bin/{name}" for name in SHELLS}
    try:
        with open("/etc/shells") as listing:
            paths |= {line.strip() for line in listing if line.startswith("/")}
    except OSError:
        pass
    identities = set()
    for path in paths:
        try:
            status = os.stat(path)
        except OSError:
            continue
        identities.add((status.st_dev, status.st_ino))
    return frozenset(identities)
