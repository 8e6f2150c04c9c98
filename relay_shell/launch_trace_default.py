"""Whether the exec trace runs when RELAY_SHELL_EXEC_TRACE is `auto`, the default (adr/0027): decided at startup by
the launch point from the server's own privileges, without loading trace/."""

from __future__ import annotations

import contextlib

_CAP_SYS_ADMIN = 21


def trace_default(setting: str, mode: str) -> tuple[bool, str]:
    """Whether the exec trace runs, and why (adr/0027). `auto` traces wherever tracing takes nothing from the
    commands: a server with CAP_SYS_ADMIN (root) installs the filter without no_new_privs; a server that runs with
    no_new_privs already (systemd's NoNewPrivileges=yes) loses nothing more; in readonly mode every tree gets
    no_new_privs anyway (adr/0024). Elsewhere (a user's open or guarded server) the filter needs no_new_privs on
    the traced trees, which takes set-user-ID and file-capability programs (sudo, su, passwd) from their commands:
    an upgrade must not do that silently, so `auto` leaves the trace off there and says so; `on` traces anyway."""
    if setting != "auto":
        return setting == "on", f"RELAY_SHELL_EXEC_TRACE={setting}"
    capabilities, no_new_privs = _own_privileges()
    if capabilities >> _CAP_SYS_ADMIN & 1:
        return True, "auto: the server has CAP_SYS_ADMIN, so tracing needs no no_new_privs"
    if no_new_privs:
        return True, "auto: the server runs with no_new_privs already, so tracing takes nothing more"
    if mode == "readonly":
        return True, "auto: readonly mode gives every tree no_new_privs anyway"
    return False, (
        "auto: not root, and tracing here would need no_new_privs on every command, which takes set-user-ID "
        "programs (sudo, su) from them; RELAY_SHELL_EXEC_TRACE=on traces anyway"
    )


def refuse_terminal_input(setting: str, mode: str) -> str | None:
    """Where no exec trace runs, refuse TIOCSTI and TIOCLINUX to the whole server and everything it starts, when
    that takes nothing from the commands: with CAP_SYS_ADMIN no no_new_privs is needed (trace/seccomp.py). Without
    the trace's filter (adr/0027 "Round 6") a root server's command could type a line into any terminal on the host,
    which its shell runs as if typed (attack 4's K3, adr/0027 "Round 7"). Without CAP_SYS_ADMIN the kernel refuses
    TIOCSTI on any terminal but the caller's controlling one, and a command typing into its own terminal gains
    nothing it could not run itself, untraced either way. Called while the server has one thread (TSYNC); the
    banner's note, or None when nothing was installed."""
    wanted, _ = trace_default(setting, mode)
    capabilities, _ = _own_privileges()
    if wanted or not capabilities >> _CAP_SYS_ADMIN & 1:
        return None
    from relay_shell.trace.seccomp import refuse_terminal_input as install

    try:
        install()
    except OSError as exc:
        return f"WARNING: typing into terminals (TIOCSTI) is not refused without the exec trace: {exc}"
    return "exec trace off: typing into terminals (TIOCSTI, TIOCLINUX) is refused by the server's own filter"


def _own_privileges() -> tuple[int, bool]:
    """The server's effective capabilities and its no_new_privs flag, from /proc/self/status."""
    capabilities, no_new_privs = 0, False
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                capabilities = int(line.split()[1], 16)
            elif line.startswith("NoNewPrivs:"):
                no_new_privs = line.split()[1] == "1"
    return capabilities, no_new_privs
