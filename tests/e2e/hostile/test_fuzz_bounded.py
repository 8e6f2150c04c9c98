"""The fuzzer's bounded run (issue 21): 2,200 messages with a fixed seed against real servers in readonly mode,
1,200 over stdio and 1,000 over streamable HTTP (about 30 s here; the budget is 90 s). Tool calls generated
from the tools' inputSchemas (valid, boundary, wrong-type, nested, huge, unicode, OS-level edge cases, broken
envelopes), prompt/resource/completion requests and malformed JSON-RPC; every answer and the audit log are
checked (tests/fuzz/checks.py). The long run is `benchmarks/fuzz_long.py`.

A violation names the invariant and up to five messages that broke it; the seed reproduces the run:
`.venv/bin/python -m benchmarks.fuzz_long --calls 1200 --seed 21 --transport stdio`.
"""

from __future__ import annotations

import time

import pytest

from tests.fuzz.campaign import run_campaign
from tests.fuzz.peers import server_dir

pytestmark = pytest.mark.anyio

SEED = 21
PLAN = {"stdio": 1200, "http": 1000}


@pytest.mark.parametrize("transport", sorted(PLAN))
async def test_the_fuzzer_finds_nothing(transport: str) -> None:
    started = time.monotonic()
    report = await run_campaign(transport, PLAN[transport], SEED, server_dir())
    print(f"\n{transport}, seed {SEED}, {time.monotonic() - started:.1f}s: {report.summary()}")
    assert report.calls >= PLAN[transport] - 1  # the second initialize is counted apart
    assert not report.violations, report.summary()
    assert report.largest_record <= 64 * 1024 and report.server_exits == 0
