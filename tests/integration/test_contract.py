"""The contract in docs/ against the code: the generated sections (tools and their arguments, result fields,
prompts, resources from a running server's lists; settings from the Settings model; metrics from the registry)
are what `python -m scripts.contract` makes of the code now, and the record tools the code writes are exactly the
ones docs/contract.md lists. A tool, argument, setting, metric or record tool on one side only fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts import contract
from tests.conftest import REPO_ROOT


@pytest.fixture(scope="module")
def from_the_code() -> dict[Path, str]:
    return contract.regenerated(REPO_ROOT)  # starts a relay-shell over stdio once for the module


def test_docs_are_what_the_code_gives(from_the_code: dict[Path, str]) -> None:
    problems = contract.compare(from_the_code, REPO_ROOT) + contract.record_tool_differences(REPO_ROOT)
    assert problems == [], "\n\n".join(problems) + "\n\nrun: python -m scripts.contract, and review the diff"


def test_the_command_line_check_agrees() -> None:
    assert contract.main(["--check"]) == 0


def test_a_tool_a_setting_or_a_metric_missing_from_the_docs_is_found(
    from_the_code: dict[Path, str], tmp_path: Path
) -> None:
    removed = {
        contract.CONTRACT: "| `ssh_keyscan` |",
        contract.SETTINGS: "| `RELAY_SHELL_MAX_SESSIONS` |",
        contract.TOOLS: "| `strip_ansi` |",
    }
    for path, text in from_the_code.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        kept = [line for line in text.splitlines() if not line.startswith(removed[path])]
        assert len(kept) < len(text.splitlines()), f"{path} has no {removed[path]} row to remove"
        (tmp_path / path).write_text("\n".join(kept) + "\n")
    problems = "\n".join(contract.compare(from_the_code, tmp_path))
    for path, row in removed.items():
        assert f"{path} is not what the code gives" in problems
        assert f"\n+{row}" in problems, problems  # the missing row, as the code would write it


def test_record_tools_on_one_side_only_are_named(from_the_code: dict[Path, str]) -> None:
    text = from_the_code[contract.CONTRACT]
    without_exec_late = "\n".join(line for line in text.splitlines() if not line.startswith("| `exec:late` |"))
    with_an_invented_one = text.replace(
        contract.RECORD_TOOLS_END, "| `audit:invented` | never | nothing |\n" + contract.RECORD_TOOLS_END
    )
    assert contract.record_tool_differences(REPO_ROOT, without_exec_late) == [
        "record tool `exec:late` is written by the code and not in docs/contract.md"
    ]
    assert contract.record_tool_differences(REPO_ROOT, with_an_invented_one) == [
        "record tool `audit:invented` is in docs/contract.md and not in the code"
    ]
