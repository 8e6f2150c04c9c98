"""The runbook directory: scanned (recursive, bounded in files and bytes, symlinks never followed), each file
parsed once per version of it, and re-scanned cheaply on access (at most every POLL_INTERVAL seconds) so an added,
edited or removed file takes effect without a restart.

A file that cannot be loaded (bad front matter, too large, a duplicate name, a built-in prompt's name, a symlink)
is left out and reported in the catalog's problems: never a crash, never a silently missing runbook.

A scan of 1,000 files is ~9 ms of stat calls; only new or changed files are read and parsed. Requests scan on
the event loop, at most every POLL_INTERVAL seconds and never more than 5 % of the time (a larger directory is
scanned less often); the list_changed watcher scans in a worker thread. A lock keeps them to one scan at a time.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from relay_shell.runbooks.cache import Signature, read_cache, write_cache
from relay_shell.runbooks.document import Runbook, RunbookProblem, parse_runbook

logger = logging.getLogger("relay_shell")

POLL_INTERVAL = 0.5  # seconds: how stale a runbook may be when a request reads it (a small directory)
SCAN_SHARE = 20  # a scan waits at least this many times as long as the last one took (≤ 5 % of the time)
MAX_DIRECTORIES = 10000  # directories walked at most under RUNBOOK_DIR


@dataclass(frozen=True)
class Problem:
    path: str  # relative to RUNBOOK_DIR ("." for the directory itself)
    problem: str


@dataclass(frozen=True)
class Catalog:
    """One consistent view of the directory. A new generation on every change."""

    generation: int
    runbooks: dict[str, Runbook]  # every loaded runbook by name, sorted by name (all policy modes)
    problems: tuple[Problem, ...]
    files: int  # *.md files found

    def visible(self, mode: str) -> list[Runbook]:
        return [runbook for runbook in self.runbooks.values() if mode in runbook.modes]


@dataclass
class _Scan:
    signatures: dict[str, Signature] = field(default_factory=dict)  # relpath -> signature, sorted by relpath
    problems: list[Problem] = field(default_factory=list)
    found: int = 0


class RunbookLibrary:
    def __init__(self, directory: Path, max_files: int, max_bytes: int, reserved_names: frozenset[str]) -> None:
        self.directory = directory
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.reserved_names = reserved_names  # the built-in prompts: a runbook may not take their names
        self._loaded: dict[str, tuple[Signature, Runbook | Problem]] = {}
        self._signatures: dict[str, Signature] | None = None
        self._scan_problems: list[Problem] = []
        self._catalog = Catalog(generation=0, runbooks={}, problems=(), files=0)
        self._polled_at = float("-inf")
        self.scan_seconds = 0.0  # how long the last scan took
        self._lock = threading.Lock()

    def poll_interval(self) -> float:
        return max(POLL_INTERVAL, SCAN_SHARE * self.scan_seconds)

    def current(self) -> Catalog:
        """The catalog, re-scanned first when the last scan is older than the poll interval."""
        if time.monotonic() - self._polled_at >= self.poll_interval():
            return self.refresh()
        return self._catalog

    def refresh(self) -> Catalog:
        """Scan now; a new catalog generation when any file, or what is wrong with the directory, changed."""
        with self._lock:
            return self._refresh()

    def _refresh(self) -> Catalog:
        started = time.monotonic()
        scanned = scan(self.directory, self.max_files)
        self._polled_at = time.monotonic()
        self.scan_seconds = self._polled_at - started
        if scanned.signatures == self._signatures and scanned.problems == self._scan_problems:
            return self._catalog
        if self._signatures is None:  # first load: what earlier starts parsed, for files that did not change
            for relpath, (signature, runbook) in read_cache(self.directory).items():
                self._loaded[relpath] = (signature, runbook)
        parsed_now = False
        loaded: dict[str, tuple[Signature, Runbook | Problem]] = {}
        for relpath, signature in scanned.signatures.items():
            known = self._loaded.get(relpath)
            if known is not None and known[0] == signature:
                loaded[relpath] = known
                continue
            outcome = load_file(self.directory, relpath, signature, self.max_bytes)
            loaded[relpath] = (signature, outcome)
            parsed_now = parsed_now or isinstance(outcome, Runbook)
        forgotten = set(self._loaded) - set(loaded)
        self._loaded = loaded
        self._signatures = scanned.signatures
        self._scan_problems = scanned.problems
        if parsed_now or forgotten:
            cached = {path: (sig, item) for path, (sig, item) in loaded.items() if isinstance(item, Runbook)}
            write_cache(self.directory, cached)
        self._catalog = build_catalog(
            self._catalog.generation + 1, loaded, scanned.problems, scanned.found, self.reserved_names
        )
        return self._catalog

    def read_text(self, runbook: Runbook) -> str | None:
        """The whole file of this version of the runbook, read now; None when the file changed or went away
        since it was loaded (the next access re-scans)."""
        try:
            data = read_regular_file(self.directory / runbook.relpath, self.max_bytes)
        except (OSError, ValueError):
            data = None
        if data is None or hashlib.sha256(data).hexdigest() != runbook.sha256:
            self._polled_at = float("-inf")
            return None
        return data.decode("utf-8").removeprefix("\ufeff")

    def read_body(self, runbook: Runbook) -> str | None:
        text = self.read_text(runbook)
        return text[runbook.body_start :] if text is not None else None


def scan(directory: Path, max_files: int) -> _Scan:
    """Every regular `*.md` file under the directory (hidden names skipped), by relative path. Symlinks are not
    followed, to a file or a directory alike: a runbook is a file inside the directory, and a link could lead
    anywhere the server's user can read."""
    result = _Scan()
    pending = [(str(directory), "")]  # a directory to read, and its path relative to the runbook directory
    walked = 0
    found: dict[str, Signature] = {}
    while pending:
        current, prefix = pending.pop()
        walked += 1
        if walked > MAX_DIRECTORIES:
            result.problems.append(Problem(".", f"more than {MAX_DIRECTORIES} directories; the rest were not read"))
            break
        try:
            with os.scandir(current) as entries:
                listing = list(entries)
        except OSError as exc:
            result.problems.append(Problem(prefix.rstrip("/") or ".", f"directory unreadable: {exc.strerror}"))
            continue
        for entry in listing:
            if entry.name.startswith("."):
                continue  # editors' and version control's files (.git/, .#draft.md)
            relpath = prefix + entry.name
            try:
                if entry.is_symlink():
                    result.problems.append(
                        Problem(relpath, "a symlink; not followed (a runbook must be a file in the directory)")
                    )
                    continue
                if entry.is_dir(follow_symlinks=False):
                    pending.append((entry.path, relpath + "/"))
                    continue
                if not entry.name.lower().endswith(".md"):
                    continue
                status = entry.stat(follow_symlinks=False)
            except OSError as exc:
                result.problems.append(Problem(relpath, f"unreadable: {exc.strerror}"))
                continue
            if not stat.S_ISREG(status.st_mode):
                result.problems.append(Problem(relpath, "not a regular file"))
                continue
            found[relpath] = signature_of(status)
    result.found = len(found)
    kept = sorted(found)[:max_files]
    result.signatures = {relpath: found[relpath] for relpath in kept}
    if len(found) > max_files:
        skipped = sorted(found)[max_files:]
        result.problems.append(
            Problem(
                skipped[0],
                f"{len(skipped)} files over RELAY_SHELL_RUNBOOK_MAX_FILES={max_files} not loaded "
                f"(files are taken in path order; this is the first left out)",
            )
        )
    return result


def load_file(directory: Path, relpath: str, signature: Signature, max_bytes: int) -> Runbook | Problem:
    """Parse one file. A file that changes while it is read is stored under the scan's (older) signature, so the
    next scan parses it again."""
    size = signature[2]
    if size > max_bytes:  # refused by size before anything is read
        return Problem(relpath, f"{size} bytes is over RELAY_SHELL_RUNBOOK_MAX_BYTES={max_bytes}; not read")
    try:
        data = read_regular_file(directory / relpath, max_bytes)
    except OSError as exc:
        return Problem(relpath, f"unreadable: {exc.strerror or exc}")
    except ValueError as exc:
        return Problem(relpath, str(exc))
    try:
        return parse_runbook(relpath, data, hashlib.sha256(data).hexdigest())
    except RunbookProblem as exc:
        return Problem(relpath, str(exc))
    except Exception as exc:  # MemoryError, RecursionError, a parser bug: one file, never the server
        logger.warning("runbook %s could not be parsed: %s", relpath, type(exc).__name__)
        return Problem(relpath, f"could not be parsed ({type(exc).__name__}); not loaded")


def read_regular_file(path: Path, max_bytes: int) -> bytes:
    """The file's bytes, refusing what is not a regular file at open time (a symlink swapped in after the scan,
    a FIFO that would block) and anything over max_bytes."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise ValueError("not a regular file")
        if status.st_size > max_bytes:
            raise ValueError(f"{status.st_size} bytes is over RELAY_SHELL_RUNBOOK_MAX_BYTES={max_bytes}; not read")
        chunks = []
        remaining = max_bytes + 1
        while remaining > 0:
            chunk = os.read(descriptor, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:  # grew while being read
            raise ValueError(f"over RELAY_SHELL_RUNBOOK_MAX_BYTES={max_bytes} bytes; not read")
        return data
    finally:
        os.close(descriptor)


def build_catalog(
    generation: int,
    loaded: dict[str, tuple[Signature, Runbook | Problem]],
    scan_problems: list[Problem],
    found: int,
    reserved_names: frozenset[str],
) -> Catalog:
    """Runbooks by name. A name used by two files loads neither (which one the team meant is not ours to guess),
    and a built-in prompt's name is refused: both reported."""
    problems = list(scan_problems)
    by_name: dict[str, list[Runbook]] = {}
    for _signature, outcome in loaded.values():
        if isinstance(outcome, Problem):
            problems.append(outcome)
        else:
            by_name.setdefault(outcome.name, []).append(outcome)
    runbooks: dict[str, Runbook] = {}
    for name in sorted(by_name):
        holders = by_name[name]
        if len(holders) > 1:
            paths = ", ".join(runbook.relpath for runbook in holders)
            for runbook in holders:
                problems.append(
                    Problem(
                        runbook.relpath,
                        f"name {name!r} is used by {len(holders)} files ({paths}); none of them is loaded",
                    )
                )
        elif name in reserved_names:
            problems.append(
                Problem(holders[0].relpath, f"name {name!r} is a built-in prompt of relay-shell; choose another name")
            )
        else:
            runbooks[name] = holders[0]
    problems.sort(key=lambda problem: problem.path)
    return Catalog(generation=generation, runbooks=runbooks, problems=tuple(problems), files=found)


def signature_of(status: os.stat_result) -> Signature:
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)
