"""The team's runbooks (adr/0017) as the surface uses them: the retrieval, the briefing gate, the plans of the
runbook tools, the instructions' index and server_info's sections. A server without RELAY_SHELL_RUNBOOK_DIR and
with the gate off imports nothing of runbooks/ when it starts: the retrieval is made on first use (a runbook
tool, a prompt or resource request)."""

from __future__ import annotations

import functools
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from relay_shell.identity import connected
from relay_shell.plan import Plan
from relay_shell.settings.model import Settings
from relay_shell.ssh.access import SshAccess
from relay_shell.surface.guide import INSTRUCTIONS
from relay_shell.surface.workflows import PROMPTS

if TYPE_CHECKING:
    from relay_shell.runbooks.gate import BriefingGate
    from relay_shell.runbooks.library import Catalog
    from relay_shell.runbooks.retrieval import Retrieval


class RunbookAccess:
    def __init__(self, settings: Settings, ssh: SshAccess) -> None:
        self.settings = settings
        self.ssh = ssh
        self.mode = settings.policy.policy_mode
        self.configured = settings.runbooks.runbook_dir is not None  # RELAY_SHELL_RUNBOOK_DIR

    @functools.cached_property
    def retrieval(self) -> Retrieval:
        """The runbooks offered in this mode: loaded at first use (from the parse cache when unchanged); the
        server loads them at start when a directory is configured, for the instructions' index."""
        from relay_shell.runbooks.library import RunbookLibrary
        from relay_shell.runbooks.retrieval import Retrieval

        settings = self.settings
        library = None
        if settings.runbooks.runbook_dir is not None:
            reserved = frozenset(spec.name for spec in PROMPTS)
            library = RunbookLibrary(
                settings.runbooks.runbook_dir,
                settings.runbooks.runbook_max_files,
                settings.runbooks.runbook_max_bytes,
                reserved,
            )
            library.refresh()
        return Retrieval(library, settings.policy.policy_mode, self.inventory_groups)

    def view(self, catalog: Catalog) -> Hashable:
        """What a client of this mode can see of a catalog: its visible runbooks (name, file, digest) and the files
        that failed to load. A change to a runbook hidden in this mode changes nothing here (review N2)."""
        visible = tuple((runbook.name, runbook.relpath, runbook.sha256) for runbook in catalog.visible(self.mode))
        return (visible, catalog.problems)

    def briefing_gate(self) -> BriefingGate | None:
        """RELAY_SHELL_GATE=briefing: the gate the runner consults before a call of tier 1 or more runs; None when
        off."""
        if self.settings.runbooks.gate != "briefing":
            return None
        from relay_shell.runbooks.gate import BriefingGate

        budget = min(8192, self.settings.limits.max_output)
        return BriefingGate(True, connected, lambda words, hosts: self.retrieval.call_briefing(words, hosts, budget))

    def search_plan(self, tags: list[str] | None, query: str | None, max_bytes: int) -> Plan:
        from relay_shell.runbooks.plans import prepare_runbook_search

        return prepare_runbook_search(self.settings, self.retrieval, tags, query, max_bytes)

    def begin_session_plan(self, tags: list[str], gate_on: bool) -> Plan:
        from relay_shell.runbooks.plans import prepare_begin_session

        return prepare_begin_session(self.settings, self.retrieval, tags, gate_on)

    def inventory_groups(self, host: str) -> tuple[str, ...]:
        """A host's inventory groups, for the hosts a call names (an SSH call: the inventory is loaded already)."""
        found = self.ssh.get().inventory.lookup(host)
        return found.groups if found is not None else ()

    def instructions(self) -> str:
        """The server's instructions, with the runbook index when there are runbooks or a gate."""
        if not self.configured and self.settings.runbooks.gate == "off":
            return INSTRUCTIONS
        from relay_shell.runbooks.index import instructions_index

        index = instructions_index(self.retrieval.visible(), self.settings.runbooks.gate == "briefing")
        return f"{INSTRUCTIONS}\n{index}"

    def state(self, gate: BriefingGate | None, owner: str) -> dict[str, Any]:
        """server_info's sections for the runbooks and the calling session's briefing gate."""
        from relay_shell.runbooks.gate import describe_gate
        from relay_shell.runbooks.index import library_state

        settings = self.settings
        directory = str(settings.runbooks.runbook_dir) if settings.runbooks.runbook_dir is not None else None
        runbooks = library_state(
            self.retrieval.catalog(),
            self.mode,
            directory,
            settings.runbooks.runbook_max_files,
            settings.runbooks.runbook_max_bytes,
        )
        return {"runbooks": runbooks, "gate": describe_gate(gate, owner)}
