"""500 MB of output into a PTY session that nobody reads: server peak RSS growth (≤ ring size + 16 MiB).

The session's output goes through the terminal into the server's ring buffer; the client only polls
session_list (which reports the cursor without reading output) until the program has exited.
"""

from __future__ import annotations

import threading
import time

import anyio

from benchmarks.common import (
    Options,
    Row,
    child_pid_running,
    relay_client,
    reset_peak_rss,
    run_alone,
    status_kib,
    verdict,
)

TOTAL = 500 * 1024 * 1024
COMMAND = f"head -c {TOTAL} /dev/zero; echo DONE"
RING_BYTES = 1024 * 1024  # RELAY_SHELL_SESSION_BUFFER_BYTES default (relay_shell/settings/sessions.py)
SLACK_MIB = 16
DEADLINE_S = 170.0
POLL_S = 1.0
SAMPLE_S = 0.02


class RssSampler(threading.Thread):
    """VmRSS of the server every SAMPLE_S; VmHWM (reset before the run) catches peaks between samples."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_kib = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.peak_kib = max(self.peak_kib, status_kib(self.pid, "VmRSS"))
            except (FileNotFoundError, ProcessLookupError):
                return
            self.stop.wait(SAMPLE_S)


def describe(sessions: list[dict[str, object]], session_id: str) -> dict[str, object]:
    return next((item for item in sessions if item["session_id"] == session_id), {"state": "missing"})


async def measure_all() -> list[Row]:
    async with relay_client(session_buffer_bytes=str(RING_BYTES)) as relay:
        pid = child_pid_running("relay_shell")
        # Warm the session code paths with a small session, then close it so its ring is freed.
        warm = await relay.call_tool("shell_spawn", {"command": "head -c 2M /dev/zero; echo DONE", "until": "DONE"})
        assert warm.structured_content is not None and warm.structured_content["wait"] == "match", warm
        await relay.call_tool("session_kill", {"session_id": warm.structured_content["session_id"]})
        await relay.call_tool("session_list", {})
        baseline_kib = status_kib(pid, "VmRSS")
        reset_peak_rss(pid)
        sampler = RssSampler(pid)
        sampler.start()
        started = time.perf_counter()
        # timeout=0: return at once with the session id, without reading the flood.
        spawned = await relay.call_tool("shell_spawn", {"command": COMMAND, "timeout": 0})
        assert not spawned.is_error and spawned.structured_content is not None, spawned
        session_id = spawned.structured_content["session_id"]
        item: dict[str, object] = {}
        finished = False
        while time.perf_counter() - started < DEADLINE_S:
            listed = await relay.call_tool("session_list", {})
            assert listed.structured_content is not None, listed
            item = describe(listed.structured_content["sessions"], session_id)
            if item["state"] != "running" and int(item["cursor"]) >= TOTAL:  # type: ignore[call-overload]
                finished = True
                break
            await anyio.sleep(POLL_S)
        elapsed = time.perf_counter() - started
        sampler.stop.set()
        sampler.join()
        peak_kib = max(sampler.peak_kib, status_kib(pid, "VmHWM"))
        await relay.call_tool("session_kill", {"session_id": session_id})
    produced = int(item.get("cursor", 0))  # type: ignore[call-overload]
    growth_mib = (peak_kib - baseline_kib) / 1024
    limit_mib = RING_BYTES / (1024 * 1024) + SLACK_MIB
    throughput = produced / elapsed / 1e6
    exited = item.get("state") == "exited" and item.get("exit_code") == 0
    print(
        f"session flood: {produced} bytes produced in {elapsed:.1f} s ({throughput:.0f} MB/s through the PTY), "
        f"state {item.get('state')} exit {item.get('exit_code')}, unread {item.get('unread_bytes')}, "
        f"dropped {item.get('dropped_bytes')}; peak RSS growth {growth_mib:.1f} MiB "
        f"(baseline {baseline_kib / 1024:.1f} MiB, target ≤ {limit_mib:g}) {verdict(growth_mib, limit_mib)}"
        + ("" if finished else f"; NOT FINISHED within {DEADLINE_S:g} s")
    )
    return [
        Row(
            "500 MB nobody reads: server peak RSS growth",
            f"{growth_mib:.1f} MiB" + ("" if finished and exited else " (the session did not finish cleanly)"),
            f"≤ {limit_mib:g} MiB",
            finished and exited and growth_mib <= limit_mib,
        )
    ]


def rows(options: Options) -> list[Row]:
    return anyio.run(measure_all)


def main(argv: list[str] | None = None) -> int:
    return run_alone(rows, argv)


if __name__ == "__main__":
    raise SystemExit(main())
