"""operation_confirm: arm a pending confirmation by its token; what its audit record keeps (digests only)."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from relay_shell.audit.record import canonical_json
from relay_shell.capture import BoundedCapture
from relay_shell.confirm.binding import token_digest
from relay_shell.confirm.store import ConfirmationStore
from relay_shell.errors import ArgumentError, ToolError
from relay_shell.plan import Execution, Plan, ProgressFn, Subject

_TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32)
CONFIRM_ARGUMENTS = frozenset({"token"})  # operation_confirm's argument names


def recorded_confirm_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """What the audit record keeps of operation_confirm's arguments, valid or not: digests only. The token's
    digest is the `confirmation` that links the records; anything else (a token passed in the wrong shape or
    under another name, or as a name: `{"<token>": 1}`) is kept as one digest of names and values, with the
    count of names and only the names the tool has, since any other name may be the token."""
    recorded: dict[str, Any] = {}
    token = arguments.get("token")
    if isinstance(token, str):
        recorded["confirmation"] = token_digest(token)
    others = {name: value for name, value in arguments.items() if not (name == "token" and isinstance(value, str))}
    if others:
        encoded = canonical_json(others)  # any value a call may hold: integers beyond 64 bits included
        recorded["withheld"] = {
            "count": len(others),
            "names": sorted(name for name in others if name in CONFIRM_ARGUMENTS),
            "sha256": hashlib.sha256(encoded).hexdigest(),
        }
    return recorded


def prepare_confirm(store: ConfirmationStore, mode: str, owner: str, token: str) -> Plan:
    if mode == "off":
        raise ToolError(
            "ConfirmationOff",
            "RELAY_SHELL_CONFIRM_TIER3=off: tier-3 calls run without confirmation, there is nothing to confirm",
        )
    if not _TOKEN_SHAPE.fullmatch(token):
        raise ArgumentError(
            "token: is not a confirmation token; allowed: the 43-character token of a [CONFIRM REQUIRED …] "
            "result, copied exactly"
        )
    digest = token_digest(token)

    async def execute(progress: ProgressFn) -> Execution:
        pending = store.arm(digest, owner)
        left = max(0.0, pending.expires - store.clock())
        text = f"Armed. Repeat the identical call within {left:.0f}s; it runs once:\n{pending.summary}\n"
        capture = BoundedCapture(len(text.encode()) + 1)
        capture.feed(text.encode())
        return Execution(status="ok", output=capture.result(), fields={"expires_in": round(left, 1)})

    return Plan(subject=Subject(fixed_tier=0), execute=execute, confirmation=digest)
