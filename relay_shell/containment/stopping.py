"""Stopping a set of processes that may fork: SIGSTOP until a search finds none running that was not stopped
before, so the SIGKILL sweeps that follow cannot be outrun by a fork loop (adr/0015, "Killing a unit")."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from relay_shell.containment import proc
from relay_shell.containment.cgroup import pids_in

POLL = 0.01  # seconds between checks while a unit is being ended
# Stopped by a signal or a tracer (it cannot fork until continued), a zombie, or in uninterruptible sleep after
# the SIGSTOP was sent (the signal is handled before it returns to user space; a fork under way is restarted).
_SETTLED_STATES = ("T", "t", "Z", "D")


async def stop_all(find: Callable[[], set[int]], frozen: list[Path], deadline: float) -> None:
    """SIGSTOP every process `find` returns, find again, stop the new ones, until a search finds nothing new
    after every process of the search before was seen settled: then none can have forked since, and the
    SIGKILL sweeps that follow cannot be outrun by a fork loop. Settled: stopped (T), gone, in a `frozen` cgroup
    (frozen, they show as sleeping and a SIGSTOP waits for the thaw), in uninterruptible sleep with the SIGSTOP
    pending (D: it is handled before the process runs a user instruction again, so it cannot fork first), or
    refusing the SIGSTOP (another uid's process: the server can neither stop nor kill it, and waiting for it
    would only spin). Between searches it sleeps at least as long as the search took, so the event loop is
    never held more than half the time, whatever the size of the process table."""
    stopped: set[int] = set()
    unstoppable: set[int] = set()  # SIGSTOP raised PermissionError
    settled = False  # every process of the last search was seen settled after that search
    while time.monotonic() < deadline:
        began = time.monotonic()
        found = find()
        fresh = found - stopped
        if not fresh and settled:
            return
        for pid in fresh:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
            except PermissionError:
                unstoppable.add(pid)
        stopped |= fresh
        in_frozen = set().union(*(pids_in(path) for path in frozen))
        settled = all(pid in unstoppable or pid in in_frozen or _stopped_or_gone(pid) for pid in found)
        if not settled:
            await asyncio.sleep(max(POLL, time.monotonic() - began))


def _stopped_or_gone(pid: int) -> bool:
    """Stopped, gone, or in uninterruptible sleep with our SIGSTOP pending (see stop_all)."""
    entry = proc.read_entry(pid)
    return entry is None or entry.state in _SETTLED_STATES
