"""The two ends of a transfer: what the call names (`Job`), the source tree as scanned (`Entry`, parents first),
and `Ends`, which checks, reads and writes each side — the local file system, or the remote one over SFTP.

Scanning walks the source once before anything is written: symlinks are entries of their own (never followed
below the path the call names), devices, sockets and FIFOs are entries that will be skipped, and a tree over
MAX_ENTRIES is refused. OpenSSH's readdir reports each entry as lstat sees it, so both sides scan alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import posixpath
import stat
from dataclasses import dataclass
from typing import Literal

import asyncssh
from asyncssh import SFTPAttrs, SFTPClient

from relay_shell.errors import ToolError
from relay_shell.ssh.transfers.sftp_files import (
    Landed,
    Session,
    download_file,
    make_local_link,
    make_remote_link,
    upload_file,
)

MAX_ENTRIES = 100_000  # entries (files, directories, links) in one recursive transfer
Kind = Literal["dir", "file", "link", "other"]
Direction = Literal["upload", "download"]
KIND_NAMES: dict[str, str] = {"dir": "directory", "file": "file", "link": "symlink", "other": "special file"}
# Errors that end the whole transfer (the session is gone); any other error fails one entry of a tree.
CONNECTION_LOST = (
    asyncssh.SFTPConnectionLost,
    asyncssh.SFTPNoConnection,
    asyncssh.DisconnectError,
    asyncssh.ConnectionLost,
    ConnectionError,
)


@dataclass(frozen=True)
class Job:
    """What the call asked for."""

    direction: Direction
    host: str
    local: str  # absolute
    remote: str  # as the SFTP server takes it (relative = from the login directory)
    recursive: bool
    limit: int

    @property
    def source(self) -> str:
        return self.local if self.direction == "upload" else self.remote

    @property
    def source_argument(self) -> str:
        return "local_path" if self.direction == "upload" else "remote_path"

    @property
    def destination_argument(self) -> str:
        return "remote_path" if self.direction == "upload" else "local_path"

    def on_host(self, argument: str) -> str:
        """` on HOST` after a path of the remote side, for messages."""
        return f" on {self.host}" if argument == "remote_path" else ""


@dataclass(frozen=True)
class Entry:
    relative: str  # "" for the path named in the call, "a/b" below it
    kind: Kind
    size: int = 0
    mode: int = 0
    atime: int = 0
    mtime: int = 0
    link: str | None = None  # a symlink's target text


class Clash(Exception):
    """The destination holds another kind of thing at this path."""


class Ends:
    """The two ends of a transfer: the source to scan and read, the destination to check and write."""

    def __init__(self, session: Session, job: Job) -> None:
        self.session = session
        self.sftp = session.sftp
        self.job = job
        upload = job.direction == "upload"
        self.source_root = job.local if upload else job.remote
        self.destination_root = job.remote if upload else job.local

    # -- the paths named in the call

    async def source_kind(self) -> Kind:
        if self.job.direction == "upload":
            try:
                return kind_of(os.stat(self.source_root).st_mode)
            except OSError as exc:
                raise path_error("local_path", self.source_root, exc, "an existing file or directory") from None
        try:
            attrs = await self.sftp.stat(self.source_root)
        except asyncssh.SFTPError as exc:
            raise self._remote_error("remote_path", self.source_root, exc, "an existing file or directory") from None
        return kind_of(attrs.permissions or 0)

    async def destination(self) -> Kind | None:
        """What the destination path holds now (a symlink named in the call is followed to its target)."""
        if self.job.direction == "download":
            root = self.destination_root
            if os.path.islink(root):
                root = self.destination_root = os.path.realpath(root)
            status: os.stat_result | None = None
            try:
                status = os.stat(root)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise path_error("local_path", root, exc, "a path you may write") from None
            if self.job.recursive and (status is None or stat.S_ISDIR(status.st_mode)):
                refusal = tree_not_private(root, status)
                if refusal is not None:
                    raise refusal
            return None if status is None else kind_of(status.st_mode)
        root = self.destination_root
        try:
            attrs = await self.sftp.lstat(root)
            if stat.S_ISLNK(attrs.permissions or 0):
                root = self.destination_root = await self.sftp.realpath(root)
                attrs = await self.sftp.stat(root)
        except asyncssh.SFTPNoSuchFile:
            return None
        except asyncssh.SFTPError as exc:
            raise self._remote_error("remote_path", root, exc, "a path you may write") from None
        return kind_of(attrs.permissions or 0)

    async def check_destination(self, source: Kind, destination: Kind | None) -> None:
        argument = self.job.destination_argument
        root = self.destination_root
        where = f" on {self.job.host}" if self.job.direction == "upload" else ""
        if source == "file" and destination == "dir":
            name = posixpath.basename(self.source_root.rstrip("/")) or "name"
            raise ToolError(
                "IsADirectory",
                f"{argument}: {root!r}{where} is a directory and a file cannot replace it; allowed: the file's own "
                f"path, e.g. {posixpath.join(root, name)!r}",
            )
        if source == "dir" and destination is not None and destination != "dir":
            raise ToolError(
                "NotADirectory",
                f"{argument}: {root!r}{where} is a {KIND_NAMES[destination]} and a directory cannot replace it; "
                "allowed: a new path, or an existing directory to merge into",
            )
        if destination is not None:
            return
        parent = posixpath.dirname(root.rstrip("/")) or "."
        if self.job.direction == "upload":
            try:
                parent_kind: Kind | None = kind_of((await self.sftp.stat(parent)).permissions or 0)
            except asyncssh.SFTPNoSuchFile:
                parent_kind = None
            except asyncssh.SFTPError as exc:
                raise self._remote_error(argument, parent, exc, "a path in an existing directory") from None
        else:
            parent_kind = "dir"  # checked when the call was planned
        if parent_kind is None:
            raise ToolError(
                "NotFound",
                f"{argument}: the directory {parent!r} does not exist{where}; allowed: a path in an existing "
                "directory (create it first, e.g. ssh_exec mkdir -p)",
            )
        if parent_kind != "dir":
            raise ToolError("NotADirectory", f"{argument}: {parent!r}{where} is not a directory")

    # -- scanning the source

    async def scan(self, root_kind: Kind) -> tuple[list[Entry], list[tuple[str, str]]]:
        if self.job.direction == "upload":
            try:
                return await asyncio.to_thread(_scan_local, self.source_root, root_kind)
            except OSError as exc:
                raise path_error("local_path", self.source_root, exc, "an existing file or directory") from None
        try:
            return await _scan_remote(self.sftp, self.source_root)
        except CONNECTION_LOST:
            raise
        except asyncssh.SFTPError as exc:
            raise self._remote_error("remote_path", self.source_root, exc, "an existing file or directory") from None

    # -- writing the destination

    def destination_path(self, relative: str) -> str:
        if not relative:
            return self.destination_root
        if relative.startswith("/") or ".." in relative.split("/"):  # a backstop: scans yield plain names only
            raise ToolError("UnsafeName", f"{relative[:200]!r} would leave the destination tree; skipped")
        return posixpath.join(self.destination_root, relative)

    async def kind_at(self, entry: Entry, destination: Kind | None) -> Kind | None:
        """What is at the destination for this entry: known for the root, looked up (without following
        symlinks) for entries in a directory that existed before."""
        if not entry.relative:
            return destination
        path = self.destination_path(entry.relative)
        if self.job.direction == "download":
            try:
                status = os.lstat(path)
            except FileNotFoundError:
                return None
            problem = not_private(path, status) if stat.S_ISDIR(status.st_mode) else None
            if problem is not None:
                raise ToolError("NotPrivate", problem.split(": ", 1)[1])
            return kind_of(status.st_mode)
        try:
            return kind_of((await self.sftp.lstat(path)).permissions or 0)
        except asyncssh.SFTPNoSuchFile:
            return None

    async def make_dir(self, path: str) -> None:
        if self.job.direction == "download":
            os.mkdir(path, 0o700)
        else:
            await self.sftp.mkdir(path, SFTPAttrs(permissions=0o700))

    async def finish_dir(self, path: str, entry: Entry) -> None:
        mode = entry.mode & 0o7777
        if self.job.direction == "download":
            os.chmod(path, mode)
            os.utime(path, (entry.atime, entry.mtime))
        else:
            await self.sftp.setstat(path, SFTPAttrs(permissions=mode, atime=entry.atime, mtime=entry.mtime))

    async def copy(self, entry: Entry, path: str) -> Landed:
        source = posixpath.join(self.source_root, entry.relative) if entry.relative else self.source_root
        if self.job.direction == "upload":
            return await upload_file(self.session, source, path, follow=not entry.relative)
        attrs = SFTPAttrs(size=entry.size, permissions=entry.mode, atime=entry.atime, mtime=entry.mtime)
        return await download_file(self.session, source, path, attrs, named=not entry.relative)

    async def make_link(self, link_target: str, path: str) -> None:
        if self.job.direction == "download":
            make_local_link(link_target, path)
        else:
            await make_remote_link(self.session, link_target, path)

    # -- errors

    def single_file_error(self, exc: BaseException) -> ToolError:
        """A one-file transfer failed: the error names the argument whose side failed."""
        kind, reason = failure(exc)
        local_side = isinstance(exc, OSError) or (isinstance(exc, ToolError) and self.job.direction == "upload")
        if local_side:
            return ToolError(kind, f"local_path: {self.job.local!r}: {reason}")
        return ToolError(kind, f"remote_path: {self.job.remote!r} on {self.job.host}: {reason}")

    def _remote_error(self, argument: str, path: str, exc: asyncssh.SFTPError, allowed: str) -> ToolError:
        kind, reason = failure(exc)
        if kind == "NotFound":
            reason = "does not exist"
        return ToolError(kind, f"{argument}: {path!r} on {self.job.host}: {reason}; allowed: {allowed}")


def path_error(argument: str, path: str, exc: OSError, allowed: str, what: str = "") -> ToolError:
    kind, reason = os_failure(exc)
    if kind == "NotFound":
        reason = "does not exist"
    subject = f"{what} {path!r}" if what else repr(path)
    return ToolError(kind, f"{argument}: {subject} {reason}; allowed: {allowed}")


def reason_of(exc: BaseException) -> str:
    """One entry's failure in a tree, with the side it happened on."""
    if isinstance(exc, Clash):
        return f"Clash: {exc}"
    kind, reason = failure(exc)
    if isinstance(exc, OSError):
        return f"{kind} (local): {reason}"
    if isinstance(exc, asyncssh.SFTPError):
        return f"{kind} (remote): {reason}"
    return f"{kind}: {reason}"


def failure(exc: BaseException) -> tuple[str, str]:
    """(kind, reason) for an error from either end."""
    if isinstance(exc, asyncssh.SFTPError):
        return _SFTP_KINDS.get(type(exc), "SftpFailure"), (exc.reason or type(exc).__name__).lower()
    if isinstance(exc, OSError):
        return os_failure(exc)
    if isinstance(exc, ToolError):
        return exc.kind, str(exc)
    return type(exc).__name__, str(exc)


def os_failure(exc: OSError) -> tuple[str, str]:
    return _ERRNO_KINDS.get(exc.errno or 0, "OSError"), (exc.strerror or str(exc)).lower()


_SFTP_KINDS: dict[type[asyncssh.SFTPError], str] = {
    asyncssh.SFTPNoSuchFile: "NotFound",
    asyncssh.SFTPNoSuchPath: "NotFound",
    asyncssh.SFTPPermissionDenied: "PermissionDenied",
    asyncssh.SFTPWriteProtect: "PermissionDenied",
    asyncssh.SFTPNoSpaceOnFilesystem: "NoSpace",
    asyncssh.SFTPQuotaExceeded: "NoSpace",
    asyncssh.SFTPFileAlreadyExists: "Exists",
    asyncssh.SFTPFileIsADirectory: "IsADirectory",
    asyncssh.SFTPNotADirectory: "NotADirectory",
}
_ERRNO_KINDS: dict[int, str] = {
    errno.ENOENT: "NotFound",
    errno.EACCES: "PermissionDenied",
    errno.EPERM: "PermissionDenied",
    errno.EROFS: "PermissionDenied",
    errno.ENOSPC: "NoSpace",
    errno.EDQUOT: "NoSpace",
    errno.EISDIR: "IsADirectory",
    errno.ENOTDIR: "NotADirectory",
    errno.EEXIST: "Exists",
    errno.ELOOP: "SymlinkInTheWay",
}


def kind_of(mode: int) -> Kind:
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "link"
    return "other"


# -- scanning ----------------------------------------------------------------------------------------------


def _too_many(argument: str, root: str) -> ToolError:
    return ToolError(
        "TreeTooLarge",
        f"{argument}: {root!r} holds more than {MAX_ENTRIES} entries; allowed: at most {MAX_ENTRIES} per call "
        "(transfer its subdirectories one by one, or pack it with tar first)",
    )


def not_private(path: str, status: os.stat_result) -> str | None:
    """Why a local directory of a tree is unsafe to walk by path, or None. The walk opens files by path, so a
    user who may rename entries in a directory of the tree could swap a directory for a symlink while it is
    copied and redirect a file outside the tree. Only the owner (this server's user, or root) may do that
    where the directory is not writable by others, or is sticky."""
    mode = status.st_mode
    if status.st_uid in (os.geteuid(), 0) and (not mode & 0o022 or mode & stat.S_ISVTX):
        return None
    return (
        f"NotPrivate (local): {path!r} can be changed by other users (owner uid {status.st_uid}, mode "
        f"{stat.S_IMODE(mode):04o}) while it is copied; allowed: a directory only its owner (this server's user "
        "or root) can change: copy the tree there first"
    )


def tree_not_private(root: str, status: os.stat_result | None) -> ToolError | None:
    """A local tree root (`status` None when it does not exist yet) and every directory above it must be
    private: whoever may rename an entry on the way could swap the tree for a symlink while it is copied."""
    problem = not_private(root, status) if status is not None else None
    directory = os.path.dirname(root)
    while problem is None and directory != os.path.dirname(directory):
        with contextlib.suppress(OSError):
            problem = not_private(directory, os.lstat(directory))
        directory = os.path.dirname(directory)
    return None if problem is None else ToolError("NotPrivate", "local_path: " + problem.split(": ", 1)[1])


def _scan_local(root: str, root_kind: Kind) -> tuple[list[Entry], list[tuple[str, str]]]:
    """The local tree, parents before children, names sorted; symlinks are entries, never followed."""
    status = os.stat(root)
    entries = [_local_entry("", status)]
    unreadable: list[tuple[str, str]] = []
    if root_kind != "dir":
        return entries, unreadable
    refusal = tree_not_private(root, status)
    if refusal is not None:
        raise refusal
    # Depth first; a directory's entries are added when it is listed, so a parent always precedes its children.
    stack = [""]
    while stack:
        relative = stack.pop()
        found: list[tuple[str, os.stat_result, str]] = []
        try:
            with os.scandir(os.path.join(root, relative) if relative else root) as listing:
                for item in listing:
                    found.append((item.name, item.stat(follow_symlinks=False), item.path))
                    if len(entries) + len(found) > MAX_ENTRIES:
                        raise _too_many("local_path", root)
        except OSError as exc:
            kind, reason = os_failure(exc)
            unreadable.append((relative, f"{kind} (local): cannot be listed: {reason}"))
            continue
        below = []
        for name, item_status, item_path in sorted(found):
            child = f"{relative}/{name}" if relative else name
            entry = _local_entry(child, item_status)
            if entry.kind == "link":
                try:
                    entry = Entry(child, "link", mtime=entry.mtime, link=os.readlink(item_path))
                except OSError as exc:
                    kind, reason = os_failure(exc)
                    unreadable.append((child, f"{kind} (local): symlink cannot be read: {reason}"))
                    continue
            if entry.kind == "dir":
                problem = not_private(item_path, item_status)
                if problem is not None:
                    unreadable.append((child, problem))
                    continue
                below.append(child)
            entries.append(entry)
        stack.extend(reversed(below))
    return entries, unreadable


def _local_entry(relative: str, status: os.stat_result) -> Entry:
    return Entry(
        relative,
        kind_of(status.st_mode),
        size=status.st_size if stat.S_ISREG(status.st_mode) else 0,
        mode=status.st_mode,
        atime=int(status.st_atime),
        mtime=int(status.st_mtime),
    )


async def _scan_remote(sftp: SFTPClient, root: str) -> tuple[list[Entry], list[tuple[str, str]]]:
    """The remote tree like `_scan_local`; OpenSSH's readdir reports each entry as lstat sees it."""
    entries = [_remote_entry("", await sftp.stat(root))]
    unreadable: list[tuple[str, str]] = []
    if entries[0].kind != "dir":
        return entries, unreadable
    stack = [""]
    while stack:
        relative = stack.pop()
        found: list[tuple[str, SFTPAttrs]] = []
        try:
            async for listed in sftp.scandir(posixpath.join(root, relative) if relative else root):
                name = str(listed.filename)
                if name in (".", ".."):
                    continue
                if not name or "/" in name or "\x00" in name:
                    # A server that lists `../x` or `/etc/x` in a directory is trying to write outside the tree
                    # (scp's CVE-2019-6111): never a path, only a plain name, is joined onto the destination.
                    where = relative or "."
                    unreadable.append((where, f"UnsafeName (remote): the server listed {name[:100]!r}; skipped"))
                    continue
                found.append((name, listed.attrs))
                if len(entries) + len(found) > MAX_ENTRIES:
                    raise _too_many("remote_path", root)
        except CONNECTION_LOST:
            raise
        except asyncssh.SFTPError as exc:
            kind, reason = failure(exc)
            unreadable.append((relative, f"{kind} (remote): cannot be listed: {reason}"))
            continue
        below = []
        for name, attrs in sorted(found, key=lambda item: item[0]):
            child = f"{relative}/{name}" if relative else name
            entry = _remote_entry(child, attrs)
            if entry.kind == "link":
                try:
                    link = await sftp.readlink(posixpath.join(root, child))
                except CONNECTION_LOST:
                    raise
                except asyncssh.SFTPError as exc:
                    kind, reason = failure(exc)
                    unreadable.append((child, f"{kind} (remote): symlink cannot be read: {reason}"))
                    continue
                entry = Entry(child, "link", mtime=entry.mtime, link=str(link))
            entries.append(entry)
            if entry.kind == "dir":
                below.append(child)
        stack.extend(reversed(below))
    return entries, unreadable


def _remote_entry(relative: str, attrs: SFTPAttrs) -> Entry:
    mode = attrs.permissions or 0
    kind = kind_of(mode)
    return Entry(
        relative,
        kind,
        size=(attrs.size or 0) if kind == "file" else 0,
        mode=mode,
        atime=attrs.atime if attrs.atime is not None else attrs.mtime or 0,
        mtime=attrs.mtime or 0,
    )
