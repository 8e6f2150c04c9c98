"""Fixtures of the operations tests: one relay-shell HTTP server and one real Prometheus scraping it, for the
module (helpers: tests/e2e/ops/helpers.py)."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator

import pytest
import yaml

from tests.e2e.http.server import HttpServer, start, stop
from tests.e2e.ops.helpers import RULES, ready, target_of


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    """relay-shell over HTTP on loopback without tokens: /metrics is open to local clients."""
    server = start(tmp_path_factory.mktemp("relay"))
    yield server
    if server.process.poll() is None:
        stop(server)


@pytest.fixture(scope="module")
def prometheus(relay: HttpServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Prometheus scraping `relay` every second and evaluating the rules every second; its base URL."""
    directory = tmp_path_factory.mktemp("prometheus")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = directory / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(RULES)],
                "scrape_configs": [{"job_name": "relay-shell", "static_configs": [{"targets": [target_of(relay)]}]}],
            }
        )
    )
    log = (directory / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--storage.tsdb.path={directory / 'tsdb'}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not ready(base):
        assert process.poll() is None, (directory / "prometheus.log").read_text()[-4000:]
        assert time.monotonic() < deadline, "Prometheus did not become ready in 30 s"
        time.sleep(0.1)
    yield base
    process.terminate()
    process.wait(timeout=15)
    log.close()
