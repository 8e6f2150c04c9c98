"""The store that keeps cut results readable in full (relay_shell/outputs.py, adr/0028): what is kept and when,
one bound over everything held (kept output and output still being produced), the oldest dropped first, paging
exactly once on whole characters, and what a reader is told when an output is gone."""

from __future__ import annotations

import asyncio
import hashlib
import mmap
import subprocess
import sys
from pathlib import Path

import pytest

from relay_shell.errors import ToolError
from relay_shell.outputs import BLOCK, OutputStore, held_by, keep_if_cut
from relay_shell.plan import Execution, Plan, Subject
from relay_shell.sessions.jobs import JobRing


def plan() -> Plan:
    async def execute(progress: object) -> Execution:
        raise AssertionError("not run")

    return Plan(subject=Subject(command="x"), execute=execute)  # type: ignore[arg-type]


def produce(store: OutputStore, chunks: list[bytes], budget: int = 1024) -> tuple[str | None, Plan]:
    """A stream fed `chunks`, then ended the way an executor ends it."""
    sink = store.sink(budget)
    for chunk in chunks:
        sink.feed(chunk)
    ended = plan()
    kept = keep_if_cut(store, "alice", sink, ended)
    return kept.get("output_id"), ended


def held(store: OutputStore) -> int:
    return store.stored_bytes + store.pending_bytes


def test_only_a_cut_result_is_kept_and_its_digest_is_of_exactly_those_bytes() -> None:
    async def run() -> None:
        store = OutputStore(10_000_000, 600)
        whole, _ = produce(store, [b"short\n"])
        assert whole is None and held(store) == 0, "an uncut result keeps nothing"
        chunks = [b"%d\n" % number for number in range(5000)]
        output_id, ended = produce(store, chunks)
        assert output_id is not None and output_id.startswith("o-")
        assert ended.record_fields == {"output_id": output_id}
        assert ended.notes[0].startswith(f"output cut: all {len(b''.join(chunks))} bytes are kept as {output_id} ")
        page = store.read("alice", output_id, 0, 10**9)
        assert page.data == b"".join(chunks) and page.sha256 == hashlib.sha256(page.data).hexdigest()
        # The bound is on memory: the output's blocks, the last one shrunk to whole pages (adr/0028, the store).
        assert held(store) == -(-len(page.data) // mmap.PAGESIZE) * mmap.PAGESIZE

    asyncio.run(run())


def test_pages_cover_every_byte_once_and_end_on_whole_characters() -> None:
    async def run() -> None:
        store = OutputStore(10_000_000, 600)
        data = ("aé€😀" * 3000).encode()
        output_id, _ = produce(store, [data[index : index + 777] for index in range(0, len(data), 777)])
        assert output_id is not None
        cursor, pages = 0, []
        while cursor < len(data):
            page = store.read("alice", output_id, cursor, 100)
            assert page.start == cursor and 0 < len(page.data) <= 100
            page.data.decode("utf-8")  # never a character cut in half
            pages.append(page.data)
            cursor = page.end
        assert b"".join(pages) == data
        assert store.read("alice", output_id, None, 100).start == cursor, "without since: after the last page"
        with pytest.raises(ToolError, match="since: 99999999 is outside output"):
            store.read("alice", output_id, 99_999_999, 100)

    asyncio.run(run())


def test_everything_held_stays_within_the_bound_oldest_dropped_first() -> None:
    async def run() -> None:
        limit = 3 * BLOCK  # three outputs of one block each
        store = OutputStore(limit, 600)
        kept = []
        for _ in range(10):
            sink = store.sink(1024)
            for _ in range(128):
                sink.feed(b"x" * (BLOCK // 128))  # one block each
                assert held(store) <= limit
            output_id = keep_if_cut(store, "alice", sink, plan())["output_id"]
            kept.append(output_id)
        assert len(store.stored) == 3 and list(store.stored) == kept[-3:]
        with pytest.raises(ToolError, match=r"is gone: dropped for newer output \(RELAY_SHELL_OUTPUT_STORE_BYTES="):
            store.read("alice", kept[0], 0, 10)

    asyncio.run(run())


def test_a_stream_over_the_bound_is_not_kept_and_frees_what_it_held() -> None:
    async def run() -> None:
        store = OutputStore(1_000_000, 600)
        output_id, ended = produce(store, [b"y" * 100_000] * 20)
        assert output_id is None and held(store) == 0
        assert "is not kept: it is over RELAY_SHELL_OUTPUT_STORE_BYTES=1000000" in ended.notes[0]

    asyncio.run(run())


def test_an_output_is_dropped_after_its_retention_and_is_private() -> None:
    async def run() -> None:
        store = OutputStore(10_000_000, 0.05)
        output_id, _ = produce(store, [b"z" * 5000])
        assert output_id is not None
        with pytest.raises(ToolError, match="belongs to another client"):
            store.read("bob", output_id, 0, 10)
        await asyncio.sleep(0.2)  # the store's own timer frees it, read or not
        assert held(store) == 0
        with pytest.raises(ToolError, match=r"is gone: kept 0.05s after the call \(RELAY_SHELL_OUTPUT_RETENTION\)"):
            store.read("alice", output_id, 0, 10)
        with pytest.raises(ToolError, match="belongs to another client"):
            store.read("bob", output_id, 0, 10)
        with pytest.raises(ToolError, match="no output 'o-unknown'"):
            store.read("alice", "o-unknown", 0, 10)

    asyncio.run(run())


def test_a_jobs_ring_holds_what_came_before_the_yield_and_counts_the_rest_dropped() -> None:
    ring = JobRing(1000)
    ring.fill(b"tail", 5000)  # the backlog held only the last 4 of 5000 bytes produced before the yield
    assert (ring.start, ring.end) == (4996, 5000)
    read = ring.read(0)
    assert read.data == b"tail" and read.dropped == 4996
    ring.append(b"more")
    assert ring.read(4996).data == b"tailmore"
    whole = JobRing(1000)
    whole.fill(b"abc", 3)
    assert whole.read(0).data == b"abc" and whole.read(0).dropped == 0


def test_the_store_is_charged_for_every_byte_of_memory_it_references() -> None:
    """At every chunk fed, what the store is charged covers what it holds: each block's pages as they are written,
    and each chunk kept by reference with its object and the allocator's rounding."""

    async def run() -> None:
        store = OutputStore(40 * BLOCK, 600)
        sizes = [1, 700, 4096, 65_000, 300_000, BLOCK, 3 * BLOCK + 5, 17]
        for budget in (1024, 70_000, 2 * BLOCK):
            sink = store.sink(budget)
            keeper = sink.keeper
            for size in sizes:
                sink.feed(b"q" * size)
                written = -(-keeper.filled // mmap.PAGESIZE) * mmap.PAGESIZE  # the block being filled: its pages
                mapped = sum(len(block) for block in keeper.blocks) + written
                by_reference = sum(held_by(chunk) for chunk in keeper.delivered or [])
                assert store.pending_bytes == keeper.held >= mapped + by_reference > 0, (budget, size, keeper.held)
            output_id = keep_if_cut(store, "alice", sink, plan())["output_id"]
            stored = store.stored[output_id]
            assert stored.held == sum(len(block) for block in stored.blocks) >= sum(sizes)
            assert store.stored_bytes == sum(kept.held for kept in store.stored.values())
            assert store.read("alice", output_id, 0, 10**9).data == b"".join(b"q" * size for size in sizes)

    asyncio.run(run())


# A real stream's way into the store, in a process of its own: a command's output read from its pipe the way
# local/process.py reads it (os.read of up to 1 MiB), fed, kept when cut; the peak RSS growth printed.
STREAMS = """
import asyncio, os, subprocess, sys
from relay_shell.outputs import OutputStore, keep_if_cut
from relay_shell.plan import Plan, Subject

def kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1])

async def execute(progress):
    raise AssertionError("not run")

async def run(limit, streams, size):
    store = OutputStore(limit, 600)
    for _ in range(streams):
        sink = store.sink(65536)
        child = subprocess.Popen(f"head -c {size} /dev/zero | tr '\\\\0' x", shell=True, stdout=subprocess.PIPE)
        while chunk := os.read(child.stdout.fileno(), 1024 * 1024):
            sink.feed(chunk)
        child.wait()
        keep_if_cut(store, "alice", sink, Plan(subject=Subject(command="x"), execute=execute))
    return len(store.stored)

limit, streams, size = (int(value) for value in sys.argv[1:])
before = kib("VmRSS")
with open("/proc/self/clear_refs", "w") as refs:
    refs.write("5")  # the peak (VmHWM) from here
kept = asyncio.run(run(limit, streams, size))
print((kib("VmHWM") - before) * 1024, kept)
"""


def peak_growth(limit: int, streams: int, size: int) -> tuple[int, int]:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", STREAMS, str(limit), str(streams), str(size)],
        capture_output=True,
        text=True,
        check=True,
        cwd=root,
    )
    growth, kept = done.stdout.split()
    return int(growth), int(kept)


def test_the_memory_a_process_spends_keeping_outputs_stays_within_the_bound() -> None:
    """RELAY_SHELL_OUTPUT_STORE_BYTES is a promise about memory: 30 cut outputs of 4 MiB through a 16 MiB store
    raise the process's peak RSS by no more than the bound over what the same streams cost with nothing kept
    (bound 0), give or take one block for the allocator's noise. Kept as bytes objects from the allocator the
    same streams cost over 4x the bound (holes the allocator never gives back)."""
    limit = 16 * 1024 * 1024
    kept_growth, kept = peak_growth(limit, 30, 4 * 1024 * 1024)
    bare_growth, none_kept = peak_growth(0, 30, 4 * 1024 * 1024)
    assert kept == 4 and none_kept == 0
    assert kept_growth - bare_growth <= limit + BLOCK, (kept_growth, bare_growth)
