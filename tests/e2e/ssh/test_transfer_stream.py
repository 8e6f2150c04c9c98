"""End to end: a large named file is downloaded over the remote `scp -f` (relay_shell/ssh/transfers/scp_stream.py,
ADR 0029), and over SFTP wherever the host will not stream it, with every guarantee of ADR 0012 either way.

Each host is a real sshd whose log (LogLevel VERBOSE) says which sessions a download opened: one for SFTP, which
every transfer opens first, and one more for the stream's exec ("Starting session: command" on a plain host). A
connection whose host would not stream does not try again, so a second download there opens one session only.

    h01  a plain host: the stream is used
    h02  no `scp` on the login's PATH (a forced command that empties PATH, then runs what was asked)
    h03  ForceCommand internal-sftp: an SFTP-only account; every exec is refused
    h04  ForceCommand sftp-server: an SFTP server answers every session, the stream's exec included
    h05  a login that prints on stdout before any command (except the sftp subsystem, which would break)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp_types import CallToolResult

from tests.conftest import connect, text_of
from tests.e2e.ssh.transfer_helpers import assert_ok, download, records, sha256_file, temporaries
from tests.sshd import SFTP_SERVER, SshFleet

pytestmark = pytest.mark.anyio

STREAMED = 20 * 1024 * 1024  # above STREAM_MIN_BYTES (16 MiB)
NOISE = "C0644 5 not-the-file"  # what a confused client could take for scp's header
VERBOSE = "LogLevel VERBOSE"
HOSTS = {
    "h01": [VERBOSE],
    "h02": [VERBOSE, 'ForceCommand PATH=/nonexistent; eval "$SSH_ORIGINAL_COMMAND"'],
    "h03": [VERBOSE, "ForceCommand internal-sftp"],
    "h04": [VERBOSE, f"ForceCommand {SFTP_SERVER}"],
    "h05": [
        VERBOSE,
        f'ForceCommand case "$SSH_ORIGINAL_COMMAND" in *sftp-server) ;; *) echo "{NOISE}"; echo hello;; esac; '
        'eval "$SSH_ORIGINAL_COMMAND"',
    ],
}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshFleet]:
    with SshFleet(tmp_path_factory.mktemp("fleet"), len(HOSTS), first_octet=120, server_lines=HOSTS) as started:
        started.trust()
        yield started


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """20 MiB of random bytes, setuid and group-writable (mode 4775)."""
    path = tmp_path_factory.mktemp("source") / "source.bin"
    data = os.urandom(STREAMED)
    path.write_bytes(data)
    path.chmod(0o4775)
    os.utime(path, (1_500_000_000, 1_600_000_000))
    return path, hashlib.sha256(data).hexdigest()


def sessions(fleet: SshFleet, alias: str, kind: str = "") -> int:
    """Sessions (of a kind: "command", "subsystem 'sftp'", "forced-command") the host's sshd has started so far."""
    return fleet.log(alias).count(f"Starting session: {kind}")


async def download_and_check(
    client: Client, fleet: SshFleet, alias: str, source: tuple[Path, str], tmp_path: Path
) -> tuple[int, float]:
    """Download `source` from `alias` and check what arrived: the sessions it took and the seconds."""
    path, digest = source
    before = sessions(fleet, alias)
    local = tmp_path / f"from-{alias}.bin"
    started = time.monotonic()
    got = assert_ok(await download(client, path, local, host=alias))
    elapsed = time.monotonic() - started
    assert sha256_file(local) == digest
    assert got["files"] == [{"path": str(local), "bytes": STREAMED, "sha256": digest}]
    status = local.stat()
    assert stat.S_IMODE(status.st_mode) == 0o775, oct(status.st_mode)  # setuid dropped, the rest kept
    assert status.st_mtime == 1_600_000_000
    assert temporaries(tmp_path) == []
    return sessions(fleet, alias) - before, elapsed


async def test_a_large_named_file_comes_over_scp_and_lands_like_any_other(
    client: Client, fleet: SshFleet, source: tuple[Path, str], tmp_path: Path
) -> None:
    for _ in range(2):
        before = sessions(fleet, "h01", "command"), sessions(fleet, "h01", "subsystem 'sftp'")
        opened, _ = await download_and_check(client, fleet, "h01", source, tmp_path)
        assert opened == 2
        assert (sessions(fleet, "h01", "command"), sessions(fleet, "h01", "subsystem 'sftp'")) == (
            before[0] + 1,
            before[1] + 1,
        )
    # A file inside a tree is read over SFTP: no exec.
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy2(source[0], tree / "big.bin")
    (tree / "link").symlink_to("/etc/shadow")  # a symlink inside a tree stays a symlink
    before = sessions(fleet, "h01", "command")
    got = assert_ok(await download(client, tree, tmp_path / "tree-copy", recursive=True))
    assert sessions(fleet, "h01", "command") == before, "a file inside a tree came over an exec"
    assert sha256_file(tmp_path / "tree-copy" / "big.bin") == source[1]
    assert os.readlink(tmp_path / "tree-copy" / "link") == "/etc/shadow"
    assert got["files_done"] == 1


@pytest.mark.parametrize("alias", ["h02", "h03", "h04"])
async def test_a_host_that_will_not_stream_gets_sftp_at_once(
    client: Client, fleet: SshFleet, source: tuple[Path, str], tmp_path: Path, alias: str
) -> None:
    opened, elapsed = await download_and_check(client, fleet, alias, source, tmp_path)
    assert opened == 2, opened  # SFTP, and the stream's exec that came to nothing
    assert elapsed < 8, f"{alias}: {elapsed:.1f}s: the fallback waited for the stream's start timeout (10 s)"
    opened, _ = await download_and_check(client, fleet, alias, source, tmp_path)
    assert opened == 1, f"{alias}: tried the stream again on the same connection"


async def test_a_login_that_prints_does_not_confuse_the_stream(
    client: Client, fleet: SshFleet, source: tuple[Path, str], tmp_path: Path
) -> None:
    for _ in range(2):  # streamed both times, past "C0644 5 not-the-file" and the rest of the greeting
        opened, _ = await download_and_check(client, fleet, "h05", source, tmp_path)
        assert opened == 2, "the stream failed: the connection stopped trying it"


async def test_a_file_that_shrinks_while_streamed_fails_and_leaves_nothing(
    client: Client, fleet: SshFleet, tmp_path: Path
) -> None:
    remote = tmp_path / "shrinking.bin"
    pattern = os.urandom(1024 * 1024)
    with remote.open("wb") as out:
        for _ in range(1024):
            out.write(pattern)
    local = tmp_path / "landing" / "shrunk.bin"
    local.parent.mkdir()
    before = sessions(fleet, "h01", "command")
    results: list[CallToolResult] = []
    async with anyio.create_task_group() as group:

        async def call() -> None:
            results.append(await download(client, remote, local))

        group.start_soon(call)
        deadline = time.monotonic() + 30
        while not any(os.path.getsize(local.parent / name) for name in temporaries(local.parent)):
            assert time.monotonic() < deadline, "no bytes arrived"
            await anyio.sleep(0.002)
        os.truncate(remote, 1024 * 1024)  # bytes are arriving: the file loses most of the rest
    assert sessions(fleet, "h01", "command") == before + 1  # it was the stream
    text = text_of(results[0])
    assert results[0].is_error and "SourceChanged" in text, text
    assert not local.exists() and temporaries(local.parent) == []


async def test_a_full_disk_under_the_worker_fails_the_file_and_removes_it(
    client: Client, fleet: SshFleet, source: tuple[Path, str], tmp_path: Path
) -> None:
    small = tmp_path / "small-fs"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(small)], check=True)
    try:
        for alias in ("h01", "h03"):  # streamed, and read over SFTP
            result = await download(client, source[0], small / f"{alias}.bin", host=alias)
            text = text_of(result)
            assert result.is_error and "NoSpace" in text and "local_path" in text, text
            assert os.listdir(small) == [], os.listdir(small)
        assert not (await client.call_tool("server_info", {})).is_error
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_records_name_the_files_whichever_way_they_came(audit_path: Path, source: tuple[Path, str]) -> None:
    done = [record for record in records(audit_path, "ssh_download") if record["outcome"] == "ok"]
    assert done, "no download was recorded"
    for record in done:
        files = record["target"]["transfer"]["files"]
        assert all(entry["sha256"] == source[1] for entry in files if entry.get("bytes") == STREAMED), files


async def test_the_download_tool_says_how_its_bytes_come(tmp_path: Path) -> None:
    """What a client lists for ssh_download names the remote `scp -f` as well as SFTP (ADR 0029), not SFTP alone."""
    async with connect(tmp_path / "audit.jsonl") as client:
        (tool,) = [tool for tool in (await client.list_tools()).tools if tool.name == "ssh_download"]
    assert tool.description is not None and tool.title is not None
    assert "scp -f" in tool.description and "SFTP" in tool.description, tool.description
    assert "scp" in tool.title and "SFTP" in tool.title, tool.title
