"""Long-running work (issue 28, adr/0028), three rows, each a ratio measured in the same run:

1. `shell_exec true` through a real stdio client, this code vs the code before jobs and kept outputs existed (the
   parent of the commit that added relay_shell/outputs.py, exported with `git archive`; BENCH_JOBS_BASE=<commit>
   picks another): ≤ 1.02×. The two servers answer in turn, in batches of ten, so machine noise hits both alike.
2. A job's session_recv round trip vs a PTY session's (both return at once: nothing new, timeout 0): ≤ 1.10×.
3. Memory: 100 cut results of 10 MiB each through one server with the default bound (RELAY_SHELL_OUTPUT_STORE_BYTES,
   64 MiB), against the same 100 calls through a server that keeps nothing (bound 0): the difference of their peak
   RSS growth is what keeping costs, ≤ 1.10× the bound (allocator slack on top of the bytes held). The store never
   holds more than the bound: the oldest output is gone, the newest are readable, and at most 6 of 10 MiB are.

    python -m benchmarks.bench_jobs
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import CallToolResult

from benchmarks.common import child_pid_running, reset_peak_rss, status_kib, verdict

ROOT = Path(__file__).resolve().parent.parent
EXEC_LIMIT = 1.02
RECV_LIMIT = 1.10
MEMORY_LIMIT = 1.10
ROUNDS = 100  # batches per server
BATCH = 10
BOUND = 64 * 1024 * 1024
OUTPUTS = 100
OUTPUT_BYTES = 10 * 1024 * 1024


def base_commit() -> str:
    """The code before this change: the parent of the commit that added relay_shell/outputs.py."""
    chosen = os.environ.get("BENCH_JOBS_BASE")
    if chosen:
        return chosen
    added = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "--", "relay_shell/outputs.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not added:
        raise SystemExit("bench_jobs: relay_shell/outputs.py is in no commit yet; set BENCH_JOBS_BASE=<commit>")
    return f"{added[-1]}^"


def export(commit: str, directory: Path) -> None:
    archive = subprocess.run(["git", "archive", commit, "relay_shell"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive.stdout, check=True)


def params(code: Path, work: Path, **settings: str) -> StdioServerParameters:
    env = {key: value for key, value in os.environ.items() if not key.startswith("RELAY_SHELL_")}
    env["RELAY_SHELL_AUDIT_PATH"] = str(work / "audit.jsonl")
    env["PYTHONPATH"] = str(code)
    env["XDG_CACHE_HOME"] = str(work / "cache")  # each code its own schema cache
    env.update({f"RELAY_SHELL_{key.upper()}": value for key, value in settings.items()})
    return StdioServerParameters(command=sys.executable, args=["-m", "relay_shell"], env=env, cwd=str(work))


@asynccontextmanager
async def server(code: Path, **settings: str) -> AsyncIterator[Client]:
    with tempfile.TemporaryDirectory() as work:
        async with Client(params(code, Path(work), **settings), mode="legacy") as client:
            yield client


async def timed(client: Client, tool: str, arguments: dict[str, object]) -> float:
    started = time.perf_counter()
    result = await client.call_tool(tool, arguments)
    elapsed = time.perf_counter() - started
    assert not result.is_error, result.content
    return elapsed


def server_pids() -> set[int]:
    """This process's children serving relay-shell."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            command = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and b"relay_shell" in command:
            found.add(int(entry))
    return found


def cpu_seconds(pid: int) -> float:
    """The process's user + system time so far (its own, not its children's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def exec_row() -> bool:
    with tempfile.TemporaryDirectory() as exported:
        base = base_commit()
        export(base, Path(exported))
        # The exec trace off in both: the code before this change ran untraced by default, this code traces a root
        # server by default (adr/0027), and that cost is bench_exec_trace's row, not this one's.
        async with server(Path(exported), exec_trace="off") as before:
            pids = {"before": server_pids()}
            async with server(ROOT, exec_trace="off") as after:
                pids["after"] = server_pids() - pids["before"]
                clients = {"before": before, "after": after}
                samples: dict[str, list[float]] = {"before": [], "after": []}
                cpu = {"before": 0.0, "after": 0.0}
                for _ in range(30):  # warm both
                    for client in clients.values():
                        await timed(client, "shell_exec", {"command": "true"})
                for _ in range(ROUNDS):
                    for name, client in clients.items():
                        (pid,) = pids[name]
                        used = cpu_seconds(pid)
                        for _ in range(BATCH):
                            samples[name].append(await timed(client, "shell_exec", {"command": "true"}))
                        cpu[name] += cpu_seconds(pid) - used
    floor, ours = statistics.median(samples["before"]), statistics.median(samples["after"])
    ratio = ours / floor
    calls = len(samples["after"])
    print(
        f"shell_exec true: {ours * 1000:.3f} ms, before this change ({base}) {floor * 1000:.3f} ms, "
        f"ratio {ratio:.3f} (target ≤ {EXEC_LIMIT}) {verdict(ratio, EXEC_LIMIT)}; the server's CPU per call "
        f"{cpu['after'] / calls * 1000:.3f} ms vs {cpu['before'] / calls * 1000:.3f} ms, ratio "
        f"{cpu['after'] / cpu['before']:.3f} (for information: less sensitive to a busy machine)"
    )
    return ratio <= EXEC_LIMIT


async def recv_row() -> bool:
    async with server(ROOT) as client:
        spawned = await client.call_tool("shell_spawn", {"command": "sleep 600"})
        session_id = (spawned.structured_content or {})["session_id"]
        yielded = await client.call_tool("shell_exec", {"command": "sleep 600", "yield_after": 0.1, "timeout": 900})
        job_id = (yielded.structured_content or {})["job_id"]
        samples: dict[str, list[float]] = {"session": [], "job": []}
        for _ in range(20):
            for handle in (session_id, job_id):
                await timed(client, "session_recv", {"session_id": handle, "timeout": 0})
        for _ in range(ROUNDS):
            for name, handle in (("session", session_id), ("job", job_id)):
                for _ in range(BATCH):
                    samples[name].append(await timed(client, "session_recv", {"session_id": handle, "timeout": 0}))
        await client.call_tool("session_kill", {"session_id": job_id})
        await client.call_tool("session_kill", {"session_id": session_id})
    floor, ours = statistics.median(samples["session"]), statistics.median(samples["job"])
    ratio = ours / floor
    print(
        f"session_recv round trip: job {ours * 1000:.3f} ms, PTY session {floor * 1000:.3f} ms, "
        f"ratio {ratio:.3f} (target ≤ {RECV_LIMIT}) {verdict(ratio, RECV_LIMIT)}"
    )
    return ratio <= RECV_LIMIT


async def peak_growth(bound: int) -> tuple[int, int, list[CallToolResult]]:
    """One server, the store bounded at `bound`: its peak RSS growth (bytes) over the 100 calls, how many of their
    outputs are still readable, and what reading the first and the last gives."""
    command = f"head -c {OUTPUT_BYTES} /dev/zero | tr '\\0' x"
    async with server(ROOT, output_store_bytes=str(bound)) as client:
        pid = child_pid_running("relay_shell")
        await client.call_tool("shell_exec", {"command": "seq 1 100000"})  # the first records, a cut result
        before_kib = status_kib(pid, "VmRSS")
        reset_peak_rss(pid)
        kept: list[str | None] = []
        for _ in range(OUTPUTS):
            result = await client.call_tool("shell_exec", {"command": command})
            got = result.structured_content or {}
            assert got["truncated"] and got["output_bytes"] == OUTPUT_BYTES, got
            kept.append(got["output_id"])
        peak_kib = status_kib(pid, "VmHWM")
        readable = 0
        ends: list[CallToolResult] = []
        for output_id in kept:
            if output_id is None:
                continue
            page = await client.call_tool("session_recv", {"session_id": output_id, "since": 0, "max_bytes": 256})
            readable += not page.is_error
            if output_id in (kept[0], kept[-1]):
                ends.append(page)
    return (peak_kib - before_kib) * 1024, readable, ends


async def memory_row() -> bool:
    growth, readable, (first, last) = await peak_growth(BOUND)
    # The same calls with nothing kept (the store's bound 0): what the calls cost the server anyway (their reads,
    # captures and results, and what the allocator keeps of them), measured in the same run.
    without, _, _ = await peak_growth(0)
    ratio = (growth - without) / BOUND
    print(
        f"memory, {OUTPUTS} cut results of 10 MiB, bound {BOUND / 2**20:.0f} MiB: peak RSS +{growth / 2**20:.1f} MiB "
        f"(+{without / 2**20:.1f} MiB with nothing kept), {readable} outputs readable at the end; the store's part "
        f"{(growth - without) / 2**20:.1f} MiB, ratio to the bound {ratio:.3f} (target ≤ {MEMORY_LIMIT}) "
        f"{verdict(ratio, MEMORY_LIMIT)}"
    )
    assert first.is_error and "OutputGone" in str(first.content[0]), first.content
    assert not last.is_error, last.content
    assert readable * OUTPUT_BYTES <= BOUND, f"{readable} outputs of 10 MiB readable: over the bound"
    return ratio <= MEMORY_LIMIT


async def main() -> bool:
    results = [await exec_row(), await recv_row(), await memory_row()]
    return all(results)


if __name__ == "__main__":
    sys.exit(0 if anyio.run(main) else 1)
