"""What a call that cannot proceed raises: a ToolError is reported as `[ERROR: Kind: message]`, an ArgumentError
names the argument, the problem and what is allowed; InputRequired answers the call with a question for the
client's human; a setting that cannot be used raises a ConfigError at startup. Depends on nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcp_types import InputRequiredResult


class ToolError(Exception):
    """A call that cannot proceed, reported as `[ERROR: Kind: message]`; the message says what to change."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class ArgumentError(ToolError):
    """A tool argument is invalid. The message names the argument, the problem and what is allowed."""

    def __init__(self, message: str) -> None:
        super().__init__("InvalidArgument", message)


class InputRequired(Exception):
    """The call's answer is `input_required` (2026-07-28): raised by a tier-3 confirmation (confirm/elicitation.py)
    through the tool function to the call router (surface/router.py), which returns `result` instead of a tool
    result. Nothing ran; the plan is recorded."""

    def __init__(self, result: InputRequiredResult) -> None:
        super().__init__("input required")
        self.result = result


class ConfigError(Exception):
    """A setting that cannot be used: one line naming the setting, the bad value and what is allowed; startup
    stops with exit code 2."""
