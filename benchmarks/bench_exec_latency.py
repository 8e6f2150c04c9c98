"""shell_exec of `true` through a real stdio client: median latency vs the bare MCPServer floor (≤ 1.10×)."""

from __future__ import annotations

import time

import anyio

from benchmarks.common import bare_client, median, relay_client, verdict

CALLS = 300
LIMIT = 1.10


async def measure(call: object, rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        await call()  # type: ignore[operator]
        samples.append(time.perf_counter() - started)
    return samples


async def main() -> bool:
    async with relay_client() as relay, bare_client() as bare:

        async def relay_call() -> None:
            result = await relay.call_tool("shell_exec", {"command": "true"})
            assert not result.is_error

        async def bare_call() -> None:
            await bare.call_tool("sh_true", {})

        for _ in range(20):  # warm both
            await relay_call()
            await bare_call()
        relay_samples: list[float] = []
        bare_samples: list[float] = []
        for _ in range(CALLS // 50):  # interleave batches so machine noise hits both alike
            bare_samples += await measure(bare_call, 50)
            relay_samples += await measure(relay_call, 50)
    floor = median(bare_samples)
    ours = median(relay_samples)
    ratio = ours / floor
    print(
        f"exec latency: relay-shell {ours * 1000:.2f} ms, floor {floor * 1000:.2f} ms, "
        f"ratio {ratio:.3f} (target ≤ {LIMIT}) {verdict(ratio, LIMIT)}"
    )
    return ratio <= LIMIT


if __name__ == "__main__":
    raise SystemExit(0 if anyio.run(main) else 1)
