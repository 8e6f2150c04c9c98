"""What the classifier finds: a `Finding` per simple command (or other piece of text) with its tier and why, and
the `Classification` of a whole subject (its highest tier, the reasons for it, every piece as it was read)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Classification:
    tier: int
    reasons: tuple[str, ...]
    canonical: tuple[str, ...]


@dataclass(frozen=True)
class Finding:
    """One simple command (or other piece of text) with its tier; guarded mode admits per finding."""

    canonical: str
    tier: int
    reason: str
