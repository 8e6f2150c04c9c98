"""A command that outlives its call's yield_after runs on as a job (adr/0028), through a real stdio client in both
protocol eras: the call returns the output so far and the handle; session_recv reads on and, once the job ended,
returns the one-shot call's own first line and result; the call's end record is written when the job ends."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import assert_error, connect, fields, read_records, text_of
from tests.e2e.jobs.helpers import RUNNING, call_of_job, call_records, job_of, until_ended

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["legacy", "auto"])
def era(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_sleep_yields_within_its_time_then_reads_the_rest_and_the_exit(tmp_path: Path, era: str) -> None:
    audit = tmp_path / "audit.jsonl"
    async with connect(audit, era) as client:
        started = time.monotonic()
        result = await client.call_tool("shell_exec", {"command": "echo start; sleep 3; echo done", "yield_after": 1})
        returned_after = time.monotonic() - started
        job_id = job_of(result)
        assert returned_after < 1.5, f"the call returned after {returned_after:.2f}s"
        assert text_of(result) == f"[RUNNING: job {job_id} after 1s | cursor 6]\nstart\n"
        assert fields(result)["output"] == "start\n"

        final = await client.call_tool("session_recv", {"session_id": job_id, "until": "done", "timeout": 10})
        text = text_of(final)
        lines = text.splitlines()
        assert lines[0] == "[exit 0]", text  # the first line the one-shot call would have had
        assert lines[1].startswith(f"[NOTE: job {job_id} ended after "), text
        assert lines[2:] == ["done"], text
        got = fields(final)
        assert not final.is_error and got["status"] == "ok" and got["exit_code"] == 0, got
        assert got["running"] is False and got["state"] == "exited" and got["cursor"] == 11, got
        whole = hashlib.sha256(b"start\ndone\n").hexdigest()
        result_fields = got["result"]  # the call's full structured result, as if it had not yielded
        assert result_fields["status"] == "ok" and result_fields["exit_code"] == 0, result_fields
        assert result_fields["output"] == "start\ndone\n" and result_fields["output_sha256"] == whole
        assert result_fields["job_id"] == job_id and result_fields["running"] is False
        again = await client.call_tool("session_recv", {"session_id": job_id})  # the end stays readable
        assert text_of(again).splitlines()[0] == "[exit 0]" and fields(again)["output"] == ""

    call_id = call_of_job(audit, job_id)
    records = call_records(audit, call_id)
    assert list(records) == ["start", "job", "end"], records
    assert records["job"]["job_id"] == job_id and records["job"]["raw_len"] == 6
    assert 1000 <= records["job"]["after_ms"] < 1500, records["job"]
    end = records["end"]
    assert end["outcome"] == "ok" and end["exit_code"] == 0 and end["job_id"] == job_id, end
    assert end["raw_sha256"] == whole and end["raw_len"] == 11, end
    assert end["duration_ms"] >= 3000, end  # the command's whole life
    reads = [record for record in read_records(audit) if record["tool"] == "session_recv"]
    assert [record["phase"] for record in reads] == ["end", "end"], reads  # a read is a pure read, as any
    assert all(record["session_id"] == job_id for record in reads)


async def test_a_running_job_reads_like_a_session(tmp_path: Path) -> None:
    command = "for i in 1 2 3 4 5 6 7 8 9 10; do echo tick$i; sleep 0.3; done"
    async with connect(tmp_path / "audit.jsonl") as client:
        job_id = job_of(await client.call_tool("shell_exec", {"command": command, "yield_after": 0.5}))
        waited = await client.call_tool("session_recv", {"session_id": job_id, "until": "tick5", "timeout": 10})
        text = text_of(waited)
        found = RUNNING.match(text)
        assert found is not None and " | match 0 'tick5']" in text.splitlines()[0], text
        assert "tick5" in text and not waited.is_error
        assert fields(waited)["wait"] == "match" and fields(waited)["running"] is True
        missed = await client.call_tool("session_recv", {"session_id": job_id, "until": "never", "timeout": 0.5})
        assert text_of(missed).splitlines()[0].endswith(" | waited 0.5s: no match for until]"), text_of(missed)
        assert not missed.is_error and fields(missed)["status"] == "running" and fields(missed)["wait"] == "timeout"
        again = await client.call_tool("session_recv", {"session_id": job_id, "since": 0, "timeout": 0.1})
        assert fields(again)["since"] == 0 and fields(again)["output"].startswith("tick1\ntick2\n")
        final = await until_ended(client, job_id)
        assert text_of(final).startswith("[exit 0]\n"), text_of(final)
        assert fields(final)["result"]["output"] == "".join(f"tick{i}\n" for i in range(1, 11))


async def test_session_list_shows_jobs_with_kind_redacted_command_age_state_and_exit(tmp_path: Path) -> None:
    secret = "Hunter2Secret"
    async with connect(tmp_path / "audit.jsonl") as client:
        command = f"sleep 1.5; echo --password={secret} >/dev/null"
        job_id = job_of(await client.call_tool("shell_exec", {"command": command, "yield_after": 0.3}))
        listed = await client.call_tool("session_list", {})
        entry = {item["session_id"]: item for item in fields(listed)["sessions"]}[job_id]
        assert entry["kind"] == "job" and entry["state"] == "running" and entry["running"] is True, entry
        assert secret not in entry["command"] and "--password=[REDACTED]" in entry["command"], entry
        assert entry["age_s"] >= 0.3 and entry["exit_code"] is None, entry
        assert secret not in text_of(listed) and f"{job_id}  running job  age " in text_of(listed)
        await until_ended(client, job_id)
        entry = {item["session_id"]: item for item in fields(await client.call_tool("session_list", {}))["sessions"]}
        assert entry[job_id]["state"] == "exited" and entry[job_id]["exit_code"] == 0, entry
        assert entry[job_id]["status"] == "ok"


async def test_stdin_open_takes_input_until_ctrl_d(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    async with connect(audit) as client:
        started = await client.call_tool(
            "shell_exec", {"command": "cat; echo eof", "yield_after": 0.3, "stdin_open": True}
        )
        job_id = job_of(started)
        sent = await client.call_tool("session_send", {"session_id": job_id, "data": "hello job", "until": "hello"})
        assert text_of(sent).splitlines()[1:] == ["hello job"], text_of(sent)
        closed = await client.call_tool("session_send", {"session_id": job_id, "keys": ["ctrl-d"], "until": "eof"})
        assert text_of(closed).splitlines()[0] == "[exit 0]", text_of(closed)
        assert fields(closed)["result"]["output"] == "hello job\neof\n"
        refused = await client.call_tool("session_send", {"session_id": job_id, "data": "late"})
        assert_error(refused, "SessionEnded", "has ended")
    sends = [record for record in read_records(audit) if record["tool"] == "session_send" and record["phase"] == "end"]
    assert sends[0]["args"]["data"] == "hello job" and sends[0]["tier"] == 0, sends[0]  # classified as cat's stdin


async def test_input_to_a_job_is_classified_as_input_to_its_command(tmp_path: Path) -> None:
    async with connect(tmp_path / "audit.jsonl", policy_mode="guarded") as client:
        job_id = job_of(await client.call_tool("shell_exec", {"command": "sh", "yield_after": 0.3, "stdin_open": True}))
        ran = await client.call_tool("session_send", {"session_id": job_id, "data": "echo fine", "until": "fine"})
        assert "fine" in text_of(ran) and not ran.is_error, text_of(ran)
        refused = await client.call_tool("session_send", {"session_id": job_id, "data": "rm -rf /"})
        assert refused.is_error and text_of(refused).startswith("[DENIED tier 3 "), text_of(refused)
        assert fields(refused)["status"] == "denied"
        killed = await client.call_tool("session_kill", {"session_id": job_id})
        assert not killed.is_error, text_of(killed)


@pytest.mark.parametrize(
    "pieces",
    [
        ["r", "m -rf {victim}"],  # a command word split across two sends
        ["echo start; r\\", "m -rf {victim}"],  # a word continued by a backslash-newline
        ["find {victim} -de", "lete"],  # an option split
        ["echo 'a\n", "echo x'; rm -rf {victim}; echo 'y"],  # a quote left open by the line before (review B2)
    ],
)
async def test_input_to_a_job_split_across_sends_is_classified_as_the_line_it_makes(
    tmp_path: Path, pieces: list[str]
) -> None:
    """What a shell reading stdin runs is the line the sends make together, not each send alone: each piece alone
    is harmless, so the send that completes the line is the one refused."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "file").write_text("x")
    async with connect(tmp_path / "audit.jsonl", policy_mode="guarded") as client:
        job_id = job_of(
            await client.call_tool("shell_exec", {"command": "bash", "yield_after": 0.3, "stdin_open": True})
        )
        first, second = (piece.format(victim=victim) for piece in pieces)
        ended = first.endswith(("\\", "\n"))  # a line ended (or continued) by Enter
        sent = await client.call_tool(
            "session_send", {"session_id": job_id, "data": first.rstrip("\n"), "enter": ended, "timeout": 1}
        )
        assert not sent.is_error, text_of(sent)
        refused = await client.call_tool("session_send", {"session_id": job_id, "data": second, "timeout": 1})
        assert refused.is_error and text_of(refused).startswith("[DENIED tier "), text_of(refused)
        await client.call_tool("session_send", {"session_id": job_id, "keys": ["ctrl-d"], "timeout": 2})
    assert (victim / "file").exists()


@pytest.mark.parametrize("shell", ["bash", "sh"])
async def test_input_to_a_job_with_a_nul_byte_is_refused(tmp_path: Path, shell: str) -> None:
    """Review J1: bash and dash drop NUL from what they read, so `r\0m -rf DIR` runs `rm -rf DIR` while the
    policy reads `r\0m`, an unknown program. Refused as one-shot stdin is; nothing is written."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "file").write_text("x")
    async with connect(tmp_path / "audit.jsonl", policy_mode="guarded") as client:
        job_id = job_of(
            await client.call_tool("shell_exec", {"command": shell, "yield_after": 0.3, "stdin_open": True})
        )
        sent = await client.call_tool("session_send", {"session_id": job_id, "data": f"r\x00m -rf {victim}"})
        assert_error(sent, "InvalidArgument", "data: contains a NUL byte")
        await client.call_tool("session_send", {"session_id": job_id, "keys": ["ctrl-d"], "timeout": 2})
    assert (victim / "file").exists()


async def test_input_to_a_job_without_stdin_open_is_a_clear_error(tmp_path: Path) -> None:
    async with connect(tmp_path / "audit.jsonl") as client:
        job_id = job_of(await client.call_tool("shell_exec", {"command": "sleep 5", "yield_after": 0.3}))
        refused = await client.call_tool("session_send", {"session_id": job_id, "data": "y"})
        assert_error(refused, "StdinClosed", f"job {job_id}: it was not started with stdin_open: true")
        keys = await client.call_tool("session_send", {"session_id": job_id, "keys": ["tab"]})
        assert_error(keys, "InvalidArgument", "keys: 'tab' is not a key a job reads", "ctrl-d", "ctrl-c")
        resized = await client.call_tool("session_resize", {"session_id": job_id, "cols": 80, "rows": 24})
        assert_error(resized, "NotATerminal", job_id)
        secret = await client.call_tool("session_send", {"session_id": job_id, "secret_env": "HOME"})
        assert_error(secret, "InvalidArgument", "secret_env:")
        interrupted = await client.call_tool("session_send", {"session_id": job_id, "keys": ["ctrl-c"], "timeout": 5})
        assert text_of(interrupted).splitlines()[0] == "[signal SIGINT]", text_of(interrupted)


async def test_yield_after_zero_waits_and_the_setting_is_the_default(tmp_path: Path) -> None:
    async with connect(tmp_path / "audit.jsonl", yield_after="0.5") as client:
        assert RUNNING.match(text_of(await client.call_tool("shell_exec", {"command": "sleep 1.5"})))
        waited = await client.call_tool("shell_exec", {"command": "sleep 1.5; echo waited", "yield_after": 0})
        assert text_of(waited) == "[exit 0]\nwaited\n"
        negative = await client.call_tool("shell_exec", {"command": "true", "yield_after": -1})
        assert_error(negative, "InvalidArgument", "yield_after: -1 is negative", "0 (never yield")
        open_stdin = await client.call_tool("shell_exec", {"command": "cat", "yield_after": 0, "stdin_open": True})
        assert_error(open_stdin, "InvalidArgument", "stdin_open: needs yield_after above 0")


async def test_the_timeout_still_bounds_a_jobs_whole_life(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    async with connect(audit) as client:
        job_id = job_of(
            await client.call_tool("shell_exec", {"command": "sleep 30", "yield_after": 0.3, "timeout": 1.5})
        )
        final = await until_ended(client, job_id)
        assert text_of(final).splitlines()[0] == "[TIMEOUT after 1.5s]", text_of(final)
        assert final.is_error and fields(final)["status"] == "timeout" and fields(final)["result"]["timed_out"]
    end = call_records(audit, call_of_job(audit, job_id))["end"]
    assert end["outcome"] == "timeout", end


async def test_a_script_yields_too(tmp_path: Path) -> None:
    async with connect(tmp_path / "audit.jsonl") as client:
        script = "echo one\nsleep 1\necho two\n"
        job_id = job_of(await client.call_tool("shell_script", {"script": script, "yield_after": 0.3}))
        final = await until_ended(client, job_id)
        assert text_of(final).splitlines()[0] == "[exit 0]" and fields(final)["result"]["output"] == "one\ntwo\n"


async def test_max_jobs_makes_a_call_wait_for_its_end_and_ended_jobs_make_way(tmp_path: Path) -> None:
    async with connect(tmp_path / "audit.jsonl", max_jobs="1") as client:
        first = job_of(await client.call_tool("shell_exec", {"command": "sleep 2", "yield_after": 0.3}))
        waited = await client.call_tool("shell_exec", {"command": "sleep 1; echo waited", "yield_after": 0.3})
        lines = text_of(waited).splitlines()
        assert lines[0] == "[exit 0]" and lines[-1] == "waited", lines
        assert lines[1].startswith("[NOTE: not yielded after 0.3s: 1 jobs are running (RELAY_SHELL_MAX_JOBS=1)")
        await until_ended(client, first)
        second = job_of(await client.call_tool("shell_exec", {"command": "sleep 1", "yield_after": 0.3}))
        gone = await client.call_tool("session_recv", {"session_id": first})
        assert_error(gone, "JobGone", f"job {first!r} is gone: dropped for a newer job (RELAY_SHELL_MAX_JOBS)")
        await until_ended(client, second)


async def test_an_ended_jobs_result_is_dropped_after_the_retention(tmp_path: Path) -> None:
    async with connect(tmp_path / "audit.jsonl", job_retention="1") as client:
        job_id = job_of(await client.call_tool("shell_exec", {"command": "sleep 0.6", "yield_after": 0.2}))
        await until_ended(client, job_id)
        time.sleep(1.5)
        gone = await client.call_tool("session_recv", {"session_id": job_id})
        assert_error(gone, "JobGone", "kept 1s after it ended (RELAY_SHELL_JOB_RETENTION)")
        unknown = await client.call_tool("session_recv", {"session_id": "j-000000000000"})
        assert_error(unknown, "UnknownSession", "no job 'j-000000000000'")


async def test_audit_tail_shows_a_jobs_phases_together_by_its_job_id(tmp_path: Path) -> None:
    """Issue 28: `relay-shell audit tail --job J` gathers, from a real server's log, the yielded call's start, its
    job note and its late end, and the reads of the job, leaving out the calls made meanwhile."""
    audit = tmp_path / "audit.jsonl"
    async with connect(audit) as client:
        job_id = job_of(await client.call_tool("shell_exec", {"command": "echo a; sleep 2; echo b", "yield_after": 1}))
        await client.call_tool("shell_exec", {"command": "echo meanwhile"})
        await until_ended(client, job_id)
        await client.call_tool("shell_exec", {"command": "echo after"})
    call_id = call_of_job(audit, job_id)

    def tail(*arguments: str) -> list[dict[str, Any]]:
        command = [sys.executable, "-m", "relay_shell", "audit", "tail", "--path", str(audit), *arguments]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        return [orjson.loads(line) for line in done.stdout.splitlines()]

    shown = [(record.get("call_id"), record.get("phase"), record["tool"]) for record in tail("--job", job_id)]
    read_id = shown[-1][0]
    assert shown == [
        (call_id, "start", "shell_exec"),
        (call_id, "job", "shell_exec"),
        (call_id, "end", "shell_exec"),
        (read_id, "end", "session_recv"),
    ], shown
    assert [record["phase"] for record in tail("--call-id", call_id)] == ["start", "job", "end"]
    refused = subprocess.run(
        [sys.executable, "-m", "relay_shell", "audit", "tail", "--path", str(audit), "--job", call_id],
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode == 2 and "--job: " in refused.stderr and "is not a job id" in refused.stderr
