"""What was parsed from each runbook file, kept across starts like Python's .pyc files.

Parsing front matter is most of what loading runbooks costs (importing PyYAML ~30 ms, then ~60 µs a file with
libyaml), and the `instructions` a client reads at `initialize` carry the index, so a start with 1,000 runbooks
would pay ~100 ms before answering. The cache keeps each file's parsed metadata (never its body) under the file's
signature (device, inode, size, modification and change times, in nanoseconds): a file whose signature differs in
any way is parsed afresh. The change time cannot be set back by a user, so an edit always shows.

The cache file is `$XDG_CACHE_HOME/relay-shell/runbooks-<digest of the directory's path>.json` (0600 in a 0700
directory), replaced atomically; one that cannot be read or written only makes a start slower.

What the cache says decides what the model sees (a guardrail's priority, the modes a runbook is offered in), so it
is trusted no more than the runbook files: a cache file not owned by this user, or writable by its group or
others, is ignored, and every entry is checked as parsing would check it (its path is the file it describes, the
name, priority and modes are valid). One entry that fails makes the whole file ignored: it was not written by us.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Any

import orjson

from relay_shell import __version__
from relay_shell.runbooks import document
from relay_shell.runbooks.document import Runbook

FORMAT = 1  # bump when the parsing rules or the stored fields change
KEEP_FILES = 16  # cache files of other runbook directories kept (the least recently written are removed)

SHA256_HEX = re.compile(r"[0-9a-f]{64}\Z")

Signature = tuple[int, int, int, int, int]


def cache_file(directory: Path) -> Path:
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    digest = hashlib.sha256(str(directory).encode("utf-8", errors="surrogatepass")).hexdigest()[:16]
    return Path(cache_home) / "relay-shell" / f"runbooks-{digest}.json"


def read_cache(directory: Path) -> dict[str, tuple[Signature, Runbook]]:
    """The parsed runbooks by relative path, with the signature each was parsed at; empty when unusable."""
    try:
        stored = orjson.loads(_read_own_file(cache_file(directory)))
        if stored.get("format") != FORMAT or stored.get("version") != __version__ or stored.get("parser") != _parser():
            return {}
        if stored.get("directory") != str(directory):
            return {}
        entries = {
            relpath: (_signature(entry["signature"]), Runbook.from_json(entry["runbook"]))
            for relpath, entry in stored["files"].items()
        }
        for relpath, (_signature_of_entry, runbook) in entries.items():
            check_entry(relpath, runbook)
        return entries
    except (OSError, orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):
        return {}


def _read_own_file(path: Path) -> bytes:
    """The cache file's bytes, when it is a regular file of this user that no one else may write."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(descriptor, "rb") as handle:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode) or status.st_uid != os.geteuid() or status.st_mode & 0o022:
            raise ValueError("not this user's own cache file")
        return handle.read()


def check_entry(relpath: str, runbook: Runbook) -> None:
    """ValueError unless the entry is one parsing could have produced for the file at relpath."""
    texts = (runbook.title, runbook.summary, *runbook.tags, *runbook.hosts, *runbook.chapters)
    if runbook.relpath != relpath:
        raise ValueError("entry for another file")
    if not isinstance(runbook.name, str) or not document.NAME_PATTERN.match(runbook.name):
        raise ValueError("bad name")
    if not 1 <= runbook.priority <= document.ALWAYS_INCLUDED:
        raise ValueError("bad priority")
    modes = set(runbook.modes)
    if not modes or len(modes) != len(runbook.modes) or not modes <= set(document.MODES):
        raise ValueError("bad modes")
    if not all(isinstance(text, str) for text in texts):
        raise ValueError("bad text")
    for argument in runbook.arguments:
        if not isinstance(argument.name, str) or not document.ARGUMENT_PATTERN.match(argument.name):
            raise ValueError("bad argument")
        if not isinstance(argument.description, str):
            raise ValueError("bad argument description")
    if not 0 <= runbook.body_start <= runbook.size:
        raise ValueError("bad sizes")
    if not isinstance(runbook.sha256, str) or not SHA256_HEX.match(runbook.sha256):
        raise ValueError("bad digest")


def write_cache(directory: Path, entries: dict[str, tuple[Signature, Runbook]]) -> None:
    path = cache_file(directory)
    payload: dict[str, Any] = {
        "format": FORMAT,
        "version": __version__,
        "parser": _parser(),
        "directory": str(directory),
        "files": {
            relpath: {"signature": list(signature), "runbook": runbook.to_json()}
            for relpath, (signature, runbook) in entries.items()
        },
    }
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    with contextlib.suppress(OSError):
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(orjson.dumps(payload))
        os.replace(temporary, path)
        _forget_old_caches(path)
    with contextlib.suppress(OSError):
        temporary.unlink()


def _forget_old_caches(kept: Path) -> None:
    """Directories come and go (tests make one per run): keep the cache folder from filling up."""
    others = [path for path in kept.parent.glob("runbooks-*.json") if path != kept]
    if len(others) < KEEP_FILES:
        return
    others.sort(key=lambda path: path.stat().st_mtime)
    for path in others[: len(others) - KEEP_FILES + 1]:
        with contextlib.suppress(OSError):
            path.unlink()


def _parser() -> str:
    """The parsing code's own signature: an edited parser (a development checkout) parses everything afresh."""
    try:
        status = os.stat(document.__file__)
    except OSError:
        return ""
    return f"{status.st_size}-{status.st_mtime_ns}"


def _signature(value: Any) -> Signature:
    if not isinstance(value, list) or len(value) != 5 or not all(isinstance(item, int) for item in value):
        raise ValueError("bad signature")
    return (value[0], value[1], value[2], value[3], value[4])
