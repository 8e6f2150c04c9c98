"""Fixtures for every end-to-end area. The stdio client (`connect`) and the sshd fleet are in tests/conftest.py;
the HTTP server and client helpers in tests/e2e/http/server.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.http.server import TOKENS, HttpServer, start, stop, write_token_file


@pytest.fixture
def authed(tmp_path: Path) -> Iterator[HttpServer]:
    """An HTTP server that accepts the bearer tokens of TOKENS (alice and bob)."""
    server = start(tmp_path, token_file=str(write_token_file(tmp_path / "tokens", TOKENS)))
    yield server
    if server.process.poll() is None:
        stop(server)
