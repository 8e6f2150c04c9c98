"""One-shot spawns under the exec trace: glibc's posix_spawn called through ctypes.

Why not subprocess.Popen: under the trace the new process's execve waits for the server to answer its
notification, and Popen's vfork suspends the spawning thread until that execve is done. CPython 3.11 (what
Debian 12 ships) holds the GIL across that vfork, so no thread of the server could answer: a deadlock. A ctypes
call releases the GIL, and glibc's posix_spawn is a vfork-style clone too, so spawning stays as cheap as
Popen's (a fork of the server costs ~1.4 ms more per call, adr/0019). Used only for traced calls; what Popen
does that matters here is done the same way: the PATH of the child's environment is searched, a new session,
the working directory, stdin from /dev/null or a pipe, SIGPIPE and SIGXFSZ back to their defaults, no other
descriptor inherited.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import signal
import subprocess
from typing import IO

from relay_shell.trace import native
from relay_shell.trace.spawners import Spawner

_POSIX_SPAWN_SETSIGDEF = 0x04
_POSIX_SPAWN_SETSIGMASK = 0x08
_POSIX_SPAWN_SETSID = 0x80
_OPAQUE = 1024  # bytes for posix_spawn_file_actions_t (80 on glibc x86_64) and posix_spawnattr_t (336)
_SIGSET = 128

_libc = ctypes.CDLL(None, use_errno=True)
_libc.posix_spawn.argtypes = [
    ctypes.POINTER(ctypes.c_int),
    ctypes.c_char_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_char_p),
    ctypes.POINTER(ctypes.c_char_p),
]
_HAS_CLOSEFROM = hasattr(_libc, "posix_spawn_file_actions_addclosefrom_np")
_HAS_CHDIR = hasattr(_libc, "posix_spawn_file_actions_addchdir_np")
# Without these (glibc < 2.34) a traced spawn could not close the server's other descriptors or change directory
# in the child: traced calls are then spawned untraced with Popen (local/process.py), and their record says so.
SPAWN_READY = _HAS_CLOSEFROM and _HAS_CHDIR
SPAWN_MISSING = "glibc lacks posix_spawn_file_actions_addclosefrom_np/addchdir_np (before 2.34): spawned untraced"
# glibc's internal signals (SIGCANCEL 32, SIGSETXID 33): its posix_spawn sets them to SIG_IGN in the child, and an
# ignored disposition survives exec. sigaddset refuses them; SETSIGDEF's set is checked first, so their bits
# (signal n is bit n-1 of the set's first word) set directly give them their defaults, as Popen's children have.
_INTERNAL_SIGNAL_BITS = (1 << 31) | (1 << 32)


class SpawnedChild:
    """The parts of subprocess.Popen that local/process.py uses: pid, the pipes, wait() and returncode."""

    def __init__(self, pid: int, stdin: IO[bytes] | None, stdout: IO[bytes], stderr: IO[bytes] | None) -> None:
        self.pid = pid
        self.stdin = stdin
        self.stdout: IO[bytes] | None = stdout
        self.stderr = stderr
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        """Reap the child (it has exited or was SIGKILLed); subprocess.TimeoutExpired after `timeout`."""
        if self.returncode is not None:
            return self.returncode
        # Usually called once the child's pidfd said it exited (local/process.py): reaped at once, one system call.
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere (the containment's sweep): its status is gone
            pid, status = self.pid, 0
        if pid == self.pid:
            self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode
        pidfd = os.pidfd_open(self.pid)
        try:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            if not poller.poll(None if timeout is None else int(timeout * 1000)):
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
        finally:
            os.close(pidfd)
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:  # reaped elsewhere (the containment's sweep): its status is gone
            status = 0
        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def _array(items: list[bytes]) -> ctypes.Array[ctypes.c_char_p]:
    array = (ctypes.c_char_p * (len(items) + 1))()
    for index, item in enumerate(items):
        array[index] = item
    array[len(items)] = None
    return array


def resolve_program(program: str, env: dict[str, str] | None, cwd: str | None = None) -> str:
    """The executable Popen would run: a name with a slash as it is, else the first executable file found on
    the child's PATH (its environment's, else the server's). A relative PATH entry (`.`) is relative to the
    child's working directory, as in Popen's child after its chdir."""
    if "/" in program:
        return program
    denied = False
    for directory in os.get_exec_path(env):
        candidate = os.path.join(cwd or "", directory, program)
        if os.path.isfile(candidate):
            if os.access(candidate, os.X_OK):
                return candidate
            denied = True
    if denied:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)


def _pipes(with_stdin: bool, merge_stderr: bool) -> tuple[list[int], list[int], tuple[int, int, int]]:
    """The child's pipes: the parent's ends, the child's ends, and the child's stdin (-1: /dev/null), stdout and
    stderr. Every end is closed again when one cannot be made."""
    parent_ends: list[int] = []
    child_ends: list[int] = []
    try:
        stdout_read, stdout_write = os.pipe2(os.O_CLOEXEC)
        parent_ends.append(stdout_read)
        child_ends.append(stdout_write)
        stderr_target = stdout_write
        if not merge_stderr:
            stderr_read, stderr_target = os.pipe2(os.O_CLOEXEC)
            parent_ends.append(stderr_read)
            child_ends.append(stderr_target)
        stdin_read = -1
        if with_stdin:
            stdin_read, stdin_write = os.pipe2(os.O_CLOEXEC)
            parent_ends.append(stdin_write)
            child_ends.append(stdin_read)
    except BaseException:
        _close_all(parent_ends + child_ends)
        raise
    return parent_ends, child_ends, (stdin_read, stdout_write, stderr_target)


def _close_all(descriptors: list[int]) -> None:
    for descriptor in descriptors:
        with contextlib.suppress(OSError):
            os.close(descriptor)


def _child(pid: int, parent_ends: list[int], with_stdin: bool, merge_stderr: bool) -> SpawnedChild:
    stdout = open(parent_ends[0], "rb", buffering=0)
    stderr = None if merge_stderr else open(parent_ends[1], "rb", buffering=0)
    stdin = open(parent_ends[-1], "wb", buffering=0) if with_stdin else None
    return SpawnedChild(pid, stdin, stdout, stderr)


def spawn_natively(
    spawner: Spawner | native.NativeSpare,
    tree: int,
    argv: list[str],
    cwd: str | None,
    env: dict[str, str] | None,
    with_stdin: bool,
    merge_stderr: bool,
    path: str,
    cgroup_threads: tuple[int, ...],
) -> SpawnedChild:
    """`spawn`, carried out by the native spawner on the spawner thread (trace/spawner.c, adr/0036): the same
    file actions and attributes, the unit's cgroup (`cgroup_threads`: the unit's and the instance's cgroup.threads,
    -1 without cgroups, and the unit's cgroup directory when given: the child is born there by clone3, else the
    unit is entered and left around the spawn), the first exec of tree `tree` answered by the compiled answerer.
    The event loop's thread waits for it in one foreign call, the GIL released. `spawner` may be a readonly native
    spare instead (confine/spares.py), which carries it out the same way on itself. OSError as `spawn` raises it."""
    parent_ends, child_ends, (stdin_fd, stdout_fd, stderr_fd) = _pipes(with_stdin, merge_stderr)
    try:
        arguments = _array([os.fsencode(item) for item in argv])
        environment = None if env is None else _array([os.fsencode(f"{name}={value}") for name, value in env.items()])
        request = native.SpawnRequest(
            os.fsencode(path), ctypes.cast(arguments, ctypes.c_void_p),
            None if environment is None else ctypes.cast(environment, ctypes.c_void_p),
            None if cwd is None else os.fsencode(cwd), stdin_fd, stdout_fd, stderr_fd, cgroup_threads[0],
            cgroup_threads[1], tree, 0, 0, 0, 0, cgroup_threads[2] if len(cgroup_threads) > 2 else -1,
        )  # fmt: skip
        spawner.submit(request)
        if request.stage != native.SPAWNED:
            code = request.error
            if request.stage == native.SPAWNING:  # the program could not run: as Popen (and `_posix_spawn`) say
                missing_cwd = code == errno.ENOENT and cwd is not None and not os.path.isdir(cwd)
                raise OSError(code, os.strerror(code), cwd if missing_cwd else argv[0])
            raise OSError(code, os.strerror(code))
    except BaseException:
        _close_all(parent_ends)
        raise
    finally:
        _close_all(child_ends)
    return _child(request.pid, parent_ends, with_stdin, merge_stderr)


def spawn(
    argv: list[str],
    cwd: str | None,
    env: dict[str, str] | None,
    with_stdin: bool,
    merge_stderr: bool,
    path: str,
) -> SpawnedChild:
    """Start the program at `path` (resolve_program's) with argv in a new session, with pipes for stdout (and
    stderr unless merged) and stdin (or /dev/null); `env` None: the server's own environment as it is now (C's
    `environ`, which os.environ keeps up to date: nothing to copy or encode). OSError as Popen raises it when the
    program cannot run."""
    parent_ends, child_ends, (stdin_fd, stdout_fd, stderr_fd) = _pipes(with_stdin, merge_stderr)
    try:
        pid = _posix_spawn(path, argv, env, cwd, stdin_fd if with_stdin else None, stdout_fd, stderr_fd)
    except BaseException:
        _close_all(parent_ends)
        raise
    finally:
        _close_all(child_ends)
    return _child(pid, parent_ends, with_stdin, merge_stderr)


def _check(code: int) -> None:
    if code != 0:
        raise OSError(code, os.strerror(code))


def _attributes() -> ctypes.Array[ctypes.c_char]:
    """The spawn attributes every traced spawn shares, made once: a new session, every signal at its default (the
    internal ones included) and none blocked."""
    attributes = ctypes.create_string_buffer(_OPAQUE)
    defaults = ctypes.create_string_buffer(_SIGSET)
    empty_mask = ctypes.create_string_buffer(_SIGSET)
    _check(_libc.posix_spawnattr_init(attributes))
    _libc.sigemptyset(defaults)
    _libc.sigaddset(defaults, signal.SIGPIPE)
    _libc.sigaddset(defaults, signal.SIGXFSZ)
    first_word = int.from_bytes(defaults.raw[:8], "little") | _INTERNAL_SIGNAL_BITS
    ctypes.memmove(defaults, first_word.to_bytes(8, "little"), 8)
    _libc.sigemptyset(empty_mask)
    _check(_libc.posix_spawnattr_setsigdefault(attributes, defaults))
    _check(_libc.posix_spawnattr_setsigmask(attributes, empty_mask))
    flags = _POSIX_SPAWN_SETSID | _POSIX_SPAWN_SETSIGDEF | _POSIX_SPAWN_SETSIGMASK
    _check(_libc.posix_spawnattr_setflags(attributes, ctypes.c_short(flags)))
    return attributes


_ATTRIBUTES = _attributes() if SPAWN_READY else None
_ENVIRON = ctypes.POINTER(ctypes.c_char_p).in_dll(_libc, "environ")


def _posix_spawn(
    path: str,
    argv: list[str],
    env: dict[str, str] | None,
    cwd: str | None,
    stdin: int | None,
    stdout: int,
    stderr: int,
) -> int:
    """glibc's posix_spawn with what Popen does for these calls: stdin from the pipe (None: /dev/null), stdout
    and stderr onto theirs, the working directory, no other descriptor, a new session, every signal at its
    default and none blocked. The child's pid; OSError when the program cannot run."""
    actions = ctypes.create_string_buffer(_OPAQUE)
    _check(_libc.posix_spawn_file_actions_init(actions))
    try:
        if stdin is not None:
            _check(_libc.posix_spawn_file_actions_adddup2(actions, stdin, 0))
        else:
            _check(_libc.posix_spawn_file_actions_addopen(actions, 0, b"/dev/null", os.O_RDONLY, 0))
        _check(_libc.posix_spawn_file_actions_adddup2(actions, stdout, 1))
        _check(_libc.posix_spawn_file_actions_adddup2(actions, stderr, 2))
        if cwd is not None:
            _check(_libc.posix_spawn_file_actions_addchdir_np(actions, os.fsencode(cwd)))
        _check(_libc.posix_spawn_file_actions_addclosefrom_np(actions, 3))
        pid = ctypes.c_int(0)
        environment = (
            _ENVIRON if env is None else _array([os.fsencode(f"{name}={value}") for name, value in env.items()])
        )
        # The GIL is released for this call: the service thread answers the first execve meanwhile.
        code = _libc.posix_spawn(
            ctypes.byref(pid),
            os.fsencode(path),
            actions,
            _ATTRIBUTES,
            _array([os.fsencode(item) for item in argv]),
            environment,
        )
        if code != 0:
            filename = cwd if code == errno.ENOENT and cwd is not None and not os.path.isdir(cwd) else argv[0]
            raise OSError(code, os.strerror(code), filename)
        return pid.value
    finally:
        _libc.posix_spawn_file_actions_destroy(actions)
