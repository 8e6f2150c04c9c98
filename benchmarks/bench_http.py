"""Over streamable HTTP: `shell_exec true` latency vs the same SDK client calling a bare MCPServer's HTTP tool that
spawns `/bin/sh -c true` (median ≤ 1.15×), and throughput with 8 concurrent clients (≥ 0.90× the bare server's,
issue 27).

relay-shell runs with bearer-token authentication, as a service would; the bare server has none (the floor is
the transport and the spawn). Calls alternate one by one between the two servers for the latency, and the two
throughput runs alternate too, so machine noise hits both alike. Each server's CPU per call in the throughput runs
is printed beside its rate: with eight clients the clients, the servers and the commands share the machine's
cores, and the server's CPU per call is what it adds.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from benchmarks.common import HERE, HTTP_THROUGHPUT, Options, Row, cpu_seconds, median, ratio_row, run_alone, this_code

CALLS = 300
WARMUP = 20
CLIENTS = 8
CALLS_PER_CLIENT = 60
ROUNDS = 3
LATENCY_LIMIT = 1.15
THROUGHPUT_FLOOR = 0.90  # issue 27
TOKEN = "bench-token-" + os.urandom(8).hex()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_relay(directory: Path) -> tuple[subprocess.Popen[str], str]:
    tokens = directory / "tokens"
    tokens.write_text(f"bench {hashlib.sha256(TOKEN.encode()).hexdigest()}\n")
    tokens.chmod(0o600)
    env = {key: value for key, value in os.environ.items() if not key.startswith("RELAY_SHELL_")}
    env.update(
        RELAY_SHELL_TRANSPORT="http",
        RELAY_SHELL_HTTP_PORT="0",
        RELAY_SHELL_TOKEN_FILE=str(tokens),
        RELAY_SHELL_AUDIT_PATH=str(directory / "audit.jsonl"),
        RELAY_SHELL_MAX_CONCURRENT_CALLS="1000",
    )
    code = this_code()
    process = subprocess.Popen(
        code.argv(),
        env=code.environment(env),
        cwd=code.root,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    while line := process.stderr.readline():
        found = re.search(r"speaking MCP at (http://\S+/mcp)", line)
        if found:
            return process, found.group(1)
    raise RuntimeError("relay-shell did not start")


def start_bare() -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(HERE / "bare_server.py"), "--http", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return process, f"http://127.0.0.1:{port}/mcp"
        time.sleep(0.05)
    raise RuntimeError("the bare server did not start")


@asynccontextmanager
async def connect(url: str, token: str | None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))
    async with Client(transport, mode="legacy") as client:
        yield client


async def timed(call: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


async def throughput(url: str, token: str | None, tool: str, arguments: dict[str, str]) -> float:
    """Calls per second with CLIENTS clients each making CALLS_PER_CLIENT calls back to back."""
    async with connect(url, token) as first:  # connected clients first: the run measures calls, not handshakes
        clients = [first]
        async with contextlib.AsyncExitStack() as stack:
            for _ in range(CLIENTS - 1):
                clients.append(await stack.enter_async_context(connect(url, token)))

            async def worker(client: Client) -> None:
                for _ in range(CALLS_PER_CLIENT):
                    result = await client.call_tool(tool, arguments)
                    assert not result.is_error, result

            started = time.perf_counter()
            async with anyio.create_task_group() as group:
                for client in clients:
                    group.start_soon(worker, client)
            return CLIENTS * CALLS_PER_CLIENT / (time.perf_counter() - started)


async def measure_all() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="bench-http-") as directory:
        relay, relay_url = start_relay(Path(directory))
        bare, bare_url = start_bare()
        try:
            async with connect(relay_url, TOKEN) as ours, connect(bare_url, None) as floor:

                async def relay_call() -> None:
                    result = await ours.call_tool("shell_exec", {"command": "true"})
                    assert not result.is_error, result

                async def bare_call() -> None:
                    await floor.call_tool("sh_true", {})

                for _ in range(WARMUP):
                    await relay_call()
                    await bare_call()
                relay_samples: list[float] = []
                bare_samples: list[float] = []
                for _ in range(CALLS):
                    bare_samples.append(await timed(bare_call))
                    relay_samples.append(await timed(relay_call))
            relay_rates: list[float] = []
            bare_rates: list[float] = []
            relay_cpu = bare_cpu = 0.0
            for _ in range(ROUNDS):
                used = cpu_seconds(bare.pid)
                bare_rates.append(await throughput(bare_url, None, "sh_true", {}))
                bare_cpu += cpu_seconds(bare.pid) - used
                used = cpu_seconds(relay.pid)
                relay_rates.append(await throughput(relay_url, TOKEN, "shell_exec", {"command": "true"}))
                relay_cpu += cpu_seconds(relay.pid) - used
        finally:
            for process in (relay, bare):
                process.terminate()
                process.wait(timeout=20)
    ours_median, floor_median = median(relay_samples), median(bare_samples)
    latency_ratio = ours_median / floor_median
    rate_ratio = median(relay_rates) / median(bare_rates)
    calls = ROUNDS * CLIENTS * CALLS_PER_CLIENT
    print(
        f"http shell_exec true: relay-shell {ours_median * 1000:.2f} ms, bare HTTP tool {floor_median * 1000:.2f} ms, "
        f"ratio {latency_ratio:.3f}"
    )
    print(
        f"http throughput, {CLIENTS} clients: relay-shell {median(relay_rates):.0f} calls/s "
        f"({[round(rate) for rate in relay_rates]}, server CPU {relay_cpu / calls * 1000:.2f} ms per call), bare "
        f"{median(bare_rates):.0f} calls/s ({[round(rate) for rate in bare_rates]}, server CPU "
        f"{bare_cpu / calls * 1000:.2f} ms per call), ratio {rate_ratio:.3f}"
    )
    return [
        ratio_row("HTTP shell_exec true vs a bare MCP server tool", latency_ratio, LATENCY_LIMIT),
        ratio_row(HTTP_THROUGHPUT, rate_ratio, THROUGHPUT_FLOOR, higher_is_better=True),
    ]


def rows(options: Options) -> list[Row]:
    return anyio.run(measure_all)


def main(argv: list[str] | None = None) -> int:
    return run_alone(rows, argv)


if __name__ == "__main__":
    raise SystemExit(main())
