"""The config file (`--config FILE`, RELAY_SHELL_CONFIG): TOML, the settings' names grouped by area, `[sessions]`
`max_sessions = 16`. pydantic-settings' TOML source reads it (settings/toml_file.py); this module finds where a key is
written, for errors that name the file and the line, and writes values as TOML (errors, `config show`).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path
from typing import Any

CONFIG_VARIABLE = "RELAY_SHELL_CONFIG"  # set by --config too (cli.py), so every command reads the same file

# A key (bare or quoted, maybe dotted) before `=`, and a table header `[name]`: enough of TOML to find a line.
# Compiled on first use (the re module caches them): only an error or `config show` looks for a line.
_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"[^"\n]*"|'[^'\n]*')"""
_KEY = rf"\s*({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*="
_HEADER = rf"\s*\[\s*({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*\]\s*(?:#.*)?$"


def config_file_path() -> Path | None:
    raw = os.environ.get(CONFIG_VARIABLE, "")
    return Path(raw).expanduser() if raw else None


def unsafe_place(path: Path) -> str | None:
    """Why the config file could be changed by someone other than root or the server's user, as sshd's StrictModes
    sees it: the file or a directory on the way to it owned by another user, or writable by its group or others (a
    directory with the sticky bit, /tmp, may be: nobody else can replace a file in it). The path is walked as the
    kernel resolves it, so a symbolic link on the way is checked too: its owner, the directory holding it (whoever
    may replace the link chooses the file), then the directories and the file it leads to. None when it is safe."""
    uid = os.geteuid()
    # Not normalised: `link/..` is the parent of where the link leads, resolved as the walk goes.
    pending = list((path if path.is_absolute() else Path.cwd() / path).parts[1:])
    current = Path("/")
    links = 0
    while pending:
        part = pending.pop(0)
        if part == "..":  # `current` has no link in it: its parent is the real one, and no one can replace `..`
            current = current.parent
            continue
        # Whoever may write a directory may replace the name looked up in it.
        problem = _unsafe(current, os.stat(current), "directory", uid)
        if problem is not None:
            return problem
        place = current / part
        info = os.lstat(place)
        if stat.S_ISLNK(info.st_mode):
            links += 1
            if links > 40:
                raise OSError(errno.ELOOP, f"too many levels of symbolic links: {path}")
            if info.st_uid not in (0, uid):
                owner = f"owned by uid {info.st_uid}, not root or the server's user (uid {uid})"
                return f"the symbolic link {place} is {owner}"
            target = Path(os.readlink(place))
            pending[:0] = list(target.parts[1:] if target.is_absolute() else target.parts)
            current = Path("/") if target.is_absolute() else current
            continue
        current = place
    return _unsafe(current, os.stat(current), "file", uid)


def _unsafe(place: Path, info: os.stat_result, kind: str, uid: int) -> str | None:
    if info.st_uid not in (0, uid):
        return f"the {kind} {place} is owned by uid {info.st_uid}, not root or the server's user (uid {uid})"
    writable = info.st_mode & 0o022
    if writable and (kind == "file" or not info.st_mode & stat.S_ISVTX):
        who = {0o020: "its group", 0o002: "others"}.get(writable, "its group and others")
        return f"the {kind} {place} is writable by {who} (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def _dotted(text: str) -> tuple[str, ...]:
    return tuple(part.strip().strip("\"'") for part in re.findall(_KEY_PART, text))


def key_line(text: str, path: tuple[str, ...]) -> int | None:
    """The line (from 1) where `path` ((section, key) or (section,)) is written: a `key =` under its `[section]`,
    a dotted `section.key =`, the `section = {...}` holding it, or the `[section]` header; None if not found."""
    section: tuple[str, ...] = ()
    fallback = None
    for number, line in enumerate(text.splitlines(), 1):
        header = re.match(_HEADER, line)
        if header is not None:
            section = _dotted(header.group(1))
            if section == path:
                return number
            if fallback is None and section == path[:1]:
                fallback = number
            continue
        key = re.match(_KEY, line)
        if key is None:
            continue
        written = section + _dotted(key.group(1))
        if written == path:
            return number
        if fallback is None and path[: len(written)] == written:
            fallback = number  # an inline table (`sessions = {...}`) that holds the key
    return fallback


def toml_value(value: Any) -> str:
    """A TOML value: an empty string for an unset optional setting (empty turns it off)."""
    if value is None:
        return '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    return toml_string(str(value))


def toml_string(text: str) -> str:
    """A TOML basic string: quote, backslash and control characters escaped (JSON's escapes are not all TOML's)."""
    escaped = []
    for character in text:
        if character in '"\\':
            escaped.append("\\" + character)
        elif ord(character) < 0x20 or ord(character) == 0x7F:
            escaped.append(f"\\u{ord(character):04X}")
        else:
            escaped.append(character)
    return '"' + "".join(escaped) + '"'
