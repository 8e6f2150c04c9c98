"""The fuzzer's bounded run (issue 21): at least 2,000 generated tool calls with a fixed seed against real
servers in readonly mode, over stdio and then streamable HTTP (tests/fuzz/campaign.py `BOUNDED_PLAN`), and the
whole run within 90 s. Tool calls generated from the tools' inputSchemas (valid, boundary, wrong-type,
nested, huge, unicode, OS-level edge cases, broken envelopes), mixed with prompt/resource/completion requests
and malformed JSON-RPC; every answer and the audit log are checked (tests/fuzz/checks.py). The long run is
`benchmarks/fuzz_long.py`.

A violation names the invariant and up to five messages that broke it. The same run, outside pytest:
`.venv/bin/python -m benchmarks.fuzz_long --bounded` (`--seed N` for another seed, `--server-dir PATH` for
another checkout's server).
"""

from __future__ import annotations

import pytest

from tests.fuzz.campaign import BOUNDED_PLAN, BOUNDED_SECONDS, BOUNDED_SEED, BOUNDED_TOOL_CALLS, run_bounded
from tests.fuzz.peers import server_dir

pytestmark = pytest.mark.anyio


@pytest.mark.timeout(300)
async def test_the_fuzzer_finds_nothing_in_2000_tool_calls_within_90_seconds() -> None:
    reports, elapsed = await run_bounded(server_dir())
    for transport, report in reports.items():
        print(f"\n{transport}, seed {BOUNDED_SEED}: {report.summary()}")
    print(f"bounded run: {elapsed:.1f}s")
    for transport, report in reports.items():
        assert report.calls >= BOUNDED_PLAN[transport] - 1, transport  # the second initialize is counted apart
        assert not report.violations, f"{transport}: {report.summary()}"
        assert report.largest_record <= 64 * 1024 and report.server_exits == 0, transport
    assert {transport for transport in reports} == {"stdio", "http"}
    assert sum(report.tool_calls() for report in reports.values()) >= BOUNDED_TOOL_CALLS
    assert elapsed <= BOUNDED_SECONDS, f"the bounded run took {elapsed:.1f}s (bound {BOUNDED_SECONDS:.0f}s)"
