"""End to end: with one filter for every tree (adr/0027), each exec still goes into the record of the call whose
tree ran it, whatever the tree does to its process group, session and parentage: calls running at the same time,
each with a `setsid` child, a double fork that calls setsid in between and never executes (its grandchild is
re-parented to the server, the subreaper), in both containment modes. What attribution cannot see is recorded all
the same, under no call (`exec:late` with `unattributed`): a process that left its session and its parent, and
scrubbed its environment's unit marker, where no cgroup holds it (subreaper mode).
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.conftest import connect, fields, read_records, text_of

pytestmark = pytest.mark.anyio
PYTHON = "/usr/bin/python3"
# Forks, makes a session, forks again and ends: the grandchild (whose parent never executed anything) is
# re-parented to the server, sleeps, then executes /bin/echo with the token.
DOUBLE_FORK = (
    PYTHON + " -c 'import os, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    '        time.sleep(0.4); os.execv("/bin/echo", ["echo", "{token}"])\n'
    "    os._exit(0)\n"
    "time.sleep(1.2)'"
)


def end_of(audit: Path, token: str) -> dict[str, Any]:
    """The end record of the call whose command held `token`."""
    records = read_records(audit)
    start = next(r for r in records if r.get("phase") == "start" and token in str(r.get("args")))
    return next(r for r in records if r.get("phase") == "end" and r["call_id"] == start["call_id"])


def echoed(record: dict[str, Any]) -> set[str]:
    return {entry["argv"][1] for entry in record["execs"]["entries"] if entry["argv"][:1] in (["echo"], ["/bin/echo"])}


@pytest.mark.parametrize("containment", ["cgroup", "subreaper"])
async def test_concurrent_calls_each_keep_their_own_escapes(tmp_path: Path, containment: str) -> None:
    audit = tmp_path / "audit.jsonl"
    tokens = {name: f"{name}-{secrets.token_hex(4)}" for name in ("first", "second")}
    results: dict[str, Any] = {}

    async def call(client: Client, name: str) -> None:
        token = tokens[name]
        command = (
            f"(setsid sh -c '/bin/echo {token}-setsid' &); "
            + DOUBLE_FORK.format(token=token + "-double")
            + f"; /bin/echo {token}-direct"
        )
        results[name] = await client.call_tool("shell_exec", {"command": command, "timeout": 20})

    async with connect(audit, containment=containment) as client:
        info = fields(await client.call_tool("server_info", {}))["info"]
        assert info["exec_trace"]["state"] == "on" and info["containment"]["mode"] == containment, info
        async with anyio.create_task_group() as group:
            group.start_soon(call, client, "first")
            group.start_soon(call, client, "second")
        unattributed = fields(await client.call_tool("server_info", {}))["info"]["exec_trace"]["unattributed_execs"]
    assert unattributed == 0
    for name, token in tokens.items():
        assert fields(results[name])["status"] == "ok", text_of(results[name])
        record = end_of(audit, token)
        other = tokens["second" if name == "first" else "first"]
        seen = echoed(record)
        assert {f"{token}-setsid", f"{token}-double", f"{token}-direct"} <= seen, (name, record["execs"])
        assert not any(item.startswith(other) for item in seen), (name, seen)


@pytest.mark.parametrize("containment", ["cgroup", "subreaper"])
async def test_a_process_that_sheds_everything_is_still_recorded(tmp_path: Path, containment: str) -> None:
    """`env -i` drops the unit's marker; the double fork leaves the session and the parent. A cgroup still holds
    it (attributed to its call); in subreaper mode nothing says whose it is: recorded under no call."""
    audit = tmp_path / "audit.jsonl"
    token = f"shed-{secrets.token_hex(4)}"
    async with connect(audit, containment=containment) as client:
        result = await client.call_tool("shell_exec", {"command": "env -i " + DOUBLE_FORK.format(token=token)})
        assert fields(result)["status"] == "ok", text_of(result)
        call_id = end_of(audit, token)["call_id"]
        deadline = time.monotonic() + 15
        late: list[dict[str, Any]] = []
        while not late and time.monotonic() < deadline:
            await anyio.sleep(0.1)
            late = [
                record for record in read_records(audit) if record["tool"] == "exec:late" and token in echoed(record)
            ]
        info = fields(await client.call_tool("server_info", {}))["info"]["exec_trace"]
    in_call = token in echoed(end_of(audit, token))
    if containment == "cgroup":  # the grandchild stays in the call's cgroup: its call's, in time or late
        assert in_call or (late and late[0]["call_id"] == call_id), late
        assert info["unattributed_execs"] == 0, info
    else:
        assert not in_call and late, "the exec must be recorded even when no tree claims it"
        assert late[0]["call_id"] is None and late[0]["execs"]["unattributed"] is True, late[0]
        assert info["unattributed_execs"] == 1, info
