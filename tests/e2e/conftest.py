"""Fixtures for every end-to-end area. The stdio client (`connect`) and the sshd fleet are in tests/conftest.py;
the HTTP server and client helpers in tests/e2e/http/server.py. `chattr` makes a file immutable or append-only
(the audit log, to fail it for real while serving)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.http.server import TOKENS, HttpServer, start, stop, write_token_file


@pytest.fixture
def authed(tmp_path: Path) -> Iterator[HttpServer]:
    """An HTTP server that accepts the bearer tokens of TOKENS (alice and bob)."""
    server = start(tmp_path, token_file=str(write_token_file(tmp_path / "tokens", TOKENS)))
    yield server
    if server.process.poll() is None:
        stop(server)


@pytest.fixture
def chattr() -> Iterator[Any]:
    """`chattr +FLAG PATH` for the test (i: immutable, a: append-only), undone whatever happens."""
    made: list[tuple[str, Path]] = []

    def set_flag(flag: str, path: Path) -> None:
        made.append((flag, path))
        subprocess.run(["chattr", f"+{flag}", str(path)], check=True)

    yield set_flag
    for flag, path in made:
        subprocess.run(["chattr", f"-{flag}", str(path)], check=False)
