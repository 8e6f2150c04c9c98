"""A program that reads only a part of what is typed leaves the rest to the shell (review W1, W2 and S1 of
/work/plan/attack3-findings.md; adr/0026 Round 5), through a real relay-shell over stdio: a secret is not typed to
a one-byte reader behind a password prompt (the shell would run the rest and print it), and a line such a reader
takes a part of is no password: its record holds it as typed. The dialogues of tests/data/adversarial/
pty-partial-read.jsonl (test_adversarial_pty.py) cover the policy's side."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import pytest

from tests.conftest import connect, read_records, text_of
from tests.e2e.sessions.helpers import AT_PROMPT, PROMPT, call, spawn

pytestmark = pytest.mark.anyio

ONE_BYTE_READER = "stty -echo; printf 'Password: '; dd bs=1 count=1 2>/dev/null >/dev/null; stty echo"


async def dd_reading() -> None:
    """Until a dd is blocked in read(2) (its /proc syscall line starts with read's number): a fixed sleep was
    too short on a loaded machine, and the line then reached the terminal before dd was there to take a part."""
    deadline = asyncio.get_running_loop().time() + 10
    while asyncio.get_running_loop().time() < deadline:
        for entry in Path("/proc").iterdir():
            try:
                if (entry / "comm").read_text().strip() == "dd" and (entry / "syscall").read_text().startswith("0 "):
                    await asyncio.sleep(0.05)
                    return
            except OSError:
                continue
        await asyncio.sleep(0.02)
    raise AssertionError("dd never reached its read of the terminal")


async def test_a_secret_is_not_typed_to_a_reader_that_takes_one_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    audit_path = tmp_path / "audit.jsonl"
    secret = f"hunter2-{secrets.token_hex(6)}"
    monkeypatch.setenv("RS_TEST_DB_PASSWORD", secret)
    async with connect(audit_path, policy_mode="guarded", secret_env_allow="RS_TEST_*") as client:
        session_id, _ = await spawn(client, env={"PS1": PROMPT}, until=AT_PROMPT, timeout=10)
        shown = await call(client, "session_send", session_id=session_id, data=ONE_BYTE_READER, until="Password: $")
        assert not shown.is_error, text_of(shown)
        await dd_reading()  # the prompt is printed before dd reads: let it reach its read
        secret_sent = await call(client, "session_send", session_id=session_id, secret_env="RS_TEST_DB_PASSWORD")
        assert text_of(secret_sent).startswith("[ERROR: EchoOn: "), text_of(secret_sent)
        assert "fewer bytes" in text_of(secret_sent), text_of(secret_sent)
        after = await call(client, "session_recv", session_id=session_id, timeout=1)
        texts = [text_of(shown), text_of(secret_sent), text_of(after)]
    # On main the shell ran the rest of the secret: `bash: unter2-…: command not found` reached the client.
    assert all(secret[1:] not in text for text in texts), texts
    assert secret[1:] not in audit_path.read_text()


async def test_a_line_a_one_byte_reader_takes_part_of_is_recorded_as_typed(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    made = tmp_path / "made"
    line = f"Xtouch {made}"  # dd takes `X`; bash runs `touch …` (tier 1: guarded admits it, as `Xtouch` was)
    async with connect(audit_path, policy_mode="guarded") as client:
        session_id, _ = await spawn(client, env={"PS1": PROMPT}, until=AT_PROMPT, timeout=10)
        shown = await call(client, "session_send", session_id=session_id, data=ONE_BYTE_READER, until="Password: $")
        assert not shown.is_error, text_of(shown)
        await dd_reading()  # the prompt is printed before dd reads: let it reach its read
        typed = await call(client, "session_send", session_id=session_id, data=line, until=AT_PROMPT, timeout=10)
        assert not typed.is_error, text_of(typed)
    # Whether bash ran the rest (`made`) is not asserted: on a loaded machine the rest was lost in 2 of 10 runs
    # through relay-shell (never with bash driven directly: an open question, written in the stop's note). What
    # is checked is the guarantee: the line is recorded as typed, never withheld, whoever reads it.
    recorded = [
        record["args"].get("data")
        for record in read_records(audit_path)
        if record["tool"] == "session_send" and record.get("session_id") == session_id
    ]
    # On main both records said `[withheld: … typed at the password prompt 'Password:']`.
    assert recorded.count(line) == 2, recorded


async def hidden_head_reading() -> None:
    """Until a `head` outside the terminal's session (setsid) is blocked in its read of one byte."""
    deadline = asyncio.get_running_loop().time() + 10
    while asyncio.get_running_loop().time() < deadline:
        for entry in Path("/proc").iterdir():
            try:
                if (entry / "comm").read_text().strip() == "head":
                    fields = (entry / "syscall").read_text().split()
                    if fields[:2] == ["0", "0x0"] and fields[3:4] == ["0x1"]:
                        return
            except OSError:
                continue
        await asyncio.sleep(0.02)
    raise AssertionError("head never reached its read of the terminal")


async def test_a_reader_that_left_the_session_takes_a_part_and_the_rest_is_classified(tmp_path: Path) -> None:
    """Attack 4, P1: `setsid head -c1 &` leaves the session (re-parented, no controlling terminal, so no SIGTTIN)
    and still reads the terminal; while the shell waits for its line, head takes `X` and bash runs the rest. The
    session's containment unit still holds head: a reader there outside the foreground group that is not stopped
    makes the line one that may be split, and its rest `rm -rf …` is refused in guarded mode."""
    audit_path = tmp_path / "audit.jsonl"
    doomed = tmp_path / "doomed"
    doomed.mkdir()
    async with connect(audit_path, policy_mode="guarded") as client:
        session_id, _ = await spawn(client, env={"PS1": PROMPT}, until=AT_PROMPT, timeout=10)
        hidden = await call(client, "session_send", session_id=session_id, data="setsid head -c1 >/dev/null &")
        assert not hidden.is_error, text_of(hidden)
        await hidden_head_reading()
        typed = await call(client, "session_send", session_id=session_id, data=f"Xrm -rf {doomed}", timeout=2)
        # On main: admitted at tier 1 (`Xrm`, an unknown program); head took `X` and bash deleted the directory.
        assert typed.is_error and "rm -rf" in text_of(typed), text_of(typed)
    assert doomed.exists()
