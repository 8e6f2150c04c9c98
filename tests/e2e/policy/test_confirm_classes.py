"""Open mode with RELAY_SHELL_CONFIRM_TIER3=token through a real server and the SDK client: what issue 17 made
tier 3 asks for a human's confirmation before anything runs (a recursive delete of a directory, a find or a loop
deleting every file of a tree, a tier-3 command on stdin or in the env overlay), while a single `rm file` runs at
once. One server for the module; many calls."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import connect, read_records, text_of

pytestmark = pytest.mark.anyio


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
