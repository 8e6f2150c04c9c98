"""The lineage's leader table (trace/lineage.py): a tree forgotten takes its leaders with it, found through the
per-tree index (forget scanned every leader of the last 1,024 closed trees on every call), and a pidfd of a
session leader is closed when its tree goes or its pid is taken by another leader."""

from __future__ import annotations

import os
import subprocess

from relay_shell.trace.lineage import CLOSED_KEPT, Lineage, Unit
from relay_shell.trace.record import ExecTrace


def closed_tree(lineage: Lineage, pid: int) -> ExecTrace:
    tree = ExecTrace()
    lineage.register(tree, Unit())
    lineage.leader(pid, tree)
    tree.closed = True
    lineage.close(tree)
    return tree


def test_the_oldest_closed_trees_are_forgotten_with_their_leaders_only() -> None:
    lineage = Lineage()
    trees = [closed_tree(lineage, 100_000 + index) for index in range(CLOSED_KEPT + 5)]
    assert len(lineage.leaders) == CLOSED_KEPT  # five forgotten, each with its own leader
    assert all(100_000 + index not in lineage.leaders for index in range(5))
    assert lineage.leaders[100_005][1] is trees[5] and set(lineage.leaders_of) == set(trees[5:])
    assert all(lineage.leaders_of[tree] == {100_000 + index} for index, tree in enumerate(trees) if index >= 5)


def test_a_session_leaders_pidfd_is_closed_with_its_tree_and_when_its_pid_is_taken() -> None:
    lineage = Lineage()
    child = subprocess.Popen(["sleep", "30"])
    try:
        first, second = ExecTrace(), ExecTrace()
        lineage.register(first, Unit())
        lineage.register(second, Unit())
        lineage.session_leader(child.pid, 1, first)
        descriptor = lineage.leaders[child.pid][2]
        os.fstat(descriptor)  # open
        lineage.leader(child.pid, second)  # the pid now leads another tree: the old pidfd goes
        assert lineage.leaders[child.pid] == (0, second, -1) and lineage.leaders_of[first] == set()
        try:
            os.fstat(descriptor)
            raise AssertionError("the replaced leader's pidfd is still open")
        except OSError:
            pass
        lineage.forget(second)
        assert child.pid not in lineage.leaders and second not in lineage.leaders_of
        lineage.session_leader(child.pid, 1, first)
        descriptor = lineage.leaders[child.pid][2]
        lineage.forget(first)
        assert child.pid not in lineage.leaders
        try:
            os.fstat(descriptor)
            raise AssertionError("the forgotten tree's pidfd is still open")
        except OSError:
            pass
    finally:
        child.kill()
        child.wait()
