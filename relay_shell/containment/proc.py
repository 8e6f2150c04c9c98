"""What /proc says about processes: the table (parent, state, session, start time), a process's unit marker
(the `RELAY_SHELL_UNIT` variable it was started with), descendants, and the server's own children.

Everything here reads; nothing signals. A process can vanish between any two reads, so every read tolerates
that and reports the process as gone.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass

MARKER_VARIABLE = "RELAY_SHELL_UNIT"
_MARKER_PREFIX = MARKER_VARIABLE.encode() + b"="


@dataclass(frozen=True)
class ProcessEntry:
    pid: int
    ppid: int
    state: str  # R, S, D, T, Z, …
    session: int
    starttime: int  # clock ticks after boot: with the pid, names one process for good (pids are reused)


def read_entry(pid: int) -> ProcessEntry | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            stat = stat_file.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: the fields start after the last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    if len(fields) < 20:
        return None
    return ProcessEntry(
        pid=pid,
        ppid=int(fields[1]),
        state=fields[0].decode(),
        session=int(fields[3]),
        starttime=int(fields[19]),
    )


def scan() -> dict[int, ProcessEntry]:
    """Every process now (threads are not listed in /proc's top level)."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            entry = read_entry(int(name))
            if entry is not None:
                table[entry.pid] = entry
    return table


def live(pid: int, starttime: int | None = None) -> bool:
    """The process runs (a zombie has ended); with `starttime`, it is still the same process."""
    entry = read_entry(pid)
    if entry is None or entry.state == "Z":
        return False
    return starttime is None or entry.starttime == starttime


def read_marker(pid: int) -> str | None:
    """The value of RELAY_SHELL_UNIT in the environment the process was started with (what exec gave it;
    /proc shows that, not later changes). None when absent, unreadable (another user's process) or a zombie."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ_file:
            environ = environ_file.read()
    except OSError:
        return None
    if environ.startswith(_MARKER_PREFIX):
        start = len(_MARKER_PREFIX)
    else:
        index = environ.find(b"\0" + _MARKER_PREFIX)
        if index < 0:
            return None
        start = index + 1 + len(_MARKER_PREFIX)
    end = environ.find(b"\0", start)
    return environ[start : end if end >= 0 else len(environ)].decode(errors="replace")


def markers(table: dict[int, ProcessEntry], prefix: str) -> dict[int, str]:
    """The processes whose marker starts with `prefix`, with their marker (zombies have none left)."""
    found = {}
    for pid, entry in table.items():
        if entry.state == "Z":
            continue
        marker = read_marker(pid)
        if marker is not None and marker.startswith(prefix):
            found[pid] = marker
    return found


def descendants(table: dict[int, ProcessEntry], roots: Iterable[int]) -> set[int]:
    """The roots (those in the table) and every process below them."""
    children: dict[int, list[int]] = {}
    for entry in table.values():
        children.setdefault(entry.ppid, []).append(entry.pid)
    found: set[int] = set()
    stack = [pid for pid in roots if pid in table]
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        found.add(pid)
        stack.extend(children.get(pid, ()))
    return found


def own_children() -> set[int]:
    """The server's children, re-parented orphans included (the kernel lists them per thread)."""
    children: set[int] = set()
    with contextlib.suppress(OSError):
        for task in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError), open(f"/proc/self/task/{task}/children") as children_file:
                children.update(int(pid) for pid in children_file.read().split())
    return children


def starttime_of(pid: int) -> int | None:
    entry = read_entry(pid)
    return None if entry is None else entry.starttime
