"""Nothing typed hides from the log (issue 26, adr/0026), through a real relay-shell over stdio: a session that
turns echo off by itself gets its lines recorded and classified as usual, whatever its prompt says; a real password
prompt (passwd, ssh-keygen, sudo) still withholds the secret, and the record names the prompt.

Runs as root (the test machine's user): it adds a throwaway user for passwd and sudo, and removes it."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import connect, fields, read_records, text_of
from tests.e2e.sessions.helpers import AT_PROMPT, PROMPT, call, plain, spawn

pytestmark = pytest.mark.anyio

ECHO_OFF = {
    "sh": (["sh"], "stty -echo"),
    "the default bash": (None, "set +o emacs; stty -echo"),
    "bash": (["bash", "--norc", "--noprofile"], "set +o emacs; stty -echo"),
}


def sends(audit_path: Path, session_id: str) -> list[dict[str, Any]]:
    return [
        record
        for record in read_records(audit_path)
        if record["tool"] == "session_send" and record.get("session_id") == session_id
    ]


@pytest.mark.parametrize("shell", list(ECHO_OFF))
async def test_a_session_that_turns_echo_off_is_recorded_and_classified_as_usual(tmp_path: Path, shell: str) -> None:
    command, echo_off = ECHO_OFF[shell]
    made, doomed = tmp_path / "made", tmp_path / "doomed"
    (doomed / "sub").mkdir(parents=True)
    (doomed / "sub" / "keep.txt").write_text("precious")
    audit_path = tmp_path / "audit.jsonl"
    admitted = f"touch {made}"
    destructive = [f"/usr/bin/r[m] -rf {doomed}", f"rm -rf {doomed}"]
    async with connect(audit_path, policy_mode="guarded") as client:
        arguments: dict[str, Any] = {"env": {"PS1": PROMPT}, "until": AT_PROMPT, "timeout": 10}
        session_id, _ = await spawn(client, **arguments, **({"command": command} if command else {}))
        turned = await call(client, "session_send", session_id=session_id, data=echo_off, until=AT_PROMPT)
        assert not turned.is_error, text_of(turned)
        ran = await call(client, "session_send", session_id=session_id, data=admitted, until=AT_PROMPT)
        assert not ran.is_error, text_of(ran)
        assert admitted not in plain(text_of(ran))  # echo is off: the terminal did not show the line
        for line in destructive:
            refused = await call(client, "session_send", session_id=session_id, data=line, timeout=1)
            assert text_of(refused).startswith("[DENIED tier "), text_of(refused)
    assert made.exists()
    assert (doomed / "sub" / "keep.txt").read_text() == "precious"
    recorded = sends(audit_path, session_id)
    assert {record["args"]["data"] for record in recorded} == {echo_off, admitted, *destructive}
    for record in recorded:
        if record["args"]["data"] in destructive:
            assert record["denied"] and destructive[0].split()[0] not in ("",) and "withheld" not in record["reason"]


async def test_a_prompt_made_to_read_like_a_password_prompt_hides_nothing(tmp_path: Path) -> None:
    """A shell's own prompt set to `Password:` is refused; printed by hand in front of an empty prompt, it is on
    the screen with echo off, but a shell reads the line: recorded in full, run as classified."""
    made = tmp_path / "made-at-a-fake-prompt"
    audit_path = tmp_path / "audit.jsonl"
    async with connect(audit_path, policy_mode="guarded") as client:
        session_id, _ = await spawn(client, command=["sh"], env={"PS1": PROMPT}, until=AT_PROMPT, timeout=10)
        await call(client, "session_send", session_id=session_id, data="stty -echo", until=AT_PROMPT)
        spoofed = await call(client, "session_send", session_id=session_id, data="PS1='Password: '", timeout=1)
        assert text_of(spoofed).startswith("[DENIED tier 2"), text_of(spoofed)
        assert "password prompt" in text_of(spoofed)
        await call(client, "session_send", session_id=session_id, data="PS1=''", until=AT_PROMPT)
        printed = await call(
            client, "session_send", session_id=session_id, data="printf 'Password: '", until="Password: $"
        )
        assert fields(printed)["wait"] == "match", text_of(printed)
        await call(client, "session_send", session_id=session_id, data=f"touch {made}", timeout=1)
    assert made.exists()
    assert f"touch {made}" in [record["args"]["data"] for record in sends(audit_path, session_id)]


@pytest.mark.parametrize("shell", ["sh", "the default bash"])
async def test_a_prompt_shown_while_nothing_reads_the_terminal_hides_nothing_that_runs(
    tmp_path: Path, shell: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review A1: a password prompt printed with echo off, then a program that does not read (`sleep`): a line
    typed then would be read by the shell afterwards. It is held back from the record as at any password prompt,
    but typed only once a process reads the terminal: here none does, so nothing is typed (PromptGone), and a
    secret is refused. Sent again once the shell reads, the line runs and is recorded in full."""
    made = tmp_path / "made-after-sleeping"
    audit_path = tmp_path / "audit.jsonl"
    secret = f"hunter2-{secrets.token_hex(6)}"
    monkeypatch.setenv("RS_TEST_DB_PASSWORD", secret)
    command, _ = ECHO_OFF[shell]
    line = f"touch {made}"
    async with connect(audit_path, policy_mode="guarded", secret_env_allow="RS_TEST_*") as client:
        arguments: dict[str, Any] = {"env": {"PS1": PROMPT}, "until": AT_PROMPT, "timeout": 10}
        session_id, _ = await spawn(client, **arguments, **({"command": command} if command else {}))
        bait = "stty -echo; printf 'Password: '; sleep 3"
        shown = await call(client, "session_send", session_id=session_id, data=bait, until="Password: $")
        assert fields(shown)["wait"] == "match", text_of(shown)
        held = await call(client, "session_send", session_id=session_id, data=line, timeout=1)
        assert text_of(held).startswith("[ERROR: PromptGone: "), text_of(held)
        secret_sent = await call(client, "session_send", session_id=session_id, secret_env="RS_TEST_DB_PASSWORD")
        assert text_of(secret_sent).startswith("[ERROR: EchoOn: "), text_of(secret_sent)
        after = await call(client, "session_recv", session_id=session_id, until=AT_PROMPT, timeout=10)
        assert not made.exists(), "nothing was typed while sleep held the terminal"
        ran = await call(client, "session_send", session_id=session_id, data=line, until=AT_PROMPT, timeout=10)
        assert not ran.is_error, text_of(ran)
        texts = [text_of(held), text_of(secret_sent), text_of(after), text_of(ran)]
    assert made.exists()
    recorded = [record["args"].get("data") for record in sends(audit_path, session_id)]
    assert recorded.count(line) == 2, recorded  # the run's start and end records hold the line in full
    assert all(secret not in text for text in texts)
    assert secret not in audit_path.read_text()


@pytest.fixture
def test_user() -> Iterator[tuple[str, str]]:
    """A throwaway user (no home, a password), removed afterwards: for passwd and sudo."""
    assert os.geteuid() == 0, "run as root (the test machine's user): the test adds a user"
    name = f"rs-pty-{secrets.token_hex(3)}"
    password = f"Pw-{secrets.token_hex(8)}"
    subprocess.run(["useradd", "-M", "-N", "-s", "/bin/sh", name], check=True)
    try:
        subprocess.run(["chpasswd"], input=f"{name}:{password}\n", text=True, check=True)
        yield name, password
    finally:
        subprocess.run(["userdel", name], check=False)


def password_hash(user: str) -> str:
    return subprocess.run(["getent", "shadow", user], capture_output=True, text=True, check=True).stdout.split(":")[1]


def matches_hash(password: str, hashed: str) -> bool:
    check = "print crypt($ARGV[0], $ARGV[1]) eq $ARGV[1] ? 'yes' : 'no'"
    return subprocess.run(["perl", "-e", check, password, hashed], capture_output=True, text=True).stdout == "yes"


def assert_withheld(audit_path: Path, session_id: str, secret: str, prompts: list[str]) -> None:
    assert secret not in audit_path.read_text()
    withheld = [record["args"]["data"] for record in sends(audit_path, session_id)]
    expected = [f"[withheld: {len(secret)} characters typed at the password prompt {prompt!r}]" for prompt in prompts]
    assert [data for data in withheld if data.startswith("[withheld")] == [text for text in expected for _ in (0, 1)]


async def test_passwd_withholds_the_new_password(tmp_path: Path, test_user: tuple[str, str]) -> None:
    user, _ = test_user
    new_password = f"New-{secrets.token_hex(8)}"
    audit_path = tmp_path / "audit.jsonl"
    async with connect(audit_path) as client:
        session_id, _ = await spawn(client, command=["passwd", user], until="New password: ", timeout=10)
        again = await call(client, "session_send", session_id=session_id, data=new_password, until="new password: ")
        assert fields(again)["wait"] == "match", text_of(again)
        done = await call(client, "session_send", session_id=session_id, data=new_password, until="successfully")
        assert fields(done)["wait"] == "match", text_of(done)
    assert matches_hash(new_password, password_hash(user))
    assert_withheld(audit_path, session_id, new_password, ["New password:", "Retype new password:"])


async def test_ssh_keygen_withholds_the_passphrase(tmp_path: Path) -> None:
    key = tmp_path / "key"
    passphrase = f"Phrase-{secrets.token_hex(8)}"
    audit_path = tmp_path / "audit.jsonl"
    async with connect(audit_path) as client:
        command = ["ssh-keygen", "-q", "-t", "ed25519", "-C", "test", "-f", str(key)]
        session_id, _ = await spawn(client, command=command, until="passphrase\\): ", timeout=10)
        again = await call(client, "session_send", session_id=session_id, data=passphrase, until="again: ")
        assert fields(again)["wait"] == "match", text_of(again)
        await call(client, "session_send", session_id=session_id, data=passphrase, until="(?!)", timeout=5)
    opened = subprocess.run(["ssh-keygen", "-y", "-P", passphrase, "-f", str(key)], capture_output=True, text=True)
    assert opened.returncode == 0 and opened.stdout.startswith("ssh-ed25519 "), opened.stderr
    assert_withheld(
        audit_path,
        session_id,
        passphrase,
        ["Enter passphrase (empty for no passphrase):", "Enter same passphrase again:"],
    )


async def test_sudo_withholds_the_password(tmp_path: Path, test_user: tuple[str, str]) -> None:
    user, password = test_user
    audit_path = tmp_path / "audit.jsonl"
    async with connect(audit_path) as client:
        # setpriv, not `su -c`: su starts the command in a session of its own, without the terminal sudo reads.
        command = [
            "setpriv",
            f"--reuid={user}",
            "--regid=nogroup",
            "--init-groups",
            "--reset-env",
            "sudo",
            "-k",
            "true",
        ]
        session_id, _ = await spawn(client, command=command, until="password for ", timeout=10)
        answered = await call(client, "session_send", session_id=session_id, data=password, until="sudoers")
        # The right password: sudo authenticated the user, then found them in no sudoers entry.
        assert "not in the sudoers file" in plain(text_of(answered)), text_of(answered)
    assert password not in audit_path.read_text()
    withheld = [record["args"]["data"] for record in sends(audit_path, session_id)]
    prompt = f"[sudo] password for {user}:"
    assert withheld == [f"[withheld: {len(password)} characters typed at the password prompt {prompt!r}]"] * 2
