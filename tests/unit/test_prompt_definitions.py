"""Workflow prompt definitions: the validation function and server assembly refuse a malformed one (the
prompts as a client sees them: tests/e2e/prompts/test_prompts.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, cast

import pytest

from relay_shell.audit.log import AuditLog
from relay_shell.server import build_server
from relay_shell.settings.model import Settings
from relay_shell.surface import prompts as prompts_module
from relay_shell.surface.prompts import PromptDefinitionError, argument_problems, quote_value, validate_definitions
from relay_shell.surface.workflows import PROMPTS, REVIEW_AUDIT, ArgumentSpec, PromptSpec

TOOLS = {"ssh_exec", "audit_tail"}
GOOD = PromptSpec(
    name="good_one",
    title="Good",
    description="A well-formed prompt.",
    arguments=(ArgumentSpec("host", "a host", required=True, complete="host"),),
    tools=("ssh_exec",),
    modes=("open",),
    purpose="Purpose.",
    workflow="Use ssh_exec.",
)


def test_a_well_formed_definition_validates() -> None:
    assert validate_definitions((GOOD,), TOOLS) == {"good_one": GOOD}


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"name": "Bad-Name"}, "prompt 'Bad-Name': name must be lowercase a-z0-9_ starting with a letter"),
        ({"name": "9lives"}, "name must be lowercase"),
        ({"title": " "}, "prompt 'good_one': title must be a non-empty string"),
        ({"description": ""}, "description must be a non-empty string"),
        ({"workflow": ""}, "workflow must be a non-empty string"),
        ({"purpose": ""}, "needs a purpose"),
        ({"modes": ()}, "modes must be a non-empty subset of open, guarded, readonly"),
        ({"modes": ("open", "permissive")}, "modes must be a non-empty subset"),
        ({"tools": ("ssh_exec", "ssh_nuke")}, "guides 'ssh_nuke', which is not a registered tool"),
        ({"tools": ("ssh_exec", "audit_tail")}, "declares tool 'audit_tail' but its text never mentions it"),
        ({"arguments": (ArgumentSpec("Host", "a host", required=True),)}, "argument 'Host': name must be lowercase"),
        (
            {"arguments": (ArgumentSpec("relay_context", "x", required=True),) * 2},
            "argument 'relay_context': defined twice",
        ),
        ({"arguments": (ArgumentSpec("host", " ", required=True),)}, "argument 'host': description must be"),
        (
            {"arguments": (ArgumentSpec("host", "h", required=cast(Any, "yes")),)},
            "argument 'host': required must be true or false",
        ),
        (
            {"arguments": (ArgumentSpec("host", "h", required=True, complete=cast(Any, "dns")),)},
            "complete must be one of",
        ),
    ],
)
def test_a_malformed_definition_is_refused_with_a_clear_message(changes: dict[str, Any], expected: str) -> None:
    with pytest.raises(PromptDefinitionError) as raised:
        validate_definitions((dataclasses.replace(GOOD, **changes),), TOOLS)
    assert expected in str(raised.value)


def test_a_prompt_defined_twice_is_refused() -> None:
    with pytest.raises(PromptDefinitionError, match="prompt 'good_one': defined twice"):
        validate_definitions((GOOD, GOOD), TOOLS)


def test_a_malformed_definition_stops_server_assembly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = dataclasses.replace(PROMPTS[1], tools=(*PROMPTS[1].tools, "shell_teleport"))
    # Not a mock of behaviour: the definitions are data, and a broken one cannot ship without editing the
    # source, so the test swaps in a broken definition and lets the real server assembly validate it.
    monkeypatch.setattr(prompts_module, "PROMPTS", (PROMPTS[0], broken, *PROMPTS[2:]))
    settings = Settings(audit={"audit_path": tmp_path / "audit.jsonl"})
    with pytest.raises(PromptDefinitionError, match="guides 'shell_teleport', which is not a registered tool"):
        build_server(settings, AuditLog(settings.audit.audit_path, chain=True, fsync=False))


def test_a_lone_surrogate_is_refused_before_rendering() -> None:
    # Unit level: over stdio the transport drops such a line before any handler sees it (no reply at all).
    problems = argument_problems(REVIEW_AUDIT, {"question": "who\ud800"})
    assert problems == ["arguments.question: contains an unpaired UTF-16 surrogate; allowed: valid Unicode text"]


def test_quoting_prefixes_every_line_and_keeps_the_characters() -> None:
    assert quote_value("one") == "| one\n"
    assert quote_value("one\ntwo\n") == "| one\n| two\n"
    assert quote_value("a\r\nb\u2028c\n\n") == "| a\r\n| b\u2028| c\n| \n"
