"""What the exec trace (adr/0019, adr/0027) costs, through a real stdio client, the trace on and off measured in the
same run (issue 27's rows):

- `shell_exec true` with RELAY_SHELL_EXEC_TRACE=on vs the same server with it off: target ≤ 1.10×. The bare
  MCPServer floor (`sh -c true` from a trivial tool) is printed for information.
- a call that runs 1,000 short programs (`for i in $(seq 1000); do /bin/true; done`) with the trace on vs off:
  target ≤ 1.10×, and the cost per traced exec in microseconds.

Besides wall time, each server's own CPU time per call (utime + stime of the server process, all its threads,
from /proc) is printed: on a machine shared with other work it moves far less than wall time, and says what the
trace costs the server whatever the scheduler does. Batches interleave so that machine noise hits every
configuration alike. `--breakdown` also prints where a traced exec's time goes inside the server (the service
thread's steps, timed in-process; see adr/0027). `--paths` measures the 1,000 programs row three ways in one run,
interleaved: untraced, traced with the compiled answerer (adr/0032), traced on the Python path alone
(RELAY_EXEC_TRACE_ANSWERER=python).
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import anyio
from mcp import Client

from benchmarks.common import (
    TRACE_THOUSAND,
    TRACE_TRUE,
    Options,
    Row,
    bare_client,
    code_at,
    measure,
    median,
    ratio_row,
    relay_client,
    run_alone,
    this_code,
    verdict,
)

CALLS = 300
LOOP_CALLS = 12
LOOP = "for i in $(seq 1000); do /bin/true; done"
LOOP_EXECS = 1002  # sh, seq and 1,000 × true
LIMIT_TRUE = 1.10
LIMIT_LOOP = 1.10


def caller(client: Client, command: str) -> Callable[[], Awaitable[None]]:
    async def call() -> None:
        result = await client.call_tool("shell_exec", {"command": command, "timeout": 120})
        assert not result.is_error, result
        structured = result.structured_content or {}
        assert structured.get("exit_code") == 0, structured

    return call


async def server_info(client: Client) -> dict[str, object]:
    result = await client.call_tool("server_info", {})
    return dict((result.structured_content or {}).get("info", {}))


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, every thread of it."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_pid(trace_setting: str) -> int:
    """The relay-shell server this process started with RELAY_SHELL_EXEC_TRACE=`trace_setting`."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read().split(b"\0")
        except OSError:
            continue
        if parent == me and f"RELAY_SHELL_EXEC_TRACE={trace_setting}".encode() in environ:
            return int(entry)
    raise RuntimeError(f"no relay-shell server with RELAY_SHELL_EXEC_TRACE={trace_setting}")


async def timed(call: Callable[[], Awaitable[None]], rounds: int, pid: int, cpu: list[float]) -> list[float]:
    """Wall times of `rounds` calls; the server's CPU seconds for them added to cpu[0]."""
    before = cpu_seconds(pid)
    samples = await measure(call, rounds)
    cpu[0] += cpu_seconds(pid) - before
    return samples


async def measure_rows() -> list[Row]:
    async with (
        relay_client(exec_trace="on") as traced,
        relay_client(exec_trace="off") as untraced,
        bare_client() as bare,
    ):
        traced_info = await server_info(traced)
        state = dict(traced_info.get("exec_trace", {}))  # type: ignore[call-overload]
        if state.get("state") != "on":
            why = f"the trace is {state.get('state')} here: {state.get('reason')}"
            print(f"exec trace: not measured, {why}")
            return [Row(TRACE_TRUE, "not measured", why, False), Row(TRACE_THOUSAND, "not measured", why, False)]
        on_pid, off_pid = server_pid("on"), server_pid("off")

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
        on_cpu, off_cpu = [0.0], [0.0]
        for _ in range(CALLS // 50):
            floor += await measure(bare_call, 50)
            on += await timed(traced_true, 50, on_pid, on_cpu)
            off += await timed(untraced_true, 50, off_pid, off_cpu)
        loop_on: list[float] = []
        loop_off: list[float] = []
        loop_on_cpu, loop_off_cpu = [0.0], [0.0]
        for _ in range(LOOP_CALLS):
            loop_off += await timed(untraced_loop, 1, off_pid, loop_off_cpu)
            loop_on += await timed(traced_loop, 1, on_pid, loop_on_cpu)
    ratio_true = median(on) / median(off)
    ratio_loop = median(loop_on) / median(loop_off)
    per_exec_us = (median(loop_on) - median(loop_off)) / LOOP_EXECS * 1e6
    print(
        f"exec trace, shell_exec true: traced {median(on) * 1000:.2f} ms, untraced {median(off) * 1000:.2f} ms, "
        f"ratio {ratio_true:.3f} (target ≤ {LIMIT_TRUE}) {verdict(ratio_true, LIMIT_TRUE)}; bare floor "
        f"{median(floor) * 1000:.2f} ms (traced {median(on) / median(floor):.2f}× it); server CPU per call "
        f"{on_cpu[0] / len(on) * 1e6:.0f} µs traced, {off_cpu[0] / len(off) * 1e6:.0f} µs untraced"
    )
    print(
        f"exec trace, 1,000 programs: traced {median(loop_on) * 1000:.1f} ms, untraced {median(loop_off) * 1000:.1f} "
        f"ms, ratio {ratio_loop:.3f} (target ≤ {LIMIT_LOOP}) {verdict(ratio_loop, LIMIT_LOOP)}; "
        f"{per_exec_us:.0f} µs per traced exec; server CPU per traced exec "
        f"{(loop_on_cpu[0] - loop_off_cpu[0]) / LOOP_CALLS / LOOP_EXECS * 1e6:.0f} µs"
    )
    return [ratio_row(TRACE_TRUE, ratio_true, LIMIT_TRUE), ratio_row(TRACE_THOUSAND, ratio_loop, LIMIT_LOOP)]


@contextlib.contextmanager
def python_path() -> Iterator[None]:
    """A server started meanwhile answers every exec from Python (trace/native.py's switch)."""
    os.environ["RELAY_EXEC_TRACE_ANSWERER"] = "python"
    try:
        yield
    finally:
        del os.environ["RELAY_EXEC_TRACE_ANSWERER"]


async def measure_paths() -> None:
    """The 1,000 programs row three ways, interleaved in one run: the compiled answerer against the Python path."""
    async with relay_client(exec_trace="off") as untraced, relay_client(exec_trace="on") as compiled:
        with python_path():
            python_client = relay_client(exec_trace="on")
            python_traced = await python_client.__aenter__()
        try:
            compiled_info = dict((await server_info(compiled)).get("exec_trace", {}))  # type: ignore[call-overload]
            if compiled_info.get("state") != "on":
                print(f"exec trace paths: not measured, the trace is {compiled_info.get('state')} here")
                return
            pids = {"untraced": server_pid("off")}
            on_pids = [int(entry) for entry in os.listdir("/proc") if entry.isdigit() and _traced_child(int(entry))]
            clients = {"untraced": untraced, "compiled answerer": compiled, "python path": python_traced}
            pids["compiled answerer"], pids["python path"] = _split_traced(on_pids)
            calls = {name: caller(client, LOOP) for name, client in clients.items()}
            for call in calls.values():
                await call()
            walls: dict[str, list[float]] = {name: [] for name in clients}
            cpus: dict[str, list[float]] = {name: [0.0] for name in clients}
            for _ in range(LOOP_CALLS):
                for name, call in calls.items():
                    walls[name] += await timed(call, 1, pids[name], cpus[name])
        finally:
            await python_client.__aexit__(None, None, None)
    base = median(walls["untraced"])
    base_cpu = cpus["untraced"][0]
    for name in clients:
        wall = median(walls[name])
        added = (wall - base) / LOOP_EXECS * 1e6
        cpu_added = (cpus[name][0] - base_cpu) / LOOP_CALLS / LOOP_EXECS * 1e6
        print(
            f"exec trace paths, 1,000 programs, {name}: {wall * 1000:.1f} ms, ratio {wall / base:.3f} (target ≤ "
            f"{LIMIT_LOOP}), added {added:.0f} µs per exec; server CPU added per exec {cpu_added:.0f} µs"
        )


def _traced_child(pid: int) -> bool:
    with contextlib.suppress(OSError, IndexError, ValueError):
        with open(f"/proc/{pid}/stat") as handle:
            parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{pid}/environ", "rb") as handle:
            environ = handle.read().split(b"\0")
        return parent == os.getpid() and b"RELAY_SHELL_EXEC_TRACE=on" in environ
    return False


def _split_traced(pids: list[int]) -> tuple[int, int]:
    """(the traced server with the compiled answerer, the one forced to the Python path)."""
    forced = [pid for pid in pids if b"RELAY_EXEC_TRACE_ANSWERER=python" in open(f"/proc/{pid}/environ", "rb").read()]
    other = [pid for pid in pids if pid not in forced]
    return other[0], forced[0]


def thread_cpu_ns(pid: int) -> int:
    """The CPU time of every live thread of `pid`, in nanoseconds (schedstat: exact, unlike /proc/PID/stat's ticks;
    blind to threads that ended, of which a server has none per call)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/schedstat") as handle:
            total += int(handle.read().split()[0])
    return total


def built(root: Path) -> None:
    """The compiled answerer and spawner of a tree extracted by `code_at` (which compiles its Python only), built
    as setup.py builds them: without it the tree's servers would take the Python path."""
    trace = root / "relay_shell" / "trace"
    sources = [str(path) for path in sorted(trace.glob("*.c"))]
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    command = ["cc", "-O2", "-std=gnu11", "-shared", "-fPIC", *sources, "-o", str(trace / f"_answerer{suffix}")]
    subprocess.run([*command, "-lpthread"], check=True)


async def measure_against(rev: str, rounds: int) -> None:
    """`shell_exec true` traced and untraced, this checkout and `rev` side by side with the bare tool, batches of 50
    interleaved: wall per call, and server CPU per call from every thread's schedstat (adr/0036 "Round 2")."""
    with code_at(rev) as before:
        built(before.root)
        codes = {"this": this_code(), rev: before}
        async with contextlib.AsyncExitStack() as stack:
            clients: dict[str, Client] = {}
            pids: dict[str, int] = {}
            for label, code in codes.items():
                for setting in ("on", "off"):
                    started = set(os.listdir("/proc"))
                    clients[f"{label} {setting}"] = await stack.enter_async_context(
                        relay_client(code, exec_trace=setting)
                    )
                    pids[f"{label} {setting}"] = _newest_server(started)
            bare = await stack.enter_async_context(bare_client())
            calls: dict[str, Callable[[], Awaitable[object]]] = {name: caller(c, "true") for name, c in clients.items()}
            calls["bare"] = lambda: bare.call_tool("sh_true", {})
            for call in calls.values():
                for _ in range(20):
                    await call()
            walls: dict[str, list[float]] = {name: [] for name in calls}
            cpus: dict[str, list[float]] = {name: [] for name in calls}
            for _ in range(rounds):
                for name, call in calls.items():
                    before_ns = thread_cpu_ns(pids[name]) if name in pids else 0
                    batch = await measure(call, 50)
                    walls[name] += batch
                    if name in pids:
                        cpus[name].append((thread_cpu_ns(pids[name]) - before_ns) / 50 / 1000)
    for label in codes:
        on, off = f"{label} on", f"{label} off"
        cpu_on, cpu_off = median(cpus[on]), median(cpus[off])
        print(
            f"{label}: shell_exec true, server CPU per call traced {cpu_on:.0f} µs, untraced {cpu_off:.0f} µs "
            f"({cpu_on / cpu_off:.3f}×, +{cpu_on - cpu_off:.0f}); wall traced {median(walls[on]) * 1e3:.3f} ms, "
            f"untraced {median(walls[off]) * 1e3:.3f} ms ({median(walls[on]) / median(walls[off]):.3f}×), "
            f"traced vs bare {median(walls[on]) / median(walls['bare']):.3f}×"
        )
    print(f"bare: {median(walls['bare']) * 1e3:.3f} ms per call; {rounds} rounds of 50 calls each, interleaved")


def _newest_server(before: set[str]) -> int:
    """The relay-shell server started since `before` (a child of this process)."""
    for entry in sorted(set(os.listdir("/proc")) - before, key=lambda name: int(name) if name.isdigit() else 0):
        if entry.isdigit() and _child_of_me(int(entry)):
            return int(entry)
    raise RuntimeError("the server just started is not found")


def _child_of_me(pid: int) -> bool:
    with contextlib.suppress(OSError, IndexError, ValueError), open(f"/proc/{pid}/stat") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[1]) == os.getpid()
    return False


def rows(options: Options) -> list[Row]:
    return anyio.run(measure_rows)


def main(argv: list[str] | None = None) -> int:
    """`--breakdown` also prints where a traced exec's time goes (benchmarks/trace_breakdown.py)."""
    arguments = sys.argv[1:] if argv is None else argv
    if "--against" in arguments:  # --against REV [ROUNDS]: this checkout and REV side by side
        position = arguments.index("--against")
        rounds = int(arguments[position + 2]) if len(arguments) > position + 2 else 12
        anyio.run(measure_against, arguments[position + 1], rounds)
        return 0
    if "--paths" in arguments:
        anyio.run(measure_paths)
        return 0
    status = run_alone(rows, [argument for argument in arguments if argument != "--breakdown"])
    if "--breakdown" in arguments:
        from benchmarks.trace_breakdown import print_breakdown

        print_breakdown()
    return status


if __name__ == "__main__":
    raise SystemExit(main())
