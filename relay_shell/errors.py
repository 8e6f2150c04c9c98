"""What a call that cannot proceed raises: a ToolError is reported as `[ERROR: Kind: message]`, an ArgumentError
names the argument, the problem and what is allowed. Depends on nothing.
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
