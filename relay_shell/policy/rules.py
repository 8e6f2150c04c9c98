"""Which rule rates a program: help and version requests first, then the program's own rule, then the
vocabulary (irreversible, listeners, escalation, stateful, read-only), Windows commands, and last the
evidence in a sub-command CLI's verb. A program nothing knows is tier 1.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from itertools import pairwise

from relay_shell.policy import (
    builtins,
    command_languages,
    daemons,
    devops,
    disks,
    files,
    find,
    inspectors,
    network,
    outputs,
    own_files,
    packages,
    processes,
    scripts,
    sql,
    vcs,
    verbs,
)
from relay_shell.policy.calls import Call, Context, Verdict, cgroup_control, verdict
from relay_shell.policy.option_targets import LIBRARY_PROGRAMS, option_target_verdict
from relay_shell.policy.read_only import READ_ONLY
from relay_shell.policy.vocabulary import (
    ESCALATION,
    INTERPRETERS,
    IRREVERSIBLE,
    NETWORK_LISTENERS,
    POWER,
    SHELLS,
    STATEFUL,
    TASK_RUNNERS,
    WRAPPER_OPERANDS,
    WRAPPERS,
)
from relay_shell.policy.windows import is_windows_style, windows_verdict

RULES: dict[str, Callable[[Call], Verdict]] = {
    **packages.RULES,
    **devops.RULES,
    **vcs.RULES,
    **disks.RULES,
    **files.RULES,
    **find.RULES,
    **processes.RULES,
    **network.RULES,
    **sql.RULES,
    **verbs.RULES,
    **outputs.RULES,
    **scripts.RULES,
    **builtins.RULES,
    **inspectors.RULES,
    **daemons.RULES,
    **command_languages.RULES,
}


# A program named by its path or a script file: what it does cannot be known, whatever its arguments ask for.
_SCRIPT_EXTENSIONS = (".sh", ".bash", ".py", ".pl", ".rb", ".js", ".php", ".lua", ".tcl", ".awk", ".ps1")


# The server's own command line reads its log (`relay-shell audit verify AUDIT`): naming the log is its job.
_OWN_FILES_READERS = frozenset({"relay-shell"})
# Copying programs write only their destination (the last operand; cp's -t is read by its own rule): a copy of the
# log elsewhere is a read of it.
_COPIERS = frozenset({"cp", "rsync", "scp", "install"})
# Programs that put a file under its source's name into a target directory (`mv forged/audit.jsonl LOGDIR/`).
_MOVERS = frozenset({"mv", "cp", "ln", "install", "rsync", "scp"})
# Programs that move, delete or change a directory: one above an own file frees or closes the file's path.
_DIRECTORY_CHANGERS = frozenset(
    {"mv", "rm", "rmdir", "unlink", "chmod", "chown", "chgrp", "chattr", "setfacl", "mount", "umount", "shred"}
)


# Programs that write a tree of files into a directory (`rsync -a src/ LOGDIR/`, `tar -xf f.tar -C LOGDIR`): a
# file of the tree named like an own file replaces it (attack 4, O7).
_TREE_WRITERS = frozenset({"cp", "rsync", "scp", "mv", "tar", "bsdtar", "unzip", "cpio", "7z", "git", "rclone"})
_TREE_READERS = frozenset({"rg", "ag", "ack", "tar", "bsdtar", "rsync", "7z", "7za", "rclone", "cpio", "git"})
_RECURSIVE_READ = re.compile(r"-[A-Za-z]*[rRa][A-Za-z]*|--(?:recursive|dereference-recursive|archive)")
_RECURSIVE = re.compile(r"-[A-Za-z]*[rRaT][A-Za-z]*|--(?:recursive|archive|no-target-directory)")


def _tree_targets(program: str, words: list[str]) -> list[str]:
    """The directories a tree may be written into: a recursive copy's or a `mv -T`'s destination, an extraction's
    -C/--directory, any operand of an unpacker (`unzip -d DIR`, `cpio -D DIR`, `git clone URL DIR`)."""
    if program in ("cp", "rsync", "scp", "mv"):
        return words[-1:] if any(map(_RECURSIVE.fullmatch, words[1:-1])) else []
    if program in ("tar", "bsdtar"):
        first = words[1] if len(words) > 1 else ""
        extracts = "--extract" in words or "--get" in words or ("x" in first and not first.startswith("--"))
        if not extracts:
            return []
        found = [value for flag, value in pairwise(words) if flag in ("-C", "--directory")]
        return found + [word.split("=", 1)[1] for word in words if word.startswith("--directory=")]
    return [word.split("=", 1)[-1] for word in words[1:]]


def _reads_trees(program: str, words: list[str]) -> bool:
    """Whether the program reads every file below a directory it is given: always (rg, tar, rsync, cpio, git), with
    a recursive option (grep -r, cp -r, scp -r, zip -r), or find running a program on what it finds."""
    if program in _TREE_READERS:
        return True
    if program in ("grep", "egrep", "fgrep", "cp", "scp", "zip"):
        return any(map(_RECURSIVE_READ.fullmatch, words[1:]))
    return program == "find" and any(word in ("-exec", "-execdir", "-ok", "-okdir") for word in words)


def _moved_into(words: list[str]) -> str | None:
    """The own file a move, copy or link into a directory would replace: `-t DIR` / `--target-directory=DIR`, or
    the last operand, joined with each source's name."""
    operands = [word for word in words[1:] if not word.startswith("-")]
    target = next((value for flag, value in pairwise(words) if flag in ("-t", "--target-directory")), None)
    target = target or next((word.split("=", 1)[1] for word in words if word.startswith("--target-directory=")), None)
    if target is None:
        target, operands = (operands[-1], operands[:-1]) if len(operands) > 1 else ("", [])
    return own_files.into_directory(target, [word for word in operands if word != target])


def program_verdict(program: str, words: list[str], context: Context) -> Verdict:
    found = _program_verdict(program, words, context)
    if own_files.protecting() and program not in _OWN_FILES_READERS:
        guarded = _own_files_verdict(program, words, found)
        if guarded is not None:
            return guarded
    if found.tier >= 1 and any(map(cgroup_control, words[1:])):  # its text or its argument may write it (P2/P3)
        return verdict(3, f"{program} is given a control group's file that moves, kills or freezes processes")
    if found.tier == 0 and ("/" in words[0] or program.endswith(_SCRIPT_EXTENSIONS)) and not known_program(program):
        return verdict(1, f"{program}: a program given by its path, whose effect cannot be known")
    if found.tier == 1 and (program in LIBRARY_PROGRAMS or "/" in "".join(words[1:])):
        # what its option values write or load, where its own rule does not read them (every such file is a path)
        target = option_target_verdict(program, words)
        if target is not None and target.tier > found.tier:
            return replace(found, tier=target.tier, reason=target.reason)
    return found


def _own_files_verdict(program: str, words: list[str], found: Verdict) -> Verdict | None:
    """Tier 3 for a command naming the server's secrets (any command), or, when it may write (1 or more), its own
    files, a directory above them or a tree merged into one (policy/own_files.py; adr/0025 Rounds 7, 8)."""
    secret = own_files.named_secret(words[1:])
    if secret is not None:
        why = f"{program} names the server's secret {secret} (signing key, token file, OAuth state, its memory)"
        return replace(found, tier=3, reason=why)
    if _reads_trees(program, words) and any(map(own_files.holds_secret, words[1:])):
        why = f"{program} reads a tree holding the server's secrets (signing key, token file, OAuth state)"
        return replace(found, tier=3, reason=why)
    if found.tier < 1:
        return None
    linked = own_files.links_to_own(words[1:]) if program == "ln" else None
    if linked is not None:
        why = f"ln links to {linked}, a directory of the server's own files: later paths through the link hide them"
        return replace(found, tier=3, reason=why)
    named = own_files.named_in(words[-1:] if program in _COPIERS else words[1:])
    if named is None and program in _MOVERS:
        named = _moved_into(words)
    if named is not None:
        why = f"{program} names the server's own file {named} (audit log, signing key, token or OAuth state)"
        return replace(found, tier=3, reason=why)
    changed = words[1:-1] if program == "mv" else words[1:]
    if program in _DIRECTORY_CHANGERS and any(map(own_files.holds_own_file, changed)):
        why = f"{program} moves, deletes or changes a directory holding the server's own files"
        return replace(found, tier=3, reason=why)
    if program in _TREE_WRITERS and any(map(own_files.holds_own_file, _tree_targets(program, words))):
        why = f"{program} merges a tree into a directory holding the server's own files (any file there replaced)"
        return replace(found, tier=3, reason=why)
    return None


def _program_verdict(program: str, words: list[str], context: Context) -> Verdict:
    call = Call(program, words, context)
    if verbs.is_help_request(program, words):
        return verdict(0, f"{program} prints help or its version")
    if is_windows_style(words):
        found = windows_verdict(program, call)
        if found is not None:
            return found
    if program.startswith(("mkfs", "mke2fs", "mkswap")):
        return verdict(3, f"{program} makes a filesystem, destroying what was on the device")
    rule = RULES.get(program)
    if rule is not None:
        return rule(call)
    if program in IRREVERSIBLE:
        return verdict(3, f"{program} destroys data or stops the system")
    if program in NETWORK_LISTENERS:
        return network.listener(call)
    if program in ESCALATION:
        if program in ("sudo", "doas") and len(words) > 1 and words[1] in ("-l", "-v", "-k", "-K", "--list"):
            return verdict(0, f"{program} lists or refreshes privileges")
        return verdict(2, "privilege escalation")
    if program in STATEFUL:
        return verdict(2, f"{program} changes system state")
    if program in READ_ONLY:
        return verdict(0, f"read-only: {READ_ONLY[program]}")
    if program in SHELLS or program in INTERPRETERS or program in TASK_RUNNERS:
        return verdict(1, f"{program} runs code")
    found = windows_verdict(program, call)
    if found is not None:
        return found
    if verbs.is_dry_run(words):
        return verdict(0, f"{program} dry run")
    return verbs.cli_verdict(call, verdict(1, f"{program}: not known to be read-only"))


def known_program(program: str) -> bool:
    """Whether a rule or the vocabulary knows the name: a word an option swallowed may be a command then."""
    return (
        program in RULES
        or program in IRREVERSIBLE
        or program in NETWORK_LISTENERS
        or program in ESCALATION
        or program in STATEFUL
        or program in READ_ONLY
        or program in SHELLS
        or program in INTERPRETERS
        or program in TASK_RUNNERS
        or program in WRAPPERS
        or program in WRAPPER_OPERANDS
        or program.startswith(("mkfs", "mke2fs", "mkswap"))
    )


@cache
def known_names() -> frozenset[str]:
    """Every program name a rule or the vocabulary knows: what a globbed command word is matched against."""
    return frozenset(
        [
            *RULES,
            *IRREVERSIBLE,
            *NETWORK_LISTENERS,
            *ESCALATION,
            *STATEFUL,
            *READ_ONLY,
            *SHELLS,
            *INTERPRETERS,
            *TASK_RUNNERS,
            *WRAPPERS,
            *WRAPPER_OPERANDS,
            *POWER,
            "mkfs",
            "mkfs.ext4",
            "mkfs.xfs",
            "mkfs.vfat",
            "mkfs.btrfs",
        ]
    )
