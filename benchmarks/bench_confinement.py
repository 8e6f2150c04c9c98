"""What readonly's kernel enforcement (adr/0024) costs, through a real stdio client, both sides measured in the
same run, batches interleaved so that machine noise hits both alike:

- `shell_exec true` in readonly mode with Landlock vs the same server on a kernel without it (started through
  tests/refuse_syscall.py, so readonly runs classifier-only): target ≤ 1.05×. That launcher's filter
  costs the server something on every system call, so the Landlock side runs under the same filter matching
  nothing. With the exec trace on (the readonly default, adr/0027) and off: either way the command spawns on a
  spare thread confined ahead (confine/spares.py; traced, one the trace's spawner thread made, adr/0031). Each
  server's CPU per call is printed beside (every thread, the confined ones that ended included).
- a readonly PTY step (`session_send` of a line into `tr a-z A-Z`, until it comes back upper-cased) with and
  without: the terminal's child is confined once, at its spawn, so a step must be unchanged within noise (≤ 1.05×).
- for information, in process: spawning `/bin/true` on a thread that confines itself first vs spawning it on the
  calling thread, and the confinement alone (a thread that confines itself and ends).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from benchmarks.common import cpu_seconds, measure, median, new_children, verdict

CALLS = 300
STEPS = 200
BATCH = 25
LIMIT_EXEC = 1.05
LIMIT_STEP = 1.05
REFUSE_SYSCALL = Path(__file__).resolve().parents[1] / "tests" / "refuse_syscall.py"


@asynccontextmanager
async def readonly_client(
    landlock: bool, exec_trace: str = "off", pids: list[int] | None = None
) -> AsyncIterator[Client]:
    """A readonly server with Landlock or without (classifier-only); its pid appended to `pids` (the launcher execs
    the server in place)."""
    with tempfile.TemporaryDirectory() as audit_dir:
        env = {key: value for key, value in os.environ.items() if not key.startswith("RELAY_SHELL_")}
        env["RELAY_SHELL_AUDIT_PATH"] = str(Path(audit_dir) / "audit.jsonl")
        env["RELAY_SHELL_POLICY_MODE"] = "readonly"
        env["RELAY_SHELL_EXEC_TRACE"] = exec_trace
        launcher = [
            str(REFUSE_SYSCALL),
            *(["none", "-"] if landlock else ["landlock_create_ruleset", "EOPNOTSUPP"]),
            sys.executable,
        ]
        params = StdioServerParameters(command=sys.executable, args=[*launcher, "-m", "relay_shell"], env=env)
        async with contextlib.AsyncExitStack() as stack:
            with new_children() as started:
                client = await stack.enter_async_context(Client(params, mode="legacy"))
            if pids is not None:
                pids.append(started[0])
            yield client


async def enforcement(client: Client) -> str:
    result = await client.call_tool("server_info", {})
    return str((result.structured_content or {})["info"]["enforcement"]["readonly"])


def exec_true(client: Client) -> Callable[[], Awaitable[None]]:
    async def call() -> None:
        result = await client.call_tool("shell_exec", {"command": "true"})
        assert (result.structured_content or {}).get("exit_code") == 0, result

    return call


async def pty_stepper(client: Client) -> Callable[[], Awaitable[None]]:
    """One step: a line typed into `tr a-z A-Z` (readonly admits both; the typed text is a tier-0 command), until
    tr printed it back upper-cased (the terminal's echo is not upper-cased, so it cannot match)."""
    spawned = await client.call_tool("shell_spawn", {"command": "tr a-z A-Z", "timeout": 10})
    session_id = (spawned.structured_content or {})["session_id"]
    counter = [0]

    async def step() -> None:
        counter[0] += 1
        line = f"echo {counter[0]}"
        result = await client.call_tool(
            "session_send", {"session_id": session_id, "data": line, "until": f"^{line.upper()}\\b", "timeout": 10}
        )
        assert (result.structured_content or {}).get("wait") == "match", result

    return step


def in_process_costs() -> tuple[float, float, float]:
    """Medians in µs: spawning /bin/true on the calling thread, on a confined thread, and the confinement alone."""
    from relay_shell.confine.confinement import Confinement
    from relay_shell.confine.landlock import abi_version
    from relay_shell.metrics import Metrics

    confinement = Confinement(abi_version(), "auto", Metrics(enabled=False))

    def timed(action: Callable[[], object], rounds: int = 300) -> float:
        samples = []
        for _ in range(rounds):
            started = time.perf_counter()
            action()
            samples.append(time.perf_counter() - started)
        return median(samples) * 1e6

    def spawn() -> None:
        subprocess.Popen(["/bin/true"], start_new_session=True, close_fds=True).wait()

    plain = timed(spawn)
    confined = timed(lambda: confinement.run_confined(spawn))
    alone = timed(lambda: confinement.on_confined_thread(lambda: None), 1000)
    return plain, confined, alone


async def interleaved(
    first: Callable[[], Awaitable[None]], second: Callable[[], Awaitable[None]], total: int, pids: list[int]
) -> tuple[list[float], list[float], list[float]]:
    """Wall times of `total` calls of each, after a warm-up, in batches that alternate; and each server's CPU
    seconds per call (every thread, ended ones too: the confined threads), read once before the batches and once
    after: the kernel counts in clock ticks (10 ms here), so readings around each batch of 25 calls summed an error
    of a tick per batch (±0.1 ms a call over 300 calls); over the whole run it is one tick. What a server does while
    the other one's batch runs (the next spare made) belongs to its calls."""
    for _ in range(20):
        await first()
        await second()
    one: list[float] = []
    other: list[float] = []
    used = [cpu_seconds(pid) for pid in pids]
    for _ in range(total // BATCH):
        one += await measure(first, BATCH)
        other += await measure(second, BATCH)
    cpu = [cpu_seconds(pid) - before for pid, before in zip(pids, used, strict=True)]
    return one, other, [cpu[0] / len(one), cpu[1] / len(other)]


async def exec_ratio(exec_trace: str) -> tuple[list[float], list[float], list[float], str] | None:
    """Medians' inputs of `shell_exec true`, readonly with Landlock and without, the trace as given, and each
    server's CPU per call; None when this host cannot compare them (said)."""
    pids: list[int] = []
    async with (
        readonly_client(landlock=True, exec_trace=exec_trace, pids=pids) as confined,
        readonly_client(landlock=False, exec_trace=exec_trace, pids=pids) as classifier_only,
    ):
        states = (await enforcement(confined), await enforcement(classifier_only))
        if not states[0].startswith("landlock") or states[1] != "classifier-only":
            print(f"readonly confinement: not measured, enforcement is {states} here (server_info says why)")
            return None
        on, off, cpu = await interleaved(exec_true(confined), exec_true(classifier_only), CALLS, pids)
    return on, off, cpu, states[0]


async def step_ratio() -> tuple[list[float], list[float], list[float]]:
    pids: list[int] = []
    async with (
        readonly_client(landlock=True, pids=pids) as confined,
        readonly_client(landlock=False, pids=pids) as classifier_only,
    ):
        return await interleaved(await pty_stepper(confined), await pty_stepper(classifier_only), STEPS, pids)


async def main() -> bool:
    passed = True
    for exec_trace in ("off", "on"):
        measured = await exec_ratio(exec_trace)
        if measured is None:
            return False
        on, off, cpu, state = measured
        ratio = median(on) / median(off)
        passed = passed and ratio <= LIMIT_EXEC
        print(
            f"readonly confinement, shell_exec true (exec trace {exec_trace}): {state} {median(on) * 1000:.2f} ms, "
            f"classifier-only {median(off) * 1000:.2f} ms, ratio {ratio:.3f} (target ≤ {LIMIT_EXEC}) "
            f"{verdict(ratio, LIMIT_EXEC)}; server CPU per call {cpu[0] * 1e6:.0f} µs vs {cpu[1] * 1e6:.0f} µs"
        )
    step_on, step_off, step_cpu = await step_ratio()
    ratio_step = median(step_on) / median(step_off)
    print(
        f"readonly confinement, PTY step: {median(step_on) * 1000:.2f} ms vs {median(step_off) * 1000:.2f} ms, "
        f"ratio {ratio_step:.3f} (target ≤ {LIMIT_STEP}) {verdict(ratio_step, LIMIT_STEP)}; server CPU per step "
        f"{step_cpu[0] * 1e6:.0f} µs vs {step_cpu[1] * 1e6:.0f} µs"
    )
    plain, confined_spawn, alone = in_process_costs()
    print(
        f"readonly confinement, in process: spawn /bin/true {plain:.0f} µs, on a thread confined for it "
        f"{confined_spawn:.0f} µs (+{confined_spawn - plain:.0f} µs); a thread confining itself alone {alone:.0f} µs"
    )
    return passed and ratio_step <= LIMIT_STEP


if __name__ == "__main__":
    raise SystemExit(0 if anyio.run(main) else 1)
