"""1,000 concurrent calls, over stdio and over streamable HTTP: exactly one start and one end record per call,
paired by call_id, each start before its end, and the whole chain verifies."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import connect, read_records, text_of
from tests.e2e.http.server import call, client, start, stop, write_token_file

pytestmark = pytest.mark.anyio

CALLS = 1000


def assert_paired(audit_path: Path, commands: set[str]) -> None:
    """One start and one end record per command, with one call_id; the start comes first; nothing else ran."""
    records = [record for record in read_records(audit_path) if record["tool"] == "shell_exec"]
    by_call: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_call.setdefault(record["call_id"], []).append(record)
    assert len(by_call) == len(commands)
    phases = {tuple(record["phase"] for record in pair) for pair in by_call.values()}
    assert phases == {("start", "end")}  # in the log's order: the start record first
    assert {pair[0]["args"]["command"] for pair in by_call.values()} == commands
    assert all(pair[0]["args"] == pair[1]["args"] for pair in by_call.values())
    assert all(pair[1]["outcome"] == "ok" for pair in by_call.values())
    requests = {(record["client_id"], record["request_id"]) for pair in by_call.values() for record in pair}
    assert len(requests) == len(commands)  # both records of a call name its request
    verified = subprocess.run(
        [sys.executable, "-m", "relay_shell", "audit", "verify", str(audit_path)], capture_output=True, text=True
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "interrupted" not in verified.stdout


async def test_a_thousand_concurrent_calls_over_stdio(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    async with connect(audit_path, max_concurrent_calls=str(CALLS)) as connected:
        results = await asyncio.gather(
            *(connected.call_tool("shell_exec", {"command": f"echo stdio-{index}"}) for index in range(CALLS))
        )
    assert [text_of(result) for result in results] == [f"[exit 0]\nstdio-{index}\n" for index in range(CALLS)]
    assert_paired(audit_path, {f"echo stdio-{index}" for index in range(CALLS)})


async def test_a_thousand_concurrent_calls_over_http(tmp_path: Path) -> None:
    tokens = {"left": "left-token-5e0a1c", "right": "right-token-77c2d9"}
    server = start(tmp_path, token_file=str(write_token_file(tmp_path / "tokens", tokens)), max_concurrent_calls="1000")
    half = CALLS // 2
    try:

        async def one_client(name: str) -> list[Any]:
            async with client(server, tokens[name]) as connected:
                return await asyncio.gather(
                    *(call(connected, "shell_exec", command=f"echo {name}-{index}") for index in range(half))
                )

        results = await asyncio.gather(*(one_client(name) for name in tokens))
    finally:
        assert stop(server) == 0
    for name, client_results in zip(tokens, results, strict=True):
        assert [text_of(result) for result in client_results] == [f"[exit 0]\n{name}-{i}\n" for i in range(half)]
    assert_paired(server.audit_path, {f"echo {name}-{index}" for name in tokens for index in range(half)})
