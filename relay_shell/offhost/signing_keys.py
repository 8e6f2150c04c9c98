"""Ed25519 keys for signed audit checkpoints (`cryptography`, already installed with asyncssh; adr/0020).

`relay-shell audit keygen PATH` writes PATH (the private key, PKCS#8 PEM, mode 0600, never over an existing file)
and PATH.pub (the public key, SubjectPublicKeyInfo PEM) for `audit verify --public-key`. An OpenSSH ed25519 key
(`ssh-keygen -t ed25519 -N ''`, and its `.pub` line) is accepted too.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey


class KeyFileError(ValueError):
    """A key file that cannot be used; the message says which file and why."""


def generate_keypair(path: Path) -> Path:
    """Write a new private key to `path` (0600, refusing to replace a file) and its public key to PATH.pub."""
    public_path = path.with_name(path.name + ".pub")
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    for target in (path, public_path):
        if target.exists():
            raise KeyFileError(f"{target} exists; refusing to replace a key (remove it first, or choose another PATH)")
    # The public key first: a failure then leaves no private key without its .pub (nothing could verify it).
    fd = os.open(public_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(public_pem)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError:
        public_path.unlink(missing_ok=True)
        raise
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(private_pem)
    except OSError:
        public_path.unlink(missing_ok=True)
        path.unlink(missing_ok=True)  # ours (O_EXCL created it), half written: no key either
        raise
    return public_path


def load_signing_key(path: Path) -> Ed25519PrivateKey:
    """The Ed25519 private key in `path` (PKCS#8 PEM or OpenSSH); KeyFileError says what is wrong."""
    data = _read(path)
    key: object
    try:
        if b"OPENSSH PRIVATE KEY" in data:
            key = serialization.load_ssh_private_key(data, password=None)
        else:
            key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"{path} is not an unencrypted private key in PEM or OpenSSH format ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{path} holds a {type(key).__name__.removeprefix('_')}, not an Ed25519 key")
    mode = os.stat(path).st_mode & 0o777
    if mode & 0o077:
        # As ssh refuses an unprotected private key: whoever can read it can sign a rewritten log.
        raise KeyFileError(
            f"{path} is accessible by group or others (mode {mode:04o}); a signing key others can read lets them "
            f"sign a rewritten log: chmod 600 {path} (owned by the user relay-shell runs as), or pass it with "
            "systemd's LoadCredential="
        )
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    """The Ed25519 public key in `path` (PEM, or an OpenSSH `ssh-ed25519 …` line)."""
    data = _read(path)
    if b"PRIVATE KEY" in data:
        raise KeyFileError(f"{path} is a private key; give the public key (PATH.pub from relay-shell audit keygen)")
    key: object
    try:
        if data.startswith(b"ssh-"):
            key = serialization.load_ssh_public_key(data.strip())
        else:
            key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise KeyFileError(f"{path} is not a public key in PEM or OpenSSH format ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError(f"{path} holds a {type(key).__name__.removeprefix('_')}, not an Ed25519 key")
    return key


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise KeyFileError(f"cannot read {path}: {exc.strerror or exc}") from None


def key_id(public_key: Ed25519PublicKey) -> str:
    """A short name for a key, carried by each checkpoint: the first 16 hex digits of SHA-256 of the raw key."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
