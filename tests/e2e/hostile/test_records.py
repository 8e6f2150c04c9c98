"""Issue 21, class 4: no call can add more than 64 KiB to the audit log. One bound holds for every audited
field, names included: a 1 MiB `user`, a 70,000-character argument name, a 1 MiB env name, a 100,000-item
host list and a 1 MiB request id are each kept as head + tail + length + SHA-256 (or the first 64 items and
a digest of all), and a record whose bounded fields still add up to more than 64 KiB has its largest fields
replaced by their digests. Each test verifies the chain after its call."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from relay_shell.audit.verify import verify_files
from tests.conftest import read_records
from tests.fuzz.peers import StdioPeer, ask, initialize, sdk_client, server_dir

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024
MAX_RECORD = 64 * 1024


@pytest.fixture(scope="module")
def audit_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("records") / "audit.jsonl"


@pytest.fixture(scope="module")
async def client(audit_path: Path) -> AsyncIterator[Client]:
    async with sdk_client(audit_path, policy_mode="readonly", ssh_config="") as connected:
        yield connected


def summary_of(text: str) -> dict[str, Any]:
    return {
        "head": text[:256],
        "tail": text[-256:],
        "len": len(text),
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
    }


async def last_record(client: Client, audit_path: Path, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    await client.call_tool(tool, arguments)
    lines = audit_path.read_bytes().splitlines()
    assert max(len(line) for line in lines) <= MAX_RECORD, f"a record of {max(len(line) for line in lines)} bytes"
    verified = verify_files([audit_path])
    assert verified.ok, verified.message
    record = json.loads(lines[-1])
    assert record["tool"] in (tool, "unknown")
    return record


async def test_a_1_mib_user_is_kept_as_a_summary(client: Client, audit_path: Path) -> None:
    user = "u" * MiB
    record = await last_record(client, audit_path, "ssh_exec", {"host": "127.0.0.2:1", "command": "true", "user": user})
    assert record["args"]["user"] == summary_of(user)


async def test_a_long_argument_name_is_kept_as_head_tail_and_digest(client: Client, audit_path: Path) -> None:
    name = "n" * 70_000
    record = await last_record(client, audit_path, "shell_exec", {"command": "true", name: 1})
    (kept,) = [key for key in record["args"] if key.startswith("nnn")]
    assert len(kept) < 700 and hashlib.sha256(name.encode()).hexdigest() in kept


async def test_a_1_mib_env_name_is_kept_as_head_tail_and_digest(client: Client, audit_path: Path) -> None:
    name = "E" * MiB
    record = await last_record(client, audit_path, "shell_exec", {"command": "true", "env": {name: "v"}})
    (kept,) = record["args"]["env"]
    assert f"({MiB} characters, sha256 {hashlib.sha256(name.encode()).hexdigest()})" in kept


async def test_a_100000_item_list_keeps_64_items_and_a_digest_of_all(client: Client, audit_path: Path) -> None:
    hosts = [f"h{index}.invalid" for index in range(100_000)]
    record = await last_record(client, audit_path, "ssh_check", {"hosts": hosts})
    kept = record["args"]["hosts"]
    assert kept[:64] == hosts[:64] and kept[64]["omitted"] == 100_000 - 64 and len(kept) == 65
    digest = hashlib.sha256(json.dumps(hosts, separators=(",", ":")).encode()).hexdigest()
    assert kept[64]["sha256_of_all"] == digest


async def test_bounded_fields_that_still_add_up_are_cut_to_fit(client: Client, audit_path: Path) -> None:
    arguments = {f"x{index:02d}" + "n" * 900: "v" * 1000 for index in range(64)}  # each within bounds: 122 KiB
    record = await last_record(client, audit_path, "shell_exec", {"command": "true", **arguments})
    assert record["bounded"] == ["args"] and record["args"]["len"] > MAX_RECORD
    assert len(record["args"]["sha256"]) == 64


async def test_a_1_mib_request_id_is_kept_as_a_summary(tmp_path: Path) -> None:
    peer = await StdioPeer.start(server_dir(), tmp_path / "audit.jsonl", policy_mode="readonly")
    try:
        await initialize(peer)
        request_id = "r" * MiB
        line = json.dumps(
            {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": "server_info"}}
        ).encode()
        answer = await ask(peer, line, ("str", request_id))
        assert answer is not None and "result" in answer
    finally:
        await peer.close()
    lines = (tmp_path / "audit.jsonl").read_bytes().splitlines()
    assert max(len(line) for line in lines) <= MAX_RECORD
    verified = verify_files([tmp_path / "audit.jsonl"])
    assert verified.ok, verified.message
    (record,) = [record for record in read_records(tmp_path / "audit.jsonl") if record["tool"] == "server_info"]
    assert record["request_id"] == summary_of(request_id)
