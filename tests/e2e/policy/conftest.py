"""Fixtures of the policy tests: a stdio server with RELAY_SHELL_CONFIRM_TIER3=token on the module's sshd fleet."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import connect
from tests.sshd import SshFleet


@pytest.fixture(scope="module")
def token_audit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("confirm-token") / "audit.jsonl"


@pytest.fixture(scope="module")
async def token_client(fleet: SshFleet, token_audit: Path) -> AsyncIterator[Client]:
    async with connect(token_audit, confirm_tier3="token", ssh_config=str(fleet.ssh_config)) as client:
        yield client
