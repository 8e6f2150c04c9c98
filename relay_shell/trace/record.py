"""One traced process tree's exec list as an audit record keeps it: the exact count, the first entries (capped in
number and in size), and a SHA-256 over the full ordered list, computed as entries arrive. Memory stays bounded
whatever the tree does: a fork bomb of execs only moves the counters and the digest.

An entry: pid, ppid, the program's absolute path, argv redacted like audited arguments and bounded tighter
(adr/0016's head + tail + length + SHA-256 of a long argument, from 256 characters on with 64 of head and of
tail; the first 64 arguments then a digest), the time offset from the start of the trace, and whether the exec
went on (`ok`; a refused one has `denied`). The kept entries are charged by their encoded size before they are
added: one that does not fit keeps only a digest of its argv, or is left out (the count and digest go on), so
the record's `execs` always fits in the record.

The digest covers what does not change between two runs of the same commands: per entry, in order, the path,
the redacted argv and the outcome (not pids nor times), so identical runs give identical digests.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import orjson

from relay_shell.audit.record import audit_arguments
from relay_shell.trace.deny import refusal_shown
from relay_shell.trace.resolve import Target

DEFAULT_ENTRIES = 64
ENTRY_BYTES = 24 * 1024  # the kept entries, encoded, together: the end record stays well under its 64 KiB
COMPACT_ROOM = 512  # room an entry reduced to a digest of its argv needs
TRACE_LONG = 256  # characters from which an argument is summarised (audited arguments: 1,024)
TRACE_KEEP = 64  # characters of head and of tail kept of a summarised argument (audited arguments: 256)
DENIED_KEPT = 16
# Programs run after the listed entries are full, each named once (path and count), so that a flood of decoys
# cannot push the program that matters out of the record (attack 3, T1): bounded in number and bytes. The number is
# the audit log's own bound on a list (audit/record.py MAX_ENTRIES: a longer list keeps its first 64 items and a
# digest), so the log keeps every item; when the list is full, the directory holding the most of its items is folded
# into one item counting their execs (attack 4, T2: decoys share a directory the program that matters is not in).
LATER_PROGRAMS = 64
LATER_BYTES = 8 * 1024
FOLDED_ROOM = 48  # what a folded directory's item adds to its path's length, encoded
_REDACTED_CACHE_MAX = 1024


class ExecTrace:
    """The exec list of one call, one session, or one session_send (a window of its session's trace)."""

    def __init__(self, max_entries: int = DEFAULT_ENTRIES) -> None:
        self.started = time.monotonic()
        self.max_entries = max_entries
        self.count = 0
        self.not_found = 0  # exec attempts of a path that does not exist: a PATH search's misses, typos
        self.denied = 0
        self.setid_dropped = 0  # set-user-ID programs run without their privilege (no_new_privs)
        self.entries: list[dict[str, Any]] = []
        self.entry_bytes = 0
        self.listed: set[str] = set()  # the programs the kept entries name
        self.later: dict[str, int] = {}  # programs run after the entries were full, not listed: how many times
        # Directories (ending in /) whose programs are counted together since the list was full: [programs named
        # before the fold, execs]. A program under one is not named (its path is in no item but the fold's).
        self.folded: dict[str, list[int]] = {}
        self.later_bytes = 0
        self.later_omitted = 0  # execs of programs that could not be named nor folded (no directory to fold but /)
        self.denied_execs: list[str] = []
        self.digest = hashlib.sha256()
        self.state = "traced"  # or "untraced: <why>" when the filter could not be installed for this tree
        self.window: ExecTrace | None = None  # a session_send's trace gets the same entries while it runs
        self.closed = False  # its record was written: later execs of the tree are late (trace.late)
        self.call_id: str | None = None  # the call whose record this is: late execs are recorded under it
        self.late: ExecTrace | None = None  # execs after the record was written, until an `exec:late` record
        self.late_since = 0.0
        # The tree's first exec, made by the server itself and checked by it before the spawn: its notification
        # (from a process sharing the server's memory, lineage.shares_memory) is answered without being read. Its
        # entry is built once its outcome is known, before any other exec's (flush_first): [time, pid, parent,
        # path, argv, resolve.Target, outcome, set-id dropped].
        self.first: list[Any] | None = None

    def wants_entry(self) -> bool:
        """Whether the next exec is listed (here or in the window): only then is its entry made."""
        if len(self.entries) < self.max_entries and self.entry_bytes <= ENTRY_BYTES - COMPACT_ROOM:
            return True
        return self.window is not None and self.window.wants_entry()

    def entries_left(self) -> int:
        """At most how many more execs are listed (here or in the window): 0 exactly when wants_entry() is not."""
        own = 0
        if self.entry_bytes <= ENTRY_BYTES - COMPACT_ROOM:
            own = max(0, self.max_entries - len(self.entries))
        return max(own, self.window.entries_left() if self.window is not None else 0)

    def late_trace(self) -> ExecTrace:
        """Where an exec after the record was written goes (the tracer writes it as an `exec:late` record)."""
        if self.late is None:
            self.late = ExecTrace(self.max_entries)
            self.late.started = self.started  # offsets from the start of the call, like its end record's
            self.late_since = time.monotonic()
        return self.late

    def flush_first(self) -> None:
        """The held first exec into the list (redaction and the entry built off the spawn's path)."""
        if self.first is None:
            return
        at, pid, ppid, path, argv, found, outcome, setid = self.first
        self.first = None
        shown = redacted_argv(argv)
        fields = resolved_fields(found)
        entry = None
        if self.wants_entry():
            entry = entry_of(self.started, at, pid, ppid, path, shown, len(argv), len(argv), False, outcome, fields)
            if setid:
                entry["setid_dropped"] = True
        denied_text = refusal_shown(path, shown, found.refusal) if outcome == "denied" else None
        self.add(entry, digest_line(path, shown, outcome, fields), denied_text, setid, programs_of(found))

    def add(
        self,
        entry: dict[str, Any] | None,
        digest_line: bytes,
        denied_text: str | None,
        setid: bool,
        programs: tuple[str, ...] = (),
    ) -> None:
        """One exec: its entry when it is listed, its digest line, its refusal, and the programs it ran (its
        resolved program, its interpreters), named in `later_programs` when it is not listed."""
        self.flush_first()
        self.count += 1
        self.digest.update(digest_line)
        if denied_text is not None:
            self.denied += 1
            if len(self.denied_execs) < DENIED_KEPT:
                self.denied_execs.append(denied_text)
        if setid:
            self.setid_dropped += 1
        kept = entry is not None and len(self.entries) < self.max_entries and self._keep(entry, programs)
        if not kept:
            self._name_later(programs)
        if self.window is not None:
            self.window.add(entry, digest_line, denied_text, setid, programs)

    def _keep(self, entry: dict[str, Any], programs: tuple[str, ...]) -> bool:
        """Charge the entry's encoded size before keeping it: too large for what is left, it keeps a digest of
        its argv instead of the argv; still too large, it is left out (counted in entries_omitted)."""
        size = len(orjson.dumps(entry))
        if self.entry_bytes + size > ENTRY_BYTES:
            entry = compact(entry)
            size = len(orjson.dumps(entry))
            if self.entry_bytes + size > ENTRY_BYTES:
                return False
        self.entries.append(entry)
        self.entry_bytes += size
        self.listed.update(programs)
        return True

    def _name_later(self, programs: tuple[str, ...]) -> None:
        """An exec that is not listed: each program it ran that no kept entry names is counted under its name, or
        under the folded directory it is in; a new name that does not fit (LATER_PROGRAMS items, LATER_BYTES) folds
        the directory holding the most items first (`_fold`); one that still does not fit is counted in
        later_omitted."""
        for program in programs:
            if program in self.listed:
                continue
            if program in self.later:
                self.later[program] += 1
                continue
            size = len(program) + 16
            while True:
                folded = self._folded_under(program) if self.folded else None
                if folded is not None:
                    self.folded[folded][1] += 1
                    break
                if len(self.later) + len(self.folded) < LATER_PROGRAMS and self.later_bytes + size <= LATER_BYTES:
                    self.later[program] = 1
                    self.later_bytes += size
                    break
                if not self._fold(program):
                    self.later_omitted += 1
                    break

    def _folded_under(self, program: str) -> str | None:
        """The folded directory `program` is in, if any."""
        end = program.rfind("/")
        while end > 0:
            directory = program[: end + 1]
            if directory in self.folded:
                return directory
            end = program.rfind("/", 0, end)
        return None

    def _fold(self, arriving: str) -> bool:
        """The list is full: the directory (any depth, not /) holding the most of its items and of `arriving`
        (the deepest of equals) becomes one item, `{"directory", "programs_at_least", "count"}`, which counts the
        execs of every program under it from then on. A flood of decoys folds the directory the decoys share, and
        the program that matters, elsewhere, is still named. False when no directory but / holds two items."""
        holding: dict[str, int] = {}
        for item in [arriving, *self.later, *self.folded]:
            end = item.rstrip("/").rfind("/")
            while end > 0:
                directory = item[: end + 1]
                holding[directory] = holding.get(directory, 0) + 1
                end = item.rfind("/", 0, end)
        best = max(holding.items(), key=lambda pair: (pair[1], len(pair[0])), default=("", 0))
        directory, held = best
        if held < 2:
            return False
        programs = count = 0
        for name in [name for name in self.later if name.startswith(directory)]:
            programs += 1
            count += self.later.pop(name)
            self.later_bytes -= len(name) + 16
        for name in [name for name in self.folded if name.startswith(directory)]:
            folded_programs, folded_count = self.folded.pop(name)
            programs += folded_programs
            count += folded_count
            self.later_bytes -= len(name) + FOLDED_ROOM
        self.folded[directory] = [programs, count]
        self.later_bytes += len(directory) + FOLDED_ROOM
        return True

    def missed(self) -> None:
        self.flush_first()
        self.not_found += 1
        if self.window is not None:
            self.window.missed()

    def close(self) -> None:
        """Its record is written: what later execs of the tree need is kept (counters, call_id), the entries go."""
        self.closed = True
        self.entries = []
        self.listed = set()
        self.later = {}
        self.folded = {}

    def record(self) -> dict[str, Any]:
        """The `execs` field."""
        self.flush_first()
        fields: dict[str, Any] = {
            "count": self.count,
            "entries": list(self.entries),
            "entries_omitted": self.count - len(self.entries),
            "sha256": self.digest.hexdigest(),
            "not_found": self.not_found,
        }
        if self.later or self.folded or self.later_omitted:
            fields["later_programs"] = [{"program": name, "count": count} for name, count in self.later.items()]
            fields["later_programs"] += [
                {"directory": name, "programs_at_least": programs, "count": count}
                for name, (programs, count) in self.folded.items()
            ]
        if self.later_omitted:
            fields["later_programs_omitted"] = self.later_omitted
        if self.denied:
            fields["denied"] = self.denied
        if self.setid_dropped:
            fields["setid_dropped"] = self.setid_dropped
        if self.state != "traced":
            fields["state"] = self.state
        return fields


# argv -> its redacted, bounded form, for argv that redaction leaves as they are (the key is then exactly what the
# log shows: no secret is kept in memory); the same `/bin/true` a thousand times is redacted once.
_unchanged: dict[tuple[str, ...], list[Any]] = {}


def redacted_argv(argv: list[str]) -> list[Any]:
    """argv redacted and bounded like audited arguments, long arguments tighter (TRACE_LONG, TRACE_KEEP)."""
    key = tuple(argv)
    cached = _unchanged.get(key)
    if cached is not None:
        return cached
    bounded = audit_arguments({"argv": argv})["argv"]
    shown = [_tighter(item) for item in bounded] if isinstance(bounded, list) else [bounded]
    if shown == argv:
        if len(_unchanged) >= _REDACTED_CACHE_MAX:
            _unchanged.clear()
        _unchanged[key] = shown
    return shown


def _tighter(item: Any) -> Any:
    """One argument as audit_arguments bounded it, summarised from TRACE_LONG characters with TRACE_KEEP of
    head and tail (the length and SHA-256 are of the whole redacted argument, as there)."""
    if isinstance(item, str) and len(item) > TRACE_LONG:
        return {
            "head": item[:TRACE_KEEP],
            "tail": item[-TRACE_KEEP:],
            "len": len(item),
            "sha256": hashlib.sha256(item.encode("utf-8", "surrogatepass")).hexdigest(),
        }
    if isinstance(item, dict) and "head" in item and "tail" in item:
        return {**item, "head": item["head"][:TRACE_KEEP], "tail": item["tail"][-TRACE_KEEP:]}
    return item


def compact(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry whose argv is replaced by its count and digest (what does not fit the record's room)."""
    argv = entry.get("argv") or []
    digest = hashlib.sha256(orjson.dumps(argv)).hexdigest()
    return {**entry, "argv": [{"omitted": len(argv), "sha256_of_all": digest}], "argv_cut": True}


def unreadable_entry(trace_started: float, at: float, pid: int, ppid: int, refused: bool) -> dict[str, Any]:
    """An exec whose request could not be read (a 32-bit pointer the layer misread, a process that made itself
    non-dumpable under a server without CAP_SYS_PTRACE): listed all the same, with what is known."""
    entry: dict[str, Any] = {
        "pid": pid,
        "ppid": ppid,
        "path": None,
        "argv": [],
        "t_ms": round((at - trace_started) * 1000, 1),
        "ok": not refused,
        "error": "unreadable",
    }
    if refused:
        entry["denied"] = True
    return entry


def digest_line(path: str | None, shown: list[Any], outcome: str, found: dict[str, Any] | None = None) -> bytes:
    """One exec's line of the trace's digest: what two identical runs share (no pid, no time); with what the path
    resolved to (`program`, `interpreter`) when that differs from the path."""
    line = [path, shown, outcome] if not found else [path, shown, outcome, found]
    return orjson.dumps(line) + b"\n"


def programs_of(target: Target) -> tuple[str, ...]:
    """The files an exec ran, for later_programs: its program (the path itself when no link, descriptor or
    /proc path led elsewhere; the path when it could not be determined) and each `#!` interpreter's."""
    first = target.program if target.program is not None and not target.undetermined else target.path
    names = [first] if first else []
    names += [level.program or level.path for level in target.interpreters]
    return tuple(names)


def resolved_fields(target: Target) -> dict[str, Any]:
    """What an entry says of where its path led (adr/0027): the program when it is not the path itself (a link,
    /dev/fd/N, /proc/self/…), `undetermined` with the reason when no path names it, `refusal` when EXEC_DENY refused
    it for what could not be determined (its program, or the one a loader in it loads), and a script's interpreter
    chain (each level's interpreter, its program, its `#!` argument redacted, an env-style target)."""
    fields: dict[str, Any] = {}
    if target.program is not None and target.program != target.path:
        fields["program"] = target.program
    if target.undetermined:
        fields["program"] = None
        fields["undetermined"] = target.undetermined
    if target.refusal:
        fields["refusal"] = target.refusal
    levels = []
    for level in target.interpreters:
        shown: dict[str, Any] = {"path": level.path}
        if level.program != level.path:
            shown["program"] = level.program
        if level.argument is not None:
            shown["argument"] = redacted_argv([level.argument])[0]
        if level.target:
            shown["runs"] = redacted_argv(level.target)
        levels.append(shown)
    if levels:
        fields["interpreter"] = levels
    return fields


def entry_of(
    trace_started: float,
    at: float,
    pid: int,
    ppid: int,
    path: str,
    shown: list[Any],
    argc: int,
    argv_len: int,
    cut: bool,
    outcome: str,
    found: dict[str, Any] | None = None,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "pid": pid,
        "ppid": ppid,
        "path": path,
        "argv": shown,
        "t_ms": round((at - trace_started) * 1000, 1),
        "ok": outcome == "ok",
    }
    if found:
        entry.update(found)
    if argc != argv_len or cut:
        entry["argc"] = argc
        entry["argv_cut"] = True
    if outcome == "denied":
        entry["denied"] = True
    elif outcome != "ok":
        entry["error"] = outcome
    return entry
