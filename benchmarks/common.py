"""Helpers shared by the benchmarks: start relay-shell or the bare floor server over real stdio."""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from mcp import Client
from mcp.client.stdio import StdioServerParameters

HERE = Path(__file__).resolve().parent


def relay_params(audit_dir: str, **settings: str) -> StdioServerParameters:
    env = {key: value for key, value in os.environ.items() if not key.startswith("RELAY_SHELL_")}
    env["RELAY_SHELL_AUDIT_PATH"] = str(Path(audit_dir) / "audit.jsonl")
    env.update({f"RELAY_SHELL_{key.upper()}": value for key, value in settings.items()})
    return StdioServerParameters(command=sys.executable, args=["-m", "relay_shell"], env=env)


def bare_params() -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=[str(HERE / "bare_server.py")], env=dict(os.environ))


@asynccontextmanager
async def relay_client(**settings: str) -> AsyncIterator[Client]:
    with tempfile.TemporaryDirectory() as audit_dir:
        async with Client(relay_params(audit_dir, **settings), mode="legacy") as client:
            yield client


@asynccontextmanager
async def bare_client() -> AsyncIterator[Client]:
    async with Client(bare_params(), mode="legacy") as client:
        yield client


def child_pid_running(module_hint: str) -> int:
    """The PID of our direct child whose command line mentions module_hint (the server under test)."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read().decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if parent == me and module_hint in cmdline:
            return int(entry)
    raise RuntimeError(f"no child process running {module_hint}")


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def reset_peak_rss(pid: int) -> None:
    # Writing 5 to clear_refs resets VmHWM (peak RSS) so we measure the call, not the imports.
    with open(f"/proc/{pid}/clear_refs", "w") as handle:
        handle.write("5")


def median(values: list[float]) -> float:
    return statistics.median(values)


def verdict(ratio: float, limit: float, higher_is_better: bool = False) -> str:
    ok = ratio >= limit if higher_is_better else ratio <= limit
    return "PASS" if ok else "FAIL"


async def measure(call: Callable[[], Awaitable[object]], rounds: int) -> list[float]:
    """Wall time of `rounds` calls of `call`, one after another."""
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return samples
