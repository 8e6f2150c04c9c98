"""run_all's table (benchmarks/run_all.py, benchmarks/common.py): every row of issue 27's table is printed, a row no
benchmark returned as missed with the benchmark that should have measured it; a ratio row's verdict and text."""

from __future__ import annotations

import pytest

from benchmarks.common import ISSUE_27_ROWS, REPL_BACK_TO_BACK, STARTUP, Row, print_table, ratio_row
from benchmarks.run_all import issue_27_table


def test_every_row_of_issue_27_is_listed_and_one_not_returned_is_missed() -> None:
    measured = {
        "bench_startup": [ratio_row(STARTUP, 1.05, 1.10), Row("something else", "1", "1", True)],
        "bench_session_repl": [],  # ran, but returned no row of that name
    }
    table = issue_27_table(measured)
    assert [row.name for row in table] == list(ISSUE_27_ROWS)
    by_name = {row.name: row for row in table}
    assert by_name[STARTUP].passed and by_name[STARTUP].value == "1.050×"
    assert not by_name[REPL_BACK_TO_BACK].passed
    assert by_name[REPL_BACK_TO_BACK].value == "not measured"
    assert "bench_session_repl gave no such row" in by_name[REPL_BACK_TO_BACK].target
    not_run = [row for row in table if "not run" in row.target]
    assert not_run and all(not row.passed for row in not_run)


@pytest.mark.parametrize(
    ("ratio", "limit", "higher", "passed", "target"),
    [
        (1.10, 1.10, False, True, "≤ 1.10×"),
        (1.1001, 1.10, False, False, "≤ 1.10×"),
        (0.90, 0.90, True, True, "≥ 0.90×"),
        (0.899, 0.90, True, False, "≥ 0.90×"),
    ],
)
def test_a_ratio_row_is_judged_against_its_limit(
    ratio: float, limit: float, higher: bool, passed: bool, target: str
) -> None:
    row = ratio_row("r", ratio, limit, higher_is_better=higher)
    assert (row.passed, row.target) == (passed, target)


def test_the_table_says_pass_or_miss_for_each_row(capsys: pytest.CaptureFixture[str]) -> None:
    print_table([Row("kept", "1.00×", "≤ 1.10×", True), Row("missed", "2.00×", "≤ 1.10×", False)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["row", "value", "target", "verdict"]
    assert lines[1].startswith("kept") and lines[1].endswith("PASS")
    assert lines[2].startswith("missed") and lines[2].endswith("MISS")
