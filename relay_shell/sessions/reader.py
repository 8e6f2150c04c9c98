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
"""

from __future__ import annotations

import functools
import os
import re

SHELLS = frozenset(
    {"sh", "bash", "rbash", "dash", "ash", "hush", "zsh", "ksh", "ksh93", "mksh", "pdksh", "oksh", "posh", "yash"}
    | {"fish", "csh", "tcsh"}
)
_TERMINAL_SCRIPTS = ("/dev/stdin", "/dev/tty", "/dev/fd/0", "/proc/self/fd/0", "/dev/pts/", "-")
_OPTION_VALUES = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})
_READ_CALLS = {"x86_64": (0, 19), "aarch64": (63, 65)}  # read(2), readv(2)
_READ = {"x86_64": 0, "aarch64": 63}  # read(2): its third argument is how many bytes it asks for
# Waiting for input without reading yet: poll, select, pselect6, ppoll, epoll_wait, epoll_pwait, epoll_pwait2.
_WAIT_CALLS = {"x86_64": (7, 23, 270, 271, 232, 281, 441), "aarch64": (73, 72, 22, 441)}
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


def shell_reads_commands(process_group: int, leader: int | None = None) -> bool:
    """Whether a process of `process_group` is a shell reading its commands from the terminal (found below the
    terminal's `leader` when given: group_members)."""
    for pid in group_members(process_group, leader):
        arguments = _arguments(pid)
        if _is_shell(pid, arguments) and reads_commands(arguments):
            return True
    return False


def reads_terminal(process_group: int, leader: int | None = None) -> bool:
    """Whether a process of `process_group` is blocked reading its terminal now: in read(2) or readv(2) on a
    descriptor that is its controlling terminal (or /dev/tty). A prompt on the screen with echo off is not
    enough (review A1): `stty -echo; printf 'Password: '; sleep 3` shows one while nothing reads, and the line
    typed meanwhile is read by the shell afterwards. A process the server may not look at (another user's: a
    set-user-ID program run by a server that is not root) counts as reading when it is one of the programs that
    ask for passwords (adr/0026)."""
    calls = _READ_CALLS.get(os.uname().machine, ())
    for pid in group_members(process_group, leader):
        try:
            with open(f"/proc/{pid}/syscall") as syscall_file:
                fields = syscall_file.read().split()
        except PermissionError:
            if _command_name(pid) in PASSWORD_PROGRAMS:
                return True
            continue
        except OSError:
            continue
        if len(fields) < 2 or not fields[0].isdigit() or int(fields[0]) not in calls:
            continue
        try:
            descriptor = int(fields[1], 16)
            device = os.stat(f"/proc/{pid}/fd/{descriptor}").st_rdev
        except (OSError, ValueError):
            continue
        if device in (_controlling_terminal(pid), os.makedev(5, 0)):
            return True
    return False


def reads_whole_line(process_group: int, length: int, leader: int | None = None) -> bool:
    """Whether input of `length` bytes typed now goes whole to one program of `process_group` that asked for a
    password: some process is blocked reading the terminal, and every process of the group waiting on it is in a
    read(2) of at least `length` bytes or is a program that reads a password to the end of its line. A reader
    of fewer bytes that stops (dd bs=1 count=1) would leave the rest to the shell."""
    readers = _terminal_waiters(process_group, leader)
    return bool(readers) and all(
        (call == _READ.get(os.uname().machine) and count >= length) or _password_program(pid)
        for pid, call, count in readers
    )


def keeps_lines(process_group: int, length: int, leader: int | None = None) -> bool | None:
    """Whether input of `length` bytes typed now is read whole by what reads it: each process of the foreground
    group that waits on the terminal is a shell (or Python's REPL) reading its commands through its line editor,
    reads at least `length` bytes in one read(2), or reads a password to the end of its line. None when nothing
    waits on the terminal right now (a program is busy, or the shell has not reached its read after its prompt):
    the caller decides how long to wait for one (reader_wait), never blocking the event loop here."""
    readers = _terminal_waiters(process_group, leader)
    if not readers:
        return None
    machine = os.uname().machine
    for pid, call, count in readers:
        if call == _READ.get(machine) and count >= length:
            continue
        if call in _WAIT_CALLS.get(machine, ()) and _reads_own_commands(pid):
            continue
        if _password_program(pid):
            continue
        return False
    return True


def reader_wait(process_group: int, leader: int | None = None) -> float:
    """How long a program that is about to read the terminal is given to reach its read: longer for the shell
    itself in the foreground (on a loaded machine the moment between its prompt and its read is longer)."""
    return SHELL_WAIT if shell_reads_commands(process_group, leader) else KEEPS_WAIT


def group_members(process_group: int, leader: int | None) -> list[int]:
    """The processes of `process_group`: found below the terminal's `leader` (a few /proc reads on every send),
    or, when the group's own leader is not among them (it left the tree: re-parented) or no leader is known,
    by scanning every process."""
    if leader is None:
        return processes_where(2, process_group)
    members = []
    pending = [leader]
    seen: set[int] = set()
    while pending and len(seen) < 4096:
        pid = pending.pop()
        if pid in seen:
            continue
        seen.add(pid)
        if _stat_field(pid, 2) == process_group:
            members.append(pid)
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/children") as children:
                    pending.extend(int(child) for child in children.read().split())
            except OSError:
                continue
    return members if process_group in members else processes_where(2, process_group)


def _stat_field(pid: int, field: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            stat = stat_file.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    return int(fields[field]) if len(fields) > field and fields[0] != b"Z" else None


def _terminal_waiters(process_group: int, leader: int | None = None) -> list[tuple[int, int, int]]:
    """(pid, system call, its third argument) of every thread of every process of the group blocked in a read or
    wait on its terminal, as /proc/PID/task/TID/syscall shows it (a thread other than the main one may be the
    reader); a process whose entry is closed to the server (set-user-ID) counts as a one-byte reader."""
    machine = os.uname().machine
    found = []
    for pid in group_members(process_group, leader):
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/syscall") as syscall_file:
                    fields = syscall_file.read().split()
            except PermissionError:
                found.append((pid, _READ.get(machine, -1), 1))
                break
            except OSError:
                continue
            waiting = _waiting_on_terminal(pid, fields)
            if waiting is not None:
                found.append(waiting)
    return found


def _waiting_on_terminal(pid: int, fields: list[str]) -> tuple[int, int, int] | None:
    """(pid, call, count) when a thread's /proc syscall line is a read or wait on the process's terminal."""
    machine = os.uname().machine
    calls = (*_READ_CALLS.get(machine, ()), *_WAIT_CALLS.get(machine, ()))
    if len(fields) < 4 or not fields[0].isdigit() or int(fields[0]) not in calls:
        return None
    call = int(fields[0])
    try:
        count = int(fields[3], 16)
        if call in _WAIT_CALLS.get(machine, ()):
            # Which descriptors a poll or select watches is in the process's memory: any of its standard
            # descriptors being the terminal is taken as waiting on it.
            watched = [f"/proc/{pid}/fd/{descriptor}" for descriptor in (0, 1, 2)]
        else:
            watched = [f"/proc/{pid}/fd/{int(fields[1], 16)}"]
    except ValueError:
        return None
    terminal = _controlling_terminal(pid)
    for path in watched:
        try:
            device = os.stat(path).st_rdev
        except OSError:
            continue
        if device in (terminal, os.makedev(5, 0)):
            return (pid, call, count)
    return None


def _reads_own_commands(pid: int) -> bool:
    """A shell reading its commands, or Python's interactive prompt: what it reads is its own next command."""
    arguments = _arguments(pid)
    if _is_shell(pid, arguments):
        return reads_commands(arguments)
    try:
        executable = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return False
    return bool(_PYTHON.fullmatch(executable)) and _python_reads_commands(arguments)


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


def _password_program(pid: int) -> bool:
    """The process runs one of the installed programs that read a password to the end of its line (the file
    itself: a copy or a link elsewhere under the same name is not it). Closed to the server (set-user-ID, the
    server not root): by the kernel's name of the process."""
    try:
        identity = os.stat(f"/proc/{pid}/exe")
    except PermissionError:
        return _command_name(pid) in PASSWORD_PROGRAMS
    except OSError:
        return False
    return (identity.st_dev, identity.st_ino) in _installed(LINE_PASSWORD_PROGRAMS)


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


def _controlling_terminal(pid: int) -> int:
    """The device number of the process's controlling terminal (/proc/PID/stat's tty_nr), 0 when none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            stat = stat_file.read()
    except OSError:
        return 0
    fields = stat[stat.rfind(b")") + 2 :].split()
    return int(fields[4]) if len(fields) > 4 else 0


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


def processes_where(field: int, value: int) -> list[int]:
    """Live processes whose /proc/PID/stat field (counted after the command name: 0 state, 1 ppid, 2 process
    group, 3 session) is `value`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat_file:
                stat = stat_file.read()
        except OSError:
            continue
        # The command name may contain spaces and parentheses: the fields start after its last `)`.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > field and int(fields[field]) == value and fields[0] != b"Z":
            found.append(int(entry))
    return found


def _is_shell(pid: int, arguments: list[str]) -> bool:
    try:
        executable = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        identity = os.stat(f"/proc/{pid}/exe")
    except OSError:
        # Not ours to read (a setuid program such as sudo, run by a server that is not root): its name.
        return _command_name(pid) in SHELLS
    if executable == "busybox":  # one binary, many programs: the one it runs is the name it was called by
        called = [os.path.basename(word) for word in arguments[:2]]
        return bool(set(called) & {"sh", "ash", "hush"})
    return executable in SHELLS or (identity.st_dev, identity.st_ino) in _installed_shells()


def _command_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            stat = stat_file.read()
    except OSError:
        return ""
    return stat[stat.find(b"(") + 1 : stat.rfind(b")")].decode(errors="replace")


def _arguments(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            raw = cmdline.read()
    except OSError:
        return []
    return [word.decode(errors="replace") for word in raw.split(b"\0")[:-1]] or [""]


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
