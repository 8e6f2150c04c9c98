"""End to end: what the review of issue 19 showed a traced program could do to escape the trace, through a real
relay-shell subprocess and the SDK's stdio client, with real programs (the C ones compiled here with gcc).

- an exec from an address of the server's memory (the former filter let the tree's first exec through by its
  path pointer): trapped, seen and refused like any other;
- an i386 `int 0x80` execve from a 64-bit program: read with 32-bit pointers, listed, refused by a pattern;
- one exec with long arguments cannot push the end record over its bound (the `execs` field survives);
- a background job's exec after its call ended: named in an `exec:late` record under the call's id;
- a backtracking-prone EXEC_DENY pattern over program-controlled argv (RE2: linear) holds up nothing;
- traced children start with every signal at its default (glibc's posix_spawn ignores 32 and 33).
"""

from __future__ import annotations

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

from tests.conftest import connect, fields, read_records, server_env, text_of
from tests.e2e.trace.attacks import FROM_SERVER_ADDRESSES, INT80, compile_program
from tests.procs import live_argvs

pytestmark = pytest.mark.anyio
DENY = r'["^/usr/bin/id( |$)", "^/bin/echo .*MARK-refused", "(x+)+y"]'


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("trace-review")
    compile_program(FROM_SERVER_ADDRESSES, directory / "from_server_addresses")
    compile_program(INT80, directory / "int80")
    mysql = directory / "mysql"
    mysql.write_text('#!/bin/sh\necho "standin mysql"\n')
    mysql.chmod(0o755)
    return directory


@pytest.fixture(scope="module")
async def client(workdir: Path) -> AsyncIterator[Client]:
    # The trace: on by default here (root, `auto`).
    async with connect(workdir / "audit.jsonl", exec_deny=DENY) as connected:
        yield connected


def end_record(workdir: Path, result: Any) -> dict[str, Any]:
    """The end record of the call just made (the calls of this module run one at a time)."""
    return [record for record in read_records(workdir / "audit.jsonl") if record.get("phase") == "end"][-1]


async def test_an_exec_from_the_servers_addresses_is_trapped_and_refused(client: Client, workdir: Path) -> None:
    """The former allowance: a native execve whose path pointer was a spawner thread's buffer (found by the
    review at offset 0x1070 of a thread arena) went through untrapped, past EXEC_DENY and out of the record."""
    program = workdir / "from_server_addresses"
    result = await client.call_tool("shell_exec", {"command": [str(program), "/usr/bin/id"], "use_shell": False})
    text = text_of(result)
    assert "uid=" not in text, f"/usr/bin/id ran unchecked: {text}"
    assert "none ran" in text and "exec refused by RELAY_SHELL_EXEC_DENY" in text, text
    execs = end_record(workdir, result)["execs"]
    tried = int(text.split("tried ")[1].split()[0])
    assert tried > 0 and execs["denied"] == tried, execs  # every attempt was seen and refused
    assert execs["count"] == tried + 1 and execs["entries"][0]["path"] == str(program)


async def test_an_int80_execve_is_listed_and_refused_by_a_pattern(client: Client, workdir: Path) -> None:
    program = str(workdir / "int80")
    listed = await client.call_tool("shell_exec", {"command": [program, "MARK-int80"], "use_shell": False})
    assert "MARK-int80" in text_of(listed)
    entries = end_record(workdir, listed)["execs"]["entries"]
    assert [entry["argv"] for entry in entries] == [[program, "MARK-int80"], ["/bin/echo", "MARK-int80"]], entries
    assert entries[1]["path"] == "/bin/echo" and entries[1]["ok"] is True
    refused = await client.call_tool("shell_exec", {"command": [program, "MARK-refused"], "use_shell": False})
    text = text_of(refused)
    assert "MARK-refused" not in text.splitlines() and "exec refused by RELAY_SHELL_EXEC_DENY" in text, text
    execs = end_record(workdir, refused)["execs"]
    assert execs["denied"] == 1 and len(execs["entries"]) == 2, execs
    assert execs["entries"][1]["denied"] is True and execs["entries"][1]["path"] == "/bin/echo"


async def test_long_arguments_cannot_drop_the_exec_list_from_the_record(client: Client, workdir: Path) -> None:
    arguments = " ".join(chr(97 + index % 20) * 1000 for index in range(64))  # a..t: no x followed by y
    script = "\n".join([f"/bin/true {arguments}"] * 3 + [f"{workdir}/mysql -u root -pSECRETPW1 -e 'select 1'"])
    result = await client.call_tool("shell_script", {"script": script, "interpreter": "sh"})
    assert "standin mysql" in text_of(result), text_of(result)
    record = end_record(workdir, result)
    assert "execs" not in record.get("bounded", []), record.get("bounded")
    execs = record["execs"]
    assert execs["count"] == 5 and len(execs["sha256"]) == 64  # sh -s, 3 × true, mysql
    mysql = [entry for entry in execs["entries"] if entry["path"].endswith("/mysql")]
    assert mysql and "-p[REDACTED]" in mysql[0]["argv"], execs["entries"]
    lines = (workdir / "audit.jsonl").read_bytes().splitlines()
    assert max(len(line) for line in lines) < 64 * 1024 and b"SECRETPW1" not in b"".join(lines)


async def test_a_late_exec_is_named_in_a_record_of_its_call(client: Client, workdir: Path) -> None:
    marker = workdir / "late-ran"
    command = f"(sleep 0.5; /bin/uname -n > {marker}) >/dev/null 2>&1 & echo started"
    result = await client.call_tool("shell_exec", {"command": command})
    assert "started" in text_of(result)
    call_id = end_record(workdir, result)["call_id"]
    deadline = time.monotonic() + 15
    late: list[dict[str, Any]] = []
    while not late and time.monotonic() < deadline:
        await anyio.sleep(0.1)
        late = [
            record
            for record in read_records(workdir / "audit.jsonl")
            if record["tool"] == "exec:late" and record.get("call_id") == call_id
        ]
    assert marker.exists() and late, "the late exec ran; its record must name it under the call's id"
    argvs = [entry["argv"] for record in late for entry in record["execs"]["entries"]]
    assert ["/bin/uname", "-n"] in argvs, argvs


async def test_a_backtracking_pattern_holds_up_nothing(client: Client) -> None:
    """`(x+)+y` over 28 x's: Python's re takes ~2^28 steps (the review's server froze for 15 s, every call
    waiting); RE2 is linear."""
    durations: dict[str, float] = {}

    async def call(name: str, command: str) -> None:
        started = time.monotonic()
        result = await client.call_tool("shell_exec", {"command": command, "timeout": 20})
        assert fields(result)["status"] == "ok", text_of(result)
        durations[name] = time.monotonic() - started

    async with anyio.create_task_group() as group:
        group.start_soon(call, "pattern", f"/bin/true {'x' * 28}; echo done")
        await anyio.sleep(0.05)
        group.start_soon(call, "other", "echo second")
    assert durations["pattern"] < 1.0 and durations["other"] < 1.0, durations


async def test_traced_children_start_with_every_signal_at_its_default(client: Client) -> None:
    result = await client.call_tool("shell_exec", {"command": "grep SigIgn /proc/self/status"})
    assert "SigIgn:\t0000000000000000" in text_of(result), text_of(result)


def sleeping(seconds: str) -> bool:
    return ["sleep", seconds] in [[item.decode() for item in argv[:2]] for argv in live_argvs().values()]


def test_a_pattern_re2_refuses_stops_the_server_naming_the_setting(tmp_path: Path) -> None:
    env = server_env(tmp_path / "audit.jsonl", exec_trace="on", exec_deny=r'["(a)\\1"]')
    started = subprocess.run(
        [sys.executable, "-m", "relay_shell"], env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=60
    )
    assert started.returncode != 0
    error = started.stderr.decode()
    assert "RELAY_SHELL_EXEC_DENY" in error and "RE2" in error and "backreferences" in error, error
    assert "Traceback" not in error


async def test_a_symlink_to_a_denied_program_is_refused_too(client: Client, workdir: Path) -> None:
    link = workdir / "innocent"
    link.symlink_to("/usr/bin/id")
    result = await client.call_tool("shell_exec", {"command": f"{link} || echo refused-$?"})
    text = text_of(result)
    assert "uid=" not in text and "refused-126" in text, text
    assert end_record(workdir, result)["execs"]["denied"] == 1
    # As the call's own program (the server's exec, checked before it spawns) too.
    alone = await client.call_tool("shell_exec", {"command": [str(link)], "use_shell": False})
    assert alone.is_error and text_of(alone).startswith("[ERROR: ExecDenied: "), text_of(alone)


async def test_late_execs_of_a_tree_still_running_are_written_at_shutdown(tmp_path: Path) -> None:
    """A background job that execs after its call and then keeps running: its tree does not hang up before the
    server stops (containment off: nothing ends it), so its late execs are written at shutdown, not lost. The
    job ends by itself seconds later."""
    audit = tmp_path / "audit.jsonl"
    marker = tmp_path / "late-ran"
    token = str(secrets.randbelow(10**6)).rjust(6, "1")  # sleep 4.<token>: a process this test can find
    async with connect(audit, containment="off") as client:
        command = f"(sleep 0.3; /bin/uname -n > {marker}; exec sleep 4.{token}) >/dev/null 2>&1 & echo started"
        result = await client.call_tool("shell_exec", {"command": command})
        assert "started" in text_of(result)
        deadline = time.monotonic() + 10
        # Until the job runs its last program (on a loaded machine that can be well after the marker appears).
        while not sleeping(f"4.{token}") and time.monotonic() < deadline:
            await anyio.sleep(0.05)
        assert marker.exists() and sleeping(f"4.{token}")
    call_id = [record for record in read_records(audit) if record.get("phase") == "end"][-1]["call_id"]
    late = [record for record in read_records(audit) if record["tool"] == "exec:late"]
    assert late and all(record["call_id"] == call_id for record in late), late
    argvs = [entry["argv"] for record in late for entry in record["execs"]["entries"]]
    assert ["/bin/uname", "-n"] in argvs and ["sleep", f"4.{token}"] in argvs, argvs


async def test_the_calls_own_program_is_found_and_recorded_as_popen_would(client: Client, workdir: Path) -> None:
    """A relative PATH entry is the call's working directory's (as in Popen's child), and a relative program
    path is recorded absolute, like every other entry."""
    by_path = await client.call_tool(
        "shell_exec", {"command": ["mysql"], "use_shell": False, "cwd": str(workdir), "env": {"PATH": ".:/bin"}}
    )
    assert "standin mysql" in text_of(by_path), text_of(by_path)
    assert end_record(workdir, by_path)["execs"]["entries"][0]["path"] == str(workdir / "mysql")
    relative = await client.call_tool("shell_exec", {"command": ["./mysql"], "use_shell": False, "cwd": str(workdir)})
    assert "standin mysql" in text_of(relative)
    assert end_record(workdir, relative)["execs"]["entries"][0]["path"] == str(workdir / "mysql")
