"""runbook_search and begin_session: tier-0 plans that read runbooks and return a briefing within a byte budget.
begin_session's plan also asks the runner to open the briefing gate for the calling MCP session."""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Any

import orjson

from relay_shell.arguments import DEFAULT_BRIEFING_BYTES, MAX_KEYWORDS, clamp
from relay_shell.capture import BoundedCapture
from relay_shell.errors import ArgumentError
from relay_shell.plan import Execution, Plan, ProgressFn, Subject
from relay_shell.runbooks.retrieval import Retrieval
from relay_shell.settings.model import Settings

if TYPE_CHECKING:
    from relay_shell.runbooks.search import Briefing

MAX_KEYWORD_CHARS = 64
MIN_BYTES = 1024
QUERY_WORD = re.compile(r"[^\W_][\w@.-]*")
# Words of a question that say nothing about which runbook applies.
STOP_WORDS = frozenset(
    """a an and are as at be by can do does for from have how i in is it its me my of on or our should the this to
    we what when where which who why will with you your""".split()  # noqa: SIM905  # a word list reads as text
)
RECORDED_KEYWORDS = 64  # keywords a record keeps in full; more are summarized (count, first ones, digest)


def keywords_of(tags: list[str] | None, query: str | None) -> list[str]:
    """The keywords of a call: the tags as given, then the words of the query (stop words dropped)."""
    if tags is None and query is None:
        raise ArgumentError(
            f'tags: give keywords of the task (tags=["postgres", "restart"]) or a text (query); '
            f"allowed: 1 to {MAX_KEYWORDS} keywords"
        )
    keywords: list[str] = []
    for index, tag in enumerate(tags or []):
        if not tag.strip():
            raise ArgumentError(f"tags[{index}]: is empty; allowed: a keyword of 1 to {MAX_KEYWORD_CHARS} characters")
        if len(tag) > MAX_KEYWORD_CHARS:
            raise ArgumentError(
                f"tags[{index}]: {len(tag)} characters is too long; allowed: at most {MAX_KEYWORD_CHARS}"
            )
        keywords.append(tag.strip())
    if query is not None:
        words = [word for word in QUERY_WORD.findall(query) if word.casefold() not in STOP_WORDS]
        if not words and not keywords:
            raise ArgumentError("query: has no keywords; allowed: a text naming the task (systems, services, actions)")
        keywords.extend(words[:MAX_KEYWORDS])
    if not keywords:
        raise ArgumentError(
            f'tags: is empty; allowed: 1 to {MAX_KEYWORDS} keywords of the task, e.g. ["postgres", "restart"]'
        )
    return list(dict.fromkeys(keywords))[:MAX_KEYWORDS]


def briefing_budget(settings: Settings, max_bytes: int, notes: list[str]) -> int:
    value, note = clamp("max_bytes", max_bytes, MIN_BYTES, settings.limits.max_output)
    if note:
        notes.append(note)
    return int(value)


def prepare_runbook_search(
    settings: Settings, retrieval: Retrieval, tags: list[str] | None, query: str | None, max_bytes: int
) -> Plan:
    keywords = keywords_of(tags, query)
    notes: list[str] = []
    budget = briefing_budget(settings, max_bytes, notes)
    plan = Plan(subject=Subject(fixed_tier=0), execute=_never, notes=notes)

    async def execute(progress: ProgressFn) -> Execution:
        briefing = retrieval.search(keywords, budget)
        plan.record_fields = briefing_record(keywords, briefing)
        return briefing_execution(settings, keywords, briefing, gate=None)

    plan.execute = execute
    return plan


def prepare_begin_session(settings: Settings, retrieval: Retrieval, tags: list[str], gate_on: bool) -> Plan:
    keywords = keywords_of(tags, None)
    plan = Plan(subject=Subject(fixed_tier=0), execute=_never, opens_gate=gate_on)

    async def execute(progress: ProgressFn) -> Execution:
        briefing = retrieval.session_briefing(keywords, min(DEFAULT_BRIEFING_BYTES, settings.limits.max_output))
        plan.record_fields = briefing_record(keywords, briefing)
        return briefing_execution(settings, keywords, briefing, gate="open" if gate_on else "off")

    plan.execute = execute
    return plan


async def _never(progress: ProgressFn) -> Execution:
    raise AssertionError("replaced before the plan is returned")


def briefing_execution(settings: Settings, keywords: list[str], briefing: Briefing, gate: str | None) -> Execution:
    text = briefing.text
    if gate == "open":
        text += "The briefing gate is now open for this session: calls run at once.\n"
    capture = BoundedCapture(settings.limits.max_output)
    capture.feed(text.encode("utf-8", errors="surrogatepass"))
    return Execution(status="ok", output=capture.result(), fields=briefing_fields(keywords, briefing, gate))


def briefing_fields(keywords: list[str], briefing: Briefing, gate: str | None) -> dict[str, Any]:
    return {
        "keywords": keywords,
        "runbooks": [
            {
                "name": entry.name,
                "title": entry.title,
                "priority": entry.priority,
                "score": entry.score,
                "shown": entry.shown,
                "bytes": entry.bytes,
                "sha256": entry.sha256,
            }
            for entry in briefing.entries
        ],
        "matched": briefing.matched,
        "omitted": briefing.omitted,
        "total": briefing.total,
        "gate": gate,
    }


def briefing_record(keywords: list[str], briefing: Briefing) -> dict[str, Any]:
    """What the audit record keeps of a briefing: the runbooks returned, how, and their digests."""
    return {
        "runbooks": [{"name": entry.name, "shown": entry.shown, "sha256": entry.sha256} for entry in briefing.entries],
        "runbooks_omitted": briefing.omitted,
    }


def recorded_keyword_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """A record keeps at most RECORDED_KEYWORDS tags (10,000 tags would make one record a megabyte): more are
    kept as their count, the first ones and a digest of them all."""
    tags = arguments.get("tags")
    if not isinstance(tags, list) or len(tags) <= RECORDED_KEYWORDS:
        return arguments
    digest = hashlib.sha256(orjson.dumps(tags, default=str)).hexdigest()
    return {**arguments, "tags": {"count": len(tags), "first": tags[:16], "sha256": digest}}
