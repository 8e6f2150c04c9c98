from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.confinement.programs import install_probes


@pytest.fixture(scope="module")
def probe_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`cat`, `whoami` and `uptime` that write, chmod, sudo and kill (tests/e2e/confinement/programs.py)."""
    bin_dir = tmp_path_factory.mktemp("probe-bin")
    install_probes(bin_dir)
    return bin_dir
