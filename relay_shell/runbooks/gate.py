"""The briefing gate's state (`RELAY_SHELL_GATE=briefing`): per MCP session, whether the model has been briefed.

Until `begin_session` opens the gate for a session, a call of tier 1 or more is answered with the runbooks its own
words select instead of running; the identical call repeated afterwards runs (it was briefed). The runner decides
and writes the records (`gate:brief`, `gate:open`); this module only remembers.

A session is the owner of the call (identity.owner_of): a stdio connection, an HTTP MCP session, or for a
2026-07-28 HTTP client, which has no MCP session, its token. State of owners that disconnected is dropped.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from relay_shell.capture import BoundedCapture
from relay_shell.plan import Execution, Plan

if TYPE_CHECKING:
    from relay_shell.runbooks.search import Briefing

logger = logging.getLogger("relay_shell")

BRIEFED_CALLS_KEPT = 256  # per session: the calls briefed and not yet repeated are remembered up to this many
MAX_CALL_WORDS = 32  # words of a call used to select its briefing
CALL_WORD = re.compile(r"[^\W_]+")


@dataclass
class _SessionGate:
    open: bool = False
    briefed: OrderedDict[str, None] = field(default_factory=OrderedDict)


class BriefingGate:
    def __init__(
        self, enabled: bool, connected: Callable[[str], bool], brief: Callable[[list[str], list[str]], Briefing]
    ) -> None:
        self.enabled = enabled
        self.connected = connected
        self.brief = brief  # the briefing a gated call gets, selected by the call's words and the hosts it names
        self.sessions: dict[str, _SessionGate] = {}

    def admits(self, owner: str, call: str) -> bool:
        """May this call run now: the gate is off, open for the session, or this exact call was briefed."""
        if not self.enabled:
            return True
        state = self.sessions.get(owner)
        return state is not None and (state.open or call in state.briefed)

    def remember_briefed(self, owner: str, call: str) -> None:
        state = self._state(owner)
        state.briefed[call] = None
        state.briefed.move_to_end(call)
        while len(state.briefed) > BRIEFED_CALLS_KEPT:
            state.briefed.popitem(last=False)

    def open(self, owner: str) -> None:
        state = self._state(owner)
        state.open = True
        state.briefed.clear()

    def is_open(self, owner: str) -> bool:
        state = self.sessions.get(owner)
        return not self.enabled or (state is not None and state.open)

    def hold(self, tool: str, plan: Plan, arguments: dict[str, Any], max_output: int) -> Execution:
        """What a gated call returns instead of running: the runbooks its words select (the tool, the hosts it
        names, what it runs). Sets the plan's record fields: the runbooks shown and their digests."""
        hosts = [str(item) for name in ("host", "hosts") for item in _listed(arguments.get(name))]
        subject = plan.subject
        texts = [subject.command, " ".join(subject.argv or ()), subject.script, subject.typed, subject.transfer]
        try:
            briefing = self.brief(call_words(tool, texts, hosts), hosts)
        except Exception as exc:  # no briefing, no run: the gate stays shut and says why
            logger.exception("briefing for %s failed", tool)
            failed = f"Internal: the briefing could not be made ({type(exc).__name__}); nothing ran"
            return Execution(status="error", output=BoundedCapture(1).result(), error=failed)
        plan.record_fields = {
            "gated_tool": tool,
            "runbooks": [
                {"name": entry.name, "shown": entry.shown, "sha256": entry.sha256} for entry in briefing.entries
            ],
            "runbooks_omitted": briefing.omitted,
        }
        capture = BoundedCapture(max_output)
        capture.feed(briefing.text.encode("utf-8", errors="surrogatepass"))
        why = "this MCP session has not been briefed on the team's runbooks (RELAY_SHELL_GATE=briefing); nothing ran"
        return Execution(status="gated", output=capture.result(), error=why)

    def describe(self, owner: str) -> dict[str, Any]:
        """For server_info: the gate's mode and this session's state."""
        state = self.sessions.get(owner)
        return {
            "mode": "briefing" if self.enabled else "off",
            "this_session": "open" if self.is_open(owner) else "closed",
            "briefed_calls": len(state.briefed) if state is not None else 0,
            "sessions_open": sum(1 for item in self.sessions.values() if item.open),
        }

    def _state(self, owner: str) -> _SessionGate:
        state = self.sessions.get(owner)
        if state is None:
            for gone in [name for name in self.sessions if not self.connected(name)]:
                del self.sessions[gone]
            state = self.sessions[owner] = _SessionGate()
        return state


def describe_gate(gate: BriefingGate | None, owner: str) -> dict[str, Any]:
    """For server_info: the gate's state for this owner; a server without a gate (RELAY_SHELL_GATE=off) describes
    it as a disabled gate would."""
    if gate is None:
        return {"mode": "off", "this_session": "open", "briefed_calls": 0, "sessions_open": 0}
    return gate.describe(owner)


def call_digest(tool: str, arguments: dict[str, Any]) -> str:
    """The identity of a call: the tool and its arguments (defaults filled in), as canonical JSON."""
    canonical = orjson.dumps([tool, arguments], option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str)
    return hashlib.sha256(canonical).hexdigest()


def call_words(tool: str, texts: list[str | None], hosts: list[str]) -> list[str]:
    """The words a gated call's briefing is selected by: the tool, the hosts it names, then the words of what
    it runs (commands, script, typed input), without the short and numeric ones that match everything."""
    words = [tool, *hosts]
    for text in texts:
        if not text:
            continue
        for word in CALL_WORD.findall(text[:65536]):
            if len(word) >= 3 and not word.isdigit():
                words.append(word)
    return list(dict.fromkeys(words))[:MAX_CALL_WORDS]


def _listed(value: Any) -> list[Any]:
    """A host argument as a list: `hosts` may be a list or a comma-separated string."""
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return list(value) if isinstance(value, list) else []
