"""The exec trace's compiled answerer is optional at install (adr/0032): without a working C compiler the package
builds all the same, without the library, and the trace answers every exec from Python; a library built from
another version of answerer.c is not used. Real builds with pip (CC=/bin/false is a compiler that fails, as a
machine without one makes setuptools fail)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from relay_shell.trace import native

ROOT = Path(__file__).resolve().parents[2]


def test_without_a_compiler_the_package_builds_without_the_library(tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".venv*", ".git", "*.so", "build", "*.egg-info", ".*"))
    env = {**os.environ, "CC": "/bin/false"}
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "wheel"), str(source)],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = (tmp_path / "wheel").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "relay_shell/trace/native.py" in names
    assert not [name for name in names if "_answerer" in name], names


def test_a_library_of_another_version_is_not_used(tmp_path: Path) -> None:
    """answerer.c with another ABI number, built here: load() refuses it (a stale editable build)."""
    stale = tmp_path / "answerer.c"
    text = (ROOT / "relay_shell/trace/answerer.c").read_text()
    stale.write_text(text.replace(f"#define ANSWERER_ABI {native.ABI}", f"#define ANSWERER_ABI {native.ABI + 100}"))
    library = tmp_path / "stale.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(library), str(stale)], check=True)
    original = native._library_path
    native._library_path = lambda: library  # where the stale build is: the library itself is real
    try:
        loaded, why = native.load()
    finally:
        native._library_path = original
    assert loaded is None and "another version" in why, why
    current = native.load()
    assert current[0] is not None, current[1]
