"""A small ctypes layer over seccomp user notification (Linux >= 5.5): a hand-built BPF filter that sends every
execve/execveat to a listener fd, and the two ioctls that receive a notification and answer it (an answer that
reaches the process also proves it waited all along, so NOTIF_ID_VALID is not needed). No binding, no compiled
code (adr/0019).

The filter is installed on the calling thread only (no TSYNC): filters belong to a thread and are inherited by
the children it creates, so the spawner thread carries it into every traced tree (trace/spawners.py) and the
server's other threads stay unfiltered.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import platform
import select
import struct

# linux/seccomp.h
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_TSYNC = 1
SECCOMP_FILTER_FLAG_NEW_LISTENER = 1 << 3
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_USER_NOTIF = 0x7FC00000
SECCOMP_USER_NOTIF_FLAG_CONTINUE = 1
PR_SET_NO_NEW_PRIVS = 38
PR_GET_NO_NEW_PRIVS = 39
# linux/filter.h opcodes
_BPF_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_BPF_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_BPF_RET_K = 0x06  # BPF_RET | BPF_K
_X32_BIT = 0x40000000


def _iowr(number: int, size: int) -> int:
    return (3 << 30) | (size << 16) | (ord("!") << 8) | number


NOTIF_SIZE = 80  # struct seccomp_notif: id u64, pid u32, flags u32, seccomp_data (nr, arch, ip, args[6])
RESP_SIZE = 24  # struct seccomp_notif_resp: id u64, val s64, error s32, flags u32
IOCTL_NOTIF_RECV = _iowr(0, NOTIF_SIZE)
IOCTL_NOTIF_SEND = _iowr(1, RESP_SIZE)

# Per machine: the seccomp syscall number, and per audit arch the execve and execveat numbers the filter traps.
_ARCHES: dict[str, tuple[int, dict[int, tuple[int, ...]]]] = {
    "x86_64": (
        317,
        {
            0xC000003E: (59, 322, _X32_BIT | 520, _X32_BIT | 545),  # x86_64 and x32 (same audit arch)
            0x40000003: (11, 358),  # i386 (int 0x80 from a 64-bit process, or a 32-bit program)
        },
    ),
    "aarch64": (277, {0xC00000B7: (221, 281)}),
}
# Per audit arch the ioctl numbers (x86_64's audit arch covers x32's too), and the requests refused on them: input
# pushed into a terminal, which a shell then runs as if typed (adr/0027 "Round 6").
_IOCTL_NUMBERS: dict[int, tuple[int, ...]] = {
    0xC000003E: (16, _X32_BIT | 514),
    0x40000003: (54,),
    0xC00000B7: (29,),
}
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
SECCOMP_RET_ERRNO = 0x00050000
EXECVEAT_NUMBERS = {322, _X32_BIT | 545, 358, 281}
AUDIT_ARCH_I386 = 0x40000003


def compat_abi(arch: int, number: int) -> bool:
    """An exec of a 32-bit ABI (i386, also by `int 0x80` from a 64-bit process; x32): its pointers, in the
    arguments and in the argv array, are 32 bits wide."""
    return arch == AUDIT_ARCH_I386 or bool(number & _X32_BIT)


SECCOMP_GET_NOTIF_SIZES = 3


def check_notif_sizes() -> None:
    """The kernel's sizes of the notification structs must not exceed what this layer reads and writes (a
    future kernel with larger ones would otherwise be read truncated): TraceUnavailable when they do."""
    sizes = (ctypes.c_uint16 * 3)()
    number = _ARCHES[platform.machine()][0]
    result = _libc.syscall(ctypes.c_long(number), ctypes.c_long(SECCOMP_GET_NOTIF_SIZES), ctypes.c_long(0), sizes)
    if result != 0:
        code = ctypes.get_errno()
        raise TraceUnavailable(f"seccomp(SECCOMP_GET_NOTIF_SIZES): {os.strerror(code)}")
    if sizes[0] > NOTIF_SIZE or sizes[1] > RESP_SIZE:
        raise TraceUnavailable(
            f"this kernel's seccomp_notif ({sizes[0]} bytes) or seccomp_notif_resp ({sizes[1]}) is larger than "
            f"the {NOTIF_SIZE} and {RESP_SIZE} bytes this server knows"
        )


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


class TraceUnavailable(Exception):
    """The filter cannot be installed here; the message says why."""


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _program(trap_execs: bool = True) -> bytes:
    """The BPF program: per known audit arch, trap its execve/execveat numbers (unless not `trap_execs`: the
    server's own filter, `refuse_terminal_input`) and refuse the terminal-input ioctls (TIOCSTI, TIOCLINUX: EPERM);
    allow everything else. Every exec is trapped, the tree's first (the server's own)
    too: a filter that let one exec through by its path pointer could be used by any program of the tree that found
    that address (adr/0019). TIOCSTI pushes characters into a terminal's input as if typed: a traced process could
    type into its own session's shell, or (with CAP_SYS_ADMIN, the root default) into any terminal on the host, a
    line that no send carried and no policy decision saw; the classifier cannot read a compiled program doing it,
    so the kernel refuses it to every traced tree in every mode (adr/0027 "Round 6"). The ioctl's request is an
    unsigned int in the kernel: its low 32 bits are what is compared.

    Layout: load arch; one `jeq arch` per arch to its block; allow. A block: load nr; one `jeq nr` per trapped
    number to `notify`, one per ioctl number to `ioctl`; allow. Then `ioctl` (load the request; jeq TIOCSTI,
    TIOCLINUX to `refuse`; allow), `refuse`, `notify`. On x86_64 the kernel knows three ABIs (x86_64, x32 with
    the same audit arch and __X32_SYSCALL_BIT, i386): all are dispatched; an unknown arch cannot occur there.
    BPF jumps only forward; offsets count from the next instruction."""
    machine = platform.machine()
    if machine not in _ARCHES:
        raise TraceUnavailable(f"no exec filter for the {machine} architecture (x86_64, aarch64 are known)")
    arches = _ARCHES[machine][1]
    # Instructions with a symbolic jump target (a label or an instruction index), resolved once laid out.
    program: list[tuple[int, str | int | None, int]] = [(_BPF_LD_W_ABS, None, 4)]  # seccomp_data.arch
    for arch in arches:
        program.append((_BPF_JEQ_K, f"arch {arch}", arch))
    program.append((_BPF_RET_K, None, SECCOMP_RET_ALLOW))
    labels: dict[str, int] = {}
    for arch, numbers in arches.items():
        labels[f"arch {arch}"] = len(program)
        program.append((_BPF_LD_W_ABS, None, 0))  # seccomp_data.nr
        if trap_execs:
            program.extend((_BPF_JEQ_K, "notify", number) for number in numbers)
        program.extend((_BPF_JEQ_K, "ioctl", number) for number in _IOCTL_NUMBERS[arch])
        program.append((_BPF_RET_K, None, SECCOMP_RET_ALLOW))
    labels["ioctl"] = len(program)
    program.append((_BPF_LD_W_ABS, None, 24))  # seccomp_data.args[1], its low 32 bits (little-endian)
    program.append((_BPF_JEQ_K, "refuse", TIOCSTI))
    program.append((_BPF_JEQ_K, "refuse", TIOCLINUX))
    program.append((_BPF_RET_K, None, SECCOMP_RET_ALLOW))
    labels["refuse"] = len(program)
    program.append((_BPF_RET_K, None, SECCOMP_RET_ERRNO | errno.EPERM))
    if trap_execs:
        labels["notify"] = len(program)
        program.append((_BPF_RET_K, None, SECCOMP_RET_USER_NOTIF))
    code = []
    for index, (opcode, target, constant) in enumerate(program):
        jump = 0 if target is None else labels[str(target)] - index - 1
        code.append(struct.pack("=HBBI", opcode, jump, 0, constant))
    return b"".join(code)


def install_listener(no_new_privs: bool) -> int:
    """Install the exec filter on the calling thread; returns the listener fd (close-on-exec). With
    `no_new_privs` the thread (and what it starts) first gets no_new_privs, which a filter needs without
    CAP_SYS_ADMIN. OSError when the kernel refuses."""
    code_bytes = _program()
    if no_new_privs and _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(code)}")
    program = ctypes.create_string_buffer(code_bytes, len(code_bytes))
    fprog = _SockFprog(len(code_bytes) // 8, ctypes.cast(program, ctypes.c_void_p))
    number = _ARCHES[platform.machine()][0]
    fd = _libc.syscall(
        ctypes.c_long(number),
        ctypes.c_long(SECCOMP_SET_MODE_FILTER),
        ctypes.c_long(SECCOMP_FILTER_FLAG_NEW_LISTENER),
        ctypes.byref(fprog),
    )
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"seccomp(SECCOMP_SET_MODE_FILTER, NEW_LISTENER): {os.strerror(code)}")
    os.set_inheritable(fd, False)  # the kernel makes it close-on-exec already; say so anyway
    return int(fd)


def refuse_terminal_input() -> None:
    """Refuse TIOCSTI and TIOCLINUX to the whole server (every thread: TSYNC) and so to everything it starts, for
    good: where no exec trace runs, its filter's refusal (adr/0027 "Round 6") is missing, and a server with
    CAP_SYS_ADMIN lets a command type into any terminal on the host (attack 4's K3; adr/0027 "Round 7"). The
    server itself never pushes input into a terminal (it writes to its terminals' master side). Needs
    CAP_SYS_ADMIN: with no_new_privs instead it would take set-user-ID programs from every command. OSError when
    the kernel refuses."""
    code_bytes = _program(trap_execs=False)
    program = ctypes.create_string_buffer(code_bytes, len(code_bytes))
    fprog = _SockFprog(len(code_bytes) // 8, ctypes.cast(program, ctypes.c_void_p))
    number = _ARCHES[platform.machine()][0]
    result = _libc.syscall(
        ctypes.c_long(number),
        ctypes.c_long(SECCOMP_SET_MODE_FILTER),
        ctypes.c_long(SECCOMP_FILTER_FLAG_TSYNC),
        ctypes.byref(fprog),
    )
    if result != 0:  # TSYNC: a thread's id when that thread could not be synchronised, -1 and errno otherwise
        code = ctypes.get_errno() if result < 0 else errno.ESRCH
        raise OSError(code, f"seccomp(SECCOMP_SET_MODE_FILTER, TSYNC): {os.strerror(code)}")


def close_quietly(listener: int) -> None:
    with contextlib.suppress(OSError):
        os.close(listener)


_CAP_SYS_ADMIN = 21


def has_sys_admin() -> bool:
    """The server may install the filter without no_new_privs."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> _CAP_SYS_ADMIN & 1)
    return False


def no_new_privs_set() -> bool:
    return bool(_libc.prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1)


_NOTIF = struct.Struct("=QIIiIQ6Q")  # id, pid, flags, nr, arch, instruction pointer, args[6]
_RESP = struct.Struct("=QqiI")  # id, val, error, flags


def parse(buffer: bytes | bytearray) -> tuple[int, int, int, int, tuple[int, ...]]:
    """A struct seccomp_notif: (id, pid, syscall nr, audit arch, its six arguments)."""
    fields = _NOTIF.unpack(buffer)
    return fields[0], fields[1], fields[3], fields[4], fields[6:12]


class Notifications:
    """Receive and answer the notifications of one listener. fcntl.ioctl, not ctypes: a third of the cost per
    call, and these calls are on every exec's path."""

    def __init__(self, listener: int) -> None:
        self.listener = listener

    def receive(self) -> tuple[int, int, int, int, tuple[int, ...]] | None:
        """(id, pid, syscall nr, audit arch, its six arguments); None when nothing is pending (the process was killed
        between the wake-up and the receive: ENOENT) or on EINTR."""
        buffer = bytearray(NOTIF_SIZE)  # NOTIF_RECV refuses a buffer that is not zeroed (EINVAL)
        try:
            fcntl.ioctl(self.listener, IOCTL_NOTIF_RECV, buffer, True)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.EINTR, errno.EAGAIN):
                return None
            raise
        return parse(buffer)

    def answer(self, notif_id: int, error: int = 0) -> bool:
        """Let the exec go on (error 0), or fail it with -error. False when the process is no longer waiting
        (killed meanwhile: its notification is gone): then it was not the one waiting all along, and what was read
        of it between its receipt and this answer may be another process's (its pid reused). True proves the
        opposite, which is why no NOTIF_ID_VALID is needed before answering."""
        flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE if error == 0 else 0
        response = _RESP.pack(notif_id, 0, -error if error else 0, flags)
        while True:
            try:
                fcntl.ioctl(self.listener, IOCTL_NOTIF_SEND, response)
            except InterruptedError:
                continue  # a signal for this thread before the answer was given: the process still waits
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    raise
                return False
            return True


def check_not_hung_up(events: int) -> None:
    """OSError(EPIPE) when the listener reports a hang-up: no task holds the filter any more (the spawner thread
    ended, and every traced process with it), so nothing will come; polling on would return at once for ever."""
    if events & (select.EPOLLHUP | select.EPOLLERR):
        raise OSError(errno.EPIPE, "no process holds the exec filter any more")
