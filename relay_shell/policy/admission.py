"""Admission: deny patterns first in every mode, then the mode (open, guarded, readonly) over the tiers.

The patterns are RE2 (settings/patterns.py): matched against text an AI client wrote, in time linear in the text
whatever the pattern; the settings hand them over compiled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from relay_shell.plan import Subject
from relay_shell.settings.patterns import Regex, compile_re2, matches
from relay_shell.tiers import TIER_NAMES


@dataclass(frozen=True)
class Decision:
    tier: int
    tier_name: str
    denied: bool
    reason: str  # why denied, or the main reason for the tier; one line
    canonical: tuple[str, ...]


class Policy:
    def __init__(self, mode: str, deny: Sequence[str | Regex] = (), allow: Sequence[str | Regex] = ()) -> None:
        """`deny` and `allow` compiled (settings.policy) or as text (compiled here; ValueError naming a pattern RE2
        does not accept)."""
        if mode not in ("open", "guarded", "readonly"):
            raise ValueError(f"policy mode {mode!r} is not one of open, guarded, readonly")
        self.mode = mode
        self.deny = compile_re2(deny)
        self.allow = compile_re2(allow)

    def decide(self, subject: Subject) -> Decision:
        # The classifier (its tables and every rule module, ~10 ms to import) loads on the first call, not at
        # every server start.
        from relay_shell.policy.classify import analyze

        findings = analyze(subject)
        tier = max((finding.tier for finding in findings), default=0)
        canonical = tuple(finding.canonical for finding in findings if finding.canonical)
        top = next((finding for finding in findings if finding.tier == tier), None)
        reason = _one_line(top.reason if top else "nothing to run")

        def refuse(why: str) -> Decision:
            return Decision(tier, TIER_NAMES[tier], True, _one_line(why), canonical)

        if self.deny:
            texts = [*_raw_texts(subject), *canonical]
            for pattern in self.deny:
                if any(matches(pattern, text) for text in texts):
                    return refuse(f"matches deny pattern {pattern.pattern!r}")
        if self.mode == "readonly" and tier > 0:
            return refuse(f"mode readonly admits tier 0 only; {reason}")
        if self.mode == "guarded" and tier >= 2:
            for finding in findings:
                if finding.tier >= 2 and not any(matches(pattern, finding.canonical) for pattern in self.allow):
                    return refuse(
                        f"mode guarded refuses tier {finding.tier} without an allow pattern: {finding.reason} "
                        f"({finding.canonical[:120]})"
                    )
        return Decision(tier, TIER_NAMES[tier], False, reason, canonical)


def _raw_texts(subject: Subject) -> list[str]:
    texts = [text for text in (subject.command, subject.script, subject.stdin, subject.typed) if text]
    if subject.argv:
        texts.append(" ".join(subject.argv))
    texts += [f"{name}={value or ''}" for name, value in subject.env]
    texts += subject.hosts
    return texts


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]
