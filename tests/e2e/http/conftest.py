"""Fixtures of the HTTP tests (`authed`, a server with bearer tokens, is in tests/e2e/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.http.oauth import start_oauth
from tests.e2e.http.server import HttpServer, stop


@pytest.fixture
def server(tmp_path: Path) -> Iterator[HttpServer]:
    """An HTTP server with OAuth (its state in tmp_path/oauth) and the bearer tokens of TOKENS."""
    started = start_oauth(tmp_path)
    yield started
    if started.process.poll() is None:
        stop(started)
