"""A named remote file's bytes over the remote `scp -f` (the source side of the SCP protocol) on an exec channel:
one stream of channel data instead of an SFTP request and reply per 255 KiB. For a large download that is ~30%
less CPU in this process and in the remote sshd, and the difference between ~0.8x and ~1.0x `scp` here (ADR 0029).

Only the bytes come this way. The transfer is still planned, checked and scanned over SFTP; the bytes land in
the same temporary file, through the same Sink (SHA-256 as they pass), under the same size limit, and are
renamed the same way. The SCP header's name is never used (the destination is the call's own path, so a
server's `../x` cannot lead anywhere: scp's CVE-2019-6111), nor its mode (the scan's is, setuid/setgid dropped).

The stream is only tried where it cannot do harm, and SFTP does the work whenever it is not there: nothing is
written before the remote `scp` has announced the file, so every refusal falls back to SFTP with nothing to undo.
- A host without `scp`, a path the remote scp cannot read, a name that is not UTF-8: it says so and exits.
- A login restricted to SFTP: `ForceCommand internal-sftp` refuses the exec; an SFTP server run as the forced
  command reads the five NUL bytes sent first (the three acknowledgements `scp -f` reads for one file) as a
  malformed request and exits.
- A login shell that prints on start-up: the stream starts after a marker line with a random nonce.
- Anything else that does not announce the file within START_TIMEOUT.
A connection whose host refused once does not try again (`PooledConnection.streams_files`).

Memory stays bounded when the destination is slower than the network (a loaded machine, a slow disk) by reading
a whole channel window at a time. asyncssh (2.24) grants the sender a full window again whenever it hands a
packet on, counting none of the data it still holds back for a paused reader; a reader that takes less than the
window per read therefore let the sender run up to twice as fast as it read, the excess piling up in the
channel (+52–89 MiB in 1 GiB, ADR 0029 Round 4). Taking the window each time it is full (the reader's buffer
pauses the channel at one window), at most one window is granted per window read: held data stays within two
windows, plus the read in hand and the batch on the Sink's worker (~8 MiB).
"""

from __future__ import annotations

import asyncio
import re
import secrets
import shlex
from collections.abc import Awaitable, Callable

import asyncssh

from relay_shell.errors import ToolError
from relay_shell.ssh.pool import PooledConnection, SshPool
from relay_shell.ssh.transfers.local_io import Sink

Count = Callable[[int], Awaitable[None]]  # the call's Meter.add: the size limit and progress

STREAM_MIN_BYTES = 16 * 1024 * 1024  # below this the exec and the remote scp cost more than SFTP's requests
START_TIMEOUT = 10.0  # seconds for the login shell to start scp and scp to announce the file
# The channel's receive window, asyncssh's default and OpenSSH's, and the most read at once: see the docstring.
WINDOW = 2 * 1024 * 1024
NOISE_LIMIT = 64 * 1024  # bytes of login-shell output looked through for the marker
# `scp -f` reads one acknowledgement before it starts, one after the file's header and one after its data.
ACKNOWLEDGEMENTS = b"\0" * 5
_HEADER = re.compile(rb"C([0-7]{4}) ([0-9]{1,20}) [^\n]*\n")


async def stream_file(pool: SshPool, connection: PooledConnection, remote: str, sink: Sink, count: Count) -> int | None:
    """Stream `remote` into `sink`: the byte count, or None when it will not come this way (nothing was
    written). A failure once the data flows is the copy's."""
    if not connection.streams_files or not pool.reserve(connection):
        return None
    process: asyncssh.SSHClientProcess[bytes] | None = None
    try:
        try:
            marker = f"RELAY-SCP-{secrets.token_hex(8)}"
            command = f"printf '%s\\n' {marker}; exec scp -f -- {shlex.quote(remote)}"
            command.encode("utf-8")  # a name that is not UTF-8 cannot be spelled in the command: SFTP takes it
            process = await connection.connection.create_process(
                command, encoding=None, stderr=asyncssh.DEVNULL, window=WINDOW
            )
            process.stdin.write(ACKNOWLEDGEMENTS)
            async with asyncio.timeout(START_TIMEOUT):
                size = await _announced_size(process.stdout, marker.encode())
        except (UnicodeEncodeError, asyncssh.ChannelOpenError):
            return None
        except (TimeoutError, _NoScp):
            connection.streams_files = False
            return None
        if size is not None:
            await _receive(process.stdout, size, sink, count)
        return size
    finally:
        if process is not None:
            process.close()
        pool.release(connection)


class _NoScp(Exception):
    """The host did not run `scp -f` for us: no scp, a forced command, or a login that prints without end."""


async def _announced_size(stdout: asyncssh.SSHReader[bytes], marker: bytes) -> int | None:
    """The size in scp's `C<mode> <size> <name>` line after the marker line; None when scp answered with an
    error line for this file (it cannot read it: SFTP will say why)."""
    seen = 0
    while True:
        line = await stdout.readline()
        seen += len(line)
        if not line.endswith(b"\n") or seen > NOISE_LIMIT:
            raise _NoScp
        if line.rstrip(b"\n") == marker:
            break
    header = await stdout.readline()
    if header[:1] in (b"\x01", b"\x02"):
        return None
    found = _HEADER.fullmatch(header)
    if found is None:
        raise _NoScp
    return int(found.group(2))


async def _receive(stdout: asyncssh.SSHReader[bytes], size: int, sink: Sink, count: Count) -> None:
    left = size
    while left:
        data = await stdout.read(min(left, WINDOW))
        if not data:
            raise ToolError("StreamEnded", f"the remote scp stopped after {size - left} of {size} bytes")
        left -= len(data)
        await count(len(data))
        await sink.add(data)
    status = await stdout.read(1)
    if status != b"\0":
        # scp -f pads a file that shrank while it was read with zeros, then says why: the copy is not the file.
        reason = (await stdout.readline()).decode("utf-8", "replace").strip() if status else "no status"
        raise ToolError("SourceChanged", f"the remote scp could not read the whole file ({reason[:200]})")
