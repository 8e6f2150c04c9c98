"""Jobs and kept outputs over streamable HTTP (adr/0028): they belong to the token, not to the stream, so a client
that disconnects and comes back with the same token lists and reads its job, in both protocol eras (the stateful
MCP session of 2025-11-25, the stateless requests of 2026-07-28), and another token sees nothing of it."""

from __future__ import annotations

import hashlib
import time

import pytest

from tests.conftest import assert_error, fields, read_records, text_of
from tests.e2e.http.server import TOKENS, HttpServer, client
from tests.e2e.jobs.helpers import call_of_job, call_records, job_of

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["legacy", "auto"])
def era(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_sleep_yields_and_ends_over_http(authed: HttpServer, era: str) -> None:
    async with client(authed, TOKENS["alice"], era) as alice:
        # A server's first tool call over HTTP builds its argument model and loads the classifier (0.3-0.45 s
        # here): made first, so that what is timed is the yield, not the cold start.
        assert text_of(await alice.call_tool("shell_exec", {"command": "true"})) == "[exit 0]"
        started = time.monotonic()
        result = await alice.call_tool("shell_exec", {"command": "echo start; sleep 3; echo done", "yield_after": 1})
        returned_after = time.monotonic() - started
        job_id = job_of(result)
        assert returned_after < 1.5, f"the call returned after {returned_after:.2f}s"
        assert fields(result)["output"] == "start\n"
        final = await alice.call_tool("session_recv", {"session_id": job_id, "until": "done", "timeout": 10})
        assert text_of(final).splitlines()[0] == "[exit 0]" and fields(final)["output"] == "done\n", text_of(final)
    end = call_records(authed.audit_path, call_of_job(authed.audit_path, job_id))["end"]
    assert end["exit_code"] == 0 and end["raw_sha256"] == hashlib.sha256(b"start\ndone\n").hexdigest(), end
    assert end["client_id"] == "http:alice"


async def test_a_reconnecting_client_finds_its_job_and_another_token_cannot(authed: HttpServer, era: str) -> None:
    async with client(authed, TOKENS["alice"], era) as alice:
        job_id = job_of(
            await alice.call_tool("shell_exec", {"command": "echo first; sleep 2; echo second", "yield_after": 0.5})
        )
        output_id = fields(await alice.call_tool("shell_exec", {"command": "seq 1 100000", "max_output": 1024}))[
            "output_id"
        ]
    # The stream is gone (the client closed it); the job runs on, and its end record is written all the same.
    async with client(authed, TOKENS["bob"], era) as bob:
        listed = fields(await bob.call_tool("session_list", {}))["sessions"]
        assert job_id not in {item["session_id"] for item in listed}, listed
        refused = await bob.call_tool("session_recv", {"session_id": job_id})
        assert_error(refused, "SessionNotOwned", f"job {job_id!r} belongs to another client")
        assert_error(await bob.call_tool("session_kill", {"session_id": job_id}), "SessionNotOwned")
        assert_error(await bob.call_tool("session_recv", {"session_id": output_id}), "SessionNotOwned")
    async with client(authed, TOKENS["alice"], era) as alice_again:
        listed = fields(await alice_again.call_tool("session_list", {}))["sessions"]
        assert job_id in {item["session_id"] for item in listed}, listed
        final = await alice_again.call_tool("session_recv", {"session_id": job_id, "until": "(?!)", "timeout": 10})
        assert text_of(final).splitlines()[0] == "[exit 0]", text_of(final)
        assert fields(final)["result"]["output"] == "first\nsecond\n"
        # Pages small enough for an SSE event (the SDK client takes at most 1 MiB, and a result carries its text
        # twice: in content and in structuredContent).
        page = await alice_again.call_tool("session_recv", {"session_id": output_id, "since": 0, "max_bytes": 300000})
        assert (fields(page)["cursor"], fields(page)["total_bytes"]) == (300000, 588895)
    records = read_records(authed.audit_path)
    refusals = [
        record
        for record in records
        if record["tool"] in ("session_recv", "session_kill") and record["client_id"] == "http:bob"
    ]
    assert refusals and all(record["outcome"] == "error" for record in refusals), refusals
