"""Shared by every kind of test: the anyio backend, the real relay-shell stdio server driven by the SDK client
(`connect`) and what reads its answers (`text_of`, `fields`, `read_records`), and a fleet of real sshd hosts
(`fleet`, from tests/sshd.py). Helpers are imported as `from tests.conftest import ...`."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import CallToolResult, TextContent

from tests.sshd import SshFleet

# The project root: test servers run from here, and scripts/test.sh installs the Node clients under .cache/npm.
REPO_ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "fleet(hosts=3, trusted=()): size of the module's `fleet` and the aliases it trusts (default all)"
    )


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def fleet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshFleet]:
    """Real sshd hosts h01, h02, … on 127.0.0.2, .3, …: one fleet per test module, whose ssh_config names them
    all and whose known_hosts lists the trusted ones. A module chooses with
    `pytestmark = pytest.mark.fleet(hosts=8, trusted=("h01", "h02"))`; by default 3 hosts, all trusted."""
    marker = request.node.get_closest_marker("fleet")
    options: dict[str, Any] = marker.kwargs if marker else {}
    with SshFleet(tmp_path_factory.mktemp("fleet"), options.get("hosts", 3)) as started:
        started.trust(*options.get("trusted", ()))
        yield started


def server_env(audit_path: Path, **settings: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("RELAY_SHELL_")}
    env["RELAY_SHELL_AUDIT_PATH"] = str(audit_path)
    env.update({f"RELAY_SHELL_{name.upper()}": value for name, value in settings.items()})
    return env


@asynccontextmanager
async def connect(audit_path: Path, mode: str = "auto", **settings: str) -> AsyncIterator[Client]:
    """A real stdio connection: mode "legacy" is the 2025-11-25 initialize handshake, "auto" negotiates
    the newest era the server speaks (2026-07-28)."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "relay_shell"], env=server_env(audit_path, **settings)
    )
    async with Client(params, mode=mode) as client:  # type: ignore[arg-type]
        yield client


def text_of(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def fields(result: CallToolResult) -> dict[str, Any]:
    """The result's structured content (what a client's outputSchema validates); its text if there is none."""
    assert result.structured_content is not None, text_of(result)
    return result.structured_content


def assert_error(result: CallToolResult, kind: str, *fragments: str) -> str:
    """The call failed with `[ERROR: kind: …]`, in its text (which names every fragment) and in its structured
    content (status error, the same message); returns the message after the kind."""
    text = text_of(result)
    assert result.is_error, text
    assert text.startswith(f"[ERROR: {kind}: "), text
    got = fields(result)
    assert got["status"] == "error", got
    assert text.startswith(f"[ERROR: {got['error']}]"), (got["error"], text)
    for fragment in fragments:
        assert fragment in text, (fragment, text)
    message: str = got["error"].removeprefix(f"{kind}: ")
    return message


def read_records(audit_path: Path) -> list[dict[str, Any]]:
    if not audit_path.exists():
        return []
    return [orjson.loads(line) for line in audit_path.read_bytes().splitlines()]


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    """An audit log of six chained records (the verify and `relay-shell audit` tests tamper with it)."""
    from relay_shell.audit.log import AuditLog

    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.open()
    for index in range(6):
        log.write({"v": 1, "tool": "shell_exec", "outcome": "ok", "index": index, "args": {"command": f"echo {index}"}})
    log.close()
    return path


def rewrite(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(lines))
