"""End to end: the exec trace (adr/0019) through a real relay-shell subprocess and the SDK's stdio client.

What the host actually executed shows in the call's end record (`execs`): the program a base64 pipeline decodes
and runs, a `setsid` grandchild's exec, a script's five thousand programs (count exact, entries capped, the same
digest twice), a Python started in a PTY session calling `os.system('id')` (under that session_send), an
EXEC_DENY refusal inside a script that otherwise completes, a secret in an argv a script builds (redacted). The
stand-ins for `nc` and `mysql` are scripts of this test (neither is installed here); they print their argv.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import os
import secrets
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.conftest import connect, fields, read_records, text_of
from tests.procs import live_argvs

pytestmark = pytest.mark.anyio
DENY = r"(^|/)nc( |$)"
PROMPT = "TRACE> "


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("trace")
    bindir = directory / "bin"
    bindir.mkdir()
    for name in ("nc", "mysql"):
        script = bindir / name
        script.write_text('#!/bin/sh\necho "standin $(basename "$0") $*"\n')
        script.chmod(0o755)
    return directory


@pytest.fixture(scope="module")
async def client(workdir: Path) -> AsyncIterator[Client]:
    # The trace: on by default here (root, `auto`).
    async with connect(workdir / "audit.jsonl", exec_deny=DENY) as connected:
        yield connected


def path_env(workdir: Path) -> dict[str, str]:
    return {"PATH": f"{workdir / 'bin'}:/usr/local/bin:/usr/bin:/bin"}


def end_record(workdir: Path, result: Any) -> dict[str, Any]:
    call_id = fields(result).get("call_id") or None
    records = [record for record in read_records(workdir / "audit.jsonl") if record.get("phase") == "end"]
    if call_id is not None:
        records = [record for record in records if record["call_id"] == call_id]
    return records[-1]


def programs(record: dict[str, Any]) -> list[str]:
    return [os.path.basename(entry["path"]) for entry in record["execs"]["entries"]]


async def test_a_decoded_pipeline_shows_the_program_it_ran(client: Client, workdir: Path) -> None:
    victim = workdir / f"victim-{secrets.token_hex(4)}"
    victim.write_text("x")
    payload = base64.b64encode(f"rm -f {victim}\n".encode()).decode()
    result = await client.call_tool("shell_exec", {"command": f"echo {payload} | base64 -d | sh"})
    assert fields(result)["status"] == "ok", text_of(result)
    assert not victim.exists()
    record = end_record(workdir, result)
    execs = record["execs"]
    removed = [entry for entry in execs["entries"] if os.path.basename(entry["path"]) == "rm"]
    assert removed, execs
    assert removed[0]["argv"] == ["rm", "-f", str(victim)] and removed[0]["ok"] is True
    shell = next(entry for entry in execs["entries"] if entry["argv"] == ["sh"])
    assert removed[0]["ppid"] == shell["pid"]  # rm is the decoded script's child, not the pipeline's
    assert execs["count"] == len(execs["entries"]) == 4  # /bin/sh -c, base64, sh, rm (echo is a builtin)
    assert {"base64", "sh", "rm"} <= set(programs(record))


async def release_fifo(path: Path) -> None:
    """Write a line into `path` once its reader has opened it (ENXIO until then)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:
            if error.errno != errno.ENXIO or time.monotonic() > deadline:
                raise
            await anyio.sleep(0.02)
            continue
        os.write(descriptor, b"go\n")
        os.close(descriptor)
        return


async def test_a_setsid_grandchild_is_traced_and_a_late_exec_still_runs(client: Client, workdir: Path) -> None:
    marker = workdir / f"late-{secrets.token_hex(4)}"
    go = workdir / f"go-{secrets.token_hex(4)}"
    os.mkfifo(go)
    command = (
        "setsid sh -c 'uname -n >/dev/null'; "
        # A background job that leaves the session and execs after the call ended: answered, counted as late. It
        # waits in a builtin (the fifo's open) until the test has the result, so both its execs are late however
        # slow the machine is (a fixed sleep let `sleep` run before the end under load).
        f"(setsid sh -c 'read go < {go}; sleep 0.1; touch {marker}' >/dev/null 2>&1 &)"
    )
    before = fields(await client.call_tool("server_info", {}))["info"]["exec_trace"]["late_execs"]
    result = await client.call_tool("shell_exec", {"command": command})
    assert fields(result)["status"] == "ok", text_of(result)
    await release_fifo(go)
    entries = end_record(workdir, result)["execs"]["entries"]
    inner = [entry for entry in entries if entry["argv"] == ["sh", "-c", "uname -n >/dev/null"]]
    uname = [entry for entry in entries if entry["argv"] == ["uname", "-n"]]
    assert inner and uname, entries
    assert uname[0]["ppid"] == inner[0]["pid"]
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        await anyio.sleep(0.05)
    assert marker.exists(), "the background job's exec after the call ended must run (its listener is kept)"
    info = fields(await client.call_tool("server_info", {}))["info"]["exec_trace"]
    assert info["state"] == "on" and info["late_execs"] >= before + 2  # sleep and touch
    assert info["execs_traced"] > 0


async def test_five_thousand_programs_keep_the_record_bounded(client: Client, workdir: Path) -> None:
    script = "for i in $(seq 5000); do /bin/true; done"
    digests = []
    for _ in range(2):
        result = await client.call_tool("shell_script", {"script": script, "interpreter": "sh"})
        assert fields(result)["status"] == "ok", text_of(result)
        execs = end_record(workdir, result)["execs"]
        assert execs["count"] == 5002  # sh -s, seq, 5000 × true
        assert len(execs["entries"]) == 64 and execs["entries_omitted"] == 5002 - 64
        digests.append(execs["sha256"])
    assert digests[0] == digests[1]
    lines = (workdir / "audit.jsonl").read_bytes().splitlines()
    assert max(len(line) for line in lines) < 64 * 1024


async def test_a_secret_in_a_spawned_argv_is_redacted(client: Client, workdir: Path) -> None:
    # The script's text holds no secret: only the exec of mysql sees it assembled.
    script = 'half=HUNTER\nmysql -u root -p"${half}2SECRETPW" -e "select 1"\n'
    result = await client.call_tool("shell_script", {"script": script, "interpreter": "sh", "env": path_env(workdir)})
    assert "standin mysql" in text_of(result)
    record = end_record(workdir, result)
    mysql = [entry for entry in record["execs"]["entries"] if entry["path"].endswith("/mysql")]
    assert mysql and "-p[REDACTED]" in mysql[0]["argv"], record["execs"]
    assert b"HUNTER2SECRETPW" not in (workdir / "audit.jsonl").read_bytes()


async def test_exec_deny_refuses_nc_inside_a_script_that_completes(client: Client, workdir: Path) -> None:
    script = "echo before\nnc -l 9999 || echo nc-refused-$?\necho after\n"
    result = await client.call_tool("shell_script", {"script": script, "interpreter": "sh", "env": path_env(workdir)})
    text = text_of(result)
    assert fields(result)["status"] == "ok", text
    assert "before" in text and "after" in text and "nc-refused-126" in text and "standin nc" not in text
    assert "exec refused by RELAY_SHELL_EXEC_DENY" in text and "/bin/nc" in text
    execs = end_record(workdir, result)["execs"]
    refused = [entry for entry in execs["entries"] if entry.get("denied")]
    assert execs["denied"] == 1 and len(refused) == 1 and refused[0]["argv"] == ["nc", "-l", "9999"]
    assert refused[0]["ok"] is False
    info = fields(await client.call_tool("server_info", {}))["info"]["exec_trace"]
    assert info["execs_denied"] >= 1 and info["deny_patterns"] == 1


async def test_a_session_send_shows_what_python_ran(client: Client, workdir: Path) -> None:
    spawned = await client.call_tool(
        "shell_spawn", {"command": ["sh"], "env": {"PS1": PROMPT}, "until": "TRACE> $", "timeout": 10}
    )
    session_id = fields(spawned)["session_id"]
    try:
        started = await client.call_tool(
            "session_send", {"session_id": session_id, "data": "python3 -q", "until": "^>>> ", "timeout": 20}
        )
        assert "python3" in programs(end_record(workdir, started))
        ran = await client.call_tool(
            "session_send",
            {"session_id": session_id, "data": "import os; os.system('id')", "until": "^>>> ", "timeout": 20},
        )
        assert "uid=" in text_of(ran)
        record = end_record(workdir, ran)
        assert record["tool"] == "session_send"
        assert "id" in programs(record) and "python3" not in programs(record), record["execs"]
    finally:
        await client.call_tool("session_kill", {"session_id": session_id})
    ended = [
        record
        for record in read_records(workdir / "audit.jsonl")
        if record["tool"] == "session:end" and record.get("session_id") == session_id
    ]
    assert ended and ended[0]["execs"]["count"] >= 4  # sh, python3, sh -c id, id


async def test_a_denied_first_program_is_an_error_naming_it(client: Client, workdir: Path) -> None:
    result = await client.call_tool(
        "shell_exec", {"command": ["nc", "-h"], "use_shell": False, "env": path_env(workdir)}
    )
    text = text_of(result)
    assert result.is_error and text.startswith("[ERROR: ExecDenied: "), text
    assert "/bin/nc" in text and "nothing ran" in text
    execs = end_record(workdir, result)["execs"]
    assert execs["count"] == execs["denied"] == 1 and execs["entries"][0]["denied"] is True


async def test_long_and_many_arguments_are_bounded_like_audited_arguments(client: Client, workdir: Path) -> None:
    program = "import os; os.execv('/bin/true', ['true', 'x' * 100000] + ['a'] * 2000)"
    result = await client.call_tool("shell_exec", {"command": ["python3", "-c", program], "use_shell": False})
    assert fields(result)["status"] == "ok", text_of(result)
    entry = next(entry for entry in end_record(workdir, result)["execs"]["entries"] if entry["path"] == "/bin/true")
    assert entry["argc"] == 2002 and entry["argv_cut"] is True  # 1,024 argument pointers are read at most
    long_argument = entry["argv"][1]
    assert long_argument["len"] == 100000
    assert long_argument["sha256"] == hashlib.sha256(b"x" * 100000).hexdigest()
    assert long_argument["head"].startswith("xxxx") and long_argument["tail"].endswith("xxxx")
    assert len(entry["argv"]) == 65 and entry["argv"][-1]["omitted"] > 0  # the first 64, then a digest


async def test_fexecve_is_traced_with_the_file_it_ran(client: Client, workdir: Path) -> None:
    program = "import os; fd = os.open('/bin/echo', os.O_RDONLY); os.execve(fd, ['echo', 'fexecve-ran'], {})"
    result = await client.call_tool("shell_exec", {"command": ["python3", "-c", program], "use_shell": False})
    assert "fexecve-ran" in text_of(result)
    entries = end_record(workdir, result)["execs"]["entries"]
    echo = [entry for entry in entries if entry["argv"] == ["echo", "fexecve-ran"]]
    # The path as the kernel names an exec of a descriptor; the program it ran, resolved in the process (adr/0027).
    assert echo and echo[0]["path"].startswith("/dev/fd/"), entries
    assert echo[0]["program"] == os.path.realpath("/bin/echo"), entries


async def test_audit_tail_shows_a_calls_exec_list(client: Client, workdir: Path) -> None:
    result = await client.call_tool("shell_exec", {"command": "uname -s >/dev/null"})
    call_id = end_record(workdir, result)["call_id"]
    tail = await client.call_tool("audit_tail", {"call_id": call_id})
    records = fields(tail)["records"]
    ended = [record for record in records if record.get("phase") == "end"]
    assert ended and [entry["argv"] for entry in ended[0]["execs"]["entries"]][-1] == ["uname", "-s"]
    printed = subprocess.run(
        [sys.executable, "-m", "relay_shell", "audit", "tail", "--execs", "--call-id", call_id],
        env={**os.environ, "RELAY_SHELL_AUDIT_PATH": str(workdir / "audit.jsonl")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = printed.stdout.splitlines()
    assert printed.returncode == 0 and f"{call_id}: 2 execs" in lines[0], printed
    assert lines[-1].endswith("/usr/bin/uname: uname -s") and " ok " in lines[-1], lines


async def test_an_exec_storm_is_ended_at_its_timeout(client: Client, workdir: Path) -> None:
    """Four escaped loops exec /bin/true as fast as they can (they never end by themselves); execs queue up
    behind the one service thread. At the timeout every process of the storm is gone, those still waiting for
    their exec to be answered too, and the server answers the next call at once."""
    token = f"storm{secrets.token_hex(4)}"
    loop = f"while :; do /bin/true {token}; done"
    command = f"for i in 1 2 3 4; do (setsid sh -c '{loop}' &); done; sleep 300"
    result = await client.call_tool("shell_exec", {"command": command, "timeout": 2})
    assert text_of(result).startswith("[TIMEOUT after 2s]"), text_of(result)
    execs = end_record(workdir, result)["execs"]
    assert execs["count"] > 100 and len(execs["entries"]) == 64, execs  # the storm ran; the list is capped
    deadline = time.monotonic() + 10
    left = storm_processes(token)
    while left and time.monotonic() < deadline:
        await anyio.sleep(0.05)
        left = storm_processes(token)
    assert left == {}, f"{len(left)} processes of the storm survived its call"
    started = time.monotonic()
    alive = await client.call_tool("shell_exec", {"command": "echo still serving"})
    assert text_of(alive) == "[exit 0]\nstill serving\n" and time.monotonic() - started < 5
    assert end_record(workdir, alive)["execs"]["count"] == 1


def storm_processes(token: str) -> dict[int, list[bytes]]:
    return {pid: argv for pid, argv in live_argvs().items() if any(token.encode() in item for item in argv)}


async def test_decoys_cannot_push_a_program_out_of_the_record(client: Client, workdir: Path) -> None:
    """Attack 3, T1: 70 decoys filled the 64 entries and `whoami` left only the count and the digest. It is now
    named in later_programs."""
    result = await client.call_tool(
        "shell_exec", {"command": "for i in $(seq 70); do /bin/true; done; /usr/bin/whoami"}
    )
    assert fields(result)["status"] == "ok", text_of(result)
    execs = end_record(workdir, result)["execs"]
    assert len(execs["entries"]) == 64 and execs["entries_omitted"] > 0
    later = {item["program"]: item["count"] for item in execs["later_programs"]}
    assert any(name.endswith("/whoami") for name in later), execs["later_programs"]


async def test_distinct_decoys_in_one_directory_cannot_hide_a_program(client: Client, workdir: Path) -> None:
    """Attack 4, T2: 300 distinct copies of /bin/true with 60-character names, run by a script before `id`, filled
    later_programs (the log kept 64 of its items) and `id` was named nowhere. The decoys' directory is now folded
    into one item counting their execs, and `id` is named, in the end record as the log holds it."""
    decoys = workdir / "decoys"
    script = workdir / "run.sh"
    script.write_text(f'for f in {decoys}/*; do "$f"; done; /usr/bin/id -u\n')
    made = await client.call_tool(
        "shell_exec",
        {"command": f"mkdir {decoys} && for i in $(seq -w 300); do cp /bin/true {decoys}/$i-{'x' * 56}; done"},
    )
    assert fields(made)["status"] == "ok", text_of(made)
    result = await client.call_tool("shell_exec", {"command": f"sh {script}"})
    assert fields(result)["status"] == "ok", text_of(result)
    execs = end_record(workdir, result)["execs"]
    items = execs["later_programs"]
    assert len(items) <= 64 and all("omitted" not in item for item in items), items  # the log kept it whole
    assert any(item.get("program", "").endswith("/id") for item in items), items
    folded = [item for item in items if item.get("directory") == f"{decoys}/"]
    assert len(folded) == 1 and folded[0]["count"] >= 300 - 64, items
