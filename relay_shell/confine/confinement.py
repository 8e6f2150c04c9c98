"""Readonly enforced by the kernel (adr/0024): every process tree a readonly call or session starts runs in a
Landlock domain of its own, with no_new_privs, the syscall filter (confine/syscall_filter.py) and root's
capabilities cut down (confine/capabilities.py). Outside readonly mode, and in readonly mode where the kernel
has no Landlock, launch.py's `Unconfined` stands in (and this package is not loaded): nothing is confined, and
the second case says so everywhere.

Where the restriction is applied, so that it holds for exactly the tree and never for the server:
- **A one-shot command** is spawned by a vfork-style clone (Popen, or glibc's posix_spawn under the exec trace)
  that runs no code of ours in the child. Landlock restricts the calling thread, so the spawn runs on a thread
  that restricted itself first and ends right after: a spare made ahead (confine/spares.py) by a creator thread
  that carries what every tree shares (`confine_creator`; the spare adds its own domain and id, `confine_spare`,
  adr/0037) — untraced, the spare entering the tree's unit for its spawn (`run_on_spare`); traced, the creator
  made by the trace's spawner thread, so that it and its spares inherit the exec filter (`spare_traces`,
  adr/0031) — or, none ready, a new thread made on the spot that confines itself whole (`run_confined`). Where the
  compiled library is built there are no spare threads: the creator itself spawns in C, and each tree's first
  process makes its own Landlock domain before its exec (`pool`, adr/0037 "Round 7"), the request built on the
  event loop's thread.
- **A terminal** (ptyprocess forks and runs a pre-exec hook in the child): the child restricts itself
  (`prepare_child`), with a rule of its own for its terminal. No thread of the server is ever in its domain.
- **A ProxyCommand** (asyncssh starts it): through `python -m relay_shell.confine.run`, which restricts itself
  and execs it (`helper_argv`).

The spawning thread shares its tree's domain while it lives, so a tree could signal or ptrace it, and through it
the server. Closed three ways: the syscall filter refuses signals, pidfds, ptrace and process_vm_* aimed at it or at
the server's pid; the tree's processes hold fewer capabilities than the thread (root) or none, and the server is
not dumpable while readonly is confined, so the kernel refuses them ptrace and /proc access to it (its memory,
its descriptors: a stdio server's stdout would otherwise be reopened through /proc/PID/task/TID/fd/1).
"""

from __future__ import annotations

import _thread
import ctypes
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from relay_shell.confine import capabilities, landlock, syscall_filter
from relay_shell.confine.spares import NativeSparePool, SparePool, SpareThread, StartOn, native_library
from relay_shell.errors import ToolError
from relay_shell.trace import native

T = TypeVar("T")
PR_SET_DUMPABLE = 4
# Device files a readonly tree may open for writing: the bit bucket, and its own terminal (/dev/tty is always
# the caller's controlling terminal; a one-shot command has none). A terminal session adds its own /dev/pts/N.
WRITABLE_DEVICES = ["/dev/null", "/dev/tty"]

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


class ConfinementRefused(Exception):
    """The kernel refused to confine a spawning thread; the message says what."""


class Confinement:
    """Readonly mode with Landlock: every tree is confined."""

    def __init__(self, abi: int, setting: str, metrics: Any) -> None:
        self.abi = abi
        self.setting = setting
        self.metrics = metrics
        self.label = f"landlock ABI {abi}"
        self.state = "landlock"
        self.reason = ""
        self.not_enforced = landlock.not_enforced(abi)  # below ABI 6: what is left to the classifier
        self.ruleset = landlock.create_ruleset(abi, WRITABLE_DEVICES)
        self.program = syscall_filter.build(os.getpid(), abi)
        self.guard = syscall_filter.build_thread_guard()  # a spare's own id, over its creator's whole filter
        self.privileged = capabilities.privileged()
        self.trees = 0
        self.failures = 0
        self.spares: SparePool | NativeSparePool | None = None  # for untraced one-shot commands (start_confinement)
        self.traced_spares: SparePool | NativeSparePool | None = None  # creator made by the spawner (spare_traces)
        self.native = native_library()  # the creator spawns in C (adr/0037 "Round 7"); None: Python's spares

    def confine_this_thread(self) -> None:
        """Restrict the calling thread (and what it starts) for good. OSError when the kernel refuses."""
        syscall_filter.set_no_new_privs()
        capabilities.reduce_for_readonly(self.privileged)
        landlock.restrict_self(self.ruleset, self.abi)
        syscall_filter.install(self.program.for_thread(threading.get_native_id()))

    def confine_creator(self) -> None:
        """On a spare pool's creator thread (confine/spares.py), once: what every tree shares, inherited by each
        spare it makes instead of each setting it again (adr/0037): no_new_privs, the capabilities cut (their
        securebits, inheritable and ambient sets only act at an exec, which the creator never does), the whole
        syscall filter with the creator's own id. No Landlock domain: each spare makes its own."""
        syscall_filter.set_no_new_privs()
        capabilities.reduce_for_readonly(self.privileged)
        syscall_filter.install(self.program.for_thread(threading.get_native_id()))

    def confine_spare(self) -> None:
        """On a spare the creator made: a Landlock domain of its own, and the filter's rules naming its own id (the
        tree shares its domain while it spawns: signals, pidfds, ptrace aimed at it are refused)."""
        landlock.restrict_self(self.ruleset, self.abi)
        syscall_filter.install(self.guard.for_thread(threading.get_native_id()))

    def pool(self, start: StartOn | None, answerer: native.Answerer | None) -> SparePool | NativeSparePool:
        """A spare pool whose creator `start` starts: spares in C where the library is here (traced: when the compiled
        answerer lets their first exec go, `answerer`), else Python's."""
        if self.native is not None and (start is None or answerer is not None):
            flags = landlock.restrict_flags(self.abi)
            return NativeSparePool(
                self.native, self.confine_creator, self.ruleset, flags, self.refused, start, answerer
            )
        return SparePool(self.confine_creator, self.confine_spare, start)

    def refused(self, why: str) -> ToolError:
        """A tree the kernel would not confine (nothing ran): counted, and said to the call."""
        self.failures += 1
        self.metrics.confinement_failures.inc()
        return ToolError(
            "ConfinementFailed",
            f"readonly confinement could not be applied ({why}); nothing ran (readonly runs nothing unconfined "
            "while the kernel enforces it)",
        )

    def run_on_spare(self, start: Callable[[], T], natively: Callable[[native.NativeSpare], T] | None = None) -> T:
        """`start()` (which enters the tree's cgroup unit and spawns) on a spare confined thread
        (confine/spares.py), or `natively(spare)` (the spawn submitted to it) when the spare is native; on a new
        thread, confined now, when none is ready. ToolError as run_confined."""
        spares = self.spares
        spare = spares.take() if spares is not None else None
        if isinstance(spare, native.NativeSpare) and natively is not None:
            return natively(spare)  # the spare asked for its replacement after the spawn
        try:
            if spare is None:
                return self.run_confined(start)
            assert isinstance(spare, SpareThread)
            return spare.hand(start)
        finally:
            if spares is not None:
                spares.replace()

    def spare_traces(
        self, run: StartOn, answerer: native.Answerer | None = None
    ) -> Callable[[], Callable[[Callable[[], Any]], Any] | native.NativeSpare | None]:
        """Traced one-shot commands get spares too, made by a creator thread the exec trace's spawner thread makes
        (`run` runs work there and waits), so that they carry its exec filter. Returns what the trace asks on the
        event loop for each traced spawn: a ready spare's `hand`, a native spare (`answerer`: the compiled answerer
        lets its tree's first exec go; trace/tree.py submits the spawn to it), or None (the spawner thread then
        confines a new thread: run_confined)."""
        spares = self.pool(run, answerer)
        self.traced_spares = spares

        def traced_spare() -> Callable[[Callable[[], Any]], Any] | native.NativeSpare | None:
            spare = spares.take()
            if spare is None:
                spares.replace()  # the creator makes them (a burst took them all); the spawner confines one meanwhile
                return None
            if isinstance(spare, native.NativeSpare):
                return spare

            def hand(work: Callable[[], Any]) -> Any:
                """The spawn on the spare (it then ends); the next spare made after."""
                try:
                    return spare.hand(work)
                finally:
                    spares.replace()

            return hand

        return traced_spare

    def run_confined(self, start: Callable[[], T]) -> T:
        """`start()` (which spawns the tree's first process) on a new thread confined first, which then ends;
        the calling thread waits. It is the calling thread's: inherits its exec filter and cgroup. ToolError
        `ConfinementFailed` when the kernel refused: nothing ran."""
        try:
            result = self.on_confined_thread(start)
        except ConfinementRefused as exc:
            raise self.refused(str(exc)) from None
        return result

    def on_confined_thread(self, start: Callable[[], T]) -> T:
        """`start()` on a new thread that confined itself first; ConfinementRefused when it could not."""
        done = _thread.allocate_lock()
        done.acquire()
        outcome: list[Any] = []

        def run() -> None:
            try:
                try:
                    self.confine_this_thread()
                except OSError as exc:
                    outcome.append(ConfinementRefused(str(exc)))
                    return
                outcome.append(start())
            except BaseException as exc:  # handed to the waiting thread, raised there
                outcome.append(exc)
            finally:
                done.release()

        # _thread, not threading.Thread: its start() waits for the new thread to run, a second hand-over.
        _thread.start_new_thread(run, ())
        done.acquire()
        result = outcome[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def prepare_child(self) -> None:
        """In a terminal's child, between fork and exec (one thread): restrict the whole process, its terminal
        writable. It may be read (the exec trace reads its first exec) although it is the server's copy."""
        _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        devices = list(WRITABLE_DEVICES)
        if os.isatty(0):
            devices.append(os.ttyname(0))
        ruleset = landlock.create_ruleset(self.abi, devices)
        syscall_filter.set_no_new_privs()
        capabilities.reduce_for_readonly(self.privileged)
        landlock.restrict_self(ruleset, self.abi)
        os.close(ruleset)
        syscall_filter.install(self.program.for_thread(os.getppid()))

    def started_child(self) -> None:
        """A tree's first process started, confined (a one-shot command's, on whatever thread it spawned, or a
        terminal's child): counted. Only here, once the start succeeded: a spawn that failed started no tree (the
        trace's spawn hands a spare work that keeps its own outcome, so the spare cannot tell)."""
        self.trees += 1
        self.metrics.confined_trees.inc()

    def helper_argv(self, argv: list[str]) -> list[str]:
        """A ProxyCommand's command line: run through the confining launcher (confine/run.py)."""
        return [sys.executable, "-I", "-m", "relay_shell.confine.run", "--", *argv]

    def record_fields(self) -> dict[str, Any]:
        return {"confinement": self.label}

    def guide_note(self) -> str:
        """The operating guide's section on this host (the same from ABI 6 on: server_info has the details)."""
        note = (
            "\n## Readonly on this host\n\nReadonly is enforced by the kernel here: every process you start is "
            "confined, whatever the classifier admitted. `server_info` (`enforcement.refused`) lists what fails, with "
            "`Permission denied` or `Operation not permitted`.\n"
        )
        if self.not_enforced:
            note += (
                f"\nWARNING: only partly (Landlock ABI {self.abi}): the kernel here does not refuse "
                f"{'; '.join(self.not_enforced)}. The classifier alone stands there: send no signals.\n"
            )
        return note

    def status(self) -> dict[str, Any]:
        return {
            "readonly": self.label,
            "setting": self.setting,
            "landlock_abi": self.abi,
            "no_new_privs": True,
            "refused": _refused(self.abi),
            "not_enforced": self.not_enforced,
            "capabilities_kept": sorted(capabilities.KEPT.values()) if self.privileged else [],
            "trees_confined": self.trees,
            "confinement_failures": self.failures,
        }


def _refused(abi: int) -> list[str]:
    """What the kernel refuses a readonly tree at this ABI, in words."""
    refused = [
        "creating, writing, truncating, renaming, linking or removing files (but /dev/null and its terminal)",
        "changing file modes, owners, times, extended attributes or inode flags",
        "gaining privileges (no_new_privs: set-user-ID programs such as sudo run unprivileged)",
        "ptrace and /proc access to processes outside the call",
        "System V IPC and POSIX message-queue changes, io_uring, pushing input into a terminal",
        "changing other processes' limits, priorities or scheduling; clearing the kernel log",
        "adding, requesting, linking, changing or removing kernel keys (keyctl reads only)",
        "file leases and exclusive flock (shared locks, what readers take, are allowed)",
        "listening on any socket; binding an abstract unix name (but the lengths of 10, 14, 18 and 26 bytes)",
    ]
    if abi < 5:
        refused.append("the loop driver's ioctls and the CD-ROM tray and door")
    if abi >= 4:
        refused.append("listening on TCP ports (bind)")
    if abi >= 5:
        refused.append("ioctls on devices it opens but /dev/null and its terminal (blkid, fdisk -l, hwclock fail)")
    if abi >= 6:
        refused.append("signals to processes outside the call; connecting to abstract unix sockets outside it")
    return refused


class ConfinementUnavailable(Exception):
    """Readonly cannot be enforced by the kernel here; the message says why."""


def start_confinement(setting: str, metrics: Any) -> Confinement:
    """Readonly mode's confinement, after Landlock's ABI and one confined thread made for real (what a
    container's seccomp policy or a missing capability would refuse shows here, not on a call's path);
    ConfinementUnavailable naming why not."""
    try:
        abi = landlock.abi_version()
    except landlock.LandlockUnavailable as exc:
        raise ConfinementUnavailable(str(exc)) from None
    try:
        confinement = Confinement(abi, setting, metrics)
        confinement.on_confined_thread(lambda: None)
    except (OSError, ConfinementRefused, syscall_filter.FilterUnavailable) as exc:
        raise ConfinementUnavailable(f"Landlock ABI {abi} is here but a thread cannot be confined: {exc}") from None
    # No ptrace or /proc access to the server from a tree without CAP_SYS_PTRACE (which they never hold): the
    # spawning thread shares a tree's domain while it spawns (above).
    if _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise ConfinementUnavailable(f"prctl(PR_SET_DUMPABLE, 0): {os.strerror(ctypes.get_errno())}")
    confinement.spares = confinement.pool(None, None)
    return confinement
