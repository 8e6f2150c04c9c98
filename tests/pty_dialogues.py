"""The PTY dialogues of the adversarial corpus (tests/data/adversarial/pty-*.jsonl, format in its README.md):
read, with their placeholders filled in. Run against the session classifier in process
(tests/unit/test_adversarial_pty.py) and end to end through a real stdio server
(tests/e2e/sessions/test_adversarial_pty.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import REPO_ROOT

CORPUS = REPO_ROOT / "tests" / "data" / "adversarial"
PLACEHOLDERS = ("marker", "case", "doomed", "pid", "repo", "tar", "text")


def dialogues() -> list[dict[str, Any]]:
    """Every dialogue case, in file order."""
    cases: list[dict[str, Any]] = []
    for path in sorted(CORPUS.glob("pty-*.jsonl")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip() and not line.lstrip().startswith("#"):
                case = json.loads(line)
                assert path.stem == f"pty-{case['class']}", f"{path.name}:{number}: class {case['class']!r}"
                cases.append(case)
    return cases


def fill(value: Any, places: dict[str, str]) -> Any:
    """`value` with every `{placeholder}` replaced, in strings inside lists and objects too."""
    if isinstance(value, str):
        for name, replacement in places.items():
            value = value.replace("{" + name + "}", replacement)
        return value
    if isinstance(value, list):
        return [fill(item, places) for item in value]
    if isinstance(value, dict):
        return {key: fill(item, places) for key, item in value.items()}
    return value


def fixed_places(case_id: str) -> dict[str, str]:
    """Paths of the right shape for the in-process run (nothing is created)."""
    root = Path("/tmp/adversarial") / case_id
    return {
        "marker": str(root / "marker"),
        "case": str(root),
        "doomed": str(root / "doomed"),
        "pid": "424242",
        "repo": "/tmp/adversarial/repo",
        "tar": "/tmp/adversarial/archive.tar",
        "text": "/tmp/adversarial/text.txt",
    }
