"""Host-key trust, exactly like OpenSSH: `strict` connects only to hosts whose key is in known_hosts,
`accept-new` (the default) also trusts a host seen for the first time and appends its key, and neither ever
accepts a *changed* key. `ignore` turns checking off; it is only ever chosen explicitly and is audited.

Matching is asyncssh's own known_hosts handling (hashed names, patterns, `[host]:port`, revoked keys); this
module only decides what happens to a key that did not match.
"""

from __future__ import annotations

import os
from pathlib import Path

import asyncssh

_cache: dict[tuple[str, ...], tuple[tuple[tuple[int, int, int] | None, ...], asyncssh.SSHKnownHosts]] = {}


def known_hosts(files: tuple[str, ...]) -> asyncssh.SSHKnownHosts:
    """The known_hosts entries of these files (missing ones count as empty), re-read when a file changes."""
    signature = tuple(_signature(path) for path in files)
    cached = _cache.get(files)
    if cached is not None and cached[0] == signature:
        return cached[1]
    loaded = asyncssh.SSHKnownHosts()
    for path, stat in zip(files, signature, strict=True):
        if stat is not None:
            loaded.load(Path(path).read_text(errors="replace"))
    _cache[files] = (signature, loaded)
    return loaded


def _signature(path: str) -> tuple[int, int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_ino, stat.st_mtime_ns, stat.st_size)


def fingerprint(key: asyncssh.SSHKey) -> str:
    return key.get_fingerprint("sha256")


class TrustDecision:
    """What the host-key check concluded for one connection, for errors and the audit record."""

    def __init__(self) -> None:
        self.rejected: str | None = None  # "unknown" (strict), "changed" or "revoked"
        self.accepted_new = False
        self.announced = False
        self.host_key: str | None = None  # fingerprint of the key the server presented

    def announce_new_key(self) -> bool:
        """True once, for the first call on a connection whose host key was trusted on first use."""
        if self.accepted_new and not self.announced:
            self.announced = True
            return True
        return False


# The system-wide known_hosts files `ssh` reads too: keys pinned there are matched, never written.
GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")


def trusted_keys(files: tuple[str, ...]) -> asyncssh.SSHKnownHosts:
    """What asyncssh matches a presented key against: the user's files and the system-wide ones."""
    return known_hosts(files + GLOBAL_KNOWN_HOSTS)


def check_unmatched_key(
    mode: str,
    files: tuple[str, ...],
    spellings: tuple[str, ...],
    host: str,
    addr: str,
    port: int,
    key: asyncssh.SSHKey,
    decision: TrustDecision,
) -> bool:
    """Called for a key that known_hosts does not list for this host under the dialed name. True: trust it.

    Every spelling of the host is looked up as OpenSSH looks hosts up: `[name]:port` for a port other than
    22, with no fallback to port-less entries (another sshd on another port is another host). The key listed
    under any spelling is this host's key; another key there is a changed key; a revoked key is refused."""
    decision.host_key = fingerprint(key)
    known = trusted_keys(files)
    listed = same_key = False
    for name in dict.fromkeys((host, addr, *spellings)):
        if not name:
            continue
        trusted, authorities, revoked = known.match(name if port == 22 else f"[{name}]:{port}", "", None)[:3]
        if key in revoked:
            decision.rejected = "revoked"
            return False
        same_key = same_key or key in trusted
        listed = listed or bool(trusted) or bool(authorities)
    if same_key:  # known under another spelling (an alias, a hex IP): the same host, the same key
        return True
    if listed:  # the host is known with another key: never trust, never append (like OpenSSH)
        decision.rejected = "changed"
        return False
    if mode != "accept-new":
        decision.rejected = "unknown"
        return False
    _append(files[0], host, port, key)
    decision.accepted_new = True
    return True


def _append(path: str, host: str, port: int, key: asyncssh.SSHKey) -> None:
    pattern = host if port == 22 else f"[{host}]:{port}"
    line = f"{pattern} {' '.join(key.export_public_key('openssh').decode().split()[:2])}\n"
    directory = os.path.dirname(path)
    if directory and not os.path.isdir(directory):
        os.makedirs(directory, mode=0o700, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(descriptor, line.encode())
    finally:
        os.close(descriptor)
