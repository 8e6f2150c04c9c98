"""`--before REV` (benchmarks/common.py, code_at): the relay-shell of an earlier commit, extracted from this
repository and compiled, imports its own package when a benchmark starts it, beside this checkout's."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from benchmarks.bench_startup import relay_server
from benchmarks.common import RENOVATION_BASE, code_at, this_code


def imported_package(root: Path) -> str:
    """The relay_shell a server started in `root` (as benchmarks start it: `python -m`, working directory there)
    imports."""
    probe = "import relay_shell, sys; print(relay_shell.__file__)"
    return subprocess.run(
        [sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_the_commit_before_the_renovation_runs_its_own_package_beside_this_checkout() -> None:
    with code_at(RENOVATION_BASE) as before:
        assert imported_package(before.root).startswith(str(before.root))
        # The renovation moved the settings into settings/: the extracted tree is the code before it.
        assert (before.root / "relay_shell" / "config.py").is_file()
        assert not (before.root / "relay_shell" / "settings").exists()
        assert before.cache_home != this_code().cache_home
        with tempfile.TemporaryDirectory() as audit_dir:
            server = relay_server(before, audit_dir)
            server.idle_pause = 0
            server.start()
            assert server.wall and server.rss_kib[0] > 0
    assert not before.root.exists()  # removed after the block
    assert imported_package(this_code().root).startswith(str(this_code().root))


def test_an_unknown_commit_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="cannot extract no-such-commit"), code_at("no-such-commit"):
        pass


def test_a_server_of_this_checkout_has_a_private_schema_cache() -> None:
    environment = this_code().environment(dict(os.environ))
    assert environment["XDG_CACHE_HOME"] == str(this_code().cache_home)
    assert environment["XDG_CACHE_HOME"] != os.environ.get("XDG_CACHE_HOME")
