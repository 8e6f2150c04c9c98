"""Server start to `initialize` answered, and the idle server's RSS: relay-shell vs a bare MCPServer, raw JSON-RPC
over stdio (issue 27: ≤ 1.10× and ≤ 1.08×). With `--before REV` (run_all: the commit before the renovation) that
commit's relay-shell is started in the same rounds, side by side (issue 25: ≤ 1.12× and ≤ 1.08× the bare server,
shown beside the ratios before the change).

Each round starts every server once, in an order that rotates, so machine noise hits all alike. A start is timed
from spawn to the `initialize` answer; its CPU (user + system, every thread) is read then too, which a loaded
machine disturbs less than wall time (printed for information, in clock ticks' resolution: a mean), with the CPU of
the children the server started and reaped by then (relay-shell's copy that finds whether the exec trace works,
launch_trace_probe.py). The idle RSS is read after `notifications/initialized` and a pause, as a client leaves a
server between calls. Then the first call is timed, wall and the server's CPU (for information: relay-shell's
`shell_exec true`, which loads the classifier and starts the exec trace, vs the bare server's `sh_true`). Every
relay-shell uses a private tool-schema cache, warmed by the first start (benchmarks/common.py, ServerCode).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common import (
    HERE,
    IDLE_RSS,
    STARTUP,
    Options,
    Row,
    ServerCode,
    code_at,
    cpu_seconds,
    median,
    ratio_row,
    run_alone,
    spread,
    status_kib,
    this_code,
)

ROUNDS = 20  # a start is ~0.5 s of mostly CPU: on a shared machine the median needs many
LIMIT = 1.10  # issue 27
RSS_LIMIT = 1.08  # issues 25 and 27
RENOVATION_LIMIT = 1.12  # issue 25, against the bare server, beside the code before it
IDLE_PAUSE = 0.3  # seconds after initialize before the RSS is read
INITIALIZE = (
    json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"},
            },
        }
    )
    + "\n"
)
INITIALIZED = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n"


def tool_call(name: str, arguments: dict[str, str]) -> str:
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    return json.dumps(call) + "\n"


BARE_FIRST_CALL = tool_call("sh_true", {})
RELAY_FIRST_CALL = tool_call("shell_exec", {"command": "true"})


@dataclass
class Server:
    label: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path | None = None
    idle_pause: float = IDLE_PAUSE  # before the RSS is read
    first_call: str | None = None  # made after the RSS is read, and timed
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    children_cpu: list[float] = field(default_factory=list)
    rss_kib: list[float] = field(default_factory=list)
    first_wall: list[float] = field(default_factory=list)
    first_cpu: list[float] = field(default_factory=list)

    def start(self, record: bool = True) -> None:
        started = time.perf_counter()
        process = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self.env,
            cwd=self.cwd,
            text=True,
        )
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(INITIALIZE)
            process.stdin.flush()
            line = process.stdout.readline()
            elapsed = time.perf_counter() - started
            cpu = cpu_seconds(process.pid)
            children_cpu = reaped_children_cpu_seconds(process.pid)
            assert '"result"' in line, line
            process.stdin.write(INITIALIZED)
            process.stdin.flush()
            time.sleep(self.idle_pause)
            rss = status_kib(process.pid, "VmRSS")
            first = self._first_call(process) if self.first_call is not None else None
        finally:
            process.stdin.close()
            process.wait(timeout=20)
        if record:
            self.wall.append(elapsed)
            self.cpu.append(cpu)
            self.children_cpu.append(children_cpu)
            self.rss_kib.append(rss)
            if first is not None:
                self.first_wall.append(first[0])
                self.first_cpu.append(first[1])

    def _first_call(self, process: subprocess.Popen[str]) -> tuple[float, float]:
        """The first call's wall time and the server's CPU for it."""
        assert process.stdin is not None and process.stdout is not None and self.first_call is not None
        cpu_before = cpu_seconds(process.pid)
        started = time.perf_counter()
        process.stdin.write(self.first_call)
        process.stdin.flush()
        while True:
            line = process.stdout.readline()
            assert line, "the server closed stdout before answering the first call"
            if json.loads(line).get("id") == 2:
                break
        elapsed = time.perf_counter() - started
        assert '"isError":true' not in line.replace(" ", ""), line
        return elapsed, cpu_seconds(process.pid) - cpu_before


def reaped_children_cpu_seconds(pid: int) -> float:
    """User + system CPU of the children a running process has reaped (cutime + cstime), in clock ticks."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def time_to_initialize(argv: list[str], env: dict[str, str]) -> float:
    """One start's time to `initialize` answered (bench_runbooks times its starts with it)."""
    server = Server(argv[0], argv, env, idle_pause=0)
    server.start()
    return server.wall[0]


def relay_server(code: ServerCode, audit_dir: str, label: str = "", **settings: str) -> Server:
    env = {key: value for key, value in os.environ.items() if not key.startswith("RELAY_SHELL_")}
    env["RELAY_SHELL_AUDIT_PATH"] = str(Path(audit_dir) / "audit.jsonl")
    env.update({f"RELAY_SHELL_{key.upper()}": value for key, value in settings.items()})
    return Server(f"relay-shell, {label or code.label}", code.argv(), code.environment(env), code.root)


def measure(servers: list[Server]) -> None:
    for server in servers:  # warm the page cache, and each relay-shell's schema cache
        server.start(record=False)
    for round_number in range(ROUNDS):
        # Rotate the order, so no server always follows another's exit.
        shift = round_number % len(servers)
        for server in servers[shift:] + servers[:shift]:
            server.start()


def rows(options: Options) -> list[Row]:
    bare = Server("bare MCPServer", [sys.executable, str(HERE / "bare_server.py")], dict(os.environ))
    bare.first_call = BARE_FIRST_CALL
    with contextlib.ExitStack() as stack:
        audit_dir = stack.enter_context(tempfile.TemporaryDirectory())
        ours = relay_server(this_code(), str(Path(audit_dir) / "this"))
        servers = [bare, ours]
        before = untraced = None
        if options.before is not None:
            before = relay_server(stack.enter_context(code_at(options.before)), str(Path(audit_dir) / "before"))
            # The code before traced nothing by default; this code traces a root server (adr/0027): the rows
            # "side by side" compare both untraced, so they measure the renovation, not the trace.
            untraced = relay_server(this_code(), str(Path(audit_dir) / "untraced"), "exec trace off", exec_trace="off")
            servers += [before, untraced]
        for server in servers[1:]:
            server.first_call = RELAY_FIRST_CALL
        measure(servers)
    for server in servers:
        print(
            f"startup: {server.label:32s} to initialize {median(server.wall) * 1000:6.0f} ms "
            f"(middle half {spread([value * 1000 for value in server.wall])} ms), "
            f"CPU {statistics.mean(server.cpu) * 1000:4.0f} ms (mean) + reaped children "
            f"{statistics.mean(server.children_cpu) * 1000:3.0f} ms, idle RSS {median(server.rss_kib) / 1024:.2f} MiB"
        )
        print(
            f"startup: {server.label:32s} first call {median(server.first_wall) * 1000:6.1f} ms "
            f"(middle half {spread([value * 1000 for value in server.first_wall])} ms), "
            f"server CPU {statistics.mean(server.first_cpu) * 1000:5.1f} ms (mean)"
        )
    startup = median(ours.wall) / median(bare.wall)
    rss = median(ours.rss_kib) / median(bare.rss_kib)
    cpu = statistics.mean(ours.cpu) / statistics.mean(bare.cpu)
    with_children = (statistics.mean(ours.cpu) + statistics.mean(ours.children_cpu)) / (
        statistics.mean(bare.cpu) + statistics.mean(bare.children_cpu)
    )
    print(
        f"startup: ratios to the bare server: to initialize {startup:.3f}, CPU {cpu:.3f} (with reaped children "
        f"{with_children:.3f}), idle RSS {rss:.3f}"
    )
    measured = [ratio_row(STARTUP, startup, LIMIT), ratio_row(IDLE_RSS, rss, RSS_LIMIT)]
    if before is not None and untraced is not None:
        startup = median(untraced.wall) / median(bare.wall)
        rss = median(untraced.rss_kib) / median(bare.rss_kib)
        print(
            f"startup: this code with the exec trace off, ratios to the bare server: to initialize {startup:.3f}, "
            f"idle RSS {rss:.3f}"
        )
        before_startup = median(before.wall) / median(bare.wall)
        before_rss = median(before.rss_kib) / median(bare.rss_kib)
        before_cpu = statistics.mean(before.cpu) / statistics.mean(bare.cpu)
        print(
            f"startup: before ({options.before}), ratios to the bare server: to initialize {before_startup:.3f}, "
            f"CPU {before_cpu:.3f}, idle RSS {before_rss:.3f}"
        )
        for name, ratio, was, limit in (
            ("spawn → initialize vs a bare MCP server", startup, before_startup, RENOVATION_LIMIT),
            ("idle RSS vs a bare MCP server", rss, before_rss, RSS_LIMIT),
        ):
            row = ratio_row(f"{name}, both untraced, side by side with {options.before}", ratio, limit)
            measured.append(row._replace(value=f"{row.value} (before {was:.3f}×)"))
    return measured


def main(argv: list[str] | None = None) -> int:
    return run_alone(rows, argv)


if __name__ == "__main__":
    raise SystemExit(main())
