"""What the exec trace (adr/0019) costs, through a real stdio client, floors measured in the same run:

- `shell_exec true` with RELAY_SHELL_EXEC_TRACE=on vs the bare MCPServer floor (`sh -c true` from a trivial
  tool): target ≤ 1.10×. The same call with the trace off is printed for information.
- a call that runs 1,000 short programs (`for i in $(seq 1000); do /bin/true; done`) with the trace on vs the
  same call with it off: target ≤ 1.15×, and the cost per traced exec in microseconds.

Batches interleave so that machine noise hits every configuration alike.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
from mcp import Client

from benchmarks.common import bare_client, measure, median, relay_client, verdict

CALLS = 300
LOOP_CALLS = 12
LOOP = "for i in $(seq 1000); do /bin/true; done"
LIMIT_TRUE = 1.10
LIMIT_LOOP = 1.15


def caller(client: Client, command: str) -> Callable[[], Awaitable[None]]:
    async def call() -> None:
        result = await client.call_tool("shell_exec", {"command": command, "timeout": 120})
        assert not result.is_error, result
        structured = result.structured_content or {}
        assert structured.get("exit_code") == 0, structured

    return call


async def trace_state(client: Client) -> str:
    result = await client.call_tool("server_info", {})
    info = (result.structured_content or {}).get("info", {})
    return str(info.get("exec_trace", {}).get("state"))


async def main() -> bool:
    async with (
        relay_client(exec_trace="on") as traced,
        relay_client(exec_trace="off") as untraced,
        bare_client() as bare,
    ):
        state = await trace_state(traced)
        if state != "on":
            print(f"exec trace: not measured, the trace is {state} here (server_info says why)")
            return False

        async def bare_call() -> None:
            await bare.call_tool("sh_true", {})

        traced_true = caller(traced, "true")
        untraced_true = caller(untraced, "true")
        traced_loop = caller(traced, LOOP)
        untraced_loop = caller(untraced, LOOP)
        for _ in range(20):
            await bare_call()
            await traced_true()
            await untraced_true()
        await traced_loop()
        await untraced_loop()
        floor: list[float] = []
        on: list[float] = []
        off: list[float] = []
        for _ in range(CALLS // 50):
            floor += await measure(bare_call, 50)
            on += await measure(traced_true, 50)
            off += await measure(untraced_true, 50)
        loop_on: list[float] = []
        loop_off: list[float] = []
        for _ in range(LOOP_CALLS):
            loop_off += await measure(untraced_loop, 1)
            loop_on += await measure(traced_loop, 1)
    ratio_true = median(on) / median(floor)
    ratio_loop = median(loop_on) / median(loop_off)
    per_exec_us = (median(loop_on) - median(loop_off)) / 1002 * 1e6  # sh, seq and 1,000 × true
    print(
        f"exec trace, shell_exec true: traced {median(on) * 1000:.2f} ms, untraced {median(off) * 1000:.2f} ms, "
        f"floor {median(floor) * 1000:.2f} ms, ratio {ratio_true:.3f} (target ≤ {LIMIT_TRUE}) "
        f"{verdict(ratio_true, LIMIT_TRUE)}"
    )
    print(
        f"exec trace, 1,000 programs: traced {median(loop_on) * 1000:.1f} ms, untraced {median(loop_off) * 1000:.1f} "
        f"ms, ratio {ratio_loop:.3f} (target ≤ {LIMIT_LOOP}) {verdict(ratio_loop, LIMIT_LOOP)}; "
        f"{per_exec_us:.0f} µs per traced exec"
    )
    return ratio_true <= LIMIT_TRUE and ratio_loop <= LIMIT_LOOP


if __name__ == "__main__":
    raise SystemExit(0 if anyio.run(main) else 1)
