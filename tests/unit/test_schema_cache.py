"""The tool-schema cache: a warm start shows exactly the tools a cold start (and the SDK's own Tool.from_function)
would, a stale or corrupt cache is rebuilt, and the file is private."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from mcp.server.mcpserver.tools import Tool

from relay_shell.audit.log import AuditLog
from relay_shell.server import build_server
from relay_shell.settings.model import Settings
from relay_shell.surface import build


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    # Only the cache location changes (the variable an operator would set); everything else is the real code.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    build.SCHEMA_CACHE.loaded = None
    yield tmp_path / "cache"
    build.SCHEMA_CACHE.loaded = None


def definitions(tmp_path: Path) -> dict[str, Any]:
    build.SCHEMA_CACHE.loaded = None  # as a new process would start
    settings = Settings(audit={"audit_path": tmp_path / "audit.jsonl"})
    assembly = build_server(settings, AuditLog(settings.audit.audit_path))
    tools = assembly.mcp._tool_manager.list_tools()
    return {tool.name: (tool.parameters, tool.output_schema, tool.description, tool.annotations) for tool in tools}


def test_a_warm_start_shows_what_the_sdk_would_build(tmp_path: Path, cache_home: Path) -> None:
    cold = definitions(tmp_path)
    path = cache_home / "relay-shell" / "tool-schemas.json"
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    written = path.stat().st_mtime_ns
    warm = definitions(tmp_path)
    assert warm == cold and len(warm) >= 20
    assert path.stat().st_mtime_ns == written  # nothing new to write

    # The SDK building the same functions itself: same inputSchema.
    settings = Settings(audit={"audit_path": tmp_path / "audit.jsonl"})
    for tool in build_server(settings, AuditLog(settings.audit.audit_path)).mcp._tool_manager.list_tools():
        reference = Tool.from_function(tool.fn, structured_output=False)
        assert reference.parameters == cold[tool.name][0], tool.name


def test_a_stale_or_corrupt_cache_is_rebuilt(tmp_path: Path, cache_home: Path) -> None:
    cold = definitions(tmp_path)
    path = cache_home / "relay-shell" / "tool-schemas.json"
    stored = orjson.loads(path.read_bytes())
    forged = {name: {"parameters": {"type": "object", "properties": {}}, "output": None} for name in stored["tools"]}
    path.write_bytes(orjson.dumps({"key": "another version of the code", "tools": forged}))
    assert definitions(tmp_path) == cold
    assert orjson.loads(path.read_bytes())["key"] == stored["key"]
    path.write_bytes(b"{not json")
    assert definitions(tmp_path) == cold


def test_an_unwritable_cache_only_costs_time(tmp_path: Path, cache_home: Path) -> None:
    cache_home.mkdir()
    (cache_home / "relay-shell").write_text("a file where the directory should be")
    assert len(definitions(tmp_path)) >= 20
