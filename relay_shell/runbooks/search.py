"""Keyword retrieval over the runbooks: deterministic scoring and a byte budget filled from the top.

Each keyword is matched case-insensitively against a runbook's name, title, summary, tags and chapters: it matches
a field when its words start words of the field, in order (`cert` matches "Rotate certificates", `primary
database` matches "never restart the primary database"). A keyword equal to one of the runbook's `hosts` (`web1`,
`@web`) matches them too, and so does a host a call names whose inventory groups the runbook names.
score = matches × priority, and priority-10 runbooks (guardrails) are always included, first.

The answer fills `max_bytes` from the top: the full text of the best runbooks while they fit, then name + summary
for further matches, then names only, then a count of what was left out, and a closing line saying more can be
asked for at any time. Shown as structured data too (name, score, how it was shown, bytes, digest).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from relay_shell.runbooks.document import ALWAYS_INCLUDED, Runbook

WORD = re.compile(r"[^\W_]+")
SEPARATOR = " \x00 "  # between a field's items: no keyword (letters, digits, spaces) spans two tags or chapters
OMITTED_RESERVE = 160  # bytes kept back for the "N more matches" line
NAMES_LEAD = "\nAlso matching (names only): "
Shown = Literal["full", "summary", "name"]


def normalize(text: str) -> str:
    return " ".join(WORD.findall(text.casefold()))


@dataclass(frozen=True)
class Query:
    keywords: tuple[str, ...]  # as given (deduplicated), for the heading
    needles: tuple[str, ...]  # " word word": matched where a field's word starts
    host_terms: frozenset[str]  # host names and @groups, casefolded


def make_query(
    keywords: Iterable[str], hosts: Iterable[str] = (), host_groups: Callable[[str], Iterable[str]] | None = None
) -> Query:
    """Keywords as matched. `hosts` (the hosts a call names) also stand for their inventory groups (`@web`) when
    matched against a runbook's hosts."""
    given = tuple(dict.fromkeys(keyword.strip() for keyword in keywords if keyword.strip()))
    needles = tuple(dict.fromkeys(" " + normal for normal in (normalize(keyword) for keyword in given) if normal))
    host_terms = {keyword.casefold() for keyword in given}
    for host in hosts:
        host_terms.add(host.casefold())
        if host_groups is not None:
            host_terms.update("@" + group.casefold() for group in host_groups(host))
    return Query(keywords=given, needles=needles, host_terms=frozenset(host_terms))


@dataclass(frozen=True)
class Hit:
    runbook: Runbook
    matches: int
    score: int


class SearchIndex:
    """The searchable text of a set of runbooks, normalized once (per catalog generation and policy mode)."""

    def __init__(self, runbooks: list[Runbook]) -> None:
        self.entries: list[tuple[Runbook, str, tuple[str, ...], frozenset[str]]] = []
        for runbook in runbooks:
            fields = (
                _field([runbook.name]),
                _field([runbook.title]),
                _field([runbook.summary]),
                _field(runbook.tags),
                _field(runbook.chapters),
            )
            hosts = frozenset(host.casefold() for host in runbook.hosts)
            self.entries.append((runbook, "".join(fields), fields, hosts))

    def hits(self, query: Query) -> list[Hit]:
        """Matching runbooks and every priority-10 one: guardrails first, then by score, priority and name."""
        found: list[Hit] = []
        for runbook, everything, fields, hosts in self.entries:
            matches = 0
            for needle in query.needles:
                if needle in everything:  # most keywords miss most runbooks: one test decides
                    matches += sum(1 for text in fields if needle in text)
            if hosts and not hosts.isdisjoint(query.host_terms):
                matches += 1
            if matches or runbook.priority == ALWAYS_INCLUDED:
                found.append(Hit(runbook, matches, matches * runbook.priority))
        found.sort(
            key=lambda hit: (
                hit.runbook.priority != ALWAYS_INCLUDED,
                -hit.score,
                -hit.runbook.priority,
                hit.runbook.name,
            )
        )
        return found


def _field(items: Iterable[str]) -> str:
    return " " + SEPARATOR.join(normalize(item) for item in items) + " "


@dataclass(frozen=True)
class Entry:
    name: str
    title: str
    priority: int
    score: int
    shown: Shown
    bytes: int  # of this entry in the text
    sha256: str  # of the runbook file as loaded


@dataclass(frozen=True)
class Briefing:
    text: str
    entries: tuple[Entry, ...]
    matched: int  # runbooks selected (matches and guardrails)
    omitted: int  # selected but not even named, for want of bytes
    total: int  # runbooks offered in this policy mode


def compose(
    hits: list[Hit], total: int, max_bytes: int, heading: str, closing: str, read_body: Callable[[Runbook], str | None]
) -> Briefing:
    """The text within max_bytes (UTF-8): full texts, then summaries, then names, then a count. Full texts and
    summaries leave room for naming the matches after them (up to a quarter of the budget), so a long runbook
    does not crowd out the knowledge that the others exist; room to name every priority-10 runbook after them is
    kept whatever it takes. A guardrail is never left out: should the guardrails' names alone not fit in
    max_bytes, they are all named and the text is that much longer (the output cap still applies)."""
    head = heading + "\n"
    tail = "\n" + closing + "\n"
    remaining = max_bytes - _size(head) - _size(tail) - OMITTED_RESERVE
    names_after = [0] * (len(hits) + 1)  # bytes to name hits[i:] (", name" each)
    guards_after = [0] * (len(hits) + 1)  # bytes to name the priority-10 ones among hits[i:]
    for index in range(len(hits) - 1, -1, -1):
        named = _size(hits[index].runbook.name) + 2
        names_after[index] = names_after[index + 1] + named
        guard = hits[index].runbook.priority == ALWAYS_INCLUDED
        guards_after[index] = guards_after[index + 1] + (named if guard else 0)
    guards_after = [size + _size(NAMES_LEAD) if size else 0 for size in guards_after]  # and the line's lead
    names_cap = max_bytes // 4
    parts = [head]
    entries: list[Entry] = []
    phase: Shown = "full"
    omitted = 0
    for position, hit in enumerate(hits):
        runbook = hit.runbook
        room = remaining - max(guards_after[position + 1], min(names_after[position + 1], names_cap))
        piece = ""
        if phase == "full":
            body = read_body(runbook) if _full_size_guess(runbook) <= room else None
            if body is not None:
                opening = f"runbook {runbook.name} (priority {runbook.priority}, score {hit.score}): {runbook.title}"
                ending = "" if body.endswith("\n") else "\n"
                piece = f"\n=== {opening} ===\n{body}{ending}=== end of runbook {runbook.name} ===\n"
            if not piece or _size(piece) > room:
                phase, piece = "summary", ""
        if phase == "summary":
            lead = "" if any(entry.shown == "summary" for entry in entries) else "\nFurther matches (name: summary):\n"
            piece = f"{lead}- {runbook.name} (priority {runbook.priority}, score {hit.score}): {runbook.summary}\n"
            if _size(piece) > room:
                phase, piece = "name", ""
        if phase == "name":
            named = any(entry.shown == "name" for entry in entries)
            piece = (", " if named else NAMES_LEAD) + runbook.name
            if _size(piece) > remaining - guards_after[position + 1] and runbook.priority != ALWAYS_INCLUDED:
                omitted += 1
                continue
        parts.append(piece)
        remaining -= _size(piece)
        entry = Entry(runbook.name, runbook.title, runbook.priority, hit.score, phase, _size(piece), runbook.sha256)
        entries.append(entry)
    if entries and entries[-1].shown == "name":
        parts.append("\n")
    if omitted:
        parts.append(
            f"[{omitted} more matching runbooks not shown: use more specific keywords or a larger max_bytes]\n"
        )
    parts.append(tail)
    return Briefing(text="".join(parts), entries=tuple(entries), matched=len(hits), omitted=omitted, total=total)


def _full_size_guess(runbook: Runbook) -> int:
    # The body is at most the file less its front matter (characters ≤ bytes): skip reading what cannot fit.
    return runbook.size - runbook.body_start


def _size(text: str) -> int:
    return len(text.encode("utf-8", errors="surrogatepass"))
