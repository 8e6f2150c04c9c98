"""Pending tier-3 confirmations by token digest (never the token), bounded per client and in all, each valid
for the TTL; and the `[CONFIRM REQUIRED …]` result that hands a token out.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from relay_shell.capture import BoundedCapture
from relay_shell.confirm.binding import CallBinding, token_digest
from relay_shell.errors import ToolError
from relay_shell.plan import Execution

MAX_PENDING = 256  # tokens awaiting confirmation or use, all clients together; the oldest go first
MAX_PENDING_PER_CLIENT = 32  # so that one client's flood cannot push out another client's pending confirmation
TOKEN_BYTES = 32


@dataclass
class Pending:
    binding: str
    owner: str
    summary: str
    expires: float
    armed: bool = False


class ConfirmationStore:
    """Pending tier-3 confirmations by token digest, bounded, each valid until `ttl` seconds after issue."""

    def __init__(self, ttl: float, max_pending: int = MAX_PENDING, clock: Callable[[], float] = time.monotonic):
        self.ttl = ttl
        self.max_pending = max_pending
        self.clock = clock
        self.pending: dict[str, Pending] = {}  # insertion order is issue order: the first is the oldest

    def issue(self, binding: CallBinding, owner: str) -> tuple[str, str]:
        """A new token for this call: (token, its digest). Only the digest is kept."""
        self._drop_expired()
        mine = [digest for digest, pending in self.pending.items() if pending.owner == owner]
        if len(mine) >= MAX_PENDING_PER_CLIENT:
            del self.pending[mine[0]]
        while len(self.pending) >= self.max_pending:
            del self.pending[next(iter(self.pending))]
        token = secrets.token_urlsafe(TOKEN_BYTES)
        digest = token_digest(token)
        self.pending[digest] = Pending(binding.digest, owner, binding.summary, self.clock() + self.ttl)
        return token, digest

    def arm(self, digest: str, owner: str) -> Pending:
        """Let the call this token was issued for run once. Another client's token is unknown to the caller."""
        pending = self.pending.get(digest)
        if pending is None or pending.owner != owner:
            raise ToolError(
                "UnknownToken",
                "no pending confirmation of yours has this token (it was never issued to this client, was already "
                "used, or was dropped); repeat the tier-3 call to get a new token",
            )
        if self.clock() >= pending.expires:
            del self.pending[digest]
            raise ToolError(
                "TokenExpired",
                f"this token expired (valid {self.ttl:g}s from issue); repeat the tier-3 call to get a new token, "
                "ask the human again, then confirm and repeat the call promptly",
            )
        pending.armed = True
        return pending

    def take(self, binding: CallBinding, owner: str) -> str | None:
        """The digest of an armed token for exactly this call, consumed (single use); None when there is none."""
        self._drop_expired()
        for digest, pending in self.pending.items():
            if pending.armed and pending.binding == binding.digest and pending.owner == owner:
                del self.pending[digest]
                return digest
        return None

    def redeem(self, digest: str, binding: CallBinding, owner: str) -> bool:
        """Use up an issued id for exactly this call (an elicitation's question); False when it is unknown,
        already used, expired, or was issued for another call or client."""
        self._drop_expired()
        pending = self.pending.get(digest)
        if pending is None or pending.binding != binding.digest or pending.owner != owner:
            return False
        del self.pending[digest]
        return True

    def _drop_expired(self) -> None:
        now = self.clock()
        for digest in [digest for digest, pending in self.pending.items() if now >= pending.expires]:
            del self.pending[digest]


def confirm_required(token: str, binding: CallBinding, ttl: float, reason: str) -> Execution:
    """The `[CONFIRM REQUIRED …]` result: the token is in the body and structuredContent, never in the error
    text (the audit record keeps the error as its reason)."""
    body = (
        "Nothing ran. This call is irreversible and the operator requires a human's confirmation:\n"
        f"{binding.summary}\n\n"
        "1. Ask the human whether to run exactly this. Do not confirm on your own.\n"
        f'2. If they say yes: operation_confirm(token="{token}")\n'
        f"3. Then repeat the identical call (same tool, arguments, directory, host) within {ttl:g}s of this "
        "result; it runs once. Any change, another client, or (for a session) any input to or output from the "
        "session in between needs a new confirmation.\n"
    )
    capture = BoundedCapture(len(body.encode()) + 1)
    capture.feed(body.encode())
    return Execution(
        status="confirm_required",
        output=capture.result(),
        error=reason,
        fields={"confirm_token": token, "confirm_ttl": ttl},
    )
