"""The invariants a fuzz run checks: on every answer (id, no internal error, the result grammar, the
outputSchema), and on the audit log at the end (one record for every tools/call sent that takes an answer,
refused ones included, no record over 64 KiB, the chain verifies, one client_id per connection).
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import orjson

from tests.fuzz.calls import Probe
from tests.fuzz.peers import answer_key

MAX_RECORD_BYTES = 64 * 1024
LONG_FIELD = 1024  # characters: longer request ids are recorded as head + tail + length + SHA-256
# The first line of an isError result: what failed, in the grammar of docs/contract.md ("Results").
ERROR_LINE = re.compile(
    r"\[(?:ERROR: [A-Z][A-Za-z0-9]*: .*|DENIED tier [0-3] \([a-z]+\): .*|TIMEOUT after [0-9.]+s.*"
    r"|CONFIRM REQUIRED tier 3: .*|CANCELLED)\]"
)
ERROR_STATUS = {"[ERROR": "error", "[DENIED": "denied", "[TIMEOUT": "timeout", "[CONFIRM": "confirm_required"}


# The six classes (issue 21), by the invariant that shows each.
CLASS_OF = {
    "server exited": 1,
    "server no longer serving at the end": 1,
    "server RSS unbounded": 1,
    "unanswered": 2,
    "answer with the wrong id": 2,
    "answered a message that takes no answer": 2,
    "an invalid message served as if valid": 2,
    "internal error": 3,
    "unaudited call": 3,
    "a call that reached the server answered with a JSON-RPC error": 3,
    "more than one audit record for a call": 3,
    "audit record over 64 KiB": 4,
    "audit chain does not verify": 4,
    "audit line is not JSON": 4,
    "a second initialize was accepted": 5,
    "a request before initialize was served": 5,
    "client_id changed within one connection": 5,
}  # anything else (grammar, outputSchema, statuses): 6


@dataclass
class Report:
    """Violations by invariant, each with a few examples."""

    calls: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    violations: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    largest_record: int = 0
    records: int = 0
    rss_start_kib: int = 0
    rss_end_kib: int = 0
    server_exits: int = 0

    def fail(self, invariant: str, example: str) -> None:
        self.violations[invariant] += 1
        shown = self.examples.setdefault(invariant, [])
        if len(shown) < 5:
            shown.append(example[:400])

    def merge(self, other: Report) -> None:
        self.calls += other.calls
        self.by_kind.update(other.by_kind)
        self.violations.update(other.violations)
        for invariant, shown in other.examples.items():
            self.examples.setdefault(invariant, []).extend(shown[: 5 - len(self.examples[invariant])])
        self.largest_record = max(self.largest_record, other.largest_record)
        self.records += other.records
        self.server_exits += other.server_exits

    def tool_calls(self) -> int:
        """The generated tool calls among the messages sent (the others: context requests, malformed messages)."""
        return sum(count for kind, count in self.by_kind.items() if kind.startswith("tool:"))

    def summary(self) -> str:
        lines = [
            f"{self.calls} messages ({self.tool_calls()} tool calls), {self.records} audit records, "
            f"largest record {self.largest_record} bytes, "
            f"server exits {self.server_exits}, RSS {self.rss_start_kib // 1024} -> {self.rss_end_kib // 1024} MiB"
        ]
        for invariant, count in sorted(self.violations.items()):
            lines.append(f"  VIOLATION {invariant}: {count}")
            lines.extend(f"      e.g. {example}" for example in self.examples.get(invariant, []))
        if not self.violations:
            lines.append("  no violations")
        else:
            classes = sorted({CLASS_OF.get(invariant, 6) for invariant in self.violations})
            lines.append(f"  issue 21 classes shown: {classes}")
        return "\n".join(lines)


class ResultChecker:
    """Checks one answer against its probe and the tools' outputSchemas."""

    def __init__(self, tools: list[dict[str, Any]], report: Report) -> None:
        self.report = report
        self.validators = {
            tool["name"]: jsonschema.validators.validator_for(tool["outputSchema"])(tool["outputSchema"])
            for tool in tools
            if tool.get("outputSchema")
        }

    def check(self, probe: Probe, answers: list[dict[str, Any]] | None) -> dict[str, Any] | None:
        """The probe's answer (None when it has none), after recording every violation it shows."""
        what = f"{probe.kind} {probe.line[:160]!r}"
        if answers is None:
            if probe.expect != "none":
                self.report.fail("unanswered", what)
            return None
        if probe.expect in ("none", "none_or_null"):
            allowed = probe.expect == "none_or_null"
            wrong = [answer for answer in answers if not (allowed and answer_key(answer) is None and "error" in answer)]
            if wrong:
                self.report.fail("answered a message that takes no answer", f"{what} -> {str(wrong[0])[:200]}")
            return None
        answer = self._matching(probe, answers)
        if answer is None:
            got = [str(answer_key(item)) for item in answers]
            self.report.fail("answer with the wrong id", f"{what} -> ids {got}")
            return None
        error = answer.get("error")
        if error is not None:
            self._check_error(error, what)
            if probe.expect == "result":
                self.report.fail("a call that reached the server answered with a JSON-RPC error", f"{what} -> {error}")
            return answer
        if probe.expect in ("null", "error"):
            self.report.fail("an invalid message served as if valid", f"{what} -> {str(answer)[:200]}")
        result = answer.get("result")
        if probe.method == "tools/call" and isinstance(result, dict) and "content" in result:
            self._check_tool_result(probe, result, what)
        return answer

    def _matching(self, probe: Probe, answers: list[dict[str, Any]]) -> dict[str, Any] | None:
        for answer in answers:
            key = answer_key(answer)
            if probe.expect == "null" and key is None:
                return answer
            if probe.expect == "null_or_id" and (key is None or key == probe.key):
                return answer
            if probe.expect not in ("null",) and probe.key is not None and key == probe.key:
                return answer
        return None

    def _check_error(self, error: Any, what: str) -> None:
        if not isinstance(error, dict) or not isinstance(error.get("code"), str | int):
            self.report.fail("malformed JSON-RPC error", f"{what} -> {error}")
            return
        code = int(error["code"])
        message = str(error.get("message", ""))
        if code == -32603 or code >= 0 or "Internal" in message or "Traceback" in message:
            self.report.fail("internal error", f"{what} -> {error}")

    def _check_tool_result(self, probe: Probe, result: dict[str, Any], what: str) -> None:
        content = result.get("content") or [{}]
        first_text = content[0].get("text") if isinstance(content[0], dict) else None
        if not isinstance(first_text, str):
            self.report.fail("result without a text block", what)
            return
        first = first_text.split("\n", 1)[0]
        if "Internal" in first or "Traceback" in first_text:
            self.report.fail("internal error", f"{what} -> {first[:200]}")
        if not (first.startswith("[") and first.endswith("]")):
            self.report.fail("first line outside the result grammar", f"{what} -> {first[:200]}")
        structured = result.get("structuredContent")
        is_error = bool(result.get("isError"))
        if is_error and not ERROR_LINE.fullmatch(first):
            self.report.fail("first line outside the result grammar", f"{what} -> isError, {first[:200]}")
        if not isinstance(structured, dict):
            self.report.fail("structuredContent missing", f"{what} -> {first[:200]}")
            return
        status = structured.get("status")
        if is_error != (status not in ("ok", "exit_nonzero", "running")):  # running: it yielded as a job (adr/0028)
            self.report.fail("isError and status disagree", f"{what} -> isError {is_error}, status {status}")
        if is_error and ERROR_STATUS.get(first.split(":", 1)[0].split(" ", 1)[0], status) != status:
            self.report.fail("first line and status disagree", f"{what} -> {first[:80]} / {status}")
        self._check_ssh_statuses(probe, structured, first, what)
        validator = self.validators.get(probe.tool or "")
        if validator is not None:
            problem = next(iter(validator.iter_errors(structured)), None)
            if problem is not None:
                self.report.fail(
                    "structuredContent outside the outputSchema",
                    f"{probe.tool} {first[:120]} -> {problem.message[:200]}",
                )

    def _check_ssh_statuses(self, probe: Probe, structured: dict[str, Any], first: str, what: str) -> None:
        """Every fuzzed SSH target is a closed port or a name no resolver knows: no host can answer, so no
        result may say one did (ok, a host key) or that it refused our login, unless a key_path was given
        (a local key that cannot be read fails before any connection)."""
        if not (probe.tool or "").startswith("ssh_") or b'"key_path"' in probe.line:
            return
        statuses = [str(host.get("status")) for host in structured.get("hosts") or [] if isinstance(host, dict)]
        claimed = [status for status in statuses if status in ("ok", "auth_failed", "hostkey_rejected")]
        if claimed or any(kind in first for kind in ("AuthFailed", "KeyUnusable", "HostKey")):
            self.report.fail("an SSH result claims a connection that never happened", f"{what} -> {first[:160]}")


def record_key(request_id: Any) -> str | None:
    if isinstance(request_id, dict) and "sha256" in request_id:
        return "sha256:" + str(request_id["sha256"])
    return None if request_id is None else str(request_id)


def probe_record_key(probe: Probe) -> str | None:
    """The id the probe's record carries, as `record_key` reads it; None when the probe has no id a record can
    be found by (a boolean, an object, an array, null, or none the server could see): `message_key` then."""
    if probe.record_id is not None:
        return probe.record_id
    if probe.key is None:
        return None
    text = probe.key[1]
    if len(text) > LONG_FIELD:
        return "sha256:" + hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()
    return text


def message_key(probe: Probe) -> str:
    """The digest a record of a tools/call refused before any tool saw it keeps of the message (adr/0016)."""
    return hashlib.sha256(probe.line).hexdigest()


def must_be_audited(probe: Probe) -> str:
    """Every tools/call that takes an answer has exactly one record, refusals by the transport included (issue
    30); other probes say what they need (prompts/get and resources/read: when served)."""
    if probe.method == "tools/call" and probe.expect not in ("none", "none_or_null"):
        return "once"
    return probe.audited


def calls_in(records: list[dict[str, Any]]) -> int:
    """How many calls these records stand for: one record, or a start and an end record sharing a call_id (with a
    `job` record between them when the call yielded as a job, adr/0028; its end comes when the job ends)."""
    by_call: dict[Any, list[str]] = {}
    single = 0
    for record in records:
        call_id = record.get("call_id")
        if call_id is None:
            single += 1
        else:
            by_call.setdefault(call_id, []).append(str(record.get("phase")))
    one_call = (["end", "start"], ["end"], ["start"], ["job", "start"], ["end", "job", "start"])
    paired = sum(1 for phases in by_call.values() if sorted(phases) in one_call)
    broken = len(by_call) - paired
    return single + paired + 10 * broken  # a call_id with other phases can never count as one call


def check_log(
    audit_path: Path,
    sent: list[tuple[Probe, dict[str, Any] | None]],
    report: Report,
    server_dir: Path,
    client_names: set[str],
) -> None:
    """The audit log after a run: sizes, one record per served call, the chain, one client per connection."""
    raw_lines = audit_path.read_bytes().splitlines() if audit_path.exists() else []
    report.records += len(raw_lines)
    records: list[dict[str, Any]] = []
    for number, line in enumerate(raw_lines, 1):
        report.largest_record = max(report.largest_record, len(line))
        if len(line) > MAX_RECORD_BYTES:
            report.fail("audit record over 64 KiB", f"line {number}: {len(line)} bytes, tool {line[:120]!r}")
        try:
            records.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            report.fail("audit line is not JSON", f"line {number}: {line[:120]!r}")
    by_request: dict[str, list[dict[str, Any]]] = {}
    by_message: Counter[str] = Counter()
    for record in records:
        key = record_key(record.get("request_id"))
        if key is not None:
            by_request.setdefault(key, []).append(record)
        if isinstance(record.get("message_sha256"), str):
            by_message[record["message_sha256"]] += 1
    # Probes whose record can only be found by the message's digest (several probes may send the same line).
    by_digest: dict[str, list[Probe]] = {}
    for probe, answer in sent:
        if probe.method not in ("tools/call",) and not probe.kind.startswith("context:"):
            continue
        audited = must_be_audited(probe)
        key = probe_record_key(probe)
        if key is None:
            if audited == "once":
                by_digest.setdefault(message_key(probe), []).append(probe)
            continue
        count = calls_in(by_request.get(key, []))
        served = answer is not None and "result" in answer
        if (audited == "once" and count != 1) or (audited == "once_if_result" and served and count != 1):
            invariant = "unaudited call" if count == 0 else "more than one audit record for a call"
            report.fail(invariant, f"{probe.kind} id {key[:40]} -> {count} records; {probe.line[:120]!r}")
        elif count > 1:
            report.fail("more than one audit record for a call", f"{probe.kind} id {key[:40]} -> {count} records")
    for digest, probes in by_digest.items():
        count = by_message[digest]
        expected = sum(probe.records for probe in probes)  # a batch: one record per call it holds
        if count != expected:
            invariant = "unaudited call" if count < expected else "more than one audit record for a call"
            shown = f"{probes[0].kind} message sha256 {digest[:16]} sent {len(probes)}x -> {count} records"
            shown += f" ({expected} expected)"
            report.fail(invariant, f"{shown}; {probes[0].line[:120]!r}")
    # Calls before initialize name no client (none was declared yet): every later record names the same one.
    before = {probe_record_key(probe) for probe, _ in sent if probe.kind.startswith("lifecycle:")}
    # A message the transport could not read names no client unless the connection had declared one (over HTTP
    # in the 2026-07-28 era, where a request's envelope is its only name, such a record is `http:unknown`).
    seen_clients = {
        str(record.get("client_id"))
        for record in records
        if record.get("request_id") is not None
        and record_key(record.get("request_id")) not in before
        and not ("message_sha256" in record and str(record.get("client_id")).endswith(":unknown"))
    }
    strangers = {client for client in seen_clients if not any(client.endswith(":" + name) for name in client_names)}
    if len(seen_clients) > 1 or strangers:
        report.fail("client_id changed within one connection", f"client ids in the log: {sorted(seen_clients)[:5]}")
    verified = subprocess.run(
        [sys.executable, "-m", "relay_shell", "audit", "verify", str(audit_path)],
        cwd=server_dir,
        env={"PYTHONPATH": str(server_dir), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    if verified.returncode != 0:
        report.fail("audit chain does not verify", (verified.stdout + verified.stderr)[-300:])
