"""POLICY_DENY and POLICY_ALLOW in RE2 through the real server (issue 30, item 4): an operator's pattern with
catastrophic backtracking in Python's `re` (`(a+)+$`) no longer stalls the server on a crafted command, and a
pattern RE2 does not accept stops startup naming the pattern and the construct. The syntax differences are
tested in tests/unit/test_policy_re2.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tests.conftest import connect, server_env, text_of

pytestmark = pytest.mark.anyio

BACKTRACKING = r"(a+)+$"  # with `re`: 2**n steps on n a's that are not at the end of the text


async def test_a_backtracking_deny_pattern_does_not_stall_a_call(tmp_path: Path) -> None:
    """With `re` the first call would take hours (2**40 steps at each of 40 start positions), holding the event
    loop: no other call, no cancellation, no shutdown. With RE2 it is linear."""
    crafted = "echo " + "a" * 40 + "!"
    async with connect(tmp_path / "audit.jsonl", policy_deny=json.dumps([BACKTRACKING])) as client:
        with anyio.fail_after(30):
            admitted = await client.call_tool("shell_exec", {"command": crafted})
            denied = await client.call_tool("shell_exec", {"command": "echo " + "a" * 40})
    assert text_of(admitted) == "[exit 0]\n" + "a" * 40 + "!\n", text_of(admitted)
    assert text_of(denied).startswith(f"[DENIED tier 0 (observe): matches deny pattern {BACKTRACKING!r}"), text_of(
        denied
    )


async def test_a_backtracking_allow_pattern_does_not_stall_a_guarded_call(tmp_path: Path) -> None:
    allowed = tmp_path / ("a" * 40)
    crafted = tmp_path / ("a" * 40 + "!")
    allowed.mkdir()
    crafted.mkdir()
    allow = json.dumps([r"^chmod .*(a+)+$"])  # chmod is tier 2: guarded mode asks the allow patterns
    async with connect(tmp_path / "audit.jsonl", policy_mode="guarded", policy_allow=allow) as client:
        with anyio.fail_after(30):
            refused = await client.call_tool("shell_exec", {"command": f"chmod 700 {crafted}"})
            admitted = await client.call_tool("shell_exec", {"command": f"chmod 700 {allowed}"})
    assert text_of(refused).startswith("[DENIED tier 2"), text_of(refused)
    assert "without an allow pattern" in text_of(refused)
    assert text_of(admitted).startswith("[exit 0]"), text_of(admitted)
    assert crafted.stat().st_mode & 0o777 != 0o700 and allowed.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize(
    ("setting", "pattern", "construct"),
    [
        ("policy_deny", r"rm(?= -rf)", "invalid perl operator: (?="),
        ("policy_deny", r"(rm) \1", "invalid escape sequence: \\1"),
        ("policy_allow", r"^systemctl restart \w++$", "bad repetition operator: ++"),
        ("policy_deny", r"rm -r{,1}f", "{,1} repeats in Python's re but is literal text in RE2"),
    ],
)
def test_a_pattern_re2_refuses_stops_startup_naming_it_and_the_construct(
    tmp_path: Path, setting: str, pattern: str, construct: str
) -> None:
    env = server_env(tmp_path / "audit.jsonl", **{setting: json.dumps([pattern])})
    started = subprocess.run(
        [sys.executable, "-m", "relay_shell"], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True
    )
    assert started.returncode == 2, started.stderr
    error = started.stderr.strip()
    assert "\n" not in error and "Traceback" not in error, error
    assert f"RELAY_SHELL_{setting.upper()}=" in error and repr(pattern) in error and construct in error, error
