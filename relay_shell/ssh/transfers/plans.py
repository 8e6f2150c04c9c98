"""ssh_upload and ssh_download: validate the paths, resolve the host (policy sees every spelling of it and what
moves where), then copy a file or a tree over one SFTP session on a pooled connection.

What a transfer means (ADR 0012):
- The destination path names the result itself, never a directory to put it in: uploading `app.tar` to
  `/srv/app.tar` writes `/srv/app.tar`, and a directory already there is refused, not written into. A tree
  (`recursive`) is merged into an existing directory: files there are replaced, type clashes are reported.
- Trees hold directories, regular files and symlinks. A symlink inside a tree is copied as a symlink (its
  target text unchanged), never followed — like rsync -a and tar, unlike scp -r: following could copy files
  outside the tree the call names, loop, or pull in the whole filesystem. The paths named in the call are
  followed. Devices, sockets and FIFOs are skipped and reported.
- Mode bits and times (access and modification, whole seconds: SFTP version 3) travel with files and with the
  directories the transfer creates; existing directories keep theirs. Ownership does not travel.
- Every file lands under a temporary name and is renamed over the final name when complete (`sftp_files`).
- All files together may not exceed RELAY_SHELL_MAX_TRANSFER_BYTES: checked on the scan before anything is
  written, and again while copying (a file may grow).
- The result and the audit record (`target.transfer`) list what arrived — path, bytes, SHA-256 of every file
  (the first MAX_LISTED; `manifest_sha256` commits to all of them) — and what did not, with why.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import stat
import time

import asyncssh
from asyncssh import SFTPClient

from relay_shell.arguments import call_limits, check_no_nul
from relay_shell.errors import ArgumentError, ToolError
from relay_shell.plan import Execution, Outcome, Plan, ProgressFn, Subject
from relay_shell.ssh.connection_args import ConnectionArgs
from relay_shell.ssh.pool import PooledConnection
from relay_shell.ssh.remote_exec import on_channel
from relay_shell.ssh.state import Ssh
from relay_shell.ssh.target import Route, target_record
from relay_shell.ssh.transfers.ends import (
    CONNECTION_LOST,
    KIND_NAMES,
    Clash,
    Ends,
    Entry,
    Job,
    Kind,
    path_error,
    reason_of,
)
from relay_shell.ssh.transfers.report import TransferReport
from relay_shell.ssh.transfers.sftp_files import Meter, Session, TransferTooLarge, quietly

MAX_PATH = 4096


# -- planning ----------------------------------------------------------------------------------------------


def prepare_upload(
    ssh: Ssh,
    *,
    host: str,
    local_path: str,
    remote_path: str,
    recursive: bool,
    timeout: float,
    connection: ConnectionArgs,
) -> Plan:
    local = _local_argument("local_path", local_path)
    remote = _remote_argument(remote_path)
    try:
        status = os.stat(local)
    except OSError as exc:
        raise path_error(
            "local_path", local_path, exc, "an existing file, or a directory with recursive=true"
        ) from None
    if stat.S_ISDIR(status.st_mode) and not recursive:
        raise ToolError(
            "IsADirectory", f"local_path: {local_path!r} is a directory; allowed: a file, or recursive=true to copy it"
        )
    if not stat.S_ISDIR(status.st_mode) and not stat.S_ISREG(status.st_mode):
        raise ToolError(
            "NotAFile", f"local_path: {local_path!r} is a device, socket or FIFO; allowed: a file or a directory"
        )
    if not os.access(local, os.R_OK):
        raise ToolError("PermissionDenied", f"local_path: {local_path!r} is not readable (permission denied)")
    route = ssh.route(host, connection)
    job = Job("upload", route.target.name, local, remote, recursive, ssh.settings.ssh.max_transfer_bytes)
    what = f"upload {local} -> {route.target.name}:{remote}"
    return _plan(ssh, route, connection, job, timeout, what, writes=remote, tree=recursive)


def prepare_download(
    ssh: Ssh,
    *,
    host: str,
    remote_path: str,
    local_path: str,
    recursive: bool,
    timeout: float,
    connection: ConnectionArgs,
) -> Plan:
    remote = _remote_argument(remote_path)
    local = _local_argument("local_path", local_path)
    parent = os.path.dirname(local)
    try:
        parent_status = os.stat(parent)
    except OSError as exc:
        raise path_error(
            "local_path", parent, exc, "a path in an existing directory", what="the directory that would hold it"
        ) from None
    if not stat.S_ISDIR(parent_status.st_mode):
        raise ToolError("NotADirectory", f"local_path: {parent!r} is not a directory; allowed: a path in a directory")
    route = ssh.route(host, connection)
    job = Job("download", route.target.name, local, remote, recursive, ssh.settings.ssh.max_transfer_bytes)
    what = f"download {route.target.name}:{remote} -> {local}"
    return _plan(ssh, route, connection, job, timeout, what, writes=os.path.realpath(local), tree=recursive)


def _local_argument(argument: str, value: str) -> str:
    _check_path_text(argument, value)
    return os.path.abspath(os.path.expanduser(value))


def _remote_argument(value: str) -> str:
    """SFTP paths are relative to the login directory; `~` and `~/x` mean the same thing there. The path policy
    sees is the one written: `..` is refused (the server resolves it through symlinks policy cannot see), and
    `//` and `/./` are collapsed, so `/etc//shadow` is classified as `/etc/shadow`."""
    _check_path_text("remote_path", value)
    if value == "~":
        return "."
    path = value[2:] or "." if value.startswith("~/") else value
    if ".." in path.split("/"):
        raise ArgumentError(
            f"remote_path: {value[:200]!r} has a '..' component; allowed: an absolute path, or a path below the "
            "login directory, without '..'"
        )
    path = posixpath.normpath(path)
    return "/" + path.lstrip("/") if path.startswith("/") else path


def _check_path_text(argument: str, value: str) -> None:
    if not value.strip():
        raise ArgumentError(f"{argument}: is empty; allowed: a path")
    check_no_nul(argument, value)
    if len(value) > MAX_PATH:
        raise ArgumentError(f"{argument}: is {len(value)} characters long; allowed: at most {MAX_PATH}")


def _plan(
    ssh: Ssh, route: Route, connection: ConnectionArgs, job: Job, timeout: float, what: str, writes: str, tree: bool
) -> Plan:
    notes: list[str] = []
    timeout_value, _ = call_limits(ssh.settings, timeout, None, notes)
    target = target_record(route)
    plan = Plan(
        subject=Subject(
            hosts=route.spellings,
            unverified_host_key=connection.known_hosts == "ignore",
            transfer=what,
            transfer_writes=writes,
            transfer_tree=tree,
        ),
        execute=lambda progress: _execute(ssh, route, job, plan, progress),  # `plan` is bound by then
        notes=notes,
        timeout=timeout_value,
        target=target,
        progress_unit="bytes",
    )
    target["transfer"] = TransferReport(job, ssh.settings.limits.max_output).record()
    return plan


# -- execution ---------------------------------------------------------------------------------------------


async def _execute(ssh: Ssh, route: Route, job: Job, plan: Plan, progress: ProgressFn) -> Execution:
    target = plan.target
    assert target is not None and plan.timeout is not None
    started = time.monotonic()
    deadline = started + plan.timeout
    report = TransferReport(job, ssh.settings.limits.max_output)
    meter = Meter(job.limit, progress)
    stopped: str | None = None
    status: Outcome = "ok"
    error: str | None = None

    async def use(connection: PooledConnection) -> None:
        sftp = await _open_sftp(ssh, connection, route, deadline)
        connection.channels_open += 1
        try:
            target["host_key"] = report.host_key = connection.host_key
            if connection.decision.announce_new_key():
                plan.notes.append(
                    f"host key {connection.host_key} of {route.target.address}:{route.target.port} was not known "
                    "and is now trusted (accept-new); it was added to known_hosts"
                )
            session = Session(sftp, meter, report.leftovers, ssh.pool, connection)
            await _transfer(session, job, report, plan)
        except CONNECTION_LOST as exc:
            if not report.started and not isinstance(exc, asyncssh.SFTPError):
                raise  # lost before anything was copied: on_channel tries again on a fresh connection
            # Copying had begun: a second pass would start over, so the transfer ends here, reported.
            raise ToolError("ConnectionLost", f"{route.target.describe()}: the connection was lost ({exc})") from None
        finally:
            connection.channels_open -= 1
            sftp.exit()
            await quietly(sftp.wait_closed(), 1.0)

    try:
        async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
            await on_channel(ssh.pool, route, deadline, use)
    except TimeoutError:
        status = "timeout"
        stopped = f"not transferred: the timeout ({plan.timeout:g}s) came first"
    except ToolError as exc:
        if not report.started or not job.recursive:
            raise  # nothing was copied, or the one file was not: a plain error naming the argument
        status, error = "error", f"{exc.kind}: {exc}"
        stopped = f"not transferred: {exc.kind}"
    finally:
        target["transfer"] = report.record()  # also when the client cancelled: the runner records it
    report.close_out(stopped)
    target["transfer"] = report.record()
    if status == "ok" and report.failed_count:
        status = "error"
        error = (
            f"PartialTransfer: {report.failed_count} of {report.entries_total} entries did not arrive (see `failed`); "
            f"{report.files_done} files ({report.bytes_done} bytes) did"
        )
    return report.execution(status, error, time.monotonic() - started)


async def _open_sftp(ssh: Ssh, connection: PooledConnection, route: Route, deadline: float) -> SFTPClient:
    """The sftp subsystem on a channel of the pooled connection (on_channel reserved it). Paths are decoded
    with surrogateescape so any byte string a server has round-trips."""
    remaining = max(0.01, deadline - time.monotonic())
    try:
        return await asyncio.wait_for(connection.connection.start_sftp_client(path_errors="surrogateescape"), remaining)
    except TimeoutError:
        ssh.pool.discard(connection)
        raise ToolError(
            "ServerNotResponding",
            f"{route.target.describe()}: the server did not open an SFTP session in time; the connection was "
            "dropped (the next call reconnects)",
        ) from None
    except asyncssh.ChannelOpenError as exc:
        if exc.code != asyncssh.OPEN_REQUEST_SESSION_FAILED:
            raise  # the channel itself was refused: on_channel tries another connection
        raise ToolError(
            "SftpUnavailable",
            f"{route.target.describe()}: the server refused the sftp subsystem (its sshd_config needs a "
            "`Subsystem sftp` line)",
        ) from None


async def _transfer(session: Session, job: Job, report: TransferReport, plan: Plan) -> None:
    """Check both ends, scan the source, then copy entry by entry (parents before children)."""
    ends = Ends(session, job)
    source_kind = await ends.source_kind()
    destination = await ends.destination()
    source = f"{job.source_argument}: {ends.source_root!r}{job.on_host(job.source_argument)}"
    if source_kind == "dir" and not job.recursive:
        raise ToolError("IsADirectory", f"{source} is a directory; allowed: a file, or recursive=true to copy it")
    if source_kind == "other":
        raise ToolError("NotAFile", f"{source} is a device, socket or FIFO; allowed: a file or a directory")
    await ends.check_destination(source_kind, destination)
    entries, unreadable = await ends.scan(source_kind)
    total = sum(entry.size for entry in entries if entry.kind == "file")
    if total > job.limit:
        raise TransferTooLarge(
            f"{source} holds {total} bytes; allowed: at most {job.limit} bytes per call "
            "(RELAY_SHELL_MAX_TRANSFER_BYTES); nothing was transferred"
        )
    report.expect(entries, total)
    for relative, reason in unreadable:
        report.fail_path(relative, reason)
    plan.progress_total = total
    plan.progress_unit = f"bytes (0 of {report.files_total} files done)"
    await _copy_entries(ends, entries, destination, report, plan)


async def _copy_entries(
    ends: Ends, entries: list[Entry], destination: Kind | None, report: TransferReport, plan: Plan
) -> None:
    """Each entry in order. In a tree one entry's failure is reported and the others go on (what lies below a
    directory that did not arrive is reported too); a lost connection, the size limit or the timeout ends it
    all. Directories made here get their mode and times last, children first: a read-only one is finished
    after its contents are written."""
    job = ends.job
    created: list[tuple[str, Entry]] = []
    fresh: set[str] = set()  # directories made by this transfer: nothing in them needs a look first
    failed_dirs: set[str] = set()
    for index, entry in enumerate(entries):
        report.current = index
        parent = posixpath.dirname(entry.relative) if entry.relative else None
        if parent is not None and parent in failed_dirs:
            report.fail(index, "its directory did not arrive")
            if entry.kind == "dir":
                failed_dirs.add(entry.relative)
            continue
        if entry.kind == "other" or (entry.kind == "link" and entry.link is None):
            report.fail(index, "skipped: a device, socket or FIFO")
            continue
        path = ends.destination_path(entry.relative)
        try:
            existing = None if parent in fresh else await ends.kind_at(entry, destination)
            if entry.kind != "dir" and existing == "dir":
                raise Clash(f"exists as a directory; a {KIND_NAMES[entry.kind]} cannot replace it")
            if entry.kind == "dir":
                if existing is None:
                    await ends.make_dir(path)
                    created.append((path, entry))
                    fresh.add(entry.relative)
                elif existing != "dir":
                    raise Clash(f"exists as a {KIND_NAMES[existing]}; a directory cannot replace it")
                report.dir_done(index)
            elif entry.kind == "file":
                report.file_done(index, path, await ends.copy(entry, path))
                plan.progress_unit = f"bytes ({report.files_done} of {report.files_total} files done)"
            elif entry.link is not None:
                await ends.make_link(entry.link, path)
                report.link_done(index, path, entry.link)
        except CONNECTION_LOST:
            raise
        except TransferTooLarge:
            raise
        except (Clash, OSError, ValueError, asyncssh.SFTPError, ToolError) as exc:  # ValueError: a name with NUL
            report.fail(index, reason_of(exc))
            if not job.recursive:
                raise ends.single_file_error(exc) from None
            if entry.kind == "dir":
                failed_dirs.add(entry.relative)
    report.current = None
    for path, entry in reversed(created):
        try:
            await ends.finish_dir(path, entry)
        except (OSError, asyncssh.SFTPError) as exc:
            report.note(f"{path}: mode and times not set ({reason_of(exc)})")
