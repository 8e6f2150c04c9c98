"""The tracer's fallbacks when its one listener cannot be served (adr/0027): the trace is `unavailable`, and every
tree is spawned untraced by the event loop's thread, which carries no filter (the spawner thread carries it: a tree
it started would wait for ever for answers nobody gives).

- at startup, epoll cannot watch the listener: the tracer says unavailable and why, the spawner thread (and with
  it the filter) ends, the call runs untraced;
- later, the service thread fails reading a notification: the listener is closed (the execs of trees already
  traced fail with ENOSYS instead of waiting), the trace turns unavailable, the next call runs untraced; both when
  the tree's first process is spawned from Python and when the native spawner spawns it (adr/0036: its first exec
  is answered by the compiled answerer, so the failure is met there while that exec waits).

MOCK, and the only ones here: epoll.register failing (ENOSPC, fs.epoll.max_user_watches reached) and NOTIF_RECV
(or the compiled answerer's hand-over of what it received)
failing cannot be produced for real on this machine without exhausting the watches of every process of the user
or breaking the kernel's seccomp. The spawn, the filter, the listener and the programs are real. Each check runs in
a child interpreter so that the hang it guards against fails the test (a timeout) instead of freezing pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

COMMON = r"""
import asyncio, errno, select
from relay_shell.containment.start import start_containment
from relay_shell.launch import Launcher
from relay_shell.local.process import run_process
from relay_shell.trace import native, seccomp
from relay_shell.trace.tracer import ExecTracer

async def run(launcher, command="grep Seccomp: /proc/self/status; /bin/echo ran"):
    tree = launcher.call_tree(None)
    async def progress(produced):
        pass
    outcome = await run_process(
        ["/bin/sh", "-c", command], tree=tree, cwd=None,
        env=None, stdin=None, merge_stderr=True, timeout=10, budget=65536, kill_grace=1.0, progress=progress,
    )
    return outcome.exit_code, outcome.stdout.text, type(tree.trace).__name__
"""

AT_STARTUP = (
    COMMON
    + r"""
class RegisterFails:
    '''MOCK: the real epoll, except that watching the listener fails.'''
    def __init__(self):
        self.real = real_epoll()
    def register(self, fd, mask):
        raise OSError(errno.ENOSPC, "mocked: fs.epoll.max_user_watches reached")
    def __getattr__(self, name):
        return getattr(self.real, name)

real_epoll = select.epoll
select.epoll = RegisterFails

async def main():
    tracer = ExecTracer([], 64)
    print(tracer.state, "|", tracer.reason)
    print(await run(Launcher(start_containment("off", "test"), tracer)))

asyncio.run(main())
"""
)

LATER = (
    COMMON
    + r"""
async def main():
    tracer = ExecTracer([], 64)
    assert tracer.state == "on", tracer.reason
    tracer.native_spawns = False  # the Python spawn path (the native spawner's: NATIVE below)
    launcher = Launcher(start_containment("off", "test"), tracer)
    print(await run(launcher))
    def broken(self):
        '''MOCK: NOTIF_RECV fails as on a listener the kernel no longer serves.'''
        raise OSError(errno.EBADF, "mocked: the listener cannot be read")
    seccomp.Notifications.receive = broken
    # With the compiled answerer (adr/0032) the notification is received in C and handed over: its hand-over fails
    # the same way (the tree's first exec is always handed over).
    native.Answerer.received = broken
    print(await run(launcher))  # its first exec meets the broken service thread: ENOSYS, then run untraced
    await asyncio.sleep(0.2)
    print(tracer.state, "|", tracer.reason)
    print(await run(launcher))

asyncio.run(main())
"""
)


NATIVE = (
    COMMON
    + r"""
import threading, time
from relay_shell.trace.spawn import spawn

async def main():
    tracer = ExecTracer([], 64)
    assert tracer.state == "on" and tracer.native_spawns, (tracer.reason, tracer.answerer_state)
    launcher = Launcher(start_containment("off", "test"), tracer)
    print(await run(launcher))
    entered = threading.Event()
    unattributed = tracer.unattributed
    real_wait = native.Answerer.wait
    def broken(self, timeout):
        '''MOCK: once the exec of no tree below was recorded, the service thread fails as on a listener the kernel
        no longer serves, when the next tree's first exec waits for it (nothing answers that exec meanwhile).'''
        if tracer.unattributed == unattributed:
            return real_wait(self, timeout)
        entered.set()
        while tracer.lineage.native_first is None:
            time.sleep(0.001)
        time.sleep(0.2)
        raise OSError(errno.EBADF, "mocked: the listener cannot be read")
    native.Answerer.wait = broken
    # An exec of no tree is handed to Python: the service thread leaves the answerer's wait and meets the mock.
    done = []
    tracer.spawner.run(lambda: done.append(spawn(["/bin/true"], None, None, False, True, "/bin/true")))
    done[0].wait(10)
    assert entered.wait(10)
    print(await run(launcher))  # spawned natively; its first exec meets the failing service thread: ENOSYS, untraced
    print(tracer.state, "|", tracer.reason)
    print(await run(launcher))

asyncio.run(main())
"""
)


def run_child(tmp_path: Path, program: str, env: dict[str, str] | None = None) -> list[str]:
    script = tmp_path / "fallback.py"
    script.write_text(program)
    try:
        ran = subprocess.run(
            [sys.executable, str(script)], env=env or dict(os.environ), capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("a spawn hung (its exec waited for an answer that never came)") from None
    assert ran.returncode == 0, ran.stderr
    return ran.stdout.splitlines()


def test_a_listener_epoll_cannot_watch_makes_the_trace_unavailable(tmp_path: Path) -> None:
    state, outcome = run_child(tmp_path, AT_STARTUP)
    assert state.startswith("unavailable | ") and "max_user_watches" in state, state
    assert outcome == "(0, 'Seccomp:\\t0\\nran\\n', 'Untraced')", outcome


def test_a_failing_service_thread_leaves_no_tree_waiting_and_later_calls_untraced(tmp_path: Path) -> None:
    traced, failed, state, untraced = run_child(tmp_path, LATER)
    assert traced == "(0, 'Seccomp:\\t2\\nran\\n', 'TracedTree')", traced
    # The call whose first exec met the failure: refused with ENOSYS by the kernel, then started untraced.
    assert failed == "(0, 'Seccomp:\\t0\\nran\\n', 'TracedTree')", failed
    assert state.startswith("unavailable | the exec tracer stopped (OSError"), state
    assert untraced == "(0, 'Seccomp:\\t0\\nran\\n', 'Untraced')", untraced


def test_a_failing_service_thread_fails_a_native_spawn_with_enosys_and_it_runs_untraced(tmp_path: Path) -> None:
    """The native spawner (adr/0036), whatever the suite's RELAY_EXEC_TRACE_ANSWERER says: its child's first exec
    waits for an answer from a service thread that fails meanwhile; posix_spawn reports ENOSYS, the call runs
    untraced, later calls too."""
    env = {name: value for name, value in os.environ.items() if name != "RELAY_EXEC_TRACE_ANSWERER"}
    traced, failed, state, untraced = run_child(tmp_path, NATIVE, env)
    assert traced == "(0, 'Seccomp:\\t2\\nran\\n', 'TracedTree')", traced
    assert failed == "(0, 'Seccomp:\\t0\\nran\\n', 'TracedTree')", failed
    assert state.startswith("unavailable | the exec tracer stopped (OSError"), state
    assert untraced == "(0, 'Seccomp:\\t0\\nran\\n', 'Untraced')", untraced
