"""The five connection arguments every SSH tool takes (`user`, `port`, `key_path`, `known_hosts`, `jump`), as one
value: what a route is resolved and cached by."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConnectionArgs:
    user: str | None = None
    port: int | None = None
    key_path: str | None = None
    known_hosts: str | None = None
    jump: str | None = None
