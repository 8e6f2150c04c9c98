"""The runbook index in two forms: the bounded text the server `instructions` carry (so the model learns at
`initialize` that the team's rules exist and what they are about), and the full index resource
(`relay-shell://runbooks`: every runbook offered in this mode, and every file that failed to load, with why)."""

from __future__ import annotations

from typing import Any

from relay_shell.runbooks.document import ALWAYS_INCLUDED, Runbook
from relay_shell.runbooks.library import Catalog

MAX_INDEX_BYTES = 4096
MAX_PROBLEMS_SHOWN = 200

INDEX_INTRO = (
    "Team runbooks: this server carries the operators' own rules and procedures (RELAY_SHELL_RUNBOOK_DIR). They may "
    "apply to your task: look before acting. runbook_search(tags=[a few keywords of the task]) returns the ones that "
    "match, best first, in full; search again whenever the task moves on. Each is also a prompt and the resource "
    "relay-shell://runbooks/NAME."
)
GATE_NOTE = (
    "The briefing gate is on: until you call begin_session(tags=[about 5 keywords of your task]) in this session, a "
    "call that would run anything answers [GATED: …] with the runbooks that apply to it instead of running; read "
    "them, then repeat the identical call."
)


def ordered(runbooks: list[Runbook]) -> list[Runbook]:
    """Guardrails (priority 10) first, then by priority, then by name."""
    return sorted(runbooks, key=lambda runbook: (-runbook.priority, runbook.name))


def instructions_index(runbooks: list[Runbook], gate_on: bool) -> str:
    """At most MAX_INDEX_BYTES: the intro, the guardrails, then the others by priority (name + summary each), then
    how many more there are."""
    lines = [INDEX_INTRO, *([GATE_NOTE] if gate_on else [])]
    if not runbooks:
        lines.append("(No runbook is offered in this policy mode right now.)")
        return "\n".join(lines)
    budget = MAX_INDEX_BYTES - sum(_size(line) for line in lines) - 80  # room for the "more" line
    everything = ordered(runbooks)
    groups = (
        ("Always apply (priority 10):", [runbook for runbook in everything if runbook.priority == ALWAYS_INCLUDED]),
        ("Others, by priority:", [runbook for runbook in everything if runbook.priority != ALWAYS_INCLUDED]),
    )
    listed = 0
    for heading, group in groups:
        if not group:
            continue
        entries: list[str] = []
        cost = _size(heading)
        for runbook in group:
            priority = "" if runbook.priority == ALWAYS_INCLUDED else f" (p{runbook.priority})"
            line = f"- {runbook.name}{priority}: {runbook.summary}"
            if cost + _size(line) > budget:
                break
            entries.append(line)
            cost += _size(line)
        if entries:
            lines += [heading, *entries]
            budget -= cost
            listed += len(entries)
        if len(entries) < len(group):
            break
    if listed < len(runbooks):
        lines.append(f"… {len(runbooks) - listed} more, use runbook_search.")
    return "\n".join(lines)


def _size(line: str) -> int:
    return len(line.encode("utf-8")) + 1  # with its line break


def index_document(catalog: Catalog, mode: str, directory: str | None) -> dict[str, Any]:
    """The index resource: every runbook offered in this mode, and the files that failed to load; of the runbooks
    hidden in this mode not even how many there are."""
    offered = ordered(catalog.visible(mode))
    return {
        "directory": directory,
        "policy_mode": mode,
        "runbooks": [
            {
                "name": runbook.name,
                "uri": f"relay-shell://runbooks/{runbook.name}",
                "title": runbook.title,
                "summary": runbook.summary,
                "priority": runbook.priority,
                "tags": list(runbook.tags),
                "hosts": list(runbook.hosts),
                "modes": list(runbook.modes),
                "arguments": [
                    {"name": item.name, "description": item.description, "required": item.required}
                    for item in runbook.arguments
                ],
                "chapters": list(runbook.chapters),
                "file": runbook.relpath,
                "bytes": runbook.size,
                "sha256": runbook.sha256,
            }
            for runbook in offered
        ],
        "not_loaded": [
            {"file": problem.path, "problem": problem.problem} for problem in catalog.problems[:MAX_PROBLEMS_SHOWN]
        ],
        "not_loaded_count": len(catalog.problems),
    }


def library_state(catalog: Catalog, mode: str, directory: str | None, max_files: int, max_bytes: int) -> dict[str, Any]:
    """For server_info: what is loaded and offered in this mode, and what failed (first 20). A runbook hidden in this
    mode counts nowhere (it answers as absent everywhere: review N2), so no count of files or of every mode's."""
    return {
        "directory": directory,
        "loaded": len(catalog.visible(mode)),
        "max_files": max_files,
        "max_bytes": max_bytes,
        "problems": [{"file": problem.path, "problem": problem.problem} for problem in catalog.problems[:20]],
        "problem_count": len(catalog.problems),
    }
