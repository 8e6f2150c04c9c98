"""Audit records as RFC 5424 syslog messages, the connection that carries them, and reading them back.

One record is one message: `<PRI>1 TIMESTAMP HOSTNAME relay-shell PROCID MSGID [audit@32473 seq="N" call_id="…"]
MSG`, where MSG is the record's line exactly as the log holds it (without its newline; no BOM: RFC 5424's MSG-ANY),
TIMESTAMP the record's own `ts`, MSGID the record's tool class and PRI facility 13 (log audit) with severity 5
(notice) for a denied call and 6 (informational) for every other record. On TCP and TLS (RFC 5425) each message
is octet-counted (`LEN SP MSG`, RFC 6587 3.4.1); on UDP and Unix datagram sockets it is one datagram.

`message_of` reads the collector's copy back for `audit verify --against`: a line that is the record itself (the
`%msg%` template the README documents), an RFC 5424 line, or any line whose JSON object starts at `{"`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import re
import select
import socket
import ssl
import struct
import termios
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from relay_shell.audit.log import parse_line
from relay_shell.errors import ConfigError
from relay_shell.offhost.sink import Sink
from relay_shell.settings.offhost import SyslogTarget

APP_NAME = b"relay-shell"
# SD-ID `audit@32473`: 32473 is the private enterprise number RFC 5612 reserves for examples and documentation;
# relay-shell has none of its own, and the name only has to be stable for collectors to pick the fields out.
SD_ID = b"audit@32473"
FACILITY_LOG_AUDIT = 13
CONNECT_TIMEOUT = 10.0
SEND_TIMEOUT = 30.0  # a collector that takes nothing for this long is treated as gone (reconnect, resend)
UDP_BURST = 64 * 1024  # bytes sent over UDP before a 1 ms pause (at most ~64 MB/s; a receiver can keep up)
USER_TIMEOUT = 30.0  # seconds sent data may stay unacknowledged before the kernel ends the connection
UDP_MAX = 65_507  # the largest UDP payload over IPv4: a longer message cannot be sent at all (EMSGSIZE)
_BYTES_ACKED = 120  # offset of tcpi_bytes_acked (u64, Linux 4.1+) in struct tcp_info
_MSGID = re.compile(r"[!-~]{1,32}")  # printable ASCII without space, at most 32 (RFC 5424 MSGID)
_FREE_LABELS = ("resource:", "prompt:")  # labels whose second part is open-ended (runbook names)


def tool_class(tool: object) -> bytes:
    """MSGID: the record's tool (`shell_exec`, `session:end`, `audit:checkpoint`); for a context pull its kind
    (`resource`, `prompt`: the name after it is the team's, not ours); anything that is no valid MSGID (an unknown
    tool's name as a client sent it) is `unknown`."""
    if not isinstance(tool, str):
        return b"unknown"
    for label in _FREE_LABELS:
        if tool.startswith(label):
            return label[:-1].encode()
    return tool.encode() if _MSGID.fullmatch(tool) else b"unknown"


def _sd_value(value: object) -> bytes:
    text = str(value)[:128]
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("]", "\\]").encode("utf-8", "replace")


def syslog_message(line: bytes, hostname: bytes, procid: bytes, record: dict[str, object] | None = None) -> bytes:
    """The RFC 5424 message for one log line (its trailing newline is not part of MSG). `record` is the line
    already parsed (parse_line), so a shipper that read its seq and chain does not parse it twice."""
    body = line[:-1] if line.endswith(b"\n") else line
    if record is None:
        record = parse_line(body)
    severity = 5 if record.get("denied") is True else 6
    timestamp = record.get("ts")
    stamp = timestamp.encode() if isinstance(timestamp, str) and _MSGID.fullmatch(timestamp) else b"-"
    params = b""
    if isinstance(record.get("seq"), int):
        params += b' seq="' + str(record["seq"]).encode() + b'"'
    elif isinstance(record.get("oversize_seq"), int):  # a stub (oversize_stub): the seq of the record it stands for
        params += b' seq="' + str(record["oversize_seq"]).encode() + b'"'
    if record.get("call_id") is not None:
        params += b' call_id="' + _sd_value(record["call_id"]) + b'"'
    structured = b"[" + SD_ID + params + b"]" if params else b"-"
    header = b"<%d>1 " % (FACILITY_LOG_AUDIT * 8 + severity)
    return b" ".join((header + stamp, hostname, APP_NAME, procid, tool_class(record.get("tool")), structured, body))


def oversize_stub(line: bytes, hostname: bytes, procid: bytes, record: dict[str, object]) -> bytes:
    """What a datagram target gets instead of a record too large for one datagram (adr/0020): a message whose MSG
    is `{"oversize_seq":N,"bytes":L,"sha256":"…"}`, the record's seq, its length and the SHA-256 of the line as
    the log holds it without its newline (what MSG would have been), so the collector knows what it lacks and the
    file's copy can be checked against it. No `tool` (MSGID `unknown`) and no chain: it is no record."""
    body = line[:-1] if line.endswith(b"\n") else line
    seq = record.get("seq")
    stub: dict[str, object] = {"oversize_seq": seq if isinstance(seq, int) else None, "bytes": len(body)}
    stub["sha256"] = hashlib.sha256(body).hexdigest()
    stamped = {"ts": record.get("ts"), **stub}
    return syslog_message(orjson.dumps(stub), hostname, procid, stamped)


def tls_context(ca_file: Path | None, cert_file: Path | None = None, key_file: Path | None = None) -> ssl.SSLContext:
    """The TLS client context for a `tls://` target, made once at start-up: the collector's certificate must chain
    to `ca_file` (else the system's CAs); `cert_file` and `key_file` are our own certificate for a collector that
    asks for one (mutual TLS). Raises ConfigError naming the setting whose file cannot be used."""
    try:
        context = ssl.create_default_context(cafile=str(ca_file) if ca_file is not None else None)
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise ConfigError(f"RELAY_SHELL_AUDIT_SYSLOG_CA: {ca_file} holds no usable CA certificate ({exc})") from None
    if cert_file is not None or key_file is not None:
        if cert_file is None or key_file is None:
            missing = "RELAY_SHELL_AUDIT_SYSLOG_CERT" if cert_file is None else "RELAY_SHELL_AUDIT_SYSLOG_KEY"
            raise ConfigError(f"{missing}: must be set too (a client certificate needs the certificate and its key)")
        try:
            # No passphrase prompt: OpenSSL would read it from stdin, which is the MCP channel of a stdio server.
            context.load_cert_chain(str(cert_file), str(key_file), password=_no_passphrase)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise ConfigError(
                f"RELAY_SHELL_AUDIT_SYSLOG_CERT / RELAY_SHELL_AUDIT_SYSLOG_KEY: {cert_file} and {key_file} are no "
                f"PEM certificate and its unencrypted private key ({exc})"
            ) from None
    mode = key_file.stat().st_mode & 0o777 if key_file is not None else 0
    if mode & 0o077:
        # As ssh refuses an unprotected private key: whoever can read it can pose as this host to the collector.
        raise ConfigError(
            f"RELAY_SHELL_AUDIT_SYSLOG_KEY: {key_file} is accessible by group or others (mode {mode:04o}): "
            f"chmod 600 {key_file} (owned by the user relay-shell runs as)"
        )
    return context


def _no_passphrase() -> bytes:
    raise ValueError("the key is encrypted: give an unencrypted key, readable by the service only")


def octet_frame(message: bytes) -> bytes:
    return b"%d " % len(message) + message


def local_hostname() -> bytes:
    """HOSTNAME field: the host's name as printable ASCII (RFC 5424: at most 255 characters), or `-`."""
    name = socket.gethostname()
    with contextlib.suppress(OSError, UnicodeError):
        name = socket.getfqdn(name) or name
    cleaned = "".join(character for character in name if "!" <= character <= "~")[:255]
    return cleaned.encode() or b"-"


class SyslogSink(Sink):
    """One connection to the collector. TCP and TLS are streams of octet-counted frames; UDP and Unix datagram
    sockets take one message per datagram."""

    def __init__(self, target: SyslogTarget, context: ssl.SSLContext | None = None) -> None:
        self.target = target
        if target.scheme == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.settimeout(SEND_TIMEOUT)
            try:
                sock.connect(target.path)
            except OSError:
                sock.close()
                raise
            super().__init__(sock)
        elif target.scheme == "udp":
            family = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_DGRAM)[0]
            sock = socket.socket(family[0], socket.SOCK_DGRAM)
            sock.connect(family[4])
            super().__init__(sock)
        else:
            sock = socket.create_connection((target.host, target.port), timeout=CONNECT_TIMEOUT)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # A collector that vanishes without a word (host down, a dropped route): data unacknowledged for
            # USER_TIMEOUT, or an idle connection whose keepalives go unanswered, ends the connection.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(USER_TIMEOUT * 1000))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 60)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 10)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
            if target.scheme == "tls":
                # RFC 5425: the collector's certificate must chain to a trusted CA and name the host we dialled.
                context = context or tls_context(None)
                try:
                    sock = context.wrap_socket(sock, server_hostname=target.host)
                except (OSError, ssl.SSLError):
                    sock.close()
                    raise
            sock.settimeout(SEND_TIMEOUT)
            super().__init__(sock)

    @property
    def stream(self) -> bool:
        return self.target.scheme in ("tcp", "tls")

    def send(self, messages: list[bytes], stub_for: Callable[[int], bytes] | None = None) -> int:
        """Send messages in order; raises OSError (ssl.SSLError included) when the collector is gone. A datagram
        the socket refuses as too large (EMSGSIZE) is replaced by `stub_for(index)`; returns how many were."""
        assert self.sock is not None
        if self.stream:
            self.sock.sendall(b"".join(octet_frame(message) for message in messages))
            return 0
        burst = 0
        stubs = 0
        for index, message in enumerate(messages):
            try:
                self.sock.send(message)
            except OSError as exc:
                if exc.errno != errno.EMSGSIZE or stub_for is None:
                    raise
                stubs += 1
                self.sock.send(stub_for(index))
            burst += len(message)
            if self.target.scheme == "udp" and burst >= UDP_BURST:
                # Nothing tells a UDP sender the receiver's buffer is full: a batch sent at once overflows it.
                time.sleep(0.001)
                burst = 0
        return stubs

    def acknowledged_end(self) -> int:
        """The value `bytes_acked()` reaches once the collector's TCP has acknowledged every byte sent so far:
        bytes acknowledged + bytes still unacknowledged (SIOCOUTQ), read in that order's reverse so an
        acknowledgement arriving in between can only make it larger (later confirmation, never early)."""
        queued = self.unacknowledged_bytes()
        return self.bytes_acked() + queued

    def bytes_acked(self) -> int:
        """tcpi_bytes_acked of the raw TCP socket (under TLS too): bytes the collector's TCP acknowledged on this
        connection, ever growing; 0 for datagrams."""
        if not self.stream or self.sock is None:
            return 0
        info = self.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
        return int(struct.unpack_from("Q", info, _BYTES_ACKED)[0]) if len(info) >= _BYTES_ACKED + 8 else 0

    def unacknowledged_bytes(self) -> int:
        """Bytes sent and not yet acknowledged by the collector's TCP (SIOCOUTQ); 0 for datagrams."""
        if not self.stream or self.sock is None:
            return 0
        buffer = fcntl.ioctl(self.sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")  # TIOCOUTQ is SIOCOUTQ on Linux
        return int(struct.unpack("i", buffer)[0])

    def peer_closed(self) -> bool:
        """The collector closed the connection (or reset it): a stream that reads as ended or failed."""
        if not self.stream or self.sock is None:
            return False
        readable, _, _ = select.select([self.sock], [], [], 0)
        if not readable:
            return False
        # Peek at the descriptor itself (a TLS socket takes no flags): a TLS record waiting is a live peer.
        raw = socket.socket(fileno=self.sock.fileno())
        try:
            data = raw.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        except OSError:
            return True
        finally:
            raw.detach()  # the descriptor stays ours
        return data == b""

    def close_gracefully(self, timeout: float) -> bool:
        """Half-close and wait for the collector to close too: it then has read everything we sent. True when it
        did within `timeout` (datagram sockets: at once)."""
        if self.sock is None or not self.stream:
            return super().close_gracefully(timeout)
        try:
            if isinstance(self.sock, ssl.SSLSocket):
                self.sock.settimeout(timeout)
                self.sock = self.sock.unwrap()  # close_notify; a collector answers it when it has read the rest
            self.sock.shutdown(socket.SHUT_WR)
            self.sock.settimeout(timeout)
            while self.sock.recv(4096):
                pass
        except OSError:
            return False
        finally:
            self.close()
        return True


_RFC5424 = re.compile(rb"(?:<\d{1,3}>)?1 \S+ \S+ \S+ \S+ \S+ ")


def message_of(line: bytes) -> bytes | None:
    """The record a collector's line carries: the line itself when it is a JSON object, the MSG of an RFC 5424
    line (after its structured data), else whatever starts at the first `{"`. None when there is no record."""
    line = line.rstrip(b"\r\n")
    if line.startswith(b"{"):
        return line
    header = _RFC5424.match(line)
    if header is not None:
        rest = line[header.end() :]
        if rest.startswith(b"-"):
            return rest[2:] if rest.startswith(b"- ") else None
        position = 0
        while rest.startswith(b"[", position):  # SD-ELEMENTs: `]` and `"` inside values are escaped
            position += 1
            while position < len(rest) and rest[position : position + 1] != b"]":
                position += 2 if rest[position : position + 1] == b"\\" else 1
            position += 1
        body = rest[position:].removeprefix(b" ")
        return body if body.startswith(b"{") else None
    start = line.find(b'{"')
    return line[start:] if start >= 0 else None
