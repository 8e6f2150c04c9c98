"""Fixtures of the containment tests: the containment each test runs under (`mode`, both by default), the
cgroup2 subtree a cgroup-mode server starts in, and a unique workload token whose processes are ended after
the test whatever happened."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.containment.test_containment import MODES, cgroup_subtree, end_strays, new_token


@pytest.fixture(name="cgroup_parent")
def cgroup_parent_fixture() -> Iterator[Path]:
    yield from cgroup_subtree()


@pytest.fixture(name="mode", params=MODES)
def mode_fixture(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(name="cgroup")
def cgroup_fixture(mode: str, request: pytest.FixtureRequest) -> Path | None:
    """The cgroup subtree the server starts in, for the cgroup mode."""
    return request.getfixturevalue("cgroup_parent") if mode == "cgroup" else None


@pytest.fixture(name="token")
def token_fixture() -> Iterator[str]:
    value = new_token()
    yield value
    end_strays(value)
