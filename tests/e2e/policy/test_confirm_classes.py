"""Open mode with RELAY_SHELL_CONFIRM_TIER3=token through a real server and the SDK client: what issue 17 made
tier 3 asks for a human's confirmation before anything runs (a recursive delete of a directory, a find or a loop
deleting every file of a tree, a tier-3 command on stdin or in the env overlay, an infrastructure tool, SQL on a
database client's stdin, Windows text, also over ssh_exec), while a single `rm file` runs at once. The
infrastructure, database and Windows programs are stand-ins on an absolute path (a script named `zfs`, `psql`,
`Remove-Item`, … that only records that it ran), so nothing real can be destroyed and a call that was not held
would leave a record. One server per test; many calls."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import connect, read_records, text_of
from tests.e2e.policy.helpers import armed, token_of

pytestmark = [pytest.mark.anyio, pytest.mark.fleet(hosts=1)]  # `fleet`: tests/conftest.py (ssh_exec below)

STAND_INS = ("zfs", "aws", "psql", "Remove-Item", "del")


def stand_ins(directory: Path, ran: Path) -> Path:
    """Executables named like the real programs that append their name, arguments and stdin to `ran`."""
    directory.mkdir(parents=True)
    for name in STAND_INS:
        program = directory / name
        program.write_text(f'#!/bin/sh\n{{ echo "{name} $*"; [ -t 0 ] || cat; }} >> {ran}\n')
        program.chmod(0o755)
    return directory


async def test_tier_3_asks_for_confirmation_and_a_single_rm_does_not(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "kept.txt").write_text("precious\n")
    single = tmp_path / "single.txt"
    single.write_text("gone soon\n")
    asks = [
        {"command": f"rm -r {tree}"},
        {"command": f"rm -rf {tree}/sub"},
        {"command": f"find {tree} -mtime -1 -delete"},
        {"command": f'for f in {tree}/*; do rm -rf "$f"; done'},
        {"command": f"echo {tree} | xargs -I{{}} rm -rf {{}}"},
        {"command": "sh", "stdin": f"rm -rf {tree}\n"},
        {"command": 'sh -c "$CMD"', "env": {"CMD": f"rm -rf {tree}"}},
        {"command": f"busybox rm -rf {tree}"},
    ]
    async with connect(audit_path, policy_mode="open", confirm_tier3="token") as client:
        for arguments in asks:
            result = await client.call_tool("shell_exec", arguments)
            assert result.is_error and text_of(result).startswith("[CONFIRM REQUIRED tier 3: "), (
                arguments,
                text_of(result),
            )
        removed = await client.call_tool("shell_exec", {"command": f"rm {single}"})
        assert text_of(removed).startswith("[exit 0]"), text_of(removed)
    assert (tree / "sub" / "kept.txt").read_text() == "precious\n"
    assert not single.exists()
    records = read_records(audit_path)
    assert sum(1 for record in records if record.get("outcome") == "confirm_required") == len(asks)
    ran = [record for record in records if record["tool"] == "shell_exec" and record.get("outcome") == "ok"]
    assert [record["tier"] for record in ran] == [2]


async def test_infrastructure_sql_on_stdin_and_windows_text_are_held_until_confirmed(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    ran = tmp_path / "ran.log"
    bin_dir = stand_ins(tmp_path / "bin", ran)
    asks = [
        {"command": f"{bin_dir}/zfs destroy pool/ds"},
        {"command": f"{bin_dir}/aws s3 rb s3://b --force"},
        {"command": f"{bin_dir}/psql appdb", "stdin": "DROP DATABASE prod;\n"},
        {"command": f"{bin_dir}/Remove-Item -Recurse -Force C:\\data"},
        {"command": f"{bin_dir}/del /s /q C:\\data"},
    ]
    async with connect(audit_path, policy_mode="open", confirm_tier3="token") as client:
        held = [await client.call_tool("shell_exec", arguments) for arguments in asks]
        for arguments, result in zip(asks, held, strict=True):
            token_of(result)  # CONFIRM REQUIRED tier 3, with a token
            assert "[CONFIRM REQUIRED tier 3: " in text_of(result), arguments
        assert not ran.exists(), ran.read_text()  # nothing ran before a confirmation
        # Confirmed, the same call runs: the stand-in records it, so its silence above means the call was held.
        await armed(client, held[0])
        confirmed = await client.call_tool("shell_exec", asks[0])
        assert text_of(confirmed).startswith("[exit 0]"), text_of(confirmed)
    assert ran.read_text() == "zfs destroy pool/ds\n"
    records = read_records(audit_path)
    assert sum(1 for record in records if record.get("outcome") == "confirm_required") == len(asks)


async def test_over_ssh_exec_windows_text_is_held_and_a_single_rm_is_not(token_client: Client, tmp_path: Path) -> None:
    # ssh_exec also reaches Windows OpenSSH hosts: their text is classified the same way. The fleet's host is
    # this machine, so the stand-in's record and the removed file are visible here.
    ran = tmp_path / "ran.log"
    bin_dir = stand_ins(tmp_path / "bin", ran)
    held = await token_client.call_tool(
        "ssh_exec", {"host": "h01", "command": f"{bin_dir}/Remove-Item -Recurse -Force C:\\data"}
    )
    token_of(held)
    sql = await token_client.call_tool(
        "ssh_exec", {"host": "h01", "command": f"{bin_dir}/psql appdb <<'SQL'\nDROP DATABASE prod;\nSQL\n"}
    )
    token_of(sql)
    assert not ran.exists(), ran.read_text()
    single = tmp_path / "single.txt"
    single.write_text("gone soon\n")
    removed = await token_client.call_tool("ssh_exec", {"host": "h01", "command": f"rm {single}"})
    assert text_of(removed).startswith("[exit 0]"), text_of(removed)
    assert not single.exists()
