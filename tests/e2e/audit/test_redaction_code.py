"""Nothing hides from the log behind a secret's name (issue 26, finding A of the second attack; adr/0003 "Code in a
secret's place"): through a real stdio server with the exec trace off — so the record of the call is all an auditor
has — a command substitution in a secret-named value runs, and the call's records name what it ran; a literal
secret, also one inside the substitution, never reaches the log."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import connect, read_records, text_of

pytestmark = pytest.mark.anyio

LITERAL = "hunter2-literal-Zq81"
INSIDE = "c2VjcmV0LWluc2lkZS1aeDQ0"  # the literal an `echo … | base64 -d` decodes
SPELLINGS = [
    'API_TOKEN="$(touch {marker}; echo x)" true',
    "TOKEN=$(touch {marker}) true",
    "token=`touch {marker}` true",
    'x() {{ :; }}; x --password "$(touch {marker})"',
    "echo secret: $(touch {marker})",
    'curl -s -H "Authorization: Bearer $(touch {marker})" http://127.0.0.1:9 || true',
]


@pytest.mark.parametrize("mode", ["guarded", "open"])
async def test_code_in_a_secret_value_is_named_in_the_record(tmp_path: Path, mode: str) -> None:
    audit = tmp_path / "audit.jsonl"
    async with connect(audit, policy_mode=mode, exec_trace="off") as client:
        for index, spelling in enumerate(SPELLINGS):
            marker = tmp_path / f"M{index}"
            command = spelling.format(marker=marker)
            result = await client.call_tool("shell_exec", {"command": command, "cwd": str(tmp_path)})
            assert not text_of(result).startswith(("[DENIED", "[CONFIRM", "[ERROR")), text_of(result)
            assert marker.exists(), f"{command}: the substitution did not run"
            recorded = [
                record["args"]["command"]
                for record in read_records(audit)
                if isinstance(record.get("args"), dict) and str(marker) in str(record["args"].get("command", ""))
            ]
            assert recorded, f"{command}: no record names `touch {marker}`: {read_records(audit)[-2:]}"
            assert all(f"touch {marker}" in text for text in recorded), recorded


async def test_a_literal_secret_never_reaches_the_log(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    marker = tmp_path / "M"
    commands = [
        f'API_TOKEN="{LITERAL}" true',
        f"API_TOKEN='$(touch {marker}; echo {LITERAL})' true",  # single quotes: data, not code
        f'API_TOKEN="$(echo {INSIDE} | base64 -d)" true',
        f'API_TOKEN="$(touch {marker}; printf %s {LITERAL})" true',
        f'TOKEN="$(curl -s -u me:{LITERAL} http://127.0.0.1:9 || true)" true',
        f'PASSWORD="$(DB_PASSWORD={LITERAL} env | head -c0)" true',
    ]
    async with connect(audit, policy_mode="guarded", exec_trace="off") as client:
        for command in commands:
            result = await client.call_tool("shell_exec", {"command": command, "cwd": str(tmp_path)})
            assert not text_of(result).startswith(("[DENIED", "[ERROR")), text_of(result)
    log = audit.read_text()
    assert LITERAL not in log
    assert INSIDE not in log
    assert "base64 -d" in log and f"touch {marker}" in log  # the code around them is there


async def test_a_secret_named_variable_the_text_runs_is_named_in_the_record(tmp_path: Path) -> None:
    """Attack 4, A4: `DB_PASSWORD='echo forged >> F'; eval "$DB_PASSWORD"` ran a builtin and a redirection the
    exec trace never sees, and the record said only `DB_PASSWORD='[REDACTED]'`; the same through the env overlay."""
    audit = tmp_path / "audit.jsonl"
    victim = tmp_path / "victim.txt"
    async with connect(audit, policy_mode="guarded", exec_trace="off") as client:
        calls = [
            {"command": f"DB_PASSWORD='echo forged >> {victim}'; eval \"$DB_PASSWORD\""},
            {"command": 'eval "$SECRET_KEY"', "env": {"SECRET_KEY": f"echo forged2 >> {victim}"}},
        ]
        for arguments in calls:
            result = await client.call_tool("shell_exec", arguments)
            assert not text_of(result).startswith(("[DENIED", "[ERROR")), text_of(result)
    assert victim.read_text() == "forged\nforged2\n"
    recorded = [str(record["args"]) for record in read_records(audit) if record.get("tool") == "shell_exec"]
    assert len(recorded) == 4
    assert all(f">> {victim}" in text for text in recorded), recorded
