"""Run every benchmark and print the ratios against floors measured in the same run.

Usage: .venv/bin/python -m benchmarks.run_all
"""

from __future__ import annotations

import anyio

from benchmarks import (
    bench_audit,
    bench_audit_shipping,
    bench_big_output,
    bench_containment,
    bench_exec_latency,
    bench_exec_trace,
    bench_http,
    bench_policy,
    bench_redact,
    bench_report,
    bench_runbooks,
    bench_session_flood,
    bench_session_repl,
    bench_ssh_exec,
    bench_ssh_fanout,
    bench_ssh_forward,
    bench_ssh_transfer,
    bench_startup,
    bench_strip_ansi,
)


def main() -> int:
    results = {
        "audit": bench_audit.main(),
        "policy": bench_policy.main([]),
        "redact": bench_redact.main(),
        "startup": bench_startup.main(),
        "exec_latency": anyio.run(bench_exec_latency.main),
        "containment": anyio.run(bench_containment.main),
        "big_output": anyio.run(bench_big_output.main),
        "strip_ansi": bench_strip_ansi.main(),
        "session_repl": anyio.run(bench_session_repl.main),
        "session_flood": anyio.run(bench_session_flood.main),
        "ssh_exec": anyio.run(bench_ssh_exec.main),
        "http": anyio.run(bench_http.main),
        "ssh_fanout": anyio.run(bench_ssh_fanout.main),
        "ssh_forward": anyio.run(bench_ssh_forward.main),
        "ssh_transfer": anyio.run(bench_ssh_transfer.main),
        "runbooks": bench_runbooks.main(),
        "audit_shipping": bench_audit_shipping.main(),
        "exec_trace": anyio.run(bench_exec_trace.main),
        "report": bench_report.main(),
    }
    failed = [name for name, ok in results.items() if not ok]
    print("benchmarks:", "all targets met" if not failed else "missed: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
