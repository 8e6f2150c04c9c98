"""An ended unit's cgroup is a spare again (containment/cgroup.py) the moment it is given back, on the calling thread
(no wait for the filler thread, nor for the maintenance tick when a call's unit is released): the next unit takes it
without a mkdir, labelled with the new unit's name, and the filler thread has no rmdir to make; one that a kill
froze, or below which a command made a cgroup, is removed instead. Run in a subprocess started in a fresh cgroup2
subtree (as a service with a delegated cgroup), which the CgroupTree moves into its instance directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT
from tests.e2e.containment.test_containment import cgroup_subtree

SCRIPT = """
import json, os, subprocess, sys
from relay_shell.containment.cgroup import UNIT_ATTRIBUTE, CgroupTree, locate, reusable
from relay_shell.containment.units import Containment
tree = CgroupTree(locate(), "relay-shell-000000000000-spares")
tree.setup()
found = {}
try:
    tree.spare_target = 1

    def unit_that_ran(name):
        path, threads = tree.take(name)
        tree.enter(threads)
        try:
            process = subprocess.Popen(["/bin/true"])
        finally:
            tree.leave()
            os.close(threads)
        process.wait()
        return path

    first = unit_that_ran("call-1")
    found["labelled"] = os.getxattr(first, UNIT_ATTRIBUTE).decode()
    tree.discard(first)
    found["ended unit is a spare"] = [path == first for path, _ in tree.spares]
    again, threads = tree.take("call-2")
    os.close(threads)
    found["next unit takes it"] = again == first
    found["relabelled"] = os.getxattr(again, UNIT_ATTRIBUTE).decode()
    (again / "cgroup.freeze").write_bytes(b"1")  # what kill() does to the units it ends
    tree.discard(again)
    tree.tidy()
    found["frozen one removed"] = not again.exists() and all(path != again for path, _ in tree.spares)
    third = unit_that_ran("call-3")
    (third / "made-by-a-command").mkdir()
    found["with a cgroup below it reusable"] = reusable(third)
    tree.discard(third)
    tree.tidy()
    found["with a cgroup below it removed"] = not third.exists()
    # A call's unit, released once its leader was reaped: its cgroup is a spare before any tick or tidy.
    containment = Containment("cgroup", "spares", "000000000000", tree)
    tree.spare_target = 2
    unit = containment.open_unit("call", "released")
    with unit.spawning(None):
        process = subprocess.Popen(["/bin/true"])
    unit.started(process.pid)
    process.wait()
    unit.release()
    found["released unit's cgroup a spare at once"] = [path == unit.cgroup for path, _ in tree.spares]
    found["released unit no longer held"] = unit.name not in containment.units
finally:
    tree.stop_filling()
    tree.step_out()
    tree.remove(tree.directory)
print(json.dumps(found))
"""


def test_an_ended_units_cgroup_is_a_spare_again_at_once_unless_frozen_or_holding_a_cgroup(tmp_path: Path) -> None:
    subtrees = cgroup_subtree()
    subtree = next(subtrees)
    try:
        script = f'echo $$ > "{subtree}/cgroup.procs" && exec "$0" -c "$1"'
        result = subprocess.run(
            ["/bin/sh", "-c", script, sys.executable, SCRIPT],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        next(subtrees, None)  # removes the subtree, and fails if a process was left in it
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "labelled": "call-1",
        "ended unit is a spare": [True],
        "next unit takes it": True,
        "relabelled": "call-2",
        "frozen one removed": True,
        "with a cgroup below it reusable": False,
        "with a cgroup below it removed": True,
        "released unit's cgroup a spare at once": [True],
        "released unit no longer held": True,
    }
