"""`python -m relay_shell.confine.run -- PROGRAM ARG...`: run a program confined as a readonly tree is (adr/0024).

The server starts its SSH ProxyCommands through this in readonly mode: asyncssh spawns them itself, from the
event loop's thread, so the restriction cannot be put on a thread of ours. A fresh interpreter has one thread,
so restricting it restricts the whole process, which then execs the program. Exit 126 with one line on stderr
when the kernel refuses (nothing ran); 127 when the program is not found, as a shell says.
"""

from __future__ import annotations

import os
import sys

from relay_shell.confine import capabilities, landlock, syscall_filter
from relay_shell.confine.confinement import WRITABLE_DEVICES


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "--":
        print("usage: python -m relay_shell.confine.run -- PROGRAM [ARG...]", file=sys.stderr)
        return 2
    program = argv[1:]
    try:
        abi = landlock.abi_version()
        ruleset = landlock.create_ruleset(abi, WRITABLE_DEVICES)
        code = syscall_filter.build(os.getppid(), abi).for_thread(os.getppid())
        syscall_filter.set_no_new_privs()
        capabilities.reduce_for_readonly(capabilities.privileged())
        landlock.restrict_self(ruleset, abi)
        os.close(ruleset)
        syscall_filter.install(code)
    except (OSError, landlock.LandlockUnavailable, syscall_filter.FilterUnavailable) as exc:
        print(f"relay-shell: readonly confinement failed, {program[0]} not run: {exc}", file=sys.stderr)
        return 126
    try:
        os.execvp(program[0], program)
    except OSError as exc:
        print(f"relay-shell: {program[0]}: {exc.strerror}", file=sys.stderr)
        return 127 if isinstance(exc, FileNotFoundError) else 126
    return 0  # not reached: execvp does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
