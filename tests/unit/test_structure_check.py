"""scripts/check_structure.py on small trees written for each check: it finds what breaks the structure (a cycle, an
import up a layer, a module in no layer, a long module or function, a tool defined inside a factory, a long runner
module) and passes a tree that keeps to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.check_structure import LayoutError, check

LAYOUT = """# Layout
<!-- layers:start -->
| layer | members | what |
|---|---|---|
| top | `server.py`, `runner.py`, `runner/` | the top |
| middle | `policy/` | in between |
| bottom | `__init__.py`, `plan.py` | the bottom |
<!-- layers:end -->
"""


def tree(root: Path, files: dict[str, str], layout: str = LAYOUT) -> Path:
    (root / "docs").mkdir()
    (root / "docs" / "layout.md").write_text(layout)
    (root / "scripts").mkdir()
    for name, text in {"relay_shell/__init__.py": "", "relay_shell/policy/__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def body(lines: int) -> str:
    return "".join(f"    value_{number} = {number}\n" for number in range(lines))


def test_a_tree_that_keeps_to_its_layers_passes(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "relay_shell/server.py": "from relay_shell.policy import rules\nfrom relay_shell.plan import Plan\n",
            "relay_shell/policy/rules.py": "from relay_shell import plan\n\n\ndef rate() -> None:\n" + body(70),
            "relay_shell/plan.py": "class Plan:\n    pass\n",
        },
    )
    report = check(root)
    assert report.layers == ["top", "middle", "bottom"]
    assert all(not problems for problems in report.failures().values()), report.failures()


def test_cycles_upward_imports_and_unplaced_modules_are_named(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "relay_shell/server.py": "import relay_shell.policy.rules\n",
            "relay_shell/policy/rules.py": "def lazy() -> None:\n    from relay_shell.policy import calls\n",
            "relay_shell/policy/calls.py": "from relay_shell.policy.rules import lazy\n",
            "relay_shell/plan.py": "from relay_shell import server\n",  # the bottom importing the top
            "relay_shell/extra.py": "",
        },
    )
    failures = check(root).failures()
    assert failures["import cycles"] == [
        "relay_shell.policy.calls -> relay_shell.policy.rules -> relay_shell.policy.calls"
    ]
    assert failures["imports running up a layer"] == [
        "relay_shell/plan.py:1 imports relay_shell.server (bottom -> top, a layer above)"
    ]
    assert failures["modules not placed in a layer"] == ["relay_shell/extra.py"]


def test_long_modules_long_functions_and_a_long_runner_module_are_named(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "relay_shell/policy/rules.py": "def rate() -> None:\n" + body(80) + "\n" * 430,
            "relay_shell/runner/pipeline.py": "\n" * 300,
            "relay_shell/runner/__init__.py": "",
        },
    )
    failures = check(root).failures()
    assert failures["modules over 500 lines"] == ["relay_shell/policy/rules.py 511"]
    assert failures["functions over 80 lines"] == ["relay_shell/policy/rules.py:rate 81 (line 1)"]
    assert failures["runner modules of 300 lines or more"] == ["relay_shell/runner/pipeline.py 300"]


def test_tools_defined_inside_a_function_are_named_and_module_level_tools_are_not(tmp_path: Path) -> None:
    factory = (
        "def tools(runner):\n"
        "    async def shell_exec(command: str, ctx: Context) -> str:\n"
        "        return command\n"
        "    def listed() -> str:\n"
        "        return ''\n"
        "    def helper() -> str:\n"
        "        return ''\n"
        "    return [make_tool(listed, 'Listed'), helper()]\n"
    )
    module_level = "async def shell_script(script: str, ctx: Context) -> str:\n    return script\n"
    root = tree(tmp_path, {"relay_shell/server.py": factory + module_level})
    assert check(root).failures()["tools defined inside another function"] == [
        "relay_shell/server.py:2 shell_exec inside tools",
        "relay_shell/server.py:4 listed inside tools",
    ]


def test_a_layout_without_its_table_is_an_error(tmp_path: Path) -> None:
    root = tree(tmp_path, {}, layout="# Layout\n\nno table here\n")
    with pytest.raises(LayoutError, match="layers:start"):
        check(root)
