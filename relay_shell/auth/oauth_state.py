"""The OAuth state file (`RELAY_SHELL_OAUTH_STATE_DIR/oauth.json`): registered clients, grants and token digests,
one JSON file, 0600 in a 0700 directory owned by the server's user (symlinks refused), replaced atomically (temp
file, fsync, rename, fsync of the directory): a crash leaves the old file or the new."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path
from typing import Any

import orjson

from relay_shell.errors import ConfigError

STATE_FILE = "oauth.json"
_VARIABLE = "RELAY_SHELL_OAUTH_STATE_DIR"


def read_state(directory: Path) -> dict[str, Any] | None:
    """{clients, grants, tokens} from the state file; None when there is none yet. Creates the directory; raises
    ConfigError naming the setting for a directory or file that is not safe, or a file that is no state file."""
    variable = _VARIABLE
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        status = os.lstat(directory)
    except OSError as exc:
        raise ConfigError(f"{variable}={str(directory)!r}: cannot create it ({exc.strerror})") from None
    if not stat.S_ISDIR(status.st_mode):
        raise ConfigError(f"{variable}={str(directory)!r}: not a directory (symlinks are refused)")
    if status.st_uid != os.geteuid():
        raise ConfigError(f"{variable}={str(directory)!r}: owned by uid {status.st_uid}, not the server's user")
    if status.st_mode & 0o077:
        raise ConfigError(
            f"{variable}={str(directory)!r}: mode {stat.S_IMODE(status.st_mode):04o} lets group or others in; "
            "allowed: 0700 (chmod 700 it)"
        )
    path = directory / STATE_FILE
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"{variable}: cannot open {str(path)!r} ({exc.strerror}; symlinks are refused)") from None
    with os.fdopen(descriptor, "rb") as handle:
        file_status = os.fstat(handle.fileno())
        if file_status.st_mode & 0o077 or file_status.st_uid != os.geteuid():
            raise ConfigError(f"{variable}: {str(path)!r} must be owned by the server's user and mode 0600")
        raw = handle.read()
    try:
        state = orjson.loads(raw)
        return {"clients": dict(state["clients"]), "grants": dict(state["grants"]), "tokens": dict(state["tokens"])}
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        raise ConfigError(
            f"{variable}: {str(path)!r} is not a relay-shell OAuth state file; move it away to start afresh "
            "(every client then registers again)"
        ) from None


def write_state(directory: Path, clients: dict[str, Any], grants: dict[str, Any], tokens: dict[str, Any]) -> None:
    """Replace the state file atomically."""
    data = orjson.dumps({"v": 1, "clients": clients, "grants": grants, "tokens": tokens})
    temporary = directory / f".{STATE_FILE}.{secrets.token_hex(6)}"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, directory / STATE_FILE)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    opened = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(opened)
    finally:
        os.close(opened)
