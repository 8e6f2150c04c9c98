"""Launcher: run a command under a real seccomp filter that makes one system call fail with a chosen errno, to meet
the kernel a user may have — everything else is allowed. Not a mock: the server under it gets the kernel's answer.

- `clone3 ENOSYS`: a kernel before 5.3, or a container whose seccomp profile refuses clone3 (Docker's does, so that
  glibc falls back to clone).
- `seccomp EPERM`: a container whose own policy forbids filters: seccomp(2) and prctl(PR_SET_SECCOMP) both fail.
- `landlock_create_ruleset EOPNOTSUPP` (built in, not enabled: Debian 12's 6.1 booted without `landlock` in its LSM
  list) or `ENOSYS` (not built).
- `none -`: the same filter matching a system call that does not exist: a baseline that pays what the filter costs
  every system call and changes nothing else (benchmarks/bench_confinement.py).

Usage: python refuse_syscall.py SYSCALL ERRNO-NAME PROGRAM ARG...  (x86_64; installing the filter needs root or
no_new_privs, which it sets when not root)."""

from __future__ import annotations

import errno
import os
import platform
import struct
import sys

from relay_shell.confine import syscall_filter

AUDIT_ARCH_X86_64 = 0xC000003E
NUMBERS = {"clone3": 435, "seccomp": 317, "landlock_create_ruleset": 444, "none": 0xFFFF}
PRCTL_NR = 157
PR_SET_SECCOMP = 22
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
LD, JEQ, RET = 0x20, 0x15, 0x06


def program_for(name: str, refusal: int) -> list[tuple[int, int, int, int]]:
    if name == "seccomp":  # seccomp(2), and prctl only for PR_SET_SECCOMP
        return [
            (LD, 0, 0, 4),  # arch
            (JEQ, 1, 0, AUDIT_ARCH_X86_64),
            (RET, 0, 0, SECCOMP_RET_ALLOW),
            (LD, 0, 0, 0),  # nr
            (JEQ, 5, 0, NUMBERS["seccomp"]),
            (JEQ, 1, 0, PRCTL_NR),
            (RET, 0, 0, SECCOMP_RET_ALLOW),
            (LD, 0, 0, 16),  # args[0], low half
            (JEQ, 1, 0, PR_SET_SECCOMP),
            (RET, 0, 0, SECCOMP_RET_ALLOW),
            (RET, 0, 0, SECCOMP_RET_ERRNO | refusal),
        ]
    return [
        (LD, 0, 0, 4),  # arch
        (JEQ, 1, 0, AUDIT_ARCH_X86_64),
        (RET, 0, 0, SECCOMP_RET_ALLOW),
        (LD, 0, 0, 0),  # nr
        (JEQ, 0, 1, NUMBERS[name]),
        (RET, 0, 0, SECCOMP_RET_ERRNO | refusal),
        (RET, 0, 0, SECCOMP_RET_ALLOW),
    ]


def main() -> None:
    if platform.machine() != "x86_64":
        raise SystemExit(f"refuse_syscall.py knows x86_64 only, not {platform.machine()}")
    name, errno_name = sys.argv[1], sys.argv[2]
    if name not in NUMBERS:
        raise SystemExit(f"refuse_syscall.py: SYSCALL must be one of {', '.join(NUMBERS)}, not {name!r}")
    refusal = errno.ENOSYS if name == "none" else getattr(errno, errno_name)
    code = b"".join(struct.pack("=HBBI", *instruction) for instruction in program_for(name, refusal))
    if os.geteuid() != 0:  # a filter without CAP_SYS_ADMIN needs no_new_privs
        syscall_filter.set_no_new_privs()
    syscall_filter.install(code)  # the product's own installer, on this one-thread process: inherited by the exec
    os.execvp(sys.argv[3], sys.argv[3:])


if __name__ == "__main__":
    main()
