"""The prompt tests' servers: one open-mode server (2026-07-28 era), one readonly server (2025-11-25 initialize
handshake) and one spoken to in raw JSON-RPC, all on a fixed JSON inventory."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import connect
from tests.e2e.prompts.helpers import NODES, RawServer


@pytest.fixture(scope="module")
def inventory_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    directory = tmp_path_factory.mktemp("prompt-inventory")
    hosts: dict[str, Any] = {
        "web1": {"hostname": "127.0.0.11", "groups": ["web"]},
        "web2": {"hostname": "127.0.0.12", "groups": ["web"]},
        "web10": {"hostname": "127.0.0.13", "groups": ["web"]},
        "db1": {"hostname": "127.0.0.21", "groups": ["db"]},
    }
    hosts.update({f"node{index:03d}": {"hostname": "127.0.0.30"} for index in range(NODES)})
    inventory = directory / "inventory.json"
    inventory.write_text(json.dumps({"hosts": hosts, "groups": {"dbreplica": ["db1"]}}))
    ssh_config = directory / "ssh_config"
    ssh_config.write_text("")
    return {"inventory": str(inventory), "ssh_config": str(ssh_config)}


@pytest.fixture(scope="module")
def audit_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("prompts") / "audit.jsonl"


@pytest.fixture(scope="module")
async def client(audit_path: Path, inventory_files: dict[str, str]) -> AsyncIterator[Client]:
    async with connect(audit_path, **inventory_files) as server:
        yield server


@pytest.fixture(scope="module")
def readonly_audit_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("prompts-readonly") / "audit.jsonl"


@pytest.fixture(scope="module")
async def readonly(readonly_audit_path: Path, inventory_files: dict[str, str]) -> AsyncIterator[Client]:
    async with connect(readonly_audit_path, "legacy", policy_mode="readonly", **inventory_files) as server:
        yield server


@pytest.fixture(scope="module")
def raw_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawServer]:
    audit = tmp_path_factory.mktemp("prompts-raw") / "audit.jsonl"
    server = RawServer(audit)
    yield server
    server.close()
