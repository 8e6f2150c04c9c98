"""Argument helpers every executor shares: clamping an argument into its configured range (with a note saying
so), the timeout and output limits, the working directory, the env overlay as a child's environment, the NUL
check for text that passes through exec, and a command to run on a remote shell.
"""

from __future__ import annotations

import functools
import os

from relay_shell.errors import ArgumentError
from relay_shell.settings.model import Settings

# Commands run without a terminal: make the usual interactive prompts and pagers fail fast or stay out
# of the way. The caller's `env` overrides any of these.
NONINTERACTIVE_ENV = {
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "SYSTEMD_PAGER": "",
    "MANPAGER": "cat",
    "DEBIAN_FRONTEND": "noninteractive",
    "GIT_TERMINAL_PROMPT": "0",
}
MIN_TIMEOUT = 0.1
MIN_OUTPUT = 256
# runbook_search and begin_session: the keywords of a task and the size of a briefing. The tools' schemas show
# them and the plans apply them; here, so that a server without runbooks loads nothing of runbooks/ to list them.
MAX_KEYWORDS = 64
MAX_QUERY_CHARS = 4096
DEFAULT_BRIEFING_BYTES = 8192


def clamp(name: str, value: float, low: float, high: float) -> tuple[float, str | None]:
    """Clamp a tool argument into its configured range; the note tells the caller what happened."""
    if value < low:
        return low, f"{name} {_number(value)} raised to {_number(low)} (allowed {_number(low)} to {_number(high)})"
    if value > high:
        return high, f"{name} {_number(value)} lowered to {_number(high)} (allowed {_number(low)} to {_number(high)})"
    return value, None


def _number(value: float) -> str:
    if isinstance(value, int):  # any length: JSON allows integers no float can hold (10**400)
        digits = str(abs(value))
        if len(digits) <= 20:
            return str(value)
        return f"{'-' if value < 0 else ''}{digits[0]}.{digits[1:4]}e+{len(digits) - 1}"
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:g}"


def call_limits(
    settings: Settings, timeout: float, max_output: int | None, notes: list[str], output_name: str = "max_output"
) -> tuple[float, int]:
    """The call's timeout and output budget, clamped to the configured ranges (a note names the argument)."""
    timeout_value, note = clamp("timeout", timeout, MIN_TIMEOUT, settings.limits.max_timeout)
    if note:
        notes.append(note)
    requested_output = settings.limits.max_output if max_output is None else max_output
    output_value, note = clamp(output_name, requested_output, MIN_OUTPUT, settings.limits.max_output_hard)
    if note:
        notes.append(note)
    return timeout_value, int(output_value)


def check_cwd(cwd: str | None) -> str | None:
    if cwd is None:
        return None
    check_no_nul("cwd", cwd)
    path = os.path.expanduser(cwd)
    if not os.path.exists(path):
        raise ArgumentError(f"cwd: {cwd!r} does not exist; allowed: an existing directory")
    if not os.path.isdir(path):
        raise ArgumentError(f"cwd: {cwd!r} is not a directory; allowed: an existing directory")
    if not os.access(path, os.X_OK):
        raise ArgumentError(f"cwd: {cwd!r} is not accessible (permission denied); allowed: a directory you can enter")
    return os.path.abspath(path)  # the policy joins relative words to it (plan.Subject.cwd)


@functools.cache
def _install_noninteractive_defaults() -> None:
    """Put the defaults into the server's own environment once, so a call without an overlay passes env=None
    and the child inherits it: re-encoding ~100 variables per spawn costs more than spawning `true`. The
    server itself never runs a pager or a prompt, so this changes nothing for it."""
    os.environ.update(NONINTERACTIVE_ENV)


def child_env(overlay: dict[str, str | None] | None) -> dict[str, str] | None:
    _install_noninteractive_defaults()
    if not overlay:
        return None
    environment = dict(os.environ)
    for name, value in (overlay or {}).items():
        if not name or "=" in name or "\x00" in name:
            raise ArgumentError(f"env: {name!r} is not a valid variable name; allowed: a non-empty name without '='")
        if value is None:
            environment.pop(name, None)
            continue
        check_no_nul(f"env.{name}", value)
        environment[name] = value
    return environment


def check_no_nul(argument: str, value: str) -> None:
    if "\x00" in value:
        raise ArgumentError(
            f"{argument}: contains a NUL byte; allowed: text without NUL (NUL cannot pass through exec)"
        )


def command_text(command: str) -> str:
    if not command.strip():
        raise ArgumentError("command: is empty; allowed: a non-empty command")
    check_no_nul("command", command)
    return command
