"""Where a traced exec's time goes (adr/0027), measured in-process with the server's own tracer: one spawner thread,
one service thread, a tree running `/bin/true` N times, traced and then untraced, from the same process.

Printed per exec, in microseconds (medians over every exec of the traced run):
- the added latency: (traced loop - untraced loop) / N, as the tree sees it;
- the service thread's work between the wake-up and the answer, step by step (NOTIF_RECV, attribution, the
  request read with process_vm_readv, the program's resolution, NOTIF_SEND), as wall time and as the thread's
  own CPU time; wall minus CPU inside these steps is time spent waiting for the GIL (or preempted);
- the rest of the added latency: the kernel's notification round trip and the supervisor's wake-up from
  epoll_wait (what no Python change can shorten);
- the same request read again through /proc/PID/mem (open, pread, close) and through process_vm_readv, side by
  side on the paused process;
- the record built afterwards (redaction, digest, entry), per exec, off the exec's path.

First, A/B in the same process, batches interleaved: untraced, the Python path (RELAY_EXEC_TRACE_ANSWERER=
python) and the compiled answerer (adr/0032), each as wall time per exec and as this process's CPU time per exec
(all its threads: the service threads' work), best of ROUNDS; then the Python path's steps.

Run alone: `python -m benchmarks.trace_breakdown [N]`, or with `bench_exec_trace --breakdown`.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from relay_shell.trace import answer, lineage, memory, native, resolve, seccomp, tracer
from relay_shell.trace.record import ExecTrace
from relay_shell.trace.spawn import spawn

LOOP_EXECS = 2000
ROUNDS = 5


class Steps:
    """Wall and thread-CPU nanoseconds per call of each wrapped step, on the service thread only."""

    def __init__(self) -> None:
        self.wall: dict[str, list[int]] = {}
        self.cpu: dict[str, list[int]] = {}
        self.service = 0  # the service thread's native id, once known

    def wrap(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
            try:
                return function(*args, **kwargs)
            finally:
                self.wall.setdefault(name, []).append(time.perf_counter_ns() - wall)
                self.cpu.setdefault(name, []).append(time.thread_time_ns() - cpu)

        return timed


def _read_by_proc_mem(pid: int, spans: list[tuple[int, int]]) -> None:
    descriptor = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
    try:
        for address, length in spans:
            os.pread(descriptor, length, address)
    finally:
        os.close(descriptor)


def instrument(steps: Steps, reads: dict[str, list[int]]) -> None:
    """Wrap the service thread's steps where tracer.py and answer.py look them up."""
    seccomp.Notifications.receive = steps.wrap("NOTIF_RECV", seccomp.Notifications.receive)  # type: ignore[method-assign]
    seccomp.Notifications.answer = steps.wrap("NOTIF_SEND", seccomp.Notifications.answer)  # type: ignore[method-assign]
    lineage.Lineage.quick = steps.wrap("attribution", lineage.Lineage.quick)  # type: ignore[method-assign]
    tracer.read_stat = steps.wrap("attribution (/proc/PID/stat)", tracer.read_stat)
    resolve.locate_cached = steps.wrap("program resolved", resolve.locate_cached)
    tracer.ExecTracer._settle = steps.wrap("record built (batch)", tracer.ExecTracer._settle)  # type: ignore[method-assign]
    tracer.ExecTracer._ready = steps.wrap("wake-up to answer, all", tracer.ExecTracer._ready)  # type: ignore[method-assign]
    original_read = memory.read_request
    original_spans = memory.Reader.spans
    spans_calls: list[int] = []

    def timed_spans(reader: memory.Reader, pid: int, spans: list[tuple[int, int]]) -> list[bytes]:
        wall = time.perf_counter_ns()
        try:
            return original_spans(reader, pid, spans)
        finally:
            spans_calls.append(time.perf_counter_ns() - wall)

    def read_request(reader: memory.Reader, pid: int, path_address: int, argv_address: int, size: int) -> Any:
        wall = time.perf_counter_ns()
        spans_calls.clear()
        memory.Reader.spans = timed_spans  # type: ignore[method-assign, assignment]
        try:
            request = original_read(reader, pid, path_address, argv_address, size)
        finally:
            memory.Reader.spans = original_spans  # type: ignore[method-assign]
        reads.setdefault("request read (process_vm_readv, as shipped)", []).append(time.perf_counter_ns() - wall)
        if spans_calls:
            reads.setdefault("— its first process_vm_readv (a new process)", []).append(spans_calls[0])
            reads.setdefault("— its system calls, all", []).append(sum(spans_calls))
        # The same bytes again, both ways, while the process still waits (not on the shipped path).
        spans = [(path_address, len(request[0]) + 1), (argv_address, (len(request[1]) + 1) * size)]
        wall = time.perf_counter_ns()
        reader.spans(pid, spans)
        reads.setdefault("same spans, process_vm_readv", []).append(time.perf_counter_ns() - wall)
        wall = time.perf_counter_ns()
        _read_by_proc_mem(pid, spans)
        reads.setdefault("same spans, open+pread+close /proc/PID/mem", []).append(time.perf_counter_ns() - wall)
        return request

    memory.read_request = read_request  # type: ignore[assignment]  # answer.py calls memory.read_request


def run_loop(exec_tracer: tracer.ExecTracer | None, execs: int) -> float:
    """Seconds one `sh` takes to run /bin/true `execs` times, started from the spawner thread when traced."""
    return timed_loop(exec_tracer, execs)[0]


def timed_loop(exec_tracer: tracer.ExecTracer | None, execs: int) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) of one `sh` running /bin/true `execs` times."""
    argv = ["/bin/sh", "-c", f"i=0; while [ $i -lt {execs} ]; do /bin/true; i=$((i+1)); done"]

    def start() -> Any:
        return spawn(argv, None, None, False, True, "/bin/sh")

    before = os.times()
    began = time.perf_counter()
    trace = ExecTrace(64)
    if exec_tracer is None or exec_tracer.spawner is None:
        child = start()
    else:
        with exec_tracer.lock:
            exec_tracer.lineage.register(trace, lineage.Unit())
            exec_tracer.lineage.starting = trace
        box: list[Any] = []
        exec_tracer.spawner.run(lambda: box.append(start()))
        with exec_tracer.lock:
            exec_tracer.lineage.starting = None
        child = box[0]
    assert child.stdout is not None
    child.stdout.read()
    child.wait()
    elapsed = time.perf_counter() - began
    if exec_tracer is not None and exec_tracer.spawner is not None:
        exec_tracer.finish(trace)
    after = os.times()
    return elapsed, (after.user + after.system) - (before.user + before.system)


def compare(execs: int) -> None:
    """Untraced, the Python path and the compiled answerer, interleaved in one process, best of ROUNDS."""
    os.environ[native.FORCE_PYTHON] = "python"
    python_path = tracer.ExecTracer([], 64)
    del os.environ[native.FORCE_PYTHON]
    compiled = tracer.ExecTracer([], 64)
    if not python_path.active:
        print(f"trace breakdown: the trace is {python_path.state} here: {python_path.reason}")
        return
    configurations: dict[str, tracer.ExecTracer | None] = {"untraced": None, "python path": python_path}
    if compiled.answerer is not None:
        configurations["compiled answerer"] = compiled
    else:
        print(f"  the compiled answerer is not available: {compiled.answerer_state}")
    for configuration in configurations.values():
        timed_loop(configuration, 50)  # warm: caches, the first opens
    walls: dict[str, list[float]] = {name: [] for name in configurations}
    cpus: dict[str, list[float]] = {name: [] for name in configurations}
    for _ in range(ROUNDS):
        for name, configuration in configurations.items():
            wall, cpu = timed_loop(configuration, execs)
            walls[name].append(wall)
            cpus[name].append(cpu)
    print(f"trace A/B ({execs} × /bin/true from one sh, in-process, interleaved, best of {ROUNDS}; µs per exec):")
    base_wall, base_cpu = min(walls["untraced"]), min(cpus["untraced"])
    for name in configurations:
        wall, cpu = min(walls[name]), min(cpus[name])
        print(
            f"  {name:<18} wall {wall / execs * 1e6:6.1f} (added {(wall - base_wall) / execs * 1e6:6.1f}), "
            f"this process's CPU {cpu / execs * 1e6:5.1f} (added {(cpu - base_cpu) / execs * 1e6:5.1f})"
        )
    if compiled.answerer is not None:
        share = compiled.answered_natively / max(1, compiled.traced)
        print(f"  the compiled answerer answered {share:.1%} of the traced execs itself (the rest: the Python path)")
    # With the GIL busy: the Python path over execs // 10 execs; the compiled answerer over that and over `execs`,
    # since a tree's first 64 execs (its listed entries, whose parent is read) are the Python path's there too:
    # the difference is what each later exec costs.
    few = max(1, execs // 10)
    untraced_few, untraced_many = busy_loop(None, few), busy_loop(None, execs)
    print(
        f"  with another thread running Python all along (the GIL), added per exec: python path "
        f"{(busy_loop(python_path, few) - untraced_few) / few * 1e6:.0f} µs ({few} execs)"
        + (
            f"; compiled answerer {(busy_loop(compiled, few) - untraced_few) / few * 1e6:.0f} µs ({few} execs), "
            f"{(busy_loop(compiled, execs) - untraced_many) / execs * 1e6:.0f} µs ({execs} execs)"
            if compiled.answerer is not None
            else ""
        )
    )


def busy_loop(exec_tracer: tracer.ExecTracer | None, execs: int) -> float:
    """run_loop while another thread of this process runs Python all along (as an event loop busy with other
    calls would): the service thread must take the GIL from it for every exec."""
    stop = threading.Event()

    def spin() -> None:
        count = 0
        while not stop.is_set():
            count += 1

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        return run_loop(exec_tracer, execs)
    finally:
        stop.set()
        spinner.join()


def print_breakdown(execs: int = LOOP_EXECS) -> None:
    compare(execs)
    steps, reads = Steps(), {}  # type: ignore[var-annotated]
    os.environ[native.FORCE_PYTHON] = "python"  # the steps below are the Python path's
    exec_tracer = tracer.ExecTracer([], 64)
    del os.environ[native.FORCE_PYTHON]
    if not exec_tracer.active:
        print(f"trace breakdown: the trace is {exec_tracer.state} here: {exec_tracer.reason}")
        return
    run_loop(exec_tracer, 50)  # warm: caches, the first opens
    run_loop(None, 50)
    # Interleaved, best of ROUNDS each: the load of a shared machine hits the three alike.
    untraced_runs, clean_runs, floor_runs = [], [], []
    shipped_read = tracer.read_paused
    for _ in range(ROUNDS):
        untraced_runs.append(run_loop(None, execs))
        clean_runs.append(run_loop(exec_tracer, execs))
        tracer.read_paused = lambda *args: answer.Paused(unreadable=True)  # nothing read: the round trip alone
        floor_runs.append(run_loop(exec_tracer, execs))
        tracer.read_paused = shipped_read
    untraced, clean, floor = min(untraced_runs), min(clean_runs), min(floor_runs)
    busy_execs = max(1, execs // 10)
    busy_untraced = busy_loop(None, busy_execs)
    busy_traced = busy_loop(exec_tracer, busy_execs)
    print(
        f"trace breakdown ({execs} × /bin/true from one sh, in-process, interleaved, best of {ROUNDS}): untraced "
        f"{untraced / execs * 1e6:.0f} µs per exec; added by the trace {(clean - untraced) / execs * 1e6:.0f} µs "
        f"per exec as shipped, {(floor - untraced) / execs * 1e6:.0f} µs when the service thread reads nothing "
        "(the kernel's round trip, the supervisor's wake-up from epoll_wait, NOTIF_RECV/NOTIF_SEND, attribution: "
        f"the floor of this design); with another thread running Python all along, added "
        f"{(busy_traced - busy_untraced) / busy_execs * 1e6:.0f} µs per exec ({busy_execs} execs: the GIL)"
    )
    instrument(steps, reads)
    traced = min(run_loop(exec_tracer, execs) for _ in range(ROUNDS))
    print(
        f"  instrumented run (the step timers and the side-by-side reads add to it): added "
        f"{(traced - untraced) / execs * 1e6:.0f} µs per exec; the service thread's steps:"
    )
    order = [
        "wake-up to answer, all",
        "NOTIF_RECV",
        "attribution",
        "attribution (/proc/PID/stat)",
        "program resolved",
        "NOTIF_SEND",
        "record built (batch)",
    ]
    for name in order:
        if name not in steps.wall:
            continue
        wall, cpu = steps.wall[name], steps.cpu[name]
        total_per_exec = sum(wall) / 1000 / max(1, len(steps.wall["NOTIF_RECV"]))
        print(
            f"  {name:<32} median {statistics.median(wall) / 1000:6.1f} µs wall, "
            f"{statistics.median(cpu) / 1000:6.1f} µs CPU; {len(wall)} calls, {total_per_exec:6.1f} µs per exec"
        )
    for name, samples in reads.items():
        print(f"  {name:<44} median {statistics.median(samples) / 1000:6.1f} µs")
    ready = steps.wall["wake-up to answer, all"]
    ready_cpu = steps.cpu["wake-up to answer, all"]
    print(
        f"  wake-up to answer: median {statistics.median(ready) / 1000:.1f} µs wall, "
        f"{statistics.median(ready_cpu) / 1000:.1f} µs CPU (mean {sum(ready) / len(ready) / 1000:.1f} µs wall, "
        f"{sum(ready_cpu) / len(ready) / 1000:.1f} µs CPU: preemption on a shared machine, and the answered "
        "process taking the service thread's core)"
    )


if __name__ == "__main__":
    print_breakdown(int(sys.argv[1]) if len(sys.argv) > 1 else LOOP_EXECS)
