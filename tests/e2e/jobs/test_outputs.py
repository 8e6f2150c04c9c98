"""A cut result readable in full (adr/0028): the result names an output id; session_recv pages through every byte
exactly once; the bytes' digest is the record's raw_sha256; they are held in memory within a bound and for a
while, and reading them afterwards says they are gone and why."""

from __future__ import annotations

import hashlib
import mmap
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import assert_error, connect, fields, read_records, text_of
from tests.e2e.jobs.helpers import job_of, until_ended

pytestmark = pytest.mark.anyio

SEQ = "seq 1 2000000"
SEQ_BYTES = b"".join(b"%d\n" % number for number in range(1, 2000001))


async def page_all(client: Client, output_id: str, max_bytes: int) -> tuple[bytes, list[dict[str, Any]]]:
    """Every page from 0 to the end, each from the cursor the previous one returned."""
    cursor = 0
    data = b""
    pages: list[dict[str, Any]] = []
    while True:
        page = await client.call_tool(
            "session_recv", {"session_id": output_id, "since": cursor, "max_bytes": max_bytes}
        )
        got = fields(page)
        assert not page.is_error and got["since"] == cursor, text_of(page)
        data += got["output"].encode("utf-8")
        pages.append(got)
        cursor = got["cursor"]
        if cursor == got["total_bytes"]:
            return data, pages


async def test_seq_cut_to_1000_bytes_pages_every_byte_exactly_once(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    async with connect(audit) as client:
        result = await client.call_tool("shell_exec", {"command": SEQ, "max_output": 1000})
        got = fields(result)
        assert got["truncated"] is True and got["output_bytes"] == len(SEQ_BYTES), got["output_bytes"]
        output_id = got["output_id"]
        assert output_id and output_id.startswith("o-"), got
        assert text_of(result).splitlines()[1] == (
            f"[NOTE: output cut: all {len(SEQ_BYTES)} bytes are kept as {output_id} for 600s (or less, if newer "
            f'outputs need the room): read them with session_recv(session_id="{output_id}", since=0), then '
            "since=cursor until cursor = total_bytes]"
        )
        data, pages = await page_all(client, output_id, 1024 * 1024)
        assert data == SEQ_BYTES and len(pages) == 15
        assert [page["since"] for page in pages] == [page["cursor"] for page in [{"cursor": 0}, *pages[:-1]]]
        first = await client.call_tool("session_recv", {"session_id": output_id, "since": 0, "max_bytes": 300})
        assert text_of(first).startswith(f"[output {output_id}: bytes 0-300 of {len(SEQ_BYTES)} | cursor 300 | kept ")
        following = await client.call_tool("session_recv", {"session_id": output_id, "max_bytes": 300})
        assert fields(following)["since"] == 300, "without since: after the last page read"
    end = next(record for record in read_records(audit) if record["tool"] == "shell_exec" and record["phase"] == "end")
    assert end["raw_sha256"] == hashlib.sha256(data).hexdigest() == got["output_sha256"]
    assert end["truncated"] is True and end["output_id"] == output_id and end["raw_len"] == len(SEQ_BYTES)
    reads = [record for record in read_records(audit) if record["tool"] == "session_recv"]
    assert {record["session_id"] for record in reads} == {output_id} and all(r["phase"] == "end" for r in reads)
    log = audit.read_bytes()
    assert b"1999999\n2000000" not in log and b"\\n1000000\\n" not in log, "the output is never in the log"


async def test_pages_never_split_a_character(tmp_path: Path) -> None:
    text = "é€😀a" * 20000
    async with connect(tmp_path / "audit.jsonl") as client:
        command = "python3 -c \"import sys; sys.stdout.write('é€😀a' * 20000)\""
        output_id = fields(await client.call_tool("shell_exec", {"command": command, "max_output": 1024}))["output_id"]
        data, pages = await page_all(client, output_id, 257)
        assert data == text.encode() and all("\ufffd" not in page["output"] for page in pages)
        assert all(page["cursor"] - page["since"] <= 257 for page in pages)


async def test_output_is_gone_after_the_retention(tmp_path: Path) -> None:
    async with connect(tmp_path / "audit.jsonl", output_retention="1") as client:
        output_id = fields(await client.call_tool("shell_exec", {"command": "seq 1 100000", "max_output": 1024}))[
            "output_id"
        ]
        time.sleep(1.5)
        gone = await client.call_tool("session_recv", {"session_id": output_id, "since": 0})
        assert_error(gone, "OutputGone", f"output {output_id!r} is gone: kept 1s after the call")


async def test_the_oldest_output_is_dropped_when_the_bound_is_exceeded(tmp_path: Path) -> None:
    async with connect(tmp_path / "audit.jsonl", output_store_bytes="20000000") as client:
        older = fields(await client.call_tool("shell_exec", {"command": SEQ, "max_output": 1000}))["output_id"]
        newer = fields(await client.call_tool("shell_exec", {"command": SEQ, "max_output": 1000}))["output_id"]
        assert older and newer and older != newer
        gone = await client.call_tool("session_recv", {"session_id": older, "since": 0})
        assert_error(gone, "OutputGone", "dropped for newer output (RELAY_SHELL_OUTPUT_STORE_BYTES=20000000)")
        data, _ = await page_all(client, newer, 1024 * 1024)
        assert data == SEQ_BYTES


async def test_an_output_over_the_bound_is_not_kept_and_the_result_says_so(tmp_path: Path) -> None:
    async with connect(tmp_path / "audit.jsonl", output_store_bytes="1000000") as client:
        result = await client.call_tool("shell_exec", {"command": SEQ, "max_output": 1000})
        assert fields(result)["output_id"] is None and fields(result)["truncated"] is True
        assert text_of(result).splitlines()[1] == (
            f"[NOTE: the full output ({len(SEQ_BYTES)} bytes) is not kept: it is over "
            "RELAY_SHELL_OUTPUT_STORE_BYTES=1000000; narrow the command (grep, head, tail) to see the middle]"
        )
        small = await client.call_tool("shell_exec", {"command": "seq 1 100000", "max_output": 1024})
        assert fields(small)["output_id"], "an output within the bound is kept"


async def test_bad_reads_of_an_output_are_clear_errors(tmp_path: Path) -> None:
    async with connect(tmp_path / "audit.jsonl") as client:
        output_id = fields(await client.call_tool("shell_exec", {"command": "seq 1 100000", "max_output": 1024}))[
            "output_id"
        ]
        until = await client.call_tool("session_recv", {"session_id": output_id, "until": "x"})
        assert_error(until, "InvalidArgument", "until:", "nothing more will come")
        beyond = await client.call_tool("session_recv", {"session_id": output_id, "since": 10**9})
        assert_error(beyond, "InvalidArgument", f"since: 1000000000 is outside output {output_id}", "0 to 588895")
        unknown = await client.call_tool("session_recv", {"session_id": "o-000000000000"})
        assert_error(unknown, "UnknownSession", "no output 'o-000000000000'")
        resize = await client.call_tool("session_resize", {"session_id": output_id, "cols": 80, "rows": 24})
        assert_error(resize, "NotATerminal")
        whole = await client.call_tool("shell_exec", {"command": "seq 1 10"})
        assert fields(whole)["output_id"] is None and not fields(whole)["truncated"], "an uncut result keeps nothing"


async def test_a_jobs_cut_result_is_kept_too(tmp_path: Path) -> None:
    async with connect(tmp_path / "audit.jsonl") as client:
        command = "sleep 0.5; seq 1 200000"
        job_id = job_of(
            await client.call_tool("shell_exec", {"command": command, "max_output": 1000, "yield_after": 0.2})
        )
        final = fields(await until_ended(client, job_id))
        output_id = final["result"]["output_id"]
        assert output_id and final["result"]["truncated"], final["result"]
        data, _ = await page_all(client, output_id, 1024 * 1024)
        assert data == b"".join(b"%d\n" % number for number in range(1, 200001))
        assert hashlib.sha256(data).hexdigest() == final["result"]["output_sha256"]


async def test_server_info_shows_the_jobs_and_the_output_store(tmp_path: Path) -> None:
    """server_info's `jobs`: this client's jobs running and ended, the bound, and the bytes the output store holds
    against its bound (a cut result kept in full)."""
    settings = {"max_jobs": "5", "output_store_bytes": "20000000", "yield_after": "7"}
    async with connect(tmp_path / "audit.jsonl", **settings) as client:

        async def jobs() -> dict[str, Any]:
            return dict(fields(await client.call_tool("server_info", {}))["info"]["jobs"])

        before = await jobs()
        assert before["running"] == 0 and before["ended"] == 0 and before["max"] == 5, before
        assert before["yield_after_seconds"] == 7 and before["outputs"]["max_bytes"] == 20000000, before
        assert before["outputs"]["kept"] == 0 and before["outputs"]["bytes"] == 0, before

        ended = job_of(await client.call_tool("shell_exec", {"command": "sleep 1.5; echo x", "yield_after": 0.5}))
        job_of(await client.call_tool("shell_exec", {"command": "sleep 30", "yield_after": 0.2}))
        await until_ended(client, ended)
        cut = fields(await client.call_tool("shell_exec", {"command": SEQ, "max_output": 1000}))
        assert cut["output_id"], cut
        after = await jobs()
        assert after["running"] == 1 and after["ended"] == 1, after
        # The memory it holds, charged against the bound: the output's blocks, the last shrunk to whole pages.
        held = -(-len(SEQ_BYTES) // mmap.PAGESIZE) * mmap.PAGESIZE
        assert after["outputs"]["kept"] == 1 and after["outputs"]["bytes"] == held, after


async def test_streams_running_at_once_stay_within_the_bound(tmp_path: Path) -> None:
    """The bound holds for output still being produced, whatever runs at once (review S2): four jobs of 3 MB each
    against a 5 MB bound; the streams that would pass it stop being kept (their results say the output was not)."""
    async with connect(tmp_path / "audit.jsonl", output_store_bytes="5000000") as client:
        command = "head -c 3000000 /dev/zero | tr '\\0' a; sleep 4"
        for _ in range(4):
            job_of(await client.call_tool("shell_exec", {"command": command, "yield_after": 1.5, "max_output": 1000}))
        outputs = fields(await client.call_tool("server_info", {}))["info"]["jobs"]["outputs"]
        assert outputs["bytes"] <= outputs["max_bytes"] == 5000000, outputs
