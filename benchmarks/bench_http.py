"""Over streamable HTTP: `shell_exec true` latency vs the same SDK client calling a bare MCPServer's HTTP tool that
spawns `/bin/sh -c true` (median ≤ 1.15×), and throughput with 8 concurrent clients (≥ 0.90× the bare server's,
issue 27).

relay-shell runs with bearer-token authentication, as a service would; the bare server has none (the floor is
the transport and the spawn). Calls alternate one by one between the servers for the latency, and the throughput
runs alternate too, so machine noise hits all alike. Each server's CPU per call in the throughput runs is printed
beside its rate: with eight clients the clients, the servers and the commands share the machine's cores, and the
server's CPU per call is what it adds. A third server, relay-shell with the exec trace off, is measured in the
same rounds and printed beside them (not a row): the trace is on by default for a root server (adr/0027), and
the difference is its share.
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

from benchmarks.common import (
    HERE,
    HTTP_THROUGHPUT,
    Options,
    Row,
    ServerCode,
    cpu_seconds,
    median,
    ratio_row,
    run_alone,
    this_code,
)

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


def start_relay(directory: Path, code: ServerCode | None = None, **settings: str) -> tuple[subprocess.Popen[str], str]:
    directory.mkdir(exist_ok=True)
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
    env.update({f"RELAY_SHELL_{name.upper()}": value for name, value in settings.items()})
    code = code or this_code()
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
        relay, relay_url = start_relay(Path(directory) / "traced")
        untraced, untraced_url = start_relay(Path(directory) / "untraced", exec_trace="off")
        bare, bare_url = start_bare()
        try:
            async with (
                connect(relay_url, TOKEN) as ours,
                connect(untraced_url, TOKEN) as ours_untraced,
                connect(bare_url, None) as floor,
            ):

                async def relay_call() -> None:
                    result = await ours.call_tool("shell_exec", {"command": "true"})
                    assert not result.is_error, result

                async def untraced_call() -> None:
                    result = await ours_untraced.call_tool("shell_exec", {"command": "true"})
                    assert not result.is_error, result

                async def bare_call() -> None:
                    await floor.call_tool("sh_true", {})

                for _ in range(WARMUP):
                    await relay_call()
                    await untraced_call()
                    await bare_call()
                relay_samples: list[float] = []
                untraced_samples: list[float] = []
                bare_samples: list[float] = []
                for _ in range(CALLS):
                    bare_samples.append(await timed(bare_call))
                    relay_samples.append(await timed(relay_call))
                    untraced_samples.append(await timed(untraced_call))
            rates: dict[str, list[float]] = {"relay": [], "untraced": [], "bare": []}
            cpu = dict.fromkeys(rates, 0.0)
            runs = {
                "bare": (bare, bare_url, None, "sh_true", {}),
                "relay": (relay, relay_url, TOKEN, "shell_exec", {"command": "true"}),
                "untraced": (untraced, untraced_url, TOKEN, "shell_exec", {"command": "true"}),
            }
            for _ in range(ROUNDS):
                for name, (process, url, token, tool, arguments) in runs.items():
                    used = cpu_seconds(process.pid)
                    rates[name].append(await throughput(url, token, tool, arguments))
                    cpu[name] += cpu_seconds(process.pid) - used
        finally:
            for process in (relay, untraced, bare):
                process.terminate()
                process.wait(timeout=20)
    ours_median, floor_median = median(relay_samples), median(bare_samples)
    latency_ratio = ours_median / floor_median
    rate_ratio = median(rates["relay"]) / median(rates["bare"])
    calls = ROUNDS * CLIENTS * CALLS_PER_CLIENT
    print(
        f"http shell_exec true: relay-shell {ours_median * 1000:.2f} ms, bare HTTP tool {floor_median * 1000:.2f} ms, "
        f"ratio {latency_ratio:.3f}; exec trace off {median(untraced_samples) * 1000:.2f} ms, ratio "
        f"{median(untraced_samples) / floor_median:.3f}"
    )
    for name, label in (("relay", "relay-shell"), ("untraced", "relay-shell, exec trace off"), ("bare", "bare")):
        print(
            f"http throughput, {CLIENTS} clients: {label} {median(rates[name]):.0f} calls/s "
            f"({[round(rate) for rate in rates[name]]}), server CPU {cpu[name] / calls * 1000:.2f} ms per call, "
            f"ratio to bare {median(rates[name]) / median(rates['bare']):.3f} (CPU {cpu[name] / cpu['bare']:.3f})"
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
