"""Launcher: run a command where clone3(2) fails with ENOSYS, as on a kernel before 5.3 or in a container whose
seccomp profile refuses it (Docker's does, so that glibc falls back to clone): everything else is allowed.

Usage: python no_clone3.py PROGRAM ARG...  (x86_64; installing this filter needs root or no_new_privs)."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import sys

AUDIT_ARCH_X86_64 = 0xC000003E
SECCOMP_NR = 317
CLONE3_NR = 435
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
LD, JEQ, RET = 0x20, 0x15, 0x06


def main() -> None:
    if platform.machine() != "x86_64":
        raise SystemExit(f"no_clone3.py knows x86_64 only, not {platform.machine()}")
    program = [
        (LD, 0, 0, 4),  # arch
        (JEQ, 1, 0, AUDIT_ARCH_X86_64),
        (RET, 0, 0, SECCOMP_RET_ALLOW),
        (LD, 0, 0, 0),  # nr
        (JEQ, 0, 1, CLONE3_NR),
        (RET, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS),
        (RET, 0, 0, SECCOMP_RET_ALLOW),
    ]
    code = b"".join(struct.pack("=HBBI", *instruction) for instruction in program)
    buffer = ctypes.create_string_buffer(code, len(code))

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = Fprog(len(program), ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    if os.geteuid() != 0 and libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise SystemExit(f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}")
    if libc.syscall(SECCOMP_NR, 1, 0, ctypes.byref(fprog)) != 0:  # seccomp(SECCOMP_SET_MODE_FILTER, 0, &fprog)
        raise SystemExit(f"seccomp: {os.strerror(ctypes.get_errno())}")
    os.execv(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    main()
