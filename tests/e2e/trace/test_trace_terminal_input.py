"""End to end: a traced tree cannot push input into a terminal (TIOCSTI, TIOCLINUX), in any mode (adr/0027
"Round 6"; finding K1 of the third attack). Pushed characters are read by the terminal's shell as if typed: a line
that no session_send carried and no policy decision saw. With CAP_SYS_ADMIN (the root server, traced by default)
TIOCSTI works on any terminal, not only the caller's: a one-shot call could type into a session's shell, another
client's, or an operator's login shell. The classifier cannot read a compiled program doing it, so the kernel
refuses it. A real relay-shell over stdio; the terminals are real PTYs.

With the trace off (RELAY_SHELL_EXEC_TRACE=off) the root server refuses both ioctls to itself and everything it
starts with a filter of its own (attack 4's K3, adr/0027 "Round 7"): the same tests, trace off.
"""

from __future__ import annotations

import os
import select
import termios
from pathlib import Path

import pytest

from tests.conftest import connect, fields, text_of

pytestmark = pytest.mark.anyio
PROMPT = "TTY> "

PUSH_INTO_OWN_TERMINAL = (
    "python3 -c \"import fcntl,termios; [fcntl.ioctl(0, termios.TIOCSTI, bytes([c])) for c in b'touch {marker}\\n']\""
)
# Compiled code: what the classifier cannot read. TIOCLINUX's subcode 6 (paste) pushes the console's selection.
PUSH_BY_REQUEST = (
    "import fcntl, sys\n"
    "fd = open(sys.argv[1], 'rb', buffering=0)\n"
    "for request, payload in ((0x5412, b'X'), (0x541C, bytes([6]))):\n"
    "    try:\n"
    "        fcntl.ioctl(fd, request, payload)\n"
    "        print(hex(request), 'pushed')\n"
    "    except OSError as exc:\n"
    "        print(hex(request), 'refused', exc.errno)\n"
)


@pytest.mark.parametrize("exec_trace", ["auto", "off"])
@pytest.mark.parametrize("policy", ["guarded", "open"])
async def test_a_session_cannot_type_into_its_own_terminal(tmp_path: Path, policy: str, exec_trace: str) -> None:
    marker = tmp_path / "MARKER"
    async with connect(tmp_path / "audit.jsonl", policy_mode=policy, exec_trace=exec_trace) as client:
        spawned = await client.call_tool(
            "shell_spawn", {"command": ["sh"], "env": {"PS1": PROMPT}, "until": "TTY> $", "timeout": 10}
        )
        session_id = fields(spawned)["session_id"]
        try:
            sent = await client.call_tool(
                "session_send",
                {
                    "session_id": session_id,
                    "data": PUSH_INTO_OWN_TERMINAL.format(marker=marker),
                    "until": "TTY> $",
                    "timeout": 20,
                },
            )
            text = text_of(sent)
            assert "Operation not permitted" in text, text
            # Whatever was pushed would be read by the shell at its next prompt: give it that prompt.
            await client.call_tool(
                "session_send", {"session_id": session_id, "data": "echo done", "until": "^done", "timeout": 10}
            )
        finally:
            await client.call_tool("session_kill", {"session_id": session_id})
    assert not marker.exists(), "a line pushed into the terminal ran"


@pytest.mark.parametrize("exec_trace", ["auto", "off"])
async def test_a_call_cannot_type_into_another_terminal(tmp_path: Path, exec_trace: str) -> None:
    """The server runs as root here: without the filter TIOCSTI reaches a terminal that is not the caller's."""
    assert os.geteuid() == 0, "this test shows the root server's case (CAP_SYS_ADMIN)"
    script = tmp_path / "push.py"
    script.write_text(PUSH_BY_REQUEST)
    leader, follower = os.openpty()
    try:
        attributes = termios.tcgetattr(follower)
        attributes[3] &= ~termios.ICANON  # a pushed byte is readable at once
        termios.tcsetattr(follower, termios.TCSANOW, attributes)
        async with connect(tmp_path / "audit.jsonl", policy_mode="open", exec_trace=exec_trace) as client:
            info = fields(await client.call_tool("server_info", {}))["info"]
            assert info["exec_trace"]["state"] == ("off" if exec_trace == "off" else "on"), info["exec_trace"]
            result = await client.call_tool(
                "shell_exec", {"command": ["python3", str(script), os.ttyname(follower)], "use_shell": False}
            )
        text = text_of(result)
        assert "0x5412 refused 1" in text and "0x541c refused 1" in text, text
        readable, _, _ = select.select([follower], [], [], 0.5)
        assert not readable, f"input arrived in the terminal: {os.read(follower, 64)!r}"
    finally:
        os.close(leader)
        os.close(follower)
