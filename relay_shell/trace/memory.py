"""What a paused execve/execveat asks for, read from the process's memory (/proc/PID/mem), and what the kernel
will make of it.

Every read is bounded: a path up to PATH_MAX, at most MAX_ARGS argument pointers and MAX_ARG_BYTES of argument
text per exec (an argument longer than the kernel's MAX_ARG_STRLEN cannot be passed anyway), reads never cross
a page (a string ending just before an unmapped page must not fail the read). The caller checks with
NOTIF_ID_VALID afterwards that the process is still the one waiting: otherwise the memory may be another
program's.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

PAGE = 4096
PATH_MAX = 4096
MAX_ARGS = 1024  # argument pointers read; the count goes on (argc) up to MAX_ARG_POINTERS
MAX_ARG_POINTERS = 1 << 20
MAX_ARG_BYTES = 256 * 1024  # argument text read per exec, all arguments together
MAX_ARG_STRLEN = 32 * PAGE  # the kernel's limit for one argument
AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000


@dataclass
class ExecRequest:
    pid: int
    path: str  # absolute, as asked for (symlinks not followed), or "" when unreadable
    argv: list[str]
    argc: int  # the real count (argv may be shorter: MAX_ARGS, MAX_ARG_BYTES)
    argv_cut: bool  # argv or one of its strings is not complete


def _read_string(mem: int, address: int, limit: int) -> tuple[bytes, bool]:
    """The NUL-terminated string at `address`, at most `limit` bytes; (text, complete)."""
    pieces = []
    total = 0
    while total < limit:
        size = min(PAGE - address % PAGE, limit - total)
        chunk = os.pread(mem, size, address)
        if not chunk:
            break
        end = chunk.find(b"\0")
        if end >= 0:
            pieces.append(chunk[:end])
            return b"".join(pieces), True
        pieces.append(chunk)
        total += len(chunk)
        address += len(chunk)
    return b"".join(pieces), False


def read_request(pid: int, execveat: bool, dirfd: int, path_address: int, argv_address: int, flags: int) -> ExecRequest:
    """OSError when the memory cannot be read (the process is gone)."""
    mem = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
    try:
        raw_path, _ = _read_string(mem, path_address, PATH_MAX) if path_address else (b"", True)
        argv: list[str] = []
        argc = 0
        cut = False
        budget = MAX_ARG_BYTES
        address = argv_address
        while argv_address and argc < MAX_ARG_POINTERS:
            size = PAGE - address % PAGE
            block = os.pread(mem, size, address)
            if len(block) < 8:
                break
            count = len(block) // 8
            pointers = memoryview(block)[: count * 8].cast("Q")
            finished = False
            for pointer in pointers:
                if pointer == 0:
                    finished = True
                    break
                argc += 1
                if len(argv) < MAX_ARGS and budget > 0:
                    text, complete = _read_string(mem, pointer, min(budget, MAX_ARG_STRLEN))
                    budget -= len(text) + 1
                    argv.append(text.decode("utf-8", errors="backslashreplace"))
                    cut = cut or not complete
                else:
                    cut = True
            if finished:
                break
            address += count * 8
    finally:
        os.close(mem)
    path = raw_path.decode("utf-8", errors="backslashreplace")
    return ExecRequest(pid, _absolute(pid, path, execveat, dirfd, flags), argv, argc, cut)


def _absolute(pid: int, path: str, execveat: bool, dirfd: int, flags: int) -> str:
    if path.startswith("/"):
        return os.path.normpath(path)
    signed_dirfd = dirfd - (1 << 64) if dirfd >= 1 << 63 else dirfd
    signed_dirfd = signed_dirfd - (1 << 32) if 1 << 31 <= signed_dirfd < 1 << 32 else signed_dirfd
    try:
        if execveat and signed_dirfd != AT_FDCWD:
            base = os.readlink(f"/proc/{pid}/fd/{signed_dirfd}")
            if not path and flags & AT_EMPTY_PATH:
                return base  # fexecve: the open file itself
        else:
            base = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return path
    return os.path.normpath(os.path.join(base, path))


def parent_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            data = stat_file.read()
    except OSError:
        return 0
    return int(data[data.rfind(b")") + 2 :].split(None, 2)[1])


def predict(pid: int, path: str) -> tuple[str, bool]:
    """What the kernel will answer, from the file as the process sees it (its root): "ok", "ENOENT" (missing:
    a PATH search's miss), or "EACCES"; and whether the file is set-user/group-ID."""
    try:
        info = os.stat(f"/proc/{pid}/root{path}")
    except (FileNotFoundError, NotADirectoryError):
        return "ENOENT", False
    except OSError:
        return "ok", False  # cannot tell (a directory we may not search): assume the exec went on
    setid = bool(info.st_mode & (stat.S_ISUID | stat.S_ISGID))
    if not stat.S_ISREG(info.st_mode) or not info.st_mode & 0o111:
        return "EACCES", setid
    return "ok", setid
