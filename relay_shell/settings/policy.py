"""[policy]: admission: the mode and how readonly is enforced (adr/0024), the operator's deny and allow patterns
(compiled once, in RE2: settings/patterns.py), and tier-3 confirmation (RELAY_SHELL_POLICY_*,
RELAY_SHELL_READONLY_ENFORCEMENT, RELAY_SHELL_CONFIRM_*)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_serializer, field_validator

from relay_shell.settings.patterns import Regex, compile_patterns
from relay_shell.settings.values import Area

PATTERNS = (
    "a JSON array of regexes in Python's re syntax, matched by RE2 (README, Operator patterns: no backreferences, "
    "no lookaround), or one regex per line (in the file: a list); searched in each command's text and canonical forms"
)


class PolicySettings(Area):
    policy_mode: Literal["open", "guarded", "readonly"] = Field("open", description="open, guarded or readonly")
    readonly_enforcement: Literal["auto", "required"] = Field(
        "auto",
        description="auto (readonly is enforced by the kernel with Landlock as far as its ABI goes, the rest and "
        "a kernel without Landlock left to the classifier and said loudly) or required (refuse to start in readonly "
        "mode unless the kernel enforces all of it: Landlock ABI 6, Linux 6.12)",
    )
    policy_deny: tuple[Regex, ...] = Field((), description=PATTERNS)
    policy_allow: tuple[Regex, ...] = Field((), description=PATTERNS)
    confirm_tier3: Literal["off", "token", "elicit"] = Field(
        "off",
        description="off, token (a tier-3 call needs operation_confirm(token), then the identical call) or elicit "
        "(ask the human through MCP elicitation; token for clients without it)",
    )
    confirm_ttl: float = Field(
        300.0,
        ge=1.0,
        le=3600.0,
        description="seconds a tier-3 confirmation stays valid (token issue to use; the human's time to answer an "
        "elicitation), 1 to 3600",
    )

    _compiled = field_validator("policy_deny", "policy_allow", mode="before")(compile_patterns)

    @field_serializer("policy_deny", "policy_allow")
    def _pattern_texts(self, patterns: tuple[Regex, ...]) -> list[str]:
        return [pattern.pattern for pattern in patterns]
