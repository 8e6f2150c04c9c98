"""The structure targets of issue 25, measured by the script anyone can run (`python scripts/check_structure.py`):
0 import cycles, 0 imports running up a layer (the layers of docs/layout.md), every module placed in a layer, no
module over 500 lines, no function over 80 (the listed exceptions apart), no tool defined inside another function,
the runner's modules each under 300 lines."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO_ROOT


def run_check(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "scripts/check_structure.py", *arguments],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_every_structure_target_holds() -> None:
    checked = run_check("--json")
    report = json.loads(checked.stdout)
    assert report["modules"] > 100 and "shared" in report["layers"], report  # it read the tree and the layers
    broken = {name: problems for name, problems in report["checks"].items() if problems}
    assert broken == {}, json.dumps(broken, indent=2)
    assert checked.returncode == 0, checked.stderr


def test_the_printed_report_names_every_check_and_says_ok() -> None:
    checked = run_check()
    for check_name in (
        "import cycles: 0",
        "imports running up a layer: 0",
        "modules not placed in a layer: 0",
        "modules over 500 lines: 0",
        "functions over 80 lines: 0",
        "tools defined inside another function: 0",
        "runner modules of 300 lines or more: 0",
    ):
        assert check_name in checked.stdout, checked.stdout
    assert checked.stdout.rstrip().endswith("OK: all 7 checks pass"), checked.stdout
    assert checked.returncode == 0
