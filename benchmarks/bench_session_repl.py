"""A 200-step Python REPL dialogue in a PTY session through a real stdio client: the median session_send step vs a
floor of one trivial MCP round trip on the bare server plus the same REPL step driven in-process with ptyprocess,
and every step answered completely in one call (100%).

Two ratios, each ≤ 1.20×:
- back to back (issue 27): batches of fifty steps of each kind in a row, the floor the sum of the two medians.
  Every process stays hot, which favours the floor: the bare SDK's stdio transport hops to worker threads for every
  line, and hot threads hand over quickly.
- interleaved, as an agent's steps come (seconds apart, never in a tight loop): each floor sample a bare round
  trip immediately followed by the direct PTY step, alternating step by step with relay-shell's. Every server
  then wakes from idle for each step; the bare server's thread hops cost it about twice the CPU per round trip
  then (printed), which is why this ratio is the lower one.
Each server's CPU per step is printed for both, the steps' middle half beside the medians; back to back also the
CPU of the other processes of a step (the client, and the REPL that answers), read around whole batches: the wall
time of a step is about the sum of its processes' CPU, the rest the scheduler's hand-offs (no timer or batching
delay is in a step), and the REPL answering
relay-shell spends 2-3x the CPU of the floor's for the same system calls, since the server and the client run
between its steps while the floor's runs fifty steps in a row hot (adr/0030, round 4).
With `--before REV` the relay-shell of that commit runs the same steps in the same batches, beside this checkout's
(its ratios and CPU printed; the rows are this checkout's).
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Awaitable, Callable

import anyio
from mcp import Client
from mcp_types import CallToolResult
from ptyprocess import PtyProcess

from benchmarks.common import (
    REPL_BACK_TO_BACK,
    Options,
    Row,
    bare_client,
    code_at,
    median,
    new_children,
    ratio_row,
    relay_client,
    run_alone,
    spread,
)
from relay_shell.arguments import NONINTERACTIVE_ENV

STEPS = 200
BATCH = 50  # steps of one kind in a row, back to back
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


async def measure(step: Callable[[int], Awaitable[None]], values: range, meter: Meter | None = None) -> list[float]:
    """Each step's wall time; the server's CPU read around it by `meter`, outside the time taken (reading a
    server's threads' schedstat is the benchmark's work, not the step's, and costs more for more threads)."""
    samples = []
    for i in values:
        used = meter.used() if meter is not None else 0.0
        started = time.perf_counter()
        await step(i)
        samples.append(time.perf_counter() - started)
        if meter is not None:
            meter.add(used)
    return samples


def cpu_seconds(pid: int) -> float:
    """The CPU time of every live thread of `pid` to the nanosecond (/proc/PID/task/*/schedstat): a step is under
    a millisecond, and /proc/PID/stat counts in 10 ms ticks."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as schedstat:
                total += int(schedstat.read().split()[0])
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e9


class Meter:
    """A server's CPU over the steps of one kind."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.seconds = 0.0
        self.steps = 0

    def used(self) -> float:
        return cpu_seconds(self.pid)

    def add(self, used_before: float) -> None:
        self.seconds += cpu_seconds(self.pid) - used_before
        self.steps += 1

    def per_step(self) -> str:
        return f"{self.seconds / max(self.steps, 1) * 1000:.3f} ms"


class BatchCpu:
    """The CPU of the other processes a back-to-back step runs in, read around whole batches (outside the timed
    steps, so the floor is not slowed): this one (the client; it also reads the server's CPU per step, equally for
    relay-shell and the bare server) and the REPL that answers. With the server's, their sum beside the wall time
    shows whether a step waits for anything (a timer, a batching delay) or only works."""

    def __init__(self, repl: int | None = None) -> None:
        self.repl = repl
        self.here = 0.0
        self.repl_seconds = 0.0
        self.steps = 0

    async def batch(self, run: Awaitable[list[float]]) -> list[float]:
        used_here = time.process_time()
        used_repl = cpu_seconds(self.repl) if self.repl is not None else 0.0
        samples = await run
        self.here += time.process_time() - used_here
        self.repl_seconds += cpu_seconds(self.repl) - used_repl if self.repl is not None else 0.0
        self.steps += len(samples)
        return samples

    def per_step(self, name: str = "client") -> str:
        steps = max(self.steps, 1)
        repl = f", REPL {self.repl_seconds / steps * 1000:.3f} ms" if self.repl is not None else ""
        return f"{name} {self.here / steps * 1000:.3f} ms{repl}"


class RelaySubject:
    """A relay-shell under test (this checkout, or `--before REV` beside it) with its python3 session."""

    def __init__(self, label: str, client: Client, pid: int) -> None:
        self.label = label
        self.client = client
        self.pid = pid
        self.session_id = ""
        self.repl_pid = 0
        self.one_call = 0
        self.failures: list[str] = []
        self.last: CallToolResult | None = None

    async def spawn(self) -> None:
        spawned = await self.client.call_tool("shell_spawn", {"command": "python3 -q", "until": PROMPT, "timeout": 10})
        assert not spawned.is_error and spawned.structured_content is not None, spawned
        assert spawned.structured_content["wait"] == "match", spawned.structured_content
        self.session_id = spawned.structured_content["session_id"]
        self.repl_pid = spawned.structured_content["pid"]  # the relay-shell session's python3

    async def step(self, i: int) -> None:
        result = await self.client.call_tool(
            "session_send", {"session_id": self.session_id, "data": f"{i}*{i}", "until": PROMPT}
        )
        self.last = result
        content = result.structured_content or {}
        text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
        if not result.is_error and content.get("wait") == "match" and answered(text, i):
            self.one_call += 1
        elif len(self.failures) < 5:
            self.failures.append(f"step {i}: wait={content.get('wait')!r} error={result.is_error} text={text!r}")


async def before_subject(stack: contextlib.AsyncExitStack, before: str) -> list[RelaySubject]:
    """The relay-shell of commit `before`, measured in the same batches as this checkout's (A/B in one run); none
    when it cannot be started or cannot run the steps (printed: the rows are this checkout's either way)."""
    try:
        code = stack.enter_context(code_at(before))
        with new_children() as started:
            client = await stack.enter_async_context(relay_client(code))
        subject = RelaySubject(f"before ({before})", client, started[0])
        await subject.spawn()
    except Exception as error:  # any failure of the earlier code only drops its lines
        print(f"session REPL: {before} not measured beside this checkout: {error!r}"[:300])
        return []
    return [subject]


async def measure_all(before: str | None) -> list[Row]:
    direct = DirectRepl()
    try:
        async with contextlib.AsyncExitStack() as stack:
            with new_children() as started:
                relay = RelaySubject("relay-shell", await stack.enter_async_context(relay_client()), 0)
            relay.pid = started[0]
            subjects = [relay]
            if before is not None:
                subjects += await before_subject(stack, before)
            with new_children() as started:
                bare = await stack.enter_async_context(bare_client())
            bare_pid = started[0]
            await relay.spawn()
            last_bare: list[CallToolResult] = []

            async def bare_step(i: int) -> None:
                last_bare[:] = [await bare.call_tool("noop", {})]

            async def direct_step(i: int) -> None:
                direct.step(i)

            for k in range(WARMUP):  # warm all of them; the warm-up answers are checked but not counted
                for subject in subjects:
                    await subject.step(1000 + k)
                await bare_step(k)
                await direct_step(1000 + k)
            warm_ok = relay.one_call == WARMUP and not relay.failures
            for subject in subjects:
                subject.one_call = 0
            meters = {"bare interleaved": Meter(bare_pid), "bare back to back": Meter(bare_pid)}
            for subject in subjects:
                meters[f"{subject.label} interleaved"] = Meter(subject.pid)
                meters[f"{subject.label} back to back"] = Meter(subject.pid)
            parts: dict[str, list[float]] = {"round trip": [], "pty step": []}
            floor_samples: list[float] = []
            interleaved: dict[str, list[float]] = {subject.label: [] for subject in subjects}
            for i in range(STEPS):
                bare_used = meters["bare interleaved"].used()
                started_at = time.perf_counter()
                await bare_step(i)
                between = time.perf_counter()
                await direct_step(i)
                ended = time.perf_counter()
                meters["bare interleaved"].add(bare_used)
                parts["round trip"].append(between - started_at)
                parts["pty step"].append(ended - between)
                floor_samples.append(ended - started_at)
                for subject in subjects:
                    meter = meters[f"{subject.label} interleaved"]
                    interleaved[subject.label] += await measure(subject.step, range(i, i + 1), meter)
            others = {"bare": BatchCpu(), "direct": BatchCpu(direct.process.pid)}
            others |= {subject.label: BatchCpu(subject.repl_pid) for subject in subjects}
            batched: dict[str, list[float]] = {"bare": [], "direct": []} | {subject.label: [] for subject in subjects}
            for first in range(STEPS, 2 * STEPS, BATCH):
                values = range(first, first + BATCH)
                bare_batch = measure(bare_step, values, meters["bare back to back"])
                batched["bare"].extend(await others["bare"].batch(bare_batch))
                batched["direct"].extend(await others["direct"].batch(measure(direct_step, values)))
                for subject in subjects:
                    meter = meters[f"{subject.label} back to back"]
                    subject_batch = measure(subject.step, values, meter)
                    batched[subject.label].extend(await others[subject.label].batch(subject_batch))
            assert relay.last is not None and last_bare
            check_relay = await validation_cost(relay.client, "session_send", relay.last)
            check_bare = await validation_cost(bare, "noop", last_bare[0])
            fields_relay = len(relay.last.structured_content or {})
            fields_bare = len(last_bare[0].structured_content or {})
            for subject in subjects:
                await subject.client.call_tool("session_kill", {"session_id": subject.session_id})
    finally:
        direct.close()
    floor = median(floor_samples)
    batched_floor = median(batched["bare"]) + median(batched["direct"])
    print(
        f"session REPL, interleaved: floor {floor * 1000:.3f} ms (MCP round trip "
        f"{median(parts['round trip']) * 1000:.3f} ms + direct PTY step {median(parts['pty step']) * 1000:.3f} ms), "
        f"bare server CPU per step {meters['bare interleaved'].per_step()}"
    )
    print(
        f"session REPL, back to back: floor {batched_floor * 1000:.3f} ms (MCP round trip "
        f"{median(batched['bare']) * 1000:.3f} ms + direct PTY step {median(batched['direct']) * 1000:.3f} ms), "
        f"bare server CPU per step {meters['bare back to back'].per_step()}; the other processes' CPU per step: "
        f"bare round trip: {others['bare'].per_step()}; direct PTY step: {others['direct'].per_step('this process')}"
    )
    for subject in subjects:
        ours, batched_ours = median(interleaved[subject.label]), median(batched[subject.label])
        print(
            f"  {subject.label}: interleaved step {ours * 1000:.3f} ms (middle half "
            f"{spread([value * 1000 for value in interleaved[subject.label]])}), ratio {ours / floor:.3f}, server "
            f"CPU {meters[f'{subject.label} interleaved'].per_step()}; back to back step {batched_ours * 1000:.3f} ms "
            f"(middle half {spread([value * 1000 for value in batched[subject.label]])}), ratio "
            f"{batched_ours / batched_floor:.3f}, server CPU {meters[f'{subject.label} back to back'].per_step()}, "
            f"{others[subject.label].per_step()}"
        )
    print(
        f"session REPL: the client's check of each result against the outputSchema, inside every step: relay-shell "
        f"{check_relay * 1e6:.0f} µs ({fields_relay} fields), bare {check_bare * 1e6:.0f} µs ({fields_bare} field"
        f"{'s' if fields_bare != 1 else ''})"
    )
    for subject in subjects:
        for failure in subject.failures:
            print(f"  {subject.label}: {failure}")
    total = 2 * STEPS
    answered_all = relay.one_call == total and warm_ok
    ours, batched_ours = median(interleaved[relay.label]), median(batched[relay.label])
    return [
        ratio_row(REPL_BACK_TO_BACK, batched_ours / batched_floor, LIMIT),
        ratio_row("REPL step, interleaved with the floor's", ours / floor, LIMIT),
        Row("REPL steps answered in one call", f"{relay.one_call}/{total}", "100%", answered_all),
    ]


def rows(options: Options) -> list[Row]:
    return anyio.run(measure_all, options.before)


def main(argv: list[str] | None = None) -> int:
    return run_alone(rows, argv)


if __name__ == "__main__":
    raise SystemExit(main())
