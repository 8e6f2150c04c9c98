"""The password-prompt rule's parts, in process (sessions/passwords.py, settings/sessions.py; adr/0026): what the
default RELAY_SHELL_PASSPROMPT patterns take for a password prompt (in Python's re, as compiled by default, and
in RE2, as an operator's patterns are), the last line of output they are matched against, and which input reads
like one answer. The rule runs for real against passwd, ssh-keygen, sudo and shells with echo off in
tests/e2e/sessions/test_pty_passwords.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from relay_shell.sessions.passwords import last_output_line, withheld_input
from relay_shell.sessions.ring import OutputRing
from relay_shell.sessions.typed import Typing
from relay_shell.settings.patterns import compile_re2, matches
from relay_shell.settings.sessions import DEFAULT_PASSPROMPT, DEFAULT_PASSPROMPT_TEXT

PROMPTS = [
    "[sudo] password for alice:",
    "Password:",
    "New password:",
    "Retype new password:",
    "Current password:",
    "alice@db1's password:",
    "Enter passphrase (empty for no passphrase):",
    "Enter same passphrase again:",
    "Enter passphrase for key '/root/.ssh/id_ed25519':",
    "Enter PEM pass phrase:",
    "Verifying - Enter PEM pass phrase:",
    "Enter PIN for 'PIV Card Holder pin (PIV AUTH key)':",
    "Verification code:",
    "Enter your one-time password:",
    "Passcode or option (1-3):",
    "Enter the encryption key:",
]
NOT_PROMPTS = ["READY>", "$", "root@vm:/tmp#", ">>>", "mysql>", "Name:", "Continue? [y/N]", "spinning up", "(END)"]


@pytest.mark.parametrize("compiled", ["re", "re2"])
def test_the_default_patterns_take_password_prompts_for_what_they_are(compiled: str) -> None:
    patterns = DEFAULT_PASSPROMPT if compiled == "re" else tuple(compile_re2(DEFAULT_PASSPROMPT_TEXT))
    assert [prompt for prompt in PROMPTS if not any(matches(pattern, prompt) for pattern in patterns)] == []
    assert [line for line in NOT_PROMPTS if any(matches(pattern, line) for pattern in patterns)] == []


def _session(output: bytes, typing: Typing | None = None) -> Any:
    ring = OutputRing(4096)
    ring.append(output)
    return SimpleNamespace(ring=ring, typing=typing or Typing())


@pytest.mark.parametrize(
    ("output", "line"),
    [
        (b"some output\r\n[sudo] password for alice: ", "[sudo] password for alice: "),
        (b"Enter passphrase: \r\n", "Enter passphrase: "),  # the cursor on an empty line below the prompt
        (b"\x1b[1mPassword:\x1b[0m ", "Password: "),
        (b"progress 10%\rprogress 90%\rPassword: ", "Password: "),  # a carriage return starts the line over
        (b"", ""),
    ],
)
def test_the_prompt_is_the_last_line_with_something_on_it(output: bytes, line: str) -> None:
    assert last_output_line(_session(output)) == line


@pytest.mark.parametrize(
    ("data", "typing", "withheld"),
    [
        ("hunter2", None, True),
        ("hunter2\r", None, True),
        ("two\nlines", None, False),
        ("edited\x15secret", None, False),
        ("rest of a line", Typing(["typed before "]), False),
        ("after a recall", Typing([], edited=True), False),
        ("", None, False),
    ],
)
def test_only_input_that_reads_like_one_answer_is_withheld(data: str, typing: Typing | None, withheld: bool) -> None:
    arguments = {"session_id": "s-1", "data": data}
    result = withheld_input(arguments, _session(b"Password: ", typing), "Password:")
    assert (result is not None) is withheld
    if result is not None:
        assert result["data"] == f"[withheld: {len(data)} characters typed at the password prompt 'Password:']"
