"""Launcher: run a command on a kernel without Landlock, as Debian 12's 6.1 kernel booted without `landlock` in
its LSM list, or an older kernel: landlock_create_ruleset fails with the errno given (EOPNOTSUPP: built in but not
enabled; ENOSYS: not built), everything else is allowed. A real seccomp filter, not a mock: the server under it
meets the kernel answer it would meet there.

Usage: python no_landlock.py ERRNO-NAME PROGRAM ARG...  (x86_64; installing the filter needs root or
no_new_privs). ERRNO-NAME `none` installs the same filter matching a system call that does not exist: a baseline
that pays what the filter costs every system call, with Landlock left as it is (benchmarks/bench_confinement.py)."""

from __future__ import annotations

import errno
import os
import platform
import struct
import sys

from relay_shell.confine import syscall_filter

AUDIT_ARCH_X86_64 = 0xC000003E
LANDLOCK_CREATE_RULESET = 444
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
LD, JEQ, RET = 0x20, 0x15, 0x06


def main() -> None:
    if platform.machine() != "x86_64":
        raise SystemExit(f"no_landlock.py knows x86_64 only, not {platform.machine()}")
    code_number = errno.ENOSYS if sys.argv[1] == "none" else getattr(errno, sys.argv[1])
    refused = 0xFFFF if sys.argv[1] == "none" else LANDLOCK_CREATE_RULESET
    program = [
        (LD, 0, 0, 4),  # arch
        (JEQ, 1, 0, AUDIT_ARCH_X86_64),
        (RET, 0, 0, SECCOMP_RET_ALLOW),
        (LD, 0, 0, 0),  # nr
        (JEQ, 0, 1, refused),
        (RET, 0, 0, SECCOMP_RET_ERRNO | code_number),
        (RET, 0, 0, SECCOMP_RET_ALLOW),
    ]
    code = b"".join(struct.pack("=HBBI", *instruction) for instruction in program)
    if os.geteuid() != 0:  # a filter without CAP_SYS_ADMIN needs no_new_privs
        syscall_filter.set_no_new_privs()
    syscall_filter.install(code)  # the product's own installer, on this one-thread process: inherited by the exec
    os.execvp(sys.argv[2], sys.argv[2:])


if __name__ == "__main__":
    main()
