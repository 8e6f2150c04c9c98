"""Shipping the audit log to a real loopback rsyslog (adr/0020).

1. `shell_exec true` through a real stdio client with shipping (TCP to rsyslog), signed checkpoints every 100
   records (so several are signed during the measured calls) and metrics on (a loopback /metrics listener, as a
   team deployment has it), median latency vs the bare MCPServer floor measured in the same run, batches
   interleaved as in bench_exec_latency: target ≤ 1.10×. relay-shell without shipping is shown for information.
2. Catching up: the server starts on a log of 100,000 records it has not shipped (what a collector outage leaves)
   and `shell_exec true` is measured while it ships them (batches whose before and after `server_info` both show
   a lag), against the floor measured between those batches and after the catch-up (the worse ratio counts):
   target ≤ 1.10× (review of issue 20, finding 3).
3. Throughput: a log of 50,000 realistic records (a shell_exec end record, ~600 bytes) shipped from its start by the
   shipper, timed until rsyslog has written every one: target ≥ 20,000 records/s.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from benchmarks.bench_exec_latency import measure
from benchmarks.common import Options, Row, bare_client, median, relay_client, run_alone, verdict
from relay_shell.audit.log import AuditLog
from relay_shell.metrics import Metrics
from relay_shell.offhost.shipper import Shipper
from relay_shell.settings.offhost import syslog_target
from tests.rsyslog import Rsyslog  # run as `python -m benchmarks.…` from the project root, like the others

CALLS = 300
LIMIT = 1.10
RECORDS = 50_000
THROUGHPUT = 20_000
BACKLOG = 100_000
CHECKPOINT_INTERVAL = "100"
RECORD = {
    "v": 1,
    "ts": "2026-11-27T02:00:00.123456Z",
    "tool": "shell_exec",
    "phase": "end",
    "tier": 1,
    "denied": False,
    "outcome": "ok",
    "args": {"command": "systemctl status nginx --no-pager", "timeout": 60},
    "output_sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "output_len": 0,
    "raw_sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "raw_len": 0,
    "exit_code": 0,
    "duration_ms": 3,
    "request_id": "42",
    "client_id": "claude-code",
    "target": "local",
}


async def latency(collector: Rsyslog, key: Path) -> bool:
    shipping = {
        "audit_syslog": collector.tcp_url,
        "audit_signing_key": str(key),
        "audit_checkpoint_interval": CHECKPOINT_INTERVAL,
        "metrics_addr": "127.0.0.1:0",
    }
    async with relay_client(**shipping) as shipped, relay_client() as plain, bare_client() as bare:

        async def shipped_call() -> None:
            result = await shipped.call_tool("shell_exec", {"command": "true"})
            assert not result.is_error

        async def plain_call() -> None:
            result = await plain.call_tool("shell_exec", {"command": "true"})
            assert not result.is_error

        async def bare_call() -> None:
            await bare.call_tool("sh_true", {})

        for _ in range(20):
            await shipped_call()
            await plain_call()
            await bare_call()
        shipped_samples: list[float] = []
        plain_samples: list[float] = []
        bare_samples: list[float] = []
        for _ in range(CALLS // 50):  # interleave batches so machine noise hits all alike
            bare_samples += await measure(bare_call, 50)
            shipped_samples += await measure(shipped_call, 50)
            plain_samples += await measure(plain_call, 50)
        info = await shipped.call_tool("server_info", {})
        assert info.structured_content is not None
        checkpoints = info.structured_content["info"]["audit"]["checkpoints"]["written"]
    floor = median(bare_samples)
    ours = median(shipped_samples)
    ratio = ours / floor
    print(
        f"exec latency with shipping + checkpoints every {CHECKPOINT_INTERVAL} records ({checkpoints} signed) + "
        f"metrics: relay-shell {ours * 1000:.2f} ms, floor (a bare MCP tool) {floor * 1000:.2f} ms, "
        f"ratio {ratio:.3f} (target ≤ {LIMIT}) {verdict(ratio, LIMIT)}"
    )
    print(
        f"exec latency without shipping: {median(plain_samples) * 1000:.2f} ms, ratio to the bare MCP tool "
        f"{median(plain_samples) / floor:.3f} (for information)"
    )
    return ratio <= LIMIT


async def catching_up(root: Path, collector: Rsyslog) -> bool:
    backlog = AuditLog(root / "backlog.jsonl")
    backlog.open()
    for number in range(BACKLOG):
        backlog.write({**RECORD, "call_id": f"3f9a1b2c4d5e-{number}"})
    backlog.close()
    settings = {"audit_syslog": collector.tcp_url, "audit_path": str(backlog.path)}
    async with bare_client() as bare, relay_client() as plain:

        async def bare_call() -> None:
            await bare.call_tool("sh_true", {})

        async def plain_call() -> None:
            result = await plain.call_tool("shell_exec", {"command": "true"})
            assert not result.is_error

        for _ in range(20):
            await bare_call()
            await plain_call()
        started = time.perf_counter()
        async with relay_client(**settings) as shipping:

            async def call() -> None:
                result = await shipping.call_tool("shell_exec", {"command": "true"})
                assert not result.is_error

            async def lag() -> int:
                info = await shipping.call_tool("server_info", {})
                assert info.structured_content is not None
                return int(info.structured_content["info"]["audit"]["shipping"]["lag_records"])

            catching: list[float] = []
            floor_samples: list[float] = []
            plain_samples: list[float] = []
            while await lag() > 0 and time.perf_counter() - started < 120:
                batch = await measure(call, 10)
                if await lag() > 0:  # the whole batch ran while the shipper was behind
                    catching += batch
                    floor_samples += await measure(bare_call, 10)
                    plain_samples += await measure(plain_call, 10)
            caught_up = time.perf_counter() - started
            after: list[float] = []
            after_floor: list[float] = []
            for _ in range(4):
                after += await measure(call, 25)
                after_floor += await measure(bare_call, 25)
    if not catching:
        print("exec latency while catching up: the backlog was shipped before a batch completed (no sample) FAIL")
        return False
    # Two floors, both honest: the one measured between the batches shares the two cores with the catch-up (the
    # shipper thread and rsyslog writing), so it is slowed too; the one measured after it is the quiet machine.
    # The verdict takes the worse (higher) ratio of the two.
    floor = median(floor_samples)
    quiet_floor = median(after_floor)
    ours = median(catching)
    ratio = max(ours / floor, ours / quiet_floor)
    print(
        f"exec latency while catching up on {BACKLOG:,} records: relay-shell {ours * 1000:.2f} ms over "
        f"{len(catching)} calls; floor meanwhile {floor * 1000:.2f} ms (ratio {ours / floor:.3f}), floor after "
        f"{quiet_floor * 1000:.2f} ms (ratio {ours / quiet_floor:.3f}); target ≤ {LIMIT} {verdict(ratio, LIMIT)}; "
        f"relay-shell without shipping meanwhile {median(plain_samples) * 1000:.2f} ms; caught up {caught_up:.1f} s "
        f"after start; the same server afterwards {median(after) * 1000:.2f} ms"
    )
    return ratio <= LIMIT


def throughput(root: Path, collector: Rsyslog) -> bool:
    log = AuditLog(root / "throughput.jsonl")
    log.open()
    for number in range(RECORDS):
        log.write({**RECORD, "call_id": f"3f9a1b2c4d5e-{number}"})
    size = log.path.stat().st_size
    shipper = Shipper(log, syslog_target(collector.tcp_url), None, Metrics(enabled=False))
    started = time.perf_counter()
    shipper.start()
    sent_at = None
    while True:
        if sent_at is None and shipper.lag_records() == 0:
            sent_at = time.perf_counter() - started
        if collector.output.exists() and collector.output.stat().st_size >= size:
            break
        if time.perf_counter() - started > 120:
            print("shipping throughput: rsyslog did not receive every record within 120 s FAIL")
            return False
        time.sleep(0.005)
    elapsed = time.perf_counter() - started
    shipper.stop()
    received = collector.output.read_bytes()
    identical = received == log.path.read_bytes()
    rate = RECORDS / elapsed
    print(
        f"shipping throughput: {RECORDS} records ({size / RECORDS:.0f} bytes each) in rsyslog's file after "
        f"{elapsed:.2f} s = {rate:,.0f} records/s (sent in {sent_at or elapsed:.2f} s; target ≥ {THROUGHPUT:,}) "
        f"{verdict(rate, THROUGHPUT, higher_is_better=True)}; copy byte-identical: {identical}"
    )
    return rate >= THROUGHPUT and identical


def rows(options: Options) -> list[Row]:
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        key = root / "signing.key"
        keygen = [sys.executable, "-m", "relay_shell", "audit", "keygen", str(key)]
        subprocess.run(keygen, check=True, capture_output=True)
        with Rsyslog(root / "latency") as collector:
            latency_ok = anyio.run(latency, collector, key)
        with Rsyslog(root / "catching-up") as collector:
            catching_ok = anyio.run(catching_up, root, collector)
        with Rsyslog(root / "throughput") as collector:
            throughput_ok = throughput(root, collector)
    # Each part prints its numbers and its target above; the rows carry their verdicts.
    return [
        Row("audit shipping: shell_exec true with shipping vs a bare MCP tool", "see above", f"≤ {LIMIT}×", latency_ok),
        Row(
            "audit shipping: shell_exec true while catching up vs a bare MCP tool",
            "see above",
            f"≤ {LIMIT}×",
            catching_ok,
        ),
        Row("audit shipping: throughput to rsyslog", "see above", f"≥ {THROUGHPUT:,}/s", throughput_ok),
    ]


def main(argv: list[str] | None = None) -> int:
    return run_alone(rows, argv)


if __name__ == "__main__":
    raise SystemExit(main())
