"""End to end over a real sshd: in readonly mode the local side of the SSH tools runs confined too (adr/0024). An
ssh_config ProxyCommand (OpenSSH's `ssh -W` through h02, after trying to leave a marker file) still carries the
connection, and cannot write."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import fields, text_of
from tests.e2e.confinement.helpers import serve
from tests.sshd import SshFleet

pytestmark = [pytest.mark.anyio, pytest.mark.fleet(hosts=2)]


@pytest.mark.parametrize("mode", ["readonly", "open"])
async def test_a_proxycommand_carries_the_connection_and_writes_only_outside_readonly(
    tmp_path: Path, fleet: SshFleet, mode: str
) -> None:
    marker = tmp_path / "proxy-ran"
    target = fleet.host("h01")
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host viaproxy\n    HostName {target.address}\n    Port {target.port}\n    User root\n"
        f"    IdentityFile {fleet.client_key}\n"
        f"    ProxyCommand sh -c 'touch {marker}; exec ssh -F {fleet.ssh_config} -o BatchMode=yes -W %h:%p h02'\n\n"
        + fleet.ssh_config.read_text()
    )
    async with serve(tmp_path / "audit.jsonl", {}, policy_mode=mode, ssh_config=str(config)) as client:
        result = await client.call_tool("ssh_exec", {"host": "viaproxy", "command": "echo through-the-proxy"})
    assert fields(result)["status"] == "ok", text_of(result)
    assert "through-the-proxy" in text_of(result)
    assert marker.exists() is (mode == "open")
