"""The system calls a readonly tree may not make, as a classic seccomp filter (SECCOMP_RET_ERRNO, no listener):
what changes the host without a path Landlock could refuse (adr/0024, "What the syscall filter adds"). A small
hand-assembled BPF program, no binding, like trace/seccomp.py.

- File metadata, which Landlock does not cover: chmod, chown, extended attributes, times, inode flags
  (`chattr`), truncate(2) by path; and on kernels whose Landlock lacks TRUNCATE (ABI < 3), opening read-only
  with O_TRUNC (which truncates) and openat2 (its flags are out of the filter's reach).
- Shared state without a path: System V IPC (creating objects, sending, receiving, semaphore operations,
  removing or changing them, attaching shared memory writable), POSIX message queues other than opened for
  reading, io_uring (whose operations include setting extended attributes).
- Other processes: their resource limits, priorities, scheduling and I/O priority (only the caller's own may
  change), the kernel log cleared, input pushed into a terminal (TIOCSTI, TIOCLINUX), SIGIO ownership.
- State shared with other programs (adr/0024, Round 4): kernel keys (add_key, request_key, keyctl but its reads),
  file leases and exclusive flocks, listening on any socket and binding an address of a length no read-only program
  binds (abstract unix names); below Landlock ABI 5 (whose IOCTL_DEV covers every device) the loop driver's
  ioctls and the CD-ROM tray.
- The server: signals to its process, its process group or `thread` (the spawner thread, which shares the tree's
  Landlock domain while it spawns: confine/confinement.py), ptrace and process_vm_* on them, a pidfd of either,
  and pidfd_send_signal altogether (a /proc directory is a pidfd the filter cannot see the target of).
- Any other system-call ABI (i386, x32, arm32): the process is killed (no table of their numbers is kept).

The filter is installed on the thread that starts the tree (with no_new_privs) and is inherited by everything the
tree starts, for good.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from collections.abc import Callable
from dataclasses import dataclass

SECCOMP_SET_MODE_FILTER = 1
PR_SET_NO_NEW_PRIVS = 38
_RET_ALLOW = 0x7FFF0000
_RET_KILL_PROCESS = 0x80000000
_RET_EPERM = 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM
# opcodes (linux/filter.h)
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JGT_K = 0x25
_JSET_K = 0x45
_AND_K = 0x54
_RET_K = 0x06

_O_ACCMODE = 0o3
_O_CREAT = 0o100
_O_TRUNC = 0o1000
_IPC_CREAT = 0o1000
_SHM_RDONLY = 0o10000
_WRITING_IOCTLS = (
    0x5412,  # TIOCSTI: push input into a terminal
    0x541C,  # TIOCLINUX: the console's paste
    0x40086602,  # FS_IOC_SETFLAGS (chattr)
    0x40046602,  # FS_IOC32_SETFLAGS
    0x401C5820,  # FS_IOC_FSSETXATTR (project id, flags)
    0x40087602,  # FS_IOC_SETVERSION
    0x40047602,  # FS_IOC32_SETVERSION
)
# Device ioctls that change the host through a descriptor opened read-only and need no capability, refused below
# Landlock ABI 5 (from ABI 5 IOCTL_DEV refuses every ioctl on a device the tree opens but its terminal and
# /dev/null, confine/landlock.py): the loop driver's whole family (devices made, removed, attached, detached,
# resized) but its two status reads, and the CD-ROM tray and door. A floor of known families, not the class.
_LOOP_FAMILY = 0x4C00
_LOOP_READS = (0x4C03, 0x4C05)  # LOOP_GET_STATUS, LOOP_GET_STATUS64
_CDROM_CHANGES = (0x5309, 0x530F, 0x5319, 0x5329)  # CDROMEJECT, CDROMEJECT_SW, CDROMCLOSETRAY, CDROM_LOCKDOOR
_FCNTL_CHANGES = (8, 15, 1024)  # F_SETOWN, F_SETOWN_EX (SIGIO to another process), F_SETLEASE
_LOCK_EX = 2
# The lengths of the addresses read-only programs bind (the filter cannot read the address itself): a unix socket
# named by the kernel (autobind), netlink (ip, ss), IPv4 and IPv6 port 0 (dig, host), AF_PACKET (tcpdump), and
# struct sockaddr_storage (longer than any unix address, which the kernel refuses). An abstract unix name is the
# address's length less 2 bytes, so only names of 10, 14, 18 and 26 bytes stay bindable.
_BIND_LENGTHS = (2, 12, 16, 20, 28, 128)
# keyctl operations that only read or use a key: DESCRIBE, READ, GET_SECURITY, CAPABILITIES, and DH_COMPUTE to
# PKEY_VERIFY (23-28); GET_KEYRING_ID without creating and SEARCH without linking into a keyring are checked apart.
_KEYCTL_READS = (6, 11, 17, 31)
_KEYCTL_USES = (23, 28)
_SYSLOG_CHANGES = (4, 5, 6, 7, 8)  # read and clear, clear, console off, on, level


@dataclass(frozen=True)
class Arch:
    audit_arch: int
    seccomp: int  # the seccomp syscall's number
    x32_bit: bool  # another ABI shares the audit arch, told apart by this bit of the number
    numbers: dict[str, int]


_X86_64 = Arch(
    0xC000003E,
    317,
    True,
    {
        "open": 2, "ioctl": 16, "shmget": 29, "shmat": 30, "shmctl": 31, "bind": 49, "listen": 50, "kill": 62,
        "semget": 64, "semop": 65, "semctl": 66, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71,
        "fcntl": 72, "flock": 73, "truncate": 76, "chmod": 90, "fchmod": 91, "chown": 92, "fchown": 93,
        "lchown": 94, "ptrace": 101, "syslog": 103, "rt_sigqueueinfo": 129, "utime": 132, "setpriority": 141,
        "sched_setparam": 142, "sched_setscheduler": 144, "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190,
        "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199, "tkill": 200, "sched_setaffinity": 203,
        "semtimedop": 220, "tgkill": 234, "utimes": 235, "mq_open": 240, "mq_unlink": 241, "mq_timedsend": 242,
        "mq_timedreceive": 243, "add_key": 248, "request_key": 249, "keyctl": 250, "ioprio_set": 251, "openat": 257,
        "fchownat": 260, "futimesat": 261, "fchmodat": 268, "utimensat": 280, "rt_tgsigqueueinfo": 297,
        "prlimit64": 302, "process_vm_readv": 310, "process_vm_writev": 311, "sched_setattr": 314,
        "pidfd_send_signal": 424, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "pidfd_open": 434, "openat2": 437, "fchmodat2": 452, "setxattrat": 463, "removexattrat": 466,
    },
)  # fmt: skip
# The generic table (include/uapi/asm-generic/unistd.h): no chmod, chown, lchown, open, utime(s), futimesat.
_AARCH64 = Arch(
    0xC00000B7,
    277,
    False,
    {
        "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14, "lremovexattr": 15, "fremovexattr": 16,
        "fcntl": 25, "ioctl": 29, "ioprio_set": 30, "flock": 32, "truncate": 45, "fchmod": 52, "fchmodat": 53,
        "fchownat": 54, "fchown": 55, "openat": 56, "utimensat": 88, "syslog": 116, "ptrace": 117,
        "sched_setparam": 118, "sched_setscheduler": 119, "sched_setaffinity": 122, "kill": 129, "tkill": 130,
        "tgkill": 131, "rt_sigqueueinfo": 138, "setpriority": 140, "mq_open": 180, "mq_unlink": 181,
        "mq_timedsend": 182, "mq_timedreceive": 183, "msgget": 186, "msgctl": 187, "msgrcv": 188, "msgsnd": 189,
        "semget": 190, "semctl": 191, "semtimedop": 192, "semop": 193, "shmget": 194, "shmctl": 195, "shmat": 196,
        "bind": 200, "listen": 201, "add_key": 217, "request_key": 218, "keyctl": 219, "rt_tgsigqueueinfo": 240,
        "prlimit64": 261, "process_vm_readv": 270, "process_vm_writev": 271, "sched_setattr": 274,
        "pidfd_send_signal": 424, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "pidfd_open": 434, "openat2": 437, "fchmodat2": 452, "setxattrat": 463, "removexattrat": 466,
    },
)  # fmt: skip
ARCHES = {"x86_64": _X86_64, "aarch64": _AARCH64}

_ALWAYS_REFUSED = (
    "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat", "setxattr", "lsetxattr",
    "fsetxattr", "removexattr", "lremovexattr", "fremovexattr", "setxattrat", "removexattrat", "utime", "utimes",
    "futimesat", "utimensat", "truncate", "io_uring_setup", "io_uring_enter", "io_uring_register", "msgsnd",
    "msgrcv", "semop", "semtimedop", "mq_unlink", "mq_timedsend", "mq_timedreceive",
    # a /proc/PID directory is a pidfd too: no check of its target is possible, and a read-only command has no
    # signal to send (the spawning thread and the server were reachable through it, review S1)
    "pidfd_send_signal",
    # kernel keyrings: a key planted (in the user's keyring, kept after the call) and request_key, whose upcall
    # runs /sbin/request-key unconfined as the server's user
    "add_key", "request_key",
    # a stream service on a name others connect to (an abstract unix socket; TCP is Landlock's from ABI 4, and
    # listen(2) on an unbound socket binds an ephemeral port without bind(2))
    "listen",
)  # fmt: skip

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


class FilterUnavailable(Exception):
    """No filter for this machine; the message says why."""


def _arg(index: int, high: bool = False) -> int:
    """Offset in struct seccomp_data of argument `index`'s low (or high) 32 bits (little-endian machines)."""
    return 16 + 8 * index + (4 if high else 0)


class _Assembler:
    """BPF with labels: jumps go forward only, their offsets are counted from the next instruction."""

    def __init__(self) -> None:
        self.code: list[tuple[int, str | None, str | None, int]] = []
        self.labels: dict[str, int] = {}
        self.thread_slots: list[int] = []  # instructions whose constant is the spawner thread's id

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def emit(self, opcode: int, k: int = 0, true: str | None = None, false: str | None = None) -> None:
        self.code.append((opcode, true, false, k))

    def load(self, offset: int) -> None:
        self.emit(_LD_W_ABS, offset)

    def bytes(self) -> bytes:
        out = []
        for index, (opcode, true, false, k) in enumerate(self.code):
            offsets = [0 if target is None else self.labels[target] - index - 1 for target in (true, false)]
            if not all(0 <= offset <= 255 for offset in offsets):
                raise FilterUnavailable("the syscall filter's jumps are out of reach (a bug)")
            out.append(struct.pack("=HBBI", opcode, offsets[0], offsets[1], k & 0xFFFFFFFF))
        return b"".join(out)


@dataclass(frozen=True)
class Program:
    """The filter for one server process and ABI; `for_thread` fills in a spawner thread's id."""

    code: bytes
    thread_slots: tuple[int, ...]  # byte offsets of the constants holding the thread's id

    def for_thread(self, thread_id: int) -> bytes:
        code = bytearray(self.code)
        for offset in self.thread_slots:
            struct.pack_into("=I", code, offset + 4, thread_id)
        return bytes(code)


def build(server_pid: int, landlock_abi: int) -> Program:
    """The filter protecting `server_pid` (and a spawner thread named later) for a tree confined at this ABI.

    Its size is its cost: the kernel checks and compiles a filter as it is installed, ~0.45 µs an instruction
    here, once per tree. So refused numbers that follow each other are one range, and system calls checked
    alike share one block."""
    machine = platform.machine()
    arch = ARCHES.get(machine)
    if arch is None:
        raise FilterUnavailable(f"no syscall table for the {machine} architecture (x86_64 and aarch64 are known)")
    numbers = arch.numbers
    asm = _Assembler()
    asm.load(4)  # seccomp_data.arch
    asm.emit(_JEQ_K, arch.audit_arch, false="@kill_process")
    asm.load(0)  # seccomp_data.nr
    if arch.x32_bit:
        asm.emit(_JGE_K, 0x40000000, true="@kill_process")
    for low, high in _runs(sorted(numbers[name] for name in _ALWAYS_REFUSED if name in numbers)):
        if low == high:
            asm.emit(_JEQ_K, low, true="@refuse")
        else:  # low <= nr <= high
            asm.emit(_JGE_K, low, false=f"@past-{low}")
            asm.emit(_JGT_K, high, false="@refuse")
            asm.label(f"@past-{low}")
    checked = {name: kind for name, kind in _CHECKED.items() if name in numbers}
    if landlock_abi < 3:  # Landlock cannot refuse truncation on open: O_RDONLY|O_TRUNC truncates
        checked.update({"open": "read-only-truncate-1", "openat": "read-only-truncate-2", "openat2": "@refuse"})
        checked = {name: kind for name, kind in checked.items() if name in numbers}
    if landlock_abi < 5:  # no IOCTL_DEV: the device families that change the host through a read-only descriptor
        checked["ioctl"] = "device-ioctl-floor"
    for name, kind in checked.items():
        asm.emit(_JEQ_K, numbers[name], true=kind)
    asm.emit(_RET_K, _RET_ALLOW)
    for kind in dict.fromkeys(checked.values()):
        if not kind.startswith("@"):
            asm.label(kind)
            _BLOCKS[kind](asm, server_pid)
    asm.label("@allow")
    asm.emit(_RET_K, _RET_ALLOW)
    asm.label("@refuse")
    asm.emit(_RET_K, _RET_EPERM)
    asm.label("@kill_process")
    asm.emit(_RET_K, _RET_KILL_PROCESS)
    return Program(asm.bytes(), tuple(8 * index for index in asm.thread_slots))


def build_thread_guard() -> Program:
    """The rules of the filter that name the spawning thread, alone (its id filled in by `for_thread`): signals,
    pidfds, ptrace and process_vm_* aimed at it refused. For a spare made by a thread that carries the whole filter
    (confine/spares.py, adr/0037): the spare inherits that and installs only this, ~15 instructions instead of the
    kernel checking and compiling ~175 again. No check of the architecture: the inherited filter kills a call of
    any other ABI whatever this one answers (the kernel applies the most severe action of all filters)."""
    machine = platform.machine()
    arch = ARCHES.get(machine)
    if arch is None:
        raise FilterUnavailable(f"no syscall table for the {machine} architecture (x86_64 and aarch64 are known)")
    asm = _Assembler()
    asm.load(0)  # seccomp_data.nr
    for name, kind in _CHECKED.items():
        if kind in _THREAD_TARGETS and name in arch.numbers:
            asm.emit(_JEQ_K, arch.numbers[name], true=_THREAD_TARGETS[kind])
    asm.emit(_RET_K, _RET_ALLOW)
    for label, index in (("@thread-0", 0), ("@thread-1", 1)):
        asm.label(label)
        asm.load(_arg(index))
        asm.thread_slots.append(len(asm.code))
        asm.emit(_JEQ_K, 0, true="@refuse")
        asm.emit(_RET_K, _RET_ALLOW)
    asm.label("@refuse")
    asm.emit(_RET_K, _RET_EPERM)
    return Program(asm.bytes(), tuple(8 * index for index in asm.thread_slots))


def _runs(values: list[int]) -> list[tuple[int, int]]:
    """Sorted numbers as (first, last) of each run of consecutive ones."""
    runs: list[tuple[int, int]] = []
    for value in values:
        if runs and value == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], value)
        else:
            runs.append((value, value))
    return runs


Block = Callable[[_Assembler, int], None]
# Per system call, the check of its arguments it shares with others (each block ends in allow or refuse).
_CHECKED = {
    "kill": "signal-or-everyone",  # kill(pid, sig), rt_sigqueueinfo(pid, sig, info)
    "rt_sigqueueinfo": "signal-or-everyone",
    "tkill": "target-0",  # a pid or thread id as the first argument
    "pidfd_open": "target-0",
    "process_vm_readv": "target-0",
    "process_vm_writev": "target-0",
    "ptrace": "target-1",
    "tgkill": "server-threads",  # tgkill(tgid, tid, sig), rt_tgsigqueueinfo(tgid, tid, sig, info)
    "rt_tgsigqueueinfo": "server-threads",
    "prlimit64": "limits-of-others",
    "setpriority": "priority-of-others",
    "ioprio_set": "io-priority-of-others",
    "sched_setparam": "scheduling-of-others",
    "sched_setscheduler": "scheduling-of-others",
    "sched_setaffinity": "scheduling-of-others",
    "sched_setattr": "scheduling-of-others",
    "syslog": "kernel-log-changes",
    "ioctl": "writing-ioctls",
    "fcntl": "fcntl-changes",
    "flock": "exclusive-flock",
    "keyctl": "keyring-reads",
    "bind": "bind-lengths",
    "shmat": "writable-attach",
    "shmget": "ipc-create-2",
    "semget": "ipc-create-2",
    "msgget": "ipc-create-1",
    "shmctl": "shm-changes",
    "semctl": "sem-changes",
    "msgctl": "msg-changes",
    "mq_open": "queue-open-writing",
}
# The blocks whose target may be the spawning thread (`_refuse_targets`), and where the thread guard checks it.
_THREAD_TARGETS = {"signal-or-everyone": "@thread-0", "target-0": "@thread-0", "target-1": "@thread-1"}
_BLOCKS: dict[str, Block] = {
    # -1 (everyone) and the server's process group (-pgid), whose members a group signal reaches
    "signal-or-everyone": lambda asm, pid: _refuse_targets(
        asm, 0, pid, extra=(0xFFFFFFFF, -os.getpgid(pid) & 0xFFFFFFFF)
    ),
    "target-0": lambda asm, pid: _refuse_targets(asm, 0, pid),
    "target-1": lambda asm, pid: _refuse_targets(asm, 1, pid),
    "server-threads": lambda asm, pid: _refuse_values(asm, _arg(0), (pid,)),
    "limits-of-others": lambda asm, pid: _prlimit_of_others(asm),
    "priority-of-others": lambda asm, pid: _allow_only_self(asm, 0),  # (PRIO_PROCESS, 0)
    "io-priority-of-others": lambda asm, pid: _allow_only_self(asm, 1),  # (IOPRIO_WHO_PROCESS, 0)
    "scheduling-of-others": lambda asm, pid: _allow_values(asm, _arg(0), (0,)),
    "kernel-log-changes": lambda asm, pid: _refuse_values(asm, _arg(0), _SYSLOG_CHANGES),
    "writing-ioctls": lambda asm, pid: _refuse_values(asm, _arg(1), _WRITING_IOCTLS),
    "device-ioctl-floor": lambda asm, pid: _device_ioctl_floor(asm),
    "fcntl-changes": lambda asm, pid: _refuse_values(asm, _arg(1), _FCNTL_CHANGES),
    # flock(LOCK_EX) on a file opened read-only stops every other program's lock (an audit log's, a package
    # manager's); LOCK_SH, what readers take, is left to them
    "exclusive-flock": lambda asm, pid: _refuse_if_set(asm, _arg(1), _LOCK_EX),
    "keyring-reads": lambda asm, pid: _keyring_reads(asm),
    "bind-lengths": lambda asm, pid: _allow_values(asm, _arg(2), _BIND_LENGTHS),
    "writable-attach": lambda asm, pid: _refuse_unless_set(asm, _arg(2), _SHM_RDONLY),
    "ipc-create-1": lambda asm, pid: _refuse_if_set(asm, _arg(1), _IPC_CREAT),
    "ipc-create-2": lambda asm, pid: _refuse_if_set(asm, _arg(2), _IPC_CREAT),
    "shm-changes": lambda asm, pid: _refuse_masked(asm, _arg(1), (0, 1, 11, 12)),  # RMID, SET, LOCK, UNLOCK
    "sem-changes": lambda asm, pid: _refuse_masked(asm, _arg(2), (0, 1, 16, 17)),  # RMID, SET, SETVAL, SETALL
    "msg-changes": lambda asm, pid: _refuse_masked(asm, _arg(1), (0, 1)),  # RMID, SET
    "queue-open-writing": lambda asm, pid: _refuse_if_set(asm, _arg(1), _O_ACCMODE | _O_CREAT),
    "read-only-truncate-1": lambda asm, pid: _refuse_read_only_truncate(asm, _arg(1)),
    "read-only-truncate-2": lambda asm, pid: _refuse_read_only_truncate(asm, _arg(2)),
}


def _refuse_targets(asm: _Assembler, index: int, pid: int, extra: tuple[int, ...] = ()) -> None:
    """Refuse when argument `index` (a pid, compared as the kernel reads it: 32 bits) is the server, the
    spawner thread (its id filled in per tree), or one of `extra`."""
    asm.load(_arg(index))
    for value in (pid, *extra):
        asm.emit(_JEQ_K, value, true="@refuse")
    asm.thread_slots.append(len(asm.code))
    asm.emit(_JEQ_K, 0, true="@refuse")
    asm.emit(_RET_K, _RET_ALLOW)


def _refuse_values(asm: _Assembler, offset: int, values: tuple[int, ...]) -> None:
    asm.load(offset)
    for value in values:
        asm.emit(_JEQ_K, value, true="@refuse")
    asm.emit(_RET_K, _RET_ALLOW)


def _allow_values(asm: _Assembler, offset: int, values: tuple[int, ...]) -> None:
    asm.load(offset)
    for value in values:
        asm.emit(_JEQ_K, value, true="@allow")
    asm.emit(_RET_K, _RET_EPERM)


def _allow_only_self(asm: _Assembler, which_self: int) -> None:
    """setpriority/ioprio_set(which, who): only (which_self, 0), the calling process."""
    asm.load(_arg(0))
    asm.emit(_JEQ_K, which_self, false="@refuse")
    asm.load(_arg(1))
    asm.emit(_JEQ_K, 0, true="@allow", false="@refuse")


def _refuse_if_set(asm: _Assembler, offset: int, bits: int) -> None:
    asm.load(offset)
    asm.emit(_JSET_K, bits, true="@refuse")
    asm.emit(_RET_K, _RET_ALLOW)


def _refuse_unless_set(asm: _Assembler, offset: int, bits: int) -> None:
    asm.load(offset)
    asm.emit(_JSET_K, bits, true="@allow", false="@refuse")


def _refuse_masked(asm: _Assembler, offset: int, commands: tuple[int, ...]) -> None:
    """An IPC control command, IPC_64 (0x100) masked off."""
    asm.load(offset)
    asm.emit(_AND_K, 0xFF)
    for value in commands:
        asm.emit(_JEQ_K, value, true="@refuse")
    asm.emit(_RET_K, _RET_ALLOW)


def _refuse_read_only_truncate(asm: _Assembler, offset: int) -> None:
    asm.load(offset)
    asm.emit(_JSET_K, _O_TRUNC, false="@allow")
    asm.emit(_JSET_K, _O_ACCMODE, true="@allow", false="@refuse")


def _device_ioctl_floor(asm: _Assembler) -> None:
    """ioctl(fd, request) below Landlock ABI 5: the writing requests and the CD-ROM tray, then the loop family but
    its reads (request & ~0xFF)."""
    asm.load(_arg(1))
    for value in (*_WRITING_IOCTLS, *_CDROM_CHANGES):
        asm.emit(_JEQ_K, value, true="@refuse")
    for value in _LOOP_READS:
        asm.emit(_JEQ_K, value, true="@allow")
    asm.emit(_AND_K, 0xFFFFFF00)
    asm.emit(_JEQ_K, _LOOP_FAMILY, true="@refuse", false="@allow")


def _keyring_reads(asm: _Assembler) -> None:
    """keyctl(operation, ...): only what reads or uses a key; GET_KEYRING_ID (0) with create (argument 2) 0,
    SEARCH (10) with no keyring to link what it finds into (argument 4) — both would change a keyring."""
    asm.load(_arg(0))
    asm.emit(_JEQ_K, 0, true="@keyctl-no-create")
    asm.emit(_JEQ_K, 10, true="@keyctl-no-link")
    for value in _KEYCTL_READS:
        asm.emit(_JEQ_K, value, true="@allow")
    asm.emit(_JGE_K, _KEYCTL_USES[0], false="@refuse")
    asm.emit(_JGT_K, _KEYCTL_USES[1], true="@refuse", false="@allow")
    asm.label("@keyctl-no-create")
    asm.load(_arg(2))
    asm.emit(_JEQ_K, 0, true="@allow", false="@refuse")
    asm.label("@keyctl-no-link")
    asm.load(_arg(4))
    asm.emit(_JEQ_K, 0, true="@allow", false="@refuse")


def _prlimit_of_others(asm: _Assembler) -> None:
    """prlimit64(pid, resource, new, old): setting (new not NULL) the limits of another process (pid not 0)."""
    asm.load(_arg(0))
    asm.emit(_JEQ_K, 0, true="@allow")
    asm.load(_arg(2))
    asm.emit(_JEQ_K, 0, false="@refuse")
    asm.load(_arg(2, high=True))
    asm.emit(_JEQ_K, 0, true="@allow", false="@refuse")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(code: bytes) -> None:
    """Install the filter on the calling thread (which has no_new_privs). OSError when the kernel refuses."""
    program = ctypes.create_string_buffer(code, len(code))
    fprog = _SockFprog(len(code) // 8, ctypes.cast(program, ctypes.c_void_p))
    number = ARCHES[platform.machine()].seccomp
    result = _libc.syscall(
        ctypes.c_long(number), ctypes.c_long(SECCOMP_SET_MODE_FILTER), ctypes.c_long(0), ctypes.byref(fprog)
    )
    if result != 0:
        code_number = ctypes.get_errno()
        raise OSError(code_number, f"seccomp(SECCOMP_SET_MODE_FILTER): {os.strerror(code_number)}")


def set_no_new_privs() -> None:
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(code)}")
