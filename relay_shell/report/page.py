"""The report's HTML: one self-contained file (adr/0023).

What a reader needs first is written as HTML here, readable without JavaScript: the trust banner, the summary with
its SVG charts, the exceptions. The timeline and each call's page are drawn by report.js from the data blobs that
follow them in the same file. The page's Content-Security-Policy allows nothing but its own script and style (by
hash): no request of any kind can leave it, and markup smuggled in through a logged command could not run.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass
from html import escape
from importlib import resources
from pathlib import Path
from typing import IO, Any

from relay_shell import __version__
from relay_shell.report import charts
from relay_shell.report.blobs import ChunkedDetails, compressed_json, element
from relay_shell.report.calls import KINDS, Timeline, Window
from relay_shell.report.summary import Summary
from relay_shell.report.transcripts import Match
from relay_shell.report.verdict import Verdict

TITLE = "relay-shell audit report"
DATA_MARK = "@DATA@"
OPEN_UP_TO = 25  # an exception kind with more rows starts folded, so the next kinds stay in view
LEVEL_WORD = {"ok": "OK", "note": "NOTE", "warn": "WARNING", "fail": "FAILED"}


@dataclass(frozen=True)
class Inputs:
    paths: list[Path]
    public_keys: list[Path]
    against: Path | None
    record_dir: Path | None
    window: Window


def template(name: str) -> str:
    return (resources.files("relay_shell.report") / "templates" / name).read_text(encoding="ascii")


def _script() -> str:
    """The page's one script: its three parts in one function scope (the timeline's part last: it starts the page)."""
    parts = [template(name) for name in ("report-data.js", "report-call.js", "report-timeline.js")]
    return '\n(function () {\n"use strict";\n' + "\n".join(parts) + "})();\n"


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def write_page(
    output: Path,
    inputs: Inputs,
    found: Verdict,
    records: int,
    summary: Summary,
    timeline: Timeline,
    transcripts: list[Match],
    rows: bytes,
    spool: IO[bytes],
) -> None:
    """Write the page to `output` (through a temporary file beside it, renamed when complete)."""
    script, style = _script(), template("report.css")
    csp = (
        f"default-src 'none'; script-src {_csp_hash(script)}; style-src {_csp_hash(style)}; img-src 'none'; "
        "base-uri 'none'; form-action 'none'"
    )
    head, tail = template("report.html").split(DATA_MARK)
    replacements = {
        "@CSP@": csp,
        "@TITLE@": TITLE,
        "@CSS@": style,
        "@HEADER@": _header(inputs, records, summary),
        "@BANNER@": _banner(found),
        "@EXCEPTION_COUNT@": str(summary.flagged),
        "@ROW_COUNT@": str(summary.calls + summary.events),
        "@SUMMARY@": _summary(summary),
        "@EXCEPTIONS@": _exceptions(summary),
    }
    # One pass: a mark inside substituted text (a logged client named `@EXCEPTIONS@`, a log file under a directory
    # named `@SUMMARY@`) is data, never substituted in turn (review S6).
    head = re.sub(r"@[A-Z_]+@", lambda found: replacements.get(found.group(0), found.group(0)), head)
    meta = {
        "chunk": ChunkedDetails.CHUNK,
        "names": {
            "clients": timeline.clients.names,
            "tools": timeline.tools.names,
            "hosts": timeline.hosts.names,
            "decisions": timeline.decisions.names,
            "outcomes": timeline.outcomes.names,
        },
        "kinds": KINDS,
        "transcripts": {match.session_id: asdict(match) for match in transcripts},
    }
    temporary = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as handle:
            handle.write(head.encode("ascii", "xmlcharrefreplace"))
            spool.seek(0)
            shutil.copyfileobj(spool, handle, 1 << 20)
            handle.write(element("rows", rows))
            handle.write(element("meta", compressed_json(meta)))
            handle.write(tail.replace("@JS@", script).encode("ascii"))
        os.replace(temporary, output)
    finally:
        temporary.unlink(missing_ok=True)


def _header(inputs: Inputs, records: int, summary: Summary) -> str:
    def size(path: Path) -> str:
        try:
            return f"{path.stat().st_size:,} bytes"
        except OSError:
            return "unreadable"

    window = inputs.window
    shown = [
        f"since {window.since}" if window.since else "",
        f"until {window.until}" if window.until else "",
        f"client {window.client}" if window.client else "",
    ]
    rows = [
        ("Log file(s), oldest first", "<br>".join(f"{escape(str(path))} ({size(path)})" for path in inputs.paths)),
        ("Records read", f"{records:,}"),
        ("Calls shown", f"{summary.calls:,} calls and {summary.events:,} other events"),
        ("Time span", f"{escape(summary.first_ts or '-')} to {escape(summary.last_ts or '-')} (UTC)"),
        ("Shown", escape(", ".join(part for part in shown if part) or "the whole log")),
        ("Public key(s)", escape(", ".join(str(path) for path in inputs.public_keys) or "none given")),
        ("Collector's copy", escape(str(inputs.against) if inputs.against else "none given")),
        ("Transcripts from", escape(str(inputs.record_dir) if inputs.record_dir else "none given")),
        ("Written", f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC by relay-shell {escape(__version__)}"),
    ]
    return "<dl>" + "".join(f"<dt>{name}</dt><dd>{value}</dd>" for name, value in rows) + "</dl>"


def _banner(found: Verdict) -> str:
    parts = [f'<section id="trust" class="banner {found.level}"><h2>{escape(found.headline)}</h2>']
    for finding in found.findings:
        lines = "".join(f"<li>{escape(line)}</li>" for line in finding.lines)
        links = " ".join(f'<a href="{escape(href)}">{escape(label)}</a>' for href, label in finding.links)
        parts.append(
            f'<div class="finding {finding.level}"><strong>{LEVEL_WORD[finding.level]}</strong> '
            f"{escape(finding.title)}<ul>{lines}</ul>{'<p>Open: ' + links + '</p>' if links else ''}</div>"
        )
    return "".join(parts) + "</section>"


def _figure(label: str, value: int, alert: bool = False) -> str:
    return f'<div class="figure{" alert" if alert and value else ""}"><b>{value:,}</b>{escape(label)}</div>'


def _summary(summary: Summary) -> str:
    counts = summary.kind_counts
    figures = "".join(
        [
            _figure("calls", summary.calls),
            _figure("clients", len(summary.clients)),
            _figure("sessions", summary.sessions),
            _figure("denied", counts["denied"], True),
            _figure("tier-3 confirmations", len(summary.flows)),
            _figure("timeouts", counts["timeout"], True),
            _figure("errors", counts["error"], True),
            _figure("interrupted or running", counts["unended"], True),
            _figure("records failing verification", counts["trust"], True),
        ]
    )
    chart_parts = [
        charts.calls_per_hour(summary.per_hour),
        charts.bars("Top tools", summary.top(summary.tools)),
        charts.bars("Top hosts", summary.top(summary.hosts), "bar bar-host"),
        charts.bars("Calls per client", summary.top(summary.clients, 20), "bar bar-client"),
    ]
    outcomes = ", ".join(f"{escape(name)} {count:,}" for name, count in summary.outcomes.most_common())
    tiers = ", ".join(f"tier {tier}: {count:,}" for tier, count in sorted(summary.tiers.items()))
    return (
        f'<div class="figures">{figures}</div><p>Outcomes: {outcomes or "none"}. {tiers}.</p>'
        f'<div class="charts">{"".join(chart_parts)}</div>{_policies(summary.servers)}{_denials(summary)}'
    )


def _policies(servers: list[dict[str, Any]]) -> str:
    rows = []
    for record in servers:
        policy = record.get("policy")
        if isinstance(policy, dict):
            cells = [policy.get(name, "") for name in ("mode", "confirm_tier3", "exec_trace", "gate")]
        else:
            cells = ["not recorded (a server older than the policy field)", "", "", ""]
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{escape(str(value))}</td>"
                for value in (record.get("ts", ""), record.get("pid", ""), record.get("version", ""), *cells)
            )
            + f"<td>{escape(str(record.get('interrupted_count', 0)))}</td></tr>"
        )
    head = "".join(
        f"<th>{name}</th>"
        for name in (
            "server started (UTC)",
            "pid",
            "version",
            "policy mode",
            "tier-3 confirmation",
            "exec trace",
            "briefing gate",
            "calls it found interrupted",
        )
    )
    body = "".join(rows) or '<tr><td colspan="8">No server:start record in the report.</td></tr>'
    return f"<h3>Policy in force (from server:start records)</h3><table><tr>{head}</tr>{body}</table>"


def _denials(summary: Summary) -> str:
    if not summary.denials:
        return ""
    rows = "".join(
        f"<tr><td>{tier}</td><td>{escape(reason)}</td><td>{count:,}</td></tr>"
        for (tier, reason), count in summary.denials.most_common(50)
    )
    return (
        f"<h3>Denials by tier and reason</h3><table><tr><th>tier</th><th>reason</th><th>calls</th></tr>{rows}</table>"
    )


def _exceptions(summary: Summary) -> str:
    parts = []
    for name, label in KINDS:
        count = summary.kind_counts[name]
        if not count:
            continue
        listed = summary.listed[name]
        rows = "".join(
            f'<tr><td><a href="#row={entry.index}">{escape(entry.ts)}</a></td><td>{escape(entry.client)}</td>'
            f'<td>{escape(entry.tool)}</td><td>{escape(entry.hosts)}</td><td class="what">{escape(entry.summary)}'
            f"</td><td>{escape(entry.outcome)}</td><td>{escape(entry.note)}</td></tr>"
            for entry in listed
        )
        more = (
            f'<p>{count - len(listed):,} more: <a href="#kind={name}">show them all in the timeline</a>.</p>'
            if count > len(listed)
            else ""
        )
        extra = _flows(summary) if name == "confirm" else ""
        opened = " open" if count <= OPEN_UP_TO else ""
        parts.append(
            f'<details{opened} id="kind-{name}"><summary>{escape(label)} ({count:,})</summary>{extra}'
            "<table><tr><th>time (UTC)</th><th>client</th><th>tool</th><th>host(s)</th><th>what</th><th>outcome</th>"
            f"<th>reason or problem</th></tr>{rows}</table>{more}</details>"
        )
    return "".join(parts) or "<p>No exceptions: every call was admitted, ran and ended on its own.</p>"


def _flows(summary: Summary) -> str:
    """Each tier-3 confirmation step by step: who was asked, what was confirmed, when."""
    rows = []
    for digest, flow in list(summary.flows.items())[:100]:
        steps = "<br>".join(
            f'<a href="#row={row}">{escape(ts)}</a> {escape(tool)} by {escape(client)}: {escape(what)}'
            for ts, tool, what, client, row in flow.steps
        )
        rows.append(
            f'<tr><td class="what">{escape(flow.summary)}</td><td>{steps}</td>'
            f'<td class="mono">{escape(digest[:16])}…</td></tr>'
        )
    return (
        "<table><tr><th>what was to run</th><th>steps (asked, confirmed, ran)</th><th>confirmation</th></tr>"
        + "".join(rows)
        + "</table>"
    )
