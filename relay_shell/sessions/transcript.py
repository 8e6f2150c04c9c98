"""Session transcripts as asciicast v2 files (RELAY_SHELL_RECORD_DIR), with a running SHA-256.

One JSON header line, then one `[seconds, code, data]` line per event: "o" output, "i" input, "r" resize.
Input typed while the terminal's echo was off, and secrets sent by reference, are never written: the
transcript shows what the screen showed. A transcript stops at RELAY_SHELL_RECORD_MAX_BYTES with a
marker. The session-end audit record carries the file's SHA-256, so an auditor can prove that a transcript
is the one recorded.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import time
from pathlib import Path

import orjson


class Transcript:
    def __init__(
        self, directory: Path, session_id: str, command: str, cols: int, rows: int, term: str, max_bytes: int
    ) -> None:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path = directory / f"{session_id}.cast"
        descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        self.file = os.fdopen(descriptor, "wb")
        self.digest = hashlib.sha256()
        self.started = time.monotonic()
        # Output is text in asciicast: decode incrementally so a character split across reads survives.
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.closed = False
        self.max_bytes = max_bytes
        self.size = 0
        self.truncated = False
        self.error: str | None = None  # why writing stopped, if the file could not be written
        header = {
            "version": 2,
            "width": cols,
            "height": rows,
            "timestamp": int(time.time()),
            "command": command,
            "env": {"TERM": term, "SHELL": os.environ.get("SHELL", "/bin/sh")},
        }
        self._write_line(header)

    def output(self, data: bytes) -> None:
        text = self.decoder.decode(data)
        if text:
            self._event("o", text)

    def input(self, data: bytes) -> None:
        self._event("i", data.decode("utf-8", errors="replace"))

    def resize(self, cols: int, rows: int) -> None:
        self._event("r", f"{cols}x{rows}")

    def close(self) -> str | None:
        """Flush and close; returns the SHA-256 of the whole file, or None if it could not be written."""
        if not self.closed:
            rest = self.decoder.decode(b"", final=True)
            if rest:
                self._event("o", rest)
            self.closed = True
            try:
                self.file.close()
            except OSError as exc:
                self.error = f"{exc.strerror or exc}"
        return None if self.error else self.digest.hexdigest()

    def _event(self, code: str, data: str) -> None:
        if self.closed or self.truncated:
            return
        event = [round(time.monotonic() - self.started, 6), code, data]
        if self.size + len(data) > self.max_bytes:
            # Disk is bounded like everything else: one marker, then nothing more is written.
            self.truncated = True
            note = f"\r\n[relay-shell: transcript limit of {self.max_bytes} bytes reached; not recorded after this]\r\n"
            event = [event[0], "o", note]
        self._write_line(event)

    def _write_line(self, value: object) -> None:
        line = orjson.dumps(value) + b"\n"
        self.digest.update(line)
        try:
            self.file.write(line)
        except OSError as exc:
            # A full disk ends the recording, never the session: this runs in the terminal's output callback.
            self.error = f"{exc.strerror or exc}"
            self.truncated = True
            return
        self.size += len(line)
