"""Real OpenSSH servers for tests: a fleet of `sshd` processes on 127.0.0.x, plus faulty endpoints.

Usage::

    with SshFleet(tmp_path, 3) as fleet:
        fleet.trust()
        host = fleet.host("h01")
        # asyncssh.connect(host.address, port=host.port, username="root", client_keys=[fleet.client_key],
        #                  known_hosts=str(fleet.known_hosts), config=None)

Every host is its own `sshd -D -e` (the "listener") on its own loopback address, with its own ed25519 host key.
One client key pair is authorized for root on all of them. See /work/shared/testing.md for the facts this relies on.

Stopping kills the listener and every process below it (sessions), leaves first so that each parent reaps its
children (no zombies are left to init). Session processes that detached from the tree (`nohup cmd &`, `setsid`)
are found through a marker variable that sshd puts in every session's environment, and are killed too.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import os
import selectors
import signal
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

SSHD = "/usr/sbin/sshd"
SSH_KEYGEN = "ssh-keygen"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
START_TIMEOUT = 10.0
MARKER_VAR = "RELAY_TEST_SSHD"

_running: set[SshFleet] = set()


@dataclass
class SshHost:
    alias: str
    address: str
    port: int
    host_key: Path
    pid: int | None = None

    def host_key_line(self) -> str:
        """The known_hosts line for this host's current key."""
        key_type, key = Path(f"{self.host_key}.pub").read_text().split()[:2]
        name = self.address if self.port == 22 else f"[{self.address}]:{self.port}"
        return f"{name} {key_type} {key}"


class SshFleet:
    """`first_address` (e.g. "127.0.1.1" for a fleet of 256) places the hosts from there on, instead of from
    127.0.0.`first_octet`; `server_lines` adds sshd_config lines to some hosts (by alias), ahead of the fleet's
    own, so they win (sshd takes a keyword's first value)."""

    def __init__(
        self,
        root: Path,
        count: int,
        first_octet: int = 2,
        max_sessions: int | None = None,
        first_address: str | None = None,
        server_lines: dict[str, list[str]] | None = None,
    ) -> None:
        first = ipaddress.IPv4Address(first_address or f"127.0.0.{first_octet}")
        if count < 1 or first_octet < 1 or not (first.is_loopback and (first + count - 1).is_loopback):
            raise ValueError(f"cannot place {count} hosts on loopback from {first}")
        if first_address is None and first_octet + count - 1 > 254:
            raise ValueError(f"cannot place {count} hosts from 127.0.0.{first_octet}")
        self.root = Path(root)
        self.max_sessions = max_sessions
        self.server_lines = server_lines or {}
        self.client_key = self.root / "client_key"
        self.known_hosts = self.root / "known_hosts"
        self.ssh_config = self.root / "ssh_config"
        self.authorized_keys = self.root / "authorized_keys"
        self.hosts: list[SshHost] = []
        for index in range(count):
            alias = f"h{index + 1:02d}"
            address = str(first + index)
            host_key = self.root / f"{alias}_host_key"
            self.hosts.append(SshHost(alias, address, _free_port(address), host_key))
        self._token = uuid.uuid4().hex
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Generate keys, write configs and start every sshd, then wait until all of them send their banner."""
        if self._procs:
            raise RuntimeError("fleet already started")
        self.root.mkdir(parents=True, exist_ok=True)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        for path in [self.client_key, *(host.host_key for host in self.hosts)]:
            _remove_key(path)
        _keygen([(self.client_key, "relay-shell-test-client"), *((h.host_key, h.alias) for h in self.hosts)])
        self.authorized_keys.write_text(Path(f"{self.client_key}.pub").read_text())
        self.known_hosts.write_text("")
        self._write_client_config()
        _running.add(self)
        try:
            for host in self.hosts:
                self._spawn(host)
            self._wait_ready(self.hosts)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Kill every listener and every process below it. Idempotent."""
        self._stop_hosts(self.hosts)
        _running.discard(self)

    def stop_host(self, alias: str) -> None:
        """Stop one sshd (listener and its sessions): new connections to it are refused."""
        self._stop_hosts([self.host(alias)])

    def rotate_host_key(self, alias: str) -> None:
        """Give the host a new host key and restart its sshd on the same address and port."""
        host = self.host(alias)
        self._stop_hosts([host])
        _remove_key(host.host_key)
        _keygen([(host.host_key, host.alias)])
        _running.add(self)
        self._spawn(host)
        self._wait_ready([host])

    def __enter__(self) -> SshFleet:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- queries -----------------------------------------------------------------------------------------------

    def host(self, alias: str) -> SshHost:
        for host in self.hosts:
            if host.alias == alias:
                return host
        raise KeyError(f"no host {alias!r} in this fleet (have {', '.join(h.alias for h in self.hosts)})")

    def trust(self, *aliases: str) -> None:
        """Append these hosts' current key lines to known_hosts (all hosts if none given)."""
        hosts = [self.host(alias) for alias in aliases] if aliases else self.hosts
        with self.known_hosts.open("a") as out:
            for host in hosts:
                out.write(host.host_key_line() + "\n")

    def descendants(self) -> list[int]:
        """Pids of all live processes below any running listener, plus detached session processes."""
        return sorted(self._descendants_of(self.hosts))

    def log(self, alias: str) -> str:
        """What that host's sshd wrote to stderr (root/hNN.log)."""
        path = self._log_path(alias)
        return path.read_text(errors="replace") if path.exists() else ""

    # -- internals ---------------------------------------------------------------------------------------------

    def _config_path(self, alias: str) -> Path:
        return self.root / f"{alias}_sshd_config"

    def _log_path(self, alias: str) -> Path:
        return self.root / f"{alias}.log"

    def _write_client_config(self) -> None:
        blocks = [
            f"Host {h.alias}\n    HostName {h.address}\n    Port {h.port}\n    User root\n"
            f"    IdentityFile {self.client_key}\n"
            for h in self.hosts
        ]
        blocks.append(f"Host *\n    UserKnownHostsFile {self.known_hosts}\n")
        self.ssh_config.write_text("\n".join(blocks))

    def _write_server_config(self, host: SshHost) -> Path:
        lines = [
            *self.server_lines.get(host.alias, []),
            f"ListenAddress {host.address}:{host.port}",
            f"HostKey {host.host_key}",
            f"PidFile {self.root / f'{host.alias}.pid'}",
            f"AuthorizedKeysFile {self.authorized_keys}",
            "StrictModes no",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "UseDNS no",
            "PermitRootLogin prohibit-password",
            f"Subsystem sftp {SFTP_SERVER}",
            "MaxStartups 200:30:400",
            # SHLVL=1 makes the remote bash skip root's slow ~/.bashrc; the marker finds detached sessions.
            f"SetEnv SHLVL=1 {MARKER_VAR}={self._token}/{host.alias}",
            "LogLevel ERROR",
        ]
        if self.max_sessions is not None:
            lines.append(f"MaxSessions {self.max_sessions}")
        path = self._config_path(host.alias)
        path.write_text("\n".join(lines) + "\n")
        return path

    def _spawn(self, host: SshHost) -> None:
        config = self._write_server_config(host)
        with self._log_path(host.alias).open("ab") as log:
            proc = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )
        self._procs[host.alias] = proc
        host.pid = proc.pid

    def _wait_ready(self, hosts: list[SshHost]) -> None:
        """Poll all hosts round-robin until each sends "SSH-2.0"; then wait for the probe connections to end."""
        deadline = time.monotonic() + START_TIMEOUT
        pending = list(hosts)
        while pending:
            for host in list(pending):
                proc = self._procs[host.alias]
                if proc.poll() is not None:
                    raise RuntimeError(self._failure(host, f"sshd exited with status {proc.returncode}"))
                if _banner(host.address, host.port):
                    pending.remove(host)
            if not pending:
                break
            if time.monotonic() > deadline:
                details = "\n\n".join(self._failure(h, f"no SSH banner after {START_TIMEOUT:.0f} s") for h in pending)
                raise TimeoutError(details)
            time.sleep(0.005)
        # Each probe made the listener fork a pre-auth child; let them exit so descendants() starts out empty.
        settle = time.monotonic() + 2.0
        while self._descendants_of(hosts) and time.monotonic() < settle:
            time.sleep(0.005)

    def _failure(self, host: SshHost, what: str) -> str:
        config = self._config_path(host.alias)
        check = subprocess.run([SSHD, "-t", "-f", str(config)], capture_output=True, text=True, check=False)
        verdict = "config OK" if check.returncode == 0 else f"exit {check.returncode}: {check.stderr.strip()}"
        return (
            f"sshd for {host.alias} ({host.address}:{host.port}): {what}\n"
            f"  sshd -t -f {config}: {verdict}\n"
            f"  log {self._log_path(host.alias)}:\n{self.log(host.alias).strip()}"
        )

    def _descendants_of(self, hosts: list[SshHost]) -> set[int]:
        table = _process_table()
        roots = {h.pid for h in hosts if h.pid is not None and h.alias in self._procs}
        found = _tree(roots, table) - roots
        found |= _marked(table, [f"{MARKER_VAR}={self._token}/{h.alias}" for h in hosts])
        return found

    def _stop_hosts(self, hosts: list[SshHost]) -> None:
        hosts = [h for h in hosts if h.alias in self._procs]
        if not hosts:
            return
        # Sessions first, leaves first, while the listeners still run and reap their children.
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            table = _process_table()
            roots = {h.pid for h in hosts if h.pid is not None}
            below = _tree(roots, table) - roots
            if not below:
                break
            leaves = {pid for pid in below if not any(table[c][0] == pid for c in below)}
            for pid in leaves:
                _kill(pid, signal.SIGKILL)
            _wait_gone(leaves, 0.5)
        for host in hosts:
            _kill(self._procs[host.alias].pid, signal.SIGTERM)
        for host in hosts:
            proc = self._procs.pop(host.alias)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            host.pid = None
        # Session processes that detached from the tree (reparented to init).
        markers = [f"{MARKER_VAR}={self._token}/{h.alias}" for h in hosts]
        stray = _marked(_process_table(), markers)
        for pid in stray:
            _kill(pid, signal.SIGKILL)
        _wait_gone(stray, 2.0, zombie_ok=True)


class Blackhole:
    """A TCP listener that accepts connections and never sends a byte: a hung host.

    Data sent to it is read and dropped. The port is chosen at start() unless given.
    """

    def __init__(self, address: str = "127.0.0.1", port: int = 0) -> None:
        self.address = address
        self.port = port
        self.connections = 0
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def start(self) -> None:
        if self._sock is not None:
            raise RuntimeError("blackhole already started")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.address, self.port))
        sock.listen(128)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self._sock = sock
        self._stopping.clear()
        self._thread = threading.Thread(target=self._serve, args=(sock,), name=f"blackhole-{self.port}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stopping.set()
            self._thread.join(timeout=5)
            self._thread = None
        self._sock = None

    def _serve(self, listener: socket.socket) -> None:
        peers: list[socket.socket] = []
        with selectors.DefaultSelector() as sel:
            sel.register(listener, selectors.EVENT_READ)
            try:
                while not self._stopping.is_set():
                    for key, _ in sel.select(timeout=0.05):
                        sock = key.fileobj
                        assert isinstance(sock, socket.socket)
                        if sock is listener:
                            with contextlib.suppress(BlockingIOError):
                                peer, _ = listener.accept()
                                peer.setblocking(False)
                                peers.append(peer)
                                sel.register(peer, selectors.EVENT_READ)
                                self.connections += 1
                            continue
                        try:
                            data = sock.recv(65536)
                        except (BlockingIOError, InterruptedError):
                            continue
                        except OSError:
                            data = b""
                        if not data:
                            sel.unregister(sock)
                            peers.remove(sock)
                            sock.close()
            finally:
                for peer in peers:
                    peer.close()
                listener.close()

    def __enter__(self) -> Blackhole:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def refused_port(address: str) -> int:
    """A port on `address` where nothing listens (connecting gets ECONNREFUSED)."""
    return _free_port(address)


# -- helpers -------------------------------------------------------------------------------------------------------


def _free_port(address: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        port: int = sock.getsockname()[1]
        return port


def _remove_key(path: Path) -> None:
    for name in (path, Path(f"{path}.pub")):
        name.unlink(missing_ok=True)


def _keygen(keys: list[tuple[Path, str]]) -> None:
    """Generate ed25519 keys without passphrase, all in parallel."""
    procs: list[tuple[Path, subprocess.Popen[bytes]]] = []
    for path, comment in keys:
        command = [SSH_KEYGEN, "-t", "ed25519", "-N", "", "-q", "-C", comment, "-f", str(path)]
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        procs.append((path, proc))
    for path, proc in procs:
        output, _ = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"ssh-keygen for {path} failed ({proc.returncode}): {output.decode(errors='replace')}")
        path.chmod(0o600)


def _banner(address: str, port: int) -> bool:
    """True once the server at address:port sends its SSH-2.0 identification line.

    The probe hangs up without sending its own identification. sshd logs that ("kex_exchange_identification:
    Connection closed by remote host"), but answering would make it fork a pre-auth child that it then leaves
    as an orphan zombie for init to reap.
    """
    try:
        with socket.create_connection((address, port), timeout=1.0) as sock:
            data = b""
            while b"\n" not in data and len(data) < 8192:
                chunk = sock.recv(1024)
                if not chunk:
                    break
                data += chunk
            return b"SSH-2.0" in data
    except OSError:
        return False


def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, state) for every process in /proc."""
    table: dict[int, tuple[int, str]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        table[int(entry.name)] = (int(fields[1]), fields[0].decode())
    return table


def _tree(roots: set[int], table: dict[int, tuple[int, str]]) -> set[int]:
    """Roots and every live (non-zombie) process below them."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, state) in table.items():
        if state != "Z":
            children.setdefault(ppid, []).append(pid)
    found = set()
    stack = [pid for pid in roots if pid in table]
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack.extend(children.get(pid, []))
    return found


def _marked(table: dict[int, tuple[int, str]], markers: list[str]) -> set[int]:
    """Live processes whose environment contains one of these NAME=VALUE entries."""
    wanted = {marker.encode() for marker in markers}
    found = set()
    for pid, (_, state) in table.items():
        if state == "Z" or pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if wanted.intersection(environ.split(b"\0")):
            found.add(pid)
    return found


def _kill(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _wait_gone(pids: set[int], timeout: float, zombie_ok: bool = False) -> None:
    """Wait until these pids have left /proc (reaped by their parents), up to `timeout` seconds.

    With zombie_ok, a dead process that nobody reaped yet (an orphan waiting for init) counts as gone.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = {pid for pid, (_, state) in _process_table().items() if pid in pids and not (zombie_ok and state == "Z")}
        if not left:
            return
        time.sleep(0.002)


@atexit.register
def _stop_all() -> None:
    for fleet in list(_running):
        fleet.stop()
