"""What a call that cannot proceed raises: a ToolError is reported as `[ERROR: Kind: message]`, an ArgumentError
names the argument, the problem and what is allowed; and what a setting that cannot be used raises at startup, a
ConfigError. Depends on nothing.
"""

from __future__ import annotations


class ToolError(Exception):
    """A call that cannot proceed, reported as `[ERROR: Kind: message]`; the message says what to change."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class ArgumentError(ToolError):
    """A tool argument is invalid. The message names the argument, the problem and what is allowed."""

    def __init__(self, message: str) -> None:
        super().__init__("InvalidArgument", message)


class ConfigError(Exception):
    """A setting that cannot be used: one line naming the setting, the bad value and what is allowed; startup
    stops with exit code 2."""
