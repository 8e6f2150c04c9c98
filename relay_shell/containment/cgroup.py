"""cgroup v2 units: where the server's cgroup is, the server instance's directory in it, and per unit a child
cgroup that holds every process the call or session starts, whatever they do to their process group or
session, killed as a whole with `cgroup.kill`.

Layout, under the cgroup the server runs in (a systemd unit's with `Delegate=yes`, a desktop user's scope,
or one an operator made writable):

    <own cgroup>/relay-shell-<scope>-<instance>/          one per server process
        call-<call id>/, session-<session id>/            one per unit

A child has to be born in its unit: moving it in after it started would race with its first fork. Python
cannot spawn into a cgroup (no clone3 CLONE_INTO_CGROUP) and a pre-exec hook in the child costs a full fork
(~6 ms for a server this size, against ~0.1 ms here), so the server moves itself into the unit for the
instant of the spawn and back (`enter`/`leave`): the child is forked inside. The spawn is synchronous on the
event loop, so nothing else of the server forks meanwhile (worker threads do not spawn processes).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
from dataclasses import dataclass
from pathlib import Path

INSTANCE_PREFIX = "relay-shell-"


class CgroupError(Exception):
    """The cgroup cannot be used; the message says why."""


@dataclass(frozen=True)
class CgroupPlace:
    mount: Path  # where cgroup2 is mounted
    own: Path  # the directory of the cgroup this server runs in


def locate() -> CgroupPlace:
    """The cgroup2 mount (from /proc/self/mountinfo: on a v1/v2 hybrid it is not /sys/fs/cgroup) and the
    server's own cgroup in it (from /proc/self/cgroup's `0::` line)."""
    try:
        with open("/proc/self/cgroup") as cgroup_file:
            lines = cgroup_file.read().splitlines()
    except OSError as exc:
        raise CgroupError(f"cannot read /proc/self/cgroup ({exc.strerror})") from None
    own = next((line[3:] for line in lines if line.startswith("0::")), None)
    if own is None:
        raise CgroupError("this process is in no cgroup v2 (only v1 hierarchies in /proc/self/cgroup)")
    mounts = []
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            before, _, after = line.partition(" - ")
            if after.split(" ", 1)[0] == "cgroup2":
                fields = before.split()
                mounts.append((_unescape(fields[3]), Path(_unescape(fields[4]))))
    if not mounts:
        raise CgroupError("no cgroup2 file system is mounted (see /proc/self/mountinfo)")
    for root, mount_point in mounts:
        # A mount of a subtree (a container's) shows the cgroup path relative to its root.
        relative = os.path.relpath(own, root) if own == root or own.startswith(root.rstrip("/") + "/") else None
        if relative is not None:
            directory = mount_point if relative == "." else mount_point / relative
            if directory.is_dir():
                return CgroupPlace(mount=mount_point, own=directory)
    raise CgroupError(f"this process's cgroup {own!r} is not visible under any cgroup2 mount")


def _unescape(text: str) -> str:
    # mountinfo writes space, tab, newline and backslash as octal escapes.
    return text.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


class CgroupTree:
    """The server instance's cgroup directory and its units' directories."""

    def __init__(self, place: CgroupPlace, instance_name: str) -> None:
        self.place = place
        self.directory = place.own / instance_name
        self.pid_text = str(os.getpid()).encode()
        self.home_procs: int | None = None  # the own cgroup's cgroup.procs, to move back after each spawn
        self.has_kill = False

    def setup(self) -> None:
        """Create the instance directory and prove the server may move itself into a child and back;
        CgroupError (with the reason) otherwise, leaving nothing behind."""
        own = self.place.own
        if not os.access(own, os.W_OK):
            raise CgroupError(f"the server's cgroup {own} is not writable (not delegated to this user)")
        try:
            self.home_procs = os.open(own / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise CgroupError(f"cannot open {own}/cgroup.procs ({exc.strerror})") from None
        try:
            self.directory.mkdir(mode=0o755)
        except FileExistsError:
            pass
        except OSError as exc:
            self.close()
            raise CgroupError(f"cannot create a cgroup in {own} ({exc.strerror})") from None
        probe = self.directory / "probe"
        try:
            probe.mkdir(exist_ok=True)
            procs = os.open(probe / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
            try:
                self.enter(procs)
            finally:
                self.leave()
                os.close(procs)
            self.has_kill = (probe / "cgroup.kill").exists()
        except OSError as exc:
            self.remove(probe)
            self.remove(self.directory)
            self.close()
            raise CgroupError(f"the server cannot move itself between cgroups under {own} ({exc.strerror})") from None
        self.remove(probe)

    def close(self) -> None:
        if self.home_procs is not None:
            os.close(self.home_procs)
            self.home_procs = None

    # -- units -------------------------------------------------------------------------------------------

    def create(self, name: str) -> tuple[Path, int]:
        """A unit's directory and an open descriptor of its cgroup.procs (for `enter`)."""
        path = self.directory / name
        path.mkdir(mode=0o755)
        try:
            return path, os.open(path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            self.remove(path)
            raise

    def enter(self, unit_procs: int) -> None:
        os.write(unit_procs, self.pid_text)

    def leave(self) -> None:
        """Back to the server's own cgroup. Retried once: a server left inside a unit would die with it."""
        assert self.home_procs is not None
        try:
            os.write(self.home_procs, self.pid_text)
        except OSError:
            os.write(self.home_procs, self.pid_text)

    def kill(self, path: Path) -> None:
        """SIGKILL every process in the unit and below, with `cgroup.kill` (Linux 5.14+: atomic, a process
        forking at that moment cannot slip out); before 5.14, each listed process, repeated by the caller
        until the unit is empty. Never the server itself (it is inside only during a spawn, never then)."""
        if self.has_kill and str(os.getpid()) not in procs_of(path):
            with contextlib.suppress(FileNotFoundError):
                (path / "cgroup.kill").write_text("1")
            return
        signal_all(path, signal.SIGKILL)

    def remove(self, path: Path) -> bool:
        """Remove an empty unit directory (and the cgroups below it); False while processes remain."""
        try:
            path.rmdir()  # the usual case, tried first: a unit rarely has cgroups below it
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                raise
        with contextlib.suppress(FileNotFoundError):
            for child in path.iterdir():
                if child.is_dir():
                    self.remove(child)
        try:
            path.rmdir()
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno in (errno.EBUSY, errno.ENOTEMPTY):
                return False
            raise
        return True

    def instances(self) -> list[Path]:
        """Every server instance directory in the own cgroup, this one's included."""
        with contextlib.suppress(OSError):
            return [path for path in self.place.own.iterdir() if path.name.startswith(INSTANCE_PREFIX)]
        return []


def procs_of(path: Path) -> list[str]:
    """The pids in this cgroup and every cgroup below it (cgroup.procs lists only its own)."""
    pids: list[str] = []
    with contextlib.suppress(OSError):
        pids += (path / "cgroup.procs").read_text().split()
        for child in path.iterdir():
            if child.is_dir():
                pids += procs_of(child)
    return pids


def populated(path: Path) -> bool:
    """Processes remain in the cgroup or below (zombies do not count: they left the cgroup when they died)."""
    try:
        events = (path / "cgroup.events").read_text()
    except FileNotFoundError:
        return False
    return "populated 1" in events


def signal_all(path: Path, signal_number: int) -> None:
    me = os.getpid()
    for pid_text in procs_of(path):
        pid = int(pid_text)
        if pid != me:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal_number)
