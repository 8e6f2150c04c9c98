"""What a transfer set out to do and what became of each entry: the result a model reads (a sha256sum-style
line per file, FAILED lines, a headline), its structured fields, and `target.transfer` for the audit record —
bounded (MAX_LISTED files and failures listed), with `manifest_sha256` committing to every file that arrived.
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass, field
from typing import Any

from relay_shell.capture import BoundedCapture
from relay_shell.plan import Execution, Outcome
from relay_shell.ssh.transfers.ends import Entry, Job
from relay_shell.ssh.transfers.sftp_files import Landed

MAX_LISTED = 1000  # files and failures listed in the result and the audit record; the manifest digest has all


@dataclass
class TransferReport:
    """What the transfer set out to do and what became of each entry; the result and the audit record."""

    job: Job
    output_budget: int  # bytes of text the result shows (head + tail of the lines)
    entries: list[Entry] = field(default_factory=list)  # the scanned source, once known
    settled: list[bool] = field(default_factory=list)  # per entry: arrived, or failed with a reason
    arrived: list[dict[str, Any]] = field(default_factory=list)  # the first MAX_LISTED
    failed: list[dict[str, Any]] = field(default_factory=list)  # the first MAX_LISTED
    failed_count: int = 0
    files_done: int = 0
    bytes_done: int = 0
    links_done: int = 0
    dirs_done: int = 0
    files_total: int = 0
    bytes_total: int = 0
    started: bool = False  # the scan is done and copying began
    current: int | None = None  # the entry being copied: the one a timeout interrupts
    host_key: str | None = None
    leftovers: list[str] = field(default_factory=list)  # remote temporary files that could not be removed
    manifest: Any = field(default_factory=hashlib.sha256)  # over every `sha256  bytes  path` line
    body: BoundedCapture = field(init=False)

    def __post_init__(self) -> None:
        self.body = BoundedCapture(self.output_budget)

    @property
    def entries_total(self) -> int:
        return len(self.entries)

    def expect(self, entries: list[Entry], total: int) -> None:
        self.entries = entries
        self.settled = [False] * len(entries)
        self.files_total = sum(1 for entry in entries if entry.kind == "file")
        self.bytes_total = total
        self.started = True

    def _line(self, text: str) -> None:
        self.body.feed((text + "\n").encode("utf-8", errors="surrogateescape"))

    def file_done(self, index: int, path: str, landed: Landed) -> None:
        self.settled[index] = True
        self.files_done += 1
        self.bytes_done += landed.size
        line = f"{landed.sha256}  {landed.size}  {shown(path)}"
        self.manifest.update((line + "\n").encode("utf-8", errors="surrogateescape"))
        self._line(line)
        if len(self.arrived) < MAX_LISTED:
            self.arrived.append({"path": shown(path), "bytes": landed.size, "sha256": landed.sha256})

    def link_done(self, index: int, path: str, link: str) -> None:
        self.settled[index] = True
        self.links_done += 1
        self._line(f"symlink  {shown(path)} -> {shown(link)}")
        if len(self.arrived) < MAX_LISTED:
            self.arrived.append({"path": shown(path), "link": shown(link)})

    def dir_done(self, index: int) -> None:
        self.settled[index] = True
        self.dirs_done += 1

    def fail(self, index: int, reason: str) -> None:
        self.settled[index] = True
        self.fail_path(self.entries[index].relative, reason)

    def fail_path(self, relative: str, reason: str) -> None:
        path = posixpath.join(self.job.source, relative) if relative else self.job.source
        self.failed_count += 1
        self._line(f"FAILED  {shown(path)}: {reason}")
        if len(self.failed) < MAX_LISTED:
            self.failed.append({"path": shown(path), "error": reason})

    def note(self, text: str) -> None:
        self._line(f"NOTE  {shown(text)}")

    def close_out(self, stopped: str | None) -> None:
        """The transfer is over. If it was stopped (`stopped` says why), every entry not settled did not arrive:
        the interrupted one and everything after it."""
        if stopped is not None:
            interrupted = stopped.replace("not transferred", "interrupted", 1)
            temporary = "could not be removed" if self.leftovers else "was removed"
            for index, settled in enumerate(self.settled):
                if settled:
                    continue
                if index != self.current:
                    self.fail(index, stopped)
                elif self.entries[index].kind == "file":
                    self.fail(index, f"{interrupted}; its temporary file {temporary}")
                else:
                    self.fail(index, interrupted)
        for path in self.leftovers:
            self._line(f"NOTE  the temporary file {shown(path)} could not be removed (the connection failed)")

    def record(self) -> dict[str, Any]:
        """For the audit record's `target.transfer`: bounded, with a digest over every file that arrived."""
        return {
            "direction": self.job.direction,
            "local_path": shown(self.job.local),
            "remote_path": shown(self.job.remote),
            "recursive": self.job.recursive,
            "files": self.arrived,
            "failed": self.failed,
            "files_done": self.files_done,
            "bytes_done": self.bytes_done,
            "symlinks_done": self.links_done,
            "directories_done": self.dirs_done,
            "files_total": self.files_total,
            "bytes_total": self.bytes_total,
            "failed_count": self.failed_count,
            "manifest_sha256": self.manifest.hexdigest(),
            "partial": self.partial,
        }

    @property
    def partial(self) -> bool:
        return self.failed_count > 0 or (self.started and not all(self.settled))

    def execution(self, status: Outcome, error: str | None, elapsed: float) -> Execution:
        arrow = (
            f"{shown(self.job.local)} -> {self.job.host}:{shown(self.job.remote)}"
            if self.job.direction == "upload"
            else f"{self.job.host}:{shown(self.job.remote)} -> {shown(self.job.local)}"
        )
        counts = (
            f"{self.files_done} of {self.files_total} files ({self.bytes_done} bytes), {self.dirs_done} directories, "
            f"{self.links_done} symlinks"
        )
        headline = None
        if status == "ok":
            verb = "uploaded" if self.job.direction == "upload" else "downloaded"
            headline = f"[{verb} {counts}: {arrow} | {elapsed:.1f}s]"
        else:
            self._line(f"arrived: {counts}; {arrow}")
        return Execution(
            status=status,
            output=self.body.result(),
            headline=headline,
            error=error,
            fields={
                "host": self.job.host,
                "host_key": self.host_key,
                "files": self.arrived,
                "failed": self.failed,
                "files_done": self.files_done,
                "bytes_done": self.bytes_done,
                "files_total": self.files_total,
                "bytes_total": self.bytes_total,
                "partial": self.partial,
            },
        )


def shown(text: str) -> str:
    """A path as text for JSON: bytes that are not UTF-8 (kept as surrogates) shown as \\x escapes."""
    return text.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="backslashreplace")
