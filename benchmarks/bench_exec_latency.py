"""shell_exec of `true` through a real stdio client: median latency vs the bare MCPServer floor.

Every call writes its start record (before the command runs) and its end record. With RELAY_SHELL_AUDIT_FSYNC=off
the target is ≤ 1.10× the floor; with `always` both records are fsynced before the call goes on, which costs what
the disk's flush costs, and is reported for information."""

from __future__ import annotations

import anyio

from benchmarks.common import bare_client, measure, median, relay_client, verdict

CALLS = 300
LIMIT = 1.10


async def main() -> bool:
    async with (
        relay_client() as relay,
        relay_client(audit_fsync="always") as relay_fsync,
        bare_client() as bare,
    ):

        async def relay_call() -> None:
            result = await relay.call_tool("shell_exec", {"command": "true"})
            assert not result.is_error

        async def relay_fsync_call() -> None:
            result = await relay_fsync.call_tool("shell_exec", {"command": "true"})
            assert not result.is_error

        async def bare_call() -> None:
            await bare.call_tool("sh_true", {})

        for _ in range(20):  # warm all three
            await relay_call()
            await relay_fsync_call()
            await bare_call()
        relay_samples: list[float] = []
        fsync_samples: list[float] = []
        bare_samples: list[float] = []
        for _ in range(CALLS // 50):  # interleave batches so machine noise hits all alike
            bare_samples += await measure(bare_call, 50)
            relay_samples += await measure(relay_call, 50)
            fsync_samples += await measure(relay_fsync_call, 50)
    floor = median(bare_samples)
    ours = median(relay_samples)
    ratio = ours / floor
    synced = median(fsync_samples)
    print(
        f"exec latency (start + end record, fsync off): relay-shell {ours * 1000:.2f} ms, floor {floor * 1000:.2f} ms, "
        f"ratio {ratio:.3f} (target ≤ {LIMIT}) {verdict(ratio, LIMIT)}"
    )
    print(
        f"exec latency (start + end record, fsync always): relay-shell {synced * 1000:.2f} ms, "
        f"ratio {synced / floor:.3f} (for information: two fsyncs per call)"
    )
    return ratio <= LIMIT


if __name__ == "__main__":
    raise SystemExit(0 if anyio.run(main) else 1)
