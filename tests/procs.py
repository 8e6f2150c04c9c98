"""The process table as /proc shows it, for tests that check which processes still run."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path


def stat_fields(pid: int) -> list[str] | None:
    """Fields after the command name in /proc/PID/stat: state ppid pgrp session …; None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return raw[raw.rfind(b")") + 2 :].decode().split()


def alive(pid: int) -> bool:
    """Running: it exists and is not a zombie."""
    found = stat_fields(pid)
    return found is not None and found[0] != "Z"


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def cmdline(pid: int) -> str:
    """argv joined by spaces; "" if gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def live_argvs() -> dict[int, list[bytes]]:
    """Every running process (zombies left out) with its argv, read once from /proc."""
    found = {}
    for pid in pids():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if alive(pid):
            found[pid] = argv
    return found


def server_pid(audit_path: Path) -> int:
    """The relay-shell server under test: the child of this process running `python -m relay_shell` whose
    environment names this audit log (exactly one)."""
    wanted = f"RELAY_SHELL_AUDIT_PATH={audit_path}".encode()
    found = []
    for pid in pids():
        stat = stat_fields(pid)
        if stat is None or int(stat[1]) != os.getpid() or "relay_shell" not in cmdline(pid).split():
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted in environ:
            found.append(pid)
    assert len(found) == 1, f"relay-shell children of this process with audit log {audit_path}: {found}"
    return found[0]


async def gone(watched: list[int], within: float) -> list[int]:
    """Poll until none of these processes runs; returns those still running after `within` seconds."""
    deadline = time.monotonic() + within
    left = watched
    while time.monotonic() < deadline:
        left = [pid for pid in watched if alive(pid)]
        if not left:
            return []
        await asyncio.sleep(0.05)
    return left


def status_kib(field: str) -> int:
    """A KiB field of this process's /proc/self/status (VmRSS, VmHWM, ...)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)
