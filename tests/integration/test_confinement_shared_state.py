"""confine/ against the real kernel, at each Landlock ABI (the rulesets restricted to a lower ABI's rights): what a
readonly tree may not change or squat that has no path (adr/0024, Round 4; tests/e2e/confinement/
shared_state_probe.py). The syscall filter refuses keyrings, leases, exclusive flocks, listening and binding an
abstract name at every ABI, and the loop driver's ioctls as the floor below ABI 5; from ABI 5 Landlock refuses
every ioctl on a device the tree opens but /dev/null and its terminal (the loop driver's included: EACCES)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay_shell.confine import landlock
from relay_shell.confine.confinement import Confinement
from relay_shell.metrics import Metrics
from tests.e2e.confinement import shared_state_probe

ABI = landlock.abi_version()


@pytest.fixture
def loop_index() -> Iterator[int]:
    with shared_state_probe.free_loop_index() as index:
        yield index


@pytest.mark.parametrize("abi", range(1, ABI + 1))
def test_shared_state_at_each_abi(abi: int, tmp_path: Path, loop_index: int) -> None:
    shared_state_probe.install(tmp_path)
    (tmp_path / "locked").write_text("locked\n")
    env = dict(os.environ, SHARED_DIR=str(tmp_path), SHARED_LOOP=str(loop_index), SHARED_UDP_PORT="0")
    env["SHARED_ABSTRACT"] = f"relay-squat-{uuid.uuid4().hex[:18]}"
    confinement = Confinement(abi, "auto", Metrics(enabled=False))
    child = confinement.run_confined(
        lambda: subprocess.Popen([sys.executable, str(tmp_path / "nproc")], stdout=subprocess.PIPE, env=env)
    )
    outcome = json.loads(child.communicate(timeout=60)[0])
    for name in shared_state_probe.REFUSED:
        assert outcome[name] == "EPERM", (name, outcome)  # the filter, at every ABI
    for name in shared_state_probe.ALLOWED:
        assert outcome[name] == "ok", (name, outcome)
    assert outcome["null_ioctl"] == "ENOTTY", outcome
    assert outcome["zero_ioctl"] == ("EACCES" if abi >= 5 else "ENOTTY"), outcome
    if shared_state_probe.LOOP_ATTEMPT:  # Landlock from ABI 5, the filter's floor below
        assert outcome["loop_ctl_add"] == ("EACCES" if abi >= 5 else "EPERM"), outcome
        assert not os.path.exists(f"/sys/block/loop{loop_index}")
