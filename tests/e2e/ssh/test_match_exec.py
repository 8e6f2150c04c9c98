"""Issue 30, item 3: `Match exec` in ssh_config never runs (adr/0007). A real ssh_config whose `Match exec`
lines would create marker files, read by a real stdio server: at start, for the inventory resources, for
completion, for ssh_hosts and while an ssh_exec call resolves its route, no marker appears; the block never
applies; and ssh_hosts names each refused line among the inventory's load problems."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp_types import ResourceTemplateReference, TextResourceContents

from relay_shell.ssh.inventory.ssh_config import MATCH_EXEC_REFUSED
from tests.conftest import connect, fields, read_records, text_of

pytestmark = pytest.mark.anyio


async def test_match_exec_runs_nothing_anywhere_and_is_a_load_problem(tmp_path: Path) -> None:
    marker = tmp_path / "exec-ran"
    included = tmp_path / "included.conf"
    included.write_text(f'Match host web1 exec "touch {marker}-included"\n    User from-included-exec\n')
    config = tmp_path / "ssh_config"
    config.write_text(
        f'Match exec "touch {marker}-start"\n    Port 2\n'
        f'Match originalhost web1 !exec "touch {marker}-negated"\n    HostName 127.0.0.9\n'
        f"Include {included}\n"
        "Host web1\n    HostName 127.0.0.2\n    Port 1\n    User nobody\n"
    )

    def markers() -> list[str]:
        return sorted(path.name for path in tmp_path.glob("exec-ran*"))

    async with connect(tmp_path / "audit.jsonl", ssh_config=str(config), ssh_connect_timeout="2") as client:
        assert markers() == [], "a Match exec program ran at start"
        for uri in ("relay-shell://inventory", "relay-shell://inventory/web1"):
            contents = (await client.read_resource(uri)).contents[0]
            assert isinstance(contents, TextResourceContents) and "web1" in contents.text
        reference = ResourceTemplateReference(type="ref/resource", uri="relay-shell://inventory/{host}")
        completion = (await client.complete(reference, {"name": "host", "value": "we"})).completion
        assert completion.values == ["web1"]
        assert markers() == [], "a Match exec program ran for a resource or completion"

        hosts = await client.call_tool("ssh_hosts", {})
        problems = fields(hosts)["inventory"]["problems"]
        expected = [f"{config} line 1", f"{config} line 3", f"{included} line 1"]
        assert problems == [f"ssh_config: {where}: {MATCH_EXEC_REFUSED}" for where in expected], problems
        assert f"[PROBLEM: ssh_config: {config} line 1: `Match exec` is refused" in text_of(hosts)
        [web1] = fields(hosts)["inventory"]["hosts"]
        assert (web1["hostname"], web1["port"], web1["user"]) == ("127.0.0.2", 1, "nobody")  # no exec block applied

        # A call resolves the route through ssh_config: nothing runs then either (port 1 refuses the connection).
        result = await client.call_tool("ssh_exec", {"host": "web1", "command": "true"})
        assert text_of(result).startswith("[ERROR: ConnectionRefused: nobody@127.0.0.2:1:"), text_of(result)
        assert markers() == [], "a Match exec program ran while a call resolved its route"
    [end] = [
        item
        for item in read_records(tmp_path / "audit.jsonl")
        if (item["tool"], item.get("phase")) == ("ssh_exec", "end")
    ]
    assert (end["target"]["address"], end["target"]["port"]) == ("127.0.0.2", 1), end
