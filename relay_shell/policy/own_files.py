"""The server's own files: the audit log (and the names rotation gives it beside itself), the checkpoint signing
key, the token file and the OAuth state directory. A command that writes, moves, links, changes or deletes one of
them is tier 3 in every mode (attack 3, finding L1; adr/0025 Round 7): in guarded mode `mv AUDIT a.old && echo
'{…}' > AUDIT` was tier 1, leaving a forged line at the log's path while the server appended to the renamed file.
The kernel floor guarded mode does not have (adr/0024) is not replaced by this; it closes the spellings the
classifier can read, and off-host shipping remains what holds the log against a determined writer.

Set once at startup from the settings (server.py); empty (nothing protected) until then, so the classifier's own
tests and benchmarks see the tables alone. A word names an own file (attack 4, O1–O5; adr/0025 Round 8):
- as an absolute path, normalised (`//`, `/./`, `..`), or as the files' real paths;
- through a process's root or working directory (`/proc/self/root/…`, `/proc/PID/cwd/…`);
- through another process's descriptors or memory (`/proc/PID/fd/N`, `/proc/$PPID/fd/*`, `/proc/$PPID/mem`: the
  server holds the log open, and its memory holds the policy, so any such path may be it);
- relative to a working directory the classifier does not know (`cd DIR; mv audit.jsonl x`, the call's `cwd`): a
  relative path is the own file when it is a tail of its path (`audit.jsonl`, `relay/audit.jsonl`, `../audit.jsonl`);
- through a symbolic link to its directory made before (its real path, read when the last name is an own file's);
- as a glob that matches it (`audit.js*`), absolute or as a tail;
- a directory holding one, for programs that move, delete or change it (`mv DIR DIR.old; mkdir DIR` leaves the
  log's path free), and a directory a move or copy puts an own file's name into (`mv forged/audit.jsonl DIR/`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterable
from fnmatch import fnmatchcase

from relay_shell.policy.findings import Finding
from relay_shell.policy.simple_commands import Command
from relay_shell.policy.vocabulary import REDIRECT_WRITE

_files: frozenset[str] = frozenset()
_prefixes: tuple[str, ...] = ()  # rotation names: the log's path and anything after it (`.1`, `-20261129.gz`)
_directories: tuple[str, ...] = ()  # every file below is the server's
_ancestors: frozenset[str] = frozenset()  # the directories above an own file (not `/`)
_names: frozenset[str] = frozenset()  # every component of an own path: a relative word without one names none
_secret_holders: frozenset[str] = frozenset()  # directories above a secret, below the top level (`/etc` is not)
_link_targets: frozenset[str] = frozenset()  # own directories and those above own paths, below the top level
_anchors: frozenset[str] = frozenset()  # the last two names of each own path: what a word built at run time keeps
_GLOB = frozenset("*?[")
# What a rotation's glob may match beside the log's own name.
_ROTATIONS = ("", ".1", ".1.gz", ".0", "-20000101", "-20000101.gz")
# Any process's root or working directory: `self`, a number, or one known at run time (`$PPID`, `$$`, `*`).
_PROC_BASE = re.compile(r"/proc/[^/]+(?:/task/[^/]+)?/(root|cwd)(?=/|$)")
# A parameter's default or alternative word (`${K:-W}`, `${K-W}`, `${K:=W}`, `${K:+W}`), and any part of a word
# only known at run time: a parameter, a command's output, arithmetic, the `{}` of xargs -I and find -exec.
_DEFAULT = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*:?[-=+?]([^}$`]*)\}")
_RUN_TIME_PART = re.compile(r"\{\}|\$\{[^}]*\}|\$\([^)]*\)+|`[^`]*`|\$[A-Za-z_][A-Za-z0-9_]*|\$[0-9#?$!@*-]")
_TILDE = re.compile(r"~[^/]*/?")
_PROC_OTHER = re.compile(r"/proc/(?!self/|thread-self/)[^/]*/(?:task/[^/]*/)?(?:fd/|map_files/|mem$)")


def protect(files: Iterable[str], rotated: Iterable[str] = (), directories: Iterable[str] = ()) -> None:
    """The server's own files, its rotated ones (by the log's path) and its own directories."""
    global _files, _prefixes, _directories, _ancestors, _names, _anchors, _secret_holders, _link_targets

    def both(paths: Iterable[str]) -> set[str]:
        return {form for path in paths for form in (os.path.normpath(path), os.path.realpath(path))}

    _files = frozenset(both(files))
    _prefixes = tuple(sorted(both(rotated)))
    _directories = tuple(sorted(both(directories)))
    every = [*_files, *_prefixes, *_directories]
    _ancestors = frozenset(
        parent for path in every for parent in _parents(path) if parent != "/" and parent not in _directories
    )
    _names = frozenset(part for path in every for part in path.split("/") if part)
    _secret_holders = frozenset(
        parent for path in [*_files, *_directories] for parent in _parents(path) if parent.count("/") > 1
    )
    _link_targets = frozenset(
        [*_directories, *(parent for path in every for parent in _parents(path) if parent.count("/") > 1)]
    )
    _anchors = frozenset(part for path in every for part in path.split("/")[-2:] if part)


def protecting() -> bool:
    """Whether the server said what its own files are (nothing is protected before: the tables alone)."""
    return bool(_files or _prefixes or _directories)


def _parents(path: str) -> Iterable[str]:
    while (parent := os.path.dirname(path)) != path:
        yield parent
        path = parent


def secret_file(word: str) -> str | None:
    """An own file whose content is a secret, named by a word: the signing key, the token file, the OAuth state,
    another process's memory (the server's holds the key). Reading one is tier 3 as writing is: with the key an
    agent signs checkpoints for a log it rewrote (attack 4, O6); the log itself is for reading."""
    if word.startswith("/proc/") and _PROC_OTHER.match(word):
        return word if word.endswith("/mem") and (_files or _directories) else None
    return own_file(word, log=False)


def own_file(word: str, log: bool = True) -> str | None:
    """The server's own file a word names (the word itself, or the value after its last `=`: `of=PATH`,
    `--file=PATH`), normalised; None when it names none. `log=False`: not the log and its rotations."""
    if not _files and not (log and _prefixes) and not _directories:
        return None
    # `of=PATH`, `--file=PATH`, but not the `=` of `${K:=PATH}`
    path = word[word.split("${", 1)[0].rfind("=") + 1 :] if "${" in word else word.rsplit("=", 1)[-1]
    if not path:
        return None
    if path[0] == "f" and path.startswith("file:"):  # a URL read by curl, wget, a browser: `file:///KEY`
        path = "/" + path[5:].lstrip("/")
    if path.startswith("/proc/"):
        base = _PROC_BASE.match(path)
        if base is not None:
            rest = path[base.end() :]
            path = ("/" + rest.lstrip("/")) if base.group(1) == "root" else (rest.lstrip("/") or ".")
        elif _PROC_OTHER.match(path):
            return path  # another process's open file or memory: the server's log is one of its descriptors
    if "$" in path or "`" in path or "{}" in path or path[0] == "~":
        return next((path for spelling in run_time_spellings(path) if _named(spelling, log)), None)
    if path[0] == "/":
        return _absolute(os.path.normpath("/" + path.lstrip("/")), log)  # normpath keeps a leading `//`
    return _relative(path, log)


def _named(path: str, log: bool) -> str | None:
    if path.startswith("/"):
        return _absolute(os.path.normpath("/" + path.lstrip("/")), log)  # normpath keeps a leading `//`
    return _relative(path, log)


def run_time_spellings(path: str) -> list[str]:
    """What a word with parts only known at run time may name (attack 5; adr/0025 Round 9): a parameter's default
    or alternative in its place (`${K:-/KEY}`), and each other part as any name (`*`: `LOGDIR/$f`,
    `/lo$(echo g)/audit.jsonl`, `$HOME/audit.jsonl`) when a literal name of an own file or of its directory is
    left. A leading `~`, `~user`, `~+` or `~-` is a directory not known here: the rest is read as relative."""
    if path.startswith("~"):
        path = _TILDE.sub("", path, count=1)
    spellings = []
    defaulted = _DEFAULT.sub(lambda match: match.group(1), path)
    if defaulted != path and "$" not in defaulted and "`" not in defaulted:
        spellings.append(defaulted)
    if "$" not in path and "`" not in path and "{}" not in path:
        spellings.append(path)
    for text in dict.fromkeys((path, defaulted)):
        globbed = _RUN_TIME_PART.sub("*", text)
        if globbed != text and not _anchors.isdisjoint(globbed.split("/")):
            spellings.append(globbed)
    return spellings


def _absolute(path: str, log: bool) -> str | None:
    if _owned(path, log):
        return path
    if not _GLOB.isdisjoint(path):
        return path if any(fnmatchcase(own, path) for own in _candidates(log)) else None
    if os.path.basename(path) in _names and _owned(os.path.realpath(path), log):
        return path  # through a link to the file or its directory
    return None


def _owned(path: str, log: bool) -> bool:
    if path in _files or (log and any(path.startswith(prefix) for prefix in _prefixes)):
        return True
    return any(path == directory or path.startswith(directory + "/") for directory in _directories)


def _candidates(log: bool) -> Iterable[str]:
    """Own paths a glob is tried against: the files, the log's rotation names, a file in each own directory."""
    yield from _files
    yield from (prefix + suffix for prefix in (_prefixes if log else ()) for suffix in _ROTATIONS)
    yield from _directories
    yield from (directory + "/x" for directory in _directories)


def _relative(word: str, log: bool) -> str | None:
    """A relative path is an own file when it is a tail of one (the working directory being the rest of it), or
    when it goes into an own directory through a tail of that directory's path."""
    parts = [part for part in os.path.normpath(word).split("/") if part not in ("", ".", "..")]
    if not parts:
        return None
    globbed = not _GLOB.isdisjoint(word)
    prefixes = _prefixes if log else ()
    rotation = any(parts[-1].startswith(os.path.basename(prefix)) for prefix in prefixes)
    if not globbed and not rotation and _names.isdisjoint(parts):
        return None
    for own in _candidates(log):
        if _is_tail(own, parts, globbed):
            return word
    for prefix in prefixes:
        prefix_parts = prefix.split("/")
        beside = len(parts) < len(prefix_parts) and prefix_parts[len(prefix_parts) - len(parts) : -1] == parts[:-1]
        if beside and parts[-1].startswith(prefix_parts[-1]):
            return word
    for directory in _directories:
        if any(_is_tail(directory, parts[:count], globbed) for count in range(1, len(parts))):
            return word
    return None


def _is_tail(own: str, parts: list[str], globbed: bool) -> bool:
    own_parts = own.split("/")
    if len(parts) >= len(own_parts):
        return False
    tail, pattern = "/".join(own_parts[-len(parts) :]), "/".join(parts)
    return fnmatchcase(tail, pattern) if globbed else tail == pattern


def holds_own_file(word: str) -> bool:
    """Whether a word names a directory above an own file (absolute, or as a tail when relative)."""
    return _names_one_of(word, _ancestors)


def links_to_own(words: list[str]) -> str | None:
    """The first word naming an own directory or a directory an own file is below (not `/` nor a top-level one):
    a link made to it (`ln -s KEYDIR /tmp/k`) reads and writes its files under names nothing here recognises
    later (`cat /tmp/k/*`, `mv /tmp/k/* x`)."""
    for word in words:
        path = os.path.normpath(word) if word.startswith("/") else ""
        if path in _link_targets:
            return word
    return None


def holds_secret(word: str) -> bool:
    """Whether a word names a directory a secret is below (absolute or as a tail; not `/` nor a top-level one):
    a reader of trees given it reads the secret (`grep -r . KEYDIR`, `tar -c KEYDIR`, `cp -r KEYDIR /tmp`)."""
    return _names_one_of(word, _secret_holders)


def _names_one_of(word: str, directories: Collection[str]) -> bool:
    """Whether a word (an option's value after `=` too) names one of `directories`: absolute, or as their tail
    when relative (the working directory is not known here)."""
    if not directories or not word:
        return False
    path = word.rsplit("=", 1)[-1].rstrip("/")
    if path.startswith("/"):
        return os.path.normpath("/" + path.lstrip("/")) in directories
    parts = [part for part in os.path.normpath(path).split("/") if part not in ("", ".", "..")]
    if not parts or _names.isdisjoint(parts):
        return False
    tail = "/" + "/".join(parts)
    return any(directory.endswith(tail) for directory in directories)


def into_directory(target: str, sources: Iterable[str]) -> str | None:
    """The own file a move or copy of `sources` into the directory `target` would replace (`mv forged/audit.jsonl
    LOGDIR/`): the directory joined with each source's last name."""
    if not target or not _ancestors:
        return None
    directory = target.rstrip("/") or "/"
    for source in sources:
        name = os.path.basename(source.rstrip("/"))
        if name and name not in (".", ".."):
            found = own_file(f"{directory}/{name}")
            if found is not None:
                return found
    return None


def named_in(words: Iterable[str]) -> str | None:
    """The first of the server's own files the words name."""
    for word in words:
        found = own_file(word)
        if found is not None:
            return found
    return None


def named_secret(words: Iterable[str]) -> str | None:
    """The first of the server's secrets the words name."""
    if not _files and not _directories:
        return None
    for word in words:
        found = secret_file(word)
        if found is not None:
            return found
    return None


def loop_writes(commands: list[Command], nested: Iterable[str] = ()) -> list[Finding]:
    """A loop variable over the server's own files written through (`for f in /proc/$PPID/fd/*; do … >> $f; done`:
    the server's open log, attack 4 O5): the variable's value is only known at run time, but every value it can
    take is an own file or may be one. And a path a command that changes files is given as a command's output
    (`mv "$(printf LOG)" x`, attack 5): the output may be the own file the command substituted names."""
    if not protecting():
        return []
    if nested and any(map(_changes_a_substitution, commands)):
        for inner in nested:
            words = [word.strip("'\"") for word in inner.split()]
            named = next((word for word in words if own_file(word) or holds_own_file(word)), None)
            if named is not None:
                return [Finding(inner[:200], 3, f"a path made at run time from the server's own file {named}")]
    names = {
        command.words[1]
        for command in commands
        if len(command.words) > 3 and command.words[0] in ("for", "select") and any(map(own_file, command.words[3:]))
    }
    found = []
    for command in commands if names else ():
        for operator, target in command.redirects:
            if operator in REDIRECT_WRITE and target.strip('"').lstrip("$").strip("{}") in names:
                found.append(Finding(f"{operator} {target}", 3, f"writes the server's own files through {target}"))
    return found


# Programs that change the files they are given (copiers are judged by their destination: a copy of the log is a
# read of it).
_CHANGERS = frozenset(
    {"mv", "rm", "rmdir", "unlink", "ln", "truncate", "shred", "tee", "dd", "sed", "chmod", "chown", "chgrp"}
    | {"chattr", "setfacl", "touch", "unzip", "cpio", "perl"}
)


def _changes_a_substitution(command: Command) -> bool:
    """Whether a changing program is given a word, or a redirection writes to a target, made by a command."""
    if any(
        operator in REDIRECT_WRITE and ("$(…)" in target or "`…`" in target) for operator, target in command.redirects
    ):
        return True
    words = command.words[1:] if command.words[:1] != ["do"] else command.words[2:]
    program = command.words[len(command.words) - len(words) - 1] if command.words else ""
    return program in _CHANGERS and any("$(…)" in word or "`…`" in word for word in words)
