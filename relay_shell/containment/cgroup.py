"""cgroup v2 units: where the server's cgroup is, the server instance's directory in it, and per unit a child
cgroup that holds every process the call or session starts, whatever they do to their process group or
session.

Layout, under the cgroup the server runs in (a systemd unit's with `Delegate=yes`, a desktop user's scope,
or one an operator made writable):

    <own cgroup>/relay-shell-<scope>-<instance>/          the server process moves in here at startup
        unit-1/, unit-2/, …                               one *threaded* cgroup per unit (a few made ahead)

A child has to be born in its unit: moving it in after it started would race with its first fork. Python cannot
spawn into a cgroup (no clone3 CLONE_INTO_CGROUP, no glibc posix_spawnattr_setcgroup_np before 2.41) and a
pre-exec hook in the child costs a full fork (~6 ms for a server this size). So the spawning thread moves itself
into the unit for the instant of the spawn and back, and the child is forked inside (the exec trace's native
spawner, in C, spawns straight into the unit with clone3 where the kernel has it: adr/0036 "Round 2"). Moving a
whole process (cgroup.procs) takes the kernel's global cgroup_threadgroup_rwsem for writing, which waits for an
RCU grace period whenever it was idle — ~10 ms on a loaded host, for every call that follows a pause. Moving one
thread (`0` into cgroup.threads) takes no such lock, but only works inside one threaded subtree: hence the
instance directory is a threaded root and every unit a threaded cgroup. The spawn is synchronous on the event
loop, so nothing else of the server forks meanwhile, and other threads stay where they are.

Making a threaded cgroup (mkdir, then `threaded` into cgroup.type) is most of a unit's cost, so a few are
made ahead (`spares`) by a thread of their own, off the event loop. An ended unit's cgroup, once empty, is a
spare again when nothing of its unit remains in it (not frozen by a kill, no cgroup a command made below it);
else that thread removes it: a mkdir and an rmdir per call each hold the kernel's cgroup mutex, which the
spawning thread's move into a unit waits for. The names are therefore not the units': each is labelled with
its unit in an extended attribute (`user.relay_shell.unit`, Linux 5.7+), and the marker of the processes inside
says it too.

Threaded cgroups have no cgroup.kill (it is for whole domains): a unit is ended by freezing it (frozen
processes cannot fork) and SIGKILLing every process listed, until it is empty. The instance directory is never
killed as a whole (the server runs there); what else sits in it is either the server's own helper or a process
that moved itself out of its unit, and containment/units.py tells them apart (`Containment.strays`).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

INSTANCE_PREFIX = "relay-shell-"
# relay-shell-<scope: 12 hex digits>-<instance: pid-starttime> (units.py scope_of, instance_of_this_process)
_INSTANCE_NAME = re.compile(re.escape(INSTANCE_PREFIX) + r"([0-9a-f]{12})-([0-9]+-[0-9]+)")
TIDY_DELAY = 0.02  # seconds the filler thread lets a call finish before it makes the next spares
UNIT_ATTRIBUTE = "user.relay_shell.unit"  # on a unit's cgroup: the unit's name (call-<id>, session-<id>)
# On an instance directory: the leftovers its server adopted at startup, `<pid>-<start time>` separated by spaces
ADOPTED_ATTRIBUTE = "user.relay_shell.adopted"


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
    """The server instance's cgroup directory (where the server runs) and its units' threaded cgroups."""

    def __init__(self, place: CgroupPlace, instance_name: str) -> None:
        self.place = place
        self.directory = place.own / instance_name
        self.pid_text = str(os.getpid()).encode()
        self.home_threads: int | None = None  # the instance's cgroup.threads: the spawning thread moves back here
        self.inside = False  # the server process moved into the instance directory
        self.can_freeze = False
        # Shared with the filler thread: list append and pop are atomic, and so is next() on a count.
        self.spares: list[tuple[Path, int]] = []  # empty threaded cgroups (and their cgroup.threads) to use next
        self.ended: list[Path] = []  # ended, empty unit cgroups: spares again, or removed
        self.names = itertools.count(1)  # unit-1, unit-2, …
        self.wanted = threading.Event()  # wakes the filler thread
        self.spare_target = 0  # 0: make no spares (before the filler starts, and once the server stops)

    def setup(self) -> None:
        """Create the instance directory, move the server into it, and prove a thread can enter a threaded
        unit and come back; CgroupError (with the reason) otherwise, leaving the server where it was."""
        own = self.place.own
        if not os.access(own, os.W_OK):
            raise CgroupError(f"the server's cgroup {own} is not writable (not delegated to this user)")
        try:
            self.directory.mkdir(mode=0o755, exist_ok=True)
        except OSError as exc:
            raise CgroupError(f"cannot create a cgroup in {own} ({exc.strerror})") from None
        probe = self.directory / "probe"
        try:
            (self.directory / "cgroup.procs").write_bytes(self.pid_text)
            self.inside = True
            self.home_threads = os.open(self.directory / "cgroup.threads", os.O_WRONLY | os.O_CLOEXEC)
            probe_path, probe_threads = self.create("probe")
            try:
                self.enter(probe_threads)
            finally:
                self.leave()
                os.close(probe_threads)
            self.can_freeze = (probe_path / "cgroup.freeze").exists()
        except OSError as exc:
            self.remove(probe)
            self.step_out()
            self.remove(self.directory)
            raise CgroupError(f"the server cannot move a thread between cgroups under {own} ({exc.strerror})") from None
        self.remove(probe)

    def step_out(self) -> None:
        """Move the server back to its own cgroup (at shutdown, so the instance directory can be removed);
        the filler thread ends."""
        if self.home_threads is not None:
            os.close(self.home_threads)
            self.home_threads = None
        self.stop_filling()
        if self.inside:
            with contextlib.suppress(OSError):
                (self.place.own / "cgroup.procs").write_bytes(self.pid_text)
            self.inside = False

    # -- units -------------------------------------------------------------------------------------------

    def create(self, name: str) -> tuple[Path, int]:
        """A unit's threaded cgroup and an open descriptor of its cgroup.threads (for `enter`)."""
        path = self.directory / name
        path.mkdir(mode=0o755)
        try:
            (path / "cgroup.type").write_bytes(b"threaded")
            return path, os.open(path / "cgroup.threads", os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            self.remove(path)
            raise

    def take(self, unit_name: str) -> tuple[Path, int]:
        """A cgroup for a new unit — a spare if there is one, else a new one — and its open cgroup.threads,
        labelled with the unit's name (one setxattr, here: handed to the filler thread, each of its system calls
        waited for the GIL the event loop holds under load, adr/0030 "Round 7")."""
        try:
            path, threads = self.spares.pop()
        except IndexError:
            path, threads = self.create(f"unit-{next(self.names)}")
        with contextlib.suppress(OSError):  # before 5.7 cgroupfs has no user xattrs: the marker names the unit
            os.setxattr(path, UNIT_ATTRIBUTE, unit_name.encode())
        return path, threads

    def started(self) -> None:
        """A unit's first process started: the filler thread makes spares once fewer than half are left (every
        ended unit gives its cgroup back, `discard`, so under a steady load none is made or removed)."""
        if len(self.spares) < self.spare_target // 2:
            self.wanted.set()

    def discard(self, path: Path) -> None:
        """An ended unit's cgroup, just seen empty: a spare again at once where it can be (three system calls on
        the event loop; left to the filler thread, each waited for the GIL), else the filler thread removes it."""
        with contextlib.suppress(OSError):
            if len(self.spares) < self.spare_target and self.inside and reusable(path, known_empty=True):
                self.spares.append((path, os.open(path / "cgroup.threads", os.O_WRONLY | os.O_CLOEXEC)))
                return
        self.ended.append(path)
        self.wanted.set()

    def start_filler(self, target: int) -> None:
        """Keep `target` spares, made by a daemon thread woken by `wanted` (`started`, `discard`), which also
        removes the ended units' cgroups that are not spares again: after a pause each of these syscalls costs
        0.03-0.2 ms that would otherwise delay the event loop. It works TIDY_DELAY after it was woken, once the
        call is over (more calls than spares within that time make their own). The thread never enters a unit,
        and it is created outside one (threads start in their creator's cgroup)."""
        self.spare_target = target

        def filler() -> None:
            while self.spare_target:
                self.wanted.wait()
                # After the call that woke it, not during: its CPU and the GIL belong to the call.
                time.sleep(TIDY_DELAY)
                self.wanted.clear()
                self.tidy()

        threading.Thread(target=filler, name="relay-shell-cgroups", daemon=True).start()

    def tidy(self) -> None:
        """Take the ended units' cgroups back as spares (or remove them), make spares (errors only mean the next
        unit makes its own)."""
        while self.ended:
            path = self.ended.pop()
            with contextlib.suppress(OSError):
                if len(self.spares) < self.spare_target and self.inside and reusable(path):
                    self.spares.append((path, os.open(path / "cgroup.threads", os.O_WRONLY | os.O_CLOEXEC)))
                else:
                    self.remove(path)
        with contextlib.suppress(OSError):
            while len(self.spares) < self.spare_target and self.inside:
                self.spares.append(self.create(f"unit-{next(self.names)}"))

    def stop_filling(self) -> None:
        """No more spares (the server stops): the filler thread ends; the spares are closed and removed."""
        self.spare_target = 0
        self.wanted.set()
        while self.spares:
            path, threads = self.spares.pop()
            os.close(threads)
            with contextlib.suppress(OSError):
                self.remove(path)

    def enter(self, unit_threads: int) -> None:
        os.write(unit_threads, b"0")  # "0": the calling thread

    def leave(self) -> None:
        """Back to the instance directory. Retried once: a server thread left in a unit would die with it."""
        assert self.home_threads is not None
        try:
            os.write(self.home_threads, b"0")
        except OSError:
            os.write(self.home_threads, b"0")

    def kill(self, path: Path) -> None:
        """Freeze the unit (nothing in it can fork any more) and SIGKILL every process in it; the caller
        repeats until it is empty. Never the server itself: its threads are in a unit only during a spawn."""
        if self.can_freeze:
            with contextlib.suppress(OSError):
                (path / "cgroup.freeze").write_bytes(b"1")
        me = os.getpid()
        for pid in pids_in(path):
            if pid != me:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

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
        for child in _subdirectories(path):
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

    def instances(self) -> list[tuple[Path, str, str]]:
        """Every server instance directory in the own cgroup, this one's included, with its scope and instance.
        Only names exactly as start_containment makes them: another cgroup that merely starts with the prefix
        (an operator's `relay-shell-test`) is no instance, and must never be taken for a dead one and emptied."""
        found = []
        with contextlib.suppress(OSError):
            for path in self.place.own.iterdir():
                named = _INSTANCE_NAME.fullmatch(path.name)
                if named is not None and path.is_dir():
                    found.append((path, named[1], named[2]))
        return found


def pids_in(path: Path) -> set[int]:
    """The processes with a thread in this cgroup or below (a threaded cgroup lists threads, not processes)."""
    pids: set[int] = set()
    for directory in [path, *_subdirectories(path)]:
        pids |= pids_directly_in(directory)
    return pids


def pids_directly_in(path: Path) -> set[int]:
    """The processes with a thread in this cgroup itself, not below it (the instance directory: the server and
    what sits there outside every unit)."""
    try:
        listed = (path / "cgroup.threads").read_text().split()
    except OSError:
        return set()
    pids = {_thread_group(int(tid)) for tid in listed}
    pids.discard(0)
    return pids


def _thread_group(tid: int) -> int:
    if os.path.exists(f"/proc/{tid}/task/{tid}"):  # a thread group leader: the process itself
        return tid
    try:
        with open(f"/proc/{tid}/status") as status:
            for line in status:
                if line.startswith("Tgid:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _subdirectories(path: Path) -> list[Path]:
    """Every cgroup below `path`, deepest last."""
    found: list[Path] = []
    with contextlib.suppress(OSError):
        for child in path.iterdir():
            if child.is_dir():
                found.append(child)
                found.extend(_subdirectories(child))
    return found


def unit_name_of(path: Path) -> str | None:
    try:
        return os.getxattr(path, UNIT_ATTRIBUTE).decode(errors="replace")
    except OSError:
        return None


def label_adopted(path: Path, adopted: dict[int, int]) -> None:
    """Record on an instance directory which processes in it its server adopted (before 5.7 cgroupfs has no
    user xattrs: then none is recorded, and a later start takes an unmarked one for a stray)."""
    value = " ".join(f"{pid}-{start}" for pid, start in sorted(adopted.items()))
    with contextlib.suppress(OSError):
        os.setxattr(path, ADOPTED_ATTRIBUTE, value.encode())


def adopted_of(path: Path) -> dict[int, int]:
    """What `label_adopted` recorded: pid -> start time."""
    try:
        value = os.getxattr(path, ADOPTED_ATTRIBUTE).decode(errors="replace")
    except OSError:
        return {}
    adopted = {}
    for item in value.split():
        pid_text, _, start_text = item.partition("-")
        if pid_text.isdigit() and start_text.isdigit():
            adopted[int(pid_text)] = int(start_text)
    return adopted


def reusable(path: Path, known_empty: bool = False) -> bool:
    """An ended unit's cgroup can hold the next unit as it is: empty (`known_empty`: the caller has just seen it
    so), not frozen (kill() froze the units it ended), and no cgroup below it (a command of the unit may have made
    one). Its old label stays until the next unit's replaces it: an empty cgroup is no leftover, whatever its label
    (containment/leftovers.py)."""
    if not known_empty and populated(path):
        return False
    if os.stat(path).st_nlink != 2:  # kernfs counts a directory's subdirectories in its links (2 + n)
        return False
    try:
        return _read(path, "cgroup.freeze").strip() == b"0"
    except FileNotFoundError:  # no freezer (before 5.2): nothing froze it
        return True


def populated(path: Path) -> bool:
    """Processes remain in the cgroup or below (zombies do not count: they left the cgroup when they died)."""
    try:
        return b"populated 1" in _read(path, "cgroup.events")
    except FileNotFoundError:
        return False


def _read(path: Path, name: str) -> bytes:
    """A cgroup file's few bytes: os-level, as it is read on the event loop for every call's unit."""
    descriptor = os.open(f"{path}/{name}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(descriptor, 256)
    finally:
        os.close(descriptor)
