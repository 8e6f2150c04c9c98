"""What every per-program rule works on: the Call (a simple command with wrappers stripped and its flags split),
the Context it runs in (once per item of a find, xargs or loop; what an upstream find selects) and the Verdict a
rule returns (a tier, one line of reason, and any text the program itself runs, which classify.py classifies in
turn). Plus the path predicates the rules share. No rules here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from relay_shell.policy.vocabulary import CHARACTER_DEVICES, CRITICAL_FILES, PROTECTED_PREFIXES, ROOTISH, SYSTEM_DIRS


@dataclass(frozen=True)
class Selection:
    """What a find expression selects, for the deletions it drives (-delete, -exec rm, | xargs rm)."""

    paths: tuple[str, ...]
    files_only: bool  # -type f
    dirs_only: bool  # -type d: only empty directories can be removed without -r
    name_filter: bool  # -name/-path/-regex (not negated)
    extension_filter: bool  # a name filter on a file extension ('*.pyc')
    negated_filter: bool  # ! -name '*.txt': every file except some
    empty_only: bool  # -empty


@dataclass(frozen=True)
class Context:
    via_xargs: bool = False  # the arguments arrive on stdin: targets unknown
    bulk: bool = False  # runs once per item (find -exec, xargs, a loop body)
    selection: Selection | None = None  # what an upstream find selects
    all_but: bool = False  # an upstream `tail -n +N` keeps all but the first lines: "all but the newest N"
    every: bool = False  # the targets are every entry of a directory (`ls | xargs rm`, `for f in *; do rm`)


@dataclass(frozen=True)
class Verdict:
    tier: int
    reason: str
    shell: tuple[str, ...] = ()  # shell text the program runs (ssh's remote command, watch, git filters)
    commands: tuple[tuple[str, ...], ...] = ()  # argv the program runs (kubectl exec, docker exec)
    # Shell builtins: variables they set (name, value or None when only known at run time), which the table of
    # code-carrying variables checks, and arithmetic they evaluate.
    assignments: tuple[tuple[str, str | None], ...] = ()
    arithmetic: tuple[str, ...] = ()


@dataclass
class Call:
    program: str
    words: list[str]  # words[0] is the program as written
    context: Context = field(default_factory=Context)
    short: set[str] = field(default_factory=set)  # short flag letters: -rf -> r, f
    # long options without their values, in the order written (a dict as an ordered set: a reason that names one
    # option names the first, whatever Python's hash seed is)
    long: dict[str, None] = field(default_factory=dict)
    operands: list[str] = field(default_factory=list)  # everything else (option values included), `--` respected

    def __post_init__(self) -> None:
        options_done = False
        for word in self.words[1:]:
            if options_done or word == "-" or not word.startswith("-"):
                self.operands.append(word)
            elif word == "--":
                options_done = True
            elif word.startswith("--"):
                self.long[word.split("=", 1)[0]] = None
            else:
                self.short.update(word[1:])

    @property
    def subcommand(self) -> str:
        return self.operands[0] if self.operands else ""

    def has(self, *options: str) -> bool:
        """Whether any of the options is present: short ones as letters (`-r` in `-rf`), long ones by name or by
        an abbreviation (`--rec` for `--recursive`: getopt_long, argp and git's parse-options accept any
        unambiguous prefix). The worst reading, for the options that raise a tier; a rule that lowers the tier
        for a safety option (`--dry-run`, `--help`) asks `has_exact`, so an abbreviation cannot lower it."""
        for option in options:
            if option.startswith("--"):
                if option in self.long or any(len(word) >= 3 and option.startswith(word) for word in self.long):
                    return True
            elif len(option) == 2 and option[1] in self.short:
                return True
        return False

    def has_exact(self, *options: str) -> bool:
        """Whether any of the options is present as written in full (short ones as letters): for the safety
        options that lower a tier, where an abbreviation (which may also stand for another option) must not."""
        for option in options:
            if option.startswith("--"):
                if option in self.long:
                    return True
            elif len(option) == 2 and option[1] in self.short:
                return True
        return False

    def value(self, *options: str) -> str | None:
        """The value of an option: `-o X`, `-oX`, `--out X`, `--out=X`; None if absent."""
        words = self.words
        for index, word in enumerate(words[1:], start=1):
            for option in options:
                if word == option:
                    return words[index + 1] if index + 1 < len(words) else ""
                if option.startswith("--") and word.startswith(option + "="):
                    return word[len(option) + 1 :]
                if len(option) == 2 and not option.startswith("--") and word.startswith(option) and len(word) > 2:
                    return word[2:]
        return None


Option = tuple[str, str | None]  # a name (`-o`, `--output`) and its value (None for a flag or a missing value)


def long_names(*groups: frozenset[str]) -> frozenset[str]:
    """The long option names (`--output`) among option tables: what an abbreviation may stand for."""
    return frozenset(name for group in groups for name in group if name.startswith("--"))


def _resolved(name: str, known: frozenset[str]) -> tuple[str, ...]:
    """What getopt_long reads `--name` as: the name itself when known, else every known long option it is a
    prefix of (`--out` is `--output`). Where it is the prefix of several, each is returned and the caller's
    worst reading wins: getopt rejects an ambiguous abbreviation, so over-classifying it costs nothing."""
    if not known or name in known or len(name) < 3:
        return (name,)
    matches = tuple(sorted(option for option in known if option.startswith(name)))
    return matches or (name,)


def parse_options(
    words: list[str],
    position: int,
    value_options: frozenset[str],
    optional: frozenset[str] = frozenset(),
    known: frozenset[str] = frozenset(),
) -> tuple[list[Option], int]:
    """The options in words[position] with their values, and the position of the word after them, read as getopt
    reads them: `--name=value`; `--name value` when the name takes a value; `-abc` as the flags -a -b -c, where
    the first letter that takes a value takes the rest of the word (`-ubob`, `-qccmd`) or else the next word
    (`-qc cmd`, `-lu bob`), and a letter in `optional` takes the rest of the word only (a long name in `optional`
    only `=value`). `known` holds the long names of a program that accepts abbreviations (getopt_long, argp,
    argparse): `--out=F` is read as `--output=F`, and takes the next word when `--output` takes a value. Empty
    for programs that do not (Go's flag package, clap). Linear in the word."""
    word = words[position]
    following = words[position + 1] if position + 1 < len(words) else None
    if word.startswith("--"):
        name, equals, value = word.partition("=")
        names = _resolved(name, known) if name not in value_options and name not in optional else (name,)
        if equals:
            return [(resolved, value) for resolved in names], position + 1
        if any(resolved in value_options for resolved in names):
            return [(resolved, following) for resolved in names], position + 2
        return [(resolved, None) for resolved in names], position + 1
    found: list[Option] = []
    for offset in range(1, len(word)):
        name = "-" + word[offset]
        rest = word[offset + 1 :]
        if name in value_options:
            if rest:
                found.append((name, rest))
                return found, position + 1
            found.append((name, following))
            return found, position + 2
        if name in optional:
            found.append((name, rest or None))
            return found, position + 1
        found.append((name, None))
    return found, position + 1


def read_options(
    words: list[str],
    value_options: frozenset[str],
    optional: frozenset[str] = frozenset(),
    known: frozenset[str] = frozenset(),
    permute: bool = True,
) -> tuple[list[Option], list[str]]:
    """Every option (with its value, as parse_options reads it) and every operand of a command line; words[0]
    is the program. With `permute` options may come anywhere (GNU getopt permutes them); without it the first
    operand ends the options and it and everything after it are the operands. `--` ends the options."""
    options: list[Option] = []
    operands: list[str] = []
    position = 1
    while position < len(words):
        word = words[position]
        if word == "--":
            operands += words[position + 1 :]
            break
        if word.startswith("-") and word != "-":
            found, position = parse_options(words, position, value_options, optional, known)
            options += found
            continue
        if not permute:
            operands += words[position:]
            break
        operands.append(word)
        position += 1
    return options, operands


def verdict(tier: int, reason: str) -> Verdict:
    return Verdict(tier, reason)


READ = Verdict(0, "read-only command")


def is_device(path: str) -> bool:
    """A disk or other block device (/dev/sdb, /dev/nvme0n1, /dev/mapper/x, /dev/usb_drive), not /dev/null."""
    return path.startswith("/dev/") and CHARACTER_DEVICES.match(path) is None


# A control group's files that move, kill or freeze processes. Named by their file name in any directory (its path
# may be built at run time): a process moved out of its call's unit escapes containment and the session's reading of
# who holds its terminal (attack 5, P2/P3); killed or frozen, another unit's or the server's (adr/0025 Round 10).
_CGROUP_CONTROLS = frozenset({"cgroup.procs", "cgroup.threads", "cgroup.kill", "cgroup.freeze", "tasks"})


def cgroup_control(path: str) -> bool:
    name = path.rstrip("/").rsplit("/", 1)[-1].strip("'\"")
    return name in _CGROUP_CONTROLS and (name != "tasks" or "cgroup" in path)


def trimmed(path: str) -> str:
    """The directory a path names: `/etc/`, `/etc/.`, `/etc/*` all name /etc."""
    while len(path) > 1 and path.endswith(("/", "/.", "/*")):
        path = path[:-2] if path.endswith(("/.", "/*")) else path[:-1]
    return path


def is_rootish(path: str) -> bool:
    """/, the home directory or a top-level system directory, in any of their spellings."""
    return path in ROOTISH or trimmed(path) in SYSTEM_DIRS or trimmed(path) in ("/", "~", "$HOME", "${HOME}", "")


def is_protected(path: str) -> bool:
    """A path whose change is a system change: below /etc, /usr, /boot, /proc, ... or a critical file."""
    return path in CRITICAL_FILES or path.startswith(PROTECTED_PREFIXES)


_FILE_NAME = re.compile(r"(?:^|/)[^/]*\.[A-Za-z0-9]{1,10}$")


def names_files(path: str) -> bool:
    """Evidently regular files: a name or glob with a file extension (`*.pyc`, `app.log`), or `.DS_Store`."""
    if path.endswith("/") or path.startswith("$") or "{}" in path:
        return False
    last = path.rsplit("/", 1)[-1]
    if last in (".DS_Store", "Thumbs.db", "desktop.ini"):
        return True
    return bool(_FILE_NAME.search(path)) and not last.startswith(".")


def every_file(path: str) -> bool:
    """A glob for every entry of a directory: `*`, `dir/*`, `.*`."""
    return path in ("*", ".*", "./*", "*.*") or path.endswith(("/*", "/.*"))
