"""Audit append with the chain on and fsync off (≥ 20,000 records/s) and `audit verify` (≥ 200,000 records/s).

The floors here are absolute targets from the issue; the script also prints a same-run reference (plain
os.write of the same bytes, and plain sha256 over them) so a slow machine shows up as such. The records come in
pairs, a start and an end record per call as the server writes them, so verify pairs them too. For information,
the start-up scan for interrupted calls over the same log (no earlier server:start: the whole file is read)."""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from pathlib import Path

import orjson

from benchmarks.common import Options, Row, run_alone, verdict
from relay_shell.audit.interrupted import MAX_SCAN_BYTES, find_interrupted
from relay_shell.audit.log import AuditLog
from relay_shell.audit.record import audit_arguments
from relay_shell.audit.verify import verify_files

RECORDS = 100_000
APPEND_TARGET = 20_000
VERIFY_TARGET = 200_000


def sample_record(index: int) -> dict[str, object]:
    call = index // 2
    common = {
        "v": 1,
        "ts": "2026-11-23T07:00:00.000000Z",
        "tool": "shell_exec",
        "call_id": f"3f9a1b2c4d5e-{call}",
        "tier": 1,
        "denied": False,
        "args": audit_arguments({"command": f"systemctl status nginx --no-pager # {call}", "timeout": 30}),
        "request_id": str(call),
        "client_id": "stdio:claude-code",
    }
    if index % 2 == 0:
        return {**common, "phase": "start", "decision": "admitted"}
    return {
        **common,
        "phase": "end",
        "outcome": "ok",
        "output_sha256": hashlib.sha256(str(call).encode()).hexdigest(),
        "output_len": 1234,
        "raw_sha256": hashlib.sha256(str(-call).encode()).hexdigest(),
        "raw_len": 1234,
        "exit_code": 0,
        "duration_ms": 12,
    }


def rows(options: Options) -> list[Row]:
    records = [sample_record(index) for index in range(RECORDS)]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "audit.jsonl"
        log = AuditLog(path, chain=True, fsync=False)
        log.open()
        started = time.perf_counter()
        for record in records:
            log.write(record)
        append_seconds = time.perf_counter() - started
        log.close()

        reference_path = Path(directory) / "plain.jsonl"
        lines = [orjson.dumps(record) + b"\n" for record in records]
        fd = os.open(reference_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        started = time.perf_counter()
        for line in lines:
            os.write(fd, line)
        plain_seconds = time.perf_counter() - started
        os.close(fd)

        started = time.perf_counter()
        result = verify_files([path])
        verify_seconds = time.perf_counter() - started
        assert result.ok and result.records == RECORDS and not result.interrupted, result.message

        started = time.perf_counter()
        previous = find_interrupted(path)
        scan_seconds = time.perf_counter() - started
        assert previous.interrupted == []
        scanned_mib = previous.scanned_bytes / 2**20

        started = time.perf_counter()
        for line in path.read_bytes().splitlines():
            hashlib.sha256(line).digest()
        hash_seconds = time.perf_counter() - started

    append_rate = RECORDS / append_seconds
    verify_rate = RECORDS / verify_seconds
    print(
        f"audit append (chain on, fsync off): {append_rate:,.0f} records/s (target ≥ {APPEND_TARGET:,}) "
        f"{verdict(append_rate, APPEND_TARGET, higher_is_better=True)}; "
        f"same-run reference plain os.write {RECORDS / plain_seconds:,.0f}/s"
    )
    print(
        f"audit verify: {verify_rate:,.0f} records/s (target ≥ {VERIFY_TARGET:,}) "
        f"{verdict(verify_rate, VERIFY_TARGET, higher_is_better=True)}; "
        f"same-run reference sha256 per line {RECORDS / hash_seconds:,.0f}/s"
    )
    print(
        f"start-up scan for interrupted calls: the last {scanned_mib:.1f} MiB of the {RECORDS:,}-record log in "
        f"{scan_seconds * 1000:.0f} ms (for information; bounded at {MAX_SCAN_BYTES // 2**20} MiB)"
    )
    return [
        Row(
            "audit append, chain on, fsync off",
            f"{append_rate:,.0f}/s",
            f"≥ {APPEND_TARGET:,}/s",
            append_rate >= APPEND_TARGET,
        ),
        Row("audit verify", f"{verify_rate:,.0f}/s", f"≥ {VERIFY_TARGET:,}/s", verify_rate >= VERIFY_TARGET),
    ]


def main(argv: list[str] | None = None) -> int:
    return run_alone(rows, argv)


if __name__ == "__main__":
    raise SystemExit(main())
