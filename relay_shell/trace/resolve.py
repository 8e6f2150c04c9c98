"""Where an exec goes, as the kernel will see it: the path resolved in the traced process's context (its root, its
working directory, its descriptors, its own /proc/self), every link followed, and a `#!` script's interpreter
chain (adr/0027).

Resolved from the server, a path like `/dev/fd/99` or `/proc/self/fd/5` names the *server's* descriptor 99: the
entry named the wrong program and EXEC_DENY matched the wrong one (issue 26). So the walk is done here component
by component, as the kernel's path walk does it, against `/proc/PID/root`:

- a symlink is read and its target walked on (an absolute one from the process's root), at most 40;
- in a procfs, `self` and `thread-self` are the traced process's (its thread group's id, the notifying thread),
  not the reader's; any other procfs link below the procfs root is a *magic* link (`fd/N`, `cwd`, `root`, `exe`,
  `map_files/…`): it is followed by the kernel (opening `/proc/PID/…` from the server reaches the very object
  the process would), and the object is then named by its path only if that path leads back to the same file
  (same device and inode): a deleted file, a memfd, a pipe has no such name, and is *undetermined*;
- `..` is taken lexically on the resolved path (whose components are no links any more), never above the root.

A regular file starting with `#!` is a script: the kernel itself runs its interpreter (no second execve, so the
filter never sees it), with the line's one optional argument, then the script's path, then argv[1:]. The
interpreter is resolved the same way (relative to the working directory, like the kernel's open_exec), up to the
kernel's four levels, and recorded; an `env`-style interpreter's target (`#!/usr/bin/env -S prog args`) is read
from its arguments too. Each level is what EXEC_DENY is matched against as well.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shlex
import stat
import time
from dataclasses import dataclass, field

MAX_LINKS = 40  # the kernel's MAXSYMLINKS
MAX_LEVELS = 5  # binfmt rewrites the kernel follows before ELOOP (fs/exec.c exec_binprm)
HEADER = 256  # bytes of a file the kernel reads for its `#!` line (BINPRM_BUF_SIZE)
PROC_SUPER_MAGIC = 0x9FA0
PROC_ROOT_INODE = 1
AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
AT_EMPTY_PATH = 0x1000
CACHE_TTL = 1.0  # seconds a context-free resolution is reused for the record (never for an EXEC_DENY decision)
_CACHE_MAX = 512
_ENV_OPTIONS_WITH_VALUE = {"-u", "--unset", "-C", "--chdir", "-S", "--split-string", "-P"}

_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(slots=True)
class Interpreter:
    """One level of a `#!` chain: the interpreter as the line names it, the program it resolves to, the line's
    argument; for `env`, the program it is asked to run and that program's arguments."""

    path: str
    program: str | None
    argument: str | None
    target: list[str] = field(default_factory=list)  # env-style: the program env runs, then its arguments
    handle: str = ""  # a path by which the server reaches the interpreter (for the loader check, loader.py)


@dataclass(slots=True)
class Target:
    """What an exec asks for and what the kernel will run."""

    path: str  # absolute, as asked (lexically normalised, links not followed)
    program: str | None = None  # the file the kernel runs, every link followed; None when undetermined
    undetermined: str = ""  # why the program could not be named ("" when it was)
    outcome: str = "ok"  # predicted: ok, ENOENT, ENOTDIR, EACCES, ELOOP
    setid: bool = False
    interpreters: list[Interpreter] = field(default_factory=list)
    context: bool = False  # the answer depended on the process (cwd, descriptors, /proc): not cached
    handle: str = ""  # a path by which the server reaches the program (for the loader check, loader.py)
    refusal: str = ""  # why EXEC_DENY refused it when no pattern matched (what it runs cannot be determined)


class _Walk:
    """One path walk in one process's context. `view` is the path in the process's root (None once it went
    through an object no path names); `handle` is a path by which the server reaches the same object."""

    def __init__(self, pid: int, cwd: str | None = None) -> None:
        self.pid = pid
        self.cwd = cwd  # the working directory the exec will have, when it is not the process's own yet
        self.root = f"/proc/{pid}/root"
        self.links = 0
        self.context = False
        self._root_name: str | None = ""  # "" until read

    def start_at(self, raw: str, execveat: bool, dirfd: int) -> tuple[str | None, str, str]:
        """(view, handle, rest) to walk: from the root, the working directory, or an execveat descriptor."""
        if raw.startswith("/"):
            return "/", self.root, raw
        self.context = True
        if execveat and dirfd != AT_FDCWD:
            view, handle = self.magic(f"/proc/{self.pid}/fd/{dirfd}")
            return view, handle, raw
        if self.cwd is not None:
            return self.cwd, self.root + self.cwd, raw
        view, handle = self.magic(f"/proc/{self.pid}/cwd")
        return view, handle, raw

    def magic(self, link: str) -> tuple[str | None, str]:
        """A magic link, followed by the kernel: the object's path in the process's view when a path leads back
        to the same file (device and inode), else None (deleted, a memfd, a pipe, outside the process's root);
        and the link itself, which reaches the object from the server."""
        self.context = True
        try:
            named = os.readlink(link)  # the kernel's name for it, in the server's view
            reached = os.stat(link)
        except OSError:
            return None, link
        root = self.root_name()
        if not named.startswith("/") or root is None:
            return None, link
        if root != "/":
            if named != root and not named.startswith(root + "/"):
                return None, link
            named = named[len(root) :] or "/"
        try:
            found = os.stat(self.root + named)
        except OSError:
            return None, link
        if (found.st_dev, found.st_ino) != (reached.st_dev, reached.st_ino):
            return None, link
        return os.path.normpath(named), link

    def root_name(self) -> str | None:
        """The process's root in the server's view ("/" unless chrooted)."""
        if self._root_name == "":
            try:
                self._root_name = os.readlink(self.root)
            except OSError:
                self._root_name = None
        return self._root_name

    def walk(self, view: str | None, handle: str, rest: str, follow_last: bool) -> tuple[str | None, str, str]:
        """Walk `rest` from (view, handle). Returns (view, handle, outcome): outcome "" when the final object
        exists (its handle reaches it), else ENOENT, ENOTDIR, ELOOP, or `undetermined: …`."""
        pending = [part for part in rest.split("/") if part not in ("", ".")]
        pending.reverse()  # a stack: the next component last
        while pending:
            part = pending.pop()
            if part == "..":
                if view is not None:
                    view = os.path.dirname(view) if view != "/" else "/"
                    handle = self.root + view
                else:
                    handle = handle + "/.."
                continue
            candidate_handle = handle.rstrip("/") + "/" + part
            candidate_view = None if view is None else (view.rstrip("/") + "/" + part)
            try:
                info = os.lstat(candidate_handle)
            except FileNotFoundError:
                return candidate_view, candidate_handle, "ENOENT"
            except NotADirectoryError:
                return candidate_view, candidate_handle, "ENOTDIR"
            except OSError as exc:
                return None, candidate_handle, f"undetermined: {candidate_view or part}: {exc.strerror}"
            if stat.S_ISLNK(info.st_mode) and not pending and not follow_last:
                return candidate_view, candidate_handle, "ELOOP"  # execveat with AT_SYMLINK_NOFOLLOW on a link
            if not stat.S_ISLNK(info.st_mode):
                if pending and not stat.S_ISDIR(info.st_mode) and not stat.S_ISLNK(info.st_mode):
                    return candidate_view, candidate_handle, "ENOTDIR"
                view, handle = candidate_view, candidate_handle
                continue
            self.links += 1
            if self.links > MAX_LINKS:
                return candidate_view, candidate_handle, "ELOOP"
            if _in_procfs(handle):
                if _is_procfs_root(handle) and part in ("self", "thread-self"):
                    self.context = True
                    own = _thread_group(self.pid)
                    pending.extend(reversed([str(own), "task", str(self.pid)] if part == "thread-self" else [str(own)]))
                    continue
                if not _is_procfs_root(handle):
                    view, handle = self.magic(candidate_handle)
                    continue
            try:
                target = os.readlink(candidate_handle)
            except OSError as exc:
                return None, candidate_handle, f"undetermined: {candidate_view or part}: {exc.strerror}"
            if target.startswith("/"):
                view, handle = "/", self.root
            pending.extend(reversed([item for item in target.split("/") if item not in ("", ".")]))
        return view, handle, ""


def _in_procfs(handle: str) -> bool:
    """statfs(2)'s f_type (the first word of struct statfs): not in os.statvfs."""
    buffer = ctypes.create_string_buffer(256)
    if _libc.statfs(os.fsencode(handle), buffer) != 0:
        return False
    return int.from_bytes(buffer.raw[:8], "little") == PROC_SUPER_MAGIC


def _is_procfs_root(handle: str) -> bool:
    try:
        return os.stat(handle).st_ino == PROC_ROOT_INODE
    except OSError:
        return False


def _thread_group(pid: int) -> int:
    """The thread group of a notifying thread (what /proc/self is for it)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"Tgid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return pid


def lexical(pid: int, raw: str, execveat: bool, dirfd: int, flags: int, cwd: str | None = None) -> str:
    """The absolute path as asked, links not followed: relative to the working directory or the execveat
    descriptor; an execveat of the descriptor itself (fexecve) is `/dev/fd/N`, as the kernel names it."""
    if execveat and not raw and flags & AT_EMPTY_PATH:
        return f"/dev/fd/{dirfd}"
    if raw.startswith("/"):
        return os.path.normpath(raw) if ("/." in raw or "//" in raw) else raw
    try:
        if execveat and dirfd != AT_FDCWD:
            base = os.readlink(f"/proc/{pid}/fd/{dirfd}")
        elif cwd is not None:
            base = cwd
        else:
            base = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return raw
    return os.path.normpath(os.path.join(base, raw))


def signed_dirfd(value: int) -> int:
    """An execveat dirfd register (a 64- or 32-bit value) as the int the kernel takes."""
    value = value - (1 << 64) if value >= 1 << 63 else value
    return value - (1 << 32) if 1 << 31 <= value < 1 << 32 else value


def locate(
    pid: int,
    raw: str,
    execveat: bool = False,
    dirfd: int = AT_FDCWD,
    flags: int = 0,
    level: int = 0,
    cwd: str | None = None,
) -> Target:
    """Resolve an exec's path in process `pid`'s context (`cwd`: the working directory the exec will have, for
    the server's own exec of a tree's first program), predict the kernel's answer, and follow a `#!` chain."""
    walk = _Walk(pid, cwd)
    target = Target(path=lexical(pid, raw, execveat, dirfd, flags, cwd))
    if execveat and not raw and flags & AT_EMPTY_PATH:
        view, handle = walk.magic(f"/proc/{pid}/fd/{dirfd}")
        outcome = ""
    else:
        view, handle, rest = walk.start_at(raw, execveat, dirfd)
        if view is None and not raw.startswith("/"):
            outcome = "undetermined: the working directory or descriptor it is relative to has no path"
        else:
            view, handle, outcome = walk.walk(view, handle, rest, follow_last=not flags & AT_SYMLINK_NOFOLLOW)
    target.context = walk.context
    if outcome.startswith("undetermined"):
        target.undetermined = outcome.removeprefix("undetermined: ")
        return target
    if outcome:
        target.outcome = outcome  # the program is not run: it is not named
        return target
    _examine(target, view, handle, pid, level, cwd)
    return target


def _examine(target: Target, view: str | None, handle: str, pid: int, level: int, cwd: str | None) -> None:
    """The final object: its kind and mode, and for a script its interpreter chain."""
    target.program = view
    target.handle = handle
    if view is None:
        target.undetermined = "no path leads to the file it runs (deleted, a memfd, or another kind of object)"
    try:
        info = os.stat(handle)
    except OSError as exc:
        target.undetermined = target.undetermined or f"cannot look at it: {exc.strerror}"
        return
    target.setid = bool(info.st_mode & (stat.S_ISUID | stat.S_ISGID))
    if not stat.S_ISREG(info.st_mode) or not info.st_mode & 0o111:
        target.outcome = "EACCES"
        return
    try:
        descriptor = os.open(handle, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        # Unreadable here: whether it is a script (whose interpreter the kernel runs unseen) cannot be told.
        target.undetermined = target.undetermined or f"cannot read its first bytes: {exc.strerror}"
        return
    try:
        header = os.pread(descriptor, HEADER, 0)
    except OSError as exc:
        target.undetermined = target.undetermined or f"cannot read its first bytes: {exc.strerror}"
        return
    finally:
        os.close(descriptor)
    if header.startswith(b"#!"):
        _interpret(target, header, pid, level, cwd)


def _interpret(target: Target, header: bytes, pid: int, level: int, cwd: str | None) -> None:
    """A `#!` line as binfmt_script reads it (Linux 5.1+): the interpreter up to the first blank or NUL, then one
    optional argument, the rest of the line trimmed. Without a newline in the 256 bytes the kernel reads, a name
    that runs to their end is taken as cut, and the exec fails (ENOEXEC). The interpreter is resolved like an exec
    path (open_exec: relative to the working directory when relative)."""
    name, argument = shebang(header)
    if name is None:
        target.outcome = "ENOEXEC"
        return
    if level + 1 >= MAX_LEVELS:
        target.outcome = "ELOOP"
        return
    inner = locate(pid, os.fsdecode(name), level=level + 1, cwd=cwd)
    argument_text = None if argument is None else os.fsdecode(argument)
    level_entry = Interpreter(path=inner.path, program=inner.program, argument=argument_text, handle=inner.handle)
    if os.path.basename(inner.program or inner.path) == "env":
        level_entry.target = env_target(argument_text)
    target.interpreters = [level_entry, *inner.interpreters]
    target.context = target.context or inner.context
    if inner.undetermined and not target.undetermined:
        target.undetermined = f"its interpreter {inner.path}: {inner.undetermined}"
    if inner.outcome != "ok":
        # The kernel reports the interpreter's failure as the exec's own (a missing interpreter: ENOENT).
        target.outcome = inner.outcome


def shebang(header: bytes) -> tuple[bytes | None, bytes | None]:
    """(interpreter, argument) of a `#!` line, as fs/binfmt_script.c parses it; (None, None) when the kernel
    refuses it."""
    buffer = header[:HEADER].ljust(HEADER, b"\0")
    last = HEADER - 1  # the kernel's buf_end: the last byte is never part of the line
    end = buffer.find(b"\n", 0, HEADER)
    if end < 0:
        start = _skip_blanks(buffer, 2, last)
        if start is None or _terminator(buffer, start, last) is None:
            return None, None  # only blanks, or a name cut by the end of the buffer
        end = last
    while end > 2 and buffer[end - 1] in b" \t":
        end -= 1
    name_start = _skip_blanks(buffer, 2, end)
    if name_start is None or name_start == end:
        return None, None
    separator = _terminator(buffer, name_start, end)
    name = buffer[name_start : separator if separator is not None else end]
    argument = None
    if separator is not None and buffer[separator] != 0:
        argument_start = _skip_blanks(buffer, separator, end)
        if argument_start is not None:
            argument = buffer[argument_start:end].split(b"\0", 1)[0] or None
    return name, argument


def _skip_blanks(buffer: bytes, start: int, end: int) -> int | None:
    for index in range(start, end):
        if buffer[index] not in b" \t":
            return index
    return None


def _terminator(buffer: bytes, start: int, end: int) -> int | None:
    for index in range(start, end):
        if buffer[index] in b" \t\0":
            return index
    return None


def env_target(argument: str | None) -> list[str]:
    """What `env` runs when a `#!` line gives it `argument` (one argv element): with `-S` the string split into
    words, options and NAME=VALUE assignments skipped, then the program and its arguments; without it the whole
    argument is one program name (blanks included). [] when it names none (env then prints the environment)."""
    if not argument or (argument.startswith("-") and not argument.startswith("-S")):
        return []
    if not argument.startswith("-S"):
        return [] if "=" in argument else [argument]
    try:
        words = shlex.split(argument[2:])
    except ValueError:
        words = argument[2:].split()
    index = 0
    while index < len(words):
        word = words[index]
        if word == "--":
            return words[index + 1 :]
        if word in _ENV_OPTIONS_WITH_VALUE:
            index += 2
        elif word.startswith("-") or ("=" in word and not word.startswith("=")):
            index += 1
        else:
            return words[index:]
    return []


_cache: dict[str, tuple[float, Target]] = {}


def locate_cached(pid: int, raw: str, cwd: str | None = None) -> Target:
    """locate() of an absolute path, reused for CACHE_TTL when its resolution did not depend on the process (no
    working directory, descriptor or /proc in it): a loop running /bin/true a thousand times walks it once a second.
    For the record only: a decision (EXEC_DENY) always resolves afresh. A chrooted process shares the second with
    the same path outside its root."""
    now = time.monotonic()
    known = _cache.get(raw)
    if known is not None and now - known[0] < CACHE_TTL:
        return known[1]
    target = locate(pid, raw, cwd=cwd)
    if not target.context:
        if len(_cache) >= _CACHE_MAX:
            _cache.clear()
        _cache[raw] = (now, target)
    return target


def cached(raw: str) -> tuple[float, Target] | None:
    """A context-free resolution of `raw` still fresh: (until when, the resolution)."""
    known = _cache.get(raw)
    if known is None or time.monotonic() - known[0] >= CACHE_TTL:
        return None
    return known[0] + CACHE_TTL, known[1]


def failure_errno(outcome: str) -> int:
    return int(getattr(errno, outcome, errno.EACCES))
