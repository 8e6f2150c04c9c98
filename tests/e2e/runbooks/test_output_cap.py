"""A runbook larger than the output cap, end to end over stdio: prompts/get and resources/read return its head
and tail within RELAY_SHELL_MAX_OUTPUT, ending with the [TRUNCATED …] note; each fetch's audit record keeps the
length returned (within the cap) and the digest of the whole file; the tool-call counter counts the fetches under
bounded labels (`prompt:runbook`, whatever the runbook's name)."""

from __future__ import annotations

import hashlib
import re
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import read_records
from tests.e2e.runbooks.helpers import prompt_text, runbook_client, write

pytestmark = pytest.mark.anyio

CAP = 4096
TRUNCATED = re.compile(r"\n\[TRUNCATED: (\d+) bytes produced, (\d+) shown — head \d+ \+ tail \d+\]\Z")


def metrics_of(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def counted(exposition: str, tool: str) -> float:
    """relay_shell_tool_calls_total for this tool label, outcome ok at tier 0 (0 when there is no series yet)."""
    line = f'relay_shell_tool_calls_total{{outcome="ok",tier="0",tool="{tool}"}} '
    found = [row for row in exposition.splitlines() if row.startswith(line)]
    return float(found[0][len(line) :]) if found else 0.0


async def test_a_runbook_over_the_cap_is_cut_with_a_note_recorded_and_counted(tmp_path: Path) -> None:
    books = tmp_path / "books"
    paragraph = "Check the replication lag on every replica before you touch the primary. " * 4 + "\n\n"
    body = "# Big\n\nFIRST LINE OF THE BODY.\n\n" + paragraph * 70 + "LAST LINE OF THE BODY.\n"
    big = write(books / "big.md", "---\nname: big-runbook\ntags: [big]\n---\n" + body)
    assert big.stat().st_size > 20 * 1024
    audit_path = tmp_path / "audit.jsonl"
    async with runbook_client(audit_path, books, max_output=str(CAP), metrics_addr="127.0.0.1:0") as connected:
        info = (await connected.call_tool("server_info", {})).structured_content
        assert info is not None
        port = info["info"]["metrics"]["listen_port"]
        before = metrics_of(port)

        text = prompt_text(await connected.get_prompt("big-runbook"))
        raw = (await connected.read_resource("relay-shell://runbooks/big-runbook")).contents[0].text  # type: ignore[union-attr]
        after = metrics_of(port)

    for returned, produced in ((text, len(f"# Runbook: Big\n\n{body}".encode())), (raw, big.stat().st_size)):
        assert len(returned.encode()) <= CAP
        note = TRUNCATED.search(returned)
        assert note is not None, returned[-200:]
        assert int(note.group(1)) == produced and int(note.group(2)) < CAP
        assert "FIRST LINE OF THE BODY." in returned and "LAST LINE OF THE BODY." in returned  # head and tail
    records = {record["tool"]: record for record in read_records(audit_path) if record.get("phase") == "end"}
    for label, returned in (("prompt:big-runbook", text), ("resource:runbooks", raw)):
        record = records[label]
        assert record["output_len"] == len(returned.encode()) <= CAP
        assert record["output_sha256"] == hashlib.sha256(returned.encode()).hexdigest()
    assert records["resource:runbooks"]["raw_sha256"] == hashlib.sha256(big.read_bytes()).hexdigest()
    assert records["resource:runbooks"]["raw_len"] == big.stat().st_size
    assert counted(after, "prompt:runbook") == counted(before, "prompt:runbook") + 1
    assert counted(after, "resource:runbooks") == counted(before, "resource:runbooks") + 1
    assert "big-runbook" not in after  # no series per runbook name
