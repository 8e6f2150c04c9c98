"""End to end: ssh_upload and ssh_download through a real relay-shell stdio server against a real OpenSSH fleet
(tests/sshd.py, with its sftp-server subsystem). Fixtures: tests/e2e/ssh/conftest.py; helpers:
tests/e2e/ssh/transfer_helpers.py.

The fleet's hosts are sshd processes on this machine, so a "remote" path is a path here too: every test checks
what arrived with the file system itself (content, mode, mtime, symlinks, leftovers), never with the tool's own
word for it.

Two servers serve the module (a server costs ~0.7 s to start):

    open     default policy; the 1 GiB file, the timeouts, the trees and the bad-input cases
    guarded  policy guarded, uploads allowed (`^upload `), downloads not; h02's address denied by a pattern;
             RELAY_SHELL_MAX_TRANSFER_BYTES=16384

Hosts: h01 for everything that transfers, h02 the denied one (its sshd must never see a transfer), h03 killed
in the middle of a transfer.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.conftest import assert_error, connect, fields, read_records, text_of
from tests.e2e.ssh.transfer_helpers import (
    ATIME,
    GIB,
    MTIME,
    assert_ok,
    download,
    make_file,
    records,
    sha256_file,
    status_kib,
    temporaries,
    upload,
)
from tests.procs import server_pid
from tests.sshd import SshFleet

pytestmark = pytest.mark.anyio

RSS_GROWTH_LIMIT_KIB = 32 * 1024
GUARDED_LIMIT = 16384  # RELAY_SHELL_MAX_TRANSFER_BYTES of the guarded server


@pytest.fixture(scope="module")
def guarded_settings(fleet: SshFleet) -> dict[str, str]:
    """Uploads allowed (`^upload `), downloads not; h02's address denied; a small size limit."""
    denied = re.escape(fleet.host("h02").address)
    return {
        "policy_allow": json.dumps(["^upload "]),
        "policy_deny": json.dumps([f"^{denied}$"]),
        "max_transfer_bytes": str(GUARDED_LIMIT),
    }


# -- 1. single files -------------------------------------------------------------------------------------------


async def test_upload_keeps_content_mode_and_mtime(client: Client, tmp_path: Path) -> None:
    data = os.urandom(300_000) + b"\x00tail"  # more than one block, and not a multiple of it
    source = make_file(tmp_path / "source.bin", data, 0o640)
    target = tmp_path / "remote" / "copy.bin"
    target.parent.mkdir()
    got = assert_ok(await upload(client, source, target))
    status = target.stat()  # before reading it: a read moves the access time
    assert stat.S_IMODE(status.st_mode) == 0o640
    assert (int(status.st_mtime), int(status.st_atime)) == (MTIME, ATIME)
    assert target.read_bytes() == data
    digest = hashlib.sha256(data).hexdigest()
    assert got["files"] == [{"path": str(target), "bytes": len(data), "sha256": digest}]
    assert (got["files_done"], got["bytes_done"], got["files_total"], got["bytes_total"]) == (
        1,
        len(data),
        1,
        len(data),
    )
    assert got["host"] == "h01"
    assert text_of(await upload(client, source, target)).startswith("[uploaded 1 of 1 files (300005 bytes)")
    assert temporaries(tmp_path) == []


async def test_download_keeps_content_mode_and_mtime_and_replaces_a_file(client: Client, tmp_path: Path) -> None:
    data = b"line\n" * 70_000
    source = make_file(tmp_path / "remote.txt", data, 0o751, mtime=MTIME + 7)
    target = make_file(tmp_path / "local.txt", b"old content that is longer than nothing", 0o600)
    got = assert_ok(await download(client, source, target))
    assert target.read_bytes() == data
    status = target.stat()
    assert stat.S_IMODE(status.st_mode) == 0o751
    assert int(status.st_mtime) == MTIME + 7
    assert got["files"] == [{"path": str(target), "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}]
    assert temporaries(tmp_path) == []


async def test_empty_file_and_home_relative_remote_path(client: Client, tmp_path: Path) -> None:
    source = make_file(tmp_path / "empty", b"", 0o644)
    name = f"relay-transfer-test-{os.getpid()}.empty"
    home = Path(os.path.expanduser("~root"))
    try:
        got = assert_ok(await upload(client, source, f"~/{name}"))
        assert (home / name).read_bytes() == b""
        assert got["files"][0]["sha256"] == hashlib.sha256(b"").hexdigest()
        assert_ok(await download(client, name, tmp_path / "back"))  # relative: from the login directory
        assert (tmp_path / "back").read_bytes() == b""
    finally:
        (home / name).unlink(missing_ok=True)


async def test_progress_reports_bytes_against_the_total(
    client: Client, big_file: tuple[Path, str], big_dir: Path
) -> None:
    source, _ = big_file
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    target = big_dir / "progress.bin"
    try:
        result = await client.call_tool(
            "ssh_upload",
            {"host": "h01", "local_path": str(source), "remote_path": str(target), "timeout": 300},
            progress_callback=on_progress,
        )
        assert_ok(result)
    finally:
        target.unlink(missing_ok=True)
    # At most one notification a second; a 1 GiB copy takes more than one.
    assert seen, "no progress notification"
    assert all(total == GIB for _, total, _ in seen), seen
    assert all(0 < progress <= GIB for progress, _, _ in seen), seen
    assert [progress for progress, _, _ in seen] == sorted(progress for progress, _, _ in seen)
    assert seen[0][2] is not None and seen[0][2].endswith(f"of {GIB} bytes (0 of 1 files done)"), seen


# -- 2. trees ----------------------------------------------------------------------------------------------


def make_tree(root: Path) -> None:
    """Nested directories (one read-only), files with their own modes and mtimes, a relative symlink to a file
    in the tree, a symlink to a directory in the tree, and an absolute symlink out of it."""
    (root / "a" / "b" / "c").mkdir(parents=True)
    (root / "empty-dir").mkdir()
    make_file(root / "top.txt", b"top\n", 0o644, mtime=MTIME + 1)
    make_file(root / "a" / "script.sh", b"#!/bin/sh\necho hi\n", 0o755, mtime=MTIME + 2)
    make_file(root / "a" / "b" / "c" / "deep.bin", os.urandom(600_000), 0o600, mtime=MTIME + 3)
    os.symlink("b/c/deep.bin", root / "a" / "link-to-deep")
    os.symlink("a/b", root / "dir-link")
    os.symlink("/etc/hostname", root / "outside")  # must stay a link: following it would copy /etc/hostname
    make_file(root / "a" / "b" / "readonly-dir-file", b"x", 0o444)
    (root / "a" / "b").chmod(0o555)
    os.utime(root / "a", (ATIME, MTIME + 4))


def describe_tree(root: Path) -> dict[str, tuple[str, int, int | str]]:
    """relative path -> (kind, mode, content digest or link target); mtimes compared separately."""
    found: dict[str, tuple[str, int, int | str]] = {}
    for directory, names, files in os.walk(root):
        for name in names + files:
            path = Path(directory) / name
            relative = str(path.relative_to(root))
            status = path.lstat()
            if stat.S_ISLNK(status.st_mode):
                found[relative] = ("link", 0, os.readlink(path))
            elif stat.S_ISDIR(status.st_mode):
                found[relative] = ("dir", stat.S_IMODE(status.st_mode), 0)
            else:
                found[relative] = ("file", stat.S_IMODE(status.st_mode), sha256_file(path))
    return found


def file_mtimes(root: Path) -> dict[str, int]:
    return {
        str(Path(directory, name).relative_to(root)): int(Path(directory, name).lstat().st_mtime)
        for directory, names, files in os.walk(root)
        for name in names + files
        if not Path(directory, name).is_symlink()
    }


async def test_tree_round_trip_keeps_dirs_files_modes_times_and_symlinks(
    client: Client, tmp_path: Path, audit_path: Path
) -> None:
    source = tmp_path / "tree"
    make_tree(source)
    remote = tmp_path / "remote-tree"
    back = tmp_path / "back-tree"
    try:
        up = assert_ok(await upload(client, source, remote, recursive=True))
        down = assert_ok(await download(client, remote, back, recursive=True))
        expected = describe_tree(source)
        assert describe_tree(remote) == expected
        assert describe_tree(back) == expected
        assert file_mtimes(remote) == file_mtimes(source)
        assert file_mtimes(back) == file_mtimes(source)
        assert stat.S_IMODE(remote.stat().st_mode) == stat.S_IMODE(source.stat().st_mode)
        # Symlinks arrive as symlinks with the same target: the one out of the tree was not followed.
        assert os.readlink(remote / "outside") == "/etc/hostname"
        assert os.readlink(back / "dir-link") == "a/b"
        for got, root in ((up, remote), (down, back)):
            assert (got["files_done"], got["files_total"]) == (4, 4)
            assert got["bytes_done"] == got["bytes_total"] == 4 + 18 + 600_000 + 1
            listed = {entry["path"]: entry for entry in got["files"]}
            assert listed[str(root / "outside")] == {"path": str(root / "outside"), "link": "/etc/hostname"}
            for path, entry in listed.items():
                if "sha256" in entry:
                    assert entry["sha256"] == sha256_file(Path(path)), path
        text = text_of(await upload(client, source, remote, recursive=True))  # again: merged, same result
        assert text.startswith("[uploaded 4 of 4 files (600023 bytes), 5 directories, 3 symlinks: "), text
        assert describe_tree(remote) == expected
        assert temporaries(tmp_path) == []
    finally:
        for root in (source, remote, back):
            if (root / "a" / "b").exists():
                (root / "a" / "b").chmod(0o755)


async def test_tree_merge_replaces_symlink_not_its_target_and_reports_clashes(client: Client, tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "sub").mkdir(parents=True)
    make_file(source / "config", b"new config\n", 0o644)
    make_file(source / "clash", b"a file here\n", 0o644)
    make_file(source / "sub" / "inner", b"inner\n", 0o644)
    os.mkfifo(source / "pipe")
    destination = tmp_path / "dst"
    destination.mkdir()
    victim = make_file(tmp_path / "victim", b"must not change\n", 0o644)
    os.symlink(victim, destination / "config")  # a planted link where a file will land
    (destination / "clash").mkdir()  # a directory where the tree has a file
    make_file(destination / "kept", b"not in the source\n", 0o644)

    result = await upload(client, source, destination, recursive=True)
    assert result.is_error, text_of(result)
    got = fields(result)
    assert got["status"] == "error" and got["partial"] is True
    assert got["error"].startswith("PartialTransfer: 2 of 6 entries did not arrive"), got["error"]
    failed = {entry["path"]: entry["error"] for entry in got["failed"]}
    assert failed == {
        str(source / "clash"): "Clash: exists as a directory; a file cannot replace it",
        str(source / "pipe"): "skipped: a device, socket or FIFO",
    }
    # The link was replaced by the file; the file it pointed to is untouched.
    assert not (destination / "config").is_symlink()
    assert (destination / "config").read_bytes() == b"new config\n"
    assert victim.read_bytes() == b"must not change\n"
    assert (destination / "sub" / "inner").read_bytes() == b"inner\n"
    assert (destination / "kept").read_bytes() == b"not in the source\n"
    assert (destination / "clash").is_dir()
    text = text_of(result)
    assert text.startswith("[ERROR: PartialTransfer: 2 of 6 entries did not arrive"), text
    assert f"FAILED  {source / 'pipe'}: skipped: a device, socket or FIFO" in text


async def test_names_that_are_not_utf8_round_trip(client: Client, tmp_path: Path, audit_path: Path) -> None:
    source = tmp_path / "names"
    source.mkdir()
    raw = os.fsencode(source) + b"/caf\xe9.txt"  # Latin-1, not UTF-8: a name JSON cannot carry as is
    with open(raw, "wb") as out:
        out.write(b"bytes\n")
    copy = tmp_path / "copy"
    back = tmp_path / "back"
    got = assert_ok(await upload(client, source, copy, recursive=True))
    assert_ok(await download(client, copy, back, recursive=True))
    assert open(os.fsencode(copy) + b"/caf\xe9.txt", "rb").read() == b"bytes\n"
    assert open(os.fsencode(back) + b"/caf\xe9.txt", "rb").read() == b"bytes\n"
    assert got["files"][0]["path"] == f"{copy}/caf\\xe9.txt"  # shown escaped, in the result and the record
    assert records(audit_path, "ssh_upload")[-1]["target"]["transfer"]["files"][0]["path"] == f"{copy}/caf\\xe9.txt"


# -- 3. a 1 GiB file: memory stays bounded -----------------------------------------------------------------


async def test_one_gib_up_and_down_with_bounded_server_memory(
    client: Client, audit_path: Path, big_file: tuple[Path, str], big_dir: Path
) -> None:
    source, digest = big_file
    assert_ok(await client.call_tool("ssh_exec", {"host": "h01", "command": "true"}))  # asyncssh loaded, pool warm
    pid = server_pid(audit_path)
    uploaded = big_dir / "uploaded.bin"
    downloaded = big_dir / "downloaded.bin"
    try:
        for tool, local, remote, produced in (
            ("ssh_upload", source, uploaded, uploaded),
            ("ssh_download", downloaded, source, downloaded),
        ):
            baseline = status_kib(pid, "VmRSS")
            Path(f"/proc/{pid}/clear_refs").write_text("5")  # peak RSS starts again from now
            arguments = {"host": "h01", "local_path": str(local), "remote_path": str(remote), "timeout": 300}
            got = assert_ok(await client.call_tool(tool, arguments))
            growth = status_kib(pid, "VmHWM") - baseline
            assert growth <= RSS_GROWTH_LIMIT_KIB, f"{tool}: server RSS grew {growth} KiB (limit 32 MiB)"
            assert produced.stat().st_size == GIB
            assert sha256_file(produced) == digest
            assert got["files"] == [{"path": str(produced), "bytes": GIB, "sha256": digest}]
            record = records(audit_path, tool)[-1]
            assert record["target"]["transfer"]["files"] == [{"path": str(produced), "bytes": GIB, "sha256": digest}]
            produced.unlink()
    finally:
        uploaded.unlink(missing_ok=True)
        downloaded.unlink(missing_ok=True)


# -- 4. timeouts: what arrived, what did not, and no half file -------------------------------------------


async def test_timeout_on_one_file_leaves_no_half_file_and_no_temporary(
    client: Client, big_file: tuple[Path, str], big_dir: Path, audit_path: Path
) -> None:
    source, _ = big_file
    for tool, local, remote, final in (
        ("ssh_upload", source, big_dir / "never-up.bin", big_dir / "never-up.bin"),
        ("ssh_download", big_dir / "never-down.bin", source, big_dir / "never-down.bin"),
    ):
        started = time.monotonic()
        arguments = {"host": "h01", "local_path": str(local), "remote_path": str(remote), "timeout": 0.5}
        result = await client.call_tool(tool, arguments)
        assert time.monotonic() - started < 10
        text = text_of(result)
        assert result.is_error and text.startswith("[TIMEOUT after 0.5s]"), text
        got = fields(result)
        assert (got["status"], got["timed_out"], got["partial"]) == ("timeout", True, True)
        assert got.get("files_done", 0) == 0
        assert got["failed"] == [{"path": str(source), "error": _interrupted(0.5)}]  # the source, either way
        assert not final.exists(), f"{tool} left {final}"
        assert temporaries(big_dir) == [], f"{tool} left a temporary file"
        record = records(audit_path, tool)[-1]
        assert (record["outcome"], record["target"]["transfer"]["partial"]) == ("timeout", True)


async def test_cancelled_transfer_removes_its_temporary_file(
    client: Client, big_file: tuple[Path, str], big_dir: Path, audit_path: Path
) -> None:
    source, _ = big_file
    for tool, local, remote, final in (
        ("ssh_upload", source, big_dir / "cancelled-up.bin", big_dir / "cancelled-up.bin"),
        ("ssh_download", big_dir / "cancelled-down.bin", source, big_dir / "cancelled-down.bin"),
    ):
        arguments = {"host": "h01", "local_path": str(local), "remote_path": str(remote), "timeout": 300}
        before = len(records(audit_path, tool))
        with anyio.move_on_after(1.0) as scope:
            await client.call_tool(tool, arguments)
        assert scope.cancelled_caught, f"{tool} finished within a second: nothing was cancelled"
        deadline = time.monotonic() + 10
        while len(records(audit_path, tool)) == before and time.monotonic() < deadline:
            await anyio.sleep(0.05)
        assert temporaries(big_dir) == [], f"{tool} left its temporary file after a cancellation"
        assert not final.exists()
        record = records(audit_path, tool)[-1]
        assert record["outcome"] == "cancelled" and record["args"]["local_path"] == str(local)
        assert record["target"]["transfer"]["partial"] is True


async def test_lost_connection_ends_a_tree_with_a_report(
    client: Client, fleet: SshFleet, big_file: tuple[Path, str], big_dir: Path
) -> None:
    """h03's sshd (listener and sessions) is killed while the big file of a tree is on its way."""
    source = big_dir / "tree-lost"
    source.mkdir()
    make_file(source / "1-small", b"small one\n", 0o644)
    os.link(big_file[0], source / "2-big")
    make_file(source / "3-after", b"never reached\n", 0o644)
    destination = big_dir / "tree-lost-copy"
    arguments = {"host": "h03", "local_path": str(source), "remote_path": str(destination), "recursive": True}
    try:
        async with anyio.create_task_group() as group:

            async def kill_h03_soon() -> None:
                while not (destination / "1-small").exists():
                    await anyio.sleep(0.01)
                await anyio.sleep(0.3)
                await anyio.to_thread.run_sync(fleet.stop_host, "h03")

            group.start_soon(kill_h03_soon)
            result = await client.call_tool("ssh_upload", arguments)
        text = text_of(result)
        assert text.startswith("[ERROR: ConnectionLost: "), text
        got = fields(result)
        assert got["partial"] is True
        assert [entry["path"] for entry in got["files"]] == [str(destination / "1-small")]
        failed = {entry["path"]: entry["error"] for entry in got["failed"]}
        assert failed == {
            str(source / "2-big"): "interrupted: ConnectionLost; its temporary file could not be removed",
            str(source / "3-after"): "not transferred: ConnectionLost",
        }
        assert not (destination / "2-big").exists() and not (destination / "3-after").exists()
        # Nobody was left to remove the temporary file on the remote side: the result says so, by name.
        left = temporaries(destination)
        assert len(left) == 1 and f"NOTE  the temporary file {destination / left[0]} could not be removed" in text
    finally:
        shutil.rmtree(destination, ignore_errors=True)
        shutil.rmtree(source, ignore_errors=True)


def _interrupted(timeout: float) -> str:
    return f"interrupted: the timeout ({timeout:g}s) came first; its temporary file was removed"


async def test_timeout_in_a_tree_lists_what_arrived_and_what_did_not(
    client: Client, big_file: tuple[Path, str], big_dir: Path
) -> None:
    source = big_dir / "tree"
    (source / "late").mkdir(parents=True)
    make_file(source / "1-small", b"small one\n", 0o644)
    os.link(big_file[0], source / "2-big")  # the same 1 GiB, without another copy
    make_file(source / "3-after", b"never reached\n", 0o644)
    make_file(source / "late" / "inner", b"never reached either\n", 0o644)
    destination = big_dir / "tree-timeout"
    try:
        result = await upload(client, source, destination, recursive=True, timeout=1)
        text = text_of(result)
        assert text.startswith("[TIMEOUT after 1s]"), text
        got = fields(result)
        assert got["partial"] is True
        assert [entry["path"] for entry in got["files"]] == [str(destination / "1-small")]
        assert (destination / "1-small").read_bytes() == b"small one\n"
        assert not (destination / "2-big").exists()
        failed = {entry["path"]: entry["error"] for entry in got["failed"]}
        assert failed == {
            str(source / "2-big"): _interrupted(1),
            str(source / "3-after"): "not transferred: the timeout (1s) came first",
            str(source / "late"): "not transferred: the timeout (1s) came first",
            str(source / "late" / "inner"): "not transferred: the timeout (1s) came first",
        }
        assert f"FAILED  {source / '2-big'}: interrupted" in text
        assert temporaries(destination) == []
    finally:
        shutil.rmtree(destination, ignore_errors=True)
        shutil.rmtree(source, ignore_errors=True)


# -- 5. bad input: the error names the argument ----------------------------------------------------------


async def test_bad_paths_are_refused_naming_the_argument(client: Client, tmp_path: Path, audit_path: Path) -> None:
    a_file = make_file(tmp_path / "file.txt", b"data\n", 0o644)
    a_dir = tmp_path / "dir"
    a_dir.mkdir()
    missing = tmp_path / "missing"

    assert_error(await upload(client, missing, tmp_path / "x"), "NotFound", f"local_path: '{missing}' does not exist")
    assert_error(await upload(client, a_dir, tmp_path / "x"), "IsADirectory", "local_path:", "recursive=true")
    assert_error(
        await download(client, a_dir, tmp_path / "x"),
        "IsADirectory",
        f"remote_path: '{a_dir}' on h01 is a directory",
        "recursive=true",
    )
    assert_error(
        await download(client, missing, tmp_path / "x"), "NotFound", f"remote_path: '{missing}' on h01: does not exist"
    )
    # The destination names the copy itself: a directory there is not written into.
    assert_error(
        await upload(client, a_file, a_dir),
        "IsADirectory",
        f"remote_path: '{a_dir}' on h01 is a directory and a file cannot replace it",
        repr(str(a_dir / "file.txt")),
    )
    assert_error(await download(client, a_file, a_dir), "IsADirectory", f"local_path: '{a_dir}' is a directory")
    assert_error(
        await upload(client, a_dir, a_file, recursive=True),
        "NotADirectory",
        f"remote_path: '{a_file}' on h01 is a file",
    )
    assert_error(
        await upload(client, a_file, missing / "sub" / "x"),
        "NotFound",
        f"remote_path: the directory '{missing / 'sub'}' does not exist on h01",
    )
    assert_error(
        await download(client, a_file, missing / "x"),
        "NotFound",
        f"local_path: the directory that would hold it '{missing}' does not exist",
    )
    for bad, problem in (("", "is empty"), ("a\x00b", "NUL")):
        assert_error(await upload(client, a_file, bad), "InvalidArgument", "remote_path:", problem)
        assert_error(await download(client, a_file, bad), "InvalidArgument", "local_path:", problem)
    assert set(tmp_path.iterdir()) == {a_file, a_dir}  # nothing was created anywhere
    assert list(a_dir.iterdir()) == []
    errors = [record for record in read_records(audit_path) if record.get("outcome") == "error"]
    assert len(errors) >= 13 and all(record["tool"] in ("ssh_upload", "ssh_download") for record in errors[-13:])


async def test_no_permission_is_an_error_naming_the_side(client: Client, tmp_path: Path) -> None:
    """As root, an immutable directory (chattr +i) is what refuses a write; it does so on both sides alike."""
    source = make_file(tmp_path / "file.txt", b"data\n", 0o644)
    locked = tmp_path / "locked"
    locked.mkdir()
    if subprocess.run(["chattr", "+i", str(locked)], capture_output=True).returncode != 0:
        pytest.fail("chattr +i is needed to refuse root a write (ext4 or another file system with attributes)")
    try:
        assert_error(
            await upload(client, source, locked / "x"),
            "PermissionDenied",
            f"remote_path: '{locked / 'x'}' on h01: permission denied",
        )
        assert_error(
            await download(client, source, locked / "x"), "PermissionDenied", f"local_path: '{locked / 'x'}': "
        )
        result = await upload(client, tmp_path / "file.txt", tmp_path / "ok.txt")
        assert_ok(result)  # the connection is still good
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=True)
    assert list(locked.iterdir()) == []


# -- 6. the audit record -----------------------------------------------------------------------------------


async def test_audit_record_has_paths_sizes_and_each_files_sha256(
    client: Client, tmp_path: Path, audit_path: Path, fleet: SshFleet
) -> None:
    source = tmp_path / "tree"
    (source / "d").mkdir(parents=True)
    contents = {"one": os.urandom(1000), "d/two": os.urandom(270_000), "d/three": b""}
    for name, data in contents.items():
        make_file(source / name, data, 0o644)
    destination = tmp_path / "copy"
    result = await upload(client, source, destination, recursive=True)
    assert_ok(result)
    record = records(audit_path, "ssh_upload")[-1]
    assert (record["tier"], record["outcome"], record["denied"]) == (2, "ok", False)
    assert record["args"]["local_path"] == str(source) and record["args"]["recursive"] is True
    target = record["target"]
    assert (target["host"], target["address"], target["port"]) == (
        "h01",
        fleet.host("h01").address,
        fleet.host("h01").port,
    )
    transfer = target["transfer"]
    assert (transfer["direction"], transfer["local_path"], transfer["remote_path"]) == (
        "upload",
        str(source),
        str(destination),
    )
    assert (transfer["files_done"], transfer["bytes_done"], transfer["partial"]) == (3, 271_000, False)
    listed = {entry["path"]: entry for entry in transfer["files"]}
    assert set(listed) == {str(destination / name) for name in contents}
    for name, data in contents.items():
        entry = listed[str(destination / name)]
        assert entry["sha256"] == hashlib.sha256(data).hexdigest() == sha256_file(destination / name)
        assert entry["bytes"] == len(data)
    # The manifest digest commits to every file: the sha256sum-style lines of the result, in order.
    manifest = "".join(f"{entry['sha256']}  {entry['bytes']}  {entry['path']}\n" for entry in transfer["files"])
    assert transfer["manifest_sha256"] == hashlib.sha256(manifest.encode()).hexdigest()
    assert record["raw_sha256"] == fields(result)["output_sha256"]


# -- 7. policy ---------------------------------------------------------------------------------------------


async def test_denied_host_never_transfers_in_any_spelling(
    guarded: Client, fleet: SshFleet, tmp_path: Path, guarded_audit_path: Path
) -> None:
    host = fleet.host("h02")
    source = make_file(tmp_path / "secret.txt", b"secret\n", 0o600)
    octets = [int(part) for part in host.address.split(".")]
    number = (octets[0] << 24) | (octets[1] << 16) | (octets[2] << 8) | octets[3]
    spellings = [
        "h02",
        host.address,
        f"root@{host.address}:{host.port}",
        str(number),
        hex(number),
        f"0{octets[0]:o}.0.0.{octets[3]}",
        f"127.{number & 0xFFFFFF}",
        f"[::ffff:{host.address}]:{host.port}",
    ]
    before = len(records(guarded_audit_path, "ssh_upload"))
    for spelling in spellings:
        target = tmp_path / f"landed-{len(spelling)}"
        result = await guarded.call_tool(
            "ssh_upload", {"host": spelling, "local_path": str(source), "remote_path": str(target), "port": host.port}
        )
        text = text_of(result)
        assert result.is_error and text.startswith("[DENIED tier 2 (stateful): matches deny pattern"), (spelling, text)
        assert not target.exists(), spelling
        result = await guarded.call_tool(
            "ssh_download", {"host": spelling, "remote_path": str(source), "local_path": str(target), "port": host.port}
        )
        assert text_of(result).startswith("[DENIED tier 2 (stateful): "), (spelling, text_of(result))
        assert not target.exists(), spelling
    denied = records(guarded_audit_path, "ssh_upload")[before:]
    assert [record["outcome"] for record in denied] == ["denied"] * len(spellings)
    # Never connected: a connection would have put the server's host key into the record.
    assert all(record["target"]["address"] == host.address and "host_key" not in record["target"] for record in denied)


async def test_guarded_mode_admits_allowed_uploads_and_refuses_downloads(
    guarded: Client, tmp_path: Path, guarded_audit_path: Path
) -> None:
    source = make_file(tmp_path / "small.txt", b"allowed\n", 0o644)
    assert_ok(await upload(guarded, source, tmp_path / "up.txt"))
    assert (tmp_path / "up.txt").read_bytes() == b"allowed\n"
    result = await download(guarded, source, tmp_path / "down.txt")
    text = text_of(result)
    assert text.startswith(
        "[DENIED tier 2 (stateful): mode guarded refuses tier 2 without an allow pattern: file transfer"
    ), text
    assert not (tmp_path / "down.txt").exists()


# -- 8. the size limit -------------------------------------------------------------------------------------


async def test_size_limit_is_checked_before_and_while_copying(guarded: Client, tmp_path: Path) -> None:
    info = fields(await guarded.call_tool("server_info", {}))["info"]
    assert info["ssh"]["max_transfer_bytes"] == GUARDED_LIMIT  # the model can see the limit before it hits it
    too_big = make_file(tmp_path / "big", os.urandom(GUARDED_LIMIT + 1), 0o644)
    assert_error(
        await upload(guarded, too_big, tmp_path / "up-big"),
        "TransferTooLarge",
        f"local_path: '{too_big}' holds {GUARDED_LIMIT + 1} bytes; allowed: at most {GUARDED_LIMIT} bytes",
        "nothing was transferred",
    )
    assert not (tmp_path / "up-big").exists()
    # /proc files say they are empty and then deliver more: the limit holds while copying too.
    smaps = Path("/proc/self/smaps")  # the server's own: far more than the limit
    assert smaps.stat().st_size == 0
    result = await upload(guarded, smaps, tmp_path / "maps")
    assert_error(result, "TransferTooLarge", f"passed {GUARDED_LIMIT} bytes")
    assert not (tmp_path / "maps").exists()
    assert temporaries(tmp_path) == []


async def test_tree_at_the_limit_is_refused_whole(guarded: Client, tmp_path: Path) -> None:
    source = tmp_path / "tree"
    source.mkdir()
    for index in range(3):
        make_file(source / f"f{index}", os.urandom(GUARDED_LIMIT // 2), 0o644)
    assert_error(
        await upload(guarded, source, tmp_path / "copy", recursive=True), "TransferTooLarge", "holds 24576 bytes"
    )
    assert not (tmp_path / "copy").exists()


# -- what the security review found: critical destinations in any spelling, and a hostile server ----------------


@pytest.fixture(scope="module")
async def confirming(fleet: SshFleet, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    """Tier-3 calls answer CONFIRM REQUIRED and run nothing: critical paths can be named end to end safely."""
    audit = tmp_path_factory.mktemp("transfer-confirm") / "audit.jsonl"
    async with connect(audit, ssh_config=str(fleet.ssh_config), confirm_tier3="token") as server:
        yield server


async def test_a_critical_destination_is_tier_3_however_it_is_spelled(confirming: Client, tmp_path: Path) -> None:
    source = make_file(tmp_path / "shadow", b"not a shadow file\n", 0o600)
    tree = tmp_path / "tree"
    tree.mkdir()
    make_file(tree / "shadow", b"x\n", 0o600)
    calls = [
        upload(confirming, source, "/etc//shadow"),
        upload(confirming, source, "/etc/./shadow"),
        upload(confirming, source, "//etc/shadow"),
        upload(confirming, tree, "/etc", recursive=True),  # a tree merged into /etc can replace /etc/shadow
        upload(confirming, tree, "/etc/ssh/", recursive=True),
    ]
    (tmp_path / "innocent").symlink_to("/etc/shadow")  # the download would write through it
    calls.append(download(confirming, "/etc/hostname", tmp_path / "innocent"))
    for call in calls:
        result = await call
        assert fields(result)["status"] == "confirm_required" and fields(result)["tier"] == 3, text_of(result)
    assert (tmp_path / "innocent").is_symlink()
    for climbing in ("../../etc/shadow", "/tmp/../etc/shadow", "~/../x"):
        assert_error(await upload(confirming, source, climbing), "InvalidArgument", "remote_path", "'..'")
    assert_ok(await upload(confirming, source, tmp_path / "plain"))  # an ordinary destination still runs


class _HostileSftp:
    """A malicious SFTP server (asyncssh's, since OpenSSH's sftp-server never lists such names): the directory
    `tree` also lists `../../ESCAPED.txt`, an absolute path and a name with NUL, all served as a payload."""

    def __init__(self, root: Path, absolute: Path) -> None:
        import asyncssh

        self.absolute = absolute

        class Server(asyncssh.SFTPServer):
            def __init__(self, channel: Any) -> None:
                super().__init__(channel, chroot=str(root).encode())

            async def scandir(self, path: bytes) -> Any:  # type: ignore[override]
                async for name in super().scandir(path):
                    yield name
                if path.endswith(b"tree"):
                    attrs = asyncssh.SFTPAttrs.from_local(os.stat(root / "payload"))
                    for hostile in (b"../../ESCAPED.txt", str(absolute).encode(), b"zz\x00nul"):
                        yield asyncssh.SFTPName(hostile, attrs=attrs)

            def open(self, path: bytes, pflags: int, attrs: Any) -> Any:
                if b"ESCAPED" in path or b"ABSOLUTE" in path or b"nul" in path:
                    path = b"/payload"
                return super().open(path, pflags, attrs)

        self.server_class = Server


async def test_a_hostile_server_cannot_write_outside_the_downloaded_tree(
    client: Client, fleet: SshFleet, tmp_path: Path
) -> None:
    import asyncssh

    root = tmp_path / "served"
    (root / "tree").mkdir(parents=True)
    (root / "tree" / "ok.txt").write_text("ok\n")
    (root / "payload").write_text("attacker-controlled\n")
    absolute = tmp_path / "ABSOLUTE.txt"
    hostile = _HostileSftp(root, absolute)
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    listener = await asyncssh.listen(
        "127.0.0.61",
        0,
        server_host_keys=[host_key],
        authorized_client_keys=str(fleet.authorized_keys),
        sftp_factory=hostile.server_class,
        allow_scp=False,
    )
    try:
        port = listener.sockets[0].getsockname()[1]
        local = tmp_path / "dl" / "tree"
        local.parent.mkdir()
        result = await download(
            client,
            "/tree",
            local,
            recursive=True,
            host="127.0.0.61",
            port=port,
            user="root",
            key_path=str(fleet.client_key),
            known_hosts="ignore",
        )
    finally:
        listener.close()
    text = text_of(result)
    assert (local / "ok.txt").read_text() == "ok\n"
    assert (
        not absolute.exists()
        and not (tmp_path / "ESCAPED.txt").exists()
        and not (tmp_path / "dl" / "ESCAPED.txt").exists()
    )
    assert sorted(path.name for path in local.iterdir()) == ["ok.txt"]
    assert text.count("UnsafeName") == 3 and "Internal" not in text, text


async def test_a_tree_others_can_change_while_it_is_copied_is_refused(client: Client, tmp_path: Path) -> None:
    # The walk goes by path: whoever may rename entries in a directory of the tree (or above it) could swap a
    # directory for a symlink mid-copy and redirect a file outside the tree. Such trees are refused.
    tree = tmp_path / "tree"
    (tree / "shared").mkdir(parents=True)
    make_file(tree / "a.txt", b"a\n", 0o644)
    make_file(tree / "shared" / "b.txt", b"b\n", 0o644)
    (tree / "shared").chmod(0o777)
    result = await upload(client, tree, tmp_path / "up", recursive=True)
    assert "NotPrivate" in text_of(result) and (tmp_path / "up" / "a.txt").read_bytes() == b"a\n"
    assert not (tmp_path / "up" / "shared").exists()

    tree.chmod(0o777)
    assert_error(await upload(client, tree, tmp_path / "up2", recursive=True), "NotPrivate", "local_path")
    tree.chmod(0o755)

    someone_elses = tmp_path / "someone"
    someone_elses.mkdir()
    os.chown(someone_elses, 65534, 65534)  # nobody may rename what lies in it
    assert_error(
        await download(client, tree, someone_elses / "copy", recursive=True), "NotPrivate", "local_path", "uid 65534"
    )
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)  # like /tmp: others cannot rename our entries
    assert_ok(await download(client, tree, sticky / "copy", recursive=True))
    assert (sticky / "copy" / "shared" / "b.txt").read_bytes() == b"b\n"
