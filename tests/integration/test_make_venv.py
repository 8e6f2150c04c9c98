"""scripts/make-venv.sh: a venv made by another interpreter is recreated, not reused (issue 15, item 2).

`python3 -m venv .venv` over a venv of another interpreter leaves one whose `ssl` cannot import: the
Quickstart run with Debian's python3, then the test command with pyenv's, broke exactly so. Both interpreters
are real ones of this machine (testing.md: Debian's /usr/bin/python3 3.11.2 and pyenv's python3)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEBIAN_PYTHON = "/usr/bin/python3"
IDENTITY = "import sys, ssl; print(sys.base_prefix, sys.version)"


def identity(python: str) -> str:
    answer = subprocess.run([python, "-c", IDENTITY], capture_output=True, text=True)
    return answer.stdout if answer.returncode == 0 else f"unusable: {answer.stderr.strip()}"


@pytest.fixture
def other_python() -> str:
    """A real interpreter other than the one running the tests (never a pyenv shim, which may refuse to run
    outside its version's directory): Debian's first, then pyenv's installed versions."""
    candidates = [DEBIAN_PYTHON, *sorted(str(path) for path in Path.home().glob(".pyenv/versions/3.*/bin/python3"))]
    mine = identity(sys.executable)
    for candidate in candidates:
        if Path(candidate).exists() and not identity(candidate).startswith("unusable") and identity(candidate) != mine:
            return candidate
    raise AssertionError(f"this machine should have a second Python interpreter (testing.md); tried {candidates}")


def test_a_venv_of_another_interpreter_is_recreated(tmp_path: Path, other_python: str) -> None:
    venv = tmp_path / "venv"
    subprocess.run([other_python, "-m", "venv", "--without-pip", str(venv)], check=True)
    assert identity(str(venv / "bin" / "python")) == identity(other_python)

    made = subprocess.run(
        ["bash", str(ROOT / "scripts" / "make-venv.sh"), str(venv), sys.executable], capture_output=True, text=True
    )

    assert made.returncode == 0, made.stderr
    assert "recreating" in made.stderr
    # ssl imports (the identity line imports it) and the venv is the requested interpreter's.
    assert identity(str(venv / "bin" / "python")) == identity(sys.executable)


def test_a_venv_of_the_same_interpreter_is_kept(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    marker = venv / "kept"
    marker.write_text("")

    made = subprocess.run(
        ["bash", str(ROOT / "scripts" / "make-venv.sh"), str(venv), sys.executable], capture_output=True, text=True
    )

    assert made.returncode == 0, made.stderr
    assert marker.exists()
    assert made.stderr == ""
