"""End to end: PTY sessions (shell_spawn, session_*) through a real relay-shell subprocess over stdio.

Each test starts its own server, so settings (policy, buffer size, transcripts) and the disconnect can be
chosen per test. The tests speak the newest era the server offers (`mode="auto"`, 2026-07-28, where every
request arrives on a fresh SDK Connection object); `test_sessions_work_in_both_eras` drives one session
across calls in both eras.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import stat
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp_types import CallToolResult

from relay_shell.audit.verify import verify_files
from relay_shell.sessions.ansi import strip_ansi
from tests.conftest import assert_error, connect, fields, read_records, text_of
from tests.e2e.sessions.helpers import (
    AT_PROMPT,
    PROMPT,
    call,
    end_record,
    plain,
    run_in,
    run_in_terminal,
    session_records,
    spawn,
    spawn_bash,
    survivors,
    wait_members,
)
from tests.procs import alive, comm, server_pid

pytestmark = pytest.mark.anyio

MODE = "auto"
SESSION_TOOLS = ("shell_spawn", "session_send", "session_recv", "session_resize", "session_kill")
NEVER = r"(?!)"  # a valid regex that matches nothing: wait for the end of the session


# -- 1. a Python REPL -------------------------------------------------------------------------------------


async def test_python_repl_answers_each_expression_in_one_call(tmp_path: Path) -> None:
    async with connect(tmp_path / "audit.jsonl", mode=MODE) as client:
        session_id, spawned = await spawn(client, command="python3 -q", until="^>>> ", timeout=10)
        assert fields(spawned)["wait"] == "match"
        assert text_of(spawned).endswith(">>> ")
        assert isinstance(fields(spawned)["pid"], int)
        cases = [
            ("6 * 7", "42"),
            ("print('ab' * 3)", "ababab"),
            ("def double(x):\n    return 2 * x\n", None),
            ("double(21) + 100", "142"),
            ("import time; time.sleep(1); print('slept', sum(range(5)))", "slept 10"),
            ("[n * n for n in range(4)]", "[0, 1, 4, 9]"),
            ("1 / 0", "ZeroDivisionError: division by zero"),
        ]
        for expression, answer in cases:
            result = await call(client, "session_send", session_id=session_id, data=expression, until="^>>> ")
            text = text_of(result)
            assert not result.is_error, text
            assert fields(result)["wait"] == "match", text
            assert fields(result)["match_text"] == ">>> "
            assert text.startswith("[match 0 '>>> ' | cursor ")
            assert text.endswith(">>> "), text
            if answer is not None:
                assert answer in plain(text).splitlines(), text
        # The cursor in the headline is the end of the output read so far.
        listed = await call(client, "session_list")
        (described,) = fields(listed)["sessions"]
        assert described["session_id"] == session_id
        assert described["unread_bytes"] == 0
        assert f"cursor {described['cursor']}]" in text


# -- 2. bash and sh: commands and job control --------------------------------------------------------------


@pytest.mark.parametrize("shell", ["bash", "sh"])
async def test_shell_commands_and_ctrl_c_interrupts_the_foreground_job(tmp_path: Path, shell: str) -> None:
    async with connect(tmp_path / "audit.jsonl", mode=MODE) as client:
        command = None if shell == "bash" else "sh"
        session_id, spawned = await spawn(
            client, command=command, cwd=str(tmp_path), env={"PS1": PROMPT}, until=AT_PROMPT, timeout=10
        )
        leader = fields(spawned)["pid"]
        text = await run_in(client, session_id, "echo answer-$((6*7)); pwd")
        lines = plain(text).splitlines()
        assert "answer-42" in lines
        assert str(tmp_path) in lines
        text = await run_in(client, session_id, "ls /nonexistent-dir; echo status=$?")
        assert re.search(r"^status=2$", plain(text), re.MULTILINE), text

        started = await call(client, "session_send", session_id=session_id, data="sleep 30", timeout=1)
        assert not started.is_error
        members = wait_members(leader, lambda found: any(comm(pid) == "sleep" for pid in found))
        (sleeper,) = [pid for pid in members if comm(pid) == "sleep"]

        begun = time.monotonic()
        interrupted = await call(
            client, "session_send", session_id=session_id, keys=["ctrl-c"], until=AT_PROMPT, timeout=10
        )
        elapsed = time.monotonic() - begun
        assert fields(interrupted)["wait"] == "match", text_of(interrupted)
        assert elapsed < 3, elapsed
        assert not survivors({sleeper}, within=1.0)
        # The shell itself survived its job's Ctrl-C and still works.
        assert alive(leader)
        text = await run_in(client, session_id, "echo after-$((1+1))")
        assert "after-2" in plain(text).splitlines()


# -- 3. passwords ------------------------------------------------------------------------------------------


async def test_password_typed_at_a_no_echo_prompt_is_withheld_from_the_audit_log(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    password = "correct-horse-battery-7391"
    script = tmp_path / "ask.sh"
    script.write_text(
        'read -s -p "Password: " pw\necho\n'
        "printf '%s' \"$pw\" | sha256sum | cut -c1-16 | sed 's/^/digest /'\n"
        'echo "got ${#pw} chars"\n'
    )
    async with connect(audit_path, mode=MODE) as client:
        session_id, spawned = await spawn(client, command=["bash", str(script)], until="Password: ", timeout=10)
        assert fields(spawned)["wait"] == "match"
        answered = await call(client, "session_send", session_id=session_id, data=password, until=r"got \d+ chars")
        text = text_of(answered)
        assert not answered.is_error, text
        assert f"got {len(password)} chars" in text
        assert f"digest {hashlib.sha256(password.encode()).hexdigest()[:16]}" in text
        assert password not in text
        ended = await call(client, "session_recv", session_id=session_id, until=NEVER, timeout=5)
        assert fields(ended)["wait"] == "eof"
        assert text_of(ended).startswith("[eof: exit 0 | cursor ")
    log = audit_path.read_text()
    assert password not in log
    sends = [record for record in session_records(audit_path, session_id) if record["tool"] == "session_send"]
    assert [send["phase"] for send in sends] == ["start", "end"]  # both withhold it, the start record too
    for send in sends:
        assert send["args"]["data"].startswith("[withheld: ")
        assert f"{len(password)} characters" in send["args"]["data"]


async def test_secret_env_is_typed_only_at_a_no_echo_prompt_and_never_shown_or_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    audit_path = tmp_path / "audit.jsonl"
    secret = "hunter2-secret-5dfa0c"
    monkeypatch.setenv("RS_TEST_SECRET", secret)
    script = tmp_path / "ask.py"
    script.write_text(
        "import getpass, hashlib\n"
        "value = getpass.getpass('Password: ')\n"
        "print('digest', hashlib.sha256(value.encode()).hexdigest()[:16])\n"
        "print(f'got {len(value)} chars')\n"
    )
    texts: list[str] = []
    async with connect(audit_path, mode=MODE, secret_env_allow="RS_TEST_*") as client:
        session_id = await spawn_bash(client)
        # At the shell prompt the terminal echoes: the secret would be shown, so it is refused.
        refused = await call(client, "session_send", session_id=session_id, secret_env="RS_TEST_SECRET")
        texts.append(text_of(refused))
        assert refused.is_error
        assert text_of(refused).startswith("[ERROR: EchoOn: ")
        unset = await call(client, "session_send", session_id=session_id, secret_env="RS_TEST_NOT_SET")
        assert unset.is_error and "secret_env" in text_of(unset) and "not set" in text_of(unset)
        both = await call(client, "session_send", session_id=session_id, data="x", secret_env="RS_TEST_SECRET")
        assert both.is_error and "secret_env" in text_of(both)
        # Only variables the operator set aside may be typed: a program could print what it reads.
        other = await call(client, "session_send", session_id=session_id, secret_env="HOME")
        assert other.is_error and "not a variable the operator allows" in text_of(other)
        assert "RS_TEST_*" in text_of(other)

        texts.append(await run_in(client, session_id, f"{sys.executable} {script}", until="Password: "))
        typed = await call(client, "session_send", session_id=session_id, secret_env="RS_TEST_SECRET", until=AT_PROMPT)
        text = text_of(typed)
        texts.append(text)
        assert not typed.is_error, text
        assert fields(typed)["wait"] == "match"
        assert f"got {len(secret)} chars" in text
        assert f"digest {hashlib.sha256(secret.encode()).hexdigest()[:16]}" in text
        texts.append(text_of(await call(client, "session_recv", session_id=session_id, since=0)))
        texts.append(text_of(await call(client, "session_list")))
    assert all(secret not in text for text in texts)
    assert secret not in audit_path.read_text()
    sends = [record for record in session_records(audit_path, session_id) if record["tool"] == "session_send"]
    assert any("secret_env" in record["args"] and record.get("outcome") == "ok" for record in sends)


# -- 4. a pager --------------------------------------------------------------------------------------------


async def test_less_pages_searches_and_quits(tmp_path: Path) -> None:
    numbers = tmp_path / "numbers.txt"
    numbers.write_text("".join(f"{n}\n" for n in range(1, 5001)))
    async with connect(tmp_path / "audit.jsonl", mode=MODE) as client:
        session_id, spawned = await spawn(client, command=["less", str(numbers)], rows=24, until=r"numbers\.txt")
        first = plain(text_of(spawned)).split("\n")
        assert fields(spawned)["wait"] == "match"
        assert "1" in first and "23" in first and "24" not in first  # 23 lines and the prompt line

        paged = await call(client, "session_send", session_id=session_id, keys=["pagedown"], until=r"\b46\b")
        assert fields(paged)["wait"] == "match", text_of(paged)
        assert re.search(r"(?<!\d)24\n25\n26\n", plain(text_of(paged))), text_of(paged)
        spaced = await call(client, "session_send", session_id=session_id, keys=["space"], until=r"\b69\b")
        assert fields(spaced)["wait"] == "match", text_of(spaced)

        found = await call(client, "session_send", session_id=session_id, data="/4000", until=r"4000\n4001\n")
        assert fields(found)["wait"] == "match", text_of(found)
        assert "4010" in plain(text_of(found)).split("\n")

        quit_ = await call(client, "session_send", session_id=session_id, data="q", enter=False, until=NEVER, timeout=5)
        assert fields(quit_)["wait"] == "eof", text_of(quit_)
        assert text_of(quit_).startswith("[eof: exit 0 | cursor ")
        assert fields(quit_)["state"] == "exited"
        assert fields(quit_)["exit_code"] == 0


# -- 5. top and a curses program ---------------------------------------------------------------------------


async def test_top_batch_output(tmp_path: Path) -> None:
    async with connect(tmp_path / "audit.jsonl", mode=MODE) as client:
        session_id, spawned = await spawn(client, command="top -b -n 1", until=NEVER, timeout=10)
        text = plain(text_of(spawned))
        assert fields(spawned)["wait"] == "eof", text
        assert text_of(spawned).startswith(f"[spawned {session_id} pid ")
        assert "eof: exit 0" in text_of(spawned).split("\n")[0]
        assert re.search(r"^top - \d", text, re.MULTILINE), text
        assert re.search(r"^Tasks: +\d+ total", text, re.MULTILINE), text
        assert re.search(r"^ *PID +USER ", text, re.MULTILINE), text
        assert re.search(r"^ *\d+ +\S+ .* top *$", text, re.MULTILINE), text  # top lists itself


CURSES_SIZE = """\
import curses


def main(screen):
    while True:
        rows, cols = screen.getmaxyx()
        screen.clear()
        screen.addstr(0, 0, f"SIZE {cols}x{rows}")
        screen.refresh()
        key = screen.getch()
        if key == ord("q"):
            return


curses.wrapper(main)
"""


def redraw_text(result: CallToolResult) -> str:
    return strip_ansi(text_of(result).encode()).decode().replace("\r", "\n")


async def test_curses_program_redraws_at_the_new_size_after_resize(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server started from a terminal (or by a test runner's worker) often has COLUMNS/LINES in its own
    # environment: the session's size must still be the PTY's, never those.
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("LINES", "24")
    script = tmp_path / "size.py"
    script.write_text(CURSES_SIZE)
    audit_path = tmp_path / "audit.jsonl"
    async with connect(audit_path, mode=MODE) as client:
        session_id, spawned = await spawn(
            client, command=[sys.executable, str(script)], cols=120, rows=40, until=r"SIZE \d+x\d+", timeout=10
        )
        assert fields(spawned)["match_text"] == "SIZE 120x40"
        resized = await call(client, "session_resize", session_id=session_id, cols=100, rows=30)
        assert not resized.is_error, text_of(resized)
        assert text_of(resized).startswith("[resized to 100x30 | ")
        # The resize returns the program's redraw (output until it goes quiet).
        assert "SIZE 100x30" in redraw_text(resized), text_of(resized)
        again = await call(client, "session_resize", session_id=session_id, cols=80, rows=24)
        assert "SIZE 80x24" in redraw_text(again), text_of(again)
        listed = fields(await call(client, "session_list"))["sessions"]
        assert [(item["cols"], item["rows"]) for item in listed] == [(80, 24)]
        quit_ = await call(client, "session_send", session_id=session_id, data="q", enter=False, until=NEVER, timeout=5)
        assert fields(quit_)["wait"] == "eof", text_of(quit_)
        assert fields(quit_)["exit_code"] == 0


# -- 6. bad input ------------------------------------------------------------------------------------------


async def test_bad_input_is_a_clear_error(tmp_path: Path) -> None:
    async with connect(tmp_path / "audit.jsonl", mode=MODE) as client:
        unknown = await call(client, "session_send", session_id="s-000000000000", data="ls")
        assert_error(unknown, "UnknownSession", "s-000000000000")
        unknown_recv = await call(client, "session_recv", session_id="nonsense")
        assert_error(unknown_recv, "UnknownSession", "nonsense")

        closed_id = await spawn_bash(client)
        killed = await call(client, "session_kill", session_id=closed_id)
        assert not killed.is_error, text_of(killed)
        assert_error(await call(client, "session_send", session_id=closed_id, data="ls"), "SessionClosed", closed_id)
        assert_error(await call(client, "session_recv", session_id=closed_id), "SessionClosed", closed_id)
        assert_error(await call(client, "session_kill", session_id=closed_id), "SessionClosed", closed_id)

        session_id = await spawn_bash(client)
        bad_regex = await call(client, "session_send", session_id=session_id, data="echo hi", until="(unclosed")
        assert_error(bad_regex, "InvalidArgument", "until", "regex")
        bad_regex_recv = await call(client, "session_recv", session_id=session_id, until=["ok", "[z-a]"])
        assert_error(bad_regex_recv, "InvalidArgument", "until[1]", "regex")
        huge = await call(client, "session_send", session_id=session_id, data="x" * (64 * 1024 + 1))
        assert_error(huge, "InvalidArgument", "data", str(64 * 1024 + 1), str(64 * 1024))
        bad_key = await call(client, "session_send", session_id=session_id, keys=["ctrl-c", "hyper-q"])
        assert_error(bad_key, "InvalidArgument", "keys", "hyper-q", "pagedown", "ctrl-a")
        bad_signal = await call(client, "session_kill", session_id=session_id, signal="SIGBOGUS")
        assert_error(bad_signal, "InvalidArgument", "signal", "SIGBOGUS")
        for cols, rows, named in ((0, 24, "cols: 0"), (100000, 24, "cols: 100000"), (80, 0, "rows: 0")):
            resized = await call(client, "session_resize", session_id=session_id, cols=cols, rows=rows)
            assert_error(resized, "InvalidArgument", named, "out of range")
        bad_spawn = await call(client, "shell_spawn", command="echo hi", cols=5)
        assert_error(bad_spawn, "InvalidArgument", "cols: 5")
        missing = await call(client, "shell_spawn", command=["/nonexistent/program"])
        assert_error(missing, "InvalidArgument", "/nonexistent/program", "not found")
        beyond = await call(client, "session_recv", session_id=session_id, since=10**9)
        assert_error(beyond, "InvalidArgument", "since")

        # None of the refused calls typed anything: the line is empty and the shell still answers.
        text = await run_in(client, session_id, "echo alive-$((2+2))")
        lines = plain(text).splitlines()
        assert "alive-4" in lines
        assert "hi" not in lines  # `echo hi` with the bad `until` never reached the shell
        assert "x" * 100 not in text
        listed = fields(await call(client, "session_list"))["sessions"]
        assert [item["session_id"] for item in listed] == [session_id]


# -- 7. cursors --------------------------------------------------------------------------------------------


async def test_since_rereads_and_a_small_ring_reports_dropped_bytes(tmp_path: Path) -> None:
    async with connect(tmp_path / "audit.jsonl", mode=MODE, session_buffer_bytes="65536") as client:
        session_id = await spawn_bash(client)
        first = await call(client, "session_send", session_id=session_id, data="echo first-$((1))", until=AT_PROMPT)
        cursor = fields(first)["cursor"]
        again = await call(client, "session_recv", session_id=session_id, since=0)
        assert fields(again)["since"] == 0
        assert fields(again)["cursor"] == cursor
        assert fields(again)["dropped"] == 0
        reread = plain(text_of(again))
        assert reread.split("\n", 1)[1].startswith(PROMPT)  # from the very first byte: the first prompt
        assert "first-1" in reread.splitlines()
        assert fields(again)["output_bytes"] == cursor
        middle = await call(client, "session_recv", session_id=session_id, since=cursor - len(PROMPT))
        assert fields(middle)["output"] == PROMPT
        nothing = await call(client, "session_recv", session_id=session_id, timeout=0.5)
        assert fields(nothing)["output"] == ""
        assert fields(nothing)["cursor"] == cursor

        # ~340 KB of output into a 64 KiB ring, nobody reading while it is produced.
        await call(client, "session_send", session_id=session_id, data="sleep 0.5; seq 1 50000; echo END-$((6*7))")
        done = await call(
            client, "session_recv", session_id=session_id, since=0, until=r"END-42\n" + PROMPT, timeout=15
        )
        assert fields(done)["wait"] == "match", text_of(done)
        total = fields(done)["cursor"]
        assert total > 338894  # seq 1 50000 alone is 288894 bytes + 50000 CRs
        assert fields(done)["dropped"] == total - 65536
        assert fields(done)["since"] == total - 65536
        assert fields(done)["output_bytes"] == 65536
        assert f"dropped {total - 65536} bytes" in text_of(done).split("\n")[0]
        listed = fields(await call(client, "session_list"))["sessions"][0]
        assert listed["cursor"] == total
        assert listed["unread_bytes"] == 0
        assert listed["dropped_bytes"] == 0


# -- 8. policy on typed input ------------------------------------------------------------------------------


async def test_deny_pattern_stops_typed_lines_even_split_across_calls(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("precious")
    async with connect(audit_path, mode=MODE, policy_deny=json.dumps(["rm -rf"])) as client:
        session_id = await spawn_bash(client)
        whole = await call(client, "session_send", session_id=session_id, data=f"rm -rf {victim}", until=AT_PROMPT)
        assert whole.is_error
        assert text_of(whole).startswith("[DENIED tier "), text_of(whole)
        assert "rm -rf" in text_of(whole)
        typed_nothing = await call(client, "session_recv", session_id=session_id, timeout=0.5)
        assert fields(typed_nothing)["output"] == ""

        start = await call(client, "session_send", session_id=session_id, data="rm -r", enter=False)
        assert not start.is_error, text_of(start)
        rest = await call(client, "session_send", session_id=session_id, data=f"f {victim}", until=AT_PROMPT)
        assert rest.is_error
        assert text_of(rest).startswith("[DENIED tier "), text_of(rest)
        # Abandon the half-typed line; the shell still works.
        await call(client, "session_send", session_id=session_id, keys=["ctrl-c"], until=AT_PROMPT)
        text = await run_in(client, session_id, "echo fine-$((3+4))")
        assert "fine-7" in plain(text).splitlines()
        await anyio.sleep(0.3)
    assert (victim / "keep").read_text() == "precious"
    denied = [record for record in session_records(audit_path, session_id) if record["denied"]]
    assert len(denied) == 2
    assert all(record["tool"] == "session_send" and "rm -rf" in record["reason"] for record in denied)


async def test_readonly_mode_refuses_to_spawn_a_shell(tmp_path: Path) -> None:
    """ADR 0005: shell_spawn classifies its command like shell_exec, so in readonly mode a shell (tier 1,
    not known to be read-only) is refused, and so is a command that changes something."""
    marker = tmp_path / "marker"
    async with connect(tmp_path / "audit.jsonl", mode=MODE, policy_mode="readonly") as client:
        for arguments in ({}, {"command": "sh"}, {"command": f"touch {marker}"}):
            refused = await call(client, "shell_spawn", env={"PS1": PROMPT}, **arguments)
            assert refused.is_error, text_of(refused)
            assert text_of(refused).startswith("[DENIED tier 1"), text_of(refused)
            assert "readonly" in text_of(refused)
        assert fields(await call(client, "session_list"))["sessions"] == []
        await anyio.sleep(0.3)
    assert not marker.exists()


async def test_readonly_mode_checks_every_line_typed_into_a_session(tmp_path: Path) -> None:
    """A shell cannot be spawned in readonly mode, but `cat` (tier 0) can; a line typed into it is
    classified like a command all the same."""
    marker = tmp_path / "marker"
    async with connect(tmp_path / "audit.jsonl", mode=MODE, policy_mode="readonly") as client:
        session_id, spawned = await spawn(client, command="cat")
        assert fields(spawned)["state"] == "running"
        looked = await call(client, "session_send", session_id=session_id, data=f"ls {tmp_path}", until=r"^ls .*\n")
        assert not looked.is_error, text_of(looked)
        assert plain(text_of(looked)).count(f"ls {tmp_path}\n") == 2  # the echo, then cat's copy
        touched = await call(client, "session_send", session_id=session_id, data=f"touch {marker}")
        assert text_of(touched).startswith("[DENIED tier 1"), text_of(touched)
        assert "readonly" in text_of(touched)
        pending = await call(client, "session_send", session_id=session_id, data=f"touch {marker}", enter=False)
        assert text_of(pending).startswith("[DENIED tier 1"), text_of(pending)
        unread = await call(client, "session_recv", session_id=session_id, timeout=0.5)
        assert "touch" not in text_of(unread)
    assert not marker.exists()


# -- 9. audit ----------------------------------------------------------------------------------------------


async def test_every_session_call_is_audited_and_the_end_is_recorded(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    async with connect(audit_path, mode=MODE) as client:
        session_id = await spawn_bash(client)
        await run_in(client, session_id, "echo one")
        await call(client, "session_recv", session_id=session_id, timeout=0.2)
        await call(client, "session_resize", session_id=session_id, cols=100, rows=30)
        await call(client, "session_list")
        killed = await call(client, "session_kill", session_id=session_id)
        assert not killed.is_error, text_of(killed)
        assert text_of(killed).startswith(f"[closed {session_id}: killed by SIG")

        exiting_id = await spawn_bash(client)
        exited = await call(client, "session_send", session_id=exiting_id, data="exit 3", until=NEVER, timeout=5)
        assert fields(exited)["wait"] == "eof"
        assert text_of(exited).startswith("[eof: exit 3 | cursor ")
        assert fields(exited)["exit_code"] == 3

        interrupted_id = await spawn_bash(client)
        await call(client, "session_send", session_id=interrupted_id, data="sleep 30", timeout=0.5)
        kept = await call(client, "session_kill", session_id=interrupted_id, signal="INT", close=False)
        assert text_of(kept).startswith(f"[sent SIGINT to the foreground job of {interrupted_id}]")
        prompt = await call(client, "session_recv", session_id=interrupted_id, until=AT_PROMPT, timeout=5)
        assert fields(prompt)["wait"] == "match"
    records = read_records(audit_path)
    calls = [record for record in records if record["tool"] in SESSION_TOOLS]
    ends = [record for record in calls if record["phase"] == "end"]
    assert len(ends) == 11  # one end record per call made above
    # ... and a start record, written before it acted, for each call but the reads (session_recv)
    starts = [record for record in calls if record["phase"] == "start"]
    assert {record["call_id"] for record in starts} < {record["call_id"] for record in ends}
    assert {record["tool"] for record in starts} == set(SESSION_TOOLS) - {"session_recv"}
    assert len(starts) == 9
    assert all(record.get("session_id") for record in calls)
    assert [record["tool"] for record in records].count("session_list") == 1
    tools = [record["tool"] for record in session_records(audit_path, session_id)]
    for tool in SESSION_TOOLS:
        assert tool in tools
    assert tools.index("session:end") > tools.index("session_resize")

    end = end_record(audit_path, session_id)
    assert end["signal"] in ("SIGHUP", "SIGTERM", "SIGKILL")
    assert end["exit_code"] is None
    assert "session_kill" in end["reason"]
    assert end["raw_len"] > 0

    exited_end = end_record(audit_path, exiting_id)
    assert exited_end["exit_code"] == 3
    assert exited_end["signal"] is None
    assert exited_end["reason"] == "exited"

    assert verify_files([audit_path]).ok


# -- 10. transcripts ---------------------------------------------------------------------------------------


async def test_transcript_is_a_private_asciicast_matching_the_audited_digest(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    casts = tmp_path / "casts"
    async with connect(audit_path, mode=MODE, record_dir=str(casts)) as client:
        session_id = await spawn_bash(client)
        await run_in(client, session_id, "echo cast-$((3*4))")
        await run_in(client, session_id, "printf 'line-%s\\n' a b")
        await call(client, "session_resize", session_id=session_id, cols=90, rows=20)
        killed = await call(client, "session_kill", session_id=session_id)
        assert not killed.is_error
    cast = casts / f"{session_id}.cast"
    assert cast.exists()
    assert stat.S_IMODE(cast.stat().st_mode) == 0o600
    content = cast.read_bytes()
    assert hashlib.sha256(content).hexdigest() == end_record(audit_path, session_id)["transcript_sha256"]
    lines = content.decode().splitlines()
    header = json.loads(lines[0])
    assert (header["version"], header["width"], header["height"]) == (2, 120, 40)
    events = [json.loads(line) for line in lines[1:]]
    assert {event[1] for event in events} >= {"o", "i", "r"}
    assert [event[2] for event in events if event[1] == "r"] == ["90x20"]
    # `asciinema cat` insists on a terminal (it opens /dev/tty): give it one.
    exit_status, output = run_in_terminal(["asciinema", "cat", str(cast)])
    assert exit_status == 0, output
    assert "cast-12" in output
    assert "line-a" in output and "line-b" in output


# -- 11. cleanup when the client goes away ------------------------------------------------------------------


async def start_busy_sessions(client: Client, count: int) -> set[int]:
    """Sessions each running a background and a foreground sleep; returns every process in them."""
    pids: set[int] = set()
    for _ in range(count):
        session_id, spawned = await spawn(client, env={"PS1": PROMPT}, until=AT_PROMPT, timeout=10)
        leader = fields(spawned)["pid"]
        await call(client, "session_send", session_id=session_id, data="sleep 300 & sleep 301", timeout=0.3)
        members = wait_members(leader, lambda found: sum(comm(pid) == "sleep" for pid in found) == 2)
        assert leader in members
        assert sum(comm(pid) == "sleep" for pid in members) == 2, members
        pids.update(members)
    return pids


async def test_disconnect_ends_every_session_process(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    async with connect(audit_path, mode=MODE) as client:
        pids = await start_busy_sessions(client, 3)
        assert len(pids) == 9
        leaving = time.monotonic()
    assert not survivors(pids, within=max(0.0, 2.0 - (time.monotonic() - leaving)))


async def test_disconnect_is_recorded_as_the_reason_sessions_ended(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    async with connect(audit_path, mode=MODE) as client:
        session_id = await spawn_bash(client)
    assert end_record(audit_path, session_id)["reason"] == "client disconnected"


async def sigterm_the_server(audit_path: Path, sessions: int) -> tuple[set[int], set[int]]:
    """Start busy sessions, SIGTERM the server; returns the session processes still alive 2 s after the
    signal and the server if still alive 1 s later."""
    checked: dict[str, set[int]] = {}
    try:
        async with connect(audit_path, mode=MODE) as client:
            pids = await start_busy_sessions(client, sessions)
            assert len(pids) == 3 * sessions
            server = server_pid(audit_path)
            os.kill(server, signal.SIGTERM)
            checked["left"] = survivors(pids, within=2.0)
            checked["server_left"] = survivors({server}, within=1.0)
    except Exception:
        # The client may report its server vanishing; only what was checked above matters.
        if not checked:
            raise
    return checked["left"], checked["server_left"]


async def test_sigterm_to_the_server_ends_every_session_process(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    left, _ = await sigterm_the_server(audit_path, 2)
    assert left == set()
    ends = [record for record in read_records(audit_path) if record["tool"] == "session:end"]
    assert len(ends) == 2
    assert all(record["signal"] or record["exit_code"] is not None for record in ends)
    assert {record["reason"] for record in ends} == {"server stopped"}
    assert verify_files([audit_path]).ok


async def test_sigterm_stops_the_server(tmp_path: Path) -> None:
    _, server_left = await sigterm_the_server(tmp_path / "audit.jsonl", 1)
    assert server_left == set(), "the server was still running 2-3 s after SIGTERM"


# -- both protocol eras ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_sessions_work_in_both_eras(tmp_path: Path, mode: str) -> None:
    async with connect(tmp_path / "audit.jsonl", mode=mode) as client:
        session_id, _ = await spawn(client, command="python3 -q", until="^>>> ", timeout=10)
        answer = await call(client, "session_send", session_id=session_id, data="6 * 7", until="^>>> ")
        assert not answer.is_error, text_of(answer)
        assert "42" in plain(text_of(answer)).splitlines()
        resized = await call(client, "session_resize", session_id=session_id, cols=90, rows=30)
        assert not resized.is_error, text_of(resized)
        size = await call(client, "session_send", session_id=session_id, data="import os; os.get_terminal_size()")
        assert "os.terminal_size(columns=90, lines=30)" in plain(text_of(size)), text_of(size)
        again = await call(client, "session_recv", session_id=session_id, since=0)
        assert "42" in plain(text_of(again)).splitlines()
        listed = fields(await call(client, "session_list"))["sessions"]
        assert [item["session_id"] for item in listed] == [session_id]
        killed = await call(client, "session_kill", session_id=session_id)
        assert not killed.is_error, text_of(killed)
        gone = await call(client, "session_recv", session_id=session_id)
        assert text_of(gone).startswith("[ERROR: SessionClosed: "), text_of(gone)
