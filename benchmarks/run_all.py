"""Run every benchmark, then print one table of every row: its value, its target, PASS or MISS.

Usage: .venv/bin/python -m benchmarks.run_all [--only NAME,NAME] [--before REV]

Each benchmark prints its detail lines (floors, medians, spreads) as it runs, and returns its rows (the shape is in
benchmarks/common.py). The table ends with issue 27's rows, every one of them: a row no benchmark returned is
missed ("not measured", with the benchmark that should measure it). `--before` names the commit measured side by
side for the rows "vs before" (default: main before the renovation, for issue 25's rows; `none` to skip them).
A benchmark that fails with an exception is a missed row with the error, and the others still run.

A benchmark module that still returns one verdict from `main()` (not yet rows) is run as one row, "all targets".
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import time
import traceback
from collections.abc import Callable
from types import ModuleType
from typing import Any

import anyio

from benchmarks.common import ISSUE_27_ROWS, RENOVATION_BASE, Options, Row, parse_options, print_table

# In the order they run: the quick, machine-independent ones first, the ones that start fleets last.
BENCHMARKS = (
    "bench_audit",
    "bench_policy",
    "bench_redact",
    "bench_strip_ansi",
    "bench_startup",
    "bench_exec_latency",
    "bench_containment",
    "bench_big_output",
    "bench_session_repl",
    "bench_session_flood",
    "bench_http",
    "bench_exec_trace",
    "bench_confinement",
    "bench_session_typing",
    "bench_jobs",
    "bench_ssh_exec",
    "bench_ssh_fanout",
    "bench_ssh_forward",
    "bench_ssh_transfer",
    "bench_runbooks",
    "bench_audit_shipping",
    "bench_report",
)


def run_benchmark(name: str, options: Options) -> list[Row]:
    module = importlib.import_module(f"benchmarks.{name}")
    rows_of: Callable[[Options], list[Row]] | None = getattr(module, "rows", None)
    if rows_of is not None:
        return rows_of(options)
    return [Row(f"{name}: all targets", "see above", "its own", _legacy_verdict(module))]


def _legacy_verdict(module: ModuleType) -> bool:
    main: Callable[..., Any] = module.main
    if inspect.iscoroutinefunction(main):
        return bool(anyio.run(main))
    return bool(main([]) if inspect.signature(main).parameters else main())


def issue_27_table(measured: dict[str, list[Row]]) -> list[Row]:
    """Issue 27's rows, each as measured, or missed with the benchmark that should have measured it."""
    found = {row.name: row for rows in measured.values() for row in rows}
    table = []
    for name, module in ISSUE_27_ROWS.items():
        if name in found:
            table.append(found[name])
        elif module in measured:
            table.append(Row(name, "not measured", f"({module} gave no such row)", False))
        else:
            table.append(Row(name, "not measured", f"({module} not run)", False))
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks.run_all", description=__doc__.split("\n")[0])
    parser.add_argument("--only", help="comma-separated benchmark names (bench_startup,bench_http)")
    parser.add_argument("--before", default=RENOVATION_BASE, help="the commit of the rows vs before")
    arguments = parser.parse_args(argv)
    options = parse_options(["--before", arguments.before])
    names = arguments.only.split(",") if arguments.only else list(BENCHMARKS)
    measured: dict[str, list[Row]] = {}
    for name in names:
        print(f"== {name}", flush=True)
        started = time.monotonic()
        try:
            measured[name] = run_benchmark(name, options)
        except Exception as exc:  # one broken benchmark must not hide the others' rows
            traceback.print_exc()
            measured[name] = [Row(f"{name}", f"error: {type(exc).__name__}: {exc}"[:80], "runs", False)]
        print(f"   ({time.monotonic() - started:.0f} s)", flush=True)
    every_row = [row for rows in measured.values() for row in rows]
    issue_27 = issue_27_table(measured) if not arguments.only else []
    print()
    print("All rows, each benchmark's in turn:")
    print_table(every_row)
    if issue_27:
        print()
        print("Issue 27's table:")
        print_table(issue_27)
    missed = [row.name for row in every_row + issue_27 if not row.passed]
    print()
    print("benchmarks:", "every target met" if not missed else f"{len(missed)} row(s) missed")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
