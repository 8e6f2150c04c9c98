"""What containment costs per call: `shell_exec true` through a real stdio client with RELAY_SHELL_CONTAINMENT
off (process groups only: the floor), subreaper and cgroup, measured in the same run, call by call in turn.
Target: each adds ≤ 0.3 ms to the median call, back to back and with pauses between calls (as an agent calls;
a kernel lock that goes idle between calls would show only there).

The cgroup server is started in a cgroup2 subtree this benchmark creates (root only), as a service with its
own delegated cgroup would run; without one the cgroup line says why it was not measured.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from benchmarks.common import Options, Row, measure, median, relay_params, run_alone

CALLS = 600
SPACED_CALLS = 90  # per mode, each after a pause: how an agent calls, seconds apart (shortened here)
PAUSE = 0.1
LIMIT_MS = 0.3


def cgroup_subtree() -> tuple[Path | None, str]:
    if os.geteuid() != 0:
        return None, "not root: cannot create a cgroup2 subtree"
    with open("/proc/self/mountinfo") as mountinfo:
        mounts = [line.split(" - ")[0].split()[4] for line in mountinfo if " - cgroup2 " in line]
    if not mounts:
        return None, "no cgroup2 mount"
    directory = Path(mounts[0]) / f"relay-shell-bench-{secrets.token_hex(4)}"
    try:
        directory.mkdir()
    except OSError as exc:
        return None, f"cannot create {directory}: {exc}"
    return directory, ""


@asynccontextmanager
async def server(mode: str, audit_dir: str, cgroup: Path | None = None) -> AsyncIterator[Client]:
    params = relay_params(audit_dir, containment=mode)
    if cgroup is not None:
        script = 'echo $$ > "$1/cgroup.procs" && exec "$0" -m relay_shell'
        params = StdioServerParameters(
            command="/bin/sh", args=["-c", script, sys.executable, str(cgroup)], env=params.env
        )
    async with Client(params, mode="legacy") as client:
        info = await client.call_tool("server_info", {})
        assert info.structured_content is not None
        chosen = info.structured_content["info"]["containment"]["mode"]
        assert chosen == mode, f"asked for {mode}, got {chosen}"
        yield client


async def measure_all() -> list[Row]:
    cgroup, why_not = cgroup_subtree()
    modes = ["off", "subreaper"] + (["cgroup"] if cgroup is not None else [])
    samples: dict[str, list[float]] = {mode: [] for mode in modes}
    spaced: dict[str, list[float]] = {mode: [] for mode in modes}
    try:
        with tempfile.TemporaryDirectory() as audit_dir:
            async with contextlib.AsyncExitStack() as stack:
                clients = {
                    mode: await stack.enter_async_context(
                        server(mode, str(Path(audit_dir) / mode), cgroup if mode == "cgroup" else None)
                    )
                    for mode in modes
                }
                calls = {mode: _exec_true(client) for mode, client in clients.items()}
                for call in calls.values():  # warm every server
                    for _ in range(30):
                        await call()
                # Call by call in turn, the order rotating: machine noise hits every mode alike.
                for index in range(CALLS):
                    for mode in modes[index % len(modes) :] + modes[: index % len(modes)]:
                        samples[mode] += await measure(calls[mode], 1)
                for index in range(SPACED_CALLS):
                    for mode in modes[index % len(modes) :] + modes[: index % len(modes)]:
                        await anyio.sleep(PAUSE)
                        spaced[mode] += await measure(calls[mode], 1)
    finally:
        if cgroup is not None:
            with contextlib.suppress(OSError):
                cgroup.rmdir()
    floor = median(samples["off"])
    print(f"containment: shell_exec true, median of {CALLS} calls each; off (process groups only) {floor * 1e3:.3f} ms")
    measured = []
    for mode in modes[1:]:
        ours = median(samples[mode])
        added = (ours - floor) * 1e3
        measured.append(row(f"containment {mode}, back to back", added))
        print(f"containment: {mode:9s} {ours * 1e3:.3f} ms, +{added:.3f} ms per call, ratio {ours / floor:.3f}")
    spaced_floor = median(spaced["off"])
    print(f"containment: calls {PAUSE * 1000:.0f} ms apart, median of {SPACED_CALLS}; off {spaced_floor * 1e3:.3f} ms")
    for mode in modes[1:]:
        ours = median(spaced[mode])
        added = (ours - spaced_floor) * 1e3
        measured.append(row(f"containment {mode}, calls {PAUSE * 1000:.0f} ms apart", added))
        print(f"containment: {mode:9s} {ours * 1e3:.3f} ms, +{added:.3f} ms per call")
    if cgroup is None:
        print(f"containment: cgroup    not measured: {why_not}")
        measured.append(Row("containment cgroup", "not measured", why_not, False))
    return measured


def row(name: str, added_ms: float) -> Row:
    return Row(name, f"+{added_ms:.3f} ms", f"≤ +{LIMIT_MS} ms", added_ms <= LIMIT_MS)


def rows(options: Options) -> list[Row]:
    return anyio.run(measure_all)


def _exec_true(client: Client) -> Callable[[], Awaitable[None]]:
    async def call() -> None:
        result = await client.call_tool("shell_exec", {"command": "true"})
        assert not result.is_error

    return call


def main(argv: list[str] | None = None) -> int:
    return run_alone(rows, argv)


if __name__ == "__main__":
    raise SystemExit(main())
