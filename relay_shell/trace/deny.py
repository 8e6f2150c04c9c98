"""RELAY_SHELL_EXEC_DENY: whether a pattern refuses an exec, matched on `path argv…` (bounded, and RE2: linear
time whatever the pattern, adr/0019) and again with the path's symlinks resolved as the process sees them, so a
symlink to a denied tool is refused too (a copy of it is not)."""

from __future__ import annotations

import os
from typing import Any

DENY_TEXT_MAX = 8192  # characters of `path argv…` the deny patterns see (bounded matching time)
REFUSAL_SHOWN = 300  # characters of a refused exec the call's result shows


def deny_text(path: str, arguments: list[str]) -> str:
    """What the patterns are matched on."""
    return " ".join([path, *arguments])[:DENY_TEXT_MAX]


def denies(patterns: list[Any], text: str, pid: int, path: str, arguments: list[str]) -> bool:
    """A pattern matches `text`, or `path argv…` with the path's symlinks resolved in the process's root."""
    if any(pattern.search(text) for pattern in patterns):
        return True
    if not path.startswith("/"):
        return False
    root = f"/proc/{pid}/root"
    resolved = os.path.realpath(root + path)
    if resolved.startswith(root + "/"):  # resolved inside /proc: the process's root could not be followed
        return False
    if resolved == path:
        return False
    return any(pattern.search(deny_text(resolved, arguments)) for pattern in patterns)


def refusal_shown(path: str, shown: list[Any]) -> str:
    """A refused exec as the call's result names it: its path and its redacted arguments."""
    return " ".join(str(item) for item in [path, *shown[1:]])[:REFUSAL_SHOWN]
