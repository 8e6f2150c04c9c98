"""1 GiB of output through shell_exec: server peak RSS growth (≤ 32 MiB) and wall time vs a bare MCPServer
tool streaming the same command through SHA-256 with head and tail (≤ 1.15×)."""

from __future__ import annotations

import time

import anyio

from benchmarks.common import (
    Options,
    Row,
    bare_client,
    child_pid_running,
    ratio_row,
    relay_client,
    reset_peak_rss,
    run_alone,
    status_kib,
    verdict,
)

COMMAND = "head -c 1G /dev/zero"
RSS_LIMIT_MIB = 32
TIME_LIMIT = 1.15
ROUNDS = 3


async def measure_all() -> list[Row]:
    async with relay_client() as relay:
        pid = child_pid_running("relay_shell")
        await relay.call_tool("shell_exec", {"command": "head -c 1M /dev/zero"})  # warm
        baseline_kib = status_kib(pid, "VmRSS")
        reset_peak_rss(pid)
        relay_times = []
        for _ in range(ROUNDS):
            started = time.perf_counter()
            result = await relay.call_tool("shell_exec", {"command": COMMAND, "timeout": 600})
            relay_times.append(time.perf_counter() - started)
            assert result.structured_content is not None
            assert result.structured_content["output_bytes"] == 1 << 30, result.structured_content
        growth_mib = (status_kib(pid, "VmHWM") - baseline_kib) / 1024
    async with bare_client() as bare:
        await bare.call_tool("stream_hash", {"command": "head -c 1M /dev/zero"})
        bare_times = []
        for _ in range(ROUNDS):
            started = time.perf_counter()
            await bare.call_tool("stream_hash", {"command": COMMAND})
            bare_times.append(time.perf_counter() - started)
    ours = min(relay_times)
    floor = min(bare_times)
    ratio = ours / floor
    print(
        f"1 GiB output: peak RSS growth {growth_mib:.1f} MiB (target ≤ {RSS_LIMIT_MIB}) "
        f"{verdict(growth_mib, RSS_LIMIT_MIB)}; wall {ours:.2f} s vs floor {floor:.2f} s, "
        f"ratio {ratio:.3f} (target ≤ {TIME_LIMIT}) {verdict(ratio, TIME_LIMIT)}"
    )
    return [
        Row(
            "1 GiB output: server peak RSS growth",
            f"{growth_mib:.1f} MiB",
            f"≤ {RSS_LIMIT_MIB} MiB",
            growth_mib <= RSS_LIMIT_MIB,
        ),
        ratio_row("1 GiB output: wall time vs a bare streaming SHA-256 tool", ratio, TIME_LIMIT),
    ]


def rows(options: Options) -> list[Row]:
    return anyio.run(measure_all)


def main(argv: list[str] | None = None) -> int:
    return run_alone(rows, argv)


if __name__ == "__main__":
    raise SystemExit(main())
