"""Local processes for real: process groups, kill escalation, pipes held by background children, stdin."""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import pytest

from relay_shell.containment.start import start_containment
from relay_shell.launch import Launcher, TraceOff
from relay_shell.local.process import ProcessOutcome, run_process
from tests.procs import alive

pytestmark = pytest.mark.anyio
LAUNCHER = Launcher(
    start_containment("off", "test"), TraceOff("RELAY_SHELL_EXEC_TRACE=off", 0, 64)
)  # the process group alone, untraced


async def no_progress(produced: int) -> None:
    return None


async def run(
    command: str, timeout: float = 10, stdin: bytes | None = None, budget: int = 65536, merge_stderr: bool = True
) -> ProcessOutcome:
    return await run_process(
        ["/bin/sh", "-c", command],
        tree=LAUNCHER.call_tree(None),
        cwd=None,
        env=dict(os.environ),
        stdin=stdin,
        merge_stderr=merge_stderr,
        timeout=timeout,
        budget=budget,
        kill_grace=0.5,
        progress=no_progress,
    )


async def test_exit_code_and_output() -> None:
    outcome = await run("echo hi; exit 7")
    assert outcome.exit_code == 7 and outcome.signal is None and not outcome.timed_out
    assert outcome.stdout.text == "hi\n"


async def test_last_output_before_exit_is_never_lost() -> None:
    for _ in range(20):
        outcome = await run("sleep 0.01; printf last")
        assert outcome.stdout.text == "last"


async def test_timeout_kills_descendants_that_ignore_term(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    command = f"(trap '' TERM; sleep 300) & echo $! >> {pid_file}; trap '' TERM; echo $$ >> {pid_file}; sleep 300"
    started = time.monotonic()
    outcome = await run(command, timeout=0.5)
    assert outcome.timed_out
    assert time.monotonic() - started < 5
    for pid in map(int, pid_file.read_text().split()):
        assert not alive(pid), pid


async def test_background_child_holding_pipe_returns_promptly(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    started = time.monotonic()
    outcome = await run(f"sleep 30 & echo $! > {pid_file}; echo started")
    try:
        assert outcome.stdout.text == "started\n" and outcome.exit_code == 0
        assert time.monotonic() - started < 2
    finally:
        os.kill(int(pid_file.read_text()), 9)


async def test_cancellation_kills_the_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with anyio.move_on_after(0.5):
        await run(f"sleep 300 & echo $! > {pid_file}; sleep 300", timeout=600)
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 3  # the kill is sent before run() returns; delivery takes a moment
    while alive(pid) and time.monotonic() < deadline:
        await anyio.sleep(0.02)
    assert not alive(pid)


async def test_stdin_is_delivered_then_eof() -> None:
    payload = os.urandom(3 * 1024 * 1024)  # larger than any pipe buffer
    outcome = await run("wc -c", stdin=payload)
    assert outcome.stdout.text.strip() == str(len(payload))


async def test_stdin_ignored_by_command_does_not_hang() -> None:
    outcome = await run("echo no-read", stdin=b"x" * (4 * 1024 * 1024))
    assert outcome.stdout.text == "no-read\n"


async def test_separate_stderr() -> None:
    outcome = await run("echo out; echo err >&2", merge_stderr=False)
    assert outcome.stdout.text == "out\n"
    assert outcome.stderr is not None and outcome.stderr.text == "err\n"


async def test_large_output_is_bounded_and_digested() -> None:
    outcome = await run("head -c 50000000 /dev/zero", budget=1024)
    assert outcome.stdout.produced_bytes == 50_000_000
    assert outcome.stdout.truncated
    import hashlib

    assert outcome.stdout.sha256 == hashlib.sha256(b"\0" * 50_000_000).hexdigest()


async def test_missing_program_raises_oserror() -> None:
    with pytest.raises(FileNotFoundError):
        await run_process(
            ["/no/such/program"],
            tree=LAUNCHER.call_tree(None),
            cwd=None,
            env={},
            stdin=None,
            merge_stderr=True,
            timeout=5,
            budget=1024,
            kill_grace=0.5,
            progress=no_progress,
        )
