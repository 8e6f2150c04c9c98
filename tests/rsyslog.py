"""A real rsyslog collector for tests and benchmarks: `rsyslogd -n` with a private config on loopback.

Usage::

    with Rsyslog(tmp_path) as collector:
        # collector.tcp_url, collector.tls_url (a test CA: collector.ca_path), collector.unix_url,
        # collector.mtls_url (mutual TLS: relay-shell must show collector.client_cert_path / client_key_path)
        collector.lines()  # what it wrote: the MSG of every message, one per line (template `%msg%`)

It listens with `imtcp` on free loopback ports, one plain and one TLS (RFC 5425, the GnuTLS netstream driver
from Debian's rsyslog-gnutls, a server certificate for 127.0.0.1 and localhost signed by a CA made here with
`cryptography`), and a third (TLS) that requires a client certificate from that CA naming `relay-shell-client`
(mutual TLS, `authMode="x509/name"` and `permittedPeer`, as the README documents); with `imudp` on a fourth port
and with `imuxsock` on a private socket. It writes each message's MSG alone, one per line, to `received.log`: the
collector template the README documents (`%msg%\\n`). `stop()` and `start()` kill and restart it on the same ports
(a collector outage).
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

RSYSLOGD = "/usr/sbin/rsyslogd"
START_TIMEOUT = 10.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


CLIENT_NAME = "relay-shell-client"  # the name in the test client certificate, the mutual-TLS listener's peer


def make_test_ca(directory: Path, with_ip: bool = True) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for localhost (and 127.0.0.1 unless `with_ip` is false) signed by it:
    (ca.pem, server.pem, server.key). Also a client certificate for CLIENT_NAME from the same CA: client.pem and
    client.key in `directory`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "relay-shell test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    # Key identifiers as every real CA writes them: Python 3.13's default context (VERIFY_X509_STRICT) needs them.
    authority = x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key())
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost")] + ([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))] if with_ip else [])
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(authority, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    client_key = ec.generate_private_key(ec.SECP256R1())
    client_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CLIENT_NAME)]))
        .issuer_name(ca_name)
        .public_key(client_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(CLIENT_NAME)]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(authority, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    (directory / "client.pem").write_bytes(client_cert.public_bytes(serialization.Encoding.PEM))
    (directory / "client.key").write_bytes(
        client_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    (directory / "client.key").chmod(0o600)
    ca_path = directory / "ca.pem"
    cert_path = directory / "server.pem"
    key_path = directory / "server.key"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_path.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
        )
    )
    key_path.chmod(0o600)
    return ca_path, cert_path, key_path


class Rsyslog:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.work = root / "work"
        self.work.mkdir(parents=True, exist_ok=True)
        self.output = root / "received.log"
        self.socket_path = root / "log.sock"
        self.ca_path, self.cert_path, self.key_path = make_test_ca(root)
        self.client_cert_path, self.client_key_path = root / "client.pem", root / "client.key"
        self.tcp_port = free_port()
        self.tls_port = free_port()
        self.mtls_port = free_port()
        self.udp_port = free_port()
        self.config = root / "rsyslog.conf"
        self.pidfile = root / "rsyslogd.pid"
        self.process: subprocess.Popen[bytes] | None = None
        self.config.write_text(self._config_text())

    @property
    def tcp_url(self) -> str:
        return f"tcp://127.0.0.1:{self.tcp_port}"

    @property
    def tls_url(self) -> str:
        return f"tls://localhost:{self.tls_port}"

    @property
    def mtls_url(self) -> str:
        return f"tls://localhost:{self.mtls_port}"

    @property
    def udp_url(self) -> str:
        return f"udp://127.0.0.1:{self.udp_port}"

    @property
    def unix_url(self) -> str:
        return f"unix:{self.socket_path}"

    def _config_text(self) -> str:
        # maxMessageSize: a record may be 64 KiB (rsyslog's default is 8 KiB and would cut it). ioBufferSize: a batch
        # is written in one piece, so a SIGKILL (an outage) never leaves half a line in the output.
        return f"""
global(workDirectory="{self.work}" maxMessageSize="256k"
       defaultNetstreamDriverCAFile="{self.ca_path}"
       defaultNetstreamDriverCertFile="{self.cert_path}"
       defaultNetstreamDriverKeyFile="{self.key_path}")
module(load="imtcp" maxSessions="200")
module(load="imuxsock" sysSock.use="off")
module(load="imudp")
input(type="imudp" address="127.0.0.1" port="{self.udp_port}")
input(type="imtcp" address="127.0.0.1" port="{self.tcp_port}")
input(type="imtcp" address="127.0.0.1" port="{self.tls_port}" name="tls"
      streamDriver.name="gtls" streamDriver.mode="1" streamDriver.authMode="anon")
input(type="imtcp" address="127.0.0.1" port="{self.mtls_port}" name="mtls"
      streamDriver.name="gtls" streamDriver.mode="1" streamDriver.authMode="x509/name"
      permittedPeer=["{CLIENT_NAME}"])
input(type="imuxsock" socket="{self.socket_path}" useSpecialParser="off" parseHostname="on")
template(name="msgonly" type="string" string="%msg%\\n")
action(type="omfile" file="{self.output}" template="msgonly" ioBufferSize="1m")
"""

    def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.pidfile.unlink()
        self.process = subprocess.Popen(
            [RSYSLOGD, "-n", "-f", str(self.config), "-i", str(self.pidfile)],
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "rsyslogd.stderr", "ab"),
        )
        deadline = time.monotonic() + START_TIMEOUT
        ports = (self.tcp_port, self.tls_port, self.mtls_port)
        while not (all(self._listening(port) for port in ports) and self.socket_path.exists()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                errors = (self.root / "rsyslogd.stderr").read_text(errors="replace")
                raise RuntimeError(f"rsyslogd did not start: {errors[-2000:]}")
            time.sleep(0.02)

    @staticmethod
    def _listening(port: int) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False

    def stop(self, sig: int = signal.SIGKILL) -> None:
        """Kill it (SIGKILL by default: an outage that loses whatever it held in memory)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=10)
        self.process = None

    def lines(self) -> list[bytes]:
        """Every complete line it wrote so far (newline included)."""
        if not self.output.exists():
            return []
        data = self.output.read_bytes()
        return data.splitlines(keepends=True)[: data.count(b"\n")]

    def wait_for(self, predicate: object, timeout: float = 30.0) -> list[bytes]:
        """Poll its output until `predicate(lines)` holds; returns the lines (fails the test on timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            lines = self.lines()
            if predicate(lines):  # type: ignore[operator]
                return lines
            if time.monotonic() > deadline:
                raise AssertionError(f"rsyslog output not as expected after {timeout} s ({len(lines)} lines)")
            time.sleep(0.05)

    def __enter__(self) -> Rsyslog:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop(signal.SIGTERM)


def rsyslog_available() -> bool:
    return os.access(RSYSLOGD, os.X_OK)
