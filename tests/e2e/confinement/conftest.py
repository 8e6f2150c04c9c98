from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.confinement.helpers import start_victim
from tests.e2e.confinement.programs import install_probes, prepare_probe_dir


@pytest.fixture(scope="module")
def probe_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`cat`, `whoami` and `uptime` that write, chmod, sudo and kill (tests/e2e/confinement/programs.py)."""
    bin_dir = tmp_path_factory.mktemp("probe-bin")
    install_probes(bin_dir)
    return bin_dir


@pytest.fixture
def probe_dir(tmp_path: Path) -> Path:
    """The files the probes try to change (programs.prepare_probe_dir)."""
    path = tmp_path / "probe"
    prepare_probe_dir(path)
    return path


@pytest.fixture
def victim() -> Iterator[int]:
    """The pid of a process no call started (`sleep 600`), ended after the test."""
    process = start_victim()
    yield process.pid
    if process.poll() is None:
        process.kill()
    process.wait()
