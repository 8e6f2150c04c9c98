"""The tracer's fallback when the service thread cannot watch a new tree's listener (epoll.register fails): the
listener is closed and the tree spawned untraced by the event loop's thread, which carries no filter (a thread
started from the filtered spawner thread would inherit the filter and its first exec would wait for ever).

MOCK, and the only one here: epoll.register failing for one listener (ENOSPC, fs.epoll.max_user_watches reached)
cannot be produced for real on this machine without exhausting the watches of every process of the user, the
other sessions' included. The spawn, the filter, the listener and the program are real. The check runs in a child
interpreter so that the hang it guards against fails the test (a timeout) instead of freezing pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROGRAM = r"""
import asyncio, errno
from relay_shell.containment.start import start_containment
from relay_shell.launch import Launcher
from relay_shell.local.process import run_process
from relay_shell.trace.tracer import ExecTracer

class RegisterFails:
    '''MOCK: the real epoll, except that registering a listener fails.'''
    def __init__(self, real):
        self.real = real
    def register(self, fd, mask):
        raise OSError(errno.ENOSPC, "mocked: fs.epoll.max_user_watches reached")
    def __getattr__(self, name):
        return getattr(self.real, name)

async def main():
    tracer = ExecTracer([], 64)
    assert tracer.state == "on", tracer.reason
    tracer.epoll = RegisterFails(tracer.epoll)
    tree = Launcher(start_containment("off", "test"), tracer).call_tree(None)
    async def progress(produced):
        pass
    outcome = await run_process(
        ["/bin/sh", "-c", "grep Seccomp: /proc/self/status; /bin/echo untraced-ran"], tree=tree, cwd=None,
        env=None, stdin=None, merge_stderr=True, timeout=10, budget=65536, kill_grace=1.0, progress=progress,
    )
    print(outcome.exit_code, repr(outcome.stdout.text), tree.trace.execs.state, tracer.status()["untraced_trees"])

asyncio.run(main())
"""


def test_an_unwatchable_listener_spawns_untraced_from_the_loop_thread(tmp_path: Path) -> None:
    script = tmp_path / "fallback.py"
    script.write_text(PROGRAM)
    try:
        ran = subprocess.run(
            [sys.executable, str(script)], env=dict(os.environ), capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("the fallback spawn hung (its first exec waited for an answer that never came)") from None
    assert ran.returncode == 0, ran.stderr
    assert "untraced-ran" in ran.stdout and "Seccomp:\\t0" in ran.stdout, ran.stdout
    assert "untraced: the listener could not be watched 1" in ran.stdout, ran.stdout
