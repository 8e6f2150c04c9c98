"""One file or one symlink each way over an SFTP session, the way a transfer must land (ADR 0012).

Files: block requests are pipelined (READ_AHEAD or WRITE_AHEAD in flight, BLOCK_SIZE each, so memory stays
bounded whatever the file size), the SHA-256 is computed on the bytes as they pass, and the data goes to a
temporary name in the destination directory that is renamed over the final name only once the file is
complete, with its mode and times set. A failure, a timeout or a cancellation removes the temporary file: the
final name never holds half a file. Symlinks are made under a temporary name and renamed the same way.

A download hashes and writes through a `Sink` (`local_io`: on a worker thread for files of a MiB or more), and
a named file of STREAM_MIN_BYTES or more comes over the remote `scp -f` instead of SFTP reads when the host
allows it (`scp_stream`, ADR 0029). An upload reads and hashes on the event loop: handing that to a thread cost
more CPU than it saved (ADR 0012, ADR 0029).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import posixpath
import secrets
import stat
from collections import deque
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio
import asyncssh
from asyncssh import SFTPAttrs, SFTPClient, SFTPClientFile

from relay_shell.errors import ToolError
from relay_shell.plan import ProgressFn
from relay_shell.ssh.pool import PooledConnection, SshPool
from relay_shell.ssh.transfers.local_io import Sink
from relay_shell.ssh.transfers.scp_stream import STREAM_MIN_BYTES, stream_file

BLOCK_SIZE = 261120  # OpenSSH's sftp-server serves at most this per read or write (its limits@openssh.com)
# Block requests in flight per file, enough to keep a fast link busy. Reads can run further ahead: the SSH
# window (2 MiB) bounds what the server sends before we consume it. Each write in flight holds its block
# (and asyncssh's packet copies) until the server answers: 16 (4 MiB of data) moved as fast as 32 here and
# halved the memory a 1 GiB upload takes (~16 MiB instead of ~27 MiB, measured).
READ_AHEAD = 32
WRITE_AHEAD = 16
CLEANUP_TIMEOUT = 5.0  # seconds for removing a temporary file after a failure, past the call's deadline
_WRITE_NEW = asyncssh.FXF_WRITE | asyncssh.FXF_CREAT | asyncssh.FXF_EXCL


class TransferTooLarge(ToolError):
    def __init__(self, message: str) -> None:
        super().__init__("TransferTooLarge", message)


class Meter:
    """Bytes the call has moved: enforces the size limit while copying (a file may grow after the scan) and
    reports progress (the runner throttles it)."""

    def __init__(self, limit: int, progress: ProgressFn) -> None:
        self.limit = limit
        self.progress = progress
        self.moved = 0

    async def add(self, count: int) -> None:
        self.moved += count
        if self.moved > self.limit:
            raise TransferTooLarge(
                f"the transfer passed {self.limit} bytes (RELAY_SHELL_MAX_TRANSFER_BYTES) while copying: a file grew "
                "after it was measured; what had not arrived was stopped"
            )
        await self.progress(self.moved)


@dataclass(frozen=True)
class Landed:
    size: int
    sha256: str


@dataclass
class Session:
    """An open SFTP session and what the copies on it share."""

    sftp: SFTPClient
    meter: Meter
    leftovers: list[str] = field(default_factory=list)  # remote temporary files that could not be removed
    pool: SshPool | None = None  # with `connection`: the pooled connection the SFTP session runs on
    connection: PooledConnection | None = None


def temporary_name(final: str) -> str:
    """A hidden name next to `final` (same directory, so the rename is atomic), unique to this call."""
    directory, name = posixpath.split(final)
    # 200 bytes of the name (file names are limited in bytes: 85 '€' are 255), cut on a character boundary.
    short = name.encode("utf-8", errors="surrogateescape")[:200].decode("utf-8", errors="ignore")
    return posixpath.join(directory, f".{short}.relay-{secrets.token_hex(4)}.part")


# -- download ---------------------------------------------------------------------------------------------


async def download_file(session: Session, remote: str, local: str, attrs: SFTPAttrs, *, named: bool) -> Landed:
    """Copy the remote file to `local` (mode and times from `attrs`, the source's stat). `named`: the path the
    call names (not a file inside a tree), which may come over the remote `scp -f` when it is large."""
    temp = temporary_name(local)
    descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        landed = None
        if named and (attrs.size or 0) >= STREAM_MIN_BYTES and session.pool and session.connection:
            landed = await _stream(session.pool, session.connection, remote, descriptor, attrs.size or 0, session.meter)
        if landed is None:
            landed = await _read_over_sftp(session, remote, descriptor, attrs.size or 0)
        mode = attrs.permissions if attrs.permissions is not None else 0o600
        mtime = attrs.mtime or 0
        # No setuid/setgid from a remote server: run as root, that would plant privileged programs here.
        os.fchmod(descriptor, mode & 0o1777)
        os.utime(descriptor, (attrs.atime if attrs.atime is not None else mtime, mtime))
        os.close(descriptor)
        descriptor = -1
        os.replace(temp, local)
    except BaseException:
        if descriptor >= 0:
            os.close(descriptor)
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    return landed


async def _stream(
    pool: SshPool, connection: PooledConnection, remote: str, descriptor: int, expected: int, meter: Meter
) -> Landed | None:
    sink = Sink(descriptor, expected)
    try:
        size = await stream_file(pool, connection, remote, sink, meter.add)
        return None if size is None else Landed(size, await sink.finish())
    finally:
        await sink.stop()


async def _read_over_sftp(session: Session, remote: str, descriptor: int, expected: int) -> Landed:
    source = await session.sftp.open(remote, "rb", encoding=None, block_size=0)  # one request per read
    try:
        landed = await _pull(source, descriptor, expected, session.meter)
    except BaseException:
        await quietly(source.close())
        raise
    await source.close()
    return landed


async def _pull(source: SFTPClientFile, descriptor: int, expected: int, meter: Meter) -> Landed:
    """Read the remote file in order with up to READ_AHEAD block reads ahead, hashing and writing each block
    as it comes. Reads go up to the size seen at the start; then one more read tells whether the file ends
    there or grew (growth is followed, within the size limit)."""
    sink = Sink(descriptor, expected)
    pending: deque[tuple[int, asyncio.Task[bytes]]] = deque()
    next_offset = 0
    horizon = expected
    position = 0
    try:
        while True:
            while next_offset < horizon and len(pending) < READ_AHEAD:
                pending.append((next_offset, asyncio.ensure_future(source.read(BLOCK_SIZE, next_offset))))
                next_offset += BLOCK_SIZE
            if not pending:
                horizon = next_offset + BLOCK_SIZE  # everything asked for arrived: ask one block more
                continue
            offset, request = pending[0]
            data = await request
            pending.popleft()
            got = 0
            while data:
                await meter.add(len(data))
                await sink.add(data)
                got += len(data)
                if got == BLOCK_SIZE:
                    break
                # A short read: the file ends here, or the server sent less. Fill this block before the
                # blocks after it; an empty answer is the end of the file.
                data = await source.read(BLOCK_SIZE - got, offset + got)
            position += got
            if got < BLOCK_SIZE:
                return Landed(position, await sink.finish())
    finally:
        _abandon(request for _, request in pending)
        await sink.stop()


# -- upload -----------------------------------------------------------------------------------------------


async def upload_file(session: Session, local: str, remote: str, *, follow: bool) -> Landed:
    """Copy the local file to `remote` with its mode and times. `follow`: the path was named by the caller
    (a symlink there is followed); inside a tree it is not (the scan saw a regular file; a swap for a
    symlink since then is refused)."""
    flags = os.O_RDONLY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    descriptor = os.open(local, flags)
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise ToolError("NotAFile", "not a regular file")
        temp = temporary_name(remote)
        sftp = session.sftp
        target = await sftp.open(temp, _WRITE_NEW, SFTPAttrs(permissions=0o600), encoding=None, block_size=0)
        try:
            try:
                landed = await _push(descriptor, target, session.meter)
            except BaseException:
                await quietly(target.close())
                raise
            await target.close()
            attrs = SFTPAttrs(
                permissions=status.st_mode & 0o7777, atime=int(status.st_atime), mtime=int(status.st_mtime)
            )
            await sftp.setstat(temp, attrs)
            await rename_remote(sftp, temp, remote)
        except BaseException:
            await remove_remote(session, temp)
            raise
    finally:
        os.close(descriptor)
    return landed


async def _push(descriptor: int, target: SFTPClientFile, meter: Meter) -> Landed:
    """Read the local file in order and keep up to WRITE_AHEAD block writes in flight; a failed write stops
    the copy with the server's error."""
    digest = hashlib.sha256()
    in_flight: set[asyncio.Task[int]] = set()
    offset = 0
    try:
        while True:
            data = os.read(descriptor, BLOCK_SIZE)
            if not data:
                break
            await meter.add(len(data))  # over the limit: the block is never sent
            digest.update(data)
            while len(in_flight) >= WRITE_AHEAD:
                in_flight = await _settle_one(in_flight)
            in_flight.add(asyncio.ensure_future(target.write(data, offset)))
            offset += len(data)
        while in_flight:
            in_flight = await _settle_one(in_flight)
    finally:
        _abandon(in_flight)
    return Landed(offset, digest.hexdigest())


async def _settle_one(in_flight: set[asyncio.Task[int]]) -> set[asyncio.Task[int]]:
    done, rest = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
    try:
        for task in done:
            task.result()  # the server's error for that block, if any
    except BaseException:
        _abandon(rest)
        _abandon(done)
        raise
    return rest


async def rename_remote(sftp: SFTPClient, source: str, target: str) -> None:
    """Atomically replace `target` (OpenSSH's posix-rename); a server without it can only rename onto a free
    name."""
    try:
        await sftp.posix_rename(source, target)
    except asyncssh.SFTPOpUnsupported:
        await sftp.rename(source, target)


async def remove_remote(session: Session, path: str) -> None:
    """Remove a temporary file after a failure, also while the call is being cancelled (shielded, bounded by
    CLEANUP_TIMEOUT); one that cannot be removed is reported."""
    with anyio.CancelScope(shield=True):
        try:
            await asyncio.wait_for(session.sftp.remove(path), CLEANUP_TIMEOUT)
        except Exception:
            session.leftovers.append(path)


# -- symlinks and directories -----------------------------------------------------------------------------


async def make_remote_link(session: Session, link_target: str, remote: str) -> None:
    temp = temporary_name(remote)
    await session.sftp.symlink(link_target, temp)
    try:
        await rename_remote(session.sftp, temp, remote)
    except BaseException:
        await remove_remote(session, temp)
        raise


def make_local_link(link_target: str, local: str) -> None:
    temp = temporary_name(local)
    os.symlink(link_target, temp)
    try:
        os.replace(temp, local)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


# -- helpers ----------------------------------------------------------------------------------------------


async def quietly(step: Awaitable[object], timeout: float = CLEANUP_TIMEOUT) -> None:
    """A best-effort step on the way out of a failure: bounded, shielded from a cancellation in progress (the
    client's cancel is delivered again at every await), and its own failure hides nothing."""
    with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
        await asyncio.wait_for(step, timeout)


def _abandon(tasks: Iterable[asyncio.Future[Any]]) -> None:
    for task in tasks:
        task.cancel()
        task.add_done_callback(_retrieve)


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark an abandoned request's outcome as seen (no 'exception was never retrieved' noise)."""
    if not task.cancelled():
        task.exception()
