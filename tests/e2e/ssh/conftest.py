"""Fixtures of the SSH tests. Each module gets its own sshd fleet (`fleet`, tests/conftest.py: sized by the
module's `pytest.mark.fleet`) and, on that fleet's ssh_config, two stdio servers with their own audit logs:
`client` in open mode and `guarded` in guarded mode. A module adds settings to them by overriding
`open_settings` or `guarded_settings`. The fan-out lab (test_fleet.py), the HTTP servers behind forwards
(test_forward.py) and the 1 GiB file (test_transfer.py) are here too."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import connect
from tests.e2e.ssh.fleet_helpers import (
    DOWN_ADDRESS,
    FLEET_SIZE,
    REFUSED_ADDRESS,
    ROTATED,
    VAULT_ADDRESS,
    Lab,
    Server,
    ini_inventory,
    write_ssh_config,
)
from tests.e2e.ssh.forward_helpers import ALLOWED_ADDRESS, PAYLOAD_BYTES, HttpServer
from tests.e2e.ssh.transfer_helpers import GIB, PATTERN
from tests.sshd import Blackhole, SshFleet, refused_port

# -- an open and a guarded server on the module's fleet ----------------------------------------------------


@pytest.fixture(scope="module")
def open_settings() -> dict[str, str]:
    return {}


@pytest.fixture(scope="module")
def audit_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ssh-open") / "audit.jsonl"


@pytest.fixture(scope="module")
async def client(fleet: SshFleet, audit_path: Path, open_settings: dict[str, str]) -> AsyncIterator[Client]:
    async with connect(audit_path, ssh_config=str(fleet.ssh_config), **open_settings) as server:
        yield server


@pytest.fixture(scope="module")
def guarded_settings() -> dict[str, str]:
    return {}


@pytest.fixture(scope="module")
def guarded_audit_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ssh-guarded") / "audit.jsonl"


@pytest.fixture(scope="module")
async def guarded(fleet: SshFleet, guarded_audit_path: Path, guarded_settings: dict[str, str]) -> AsyncIterator[Client]:
    settings = {"ssh_config": str(fleet.ssh_config), "policy_mode": "guarded", **guarded_settings}
    async with connect(guarded_audit_path, **settings) as server:
        yield server


# -- the fan-out lab (test_fleet.py) -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("ssh_fleet")
    with (
        SshFleet(root / "fleet", FLEET_SIZE) as fleet,
        Blackhole(DOWN_ADDRESS) as down,
        Blackhole(VAULT_ADDRESS) as vault,
    ):
        fleet.trust()  # server A's known_hosts (fleet.known_hosts) lists every host ...
        fleet.rotate_host_key(ROTATED)  # ... and h20 with a key it no longer has
        yield Lab(root, fleet, down, vault, refused_port(REFUSED_ADDRESS))


@pytest.fixture(scope="module")
async def server_a(lab: Lab) -> AsyncIterator[Server]:
    extra = (
        ("down", DOWN_ADDRESS, lab.down.port),
        ("refused", REFUSED_ADDRESS, lab.refused_port),
        ("vault", VAULT_ADDRESS, lab.vault.port),
    )
    config = write_ssh_config(lab.root / "a_ssh_config", lab, lab.fleet.known_hosts, extra)
    audit = lab.root / "a_audit.jsonl"
    settings = {"ssh_config": str(config), "ssh_connect_timeout": "1", "policy_deny": json.dumps([r"127\.0\.0\.99"])}
    async with connect(audit, **settings) as client:
        yield Server(client, audit, lab.fleet.known_hosts, config)


@pytest.fixture(scope="module")
async def server_b(lab: Lab) -> AsyncIterator[Server]:
    known_hosts = lab.root / "b_known_hosts"
    config = write_ssh_config(lab.root / "b_ssh_config", lab, known_hosts)
    inventory = ini_inventory(lab, lab.root / "hosts.ini")
    audit = lab.root / "b_audit.jsonl"
    settings = {
        "ssh_config": str(config),
        "inventory": str(inventory),
        "fanout_max_hosts": "5",
        "policy_deny": json.dumps([r"127\.0\.0\.5", "rm -rf"]),
    }
    async with connect(audit, **settings) as client:
        yield Server(client, audit, known_hosts, config)


@pytest.fixture(scope="module")
async def server_c(lab: Lab) -> AsyncIterator[Server]:
    known_hosts = lab.root / "c_known_hosts"
    config = write_ssh_config(lab.root / "c_ssh_config", lab, known_hosts)
    audit = lab.root / "c_audit.jsonl"
    async with connect(audit, ssh_config=str(config), record_dir=str(lab.root / "casts")) as client:
        yield Server(client, audit, known_hosts, config)


# -- HTTP servers behind forwards (test_forward.py) ---------------------------------------------------------


@pytest.fixture(scope="module")
def www(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("www")
    (root / "payload.bin").write_bytes(os.urandom(PAYLOAD_BYTES))
    return root


@pytest.fixture(scope="module")
def http_port(www: Path) -> Iterator[int]:
    """A real HTTP server on 127.0.0.1 (the destination the deny rule of the guarded server names)."""
    with HttpServer("127.0.0.1", www) as port:
        yield port


@pytest.fixture(scope="module")
def allowed_http_port(www: Path) -> Iterator[int]:
    with HttpServer(ALLOWED_ADDRESS, www) as port:
        yield port


# -- the 1 GiB file (test_transfer.py) ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Where the 1 GiB files go: tmpfs when it has room (disk writeback would make the timings swing)."""
    shm = Path("/dev/shm")
    if shm.is_dir() and shutil.disk_usage(shm).free > 5 * GIB:
        path = shm / f"relay-transfer-test-{os.getpid()}"
        path.mkdir()
        yield path
        shutil.rmtree(path, ignore_errors=True)
    else:
        yield tmp_path_factory.mktemp("big")


@pytest.fixture(scope="module")
def big_file(big_dir: Path) -> tuple[Path, str]:
    """1 GiB of random bytes (64 MiB repeated: nothing compresses, and it is written in a second) and its SHA-256."""
    path = big_dir / "big.bin"
    pattern = os.urandom(PATTERN)
    digest = hashlib.sha256()
    with path.open("wb") as out:
        for _ in range(GIB // PATTERN):
            out.write(pattern)
            digest.update(pattern)
    return path, digest.hexdigest()
