"""Rules for the core system tools: deleting, moving and changing files, find, processes, services and power,
schedulers, users, firewalls and network configuration, text tools that edit in place, network clients and
servers. The rubric they follow is in adr/0004.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from relay_shell.policy.calls import (
    READ,
    Call,
    Selection,
    Verdict,
    every_file,
    is_device,
    is_protected,
    is_rootish,
    names_files,
    parse_options,
    trimmed,
    verdict,
)
from relay_shell.policy.vocabulary import CRITICAL_FILES, SYSTEM_DIRS, USER_CONFIG
from relay_shell.policy.vocabulary import words as word_set

# -- deleting --------------------------------------------------------------------------------------------------


def deletion_by_selection(selection: Selection, what: str) -> Verdict:
    """A find-driven deletion: by what the find expression selects (the rubric's find rules)."""
    if selection.dirs_only or selection.empty_only:
        return verdict(2, f"{what} removes empty entries only")
    if selection.negated_filter:
        return verdict(3, f"{what} deletes every file except some")
    if selection.name_filter:
        return verdict(2, f"{what} deletes files selected by name")
    return verdict(3, f"{what} deletes every file of a tree")


def _rm(call: Call) -> Verdict:
    recursive = call.has("-r", "-R", "--recursive")
    targets = call.operands
    context = call.context
    if not recursive and call.has_exact("-d", "--dir"):
        return verdict(2 if context.bulk or any(map(every_file, targets)) else 1, "removes empty directories")
    if recursive:
        if call.has("--no-preserve-root") or any(map(is_rootish, targets)):
            return verdict(3, "recursive delete of / , the home directory or a system directory")
        selection = context.selection
        if selection is not None and (selection.files_only or selection.extension_filter):
            return verdict(2, "deletes the files a find selects (-r is moot)")
        if targets and not context.via_xargs and all(map(names_files, targets)):
            return verdict(2, "deletes files (-r is moot)")
        return verdict(3, "recursive delete of a directory tree")
    if context.selection is not None:
        return deletion_by_selection(context.selection, "find -exec rm")
    if context.all_but or context.every:
        return verdict(3, "deletes every file of a directory, or all but a few")
    if any(map(every_file, targets)):
        return verdict(3, "deletes every file of a directory")
    return verdict(2, "deletes files")


def _rmdir(call: Call) -> Verdict:
    if call.context.bulk or call.context.via_xargs or any("*" in target for target in call.operands):
        return verdict(2, "removes empty directories in bulk")
    return verdict(1, "removes named empty directories")


def find_selection(words: list[str]) -> tuple[Selection, bool, list[list[str]], bool]:
    """What a find expression selects, whether it has -delete, the commands of its -exec/-ok actions, and whether
    it writes a file (-fprint)."""
    paths: list[str] = []
    index = 1
    while (index < len(words) and words[index] in ("-H", "-L", "-P")) or (
        index < len(words) and words[index].startswith(("-D", "-O")) and len(words[index]) <= 3
    ):
        index += 2 if words[index] == "-D" else 1
    while index < len(words) and not words[index].startswith(("-", "(", "!", ")", ",")):
        paths.append(words[index])
        index += 1
    files_only = dirs_only = name_filter = extension_filter = negated = empty = delete = writes = False
    execs: list[list[str]] = []
    negate_next = False
    while index < len(words):
        word = words[index]
        if word in ("!", "-not"):
            negate_next = True
            index += 1
            continue
        if word in ("-type", "-xtype") and index + 1 < len(words):
            kinds = set(words[index + 1].split(","))
            files_only = files_only or (kinds == {"f"} and not negate_next)
            dirs_only = dirs_only or (kinds == {"d"} and not negate_next)
            index += 2
        elif word in ("-name", "-iname", "-path", "-ipath", "-regex", "-iregex", "-wholename", "-iwholename", "-lname"):
            pattern = words[index + 1] if index + 1 < len(words) else ""
            if negate_next:
                negated = True
            else:
                name_filter = True
                extension_filter = extension_filter or bool(re.search(r"\.[A-Za-z0-9]{1,10}['\"]?$", pattern))
            index += 2
        elif word in ("-exec", "-execdir", "-ok", "-okdir"):
            end = index + 1
            while end < len(words) and words[end] not in (";", "+", "\\;"):
                end += 1
            execs.append(words[index + 1 : end])
            index = end + 1
        else:
            empty = empty or (word == "-empty" and not negate_next)
            delete = delete or word == "-delete"
            writes = writes or word in ("-fprint", "-fprintf", "-fls", "-fprint0")
            index += 1
        negate_next = False
    selection = Selection(tuple(paths), files_only, dirs_only, name_filter, extension_filter, negated, empty)
    return selection, delete, execs, writes


_FD_VALUES = word_set(
    "-e --extension -t --type -E --exclude -d --max-depth --min-depth --exact-depth -S --size --changed-within"
    " --changed-before --newer --older -o --owner -j --threads --max-results -c --color --search-path"
    " --base-directory --path-separator --batch-size --format --ignore-file --hyperlink -x --exec -X"
    " --exec-batch"
)
_FD_EXEC = frozenset(["-x", "--exec", "-X", "--exec-batch"])
_FD_KINDS = {"f": "file", "d": "directory", "e": "empty"}


def fd_selection(arguments: list[str]) -> tuple[Selection, list[list[str]]]:
    """What `fd [PATTERN] [PATH…]` selects and the commands of its -x/--exec and -X/--exec-batch (each up to `;`
    or the end): the same selection a find expression gives, for the deletions it drives."""
    kinds: set[str] = set()
    extensions = excludes = False
    operands: list[str] = []
    execs: list[list[str]] = []
    position = 1
    while position < len(arguments):
        word = arguments[position]
        if not word.startswith("-") or word == "-":
            operands.append(word)
            position += 1
            continue
        options, position = parse_options(arguments, position, _FD_VALUES)
        for name, value in options:
            if name in _FD_EXEC:
                end = position
                while end < len(arguments) and arguments[end] != ";":
                    end += 1
                execs.append(([value] if value is not None else []) + arguments[position:end])
                position = end + 1
            if name in ("-t", "--type"):
                kinds.add(_FD_KINDS.get((value or "")[:1], "other"))
            extensions = extensions or name in ("-e", "--extension")
            excludes = excludes or name in ("-E", "--exclude")
    pattern = operands[0] if operands else ""
    named = extensions or pattern not in ("", ".", "^", ".*")
    selection = Selection(
        paths=tuple(operands[1:]) or (".",),
        files_only=kinds == {"file"},
        dirs_only=kinds == {"directory"},
        name_filter=named,
        extension_filter=extensions or bool(re.search(r"\.[A-Za-z0-9]{1,10}\$?$", pattern)),
        negated_filter=excludes and not named,
        empty_only=kinds == {"empty"},
    )
    return selection, execs


def _find(call: Call) -> Verdict:
    selection, delete, _execs, writes = find_selection(call.words)
    if delete:
        if any(map(is_rootish, selection.paths)) and not (selection.name_filter or selection.empty_only):
            return verdict(3, "find -delete on / or a system directory")
        return deletion_by_selection(selection, "find -delete")
    return verdict(1, "find writes a file") if writes else READ


# -- moving, copying, permissions --------------------------------------------------------------------------------


def writes_onto(path: str, what: str) -> Verdict | None:
    if is_device(path) or path in CRITICAL_FILES or path.startswith("/boot/"):
        return verdict(3, f"{what} onto {path}")
    if is_protected(path) or USER_CONFIG.match(path):
        return verdict(2, f"{what} into {path}")
    return None


def _mv(call: Call) -> Verdict:
    operands = call.operands
    sources = operands[:-1]
    if any(is_rootish(path) for path in sources) or any(trimmed(path) in SYSTEM_DIRS for path in sources):
        return verdict(3, "moves / or a system directory")
    target = call.value("-t", "--target-directory") or (operands[-1] if operands else "")
    onto = writes_onto(target, "mv")
    if onto is not None:
        return onto
    context = call.context
    if context.bulk or context.via_xargs or any("*" in source for source in sources):
        return verdict(2, "bulk move or rename")
    if call.has("-f", "--force") and not call.has_exact("-n", "--no-clobber", "-i", "--interactive"):
        return verdict(2, "mv overwrites without asking")
    return verdict(1, "moves or renames")


def _cp(call: Call) -> Verdict:
    target = call.value("-t", "--target-directory") or (call.operands[-1] if len(call.operands) >= 2 else "")
    onto = writes_onto(target, call.program)
    return onto if onto is not None else verdict(1, f"{call.program} copies files")


def _permissions(call: Call) -> Verdict:
    recursive = call.has("-R", "--recursive") or (call.program == "setfacl" and call.has("-R"))
    targets = call.operands[1:] if call.program in ("chmod", "chown", "chgrp", "chcon") else call.operands
    if recursive and any(is_rootish(path) or trimmed(path) in SYSTEM_DIRS for path in targets):
        return verdict(3, f"recursive {call.program} of / or a system directory")
    return verdict(2, f"{call.program} changes permissions or ownership")


_IN_PLACE = {
    # Short flags that may precede -i in one word (`sed -Ei`, `perl -pi`); what follows the i is a backup suffix.
    "sed": re.compile(r"^-[nEersuzl]*i(.*)$"),
    "gsed": re.compile(r"^-[nEersuzl]*i(.*)$"),
    "perl": re.compile(r"^-[0aclnpsTtuUwWX]*i(.*)$"),
}


def in_place(call: Call) -> Verdict:
    """sed -i / perl -i: in place without a backup suffix is 2; with one (-i.bak, BSD `-i .bak`) it is 1."""
    pattern = _IN_PLACE[call.program]
    in_place = backup = False
    words = call.words
    for index, word in enumerate(words[1:], start=1):
        name, equals, suffix = word.partition("=")
        if len(name) >= 3 and "--in-place".startswith(name):  # getopt_long reads `--in`, `--in-pl=.bak` as it
            in_place = True
            backup = backup or bool(equals and suffix)
            continue
        match = pattern.match(word)
        if match is None:
            continue
        in_place = True
        following = words[index + 1] if index + 1 < len(words) else ""
        backup = backup or bool(match.group(1)) or (following.startswith(".") and len(following) > 1)
    if not in_place:
        return READ
    if any(is_protected(path) or USER_CONFIG.match(path) for path in call.operands):
        return verdict(2, "edits system or login files in place")
    if backup and not call.context.bulk:
        return verdict(1, "edits files in place, keeping a backup")
    return verdict(2, "edits files in place without a backup")


def _tee(call: Call) -> Verdict:
    for path in call.operands:
        onto = writes_onto(path, "tee")
        if onto is not None:
            return verdict(2, onto.reason) if call.has_exact("-a", "--append") and onto.tier == 3 else onto
    return verdict(1, "writes files") if call.operands else READ


def _compress(call: Call) -> Verdict:
    if call.has_exact("-c", "--stdout", "-l", "--list", "-t", "--test", "-h", "--help", "-V", "--version"):
        return verdict(0, f"{call.program} writes to stdout")
    if call.has("-r", "--recursive") or call.context.bulk:
        return verdict(2, f"{call.program} rewrites a whole tree in place")
    return verdict(1, f"{call.program} replaces a file with its (de)compressed form")


def _rsync(call: Call) -> Verdict:
    if call.has_exact("-n", "--dry-run", "--list-only"):
        return verdict(0, "rsync dry run")
    if any(option.startswith("--delete") for option in call.long) or "--del" in call.long:
        return verdict(3, "rsync --delete deletes files in the destination tree")
    if call.has("--remove-source-files"):
        return verdict(2, "rsync removes the source files")
    onto = writes_onto(call.operands[-1], "rsync") if call.operands else None
    return onto if onto is not None else verdict(1, "rsync copies files")


def _tar(call: Call) -> Verdict:
    mode = call.words[1] if len(call.words) > 1 and not call.words[1].startswith("-") else ""
    letters = set(mode) | call.short
    if call.has("--delete"):
        return verdict(2, "tar deletes members of an archive")
    if letters & {"c", "x", "r", "u", "A"} or call.long & {"--create", "--extract", "--get", "--append"}:
        directory = call.value("-C", "--directory") or ""
        if "x" in letters and (directory == "/" or is_protected(directory + "/")):
            return verdict(2, "extracts into a system directory")
        return verdict(1, "tar creates or extracts an archive")
    return READ


# -- processes, services, power, schedulers ---------------------------------------------------------------------

_REPORT_SIGNALS = {"WINCH", "SIGWINCH", "INFO", "SIGINFO", "28"}


def _kill(call: Call) -> Verdict:
    args = call.words[1:]
    if any(word in ("-l", "-L", "--list", "--table") for word in args):
        return verdict(0, "lists signals")
    signal = "TERM"
    if args and args[0] in ("-s", "-n", "--signal") and len(args) > 1:
        signal, args = args[1], args[2:]
    elif args and args[0].startswith("-") and args[0] != "--":
        signal, args = args[0][1:], args[1:]
    pids = [word for word in args if word != "--"]
    if signal in ("0", "SIG0"):
        return verdict(0, "checks that a process exists")
    if "-1" in pids or "1" in pids:
        return verdict(3, "kills every process or init")
    if signal.upper() in _REPORT_SIGNALS:
        return verdict(1, "asks a process for a report")
    return verdict(2, "signals processes")


def _pkill(call: Call) -> Verdict:
    # pkill -l only lists the names of what it kills; killall -l lists signals and kills nothing.
    if call.program == "killall" and call.has_exact("-l", "--list", "-L"):
        return verdict(0, "lists signals")
    if any(word in ("-0", "--signal=0") for word in call.words):
        return verdict(0, "checks that processes exist")
    return verdict(2, f"{call.program} signals processes")


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


def _fpsync(call: Call) -> Verdict:
    if call.has("-E"):
        return verdict(3, "fpsync -E turns on rsync --delete")
    return verdict(1, "fpsync copies files")


def _dry_run_or_destroy(call: Call) -> Verdict:
    if call.has_exact("-n", "--dry-run", "-V", "--version"):
        return verdict(0, f"{call.program} dry run")
    return verdict(3, f"{call.program} can lose committed data")


def _bulk_rename(call: Call) -> Verdict:
    if call.has_exact("-n", "--no-act", "--dry-run") or "-sim" in call.words:
        return verdict(0, f"{call.program} dry run")
    return verdict(2, f"{call.program} renames files in bulk")


RULES: dict[str, Callable[[Call], Verdict]] = {
    "rm": _rm,
    "fpsync": _fpsync,
    "pg_resetwal": _dry_run_or_destroy,
    "pg_rewind": _dry_run_or_destroy,
    "mmv": _bulk_rename,
    "rename": _bulk_rename,
    "prename": _bulk_rename,
    "perl-rename": _bulk_rename,
    "file-rename": _bulk_rename,
    "rename.ul": _bulk_rename,
    "qmv": _bulk_rename,
    "vidir": _bulk_rename,
    "massren": _bulk_rename,
    "f2": _bulk_rename,
    "rnm": _bulk_rename,
    "unlink": lambda call: verdict(2, "deletes a file"),
    "rmdir": _rmdir,
    "find": _find,
    "mv": _mv,
    "cp": _cp,
    "install": _cp,
    "ln": _cp,
    "chmod": _permissions,
    "chown": _permissions,
    "chgrp": _permissions,
    "setfacl": _permissions,
    "chattr": _permissions,
    "chcon": _permissions,
    "perl": in_place,
    "tee": _tee,
    "gzip": _compress,
    "gunzip": _compress,
    "bzip2": _compress,
    "bunzip2": _compress,
    "xz": _compress,
    "unxz": _compress,
    "zstd": _compress,
    "unzstd": _compress,
    "pigz": _compress,
    "lzma": _compress,
    "rsync": _rsync,
    "tar": _tar,
    "bsdtar": _tar,
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
