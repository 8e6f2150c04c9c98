"""The fuzzer's long run (issue 21): at least 50,000 tool calls (60,000 messages) against real relay-shell
servers in readonly mode, over stdio (both protocol eras) and streamable HTTP, with a random seed that is printed
so a run can be repeated. One stdio run ends with a line over the transport's 256 MiB limit.

Targets (all absolute, from the issue): 0 server exits, 0 unanswered requests, 0 `Internal` errors,
0 unaudited calls, largest audit record ≤ 64 KiB, the chain verifies; every other invariant of
tests/fuzz/checks.py (ids, the result grammar, outputSchemas, the lifecycle) holds too.

Usage: .venv/bin/python -m benchmarks.fuzz_long [--calls 60000] [--seed N] [--transport stdio|http|all]
       [--server-dir PATH]   (another checkout's server, e.g. the code before a fix)
`--calls` counts messages; about 85% of them are tool calls, the rest context requests and malformed JSON-RPC,
so the default gives ~51,000 tool calls (checked: ≥ 50,000). Takes 8–15 minutes on these machines.

`--bounded` runs the suite's bounded run instead (tests/e2e/hostile/test_fuzz_bounded.py: the same messages
with the same seed, 21 unless `--seed` is given, and the same checks, its 90 s bound included).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from pathlib import Path

from tests.fuzz.campaign import BOUNDED_SECONDS, BOUNDED_SEED, BOUNDED_TOOL_CALLS, run_bounded, run_campaign
from tests.fuzz.checks import Report
from tests.fuzz.peers import REPO

# (transport, era, share of the messages, message size of the "huge" cases)
RUNS = [
    ("stdio", "legacy", 0.40, 1024 * 1024),
    ("stdio", "modern", 0.15, 256 * 1024),
    ("http", "legacy", 0.45, 1024 * 1024),
]
ACCEPTANCE = {
    "server exits": lambda report: report.server_exits,  # each server process that died or exited with an error
    "unanswered requests": lambda report: (
        report.violations["unanswered"] + report.violations["answer with the wrong id"]
    ),
    "Internal errors": lambda report: report.violations["internal error"],
    "unaudited calls": lambda report: (
        report.violations["unaudited call"]
        + report.violations["a call that reached the server answered with a JSON-RPC error"]
    ),
    "records over 64 KiB": lambda report: report.violations["audit record over 64 KiB"],
    "chains that do not verify": lambda report: report.violations["audit chain does not verify"],
}


LONG_MESSAGES = 60_000
LONG_TOOL_CALLS = 50_000  # the size of the long run, checked when it runs at its default size


async def run(calls: int, seed: int, transports: list[str], server_dir: Path) -> bool:
    total = Report()
    selected = [run for run in RUNS if run[0] in transports]
    share_sum = sum(share for _, _, share, _ in selected)
    for index, (transport, era, share, huge) in enumerate(selected):
        count = round(calls * share / share_sum)
        run_seed = seed + index
        started = time.monotonic()
        report = await run_campaign(
            transport,
            count,
            run_seed,
            server_dir,
            era=era,
            huge_bytes=huge,
            oversized_line=transport == "stdio" and era == "legacy",
        )
        elapsed = time.monotonic() - started
        print(f"{transport} ({era} era), {count} messages, seed {run_seed}, {elapsed:.0f}s:", flush=True)
        print("  " + report.summary().replace("\n", "\n  "), flush=True)
        total.merge(report)
    ok = verdict(total)
    if calls >= LONG_MESSAGES and len(transports) == 2:
        calls_ok = total.tool_calls() >= LONG_TOOL_CALLS
        print(f"  tool calls: {total.tool_calls()} (target ≥ {LONG_TOOL_CALLS}) {'PASS' if calls_ok else 'FAIL'}")
        ok = ok and calls_ok
    return ok


def verdict(total: Report) -> bool:
    """Print the issue's targets for these runs together; whether all are met."""
    print(
        f"\nall runs: {total.calls} messages ({total.tool_calls()} tool calls), {total.records} audit records, "
        f"largest {total.largest_record} bytes"
    )
    ok = True
    for name, count_of in ACCEPTANCE.items():
        count = count_of(total)
        ok = ok and count == 0
        print(f"  {name}: {count} (target 0) {'PASS' if count == 0 else 'FAIL'}")
    record_ok = total.largest_record <= 64 * 1024
    print(f"  largest record: {total.largest_record} bytes (target ≤ 65536) {'PASS' if record_ok else 'FAIL'}")
    others = {name: count for name, count in total.violations.items() if count}
    print(f"  every invariant: {'PASS' if not others else 'FAIL ' + str(others)}")
    return ok and record_ok and not others


async def bounded(seed: int, server_dir: Path) -> bool:
    """The suite's bounded run, with its checks: every invariant, the tool calls and the time bound."""
    reports, elapsed = await run_bounded(server_dir, seed)
    total = Report()
    for transport, report in reports.items():
        print(f"{transport} (legacy era), seed {seed}:", flush=True)
        print("  " + report.summary().replace("\n", "\n  "), flush=True)
        total.merge(report)
    ok = verdict(total)
    calls_ok = total.tool_calls() >= BOUNDED_TOOL_CALLS
    print(f"  tool calls: {total.tool_calls()} (target ≥ {BOUNDED_TOOL_CALLS}) {'PASS' if calls_ok else 'FAIL'}")
    time_ok = elapsed <= BOUNDED_SECONDS
    print(f"  elapsed: {elapsed:.1f}s (target ≤ {BOUNDED_SECONDS:.0f}s) {'PASS' if time_ok else 'FAIL'}")
    return ok and calls_ok and time_ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=LONG_MESSAGES, help="messages")
    parser.add_argument("--seed", type=int, default=None, help="default: a random seed, printed")
    parser.add_argument("--transport", choices=["stdio", "http", "all"], default="all")
    parser.add_argument("--server-dir", type=Path, default=REPO)
    parser.add_argument("--bounded", action="store_true", help="the suite's bounded run (--calls, --transport unused)")
    options = parser.parse_args()
    if options.bounded:
        seed = BOUNDED_SEED if options.seed is None else options.seed
        print(f"fuzz bounded run: seed {seed}, server {options.server_dir}")
        ok = asyncio.run(bounded(seed, options.server_dir.resolve()))
        print("fuzz bounded run:", "all targets met" if ok else "targets missed")
        return 0 if ok else 1
    seed = options.seed if options.seed is not None else random.SystemRandom().randrange(2**31)
    transports = ["stdio", "http"] if options.transport == "all" else [options.transport]
    print(f"fuzz long run: {options.calls} messages, seed {seed}, transports {transports}, server {options.server_dir}")
    ok = asyncio.run(run(options.calls, seed, transports, options.server_dir.resolve()))
    print("fuzz long run:", "all targets met" if ok else "targets missed")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
