"""A small ctypes layer over Landlock (Linux >= 5.13): the ABI the kernel offers, a ruleset that handles every
right that changes the file system (and, per ABI, TCP bind, signal and abstract-socket scoping), its few allowed
paths, and landlock_restrict_self. No binding, nothing compiled (adr/0024).

Landlock restricts the calling *thread* (no TSYNC flag before ABI 8), and every process it then creates inherits
the restriction for good: confine/confinement.py decides which thread that is.

Reads are never handled: a readonly call reads what the server's user may read. Rights of a newer ABI are left
out of the ruleset on an older kernel (it refuses unknown bits), which is how a feature degrades per ABI.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

# Landlock's syscalls have the same numbers on every architecture (added after the generic syscall table).
_CREATE_RULESET = 444
_ADD_RULE = 445
_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1

# linux/landlock.h: file system rights
WRITE_FILE = 1 << 1
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2: linking or renaming into another directory
TRUNCATE = 1 << 14  # ABI 3: truncate(2), ftruncate(2), O_TRUNC
IOCTL_DEV = 1 << 15  # ABI 5: ioctl(2) on a character or block device opened in the domain
# network rights (ABI 4) and scopes (ABI 6)
NET_BIND_TCP = 1 << 0
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1
# landlock_restrict_self flags (ABI 7): log denials of the programs the domain runs, not only of its creator
RESTRICT_SELF_LOG_NEW_EXEC_ON = 1 << 1

_CHANGES_ABI1 = (
    WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_CHAR | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO | MAKE_BLOCK
    | MAKE_SYM
)  # fmt: skip

# The ABI that gives all readonly promises (adr/0024): files, TCP bind (4), signal and abstract-socket scopes (6).
FULL_ABI = 6
KERNEL_OF_ABI = {1: "5.13", 2: "5.19", 3: "6.2", 4: "6.7", 5: "6.10", 6: "6.12", 7: "6.15"}
# For the test suite only, never an operator's setting: Landlock is used as if the kernel offered at most this ABI,
# so that a server can be run as an older kernel's would (only lowers; the banner warns while it is set). This
# machine's kernel has ABI 7, and the tests need the server's own behaviour below ABI 6 (adr/0024, Round 4).
SIMULATED_ABI_VARIABLE = "RELAY_SHELL_TEST_SIMULATE_LANDLOCK_ABI"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class LandlockUnavailable(Exception):
    """The kernel offers no Landlock here; the message says why."""


def abi_version() -> int:
    """The Landlock ABI of this kernel (7 on 6.15+), or the lower one SIMULATED_ABI_VARIABLE asks for;
    LandlockUnavailable naming why there is none."""
    version = _libc.syscall(
        ctypes.c_long(_CREATE_RULESET), None, ctypes.c_long(0), ctypes.c_long(_CREATE_RULESET_VERSION)
    )
    if version >= 1:
        simulated = simulated_abi()
        return min(int(version), simulated) if simulated is not None else int(version)
    code = ctypes.get_errno()
    if code == errno.ENOSYS:
        raise LandlockUnavailable("this kernel has no Landlock (Linux before 5.13, or built without it)")
    if code == errno.EOPNOTSUPP:
        raise LandlockUnavailable("Landlock is built in but not enabled (add `landlock` to the lsm= boot parameter)")
    raise LandlockUnavailable(f"landlock_create_ruleset: {os.strerror(code)} (a container's seccomp policy?)")


def simulated_abi() -> int | None:
    """The ABI the test-only SIMULATED_ABI_VARIABLE asks for, None when it is unset; LandlockUnavailable for a
    value that is not an ABI (nothing is guessed: readonly then runs as the setting says it must without one)."""
    raw = os.environ.get(SIMULATED_ABI_VARIABLE, "")
    if raw == "":
        return None
    if not raw.isdigit() or not 1 <= int(raw) <= max(KERNEL_OF_ABI):
        raise LandlockUnavailable(f"{SIMULATED_ABI_VARIABLE}={raw!r} is not a Landlock ABI (a test-only variable)")
    return int(raw)


def not_enforced(abi: int) -> list[str]:
    """What readonly promises that the kernel does not refuse at this ABI (below FULL_ABI): left to the
    classifier, in words an operator reads in the banner, server_info and the operating guide."""
    missing = []
    if abi < 4:
        missing.append("listening on TCP ports (Landlock ABI 4, Linux 6.7)")
    if abi < FULL_ABI:
        missing.append(
            "signals to processes outside the call, the server's own threads included: kill(2) or tkill(2) of any "
            "of the server's thread ids ends the server (Landlock ABI 6, Linux 6.12; the syscall filter refuses "
            "only the server's pid, its process group, the spawning thread and -1)"
        )
        missing.append("connecting to abstract unix sockets outside the call (Landlock ABI 6, Linux 6.12)")
    return missing


def handled_rights(abi: int) -> tuple[int, int, int]:
    """(file system rights, network rights, scopes) a readonly ruleset handles at this ABI: every right that
    changes the file system, TCP bind from ABI 4, device ioctls from ABI 5 (a loop device made or attached through
    /dev/loop-control or /dev/loopN opened read-only needs no capability), signal and abstract-socket scoping from
    ABI 6."""
    fs = _CHANGES_ABI1
    if abi >= 2:
        fs |= REFER
    if abi >= 3:
        fs |= TRUNCATE
    if abi >= 5:
        fs |= IOCTL_DEV
    net = NET_BIND_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    return fs, net, scoped


def device_rights(abi: int) -> int:
    """What a readonly tree may do to its allowed device files (/dev/null, its terminal): write, truncate on open
    (`> /dev/null` opens with O_TRUNC), and from ABI 5 their ioctls (`stty`, `less`, `top` on the terminal they
    reopen as /dev/tty or by its name; a descriptor opened before the domain keeps every ioctl)."""
    return WRITE_FILE | (TRUNCATE if abi >= 3 else 0) | (IOCTL_DEV if abi >= 5 else 0)


def create_ruleset(abi: int, writable_devices: list[str]) -> int:
    """A ruleset fd (close-on-exec) handling `handled_rights(abi)`, with `device_rights` on each of
    `writable_devices` that exists (a missing one, say /dev/tty in a container, is skipped). OSError when the kernel
    refuses."""
    fs, net, scoped = handled_rights(abi)
    # struct landlock_ruleset_attr grew with the ABI (8, 16, 24 bytes); the kernel accepts a longer one whose
    # unknown fields are zero, so the whole struct is always passed.
    attr = ctypes.create_string_buffer(struct.pack("=QQQ", fs, net, scoped), 24)
    fd = _libc.syscall(ctypes.c_long(_CREATE_RULESET), attr, ctypes.c_long(24), ctypes.c_long(0))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"landlock_create_ruleset: {os.strerror(code)}")
    try:
        for path in writable_devices:
            try:
                allow_beneath(int(fd), path, device_rights(abi))
            except FileNotFoundError:
                continue
    except BaseException:
        os.close(fd)
        raise
    return int(fd)


def allow_beneath(ruleset: int, path: str, rights: int) -> None:
    """Allow `rights` on `path` (a file: on it; a directory: beneath it). OSError when the kernel refuses;
    FileNotFoundError when the path does not exist."""
    target = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        # struct landlock_path_beneath_attr is packed: allowed_access u64, parent_fd s32
        rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, target), 12)
        result = _libc.syscall(
            ctypes.c_long(_ADD_RULE), ctypes.c_long(ruleset), ctypes.c_long(_RULE_PATH_BENEATH), rule, ctypes.c_long(0)
        )
        if result != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"landlock_add_rule({path}): {os.strerror(code)}")
    finally:
        os.close(target)


def restrict_flags(abi: int) -> int:
    """landlock_restrict_self's flags at this ABI (the native spares pass them too, trace/spares.c)."""
    return RESTRICT_SELF_LOG_NEW_EXEC_ON if abi >= 7 else 0


def restrict_self(ruleset: int, abi: int) -> None:
    """Put the calling thread (and everything it starts from now on) in a new Landlock domain made of `ruleset`.
    A ruleset can make any number of domains; each call makes a new one, so two trees never share one (a scope
    is a domain's boundary). Needs no_new_privs or CAP_SYS_ADMIN. OSError when the kernel refuses."""
    result = _libc.syscall(ctypes.c_long(_RESTRICT_SELF), ctypes.c_long(ruleset), ctypes.c_long(restrict_flags(abi)))
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"landlock_restrict_self: {os.strerror(code)}")
