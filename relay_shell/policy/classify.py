"""Tier classification of all the text that reaches the target.

A speed bump, not a boundary: a program can always construct at run time a command that no text
classifier sees. What we can see we classify conservatively: wrappers (`sudo`, `env`, `nice`, `timeout`,
`xargs`, …) are stripped, quotes removed, paths reduced to basenames, `sh -c` / `eval` strings and `$(…)`
contents classified recursively (to a bounded depth), and dynamic execution we cannot resolve (`$X` as
a command word, `curl … | sh`) is tier 2.

Linear time: the shell tokenizer is one pass over the text with an index that only moves forward; nested
text (`$(…)`, `sh -c '…'`) is re-read at most MAX_DEPTH times. No regex here can backtrack on input size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from relay_shell.plan import Subject
from relay_shell.policy.shell_tokens import ASSIGNMENT, Command, tokenize
from relay_shell.policy.vocabulary import (
    BLOCK_DEVICE,
    CODE_INJECTION_ENV,
    CRITICAL_FILES,
    ESCALATION,
    HARMLESS_PAGERS,
    INTERPRETERS,
    IRREVERSIBLE,
    PROMPT_VARIABLES,
    PYTHON_ROOT_RMTREE,
    PYTHON_SHELL_CALL,
    PYTHON_STATEFUL,
    READ_ONLY,
    REDIRECT_WRITE,
    ROOTISH,
    SHELLS,
    SQL_DESTRUCTION,
    STATEFUL,
    SYSTEM_DIRS,
    WRAPPERS,
)

MAX_DEPTH = 6


@dataclass(frozen=True)
class Classification:
    tier: int
    reasons: tuple[str, ...]
    canonical: tuple[str, ...]


@dataclass(frozen=True)
class Finding:
    """One simple command (or other piece of text) with its tier; guarded mode admits per finding."""

    canonical: str
    tier: int
    reason: str


# -- vocabulary ------------------------------------------------------------------------------------------

_EDITED_LINE = "a line edited with control keys before Enter: what it became cannot be known"


# -- tokenizer -------------------------------------------------------------------------------------------


# -- classification --------------------------------------------------------------------------------------


def classify(subject: Subject) -> Classification:
    findings = analyze(subject)
    if not findings:
        return Classification(0, (), ())
    top = max(findings, key=lambda finding: finding.tier)
    reasons = tuple(dict.fromkeys(finding.reason for finding in findings if finding.tier == top.tier))
    return Classification(top.tier, reasons, tuple(finding.canonical for finding in findings))


def analyze(subject: Subject) -> list[Finding]:
    """Every simple command and other classified piece of the subject, with its tier."""
    findings: list[Finding] = []
    if subject.fixed_tier is not None:
        findings.append(Finding("", subject.fixed_tier, "inspection tool"))
        return findings + _connection_findings(subject)
    for name, value in subject.env:
        if name in HARMLESS_PAGERS and (value or "").strip() in HARMLESS_PAGERS[name]:
            continue
        if name in PROMPT_VARIABLES and not any(char in (value or "") for char in "$`\\"):
            continue  # a literal prompt: nothing in it is expanded
        if name in CODE_INJECTION_ENV or name.startswith(("LD_", "BASH_FUNC_")):
            findings.append(Finding(f"env {name}={value or ''}", 2, f"env {name} can inject code"))
    if subject.command is not None:
        findings += shell_findings(subject.command, 0)
        single = _single_command(subject.command) if subject.stdin else None
        if subject.stdin and single is not None:
            findings += stdin_findings(single, subject.stdin)
    if subject.argv is not None:
        words = list(subject.argv)
        findings += command_findings(Command(words=words, dynamic=[False] * len(words)), 0)
        if subject.stdin:
            findings += stdin_findings(words, subject.stdin)
    if subject.script is not None:
        if subject.interpreter == "python":
            findings += python_findings(subject.script)
        else:
            findings += shell_findings(subject.script, 0)
    if subject.typed is not None:
        # Which program reads the keyboard cannot be known for sure (`exec -a`, sudo, a remote shell): every
        # line counts as shell text, and Python's view adds what it finds stateful.
        findings += shell_findings(subject.typed, 0)
        findings += [finding for finding in python_findings(subject.typed) if finding.tier >= 2]
    if subject.typed_edited:
        findings.append(Finding(subject.typed[:200] if subject.typed else "", 2, _EDITED_LINE))
    if subject.transfer is not None:
        findings.append(Finding(subject.transfer, 2, "file transfer"))
    if subject.transfer_writes is not None and subject.transfer_tree:
        findings += tree_findings(subject.transfer_writes)
    elif subject.transfer_writes is not None:
        findings += redirect_findings([(">", subject.transfer_writes)])
    return findings + _connection_findings(subject)


def _connection_findings(subject: Subject) -> list[Finding]:
    """How an SSH call connects: host-key checking turned off, a listener open to other hosts."""
    findings = []
    if subject.unverified_host_key:
        findings.append(
            Finding("known_hosts=ignore " + " ".join(subject.hosts[:1]), 2, "host-key checking turned off (ignore)")
        )
    if subject.exposed_listener is not None:
        findings.append(Finding(f"bind_address {subject.exposed_listener}", 2, "a listener reachable from other hosts"))
    return findings


def _single_command(text: str) -> list[str] | None:
    commands = tokenize(text, [])
    return commands[0].words if len(commands) == 1 else None


def stdin_findings(words: list[str], stdin: str) -> list[Finding]:
    """stdin is a script when it feeds a shell or interpreter that has no script argument."""
    stripped = _strip_wrappers(words)[0]
    if not stripped:
        return []
    program = _basename(stripped[0])
    operands = [word for word in stripped[1:] if not word.startswith("-")]
    if program in SHELLS and (not operands or "-s" in stripped):
        return shell_findings(stdin, 1)
    if _is_interpreter(program) and (not operands or operands == ["-"]):
        return python_findings(stdin) if program.startswith("python") else [Finding(program, 2, "script on stdin")]
    return []


def shell_findings(text: str, depth: int) -> list[Finding]:
    if depth > MAX_DEPTH:
        return [Finding(text[:200], 2, "too deeply nested to classify")]
    findings: list[Finding] = []
    if _has_fork_bomb(text):
        findings.append(Finding("fork bomb", 3, "fork bomb"))
    nested: list[str] = []
    for command in tokenize(text, nested):
        findings += command_findings(command, depth)
    for inner in nested:
        findings += shell_findings(inner, depth + 1)
    return findings


def command_findings(command: Command, depth: int) -> list[Finding]:
    findings: list[Finding] = []
    findings += redirect_findings(command.redirects)
    words, dynamic, escalated, via_xargs = _strip_wrappers(command.words, command.dynamic)
    if not words:
        return findings or ([Finding("", 1, "redirection only")] if command.redirects else [])
    program = _basename(words[0])
    canonical = " ".join([program, *words[1:]])
    if dynamic and dynamic[0]:
        findings.append(Finding(canonical, 2, "dynamic command word: cannot classify"))
        return findings
    if command.heredoc is not None and program in SHELLS:
        findings += shell_findings(command.heredoc, depth + 1)
    tier, reason = program_tier(program, words, via_xargs)
    if command.piped_into and (program in SHELLS or _is_interpreter(program)):
        operands = [word for word in words[1:] if not word.startswith("-")]
        if not operands or (program in SHELLS and "-s" in words):
            tier, reason = max(tier, 2), f"pipes into {program}: runs code that cannot be classified"
    if program in SHELLS or program in ("su", "eval"):
        inner = _inline_script(program, words)
        if inner is not None:
            findings += shell_findings(inner, depth + 1)
            tier = max(tier, 2) if program in ("su",) else 1 if tier < 1 else tier
            reason = reason if program == "su" else f"{program} running inline shell text"
    if program == "find":
        for exec_words in _find_exec(words):
            findings += command_findings(Command(words=exec_words, dynamic=[False] * len(exec_words)), depth + 1)
    if escalated:
        tier, reason = max(tier, 2), reason if tier >= 2 else "privilege escalation"
    findings.append(Finding(canonical, tier, reason))
    return findings


def _strip_wrappers(words: list[str], dynamic: list[bool] | None = None) -> tuple[list[str], list[bool], bool, bool]:
    dynamic = dynamic if dynamic is not None else [False] * len(words)
    escalated = False
    via_xargs = False
    index = 0
    for _ in range(32):  # wrappers nest (sudo env nice …); bounded
        if index >= len(words):
            break
        program = _basename(words[index])
        if program == "timeout":
            index += 1
            while index < len(words) and words[index].startswith("-"):
                index += 2 if words[index] in ("-s", "-k", "--signal", "--kill-after") else 1
            index += 1  # the duration
            continue
        if program == "chroot":
            index += 2
            continue
        if program not in WRAPPERS or (
            program in ("sudo", "doas")
            and index + 1 < len(words)
            and words[index + 1] in ("-l", "-v", "-k", "-K", "--list")
        ):
            break
        escalated = escalated or program in ESCALATION
        via_xargs = via_xargs or program == "xargs"
        takes_value = WRAPPERS[program]
        index += 1
        while index < len(words):
            word = words[index]
            if word == "--":
                index += 1
                break
            if program == "env" and ASSIGNMENT.fullmatch(word):
                index += 1
                continue
            if program == "nice" and re.fullmatch(r"-\d+", word):
                index += 1
                continue
            if not word.startswith("-") or word == "-":
                break
            index += 2 if word in takes_value else 1
    return words[index:], dynamic[index:], escalated, via_xargs


def _inline_script(program: str, words: list[str]) -> str | None:
    if program == "eval":
        return " ".join(words[1:])
    for position, word in enumerate(words[1:], start=1):
        if word == "-c" or (word.startswith("-") and not word.startswith("--") and "c" in word[1:]):
            return words[position + 1] if position + 1 < len(words) else None
    return None


def _find_exec(words: list[str]) -> list[list[str]]:
    found = []
    index = 0
    while index < len(words):
        if words[index] in ("-exec", "-execdir", "-ok", "-okdir"):
            end = index + 1
            while end < len(words) and words[end] not in (";", "+", "\\;"):
                end += 1
            found.append(words[index + 1 : end])
            index = end
        index += 1
    return found


def _is_interpreter(program: str) -> bool:
    return program in INTERPRETERS or program.startswith(("python", "perl", "ruby", "node"))


def _basename(word: str) -> str:
    return word.rstrip("/").rsplit("/", 1)[-1] if "/" in word.rstrip("/") else word


def _flags(words: list[str]) -> tuple[set[str], set[str], list[str]]:
    """Short flags (split: -rf → r, f), long options (without values) and operands, `--` respected."""
    short: set[str] = set()
    long: set[str] = set()
    operands: list[str] = []
    options_done = False
    for word in words[1:]:
        if options_done or word == "-" or not word.startswith("-"):
            operands.append(word)
        elif word == "--":
            options_done = True
        elif word.startswith("--"):
            long.add(word.split("=", 1)[0])
        else:
            short.update(word[1:])
    return short, long, operands


def _is_rootish(path: str) -> bool:
    trimmed = path
    while trimmed.endswith("/*") or trimmed.endswith("/.") or (trimmed.endswith("/") and len(trimmed) > 1):
        trimmed = trimmed[:-2] if trimmed.endswith(("/*", "/.")) else trimmed[:-1]
        if not trimmed:
            return True
    if trimmed in ROOTISH or trimmed in SYSTEM_DIRS or trimmed in ("~/", "~/*", "~"):
        return True
    return (trimmed.startswith("~") and trimmed.rstrip("/*") in ("~", "")) or trimmed in ("", "/")


def program_tier(program: str, words: list[str], via_xargs: bool) -> tuple[int, str]:
    short, long, operands = _flags(words)
    subcommand = operands[0] if operands else ""
    if program.startswith("mkfs") or program in IRREVERSIBLE:
        return 3, f"{program} destroys data or stops the system"
    if program in ("init", "telinit") and subcommand in ("0", "6"):
        return 3, f"{program} {subcommand} halts or reboots"
    if program == "rm":
        recursive = bool(short & {"r", "R"}) or "--recursive" in long
        if recursive and (via_xargs or any(_is_rootish(path) for path in operands) or "--no-preserve-root" in long):
            return 3, "recursive delete of / , a system directory or unknown targets"
        return 2, "deletes files"
    recursive_change = short & {"R"} or "--recursive" in long
    if program in ("chmod", "chown", "chgrp") and recursive_change and any(map(_is_rootish, operands[1:])):
        return 3, f"recursive {program} of / or a system directory"
    if program == "mv" and any(_is_rootish(path) for path in operands[:-1]):
        return 3, "moves / or a system directory"
    if program == "dd":
        for word in words[1:]:
            if word.startswith("of="):
                target = word[3:]
                if BLOCK_DEVICE.match(target) or target in CRITICAL_FILES:
                    return 3, f"dd onto {target}"
                return 1, "dd writes a file"
        return 0, "read-only command"
    if program == "find":
        if "delete" in {option.lstrip("-") for option in words[1:] if option.startswith("-")}:
            if any(_is_rootish(path) for path in operands[:1]) or not operands:
                return 3, "find -delete on / or a system directory"
            return 2, "find -delete removes files"
        if any(word in ("-fprint", "-fprintf", "-fls", "-fprint0") for word in words):
            return 1, "find writes a file"
        return 0, "read-only command"
    if program in ("kill", "pkill", "killall"):
        if program == "kill" and ("-1" in operands or "1" in operands or "-1" in words[1:]):
            return 3, "kills every process or init"
        return 2, "signals processes"
    if program == "crontab":
        if "r" in short:
            return 3, "removes the crontab"
        return (0, "read-only command") if short == {"l"} else (2, "edits the crontab")
    if program == "git":
        return _git_tier(words, operands, long, short)
    if program in ("systemctl",):
        if subcommand in ("reboot", "poweroff", "halt", "kexec", "rescue", "emergency", "default"):
            return 3, f"systemctl {subcommand}"
        if subcommand in (
            "",
            "status",
            "show",
            "cat",
            "list-units",
            "list-unit-files",
            "list-timers",
            "is-active",
            "is-enabled",
            "is-failed",
            "list-dependencies",
            "list-sockets",
        ):
            return 0, "read-only command"
        return 2, f"systemctl {subcommand} changes services"
    if program in ("docker", "podman"):
        if subcommand in ("ps", "images", "logs", "inspect", "version", "info", "top", "stats", "port"):
            return 0, "read-only command"
        if subcommand in ("system", "volume") and ("prune" in operands or "rm" in operands):
            return 3, f"{program} {subcommand} destroys data"
        return 2, f"{program} {subcommand} changes containers"
    if program == "kubectl":
        if subcommand in ("get", "describe", "logs", "top", "explain", "version", "api-resources", "config"):
            return 0, "read-only command"
        if subcommand == "delete" and len(operands) > 1 and operands[1] in ("namespace", "namespaces", "ns", "pv"):
            return 3, "kubectl deletes a namespace"
        return 2, f"kubectl {subcommand} changes the cluster"
    if program in ("pip", "pip3", "npm", "gem", "cargo", "go") and subcommand in (
        "list",
        "show",
        "freeze",
        "ls",
        "view",
        "search",
    ):
        return 0, "read-only command"
    if program in ("pip", "pip3", "gem") and subcommand in ("install", "uninstall"):
        return 2, f"{program} {subcommand} changes packages"
    if program == "npm" and ("g" in short or "--global" in long):
        return 2, "npm changes global packages"
    if program in ("apt", "apt-get", "dnf", "yum", "zypper", "apk", "pacman", "snap", "brew") and subcommand in (
        "list",
        "search",
        "show",
        "info",
        "policy",
        "list-installed",
    ):
        return 0, "read-only command"
    if program == "dpkg" and short & {"l", "L", "s", "S"}:
        return 0, "read-only command"
    if program in ("ip",):
        if subcommand in ("", "a", "addr", "address", "r", "route", "l", "link", "n", "neigh") and (
            len(operands) < 2 or operands[1] in ("show", "list", "ls", "get")
        ):
            return 0, "read-only command"
        return 2, "changes network configuration"
    if program == "sysctl":
        return (2, "changes kernel parameters") if "w" in short or any("=" in o for o in operands) else (0, "read")
    if program in ("mount", "umount") and not operands and program == "mount":
        return 0, "read-only command"
    if program in ("psql", "mysql", "mariadb", "sqlite3", "clickhouse-client"):
        if any(SQL_DESTRUCTION.search(word) for word in words[1:]):
            return 3, "drops or truncates database objects"
        return 1, "database client"
    if program in ("sed", "perl") and ("i" in short or "--in-place" in long):
        targets = [path for path in operands if path.startswith(("/etc", "/boot", "/usr"))]
        return (2, "edits system files in place") if targets else (1, "edits files in place")
    if program == "tee":
        for path in operands:
            if BLOCK_DEVICE.match(path) or (path in CRITICAL_FILES and "a" not in short):
                return 3, f"tee overwrites {path}"
        return (1, "writes files") if operands else (0, "read-only command")
    if program == "awk" or program == "gawk":
        return (1, "awk program") if "system(" in " ".join(words) or "-i" in words else (0, "read-only command")
    if program in ("hostname", "date") and operands:
        return 2, f"{program} sets system state"
    if program in ESCALATION:
        return 2, "privilege escalation"
    if program in STATEFUL:
        return 2, f"{program} changes system state"
    if program in READ_ONLY:
        return 0, "read-only command"
    return 1, f"{program}: not known to be read-only"


def _git_tier(words: list[str], operands: list[str], long: set[str], short: set[str]) -> tuple[int, str]:
    subcommand = operands[0] if operands else ""
    if subcommand == "push":
        if (
            long & {"--force", "--force-with-lease", "--mirror", "--delete", "--prune"}
            or "f" in short
            or any(operand.startswith("+") or operand.startswith(":") for operand in operands[1:])
        ):
            return 3, "git force push rewrites or deletes remote history"
        return 2, "git push changes a remote"
    if subcommand in (
        "status",
        "log",
        "diff",
        "show",
        "rev-parse",
        "ls-files",
        "blame",
        "grep",
        "describe",
        "shortlog",
        "reflog",
        "ls-remote",
        "remote",
        "config",
        "fetch",
        "",
        "help",
        "version",
    ):
        return 0, "read-only command"
    if subcommand == "branch" and not short & {"d", "D", "m", "M"}:
        return 0, "read-only command"
    if (subcommand == "reset" and "--hard" in long) or (subcommand == "clean" and short & {"f"}):
        return 2, f"git {subcommand} discards work"
    if subcommand in ("filter-branch", "filter-repo") or (subcommand == "branch" and "D" in short):
        return 2, f"git {subcommand} rewrites or deletes history"
    return 1, f"git {subcommand}"


def redirect_findings(redirects: list[tuple[str, str]]) -> list[Finding]:
    findings = []
    for operator, target in redirects:
        if operator not in REDIRECT_WRITE:
            continue
        if target in ("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty") or target.startswith("/dev/fd/"):
            continue
        if BLOCK_DEVICE.match(target):
            findings.append(Finding(f"{operator} {target}", 3, f"writes onto block device {target}"))
        elif target in CRITICAL_FILES or target.startswith("/boot/"):
            tier = 3 if operator != ">>" and operator != "&>>" else 2
            findings.append(Finding(f"{operator} {target}", tier, f"writes {target}"))
        elif any(target.startswith(directory + "/") for directory in SYSTEM_DIRS if directory not in ("/home",)):
            findings.append(Finding(f"{operator} {target}", 2, f"writes system file {target}"))
        else:
            findings.append(Finding(f"{operator} {target}", 1, f"writes {target}"))
    return findings


def tree_findings(root: str) -> list[Finding]:
    """A tree merged into `root` may replace any file below it: the worst file it could reach counts."""
    below = root.rstrip("/") + "/"
    if root.startswith("/boot") or any(path.startswith(below) for path in CRITICAL_FILES):
        return [Finding(f"tree into {root}", 3, f"a tree merged into {root} can replace critical files there")]
    return redirect_findings([(">", root)])


def _has_fork_bomb(text: str) -> bool:
    """`name(){ name|name& };name` in any spacing. Each `(){` is inspected within a bounded window."""
    if "fork while fork" in text or "fork;fork" in text.replace(" ", ""):
        return True
    compact_needed = "(" in text and "|" in text and "&" in text
    if not compact_needed:
        return False
    compact = "".join(text.split())
    position = compact.find("(){")
    while position >= 0:
        body = compact[position + 3 : position + 3 + 256].split("}", 1)[0]
        # Only a body that pipes and backgrounds can be a bomb; then find the function's name (≤ 64 chars).
        if "|" in body and "&" in body:
            start = position
            while (
                start > 0 and position - start < 64 and (compact[start - 1].isalnum() or compact[start - 1] in "_:.-")
            ):
                start -= 1
            name = compact[start:position]
            if name and f"{name}|{name}&" in body:
                return True
        position = compact.find("(){", position + 3)
    return False


def python_findings(script: str) -> list[Finding]:
    findings = [Finding("python script", 1, "python script")]
    if any(marker in script for marker in PYTHON_STATEFUL):
        findings.append(Finding("python script", 2, "python script changes files, processes or runs commands"))
    if PYTHON_ROOT_RMTREE.search(script):
        findings.append(Finding("python rmtree", 3, "python deletes / or a system directory"))
    for match in PYTHON_SHELL_CALL.finditer(script):
        findings += shell_findings(match.group("body"), 1)
    return findings
