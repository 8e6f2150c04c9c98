"""The token file: `NAME SHA256-HEX` lines, opened without following symlinks and checked on the open file
(owner, mode, duplicates), and the bearer-token verifier the HTTP transport and OAuth both use.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from relay_shell.errors import ConfigError

if TYPE_CHECKING:
    from mcp.server.auth.provider import AccessToken


_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
_DIGEST = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class NamedToken:
    name: str
    sha256: str


def load_tokens(path: Path) -> list[NamedToken]:
    """`NAME SHA256-HEX` per line (`#` comments, blank lines ignored). Refused if group or others may read
    or write it: a token file anyone can read is a password anyone can use."""
    variable = "RELAY_SHELL_TOKEN_FILE"
    try:
        # Opened once, not through a symlink; everything is checked on the open file, then read from it.
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise ConfigError(f"{variable}={str(path)!r}: cannot open it ({exc.strerror}; symlinks are refused)") from None
    with os.fdopen(descriptor, encoding="utf-8", errors="replace") as handle:
        status = os.fstat(handle.fileno())
        mode = status.st_mode
        if not stat.S_ISREG(mode):
            raise ConfigError(f"{variable}={str(path)!r}: not a regular file")
        if mode & 0o077:
            raise ConfigError(
                f"{variable}={str(path)!r}: mode {stat.S_IMODE(mode):04o} lets group or others read or write it; "
                "allowed: 0600 or 0400 (chmod 600 it)"
            )
        if status.st_uid != os.geteuid():
            raise ConfigError(f"{variable}={str(path)!r}: owned by uid {status.st_uid}, not by the server's user")
        text = handle.read()
    tokens: list[NamedToken] = []
    names: set[str] = set()
    digests: set[str] = set()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or not _NAME.fullmatch(parts[0]) or not _DIGEST.fullmatch(parts[1].lower()):
            raise ConfigError(
                f"{variable}: line {number} is not `NAME SHA256-HEX` (a name of letters, digits, _.@-, then the "
                "64-hex-digit SHA-256 of the token; `relay-shell token NAME` prints one)"
            )
        if parts[0] in names:
            raise ConfigError(f"{variable}: line {number}: the name {parts[0]!r} is used twice")
        if parts[1].lower() in digests:  # one token, two names: the audit log could name the wrong client
            raise ConfigError(f"{variable}: line {number}: this token is already listed under another name")
        names.add(parts[0])
        digests.add(parts[1].lower())
        tokens.append(NamedToken(parts[0], parts[1].lower()))
    if not tokens:
        raise ConfigError(f"{variable}={str(path)!r}: holds no token")
    return tokens


class TokenFileVerifier:
    """The SDK's TokenVerifier over the token file: constant-time comparison of SHA-256 digests."""

    def __init__(self, tokens: list[NamedToken]) -> None:
        self.tokens = tokens

    def name_of(self, token: str) -> str | None:
        digest = hashlib.sha256(token.encode("utf-8", errors="surrogateescape")).hexdigest()
        found = None
        for candidate in self.tokens:  # every entry is compared: the time does not tell which one matched
            if hmac.compare_digest(candidate.sha256, digest):
                found = candidate.name
        return found

    async def verify_token(self, token: str) -> AccessToken | None:
        from mcp.server.auth.provider import AccessToken

        name = self.name_of(token)
        if name is None:
            return None
        # The raw token is not kept: the record of who called is the name.
        return AccessToken(token=hashlib.sha256(token.encode()).hexdigest(), client_id=name, scopes=[])
