"""The summary's charts as plain inline SVG, made here: no script, no charting service, readable without JavaScript
(each bar's exact count is in its <title>, which browsers show on hover)."""

from __future__ import annotations

import time
from collections import Counter
from html import escape

HOUR_MS = 3_600_000
MAX_BARS = 168  # a week of hours; a longer log is shown in longer buckets
BUCKETS_HOURS = (1, 2, 3, 6, 12, 24, 48, 168, 720)
WIDTH = 900
BARS_WIDTH = 600
MAX_BAR_WIDTH = 40
PLOT_HEIGHT = 160
# Outcome colours (CSS classes in report.css): the usual first, then the exceptions.
OUTCOME_ORDER = ("ok", "exit_nonzero", "confirm_required", "gated", "timeout", "denied", "error", "cancelled")


def outcome_class(outcome: str) -> str:
    return f"o-{outcome}" if outcome in OUTCOME_ORDER or outcome in ("interrupted", "unended") else "o-other"


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(ms // 1000))


def calls_per_hour(per_hour: Counter[tuple[int, str]]) -> str:
    """Stacked bars: calls per hour (or per longer bucket for a long log) by outcome."""
    if not per_hour:
        return '<p class="muted">No calls in the report.</p>'
    hours = sorted({hour for hour, _ in per_hour})
    first, last = hours[0], hours[-1]
    span_hours = (last - first) // HOUR_MS + 1
    bucket_hours = next((size for size in BUCKETS_HOURS if span_hours / size <= MAX_BARS), BUCKETS_HOURS[-1])
    bucket_ms = bucket_hours * HOUR_MS
    stacks: dict[int, Counter[str]] = {}
    for (hour, outcome), count in per_hour.items():
        stacks.setdefault((hour - first) // bucket_ms, Counter())[outcome] += count
    bars = (last - first) // bucket_ms + 1
    tallest = max(sum(stack.values()) for stack in stacks.values())
    bar_width = min(WIDTH / bars, MAX_BAR_WIDTH)
    outcomes = sorted({outcome for _, outcome in per_hour}, key=_outcome_rank)
    shapes = []
    for position, stack in sorted(stacks.items()):
        x = position * bar_width
        y = float(PLOT_HEIGHT)
        started = first + position * bucket_ms
        for outcome in outcomes:
            count = stack.get(outcome, 0)
            if not count:
                continue
            height = count / tallest * PLOT_HEIGHT
            y -= height
            label = f"{_when(started)} UTC, {bucket_hours} h: {count} {outcome}"
            shapes.append(
                f'<rect class="{outcome_class(outcome)}" x="{x:.1f}" y="{y:.1f}" width="{max(bar_width - 1, 1):.1f}" '
                f'height="{height:.1f}"><title>{escape(label)}</title></rect>'
            )
    unit = "hour" if bucket_hours == 1 else f"{bucket_hours} hours"
    legend = " ".join(f'<span class="key {outcome_class(outcome)}"></span>{escape(outcome)}' for outcome in outcomes)
    return (
        f'<figure class="chart wide"><figcaption>Calls per {unit} by outcome (UTC; the tallest bar is {tallest} '
        f"calls)</figcaption>"
        f'<svg viewBox="0 0 {WIDTH} {PLOT_HEIGHT + 18}" role="img" aria-label="calls per {unit} by outcome">'
        f'<line class="axis" x1="0" y1="{PLOT_HEIGHT}" x2="{WIDTH}" y2="{PLOT_HEIGHT}"/>{"".join(shapes)}'
        f'<text x="0" y="{PLOT_HEIGHT + 14}">{_when(first)}</text>'
        f'<text x="{WIDTH}" y="{PLOT_HEIGHT + 14}" text-anchor="end">{_when(last + bucket_ms)}</text></svg>'
        f'<div class="legend">{legend}</div></figure>'
    )


def _outcome_rank(outcome: str) -> int:
    return OUTCOME_ORDER.index(outcome) if outcome in OUTCOME_ORDER else len(OUTCOME_ORDER)


def bars(title: str, items: list[tuple[str, int]], css_class: str = "bar") -> str:
    """Horizontal bars with their labels and counts: top tools, top hosts, calls per client."""
    if not items:
        return f'<figure class="chart"><figcaption>{escape(title)}</figcaption><p class="muted">none</p></figure>'
    row_height = 20
    label_width = 220
    tallest = max(count for _, count in items)
    rows = []
    for position, (label, count) in enumerate(items):
        y = position * row_height
        width = count / tallest * (BARS_WIDTH - label_width - 70)
        shown = label if len(label) <= 32 else label[:31] + "…"
        rows.append(
            f'<text x="{label_width - 6}" y="{y + 14}" text-anchor="end">{escape(shown)}<title>{escape(label)}</title>'
            f'</text><rect class="{css_class}" x="{label_width}" y="{y + 3}" width="{max(width, 1):.1f}" height="14">'
            f"<title>{escape(label)}: {count}</title></rect>"
            f'<text x="{label_width + width + 6:.1f}" y="{y + 14}">{count}</text>'
        )
    height = len(items) * row_height
    return (
        f'<figure class="chart"><figcaption>{escape(title)}</figcaption>'
        f'<svg viewBox="0 0 {BARS_WIDTH} {height}" role="img" aria-label="{escape(title)}">{"".join(rows)}</svg>'
        "</figure>"
    )
