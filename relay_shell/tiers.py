"""Tier numbers and their names: 0 observe, 1 reversible, 2 stateful, 3 irreversible (ADR 0004)."""

from __future__ import annotations

TIER_NAMES: dict[int, str] = {0: "observe", 1: "reversible", 2: "stateful", 3: "irreversible"}
