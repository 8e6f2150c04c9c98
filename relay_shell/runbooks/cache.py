"""What was parsed from each runbook file, kept across starts like Python's .pyc files.

Parsing front matter is most of what loading runbooks costs (importing PyYAML ~30 ms, then ~60 µs a file with
libyaml), and the `instructions` a client reads at `initialize` carry the index, so a start with 1,000 runbooks
would pay ~100 ms before answering. The cache keeps each file's parsed metadata (never its body) under the file's
signature (device, inode, size, modification and change times, in nanoseconds): a file whose signature differs in
any way is parsed afresh. The change time cannot be set back by a user, so an edit always shows.

The cache file is `$XDG_CACHE_HOME/relay-shell/runbooks-<digest of the directory's path>.json` (0600 in a 0700
directory), replaced atomically; one that cannot be read or written only makes a start slower.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from pathlib import Path
from typing import Any

import orjson

from relay_shell import __version__
from relay_shell.runbooks import document
from relay_shell.runbooks.document import Runbook

FORMAT = 1  # bump when the parsing rules or the stored fields change
KEEP_FILES = 16  # cache files of other runbook directories kept (the least recently written are removed)

Signature = tuple[int, int, int, int, int]


def cache_file(directory: Path) -> Path:
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    digest = hashlib.sha256(str(directory).encode("utf-8", errors="surrogatepass")).hexdigest()[:16]
    return Path(cache_home) / "relay-shell" / f"runbooks-{digest}.json"


def read_cache(directory: Path) -> dict[str, tuple[Signature, Runbook]]:
    """The parsed runbooks by relative path, with the signature each was parsed at; empty when unusable."""
    try:
        stored = orjson.loads(cache_file(directory).read_bytes())
        if stored.get("format") != FORMAT or stored.get("version") != __version__ or stored.get("parser") != _parser():
            return {}
        if stored.get("directory") != str(directory):
            return {}
        return {
            relpath: (_signature(entry["signature"]), Runbook.from_json(entry["runbook"]))
            for relpath, entry in stored["files"].items()
        }
    except (OSError, orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):
        return {}


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
