"""The runbooks this server offers in its policy mode, and the briefings made of them: for `runbook_search`, for
`begin_session`, and for a call the briefing gate holds back. Without RUNBOOK_DIR there are none, and every
briefing says so."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from relay_shell.runbooks.document import Runbook
from relay_shell.runbooks.library import Catalog, RunbookLibrary

if TYPE_CHECKING:
    from relay_shell.runbooks.search import Briefing, SearchIndex

EMPTY = Catalog(generation=0, runbooks={}, problems=(), files=0)
CLOSING = (
    "Read the runbooks that apply before acting, and follow them. More can be asked for at any time: "
    "runbook_search(tags=[...]) when the task moves to another system, service or step, or a step fails; "
    "the index is the resource relay-shell://runbooks."
)
NO_RUNBOOKS = "No runbooks are configured on this server (RELAY_SHELL_RUNBOOK_DIR is not set)."


class Retrieval:
    def __init__(
        self,
        library: RunbookLibrary | None,
        mode: str,
        host_groups: Callable[[str], Iterable[str]] | None = None,
    ) -> None:
        self.library = library
        self.mode = mode
        self.host_groups = host_groups  # a host's inventory groups: a call on `web1` matches a runbook for `@web`
        self._index: tuple[int, SearchIndex] | None = None

    def catalog(self) -> Catalog:
        return self.library.current() if self.library is not None else EMPTY

    def visible(self, catalog: Catalog | None = None) -> list[Runbook]:
        return (catalog or self.catalog()).visible(self.mode)

    def get(self, name: str) -> Runbook | None:
        """A runbook offered in this mode, by name."""
        runbook = self.catalog().runbooks.get(name)
        return runbook if runbook is not None and self.mode in runbook.modes else None

    def read_body(self, runbook: Runbook) -> str | None:
        return self.library.read_body(runbook) if self.library is not None else None

    def read_text(self, runbook: Runbook) -> str | None:
        return self.library.read_text(runbook) if self.library is not None else None

    def brief(self, keywords: Iterable[str], max_bytes: int, heading: str, hosts: Iterable[str] = ()) -> Briefing:
        # The search module loads with the first briefing, not at every server start.
        from relay_shell.runbooks.search import SearchIndex, compose, make_query

        catalog = self.catalog()
        if self._index is None or self._index[0] != catalog.generation:
            self._index = (catalog.generation, SearchIndex(self.visible(catalog)))
        index = self._index[1]
        query = make_query(keywords, hosts, self._groups if self.host_groups is not None else None)
        if self.library is None:
            heading = f"{heading}\n{NO_RUNBOOKS}"
        return compose(index.hits(query), len(index.entries), max_bytes, heading, CLOSING, self.read_body)

    def search(self, keywords: list[str], max_bytes: int) -> Briefing:
        shown = ", ".join(keywords[:16]) + (f" (+{len(keywords) - 16} more)" if len(keywords) > 16 else "")
        return self.brief(keywords, max_bytes, f"Runbooks for: {shown} (priority-10 runbooks are always included)")

    def session_briefing(self, keywords: list[str], max_bytes: int) -> Briefing:
        shown = ", ".join(keywords[:16])
        return self.brief(
            keywords,
            max_bytes,
            f"Briefing for the task: {shown}. These are the team's runbooks that may apply (priority-10 ones always "
            "apply).",
        )

    def call_briefing(self, words: list[str], hosts: list[str], max_bytes: int) -> Briefing:
        shown = ", ".join(words[:16])
        return self.brief(
            words,
            max_bytes,
            "Before this call runs, read the team's runbooks that may apply to it (selected by its words: "
            f"{shown}; priority-10 ones always apply). Then repeat the identical call and it will run, or first "
            "call begin_session(tags=[about 5 keywords of your task]) for a briefing on the whole task, which also "
            "lets every later call of this session run at once.",
            hosts,
        )

    def _groups(self, name: str) -> Iterable[str]:
        assert self.host_groups is not None
        try:
            return self.host_groups(name)
        except Exception:  # an unreadable inventory only makes host scopes match less
            return ()
