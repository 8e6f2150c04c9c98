"""Rules for files: deleting (rm, rmdir, unlink), moving, copying, permissions and ownership, writing onto
devices and system files, editing in place (sed -i, perl -i), tee, compressors, rsync, tar, bulk renames. The
rubric they follow is in adr/0004.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from relay_shell.policy import own_files
from relay_shell.policy.archives import tar_verdict
from relay_shell.policy.calls import (
    READ,
    Call,
    Verdict,
    cgroup_control,
    every_file,
    is_device,
    is_protected,
    is_rootish,
    names_files,
    trimmed,
    verdict,
)
from relay_shell.policy.find import deletion_by_selection
from relay_shell.policy.vocabulary import CRITICAL_FILES, SYSTEM_DIRS, USER_CONFIG


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


def writes_onto(path: str, what: str) -> Verdict | None:
    if own_files.own_file(path) is not None:
        return verdict(3, f"{what} onto the server's own file {path}")
    if cgroup_control(path):
        return verdict(3, f"{what} moves, kills or freezes a control group's processes ({path})")
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
    # A critical file moved away leaves its path as rm would (`mv /etc/passwd x`: attack 5; adr/0025 Round 9).
    if any(trimmed(source) in CRITICAL_FILES or source.startswith("/boot/") for source in sources):
        return verdict(2, "moves a critical system file away from its path")
    if call.has("-f", "--force") and not call.has_exact("-n", "--no-clobber", "-i", "--interactive"):
        return verdict(2, "mv overwrites without asking")
    return verdict(1, "moves or renames")


def _cp(call: Call) -> Verdict:
    directory = call.value("-t", "--target-directory")
    target = directory or (call.operands[-1] if len(call.operands) >= 2 else "")
    sources = call.operands if directory else call.operands[:-1]
    # Into a directory (`-t /etc`, `cp passwd /etc/`) each source lands under its own name there.
    landed = [target.rstrip("/") + "/" + source.rstrip("/").rsplit("/", 1)[-1] for source in sources if target]
    found = [onto for path in [target, *landed] if (onto := writes_onto(path, call.program)) is not None]
    if found:
        return max(found, key=lambda onto: onto.tier)
    if "/dev/null" in call.operands[:-1] and not call.value("-t", "--target-directory"):
        return verdict(2, f"{call.program} /dev/null empties a file, as : > FILE does")
    return verdict(1, f"{call.program} copies files")


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
    found = onto if onto is not None else verdict(1, "rsync copies files")
    shell = _rsh_command(call.words)
    return Verdict(found.tier, found.reason, shell=shell) if shell else found


def _rsh_command(words: list[str]) -> tuple[str, ...]:
    """rsync's remote shell (-e/--rsh), run locally: `rsync -e 'ssh -p 22'`."""
    for index, word in enumerate(words[1:], start=1):
        if word in ("-e", "--rsh") and index + 1 < len(words):
            return (words[index + 1],)
        if word.startswith("--rsh="):
            return (word.split("=", 1)[1],)
        if word.startswith("-e") and len(word) > 2 and not word.startswith("--"):
            return (word[2:],)
    return ()


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
    "tar": tar_verdict,
    "bsdtar": tar_verdict,
    "gtar": tar_verdict,
}
