"""Input pushed into a terminal (TIOCSTI, TIOCLINUX) refused by a seccomp filter: the requests and their ioctl
numbers per audit arch, which the exec trace's filter refuses too (trace/seccomp.py, adr/0027 "Round 6"), and the
filter a server without the trace installs on itself (adr/0027 "Round 7"). Nothing of trace/ is loaded for it: a
server whose trace is off holds none of the trace (adr/0030). A hand-assembled BPF program, no binding."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

X32_BIT = 0x40000000
TIOCSTI = 0x5412  # pushes a character into the terminal's input, as if typed
TIOCLINUX = 0x541C  # subcode 6 pastes the console's selection
# Per audit arch its ioctl numbers (x86_64's audit arch covers x32's too, told apart by X32_BIT).
IOCTL_NUMBERS: dict[int, tuple[int, ...]] = {
    0xC000003E: (16, X32_BIT | 514),  # x86_64, x32
    0x40000003: (54,),  # i386 (int 0x80 from a 64-bit process, or a 32-bit program)
    0xC00000B7: (29,),  # aarch64
}
# Per machine: the seccomp system call's number and the audit arches its processes may use.
_MACHINES = {"x86_64": (317, (0xC000003E, 0x40000003)), "aarch64": (277, (0xC00000B7,))}
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1
_RET_ALLOW = 0x7FFF0000
_RET_EPERM = 0x00050000 | errno.EPERM  # SECCOMP_RET_ERRNO
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_RET_K = 0x06


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _program(arches: tuple[int, ...]) -> bytes:
    """Load the arch; per arch, load the number and jump to the request check on its ioctl numbers; allow. The check
    loads the request's low 32 bits (an unsigned int in the kernel) and refuses the two. Jumps count forward from
    the next instruction."""
    blocks: list[list[tuple[int, int | str, int]]] = []  # per arch: (opcode, jump target or 0, constant)
    for arch in arches:
        block: list[tuple[int, int | str, int]] = [(_LD_W_ABS, 0, 0)]  # seccomp_data.nr
        block += [(_JEQ_K, "check", number) for number in IOCTL_NUMBERS[arch]]
        block.append((_RET_K, 0, _RET_ALLOW))
        blocks.append(block)
    head: list[tuple[int, int | str, int]] = [(_LD_W_ABS, 0, 4)]  # seccomp_data.arch
    starts, position = [], 1 + len(arches) + 1
    for block in blocks:
        starts.append(position)
        position += len(block)
    head += [(_JEQ_K, start, arch) for start, arch in zip(starts, arches, strict=True)]
    head.append((_RET_K, 0, _RET_ALLOW))
    check = position
    tail = [(_LD_W_ABS, 0, 24), (_JEQ_K, check + 4, TIOCSTI), (_JEQ_K, check + 4, TIOCLINUX), (_RET_K, 0, _RET_ALLOW)]
    tail.append((_RET_K, 0, _RET_EPERM))
    code = []
    for index, (opcode, target, constant) in enumerate([*head, *(i for b in blocks for i in b), *tail]):
        jump = (check if target == "check" else int(target)) - index - 1 if target else 0
        code.append(struct.pack("=HBBI", opcode, jump, 0, constant))
    return b"".join(code)


def refuse_terminal_input() -> None:
    """Refuse TIOCSTI and TIOCLINUX to the whole server (every thread: TSYNC) and so to everything it starts, for
    good. The server itself never pushes input into a terminal (it writes to its terminals' master side). Needs
    CAP_SYS_ADMIN: with no_new_privs instead it would take set-user-ID programs from every command. OSError when
    the kernel refuses, or on a machine whose numbers are not known here."""
    machine = platform.machine()
    if machine not in _MACHINES:
        raise OSError(errno.ENOSYS, f"no terminal-input filter for the {machine} architecture")
    number, arches = _MACHINES[machine]
    code_bytes = _program(arches)
    program = ctypes.create_string_buffer(code_bytes, len(code_bytes))
    fprog = _SockFprog(len(code_bytes) // 8, ctypes.cast(program, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    result = libc.syscall(
        ctypes.c_long(number),
        ctypes.c_long(_SECCOMP_SET_MODE_FILTER),
        ctypes.c_long(_SECCOMP_FILTER_FLAG_TSYNC),
        ctypes.byref(fprog),
    )
    if result != 0:  # TSYNC: a thread's id when that thread could not be synchronised, -1 and errno otherwise
        code = ctypes.get_errno() if result < 0 else errno.ESRCH
        raise OSError(code, f"seccomp(SECCOMP_SET_MODE_FILTER, TSYNC): {os.strerror(code)}")
