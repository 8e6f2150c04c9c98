"""Rules for processes, services, power and schedulers: kill and pkill (signals that only report are read-only),
systemctl and service (queries, changes, stopping), shutdown and reboot, init levels, crontab and at. The rubric
they follow is in adr/0004.
"""

from __future__ import annotations

from collections.abc import Callable

from relay_shell.policy.calls import (
    READ,
    Call,
    Verdict,
    every_file,
    verdict,
)

_REPORT_SIGNALS = {"WINCH", "SIGWINCH", "INFO", "SIGINFO", "28"}
_NO_SIGNAL = {"0", "SIG0"}
_LISTING = {"-l", "-L", "--list", "--table"}


def kill_signals(words: list[str]) -> tuple[list[str], list[str], bool]:
    """The signals a kill command line names, its process operands, and whether it only lists signals. Every
    spelling any kill reads is a signal here (bash's and procps' `-s SIG`, `-n N`, `--signal SIG`, `-SIG`,
    `--timeout MS SIG`), wherever it is written: bash and procps take the last one (`kill -0 -s KILL PID` sends
    KILL), so a later one must not hide behind a `-0`."""
    signals: list[str] = []
    operands: list[str] = []
    listing = False
    position = 1
    while position < len(words):
        word = words[position]
        following = words[position + 1] if position + 1 < len(words) else ""
        if word == "--":
            operands += words[position + 1 :]
            break
        if word in _LISTING and not operands:
            listing = True
        elif word in ("-s", "-n", "--signal"):
            signals.append(following)
            position += 1
        elif word == "--timeout":
            signals.append(words[position + 2] if position + 2 < len(words) else "")
            position += 2
        elif word.startswith("--signal="):
            signals.append(word.split("=", 1)[1])
        elif word.startswith(("-s", "-n")) and len(word) > 2 and not word.startswith("--"):
            signals.append(word[2:])
        elif word.startswith("-") and len(word) > 1 and not word.startswith("--"):
            signals.append(word[1:])  # -SIG, -9 (or a process group: the worse reading)
        else:
            operands.append(word)
        position += 1
    return signals, operands, listing


def _kill(call: Call) -> Verdict:
    signals, pids, listing = kill_signals(call.words)
    if listing and not signals:
        return verdict(0, "lists signals")
    sent = {signal.upper() for signal in signals} or {"TERM"}
    if sent <= _NO_SIGNAL:
        return verdict(0, "checks that a process exists")
    if "-1" in pids or "1" in pids or any(signal == "1" for signal in signals[1:]):
        return verdict(3, "kills every process or init")
    if sent <= _REPORT_SIGNALS:
        return verdict(1, "asks a process for a report")
    return verdict(2, "signals processes")


def _pkill(call: Call) -> Verdict:
    # pkill -l only lists the names of what it kills; killall -l lists signals and kills nothing.
    if call.program == "killall" and call.has_exact("-l", "--list", "-L"):
        return verdict(0, "lists signals")
    signals = [value for name, value in _pkill_signals(call.words)]
    if signals and all(signal.upper() in _NO_SIGNAL for signal in signals):
        return verdict(0, "checks that processes exist")
    return verdict(2, f"{call.program} signals processes")


def _pkill_signals(words: list[str]) -> list[tuple[str, str]]:
    """pkill/pgrep/killall's signal options in every spelling (`-SIG`, `-s SIG`, `--signal SIG`, `--signal=SIG`)."""
    found: list[tuple[str, str]] = []
    for index, word in enumerate(words[1:], start=1):
        following = words[index + 1] if index + 1 < len(words) else ""
        if word in ("-s", "--signal"):
            found.append((word, following))
        elif word.startswith("--signal="):
            found.append(("--signal", word.split("=", 1)[1]))
        elif word.startswith("-") and not word.startswith("--") and (word[1:].isdigit() or word[1:].isupper()):
            found.append(("-", word[1:]))
    return found


_SYSTEMCTL_READ = frozenset(
    [
        "status",
        "show",
        "cat",
        "help",
        "list-units",
        "list-unit-files",
        "list-sockets",
        "list-timers",
        "list-jobs",
        "list-dependencies",
        "list-machines",
        "list-automounts",
        "list-paths",
        "is-active",
        "is-enabled",
        "is-failed",
        "is-system-running",
        "get-default",
        "show-environment",
        "whoami",
    ]
)
_SYSTEMCTL_QUERY_OR_SET = {"log-level": 1, "log-target": 1, "service-watchdogs": 1, "service-log-level": 2}
_SYSTEMCTL_DOWN = frozenset(
    ["reboot", "poweroff", "halt", "kexec", "rescue", "emergency", "switch-root", "soft-reboot", "exit"]
)


def _systemctl(call: Call) -> Verdict:
    verb = call.subcommand
    if verb in ("", "--failed") or verb in _SYSTEMCTL_READ:
        return READ
    arguments = call.operands[1:]
    limit = _SYSTEMCTL_QUERY_OR_SET.get(verb.replace("service-log-target", "service-log-level"))
    if limit is not None:
        shown = len(arguments) < limit if verb.startswith("service-") else not arguments
        return READ if shown else verdict(2, f"systemctl {verb} sets it")
    if verb == "kill" and call.value("-s", "--signal") == "help":
        return verdict(0, "lists signals")
    when = call.value("--when")
    if verb in _SYSTEMCTL_DOWN:
        if when == "cancel":
            return verdict(2, f"systemctl {verb} cancels a scheduled one")
        return verdict(3, f"systemctl {verb} takes the machine's services down")
    if verb == "isolate" and any(unit.split(".")[0] in ("rescue", "emergency") for unit in arguments):
        return verdict(3, "isolates the rescue or emergency target")
    if verb == "freeze" and any(every_file(unit) for unit in arguments):
        return verdict(3, "freezes every unit")
    if verb == "reset-failed":
        return verdict(1, "clears the failed state")
    return verdict(2, f"systemctl {verb} changes services")


def _service(call: Call) -> Verdict:
    if call.has_exact("--status-all") or (len(call.operands) >= 2 and call.operands[1] in ("status", "help")):
        return READ
    return verdict(2, "service changes a service")


def _shutdown(call: Call) -> Verdict:
    if call.has("-c"):
        return verdict(2, "cancels a scheduled shutdown")
    if call.has("-k"):
        return verdict(1, "only warns users")
    if call.has_exact("--help"):
        return READ
    return verdict(3, "shuts down or reboots the machine")


def _power(call: Call) -> Verdict:
    if call.has_exact("-w", "--wtmp-only"):
        return verdict(1, f"{call.program} -w writes a wtmp record only")
    if call.has_exact("--help", "--version"):
        return READ
    return verdict(3, f"{call.program} stops the machine")


def _init(call: Call) -> Verdict:
    level = call.subcommand
    if level in ("0", "6", "1", "s", "S", "single", "emergency"):
        return verdict(3, f"{call.program} {level} halts, reboots or drops to single-user mode")
    if not level and call.has_exact("--help", "--version"):
        return READ
    return verdict(2, f"{call.program} changes the runlevel")


def _crontab(call: Call) -> Verdict:
    if "r" in call.short:
        return verdict(3, "removes the crontab")
    if "l" in call.short and not call.short & {"e"}:
        return verdict(0, "lists the crontab")
    return verdict(2, "changes the crontab")


def _at(call: Call) -> Verdict:
    if call.short & {"l", "c", "V"} and not call.short & {"f", "r", "d"}:
        return verdict(0, "lists or shows queued jobs")
    return verdict(2, f"{call.program} schedules or removes jobs")


def _fuser(call: Call) -> Verdict:
    """fuser -k (or --kill, or k in a cluster: `-ks`, `-km`) sends a signal, SIGKILL or -SIGNAL, to every process using
    the files or ports named: processes outside the call."""
    for word in call.words[1:]:
        if word == "--kill" or (word.startswith("-") and not word.startswith("--") and "k" in word[1:]):
            return verdict(2, "fuser -k signals the processes using a file or port")
    return verdict(1, "fuser: not known to be read-only")


def _renice(call: Call) -> Verdict:
    return verdict(2, "renice changes running processes' priority")


def _reschedules(call: Call) -> Verdict:
    """chrt -p / taskset -p with a new value change a running process; with only a pid they show it."""
    if not call.has("-p", "--pid"):
        return verdict(1, f"{call.program} runs a command")
    if len(call.operands) >= 2:
        return verdict(2, f"{call.program} -p changes a running process")
    return verdict(1, f"{call.program} -p reads a running process's settings")


def _prlimit(call: Call) -> Verdict:
    if call.has("-p", "--pid"):
        return verdict(2, "prlimit --pid changes (or reads) another process's limits")
    return verdict(1, f"{call.program} runs a command")


RULES: dict[str, Callable[[Call], Verdict]] = {
    "fuser": _fuser,
    "renice": _renice,
    "chrt": _reschedules,
    "taskset": _reschedules,
    "prlimit": _prlimit,
    "kill": _kill,
    "pkill": _pkill,
    "killall": _pkill,
    "systemctl": _systemctl,
    "service": _service,
    "shutdown": _shutdown,
    "reboot": _power,
    "halt": _power,
    "poweroff": _power,
    "init": _init,
    "telinit": _init,
    "crontab": _crontab,
    "at": _at,
    "atq": lambda call: READ,
}
