"""The compiled answerer (trace/answerer.c, adr/0032) and native spawner (trace/spawner.c, adr/0036), loaded with
ctypes: the service thread waits in the answerer, and it answers the common exec itself without the GIL; everything
else it hands to the Python path (tracer.py) as it was received. The spawner thread waits in the spawner, which
starts a traced one-shot tree's first process without the GIL, its first exec answered by the answerer. Optional:
built at install where a C compiler is (setup.py); without it, or with RELAY_EXEC_TRACE_ANSWERER=python, every exec
is answered and every tree spawned from Python, as before.

Python keeps the answerer's tables: which session leaders name an open tree whose execs it may answer (lineage.py),
and which absolute paths resolved without anything of a process in them (resolve.locate_cached), each under a
token that names the tree or the resolution when the answered exec comes back in a batch (`take`).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.machinery
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from relay_shell.trace import resolve, seccomp

# `python`: the compiled answerer is not used (the suite runs both ways). Not a RELAY_SHELL_ setting: a build and
# test switch, which the tests' servers inherit (they drop RELAY_SHELL_* from their environment).
FORCE_PYTHON = "RELAY_EXEC_TRACE_ANSWERER"
ABI = 7  # answerer.c's ANSWERER_ABI: the layout of what it hands over
SPAWNER_ABI = 2  # spawner.c's spawner_abi: the layout of struct spawn_request
IDLE, RECEIVED, FULL = 0, 1, 2
PATH_SLOTS = 64
IDLE_MS = 50  # milliseconds without an exec after which the execs answered here are recorded
PATH_BYTES = 256
_DONE = struct.Struct("=diiiiIII4x")  # at, pid, tree, path, ppid, argc, offset, length (answerer.c struct done)
_BATCH_HEADER = 8  # count, used
_QUEUE_MAX = 1024


def _library_path() -> Path | None:
    here = Path(__file__).parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = here / f"_answerer{suffix}"
        if candidate.exists():
            return candidate
    return None


def load() -> tuple[ctypes.CDLL | None, str]:
    """The library, or None and why not."""
    if os.environ.get(FORCE_PYTHON, "").strip().lower() == "python":
        return None, f"{FORCE_PYTHON}=python"
    path = _library_path()
    if path is None:
        return None, "not built (no C compiler at install)"
    try:
        library = ctypes.CDLL(str(path), use_errno=True)
    except OSError as exc:
        return None, f"cannot be loaded: {exc}"
    abi = getattr(library, "answerer_abi", None)
    if abi is None or abi() != ABI:
        return None, f"{path.name} was built from another version (pip install -e . rebuilds it)"
    void_p, i32, u32 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_uint32
    library.answerer_new.restype = void_p
    library.answerer_new.argtypes = [ctypes.c_int]
    library.answerer_enable.argtypes = [void_p, ctypes.c_int]
    library.answerer_starting.argtypes = [void_p, ctypes.c_int]
    library.answerer_leader.argtypes = [void_p, i32, i32]
    library.answerer_listed.argtypes = [void_p, i32, i32]
    library.answerer_forget_tree.argtypes = [void_p, i32]
    library.answerer_path.argtypes = [void_p, u32, ctypes.c_char_p, u32, i32, i32, ctypes.c_double]
    library.answerer_waiting.restype = u32
    library.answerer_waiting.argtypes = [void_p]
    library.answerer_swap.restype = void_p
    library.answerer_swap.argtypes = [void_p, ctypes.POINTER(u32)]
    library.answerer_parents_read.restype = ctypes.c_uint64
    library.answerer_parents_read.argtypes = [void_p]
    library.answerer_received.restype = void_p
    library.answerer_received.argtypes = [void_p]
    library.answerer_wait.argtypes = [void_p, ctypes.c_int, ctypes.c_int]
    library.answerer_first_answered.restype = i32
    library.answerer_first_answered.argtypes = [void_p, i32]
    library.spawner_new.restype = void_p
    library.spawner_new.argtypes = []
    library.spawner_attach.argtypes = [void_p, void_p]
    library.spawner_serve.argtypes = [void_p]
    library.spawner_submit.argtypes = [void_p, ctypes.POINTER(SpawnRequest)]
    library.spawner_python.argtypes = [void_p]
    # Readonly's confined spawner (spares.c, confine/spares.py NativeSparePool).
    library.spares_new.restype = void_p
    library.spares_new.argtypes = [ctypes.c_int, ctypes.c_uint]
    library.spares_serve.argtypes = [void_p]
    library.spares_take.restype = void_p
    library.spares_take.argtypes = [void_p]
    library.spares_submit.argtypes = [void_p, void_p, ctypes.POINTER(SpawnRequest), void_p]
    library.spares_state.argtypes = [void_p, ctypes.POINTER(i32)]
    return library, ""


class SpawnRequest(ctypes.Structure):
    """spawner.c's struct spawn_request: one spawn, filled by the event loop's thread (trace/spawn.py)."""

    _fields_ = [
        ("path", ctypes.c_char_p),
        ("argv", ctypes.c_void_p),
        ("envp", ctypes.c_void_p),
        ("cwd", ctypes.c_char_p),
        ("stdin_fd", ctypes.c_int32),
        ("stdout_fd", ctypes.c_int32),
        ("stderr_fd", ctypes.c_int32),
        ("unit_threads", ctypes.c_int32),
        ("home_threads", ctypes.c_int32),
        ("tree", ctypes.c_int32),
        ("pid", ctypes.c_int32),
        ("error", ctypes.c_int32),
        ("stage", ctypes.c_int32),
        ("finished", ctypes.c_int32),
        ("unit_dir", ctypes.c_int32),  # the unit's cgroup directory (O_PATH), -1: none
    ]


# Where a native spawn failed (spawner.c): the file actions, entering the unit's cgroup, posix_spawn (the program
# could not run, as Popen reports it), leaving the cgroup (the child was spawned).
SPAWNED, ACTIONS, ENTERING, SPAWNING, LEAVING = 0, 1, 2, 3, 4


class NativeSpawner:
    """spawner.c's spawner: `serve` on the spawner thread only, `submit` from the thread that waits for a spawn,
    `python` from any thread."""

    def __init__(self, library: ctypes.CDLL, handle: int) -> None:
        self.library = library
        self.handle = ctypes.c_void_p(handle)
        self.attached = False  # an answerer answers the first exec of what it starts: only then is it used

    def attach(self, answerer: Answerer) -> None:
        self.library.spawner_attach(self.handle, answerer.handle)
        self.attached = True

    def serve(self) -> None:
        """On the spawner thread: spawn what is submitted until work for Python is posted."""
        self.library.spawner_serve(self.handle)

    def python(self) -> None:
        self.library.spawner_python(self.handle)

    def submit(self, request: SpawnRequest) -> None:
        self.library.spawner_submit(self.handle, ctypes.byref(request))


class NativeSpare:
    """Readonly's confined spawner (spares.c, confine/spares.py `NativeSparePool`), taken for one spawn: `submit`
    has its creator thread carry the request out (it enters the unit, spawns a child that makes its own Landlock
    domain before its exec), waited for with the GIL released. `answerer`: the compiled answerer that lets the
    traced tree's first exec go (None: untraced)."""

    def __init__(self, library: ctypes.CDLL, pool: ctypes.c_void_p, handle: int, answerer: Answerer | None) -> None:
        self.library = library
        self.pool = pool
        self.handle = ctypes.c_void_p(handle)
        self.answerer = None if answerer is None else answerer.handle

    def submit(self, request: SpawnRequest) -> None:
        self.library.spares_submit(self.pool, self.handle, ctypes.byref(request), self.answerer)


def born_in_unit() -> int:
    """How many native spawns so far were born in their unit by clone3 (0 without the library)."""
    library, _ = load()
    count = None if library is None else getattr(library, "spawner_born_in_unit", None)
    if count is None:
        return 0
    count.restype = ctypes.c_uint64
    return int(count())


def spawner() -> NativeSpawner | None:
    """The native spawner, or None (not built, built without it, or RELAY_EXEC_TRACE_ANSWERER=python)."""
    library, _ = load()
    if library is None or not library.spawner_available():
        return None
    abi = getattr(library, "spawner_abi", None)
    if abi is None or abi() != SPAWNER_ABI:  # built from another version: its requests are laid out otherwise
        return None
    handle = library.spawner_new()
    return NativeSpawner(library, handle) if handle else None


@dataclass(slots=True)
class Answered:
    """An exec the answerer answered: when, which process, its tree's and its path resolution's tokens, and what
    it read before the answer (the path, argv)."""

    at: float
    pid: int
    ppid: int  # 0 when not read (no entry is listed for it)
    tree: int
    target: resolve.Target  # the resolution of its path the answer was given from
    raw_path: bytes
    argv: list[bytes]


class Answerer:
    """One answerer over the tracer's listener. Its tables change from any thread (its own lock);
    `wait` is called by the service thread only, `take` under the tracer's lock only."""

    def __init__(self, library: ctypes.CDLL, listener: int) -> None:
        self.library = library
        handle = library.answerer_new(listener)
        if not handle:
            raise MemoryError("the exec trace's answerer")
        self.handle = ctypes.c_void_p(handle)
        self.received_address = int(library.answerer_received(self.handle))
        self.faults = ctypes.c_uint32(0)
        # The paths it may answer: path -> (table slot, token, resolution); tokens -> resolutions. A token replaced
        # is retired, and forgotten once a batch was taken after it (no exec answered later names it).
        self.paths: dict[bytes, tuple[int, int, resolve.Target]] = {}
        self.slot_paths: list[bytes | None] = [None] * PATH_SLOTS
        self.resolutions: dict[int, resolve.Target] = {}
        self.retired: list[int] = []
        self.next_slot = 0
        self.last_token = 0

    def enable(self, enabled: bool) -> None:
        self.library.answerer_enable(self.handle, int(enabled))

    def starting(self, starting: bool) -> None:
        self.library.answerer_starting(self.handle, int(starting))

    def leader(self, sid: int, tree: int) -> None:
        """A tree's leader: the execs of its session are the tree's."""
        self.library.answerer_leader(self.handle, sid, tree)

    def listed(self, tree: int, left: int) -> None:
        """At most `left` more of the tree's execs are listed (ExecTrace.entries_left): the answerer reads the parent
        of that many listed execs, then no more until told again."""
        self.library.answerer_listed(self.handle, tree, min(left, 2**31 - 1))

    def forget_tree(self, tree: int) -> None:
        self.library.answerer_forget_tree(self.handle, tree)

    def learn_path(self, raw: bytes, path: str) -> None:
        """Under the tracer's lock, on the service thread: execs of this path may be answered here from its
        resolution while that is fresh (resolve.locate_cached's second). Not for a path with a backslash: the cache
        is keyed by the decoded path, and decoding shows an undecodable byte as a backslash escape, so two paths
        could share one resolution."""
        fresh = resolve.cached(path)
        if fresh is None or "\\" in path or not raw or len(raw) >= PATH_BYTES or b"\0" in raw:
            return
        expires, target = fresh
        known = self.paths.get(raw)
        if known is not None and known[2] is target:
            return
        if known is not None:
            slot = known[0]
            self.retired.append(known[1])
        else:
            slot = self.next_slot
            self.next_slot = (slot + 1) % PATH_SLOTS
            evicted = self.slot_paths[slot]
            if evicted is not None:
                self.retired.append(self.paths.pop(evicted)[1])
        self.last_token += 1
        listed = int(target.outcome != "ENOENT")  # a miss is counted, never listed: its parent is not needed
        self.library.answerer_path(self.handle, slot, raw, len(raw), self.last_token, listed, expires)
        self.slot_paths[slot] = raw
        self.paths[raw] = (slot, self.last_token, target)
        self.resolutions[self.last_token] = target

    def wait(self, timeout: float) -> int:
        """IDLE, RECEIVED (a notification for Python: `received`), FULL; OSError when the listener fails. `timeout`
        in seconds, 0 (no waiting), or -1 (until something happens; IDLE_MS while answered execs wait for their
        record)."""
        timeout_ms = -1 if timeout < 0 else int(timeout * 1000)
        status = int(self.library.answerer_wait(self.handle, timeout_ms, 0 if timeout == 0 else IDLE_MS))
        if status < 0:
            raise OSError(-status, os.strerror(-status))
        return status

    def parents_read(self) -> int:
        """How many listed execs' parents it read (/proc/PID/stat), since it was made."""
        return int(self.library.answerer_parents_read(self.handle))

    def first_answered(self, tree: int) -> int:
        """The pid whose first exec the answerer let go for the native spawner's spawn of tree `tree`; 0: none."""
        return int(self.library.answerer_first_answered(self.handle, tree))

    def received(self) -> tuple[int, int, int, int, tuple[int, ...]]:
        """The notification the answerer received and handed over, unanswered (as Notifications.receive gives
        it)."""
        return seccomp.parse(ctypes.string_at(self.received_address, seccomp.NOTIF_SIZE))

    def take(self) -> tuple[list[Answered], int]:
        """Under the tracer's lock: the execs answered since the last take, in the order answered, and the answers
        that failed otherwise than by the process being gone (faults)."""
        if not self.library.answerer_waiting(self.handle):  # nothing queued (a lone first exec's tree): no swap
            self._forget_retired()
            return [], 0
        address = int(self.library.answerer_swap(self.handle, ctypes.byref(self.faults)))
        count = int.from_bytes(ctypes.string_at(address, 4), "little")
        found = []
        if count:
            entries = list(_DONE.iter_unpack(ctypes.string_at(address + _BATCH_HEADER, count * _DONE.size)))
            used = max(offset + length for *_, offset, length in entries)
            data = ctypes.string_at(address + _BATCH_HEADER + _QUEUE_MAX * _DONE.size, used)
            for at, pid, tree, path_token, ppid, argc, offset, length in entries:
                parts = data[offset : offset + length - 1].split(b"\0")
                target = self.resolutions[path_token]
                argv = parts[1 : 1 + argc] if argc else []
                found.append(Answered(at, pid, ppid, tree, target, parts[0], argv))
        self._forget_retired()
        return found, int(self.faults.value)

    def _forget_retired(self) -> None:
        """Tokens replaced before this take (both under the tracer's lock, and learnt on the service thread, which
        answers execs too: none is half-answered meanwhile): no exec answered later names them, and none queued
        before is left."""
        for token in self.retired:
            del self.resolutions[token]
        self.retired = []


def create(listener: int) -> tuple[Answerer | None, str]:
    """An answerer, or None and why the Python path answers everything."""
    library, why = load()
    if library is None:
        return None, why
    with contextlib.suppress(MemoryError):
        return Answerer(library, listener), ""
    return None, "out of memory"
