"""shell_exec of `true` through a real stdio client: median latency vs the bare MCPServer floor (≤ 1.10×), and with
`--before REV` (run_all: the commit before the renovation) vs that commit's relay-shell: no slower (≤ 1.00×, issue 25).

Every call writes its start record (before the command runs) and its end record. With RELAY_SHELL_AUDIT_FSYNC=off
the target is ≤ 1.10× the floor; with `always` both records are fsynced before the call goes on, which costs what
the disk's flush costs, and is reported for information. Calls go to the servers in turn, one each, the order
rotating, so machine noise hits all alike; each server's CPU per call is printed beside its median (the part of
the call a loaded machine disturbs least)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

import anyio
from mcp import Client

from benchmarks.common import (
    Options,
    Row,
    bare_client,
    code_at,
    cpu_seconds,
    measure,
    median,
    new_children,
    ratio_row,
    relay_client,
    run_alone,
    spread,
)

CALLS = 300
WARMUP = 20
LIMIT = 1.10
BEFORE_LIMIT = 1.00  # issue 25: no slower than before the change


def exec_true(client: Client, tool: str = "shell_exec") -> Callable[[], Awaitable[None]]:
    arguments = {"command": "true"} if tool == "shell_exec" else {}

    async def call() -> None:
        result = await client.call_tool(tool, arguments)
        assert not result.is_error, result

    return call


async def measure_all(options: Options) -> list[Row]:
    calls: dict[str, Callable[[], Awaitable[None]]] = {}
    pids: dict[str, int] = {}
    async with contextlib.AsyncExitStack() as stack:
        for label, opened in (
            ("bare", lambda: bare_client()),
            ("relay-shell", lambda: relay_client()),
            ("relay-shell, fsync always", lambda: relay_client(audit_fsync="always")),
            # The code before (e1d093d) traced nothing by default; this code traces a root server (adr/0027): the
            # row "vs before" compares both untraced, so it measures the renovation, not the trace.
            ("relay-shell, exec trace off", lambda: relay_client(exec_trace="off")),
        ):
            with new_children() as started:
                client = await stack.enter_async_context(opened())
            calls[label] = exec_true(client, "sh_true" if label == "bare" else "shell_exec")
            pids[label] = started[0]
        if options.before is not None:
            code = stack.enter_context(code_at(options.before))
            with new_children() as started:
                calls[code.label] = exec_true(await stack.enter_async_context(relay_client(code)))
            pids[code.label] = started[0]
        for call in calls.values():
            for _ in range(WARMUP):
                await call()
        labels = list(calls)
        samples: dict[str, list[float]] = {label: [] for label in labels}
        cpu = {label: 0.0 for label in labels}
        for index in range(CALLS):
            for label in labels[index % len(labels) :] + labels[: index % len(labels)]:
                used = cpu_seconds(pids[label])
                samples[label] += await measure(calls[label], 1)
                cpu[label] += cpu_seconds(pids[label]) - used
    for label in labels:
        print(
            f"exec latency: {label:28s} {median(samples[label]) * 1000:.3f} ms (middle half "
            f"{spread([value * 1000 for value in samples[label]])} ms), server CPU {cpu[label] / CALLS * 1000:.3f} ms "
            "per call"
        )
    floor = median(samples["bare"])
    ours = median(samples["relay-shell"])
    print(
        f"exec latency: fsync always (two fsyncs per call), for information: ratio "
        f"{median(samples['relay-shell, fsync always']) / floor:.3f}"
    )
    rows = [ratio_row("shell_exec true vs a bare MCP server tool", ours / floor, LIMIT)]
    if options.before is not None:
        before = median(samples[labels[-1]])
        untraced = median(samples["relay-shell, exec trace off"])
        traced = ours / before
        print(f"exec latency: with the exec trace on (the default here) vs {labels[-1]}, for information: {traced:.3f}")
        rows.append(ratio_row(f"shell_exec true vs {labels[-1]}, both untraced", untraced / before, BEFORE_LIMIT))
    return rows


def rows(options: Options) -> list[Row]:
    return anyio.run(measure_all, options)


def main(argv: list[str] | None = None) -> int:
    return run_alone(rows, argv)


if __name__ == "__main__":
    raise SystemExit(main())
