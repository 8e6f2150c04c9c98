"""What the service thread learns of a paused exec before answering it, and the answer (adr/0027).

Only what must be read while the process waits is read here, since each microsecond delays the exec: the request
(path and argv, read once from /proc/PID/mem); where the program is, resolved in the process's context while that
context still exists (its working directory, its descriptors, its /proc/self: a descriptor closed on exec, a
process that exits at once); and, only when RELAY_SHELL_EXEC_DENY has patterns, the verdict. Without patterns the
answer never depends on what was read, and the program of an absolute path is taken from a one-second cache when
its resolution depended on nothing of the process. Decoding, redaction and the record are built afterwards, in
batches (tracer.py).
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import Any

from relay_shell.trace import memory, resolve, seccomp
from relay_shell.trace.deny import refusal
from relay_shell.trace.resolve import Target

UNDETERMINED_REFUSED = "the program it runs cannot be determined"


@dataclass(slots=True)
class Paused:
    """A paused exec as read before its answer."""

    raw: tuple[bytes, list[bytes], int, bool] | None = None  # path, argv, argc, argv cut; None: not its memory
    target: Target | None = None
    denied: bool = False  # refused by RELAY_SHELL_EXEC_DENY
    answer: int = 0  # 0: CONTINUE, else the errno it fails with
    unreadable: bool = False  # still waiting, but its request could not be read
    quick: bool = False  # a native execve of an absolute path resolved without the process (the answerer's kind)


def read_paused(
    reader: memory.Reader,
    notifications: seccomp.Notifications,
    notif_id: int,
    pid: int,
    number: int,
    arch: int,
    args: tuple[int, ...],
    deny: list[Any],
) -> Paused:
    """The request, the target and the answer of one notification. Never raises: a request that cannot be read
    is `unreadable` (refused while patterns are set: it cannot be checked). Whether what was read was the
    waiting process's own memory is told by the answer (tracer.py): it reaches the process only if the process
    waited all along, so its pid was never another's."""
    paused = Paused()
    try:
        compat = seccomp.compat_abi(arch, number)
        if compat:
            args = tuple(value & 0xFFFFFFFF for value in args)
        execveat = number in seccomp.EXECVEAT_NUMBERS
        path_address, argv_address = (args[1], args[2]) if execveat else (args[0], args[1])
        raw = paused.raw = memory.read_request(reader, pid, path_address, argv_address, 4 if compat else 8)
        path = memory.decode(raw[0])
        if deny or execveat or not path.startswith("/"):
            dirfd = resolve.signed_dirfd(args[0]) if execveat else resolve.AT_FDCWD
            paused.target = resolve.locate(pid, path, execveat, dirfd, int(args[4]) if execveat else 0)
        else:
            paused.target = resolve.locate_cached(pid, path)
            paused.quick = not compat and not paused.target.context
        if deny and paused.target.outcome == "ok":
            verdict(paused, deny, [memory.decode(item) for item in raw[1]], pid)
    except Exception:  # never leave a process waiting: it is answered whatever happened here
        paused.raw = paused.target = None
        paused.unreadable = True  # if the answer reaches it, it was waiting: an exec that could not be read
        paused.answer = errno.EPERM if deny else 0
    return paused


def verdict(paused: Paused, deny: list[Any], arguments: list[str], pid: int) -> None:
    """EPERM when a pattern matches any of the exec's texts, or when the program (or the one a loader in it
    loads) cannot be determined."""
    target = paused.target
    assert target is not None
    why = refusal(deny, target, arguments, pid)
    if why is not None:
        paused.answer, paused.denied = errno.EPERM, True
        target.refusal = f"{UNDETERMINED_REFUSED}: {why}" if why else ""
