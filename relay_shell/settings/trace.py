"""[trace]: the exec trace (adr/0019): on or off, the EXEC_DENY patterns (compiled once, in RE2), the entries one
record keeps (RELAY_SHELL_EXEC_TRACE, _EXEC_DENY, _EXEC_TRACE_ENTRIES)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_serializer, field_validator

from relay_shell.settings.patterns import Regex, compile_patterns
from relay_shell.settings.values import Area


class TraceSettings(Area):
    exec_trace: Literal["auto", "on", "off"] = Field(
        "auto",
        description="auto (the default: on where tracing takes nothing from the commands: a root server, one with "
        "no_new_privs already, readonly mode; off for a user's open or guarded server, where it would need "
        "no_new_privs, adr/0027), on (every execve of the trees calls and local sessions start goes into their "
        "audit records, where the kernel allows it) or off",
    )
    # Matched while a traced exec waits, over argv a program chose: RE2 keeps that linear whatever the pattern.
    exec_deny: tuple[Regex, ...] = Field(
        (),
        description="a JSON array of RE2 regexes (no backreferences, no lookaround), or one per line, over "
        "`path argv...` of each exec: a match is EPERM",
    )
    exec_trace_entries: int = Field(
        64, ge=0, le=1024, description="exec entries one audit record keeps (the count and digest cover all), 0 to 1024"
    )

    _compiled = field_validator("exec_deny", mode="before")(compile_patterns)

    @field_serializer("exec_deny")
    def _pattern_texts(self, patterns: tuple[Regex, ...]) -> list[str]:
        return [pattern.pattern for pattern in patterns]
