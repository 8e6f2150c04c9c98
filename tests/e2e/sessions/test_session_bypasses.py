"""Attempts to get around the policy and the audit log through sessions, each found in review and each
run for real: a real server, a real MCP client (JSON-RPC over in-memory streams), real shells in PTYs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from relay_shell.audit.log import AuditLog
from relay_shell.server import build_server
from relay_shell.settings.model import Settings, by_area
from tests.conftest import read_records, text_of

pytestmark = pytest.mark.anyio

PROMPT = "READY> "
AT_PROMPT = "READY> $"


@asynccontextmanager
async def serve(tmp_path: Path, **settings: Any) -> AsyncIterator[tuple[Client, Path]]:
    audit_path = tmp_path / "audit.jsonl"
    audit_log = AuditLog(audit_path, chain=True, fsync=False)
    audit_log.open()
    assembly = build_server(Settings(**by_area({"audit_path": audit_path, **settings})), audit_log)
    try:
        async with Client(assembly.mcp, mode="legacy") as client:
            yield client, audit_path
    finally:
        audit_log.close()


async def spawn(client: Client, command: list[str]) -> str:
    result = await client.call_tool(
        "shell_spawn", {"command": command, "env": {"PS1": PROMPT}, "until": AT_PROMPT, "timeout": 10}
    )
    assert not result.is_error, text_of(result)
    return str(result.structured_content["session_id"])


@pytest.mark.parametrize("shell", [["bash", "--norc", "--noprofile"], ["sh"]])
@pytest.mark.parametrize(
    "data",
    ["rm -rf {victim}\x04", "rm -rf {victim}\x07", "rm -rf {victim} #\x16\x15", "rm -rf {victim} #\x16\x03"],
)
async def test_control_characters_do_not_hide_a_denied_command(tmp_path: Path, shell: list[str], data: str) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    async with serve(tmp_path, policy_mode="guarded", policy_deny='["rm -rf"]') as (client, _):
        session_id = await spawn(client, shell)
        sent = await client.call_tool(
            "session_send", {"session_id": session_id, "data": data.format(victim=victim), "timeout": 1}
        )
        assert text_of(sent).startswith("[DENIED"), text_of(sent)
        # Nothing was typed, so an Enter now submits nothing (an empty line).
        await client.call_tool("session_send", {"session_id": session_id, "data": "", "timeout": 1})
        await asyncio.sleep(0.2)
    assert victim.exists()


async def test_a_denied_line_split_around_ctrl_d_across_calls_stays_denied(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    async with serve(tmp_path, policy_deny='["rm -rf"]') as (client, _):
        session_id = await spawn(client, ["bash", "--norc", "--noprofile"])
        first = await client.call_tool("session_send", {"session_id": session_id, "data": "rm -r", "enter": False})
        assert not first.is_error, text_of(first)
        second = await client.call_tool("session_send", {"session_id": session_id, "data": f"\x04f {victim}"})
        assert text_of(second).startswith("[DENIED"), text_of(second)
    assert victim.exists()


async def test_a_shell_renamed_python_is_still_classified_as_a_shell(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    async with serve(tmp_path, policy_mode="guarded") as (client, _):
        session_id = await spawn(client, ["bash", "--norc", "--noprofile"])
        renamed = await client.call_tool(
            "session_send",
            {"session_id": session_id, "data": "exec -a python3 bash --norc --noprofile", "until": AT_PROMPT},
        )
        assert not renamed.is_error, text_of(renamed)
        denied = await client.call_tool("session_send", {"session_id": session_id, "data": f"rm -rf {victim}"})
        assert text_of(denied).startswith("[DENIED tier 3"), text_of(denied)  # a directory tree: tier 3
        python = await client.call_tool(
            "session_send", {"session_id": session_id, "data": "exec -a py python3 -q", "until": "^>>> "}
        )
        assert not python.is_error, text_of(python)
        hidden = await client.call_tool(
            "session_send", {"session_id": session_id, "data": f"import shutil; shutil.rmtree('{victim}')"}
        )
        # Read as Python: a directory tree removed is tier 3, as `rm -rf` of it is above (adr/0025).
        assert text_of(hidden).startswith("[DENIED tier 3"), text_of(hidden)
    assert victim.exists()


@pytest.mark.parametrize(
    ("mode", "command", "env"),
    [
        ("guarded", ["bash", "--norc", "--noprofile"], {"PS1": "$(touch {marker})$ "}),
        ("guarded", ["bash", "--norc", "--noprofile"], {"BASH_FUNC_ls%%": "() {{ touch {marker}; }}"}),
        ("readonly", ["less", "/etc/hostname"], {"LESSOPEN": "|touch {marker}; cat %s"}),
        ("readonly", ["man", "ls"], {"MANPAGER": "sh -c 'touch {marker}; cat'"}),
    ],
)
async def test_environment_that_runs_code_in_a_session_is_refused(
    tmp_path: Path, mode: str, command: list[str], env: dict[str, str]
) -> None:
    marker = tmp_path / "ran"
    async with serve(tmp_path, policy_mode=mode) as (client, _):
        result = await client.call_tool(
            "shell_spawn",
            {"command": command, "env": {name: value.format(marker=marker) for name, value in env.items()}},
        )
        assert text_of(result).startswith("[DENIED tier 2"), text_of(result)
    assert not marker.exists()


async def test_a_line_classified_before_another_call_typed_is_not_sent(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    async with serve(tmp_path, policy_deny='["rm -rf"]', secret_env_allow="HOME") as (client, _):
        session_id = await spawn(client, ["bash", "--norc", "--noprofile"])

        async def send(delay: float, **arguments: Any) -> str:
            await asyncio.sleep(delay)
            result = await client.call_tool("session_send", {"session_id": session_id, "timeout": 1, **arguments})
            return text_of(result)

        # The first call holds the session's input while it waits for a password prompt that never comes;
        # the other two are classified meanwhile, each against the line as it was before either of them.
        results = await asyncio.gather(
            send(0.0, secret_env="HOME"),
            send(0.1, data="rm -r", enter=False),
            send(0.2, data=f"f {victim}"),
        )
        assert results[0].startswith("[ERROR: EchoOn")
        assert any(result.startswith(("[ERROR: InputRace", "[DENIED")) for result in results[1:]), results
        await asyncio.sleep(0.3)
    assert victim.exists()


async def test_a_password_in_a_call_that_fails_validation_is_withheld(tmp_path: Path) -> None:
    script = tmp_path / "ask.py"
    script.write_text("import getpass\nsecret = getpass.getpass('Password: ')\nprint('got', len(secret))\n")
    async with serve(tmp_path) as (client, audit_path):
        spawned = await client.call_tool(
            "shell_spawn", {"command": ["python3", str(script)], "until": "Password: ", "timeout": 10}
        )
        session_id = spawned.structured_content["session_id"]
        await asyncio.sleep(0.2)  # getpass turns echo off around its prompt
        calls: list[dict[str, Any]] = [
            {"session_id": session_id, "data": "Tr0ub4dor-AAA", "until": "len ("},
            {"session_id": session_id, "data": "Tr0ub4dor-BBB", "keys": ["enterr"]},
            {"session_id": session_id, "data": "Tr0ub4dor-CCC", "timeout": "soon"},
        ]
        for arguments in calls:
            result = await client.call_tool("session_send", arguments)
            assert result.is_error, text_of(result)
        sent = await client.call_tool(
            "session_send", {"session_id": session_id, "data": "Tr0ub4dor-DDD", "until": "got [0-9]+\n"}
        )
        assert "got 13" in text_of(sent)
    log = audit_path.read_text()
    assert "Tr0ub4dor" not in log
    withheld = [record["args"]["data"] for record in read_records(audit_path) if record["tool"] == "session_send"]
    # three refused calls (one record each) and the one that ran (its start and its end record)
    assert withheld == ["[withheld: 13 characters typed at the password prompt 'Password:']"] * 5


async def test_a_catastrophic_until_pattern_fails_the_call_not_the_server(tmp_path: Path) -> None:
    async with serve(tmp_path) as (client, _):
        started = asyncio.get_running_loop().time()
        result = await client.call_tool(
            "shell_spawn",
            {"command": ["bash", "--norc", "-c", "printf 'a%.0s' {1..60}; echo; sleep 30"], "until": "(a|aa)+c"},
        )
        assert text_of(result).startswith("[ERROR: UntilTooSlow: until pattern 0 ('(a|aa)+c') took over"), text_of(
            result
        )
        info = await client.call_tool("server_info", {})
        assert not info.is_error
        assert asyncio.get_running_loop().time() - started < 5


async def test_echo_off_does_not_hide_commands_from_the_audit_log(tmp_path: Path) -> None:
    """`stty -echo` (or a fake "Password:" prompt) must not make typed lines vanish from the record: a shell
    reading its commands with echo off is no password prompt, whatever its prompt says (adr/0026)."""
    target = tmp_path / "made-while-echo-was-off"
    async with serve(tmp_path) as (client, audit_path):
        session_id = await spawn(client, ["sh"])
        await client.call_tool("session_send", {"session_id": session_id, "data": "stty -echo", "until": AT_PROMPT})
        typed = {
            "touch": f"touch {target}; chmod 600 {target}",
            "multi": "echo one\necho two",
            "password": "hunter2-not-a-command",
            "edited": f"x\x15rm -f {target}-edited",  # Ctrl-U erases the x: a command behind a control key
            "fake prompt": "printf 'Password: '",
            "after it": "echo typed-after-a-fake-prompt",
        }
        for data in typed.values():
            result = await client.call_tool(
                "session_send", {"session_id": session_id, "data": data, "until": AT_PROMPT, "timeout": 3}
            )
            assert not result.is_error, text_of(result)
        # A command typed in two pieces.
        await client.call_tool("session_send", {"session_id": session_id, "data": "r", "enter": False})
        second = f"m -f {target}-split"
        await client.call_tool(
            "session_send", {"session_id": session_id, "data": second, "until": AT_PROMPT, "timeout": 3}
        )
    assert target.exists()
    sends = [record for record in read_records(audit_path) if record["tool"] == "session_send"]
    recorded = [record["args"]["data"] for record in sends]
    assert all(data in recorded for data in typed.values()), recorded  # every line, as typed
    assert second in recorded
    assert not any(str(data).startswith("[withheld") for data in recorded)
