"""The exec trace's compiled answerer (adr/0032) against the Python path, on real processes under the real filter:
two tracers in this process, one forced to the Python path (RELAY_EXEC_TRACE_ANSWERER=python), the same trees run
under each. What the answerer answers must be recorded exactly as the Python path records it (count, digest over
every path, argv and outcome), attributed to its own tree while others run, never for a closed tree (late execs),
and never with RELAY_SHELL_EXEC_DENY set (every answer then depends on what was read: the Python path decides).
A test that fails without the answerer: the answerer must have answered most execs itself.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay_shell.settings.patterns import compile_re2
from relay_shell.trace import lineage, native, tracer
from relay_shell.trace.record import ExecTrace
from relay_shell.trace.spawn import spawn

# Arguments the answerer reads itself (short, few), and ones it hands over (over 256 bytes; over 16 of them).
SCRIPT = (
    'i=0; while [ $i -lt {n} ]; do /bin/echo "$i" two "thr ee"; /bin/true; i=$((i+1)); done; '
    "/bin/echo {long}; /bin/echo 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; /usr/bin/env true; "
    "nosuchprogram 2>/dev/null; exit 0"
)


def make(deny: list[str] | None = None, force_python: bool = False) -> tracer.ExecTracer:
    """A tracer with the compiled answerer, or forced to the Python path, whatever the suite's environment says
    (the suite also runs with RELAY_EXEC_TRACE_ANSWERER=python)."""
    outside = os.environ.pop(native.FORCE_PYTHON, None)
    if force_python:
        os.environ[native.FORCE_PYTHON] = "python"
    try:
        made = tracer.ExecTracer(compile_re2(deny or []), 64)
    finally:
        os.environ.pop(native.FORCE_PYTHON, None)
        if outside is not None:
            os.environ[native.FORCE_PYTHON] = outside
    if not made.active:
        raise AssertionError(f"the trace is {made.state} here: {made.reason}")
    return made


@pytest.fixture(scope="module")
def tracers() -> Iterator[tuple[tracer.ExecTracer, tracer.ExecTracer]]:
    compiled = make()
    if compiled.answerer is None:
        raise AssertionError(f"the compiled answerer is not built here ({compiled.answerer_state}): pip install -e .")
    yield compiled, make(force_python=True)


SPAWNING = threading.Lock()  # one tree started at a time, as the event loop hands them to the spawner thread


def start_tree(exec_tracer: tracer.ExecTracer, script: str) -> tuple[ExecTrace, Any]:
    with SPAWNING:
        return _start_tree(exec_tracer, script)


def _start_tree(exec_tracer: tracer.ExecTracer, script: str) -> tuple[ExecTrace, Any]:
    trace = ExecTrace(64)
    with exec_tracer.lock:
        exec_tracer.lineage.register(trace, lineage.Unit())
        exec_tracer.lineage.starting = trace
    box: list[Any] = []
    assert exec_tracer.spawner is not None
    argv = ["/bin/sh", "-c", script]
    exec_tracer.spawner.run(lambda: box.append(spawn(argv, None, None, False, True, "/bin/sh")))
    with exec_tracer.lock:
        exec_tracer.lineage.starting = None
    return trace, box[0]


def run_tree(exec_tracer: tracer.ExecTracer, script: str) -> tuple[dict[str, Any], bytes]:
    trace, child = start_tree(exec_tracer, script)
    output = child.stdout.read()
    child.wait()
    return exec_tracer.finish(trace), output


def test_the_answerer_records_what_the_python_path_records(
    tracers: tuple[tracer.ExecTracer, tracer.ExecTracer],
) -> None:
    compiled, python_path = tracers
    script = SCRIPT.format(n=300, long="x" * 600)
    before = compiled.answered_natively
    got, output = run_tree(compiled, script)
    expected, expected_output = run_tree(python_path, script)
    assert output == expected_output
    # 300 × (echo, true), the long echo, the 20-argument echo, env and its true; the miss is not_found. (sh, the
    # server's own first exec, is recorded by trace/tree.py before the spawn: not here.)
    assert got["count"] == expected["count"] == 600 + 4, (got, expected)
    assert got["sha256"] == expected["sha256"]
    assert got["not_found"] == expected["not_found"] >= 1
    assert without_times_and_pids(got["entries"]) == without_times_and_pids(expected["entries"])
    # A listed entry names its parent: the answerer leaves a tree's execs to Python until its entries are full.
    assert len(got["entries"]) == 64 and all(entry["ppid"] > 1 for entry in got["entries"]), got["entries"]
    answered = compiled.answered_natively - before
    # Left to Python: a path the first time in each second of the cache, the long and the many arguments.
    assert answered >= got["count"] - 60, f"the compiled answerer answered {answered} of {got['count']} execs"
    assert python_path.answered_natively == 0


def without_times_and_pids(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{key: value for key, value in entry.items() if key not in ("pid", "ppid", "t_ms")} for entry in entries]


def test_each_tree_gets_its_own_execs_while_others_run(tracers: tuple[tracer.ExecTracer, tracer.ExecTracer]) -> None:
    compiled, _ = tracers
    results: dict[int, dict[str, Any]] = {}

    def one(count: int) -> None:
        results[count] = run_tree(compiled, f"for i in $(seq {count}); do /bin/true; done")[0]

    threads = [threading.Thread(target=one, args=(count,)) for count in (150, 250, 350)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for count, record in results.items():
        assert record["count"] == count + 1, (count, record["count"])  # seq and the trues


def test_execs_after_the_record_are_late_not_in_it(tracers: tuple[tracer.ExecTracer, tracer.ExecTracer]) -> None:
    """A background job's execs after its call ended: the closed tree's leader is no longer trusted, and the
    answerer hands them to the Python path, which records them as late."""
    compiled, _ = tracers
    late_before = compiled.late
    background = "(for i in $(seq 120); do /bin/true; done; sleep 0.5; for i in $(seq 80); do /bin/true; done)"
    trace, child = start_tree(compiled, f"{background} >/dev/null 2>&1 & /bin/true")
    child.wait()
    record = compiled.finish(trace)
    deadline = time.monotonic() + 30
    while compiled.late - late_before + record["count"] < 1 + 120 + 1 + 1 + 80 + 1:
        assert time.monotonic() < deadline, (record["count"], compiled.late - late_before)
        time.sleep(0.1)
        with compiled.lock:
            compiled._settle()
    assert compiled.late - late_before >= 80  # at least everything after the sleep
    # Every exec once: in the record or late, none in both.
    assert compiled.late - late_before + record["count"] == 1 + 120 + 1 + 1 + 80 + 1


def test_with_exec_deny_the_python_path_decides_every_exec() -> None:
    denying = make(deny=[r"(^|/)false( |$)"])
    try:
        record, _ = run_tree(denying, "for i in $(seq 120); do /bin/true; done; /bin/false; echo $? ")
        assert record["count"] == 122 and record["denied"] == 1, record
        assert denying.answered_natively == 0
    finally:
        if denying.spawner is not None:
            denying.spawner.close()


def test_the_switch_forces_the_python_path() -> None:
    forced = make(force_python=True)
    try:
        assert forced.answerer is None and forced.answerer_state == f"{native.FORCE_PYTHON}=python"
    finally:
        if forced.spawner is not None:
            forced.spawner.close()


@pytest.mark.parametrize("force_python", [False, True])
def test_the_service_thread_ends_when_nothing_holds_the_filter(force_python: bool) -> None:
    """Once the spawner thread ends (the server stops), no task holds the filter and the listener hangs up: the
    service thread must end (state `unavailable`), not wait on a listener that wakes it at once for ever (before,
    both paths spun at 100% of a core: epoll kept reporting the hang-up, NOTIF_RECV kept saying ENOENT)."""
    closing = make(force_python=force_python)
    assert closing.spawner is not None
    closing.spawner.close()
    deadline = time.monotonic() + 5
    while closing.state != "unavailable" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert closing.state == "unavailable", closing.reason
    assert "EPIPE" in closing.reason or "Broken pipe" in closing.reason or "filter" in closing.reason, closing.reason


def test_the_answerer_reads_the_parents_of_listed_execs_only(
    tracers: tuple[tracer.ExecTracer, tracer.ExecTracer],
) -> None:
    """A listed entry names its parent, read from /proc/PID/stat while the process waits (the costliest read of an
    exec: a new process's /proc entry is made for it). The answerer counts the tree's entries down itself and stops
    reading once the record lists no more, without waiting for Python's next batch (adr/0032 Round 3); before, it
    read the parent of every exec until Python had recorded a batch, i.e. of each of a call's first 1,024 execs."""
    compiled, _ = tracers
    assert compiled.answerer is not None
    read_before = compiled.answerer.parents_read()
    answered_before = compiled.answered_natively
    record, _ = run_tree(compiled, "for i in $(seq 600); do /bin/true; done")
    read = compiled.answerer.parents_read() - read_before
    assert record["count"] == 601 and len(record["entries"]) == 64
    assert all(entry["ppid"] > 1 for entry in record["entries"]), record["entries"]
    assert compiled.answered_natively - answered_before >= 590
    # 64 entries; the execs the Python path answered meanwhile (a path's first in each second) are listed without
    # the answerer's count knowing, so it may read a few more: never hundreds.
    assert 32 <= read <= 64 + 8, f"the answerer read {read} parents for 64 listed entries of 601 execs"


def test_misses_do_not_use_up_the_listing(tracers: tuple[tracer.ExecTracer, tracer.ExecTracer]) -> None:
    """A miss (ENOENT: a PATH search, a typo) is counted, never listed: the answerer must not count it against the
    entries left, or the entries listed after many misses would have no parent."""
    compiled, python_path = tracers
    misses = "for i in $(seq 150); do /nonexistent/program 2>/dev/null; done"
    script = f"{misses}; for i in $(seq 100); do /bin/true; done"  # two seq, 100 true
    got, _ = run_tree(compiled, script)
    expected, _ = run_tree(python_path, script)
    assert got["not_found"] == expected["not_found"] == 150
    assert got["count"] == expected["count"] == 102 and got["sha256"] == expected["sha256"]
    assert len(got["entries"]) == 64 and all(entry["ppid"] > 1 for entry in got["entries"]), got["entries"]


# A traced python that execs /bin/echo from forked children, its path and arguments placed in memory it mapped: in
# the path's page, at that page's very end, across it (not ended within the page: the Python path reads it), in
# another page. The answerer reads the path's whole page and takes the arguments found there from it (adr/0032
# Round 3): each must be recorded as the Python path records it.
PLACED = r"""
import ctypes, mmap, os
libc = ctypes.CDLL(None, use_errno=True)
PAGE = mmap.PAGESIZE
memory = mmap.mmap(-1, 3 * PAGE)
base = ctypes.addressof(ctypes.c_char.from_buffer(memory))
def put(offset, text):
    memory[offset:offset + len(text) + 1] = text + b"\0"
    return base + offset
def run(path, args):
    array = (ctypes.c_void_p * (len(args) + 2))(path, *args, None)
    pid = os.fork()
    if pid == 0:
        libc.execve(ctypes.c_void_p(path), array, None)
        os._exit(127)
    os.waitpid(pid, 0)
for round_ in range(40):
    path = put(100, b"/bin/echo")
    in_page = put(300, b"in-the-path-page-%d" % round_)
    page_end = put(PAGE - 5, b"endz")  # its NUL is the last byte of the page
    other = put(2 * PAGE + 50, b"another-page")
    run(path, [path, in_page, page_end, other])
    across = put(PAGE - 3, b"across-the-page")  # its first span ends unterminated
    run(path, [path, in_page, across])
    memory[PAGE - 3:PAGE + 16] = bytes(19)
"""


def test_arguments_in_the_paths_page_are_read_as_alone(tracers: tuple[tracer.ExecTracer, tracer.ExecTracer]) -> None:
    compiled, python_path = tracers
    script = f"exec /usr/bin/python3 -c '{PLACED}'"
    answered_before = compiled.answered_natively
    got, output = run_tree(compiled, script)
    expected, expected_output = run_tree(python_path, script)
    assert output == expected_output and b"in-the-path-page-39 endz another-page" in output, output[-300:]
    assert b"in-the-path-page-0 across-the-page" in output
    assert got["count"] == expected["count"] == 81 and got["sha256"] == expected["sha256"], (got, expected)
    assert without_times_and_pids(got["entries"]) == without_times_and_pids(expected["entries"])
    assert compiled.answered_natively - answered_before >= 30  # the first kind (the second is the Python path's)


def test_a_window_opened_after_the_entries_are_full_names_its_parents(
    tracers: tuple[tracer.ExecTracer, tracer.ExecTracer], tmp_path: Path
) -> None:
    """A session's trace lists its first 64 execs; a session_send's window opened later lists its own, each with its
    parent: opening the window gives the answerer the window's count (before it counted the tree's down to 0)."""
    compiled, _ = tracers
    go = tmp_path / "go"
    os.mkfifo(go)
    # The window's execs: a path the answerer knows (within the cache's second), none for the Python path, whose
    # batch would tell the answerer anyway. The tree waits for the window in `read`, a builtin (no exec).
    later = "i=0; while [ $i -lt 30 ]; do /bin/true; i=$((i+1)); done"
    trace, child = start_tree(compiled, f"for i in $(seq 100); do /bin/true; done; read x < {go}; {later}")
    deadline = time.monotonic() + 20
    while True:  # seq and 100 × true answered
        with compiled.lock:
            compiled._settle()
            if trace.count >= 101:
                break
        assert time.monotonic() < deadline, trace.count
        time.sleep(0.02)
    assert trace.count == 101 and not trace.wants_entry()
    window = ExecTrace(64)
    compiled.open_window(trace, window)
    go.write_text("go\n")
    child.stdout.read()
    child.wait()
    listed = compiled.detach(trace, window)
    compiled.finish(trace)
    assert listed["count"] == 30, listed
    assert len(listed["entries"]) == 30 and all(entry["ppid"] > 1 for entry in listed["entries"]), listed["entries"]


@pytest.mark.parametrize("path", ["compiled", "python"])
def test_a_program_after_the_entries_are_full_is_named_on_both_paths(
    tracers: tuple[tracer.ExecTracer, tracer.ExecTracer], path: str
) -> None:
    """Attack 3, T1: decoys fill the entries; the program run after them is named in later_programs, whether the
    compiled answerer or Python answered its exec."""
    exec_tracer = tracers[0] if path == "compiled" else tracers[1]
    got, _ = run_tree(exec_tracer, "for i in $(seq 100); do /bin/true; done; /usr/bin/whoami >/dev/null")
    assert len(got["entries"]) == 64
    later = [item["program"] for item in got.get("later_programs", [])]
    assert any(name.endswith("/whoami") for name in later), got.get("later_programs")
