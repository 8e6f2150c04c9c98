"""What earlier server processes left running: after a `kill -9` (or an OOM kill, or a crash) nothing ended
their units, so at the next start the server looks for them, by marker (every mode) and by cgroup (the
instance directories of dead servers next to its own), ends those of interrupted calls and reports all.

Which ones end (adr/0015):
- a call the audit log says was interrupted (a start record without an end record): ended — its result was
  never returned nor recorded;
- a session: ended — its terminal died with the server, nobody can reach it;
- the dead server's own helpers (marker unit `server`): ended;
- a process sitting in a dead server's instance cgroup itself, outside every unit, that no marker of this
  scope names (it moved itself out of its unit and dropped the marker): ended, as `stray`; unless the dead
  server had adopted it (or what it descends from) at its own start, as its instance cgroup records: then it is
  kept and adopted again, as `adopted` (a background job left on purpose stays kept across any number of
  restarts);
- a call that ended normally and left a background job running on purpose: kept, and adopted by this
  server (it runs on, and ends when this server stops, like this server's own background jobs);
- when the caller cannot say which calls were interrupted (`interrupted_call_ids` None), every leftover is
  ended: nothing shows it was recorded as finished.

Only the leftovers of the same audit log (the marker's scope) and of servers no longer running are touched:
several relay-shells on one host leave each other alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from relay_shell.containment import proc
from relay_shell.containment.cgroup import adopted_of, label_adopted, pids_directly_in, pids_in, unit_name_of
from relay_shell.containment.units import Containment, instance_alive

END_WITHIN = 2.0  # seconds to end the leftovers at startup (SIGKILL, repeated until none runs)
STRAY_UNIT = "stray"  # a process in a dead instance's own cgroup that no marker attributes to a unit
ADOPTED_UNIT = "adopted"  # one there that the dead server had adopted (or a process below it)
_ANCESTRY_DEPTH = 64


@dataclass
class Leftover:
    instance: str  # the dead server process: "<pid>-<start time>"
    unit: str  # "call-<call_id>", "session-<session_id>" or "server"
    pids: list[int]
    ended: bool
    reason: str
    cgroup: str | None = None
    start_times: dict[int, int] = field(default_factory=dict, repr=False)

    @property
    def call_id(self) -> str | None:
        return self.unit.removeprefix("call-") if self.unit.startswith("call-") else None

    def record(self) -> dict[str, Any]:
        """For the restart audit record (the runner writes it)."""
        return {
            "instance": self.instance,
            "unit": self.unit,
            "call_id": self.call_id,
            "pids": self.pids[:100],
            "processes": len(self.pids),
            "ended": self.ended,
            "reason": self.reason,
        }


def find_leftovers(containment: Containment, interrupted_call_ids: Collection[str] | None) -> list[Leftover]:
    """Find the processes earlier (dead) servers of this audit log left, end those that must end (see the
    module docstring), adopt the rest; returns what was found, ended or kept, per unit."""
    if containment.mode == "off":
        return []
    table = proc.scan()
    found: dict[tuple[str, str], Leftover] = {}
    for pid, marker in proc.markers(table, f"{containment.scope}:").items():
        parts = marker.split(":", 2)
        if len(parts) != 3:
            continue  # not written by a relay-shell
        _, instance, unit = parts
        if instance == containment.instance or instance_alive(instance):
            continue
        leftover = found.setdefault((instance, unit), Leftover(instance, unit, [], False, ""))
        leftover.pids.append(pid)
    unit_directories: dict[tuple[str, str], Path] = {}
    if containment.tree is not None:
        for directory, scope, instance in containment.tree.instances():
            if directory == containment.tree.directory or instance_alive(instance):
                continue
            if scope != containment.scope:
                containment.tree.remove(directory)  # another log's dead server: only if nothing runs there
                continue
            for unit_directory in _children(directory):
                pids = pids_in(unit_directory)
                label = unit_name_of(unit_directory) or _unit_by_marker(pids, containment.scope, instance)
                if label is None and not pids:
                    continue  # a spare that was never used
                key = (instance, label or unit_directory.name)  # no label, no marker: which call is unknown
                unit_directories[key] = unit_directory
                leftover = found.setdefault(key, Leftover(instance, key[1], [], False, ""))
                leftover.cgroup = str(unit_directory)
                leftover.pids.extend(pid for pid in pids if pid not in leftover.pids)
            # Outside every unit, in the instance directory itself: a process that left its unit (a same-uid
            # command may write to any cgroup.procs of the delegated subtree), or a leftover the dead server had
            # adopted (it records them on its directory). One with a marker of this scope was found by it above
            # (an adopted job of an older server, or one that kept its marker).
            adopted = adopted_of(directory)
            for pid in pids_directly_in(directory):
                named = proc.read_marker(pid)
                if pid == os.getpid() or (named is not None and named.startswith(f"{containment.scope}:")):
                    continue
                unit = ADOPTED_UNIT if _descends_from(table, pid, adopted) else STRAY_UNIT
                leftover = found.setdefault((instance, unit), Leftover(instance, unit, [], False, ""))
                leftover.cgroup = str(directory)
                leftover.pids.append(pid)
    for leftover in found.values():
        # Below a marked process: what dropped the marker (env -i) but stayed in its tree.
        below = proc.descendants(table, leftover.pids) - {os.getpid()}
        leftover.pids = sorted(pid for pid in below if table[pid].state != "Z")
        leftover.start_times = {pid: table[pid].starttime for pid in leftover.pids}
        leftover.ended, leftover.reason = _decide(leftover, interrupted_call_ids)
    # An empty unit cgroup (a call that ended cleanly, not yet removed when its server died) is no leftover.
    running = [leftover for leftover in found.values() if leftover.pids]
    _end([leftover for leftover in running if leftover.ended], unit_directories, containment)
    for leftover in running:
        if not leftover.ended:
            _adopt(leftover, unit_directories.get((leftover.instance, leftover.unit)), containment)
    if containment.tree is not None:
        for directory, _, instance in containment.tree.instances():
            if directory != containment.tree.directory and not instance_alive(instance):
                containment.tree.remove(directory)
    return running


def _unit_by_marker(pids: Collection[int], scope: str, instance: str) -> str | None:
    for pid in pids:
        marker = proc.read_marker(pid)
        if marker is not None and marker.startswith(f"{scope}:{instance}:"):
            return marker.split(":", 2)[2]
    return None


def _descends_from(table: dict[int, proc.ProcessEntry], pid: int, processes: dict[int, int]) -> bool:
    """`pid`, or a process it descends from, is one of `processes` (pid -> start time)."""
    entry = table.get(pid)
    for _ in range(_ANCESTRY_DEPTH):
        if entry is None or entry.pid <= 1:
            return False
        if processes.get(entry.pid) == entry.starttime:
            return True
        entry = table.get(entry.ppid)
    return False


def _decide(leftover: Leftover, interrupted_call_ids: Collection[str] | None) -> tuple[bool, str]:
    if leftover.unit == "server":
        return True, "started by the server itself, which is gone"
    if leftover.unit == STRAY_UNIT:
        return True, "it left its unit for the dead server's own cgroup and carries no marker: an escape"
    if leftover.unit.startswith("session-"):
        return True, "a terminal session of a server that is gone: nobody can reach it"
    if interrupted_call_ids is None:
        return True, "the audit log cannot say whether its call ended; ended to be safe"
    if leftover.unit == ADOPTED_UNIT:
        return False, "a background job kept (adopted) by the server that is gone, and so kept again; adopted"
    if not leftover.unit.startswith("call-"):
        return True, "nothing says which call it belongs to (no label, no marker); ended to be safe"
    if leftover.call_id is not None and leftover.call_id in interrupted_call_ids:
        return True, "its call was interrupted (start record, no end record)"
    return False, "a background job its call left running on purpose (the call ended normally); adopted"


def _end(leftovers: list[Leftover], unit_directories: dict[tuple[str, str], Path], containment: Containment) -> None:
    """SIGKILL (the call is over: nobody waits for its output), repeated until none runs."""
    tree = containment.tree
    for leftover in leftovers:
        directory = unit_directories.get((leftover.instance, leftover.unit))
        if tree is not None and directory is not None:
            tree.kill(directory)
    deadline = time.monotonic() + END_WITHIN
    targets = {pid: start for leftover in leftovers for pid, start in leftover.start_times.items()}
    while targets:
        for pid, start in list(targets.items()):
            if not proc.live(pid, start):
                del targets[pid]
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if not targets or time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    containment.reap(set(targets))
    if tree is not None:
        for leftover in leftovers:
            directory = unit_directories.get((leftover.instance, leftover.unit))
            if directory is not None:
                tree.remove(directory)


def _adopt(leftover: Leftover, directory: Path | None, containment: Containment) -> None:
    """Kept leftovers end when this server stops: the server remembers them (pid and start time) and, in cgroup
    mode, moves them into its instance directory (its units are threaded cgroups, which take no process from
    another server's tree) and records them there (`label_adopted`)."""
    containment.adopted.update(leftover.start_times)
    tree = containment.tree
    if tree is None:
        return
    for pid in leftover.pids:
        with contextlib.suppress(OSError):
            (tree.directory / "cgroup.procs").write_text(str(pid))
    # Should this server die too, the next start must not take an unmarked one of them for a stray.
    label_adopted(tree.directory, containment.adopted)
    if directory is not None:
        tree.remove(directory)


def _children(directory: Path) -> list[Path]:
    with contextlib.suppress(OSError):
        return [child for child in directory.iterdir() if child.is_dir()]
    return []
