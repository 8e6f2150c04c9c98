"""The server's own files: the audit log (and the names rotation gives it beside itself), the checkpoint signing
key, the token file and the OAuth state directory. A command that writes, moves, links, changes or deletes one of
them is tier 3 in every mode (attack 3, finding L1; adr/0025 Round 7): in guarded mode `mv AUDIT a.old && echo
'{…}' > AUDIT` was tier 1, leaving a forged line at the log's path while the server appended to the renamed file.
The kernel floor guarded mode does not have (adr/0024) is not replaced by this; it closes the spellings the
classifier can read, and off-host shipping remains what holds the log against a determined writer.

Set once at startup from the settings (server.py); empty (nothing protected) until then, so the classifier's own
tests and benchmarks see the tables alone. Matching is on absolute paths as written, normalised (`//`, `/./`,
`..`), and on the files' real paths (a link to the log's directory given as the directory's path is the same
file)."""

from __future__ import annotations

import os
from collections.abc import Iterable

_files: frozenset[str] = frozenset()
_prefixes: tuple[str, ...] = ()  # rotation names: the log's path and anything after it (`.1`, `-20261129.gz`)
_directories: tuple[str, ...] = ()  # every file below is the server's


def protect(files: Iterable[str], rotated: Iterable[str] = (), directories: Iterable[str] = ()) -> None:
    """The server's own files, its rotated ones (by the log's path) and its own directories."""
    global _files, _prefixes, _directories

    def both(paths: Iterable[str]) -> set[str]:
        return {form for path in paths for form in (os.path.normpath(path), os.path.realpath(path))}

    _files = frozenset(both(files))
    _prefixes = tuple(sorted(both(rotated)))
    _directories = tuple(sorted(both(directories)))


def own_file(word: str) -> str | None:
    """The server's own file a word names (the word itself, or the value after its last `=`: `of=PATH`,
    `--file=PATH`), normalised; None when it names none."""
    if not (_files or _prefixes or _directories) or "/" not in word:
        return None
    path = word.rsplit("=", 1)[-1]
    if not path.startswith("/"):
        return None
    path = os.path.normpath("/" + path.lstrip("/"))  # normpath keeps a leading `//`; the kernel does not
    if path in _files:
        return path
    if any(path.startswith(prefix) for prefix in _prefixes):
        return path
    if any(path == directory or path.startswith(directory + "/") for directory in _directories):
        return path
    return None


def named_in(words: Iterable[str]) -> str | None:
    """The first of the server's own files the words name."""
    for word in words:
        found = own_file(word)
        if found is not None:
            return found
    return None
