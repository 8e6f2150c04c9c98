"""What a text makes known of its later words before they run (attack 5; adr/0025 Round 9), for a second reading of
a command with them in place; the worse of the two readings counts:
- the directory a literal `cd DIR` or `pushd DIR` went to: the relative paths after it are DIR's (`cd /etc && echo
  x > passwd` writes /etc/passwd, `cd /dev && cat /dev/zero > sda` a disk, `cd LOGDIR && tar -xf F` merges F into
  the log's directory, `cd LOGDIR && mv "$PWD" x` moves it);
- the words a loop variable takes, where they name the server's own files (`for f in KEYDIR/*; do cat "$f"; done`
  reads KEYDIR/*, `for f in LOGDIR/*; do mv "$f" /tmp; done` moves the log; a loop over `*.txt` is not a bulk move).
Where the text may take one way or another (`cd A || cd B`, `if …`), every directory it names counts. A `cd` to a
directory known only at run time leaves the ones before: the first reading covers an unknown directory, as it does
for every relative path. At most MAX_PLACES directories and loop words a command: a longer list is read in part.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from relay_shell.policy import own_files
from relay_shell.policy.findings import Finding
from relay_shell.policy.simple_commands import Command

MAX_PLACES = 8
NEUTRAL = "/tmp/relay-shell-no-place"  # a directory whose files no rule rates above a user's own
_DIRECTORY_CHANGERS = frozenset({"cd", "pushd"})
_RESERVED = frozenset({"do", "then", "else", "elif", "if", "while", "until", "{", "!", "time"})
_BUILTIN_PREFIXES = frozenset({"builtin", "command"})  # `builtin cd DIR`, `command cd DIR`
_LOOPS = frozenset({"for", "select"})
_WATCHED = frozenset({"for", "select", "ln", "cp", "cd", "pushd"})
STARTS = _WATCHED | _RESERVED | _BUILTIN_PREFIXES  # the first words of a command `advance` may learn from
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_WORKING_DIRECTORY = re.compile(r"\$\{?PWD\}?(?![A-Za-z0-9_])")
# A word read as a path: no space, quote, parenthesis, brace or other code (`print(1)`, `{print}`, `a; b`).
_PATH_LIKE = re.compile(r"[\w.@%+,:/*?\[\]=-]+")
# Options whose value after `=` is a path (`dd of=sda`, `--file=x`): the value is joined, the name kept.
_PATH_VALUE = re.compile(r"(?:-{0,2}[A-Za-z][A-Za-z0-9_-]*=)(?=[^/$~=])")


# Unpackers whose tree lands in the working directory unless an option says where.
_UNPACKED_INTO = {"tar": "-C", "bsdtar": "-C", "unzip": "-d", "cpio": "-D"}


@dataclass
class Places:
    directories: list[str] = field(default_factory=list)  # absolute directories a `cd` in the text went to
    loops: dict[str, list[str]] = field(default_factory=dict)  # a loop variable -> the words of its list
    links: dict[str, str] = field(default_factory=dict)  # a symbolic link the text made -> what it points to

    def add(self, directory: str) -> None:
        if directory not in self.directories and len(self.directories) < MAX_PLACES:
            self.directories.append(directory)

    def read(self, command: Command, findings_of: Callable[..., list[Finding]], *context: object) -> list[Finding]:
        """The command's findings (`findings_of(command, *context)`), and those of its other readings above the
        first reading's worst, at tier 2 and above: a place only matters where it makes a word name a system file, a
        device or the server's own (a relative write is 1 wherever it lands). A reading in a known directory counts
        only above the same words joined into a directory of no consequence (`NEUTRAL`): a word that was no path
        (`systemctl list-units`, `git status`) read as one is the rule's guess at an unknown verb wherever it is
        joined, while a file's place is what the directory changes (adr/0025 Round 10)."""
        found = findings_of(command, *context)
        floor = max(1, max((finding.tier for finding in found), default=0))
        for read, control in self.readings(command):
            above = [finding for finding in findings_of(read, *context) if finding.tier > floor]
            if above and control is not None:  # read only when it could matter: most readings add nothing
                neutral = max((finding.tier for finding in findings_of(control, *context)), default=0)
                above = [finding for finding in above if finding.tier > neutral]
            found += above
        return found

    def readings(self, command: Command) -> list[tuple[Command, Command | None]]:
        """The command read again with each known directory and each loop word in place (none if nothing of it
        changes); a directory's reading with the same words joined into `NEUTRAL` (none for a loop's or a link's)."""
        found: list[Command] = []
        if self.loops and any("$" in word for word in command.words + [target for _, target in command.redirects]):
            for name, values in self.loops.items():
                for value in values:
                    read = _with_variable(command, name, value)
                    if read is not None:
                        found.append(read)
        for link, target in self.links.items():
            for read in [command, *found]:
                through = _through_link(read, link, target)
                if through is not None:
                    found.append(through)
        readings: list[tuple[Command, Command | None]] = [(read, None) for read in found]
        for directory in self.directories:
            for read in [command, *found]:
                joined = _joined(read, directory)
                if joined is not None:
                    readings.append((joined, _joined(read, NEUTRAL)))
        return readings[: MAX_PLACES * 2]


def advance(places: Places | None, command: Command) -> Places | None:
    """What `command` makes known for the commands after it (a Places made only when something is)."""
    words = command.words
    if not words:
        return places
    if words[0] in _RESERVED or words[0] in _BUILTIN_PREFIXES:
        words = [word for word in words if word not in _RESERVED]
        words = words[1:] if words[:1] and words[0] in _BUILTIN_PREFIXES else words
    if not words or words[0] not in _WATCHED:
        return places
    places = places or Places()
    if words[0] in _LOOPS and len(words) > 3 and words[2] == "in":
        if any(map(own_files.own_file, words[3:])):  # the own files' loops only: a glob's value is not a bulk move
            places.loops[words[1]] = words[3 : 3 + MAX_PLACES]
    elif words[0] in ("ln", "cp") and any(word.startswith("-") and "s" in word.lstrip("-")[:4] for word in words):
        operands = [word for word in words[1:] if not word.startswith("-")]
        if len(operands) == 2 and all(operand.startswith("/") for operand in operands):
            places.links[os.path.normpath(operands[1])] = os.path.normpath(operands[0])
    elif words[0] in _DIRECTORY_CHANGERS:
        operands = [word for word in words[1:] if not word.startswith("-")]
        target = operands[0] if len(operands) == 1 else "" if operands else "~"
        if target.startswith(("/", "~")) and "$" not in target and "`" not in target:
            places.add(os.path.normpath(target))  # `~/.ssh`: the home directory as the rules read `~/`
        elif target and not target.startswith(("$", "`")):
            for directory in list(places.directories):
                places.add(os.path.normpath(os.path.join(directory, target)))
    return places


def _with_variable(command: Command, name: str, value: str) -> Command | None:
    def put(word: str) -> str:
        return _VARIABLE.sub(lambda match: value if name in match.groups() else match.group(0), word)

    words = [put(word) for word in command.words]
    redirects = [(operator, put(target)) for operator, target in command.redirects]
    if words == command.words and redirects == command.redirects:
        return None
    return replace(command, words=words, redirects=redirects)


def _through_link(command: Command, link: str, target: str) -> Command | None:
    def follow(word: str) -> str:
        return target + word[len(link) :] if word == link or word.startswith(link + "/") else word

    words = [follow(word) for word in command.words]
    redirects = [(operator, follow(path)) for operator, path in command.redirects]
    if words == command.words and redirects == command.redirects:
        return None
    return replace(command, words=words, redirects=redirects)


def _joined(command: Command, directory: str) -> Command | None:
    """The command with its relative paths under `directory`: every operand after the program (an option's value
    after `=` included), the redirection targets, and the working directory's own spellings (`$PWD`, `$(pwd)`)."""
    start = next((index for index, word in enumerate(command.words) if word not in _RESERVED), len(command.words))
    words = command.words[: start + 1] + [_join(word, directory) for word in command.words[start + 1 :]]
    destination = _UNPACKED_INTO.get(command.words[start] if start < len(command.words) else "")
    if destination is not None and not any(word.startswith(destination) for word in command.words):
        words += [destination, directory]  # a tree unpacked into the working directory
    redirects = [
        (operator, target if operator.startswith("<<") or target.isdigit() else _join(target, directory))
        for operator, target in command.redirects
    ]
    if words == command.words and redirects == command.redirects:
        return None
    return replace(command, words=words, redirects=redirects)


def _join(word: str, directory: str) -> str:
    if word in ("", "-") or word.startswith(("/", "~")):
        return word
    if _WORKING_DIRECTORY.match(word):
        return _WORKING_DIRECTORY.sub(directory, word, count=1)
    if word.startswith(("$", "`")) or not _PATH_LIKE.fullmatch(word):
        return word
    option = _PATH_VALUE.match(word)
    if word.startswith("-") and option is None:
        return word
    if option is not None:
        return word[: option.end()] + directory + "/" + word[option.end() :]
    return os.path.join(directory, word)
