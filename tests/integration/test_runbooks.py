"""Runbooks below the MCP surface, on real files: front matter checks, the directory scan (bounds, symlinks,
reload by signature, the parse cache), keyword scoring and the byte budget, the instructions' index, the gate's
memory. The end-to-end tests (tests/e2e/runbooks/) drive the same through real clients."""

from __future__ import annotations

import contextlib
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay_shell.runbooks import cache as cache_module
from relay_shell.runbooks import library as library_module
from relay_shell.runbooks.document import RunbookProblem, parse_runbook
from relay_shell.runbooks.gate import BriefingGate, call_digest, call_words
from relay_shell.runbooks.index import MAX_INDEX_BYTES, instructions_index
from relay_shell.runbooks.library import RunbookLibrary
from relay_shell.runbooks.retrieval import Retrieval
from relay_shell.runbooks.search import Briefing, compose
from tests.e2e.runbooks.helpers import ALIAS_BOMB, ANCHORS_REFUSED


def runbook_text(body: str = "Some guidance. More text.\n", **front: object) -> str:
    lines = ["---"]
    for key, value in front.items():
        lines.append(f"{key}: {value}")
    lines.append("---")
    return "\n".join(lines) + "\n" + body


def parse(text: str, relpath: str = "dir/Some Runbook.md") -> object:
    data = text.encode()
    return parse_runbook(relpath, data, "0" * 64)


def problem_of(text: str) -> str:
    with pytest.raises(RunbookProblem) as raised:
        parse(text)
    return str(raised.value)


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def library(directory: Path, max_files: int = 100, max_bytes: int = 65536) -> RunbookLibrary:
    return RunbookLibrary(directory, max_files, max_bytes, frozenset({"operating_guide", "troubleshoot_host"}))


# -- one file ----------------------------------------------------------------------------------------------


def test_defaults_come_from_the_file_name_the_first_heading_and_the_first_sentence() -> None:
    runbook = parse("# Rotate edge certificates\n\nCertificates expire. Rotate them weekly.\n\n## Steps\n\nx\n")
    assert runbook.name == "some-runbook"  # type: ignore[attr-defined]
    assert runbook.title == "Rotate edge certificates"  # type: ignore[attr-defined]
    assert runbook.summary == "Certificates expire."  # type: ignore[attr-defined]
    assert runbook.priority == 5 and runbook.modes == ("open", "guarded", "readonly")  # type: ignore[attr-defined]
    assert runbook.chapters == ("Rotate edge certificates", "Steps")  # type: ignore[attr-defined]


def test_front_matter_fields_are_read() -> None:
    text = runbook_text(
        "# Body\n```\n# not a chapter\n```\n## Real chapter\n",
        name="db-failover",
        title="DB failover",
        summary="How we fail over.",
        priority=10,
        tags="[postgres, 5xx, failover]",
        hosts='["@db", db1]',
        modes="[open, guarded]",
        arguments="[{name: host, description: the primary, required: true}, {name: reason}]",
    )
    runbook = parse(text)
    assert runbook.name == "db-failover" and runbook.priority == 10  # type: ignore[attr-defined]
    assert runbook.tags == ("postgres", "5xx", "failover")  # type: ignore[attr-defined]
    assert runbook.hosts == ("@db", "db1") and runbook.modes == ("open", "guarded")  # type: ignore[attr-defined]
    assert [(item.name, item.required) for item in runbook.arguments] == [("host", True), ("reason", False)]  # type: ignore[attr-defined]
    assert runbook.chapters == ("Body", "Real chapter")  # type: ignore[attr-defined]
    body = text[runbook.body_start :]  # type: ignore[attr-defined]
    assert body.startswith("# Body\n")


@pytest.mark.parametrize(
    ("front", "expected"),
    [
        ({"priorty": 10}, "front matter: unknown field 'priorty'"),
        ({"priority": 11}, "priority: 11 is not allowed; allowed: an integer from 1 to 10"),
        ({"priority": "'7'"}, "priority: '7' is not allowed"),
        ({"priority": "high"}, "priority: 'high' is not allowed"),
        ({"priority": "true"}, "priority: True is not allowed"),
        ({"name": "../../etc/passwd"}, "name: '../../etc/passwd' is not a valid name"),
        ({"name": "Upper"}, "name: 'Upper' is not a valid name"),
        ({"modes": "[open, root]"}, "modes:"),
        ({"tags": "{a: 1}"}, "tags: must be a list of strings (got mapping)"),
        ({"arguments": "[{name: 1x}]"}, "arguments[0].name: '1x' is not allowed"),
        ({"arguments": "[{name: host, required: maybe}]"}, "arguments[0].required: must be true or false"),
        ({"arguments": "[{name: host, kind: str}]"}, "arguments[0]: unknown field 'kind'"),
        ({"title": "''"}, "title: must be a non-empty string"),
    ],
)
def test_bad_front_matter_is_a_problem_naming_the_field(front: dict[str, object], expected: str) -> None:
    assert problem_of(runbook_text(**front)).startswith(expected)


def test_bad_yaml_unclosed_front_matter_empty_body_and_bad_encoding_are_problems() -> None:
    assert problem_of("---\ntags: [a, b\n---\nbody\n").startswith("front matter: not valid YAML")
    assert problem_of("---\ntitle: x\nbody without an end\n").startswith("front matter: opened by ---")
    assert problem_of("---\ntitle: x\n---\n\n  \n").startswith("body: is empty")
    assert problem_of("---\n- a list\n---\nbody\n").startswith("front matter: must be a mapping")
    with pytest.raises(RunbookProblem, match="not UTF-8"):
        parse_runbook("x.md", b"---\ntitle: \xff\n---\nbody\n", "0" * 64)


@contextlib.contextmanager
def memory_limited(headroom: int) -> Iterator[None]:
    """This process may grow by at most `headroom` bytes of address space meanwhile: a regression that builds
    what an alias bomb expands to fails with MemoryError here, instead of taking a shared machine's memory."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as statm:
        in_use = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (in_use + headroom, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def test_yaml_anchors_and_aliases_are_refused_before_anything_expands(tmp_path: Path) -> None:
    books = tmp_path / "books"
    books.mkdir()
    (books / "bomb.md").write_text(ALIAS_BOMB)
    (books / "fine.md").write_text(runbook_text(priority=10))
    started = time.monotonic()
    with memory_limited(256 * 1024 * 1024):
        catalog = library(books).refresh()
    assert time.monotonic() - started < 5
    problems = {problem.path: problem.problem for problem in catalog.problems}
    assert problems["bomb.md"].startswith(ANCHORS_REFUSED)
    assert list(catalog.runbooks) == ["fine"]
    assert problem_of(runbook_text(title="&x Disk", tags="[a, *x]")).startswith(ANCHORS_REFUSED)
    assert problem_of("---\ntitle: &t Disk\n---\nbody\n").startswith(ANCHORS_REFUSED)  # an anchor alone too
    assert parse(runbook_text(title="'R&D: *all* of it'")).title == "R&D: *all* of it"  # type: ignore[attr-defined]


def test_a_quoted_value_in_a_problem_is_bounded() -> None:
    problem = problem_of(runbook_text(priority="[" + ", ".join(["[1, [2, [3, [4]]]]"] * 5000) + "]"))
    assert problem.startswith("priority: [[1, [...]], [1, [...]],") and len(problem) < 300
    assert len(problem_of(runbook_text(name="x" * 100000))) < 300


def test_a_parser_failure_of_any_kind_skips_the_file_and_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Simulated: no file makes the parser itself raise once aliases are refused (out of memory, a bug), so the
    parser is replaced for one file; the scan must survive it and say so."""
    books = tmp_path / "books"
    books.mkdir()
    (books / "bad.md").write_text(runbook_text())
    (books / "good.md").write_text(runbook_text())
    real_parse = library_module.parse_runbook

    def parse_failing(relpath: str, data: bytes, sha256: str) -> object:
        if relpath == "bad.md":
            raise MemoryError
        return real_parse(relpath, data, sha256)

    monkeypatch.setattr(library_module, "parse_runbook", parse_failing)
    catalog = library(books).refresh()
    assert list(catalog.runbooks) == ["good"]
    assert [(problem.path, problem.problem) for problem in catalog.problems] == [
        ("bad.md", "could not be parsed (MemoryError); not loaded")
    ]


# -- the directory -------------------------------------------------------------------------------------------


def test_scan_loads_recursively_and_reports_every_file_it_leaves_out(tmp_path: Path) -> None:
    books = tmp_path / "books"
    (books / "db").mkdir(parents=True)
    (books / ".git").mkdir()
    (books / "db" / "restart.md").write_text(runbook_text(title="Restart"))
    (books / "notes.txt").write_text("not a runbook")
    (books / ".git" / "x.md").write_text(runbook_text())  # hidden: skipped silently
    (books / "bad.md").write_text(runbook_text(priority=0))
    (books / "a.md").write_text(runbook_text(name="same"))
    (books / "b.md").write_text(runbook_text(name="same"))
    (books / "guide.md").write_text(runbook_text(name="operating_guide"))
    outside = tmp_path / "outside.md"
    outside.write_text(runbook_text(name="stolen", summary="secret outside the directory"))
    (books / "link.md").symlink_to(outside)
    (books / "linked-dir").symlink_to(tmp_path)
    os.mkfifo(books / "fifo.md")
    catalog = library(books).refresh()
    assert list(catalog.runbooks) == ["restart"]
    problems = {problem.path: problem.problem for problem in catalog.problems}
    assert problems["bad.md"].startswith("priority: 0 is not allowed")
    assert "none of them is loaded" in problems["a.md"] and "none of them is loaded" in problems["b.md"]
    assert "built-in prompt" in problems["guide.md"]
    assert problems["link.md"].startswith("a symlink; not followed")
    assert problems["linked-dir"].startswith("a symlink; not followed")
    assert problems["fifo.md"] == "not a regular file"
    assert "stolen" not in catalog.runbooks


def test_size_and_count_bounds(tmp_path: Path) -> None:
    books = tmp_path / "books"
    books.mkdir()
    huge = books / "huge.md"
    with huge.open("wb") as handle:  # 100 MiB, sparse: refused by its size, never read
        handle.truncate(100 * 1024 * 1024)
    for index in range(5):
        (books / f"n{index}.md").write_text(runbook_text(title=f"n{index}"))
    catalog = library(books, max_files=3).refresh()
    problems = {problem.path: problem.problem for problem in catalog.problems}
    assert problems["huge.md"].startswith("104857600 bytes is over RELAY_SHELL_RUNBOOK_MAX_BYTES=65536; not read")
    assert sorted(catalog.runbooks) == ["n0", "n1"]  # huge.md, n0.md, n1.md are the first three paths
    assert any("files over RELAY_SHELL_RUNBOOK_MAX_FILES=3 not loaded" in problem for problem in problems.values())


def test_edits_are_seen_at_the_next_scan_and_only_changed_files_are_parsed(tmp_path: Path) -> None:
    books = tmp_path / "books"
    books.mkdir()
    (books / "one.md").write_text(runbook_text(summary="first"))
    (books / "two.md").write_text(runbook_text(summary="second"))
    shelf = library(books)
    first = shelf.refresh()
    assert shelf.refresh() is first  # nothing changed: the same catalog, no new generation
    unchanged = first.runbooks["two"]
    (books / "one.md").write_text(runbook_text(summary="edited"))
    second = shelf.refresh()
    assert second.generation == first.generation + 1
    assert second.runbooks["one"].summary == "edited"
    assert second.runbooks["two"] is unchanged  # not parsed again
    (books / "two.md").unlink()
    assert list(shelf.refresh().runbooks) == ["one"]


def test_a_body_changed_since_loading_is_not_served_as_the_old_version(tmp_path: Path) -> None:
    books = tmp_path / "books"
    books.mkdir()
    (books / "one.md").write_text(runbook_text("old body\n"))
    shelf = library(books)
    runbook = shelf.refresh().runbooks["one"]
    assert shelf.read_body(runbook) == "old body\n"
    (books / "one.md").write_text(runbook_text("new body\n"))
    assert shelf.read_body(runbook) is None
    assert shelf.read_body(shelf.current().runbooks["one"]) == "new body\n"


def test_the_parse_cache_serves_unchanged_files_and_never_a_changed_one(tmp_path: Path) -> None:
    books = tmp_path / "books"
    books.mkdir()
    (books / "one.md").write_text(runbook_text(summary="cached"))
    library(books).refresh()
    assert cache_module.cache_file(books).exists()
    assert oct(cache_module.cache_file(books).stat().st_mode & 0o777) == "0o600"
    # A new process (a new library) reads the cache: a forged entry shows it is used, not re-parsed...
    entries = cache_module.read_cache(books)
    signature, runbook = entries["one.md"]
    forged = type(runbook)(**{**runbook.__dict__, "summary": "from the cache"})
    cache_module.write_cache(books, {"one.md": (signature, forged)})
    assert library(books).refresh().runbooks["one"].summary == "from the cache"
    # ...and any change to the file (here: the same size, a new mtime) is parsed afresh.
    time.sleep(0.01)
    (books / "one.md").write_text(runbook_text(summary="edited"))
    assert library(books).refresh().runbooks["one"].summary == "edited"


def forge_cache(books: Path, key: str, **changes: object) -> None:
    """Rewrite one entry of the parse cache, its signature kept: the entry a running server would trust."""
    signature, runbook = cache_module.read_cache(books)[key]
    forged = type(runbook)(**{**runbook.__dict__, **changes})
    cache_module.write_cache(books, {key: (signature, forged)})


@pytest.mark.parametrize(
    "changes",
    [
        {"priority": 11},
        {"priority": 0},
        {"modes": ("readonly", "root")},
        {"modes": ()},
        {"name": "../escape"},
        {"relpath": "../outside/guard.md"},  # the body would be read from elsewhere
        {"sha256": "not a digest"},
    ],
)
def test_a_cache_entry_parsing_could_not_have_produced_is_ignored(tmp_path: Path, changes: dict[str, object]) -> None:
    books = tmp_path / "books"
    books.mkdir()
    (books / "guard.md").write_text(runbook_text(priority=10, modes="[open]"))
    library(books).refresh()
    forge_cache(books, "guard.md", summary="from the cache", **changes)
    assert cache_module.read_cache(books) == {}
    runbook = library(books).refresh().runbooks["guard"]
    assert (runbook.summary, runbook.priority, runbook.modes) == ("Some guidance.", 10, ("open",))


def test_a_cache_file_others_could_have_written_is_ignored(tmp_path: Path) -> None:
    books = tmp_path / "books"
    books.mkdir()
    (books / "one.md").write_text(runbook_text(priority=10))
    library(books).refresh()
    # A guardrail demoted: an entry parsing could have produced, so only who may write the file tells.
    forge_cache(books, "one.md", priority=1)
    path = cache_module.cache_file(books)
    assert library(books).refresh().runbooks["one"].priority == 1  # the cache is this user's own: trusted
    for mode in (0o620, 0o602):  # group- or other-writable
        forge_cache(books, "one.md", priority=1)
        path.chmod(mode)
        assert cache_module.read_cache(books) == {}
        assert library(books).refresh().runbooks["one"].priority == 10
    forge_cache(books, "one.md", priority=1)
    assert os.geteuid() == 0, "run as root (the test machine's user) to give the cache file another owner"
    os.chown(path, 65534, 65534)  # nobody's
    assert cache_module.read_cache(books) == {}
    assert library(books).refresh().runbooks["one"].priority == 10


# -- search and budget ---------------------------------------------------------------------------------------


def corpus(tmp_path: Path) -> Retrieval:
    books = tmp_path / "books"
    books.mkdir()
    (books / "guard.md").write_text(runbook_text("Never restart the primary in business hours.\n", priority=10))
    (books / "restart.md").write_text(
        runbook_text("# Restart a replica\n\n## Check lag\n\nok\n", tags="[postgres, restart]", priority=7)
    )
    (books / "certs.md").write_text(runbook_text("# Rotate certificates\n\ntext\n", hosts='["@edge"]', priority=8))
    (books / "unrelated.md").write_text(runbook_text("Nothing to see.\n", priority=9))
    (books / "hidden.md").write_text(runbook_text("restart restart\n", modes="[open]", tags="[restart]"))
    return Retrieval(library(books), "readonly", lambda host: ["edge"] if host == "edge1" else [])


def names(briefing: Briefing) -> list[tuple[str, str]]:
    return [(entry.name, entry.shown) for entry in briefing.entries]


def test_scoring_ranks_matches_times_priority_and_always_includes_priority_10(tmp_path: Path) -> None:
    retrieval = corpus(tmp_path)
    found = retrieval.search(["Restart", "postgres"], 8192)
    # guard: always first; restart: name, tags, title, chapter... ; hidden: offered only in open mode
    assert [name for name, _ in names(found)] == ["guard", "restart"]
    scores = {entry.name: entry.score for entry in found.entries}
    assert scores["restart"] == 7 * 5  # restart: name, title, tags, chapter; postgres: tags
    assert found.total == 4 and found.matched == 2
    nothing = retrieval.search(["zebra"], 8192)
    assert names(nothing) == [("guard", "full")]  # the guardrail even when nothing matches
    prefix = retrieval.search(["cert"], 8192)
    assert [name for name, _ in names(prefix)] == ["guard", "certs"]  # "cert" starts "certificates"
    assert [name for name, _ in names(retrieval.search(["ert"], 8192))] == ["guard"]  # not inside a word


def test_a_call_on_a_host_matches_runbooks_for_its_inventory_group(tmp_path: Path) -> None:
    retrieval = corpus(tmp_path)
    briefing = retrieval.call_briefing(["ssh_exec", "edge1", "uptime"], ["edge1"], 8192)
    assert [name for name, _ in names(briefing)] == ["guard", "certs"]


def test_the_budget_degrades_full_text_to_summaries_to_names_to_a_count(tmp_path: Path) -> None:
    books = tmp_path / "books"
    books.mkdir()
    for index in range(60):
        body = f"# Disk {index}\n\n" + "Check the disk before you act. " * 20 + "\n"
        (books / f"disk{index:02d}.md").write_text(runbook_text(body, tags="[disk]", priority=1 + index % 9))
    retrieval = Retrieval(library(books), "open")
    for budget in (1024, 2048, 4096, 8192):
        briefing = retrieval.search(["disk"], budget)
        size = len(briefing.text.encode())
        assert size <= budget, (budget, size)
        shown = [entry.shown for entry in briefing.entries]
        assert shown == sorted(shown, key=["full", "summary", "name"].index)  # never back up a level
        assert briefing.matched == 60 and len(briefing.entries) + briefing.omitted == 60
        assert "More can be asked for at any time" in briefing.text
    small = retrieval.search(["disk"], 1024)
    assert small.omitted > 0 and "more matching runbooks not shown" in small.text
    big = retrieval.search(["disk"], 8192)
    assert {"full", "summary", "name"} <= {entry.shown for entry in big.entries}
    priorities = [entry.priority for entry in big.entries]
    assert priorities == sorted(priorities, reverse=True)  # equal matches: higher priority first


def test_every_guardrail_is_named_however_many_there_are(tmp_path: Path) -> None:
    books = tmp_path / "books"
    books.mkdir()
    for index in range(50):
        body = f"# Rule {index}\n\n" + "Never do this without asking first. " * 10 + "\n"
        (books / f"rule-{index:02d}.md").write_text(runbook_text(body, priority=10))
    for index in range(20):
        (books / f"disk{index:02d}.md").write_text(runbook_text("Check the disk.\n", tags="[disk]", priority=9))
    retrieval = Retrieval(library(books), "open")
    for keywords in (["disk"], ["zebra"]):
        briefing = retrieval.search(keywords, 1024)
        shown = {entry.name for entry in briefing.entries}
        guards = {f"rule-{index:02d}" for index in range(50)}
        assert guards <= shown, sorted(guards - shown)
        assert all(name in briefing.text for name in guards)
        assert len(briefing.text.encode()) <= 1024
        assert len(briefing.entries) + briefing.omitted == briefing.matched


def test_guardrails_whose_names_alone_overflow_the_budget_are_all_named() -> None:
    """More guardrails than a budget can name: none is dropped, the text is longer than asked for."""
    from relay_shell.runbooks.search import Hit

    guards = [
        parse(runbook_text(name=f"guardrail-with-a-long-name-{index:03d}", priority=10), f"g{index}.md")
        for index in range(60)
    ]
    hits = [Hit(runbook, 0, 0) for runbook in guards]  # type: ignore[arg-type]
    briefing = compose(hits, 60, 1024, "heading", "closing", lambda runbook: None)
    assert len(briefing.entries) == 60 and briefing.omitted == 0
    assert all(runbook.name in briefing.text for runbook in guards)  # type: ignore[attr-defined]


def test_compose_skips_a_body_that_changed_under_it() -> None:
    briefing = compose([], 0, 1024, "heading", "closing", lambda runbook: None)
    assert briefing.text.startswith("heading\n") and briefing.text.rstrip().endswith("closing")


# -- the index in the instructions ----------------------------------------------------------------------------


def test_the_index_is_bounded_guardrails_first_then_priority(tmp_path: Path) -> None:
    books = tmp_path / "books"
    books.mkdir()
    for index in range(200):
        priority = 10 if index in (150, 151) else 1 + index % 9
        (books / f"r{index:03d}.md").write_text(
            runbook_text(f"Runbook {index} is about a subsystem of the fleet in some detail.\n", priority=priority)
        )
    retrieval = Retrieval(library(books, max_files=500), "open")
    index = instructions_index(retrieval.visible(), gate_on=True)
    assert len(index.encode()) <= MAX_INDEX_BYTES
    lines = index.splitlines()
    assert lines[2] == "Always apply (priority 10):" and lines[3].startswith("- r150:")
    assert lines[5] == "Others, by priority:" and lines[6].startswith("- r008 (p9):")
    assert lines[-1].startswith("… ") and lines[-1].endswith("more, use runbook_search.")
    listed = sum(1 for line in lines if line.startswith("- "))
    assert lines[-1] == f"… {200 - listed} more, use runbook_search."
    assert "begin_session" in index  # the gate note


# -- the gate's memory ----------------------------------------------------------------------------------------


def test_the_gate_remembers_briefed_calls_per_session_and_opens_per_session() -> None:
    gate = BriefingGate(True, lambda owner: True, lambda words, hosts: compose([], 0, 1024, "", "", lambda r: None))
    call = call_digest("shell_exec", {"command": "touch x", "timeout": 60})
    assert call == call_digest("shell_exec", {"timeout": 60, "command": "touch x"})
    assert not gate.admits("a", call)
    gate.remember_briefed("a", call)
    assert gate.admits("a", call) and not gate.admits("b", call)
    assert not gate.admits("a", call_digest("shell_exec", {"command": "touch y", "timeout": 60}))
    gate.open("b")
    assert gate.admits("b", "anything") and not gate.is_open("a")
    assert gate.describe("b")["this_session"] == "open"
    off = BriefingGate(False, lambda owner: True, lambda words, hosts: compose([], 0, 1024, "", "", lambda r: None))
    assert off.admits("a", call)


def test_call_words_keep_the_tool_hosts_and_meaningful_words() -> None:
    words = call_words("ssh_exec", ["systemctl restart postgresql-15 && rm -rf /var/lib/x 2>&1"], ["db1"])
    assert words[:2] == ["ssh_exec", "db1"]
    assert "systemctl" in words and "restart" in words and "postgresql" in words and "var" in words
    assert "rm" not in words and "15" not in words and "2" not in words
