"""Audit records as journal entries, over journald's native protocol (`RELAY_SHELL_AUDIT_JOURNALD`, adr/0020).

One record is one datagram to journald's socket (`/run/systemd/journal/socket`): `MESSAGE` is the record's line
exactly as the log holds it (without its newline), `SYSLOG_IDENTIFIER=relay-shell`, `SYSLOG_FACILITY=13` (log
audit), `PRIORITY` 5 for a denied call and 6 otherwise, and every field of the record as a journal field of its own:
`RELAY_SHELL_` + the field's name in capitals (`RELAY_SHELL_TOOL`, `RELAY_SHELL_SEQ`, `RELAY_SHELL_CALL_ID`, …),
a string as it is, anything else as its JSON. Every field is written in the protocol's length-prefixed form, so a
value may hold any byte. `journalctl SYSLOG_IDENTIFIER=relay-shell RELAY_SHELL_TOOL=shell_exec` finds them.
"""

from __future__ import annotations

import contextlib
import re
import socket
import struct
from collections.abc import Callable

import orjson

from relay_shell.audit.log import parse_line
from relay_shell.offhost.sink import Sink

DEFAULT_SOCKET = "/run/systemd/journal/socket"
SEND_BUFFER = 8 * 1024 * 1024  # a record's datagram (its line and its fields: ~2× the line) must fit
_NAME = re.compile(r"[^A-Z0-9_]")


def _field(name: bytes, value: bytes) -> bytes:
    return name + b"\n" + struct.pack("<Q", len(value)) + value + b"\n"


def journal_field_name(name: str) -> bytes:
    """`RELAY_SHELL_` + the name in capitals, other characters as `_`, at most 64 (journald's limit)."""
    return ("RELAY_SHELL_" + _NAME.sub("_", name.upper()))[:64].encode()


def journal_message(line: bytes, record: dict[str, object] | None = None) -> bytes:
    """The entry for one log line; `record` is the line already parsed (a line that is no record: {}, the line
    alone, as `audit:repair` names damage)."""
    body = line[:-1] if line.endswith(b"\n") else line
    if record is None:
        record = parse_line(body)
    parts = [
        _field(b"MESSAGE", body),
        _field(b"SYSLOG_IDENTIFIER", b"relay-shell"),
        _field(b"SYSLOG_FACILITY", b"13"),
        _field(b"PRIORITY", b"5" if record.get("denied") is True else b"6"),
    ]
    for name, value in record.items():
        encoded = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else orjson.dumps(value)
        parts.append(_field(journal_field_name(str(name)), encoded))
    return b"".join(parts)


class JournaldSink(Sink):
    """journald's socket: a Unix datagram socket; a send that succeeded is in journald's queue."""

    def __init__(self, path: str) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        sock.settimeout(30.0)
        try:
            sock.connect(path)
        except OSError:
            sock.close()
            raise
        super().__init__(sock)

    def send(self, messages: list[bytes], stub_for: Callable[[int], bytes] | None = None) -> int:
        assert self.sock is not None
        for message in messages:
            self.sock.send(message)
        return 0
