"""ssh_fanout and ssh_check: one command (or `true`) on many hosts, each host admitted on its own, with a
per-host status and a bounded share of the output.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from relay_shell.arguments import MIN_OUTPUT, call_limits, command_text
from relay_shell.capture import BoundedCapture, CapturedText
from relay_shell.errors import ArgumentError, ToolError
from relay_shell.plan import Execution, Outcome, Plan, ProgressFn, Subject
from relay_shell.ssh.connection_args import ConnectionArgs
from relay_shell.ssh.hosts_argument import expand_hosts
from relay_shell.ssh.pool import ConnectFailed
from relay_shell.ssh.remote_exec import run_remote
from relay_shell.ssh.state import Ssh
from relay_shell.ssh.target import Route, host_subject, target_record

FANOUT_STATUSES = ("ok", "failed", "unreachable", "timeout", "denied", "auth_failed", "hostkey_rejected")
DEFAULT_PER_HOST_OUTPUT = 8192


@dataclass
class HostResult:
    name: str
    status: str
    duration_ms: int = 0
    exit_code: int | None = None
    signal: str | None = None
    output: CapturedText | None = None
    error: str | None = None
    target: dict[str, Any] | None = None
    host_key: str | None = None

    def fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"host": self.name, "status": self.status, "duration_ms": self.duration_ms}
        if self.exit_code is not None:
            fields["exit_code"] = self.exit_code
        if self.signal is not None:
            fields["signal"] = self.signal
        if self.output is not None:
            fields["output"] = self.output.text
            fields["output_bytes"] = self.output.produced_bytes
            fields["output_sha256"] = self.output.sha256
            fields["truncated"] = self.output.truncated
        if self.error is not None:
            fields["error"] = self.error
        return fields


def prepare_fanout(
    ssh: Ssh,
    *,
    command: str,
    hosts: str | list[str] | None,
    timeout: float,
    concurrency: int,
    max_output_per_host: int | None,
    connection: ConnectionArgs,
    check: bool = False,
) -> Plan:
    """ssh_fanout (and ssh_check, `check=True`: connect and run `true`)."""
    notes: list[str] = []
    settings = ssh.settings
    if not check:
        command = command_text(command)
    names = expand_hosts(ssh, hosts, empty_means_all=check)
    if concurrency < 1:
        raise ArgumentError(
            f"concurrency: {concurrency} is too small; allowed: 1 to {settings.ssh.fanout_max_concurrency}"
        )
    if concurrency > settings.ssh.fanout_max_concurrency:
        notes.append(
            f"concurrency {concurrency} lowered to {settings.ssh.fanout_max_concurrency} "
            "(RELAY_SHELL_FANOUT_MAX_CONCURRENCY)"
        )
        concurrency = settings.ssh.fanout_max_concurrency
    per_host = DEFAULT_PER_HOST_OUTPUT if max_output_per_host is None else max_output_per_host
    timeout_value, budget = call_limits(settings, timeout, per_host, notes, "max_output_per_host")
    share = max(MIN_OUTPUT, settings.limits.max_output_hard // len(names))
    if budget > share:
        # The whole result (every host's output, in text and structuredContent) stays within the hard cap.
        notes.append(
            f"max_output_per_host {budget} lowered to {share} for {len(names)} hosts "
            f"(RELAY_SHELL_MAX_OUTPUT_HARD={settings.limits.max_output_hard} in all)"
        )
        budget = share
    routes = ssh.routes_of(names, connection)
    # A host is admitted on what is its own (spellings, how it is reached); the command, the call's subject, is
    # decided once for all (the runner takes the higher tier): per host it cost 40-150 us (ADR 0029 Round 6).
    host_subjects = {
        name: host_subject(route, connection, fixed_tier=0 if check else None) for name, route in routes.items()
    }
    fingerprints: dict[str, str] = {}  # each key file's, read once for all hosts
    targets = {name: target_record(route, fingerprints) for name, route in routes.items()}

    async def execute(progress: ProgressFn) -> Execution:
        started = time.monotonic()
        results: dict[str, HostResult] = {}
        gate = asyncio.Semaphore(concurrency)
        done = 0

        async def one(name: str) -> None:
            nonlocal done
            async with gate:
                results[name] = await _run_one(ssh, name, routes[name], command, timeout_value, budget, check, plan)
            results[name].target = targets[name]
            done += 1
            await progress(done)

        await asyncio.gather(*(one(name) for name in names))
        ordered = [results[name] for name in names]
        for result in ordered:
            targets[result.name]["status"] = result.status
            if result.host_key is not None:
                targets[result.name]["host_key"] = result.host_key
        return _fanout_execution(ordered, settings.limits.max_output_hard, time.monotonic() - started, check)

    plan = Plan(
        subject=Subject(command=None if check else command, fixed_tier=0 if check else None),
        execute=execute,
        notes=notes,
        timeout=timeout_value,
        target={"hosts": list(targets.values())},
        host_subjects=host_subjects,
        progress_total=len(names),
        progress_unit="hosts done",
    )
    return plan


async def _run_one(
    ssh: Ssh, name: str, route: Route, command: str, timeout: float, budget: int, check: bool, plan: Plan
) -> HostResult:
    started = time.monotonic()
    denied = plan.denied_hosts.get(name)
    if denied is not None:
        return HostResult(name, "denied", error=denied)
    try:
        outcome = await run_remote(
            ssh.pool,
            route,
            "true" if check else command,
            stdin=None,
            timeout=timeout,
            budget=budget,
            merge_stderr=True,
            progress=None,
        )
    except ConnectFailed as exc:
        status = exc.status if exc.status in FANOUT_STATUSES else "unreachable"
        return HostResult(name, status, _ms(started), error=f"{exc.kind}: {exc}")
    except ToolError as exc:
        return HostResult(name, "unreachable", _ms(started), error=f"{exc.kind}: {exc}")
    except Exception as exc:  # one host's surprise must not cost the other hosts their results
        return HostResult(name, "unreachable", _ms(started), error=f"{type(exc).__name__}: {exc}"[:300])
    if outcome.timed_out:
        status = "timeout"
    elif outcome.exit_code == 0:
        status = "ok"
    else:
        status = "failed"
    return HostResult(
        name,
        status,
        _ms(started),
        exit_code=outcome.exit_code,
        signal=outcome.signal,
        output=None if check else outcome.stdout,
        error=f"TIMEOUT after {timeout:g}s" if outcome.timed_out else None,
        host_key=outcome.host_key,
    )


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def _fanout_execution(results: list[HostResult], budget: int, elapsed: float, check: bool) -> Execution:
    counts = {status: 0 for status in FANOUT_STATUSES}
    for result in results:
        counts[result.status] += 1
    summary = ", ".join(f"{count} {status}" for status, count in counts.items() if count)
    what = "check" if check else "fanout"
    headline = f"[{what} {len(results)} hosts: {summary} | {elapsed:.1f}s]"
    lines: list[str] = []
    for result in results:
        detail = result.status
        if result.exit_code is not None and not (check and result.status == "ok"):
            detail += f" exit {result.exit_code}"
        if result.signal is not None:
            detail += f" signal {result.signal}"
        detail += f" {result.duration_ms}ms"
        if result.error:
            detail += f" | {result.error}"
        lines.append(f"=== {result.name}: {detail}")
        if result.output is not None and result.output.text:
            lines.append(result.output.text.rstrip("\n"))
            if result.output.truncated:
                lines.append(
                    f"[TRUNCATED: {result.output.produced_bytes} bytes produced, {result.output.shown_bytes} shown]"
                )
    body = BoundedCapture(budget)
    body.feed(("\n".join(lines) + "\n").encode("utf-8", errors="surrogateescape"))
    ran = counts["ok"] + counts["failed"] + counts["timeout"]
    status: Outcome
    if counts["ok"] == len(results):
        status = "ok"
    elif counts["denied"] == len(results):
        status = "denied"
    elif ran == 0:
        status = "error"
    else:
        status = "exit_nonzero"
    return Execution(
        status=status,
        output=body.result(),
        # An error or a refusal starts with its grammar line ([ERROR: …] / [DENIED …]); the per-host lines follow.
        headline=headline if status in ("ok", "exit_nonzero") else None,
        error=_no_host_error(status, what, len(results), summary, elapsed),
        fields={"hosts": [result.fields() for result in results], "summary": counts},
    )


def _no_host_error(status: Outcome, what: str, hosts: int, summary: str, elapsed: float) -> str | None:
    if status == "error":
        return f"NoHostReached: {what} {hosts} hosts: {summary} | {elapsed:.1f}s"
    if status == "denied":
        return f"every host was refused ({what} {hosts} hosts: {summary})"
    return None
