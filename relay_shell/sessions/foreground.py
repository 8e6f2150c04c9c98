"""The foreground process group of a local terminal as /proc shows it, read once and reused while it provably has
not changed (adr/0026 Round 6, adr/0030 Round 7). Who waits on the terminal, in which call and for how many bytes
decides whether a typed line is kept whole (sessions/reader.py); a send asks before it is prepared, while it is
prepared and under the input lock just before the write, and each reading of the group took ~70 µs.

A reading holds every process below the terminal's leader (members of the group or not: a fork, an exec or a setpgid
by any of them changes the group) and every other thread of the session's containment unit (a process that left the
session with setsid, re-parented, may still read the terminal: attack 4, P1), with each thread's system call
(/proc/PID/task/TID/syscall) and, read before it, the thread's schedstat: the CPU time it has run, its time waiting
to run and how many times it was switched in. It is reused while the terminal's foreground group is the same and
every thread's schedstat is unchanged. A thread that has not been switched in since (the count) and was not on a CPU
when it was read (its syscall line shows a blocked call, read after the schedstat; a thread switched out in between
shows more CPU time) has not run since: it has not left its system call, read, forked, exec'd, made a thread,
changed a descriptor or set a process group, so nothing the reading holds or leads to has changed. Not reused: a
reading with a thread that was running, a process closed to the server, a group found by scanning every process (its
leader was re-parented), or a kernel without scheduler statistics (a count of 0).

The files are kept open and read with pread: a few µs less each than opening them again, and an open /proc file of
a process that ended fails rather than read a new process given the same pid (the file is then opened again).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

# /proc files a terminal keeps open (5 for a process of one thread: the REPL; 10 for a shell and its job): beyond
# this (a large tree), each further file is opened for each read. Sessions may be up to 1,024, each with its own.
KEPT_FILES = 16
MAX_WALKED = 4096  # processes followed below the terminal's leader
_READ_SIZE = 65536


class ProcFiles:
    """/proc files read with pread from descriptors kept open (`keep`), or opened for each read."""

    def __init__(self, keep: bool) -> None:
        self.keep = keep
        self.descriptors: dict[str, int] = {}
        self.used: set[str] = set()

    def read(self, path: str) -> bytes:
        """The file's content now; OSError as open(2) or read(2) gives it (PermissionError: closed to us)."""
        descriptor = self.descriptors.get(path)
        if descriptor is not None:
            try:
                self.used.add(path)
                return _read_all(descriptor)
            except OSError:
                # The process ended (ESRCH); the path may name a new one by now: read it afresh once.
                self._drop(path)
        if not self.keep or len(self.descriptors) >= KEPT_FILES:
            descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                return _read_all(descriptor)
            finally:
                os.close(descriptor)
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self.descriptors[path] = descriptor
        self.used.add(path)
        try:
            return _read_all(descriptor)
        except OSError:
            self._drop(path)
            raise

    def prune(self) -> None:
        """Close the files not read since the last prune."""
        for path in [path for path in self.descriptors if path not in self.used]:
            self._drop(path)
        self.used = set()

    def close(self) -> None:
        for path in list(self.descriptors):
            self._drop(path)

    def _drop(self, path: str) -> None:
        descriptor = self.descriptors.pop(path, None)
        if descriptor is not None:
            os.close(descriptor)


def _read_all(descriptor: int) -> bytes:
    data = os.pread(descriptor, _READ_SIZE, 0)
    while len(data) % _READ_SIZE == 0 and data:  # a long command line
        more = os.pread(descriptor, _READ_SIZE, len(data))
        if not more:
            break
        data += more
    return data


@dataclass
class Member:
    """A process of the group: its controlling terminal (tty_nr), its name and, thread by thread, its system call
    as /proc shows it (the split syscall line; None when the server may not look: a set-user-ID program)."""

    pid: int
    terminal: int
    name: str
    threads: list[tuple[int, list[str] | None]]


@dataclass
class Reading:
    """The foreground group `group` read at one moment; `facts` memoises what sessions/reader.py derives from it
    (valid as long as the reading is: nothing it holds has changed)."""

    group: int
    members: list[Member]
    files: ProcFiles
    runs: dict[str, bytes] = field(default_factory=dict)  # each walked thread's schedstat, as read
    reusable: bool = False
    # Threads of the session's containment unit outside the group and not stopped (attack 4, P1: `setsid head -c1
    # &` re-parented to init still holds the terminal and reads it, while the shell waits for its line).
    outsiders: list[Member] = field(default_factory=list)
    leader: int | None = None
    terminal: int = 0  # the session's terminal (the leader's tty_nr)
    tasks: set[int] = field(default_factory=set)  # every thread read
    listed: dict[int, list[str]] = field(default_factory=dict)  # each walked process's threads, as listed
    facts: dict[tuple[str, int], object] = field(default_factory=dict)

    def unchanged(self) -> bool:
        """No thread of the walked tree has run since it was read (its schedstat is the same)."""
        if not self.reusable:
            return False
        for path, run in self.runs.items():
            try:
                if self.files.read(path) != run:
                    return False
            except OSError:
                return False
        return True


class ForegroundWatch:
    """The reading of one local terminal's foreground group, reused while unchanged (see the module's note)."""

    def __init__(self, terminal_fd: int, leader: int, unit_threads: str | None = None) -> None:
        self.terminal_fd = terminal_fd
        self.leader = leader
        self.unit_threads = unit_threads  # the session unit's cgroup.threads (containment on), read at each reading
        self.files = ProcFiles(keep=True)
        self.reading: Reading | None = None

    def current(self) -> Reading | None:
        """The group as it is now; None when the terminal has no foreground group to read."""
        try:
            group = os.tcgetpgrp(self.terminal_fd)
        except OSError:
            return None
        reading = self.reading
        if reading is not None and reading.group == group and reading.unchanged():
            return reading
        self.files.prune()  # what the last reading's period did not read (processes that left the tree)
        known = reading.listed if reading is not None else {}
        self.reading = reading = read_group(group, self.leader, self.files, self.unit_threads, known)
        return reading

    def close(self) -> None:
        """Close the kept files (the terminal ended); any later reading opens each file for each read."""
        self.reading = None
        self.files.close()
        self.files = ProcFiles(keep=False)


def read_group(
    group: int,
    leader: int | None,
    files: ProcFiles,
    unit_threads: str | None = None,
    known: dict[int, list[str]] | None = None,
) -> Reading:
    """Process group `group` found below the terminal's `leader` (following /proc/PID/task/TID/children), or,
    when the group's own leader is not among them (it left the tree: re-parented) or no leader is known, by
    scanning every process (that reading is not reused). With `unit_threads` (the session's cgroup.threads), every
    thread of the unit not found below the leader is read too: one of the group's joins its members, any other
    that is not stopped its outsiders. `known`: each process's threads as the last reading listed them (a
    process whose threads are still exactly those is not listed again)."""
    if leader is None:
        return _scanned(group, files)
    reading = Reading(group, [], files, reusable=True, leader=leader)
    pending = [leader]
    seen: set[int] = set()
    while pending and len(seen) < MAX_WALKED:
        pid = pending.pop()
        if pid in seen:
            continue
        seen.add(pid)
        pending.extend(_walk_process(reading, pid, (known or {}).get(pid)))
    if not any(member.pid == group for member in reading.members):
        return _scanned(group, files)
    if unit_threads is not None:
        _read_unit(reading, unit_threads)
    return reading


def _read_unit(reading: Reading, unit_threads: str) -> None:
    """The unit's threads that the walk below the leader did not find (it lists them all: nothing leaves it)."""
    try:
        listed = reading.files.read(unit_threads)
    except OSError:
        reading.reusable = False
        return
    reading.runs[unit_threads] = listed  # a thread that enters the unit later changes the reading
    for task in {int(tid) for tid in listed.split()} - reading.tasks:
        path = f"/proc/{task}/schedstat"
        try:
            run = reading.files.read(path)
            named = _stat(reading.files, task)
            fields = reading.files.read(f"/proc/{task}/syscall").decode().split()
        except PermissionError:
            reading.reusable = False
            reading.outsiders.append(Member(task, reading.terminal, "", [(task, None)]))
            continue
        except OSError:
            reading.reusable = False
            continue
        reading.runs[path] = run
        if fields[:1] == ["running"] or named is None:
            reading.reusable = False
            continue
        name, stat = named
        thread = Member(task, reading.terminal, name, [(task, fields)])
        if int(stat[2]) == reading.group:
            reading.members.append(Member(task, int(stat[4]), name, [(task, fields)]))
        elif stat[0] not in (b"T", b"t", b"Z"):  # a background job that reads is stopped (SIGTTIN)
            reading.outsiders.append(thread)


def _walk_process(reading: Reading, pid: int, known_tasks: list[str] | None = None) -> list[int]:
    """Read one process of the tree into `reading` (its threads' schedstat first, then its stat, children and
    system calls); its children. `known_tasks`: its threads at the last reading, taken as its threads now, without
    listing them, when each is still one of its threads (its /proc/PID/task/TID file read) and the process counts
    as many: distinct live threads of the process, as many as it has, are all of them."""
    found = _known_threads(reading, pid, known_tasks) if known_tasks else None
    if found is not None:
        tasks, runs, named = found
    else:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return []
        runs = {}
        for task in tasks:
            path = f"/proc/{pid}/task/{task}/schedstat"
            try:
                runs[path] = reading.files.read(path)
            except OSError:
                reading.reusable = False
        named = _stat(reading.files, pid)
    for run in runs.values():
        run_count = run.split()[2:3]
        reading.reusable = reading.reusable and bool(run_count) and run_count[0] != b"0"
    reading.runs.update(runs)
    if named is None:
        return []
    name, stat = named
    reading.listed[pid] = tasks
    # A thread made after the listing (by one read before it ran again) is counted here: not reused then.
    reading.reusable = reading.reusable and len(stat) > 17 and stat[17] == str(len(tasks)).encode()
    member = int(stat[2]) == reading.group and stat[0] != b"Z"
    children: list[int] = []
    threads: list[tuple[int, list[str] | None]] = []
    for task in tasks:
        try:
            children += [int(child) for child in reading.files.read(f"/proc/{pid}/task/{task}/children").split()]
        except OSError:
            reading.reusable = False
        try:
            fields: list[str] | None = reading.files.read(f"/proc/{pid}/task/{task}/syscall").decode().split()
        except PermissionError:
            fields = None
            reading.reusable = False
        except OSError:
            reading.reusable = False
            continue
        if fields is not None and fields[:1] == ["running"]:
            reading.reusable = False
        threads.append((int(task), fields))
        reading.tasks.add(int(task))
    if pid == reading.leader:
        reading.terminal = int(stat[4])
    if member:
        reading.members.append(Member(pid, int(stat[4]), name, threads))
    return children


def _known_threads(
    reading: Reading, pid: int, tasks: list[str]
) -> tuple[list[str], dict[str, bytes], tuple[str, list[bytes]] | None] | None:
    """The process's threads, their schedstat and its stat, read in the listing's order, when its threads are
    still `tasks` (each read, then the stat counting as many); None when not (the caller lists them)."""
    runs: dict[str, bytes] = {}
    for task in tasks:
        path = f"/proc/{pid}/task/{task}/schedstat"
        try:
            runs[path] = reading.files.read(path)
        except OSError:
            return None
    named = _stat(reading.files, pid)
    if named is None or len(named[1]) <= 17 or named[1][17] != str(len(tasks)).encode():
        return None
    return tasks, runs, named


def _scanned(group: int, files: ProcFiles) -> Reading:
    reading = Reading(group, [], files)
    for pid in processes_where(2, group):
        name, stat = _stat(files, pid) or ("", [b"", b"", b"", b"", b"0"])
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        threads: list[tuple[int, list[str] | None]] = []
        for task in tasks:
            try:
                threads.append((int(task), files.read(f"/proc/{pid}/task/{task}/syscall").decode().split()))
            except PermissionError:
                threads.append((int(task), None))
            except OSError:
                continue
        reading.members.append(Member(pid, int(stat[4]), name, threads))
    return reading


def _stat(files: ProcFiles, pid: int) -> tuple[str, list[bytes]] | None:
    """The kernel's name of the process and /proc/PID/stat's fields after it (0 state, 1 ppid, 2 process group,
    4 tty_nr, 17 threads)."""
    try:
        stat = files.read(f"/proc/{pid}/stat")
    except OSError:
        return None
    # The name may contain spaces and parentheses: the fields start after its last `)`.
    fields = stat[stat.rfind(b")") + 2 :].split()
    name = stat[stat.find(b"(") + 1 : stat.rfind(b")")].decode(errors="replace")
    return (name, fields) if len(fields) > 4 else None


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
