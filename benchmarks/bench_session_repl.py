"""A 200-step Python REPL dialogue in a PTY session through a real stdio client: median session_send step vs
a floor of one trivial MCP round trip on the bare server plus the same REPL step driven in-process with
ptyprocess (≤ 1.20×), and every step answered completely in one call (100%).

The floor is measured as what it describes, one after the other: each floor sample is a bare round trip
immediately followed by the direct PTY step, and floor and relay-shell steps alternate one by one, as an
agent's steps come (seconds apart, never in a tight loop). The ratio of back-to-back batches (fifty of each
kind in a row, the floor as the sum of two medians) is printed for information: a process that loops without
ever sleeping has hot caches and no wake-ups, which favours the two halves of the floor over any server.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Awaitable, Callable

import anyio
from mcp import Client
from mcp_types import CallToolResult
from ptyprocess import PtyProcess

from benchmarks.common import bare_client, median, relay_client, verdict
from relay_shell.arguments import NONINTERACTIVE_ENV

STEPS = 200
BATCH = 50  # the information-only back-to-back batches
WARMUP = 10
LIMIT = 1.20
PROMPT = "^>>> "
STEP_TIMEOUT = 10.0
# What relay-shell gives a session's terminal (sessions/plans.py): the floor's child sees the same.
TERMINAL_ENV = {"TERM": "xterm-256color", **NONINTERACTIVE_ENV}


def answered(text: str, i: int) -> bool:
    """The answer on a line of its own: `0` or `1` would otherwise be found in the echo of `0*0`."""
    lines = text.replace("\r\n", "\n").split("\n")
    return str(i * i) in lines


class DirectRepl:
    """The floor's second half: python3 -q in a PTY, written and read directly, no server in between."""

    def __init__(self) -> None:
        env = {**os.environ, **TERMINAL_ENV}
        self.process = PtyProcess.spawn(["python3", "-q"], env=env, dimensions=(40, 120))
        self.fd = self.process.fd
        os.set_blocking(self.fd, False)
        self.read_until(lambda buffer: buffer.endswith(b">>> "))

    def read_until(self, done: Callable[[bytes], bool]) -> bytes:
        buffer = b""
        deadline = time.monotonic() + STEP_TIMEOUT
        while not done(buffer):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"direct REPL: no prompt after {STEP_TIMEOUT}s, got {buffer[-200:]!r}")
            readable, _, _ = select.select([self.fd], [], [], remaining)
            if readable:
                try:
                    buffer += os.read(self.fd, 65536)
                except BlockingIOError:
                    continue
        return buffer

    def step(self, i: int) -> None:
        answer = str(i * i).encode()
        os.write(self.fd, f"{i}*{i}\r".encode())
        output = self.read_until(lambda buffer: buffer.endswith(b">>> ") and b"\r\n" + answer + b"\r\n" in buffer)
        assert answered(output.decode(), i), output

    def close(self) -> None:
        self.process.terminate(force=True)
        self.process.close()


async def validation_cost(client: Client, tool: str, result: CallToolResult) -> float:
    """What the client spends checking one result against the tool's outputSchema (inside every measured
    call; timed here in a loop, so with warm caches)."""
    samples = []
    for _ in range(200):
        started = time.perf_counter()
        await client.session.validate_tool_result(tool, result)
        samples.append(time.perf_counter() - started)
    return median(samples)


async def measure(step: Callable[[int], Awaitable[None]], values: range) -> list[float]:
    samples = []
    for i in values:
        started = time.perf_counter()
        await step(i)
        samples.append(time.perf_counter() - started)
    return samples


async def main() -> bool:
    direct = DirectRepl()
    try:
        async with relay_client() as relay, bare_client() as bare:
            spawned = await relay.call_tool("shell_spawn", {"command": "python3 -q", "until": PROMPT, "timeout": 10})
            assert not spawned.is_error and spawned.structured_content is not None, spawned
            assert spawned.structured_content["wait"] == "match", spawned.structured_content
            session_id = spawned.structured_content["session_id"]
            failures: list[str] = []
            one_call = 0
            last: dict[str, CallToolResult] = {}  # the latest result of each server, for the validation cost

            async def relay_step(i: int) -> None:
                nonlocal one_call
                result = await relay.call_tool(
                    "session_send", {"session_id": session_id, "data": f"{i}*{i}", "until": PROMPT}
                )
                last["relay"] = result
                content = result.structured_content or {}
                text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
                if not result.is_error and content.get("wait") == "match" and answered(text, i):
                    one_call += 1
                elif len(failures) < 5:
                    failures.append(f"step {i}: wait={content.get('wait')!r} error={result.is_error} text={text!r}")

            async def bare_step(i: int) -> None:
                last["bare"] = await bare.call_tool("noop", {})

            async def direct_step(i: int) -> None:
                direct.step(i)

            for k in range(WARMUP):  # warm all three; the warm-up answers are checked but not counted
                await relay_step(1000 + k)
                await bare_step(k)
                await direct_step(1000 + k)
            warm_ok = one_call == WARMUP and not failures
            one_call = 0
            parts: dict[str, list[float]] = {"round trip": [], "pty step": []}
            floor_samples: list[float] = []
            relay_samples: list[float] = []
            for i in range(STEPS):
                started = time.perf_counter()
                await bare_step(i)
                between = time.perf_counter()
                await direct_step(i)
                ended = time.perf_counter()
                parts["round trip"].append(between - started)
                parts["pty step"].append(ended - between)
                floor_samples.append(ended - started)
                relay_samples += await measure(relay_step, range(i, i + 1))
            one_call_alternating = one_call
            # For information: back-to-back batches of each kind.
            batched: tuple[list[float], list[float], list[float]] = ([], [], [])
            for first in range(STEPS, 2 * STEPS, BATCH):
                values = range(first, first + BATCH)
                batched[0].extend(await measure(bare_step, values))
                batched[1].extend(await measure(direct_step, values))
                batched[2].extend(await measure(relay_step, values))
            check_relay = await validation_cost(relay, "session_send", last["relay"])
            check_bare = await validation_cost(bare, "noop", last["bare"])
            fields_relay = len(last["relay"].structured_content or {})
            fields_bare = len(last["bare"].structured_content or {})
            await relay.call_tool("session_kill", {"session_id": session_id})
    finally:
        direct.close()
    round_trip = median(parts["round trip"])
    pty_step = median(parts["pty step"])
    floor = median(floor_samples)
    ours = median(relay_samples)
    ratio = ours / floor
    one_call = one_call_alternating
    complete = one_call / STEPS
    batched_floor = median(batched[0]) + median(batched[1])
    print(
        f"session REPL: relay-shell step {ours * 1000:.3f} ms, floor {floor * 1000:.3f} ms "
        f"(MCP round trip {round_trip * 1000:.3f} ms + direct PTY step {pty_step * 1000:.3f} ms), "
        f"ratio {ratio:.3f} (target ≤ {LIMIT}) {verdict(ratio, LIMIT)}; "
        f"answered in one call {one_call}/{STEPS} ({complete:.0%}, target 100%) "
        f"{'PASS' if one_call == STEPS and warm_ok else 'FAIL'}"
    )
    print(
        f"  (back-to-back batches, for information: relay-shell step {median(batched[2]) * 1000:.3f} ms, "
        f"floor {batched_floor * 1000:.3f} ms, ratio {median(batched[2]) / batched_floor:.3f})"
    )
    print(
        f"  (the client's check of each result against the outputSchema, for information: relay-shell "
        f"{check_relay * 1e6:.0f} µs ({fields_relay} fields), bare {check_bare * 1e6:.0f} µs ({fields_bare} field"
        f"{'s' if fields_bare != 1 else ''}))"
    )
    for failure in failures:
        print("  " + failure)
    return ratio <= LIMIT and one_call == STEPS and warm_ok


if __name__ == "__main__":
    raise SystemExit(0 if anyio.run(main) else 1)
