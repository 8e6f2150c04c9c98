"""Tier-3 confirmation (RELAY_SHELL_CONFIRM_TIER3): an irreversible call runs only once a human said yes. This
module: the exact call a confirmation is bound to. The area: `screen.py` (what the human sees), `store.py`
(pending tokens), `elicitation.py` (asking through MCP), `tool.py` (operation_confirm); the runner alone
orchestrates the dialogue, since it alone writes audit records.

`token` mode: the call returns `[CONFIRM REQUIRED tier 3: …]` with a random single-use token bound to the exact
call: tool, every validated argument, working directory, resolved target identity (address, port, user, key,
jump hops), session id and state (input written and output produced so far), and the client (connection owner
and client label). `operation_confirm(token)` arms it; the identical call within the TTL then runs exactly once.
Any difference does not match and gets a fresh token.

What is shown (to the human, and in the token text) is everything the call sends, in full, with characters that
would not show as themselves made visible; a call too long for that is refused (`ConfirmTooLong`), never
offered with part of it shown.

`elicit` mode: when the client declared the elicitation capability, the runner asks the human through MCP
elicitation and runs the call only on an explicit accept with `confirm: true`; clients without it use tokens.
A 2025-11-25 client is asked with an `elicitation/create` request during the call. A 2026-07-28 client has no
server-to-client requests: the call answers `input_required` with the question and a state id (sealed by the
SDK), the client asks its human and repeats the call with the answer (the multi-round trip, SEP-2322).

The store keeps the SHA-256 of each token, never the token: a memory dump or a record cannot replay one. The
digest is also what links the audit records of one confirmation (plan, confirm, execute).
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from typing import Any

import orjson

from relay_shell.confirm.screen import summarize
from relay_shell.plan import Plan

logger = logging.getLogger("relay_shell")


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", errors="surrogatepass")).hexdigest()


# -- the call a confirmation is bound to ------------------------------------------------------------------


@dataclass(frozen=True)
class CallBinding:
    digest: str  # SHA-256 of the canonical call: what a token is bound to
    summary: str  # everything the call sends and where, for the human and for operation_confirm's answer


def bind_call(tool: str, arguments: dict[str, Any], plan: Plan, owner: str, client_id: str, reason: str) -> CallBinding:
    """The exact call: a later call matches only if every one of these is the same. Raises ToolError
    `ConfirmTooLong` when what the call sends is too much to show a human: such a call is never offered."""
    if plan.confirm_state is None and plan.confirm_state_of is not None:
        plan.confirm_state = plan.confirm_state_of()  # bound before the call's first await: what prepare saw
    cwd = arguments.get("cwd")
    # The directory the command would really run in: a symlink re-pointed since the confirmation is another
    # directory. Tools without a cwd argument (SSH, sessions) bind their target or session instead.
    where = os.path.realpath(os.path.expanduser(cwd)) if isinstance(cwd, str) else os.getcwd()
    canonical = {
        "tool": tool,
        "arguments": _canonical(arguments),
        "cwd": where,
        "target": plan.target,
        "denied_hosts": sorted(plan.denied_hosts),
        "session_id": plan.session_id,
        # Input to a session: its input and output counts when asked; any input or output since voids it.
        "session_state": plan.confirm_state,
        "owner": owner,
        "client": client_id,
    }
    encoded = orjson.dumps(canonical, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=repr)
    return CallBinding(hashlib.sha256(encoded).hexdigest(), summarize(tool, arguments, plan, where, reason))


def _canonical(value: Any) -> Any:
    """A default the tool declares as `60` and a caller's `60` validated to `60.0` are the same value."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
        return f"int:{value}"  # JSON allows any integer; the encoder stops at 64 bits
    if isinstance(value, dict):
        return {key: _canonical(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    return value


# -- what the human is shown --------------------------------------------------------------------------------
#
# Everything the call sends (every argument, the env overlay with its values, the target, the session's
# state), in full: a human who is shown part of a command confirms the part. Nothing in it may hide or
# rewrite text on the human's screen, so what would not show as itself is made visible (`\r`, `\x1b`,
# `\u202e`, `⟨420 spaces⟩`), and lines of a value after its first start with `  | ` so a value cannot forge
# a line of its own. What does not fit a screen a human reads is not offered for confirmation at all.


# -- pending confirmations -------------------------------------------------------------------------------


# -- operation_confirm -----------------------------------------------------------------------------------


# -- elicitation -----------------------------------------------------------------------------------------
