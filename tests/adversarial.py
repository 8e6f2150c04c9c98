"""The adversarial corpus (tests/data/adversarial/, its format in README.md there): loading the cases, putting
paths in place of their placeholders, and what the tools are called with."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().parent / "data" / "adversarial"
PLACEHOLDERS = ("{marker}", "{case}", "{doomed}", "{pid}", "{repo}", "{tar}", "{text}")
MODES = ("readonly", "guarded", "open")
DECISIONS = ("refused", "admitted", "confirm")


@dataclass(frozen=True)
class Case:
    """One case as written in its file (placeholders in place)."""

    fields: dict[str, Any]

    @property
    def id(self) -> str:
        return str(self.fields["id"])

    @property
    def mode(self) -> str:
        return str(self.fields["mode"])

    @property
    def expect(self) -> str:
        return str(self.fields["expect"])

    @property
    def is_dialogue(self) -> bool:
        return "steps" in self.fields

    def uses(self, placeholder: str) -> bool:
        return placeholder in json.dumps(self.fields)

    def filled(self, values: Mapping[str, str]) -> dict[str, Any]:
        """The case's fields with every placeholder replaced (values: placeholder -> text)."""
        return _filled(self.fields, values)


def load_cases(dialogues: bool = False) -> list[Case]:
    """Every command case of the corpus (or, with dialogues=True, every PTY dialogue case)."""
    cases = []
    for path in sorted(CORPUS.glob("*.jsonl")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            item = Case(json.loads(line))
            _check(item, path, number)
            if item.is_dialogue == dialogues:
                cases.append(item)
    return cases


def _check(item: Case, path: Path, number: int) -> None:
    where = f"{path.name}:{number}"
    for name in ("id", "class", "mode", "expect", "source", "why"):
        assert name in item.fields, f"{where}: no {name}"
    assert item.mode in MODES, f"{where}: mode {item.mode!r}"
    assert item.expect in DECISIONS, f"{where}: expect {item.expect!r}"
    assert path.stem.removeprefix("pty-") == item.fields["class"], f"{where}: class {item.fields['class']!r}"
    assert item.expect != "confirm" or item.mode == "open", f"{where}: confirm is for open mode"


def tool_call(fields: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The tool and the arguments a filled command case is sent with."""
    arguments: dict[str, Any] = {}
    if "script" in fields:
        tool = "shell_script"
        arguments["script"] = fields["script"]
        arguments["interpreter"] = fields.get("interpreter", "bash")
        arguments["strict"] = False
    elif "argv" in fields:
        tool = "shell_exec"
        arguments["command"] = list(fields["argv"])
        arguments["use_shell"] = False
    else:
        tool = "shell_exec"
        arguments["command"] = fields["command"]
    if "stdin" in fields and tool == "shell_exec":
        arguments["stdin"] = fields["stdin"]
    if "env" in fields:
        arguments["env"] = dict(fields["env"])
    return tool, arguments


def _filled(value: Any, values: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        for placeholder, replacement in values.items():
            value = value.replace(placeholder, replacement)
        return value
    if isinstance(value, list):
        return [_filled(item, values) for item in value]
    if isinstance(value, dict):
        return {key: _filled(item, values) for key, item in value.items()}
    return value
