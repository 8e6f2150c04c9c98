"""Review W3 (adr/0026 Round 7), end to end against a real sshd: a program on the remote host that reads only a
part of a typed line (`dd bs=6 count=1`, less quitting on `q`) leaves the rest to the remote shell, which runs it.
The remote process table cannot be seen, so every rest of every line typed into an `ssh_spawn` session is
classified; no Landlock of ours confines the remote shell, so in readonly a rest that writes (tier 1) is refused
too. Both tests ran the rest on the code before (the file was moved, the directory deleted).

The fleet's hosts are this machine (127.0.0.2, …, user root): a file the remote shell would move is this test's."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import connect, fields, text_of
from tests.e2e.ssh.fleet_helpers import LOGIN_PROMPT, call
from tests.sshd import SshFleet

pytestmark = [pytest.mark.anyio, pytest.mark.fleet(hosts=1)]


async def spawn_login_shell(client: Client) -> str:
    """The remote login shell as it starts (its PROMPT_COMMAND may not be changed in these modes)."""
    spawned = await call(client, "ssh_spawn", host="h01", until=LOGIN_PROMPT, timeout=15)
    assert fields(spawned)["wait"] == "match", text_of(spawned)
    session_id: str = fields(spawned)["session_id"]
    return session_id


async def test_readonly_refuses_a_write_left_to_the_remote_shell(fleet: SshFleet, tmp_path: Path) -> None:
    victim, moved = tmp_path / "important", tmp_path / "moved"
    victim.write_text("keep")
    settings = {"ssh_config": str(fleet.ssh_config), "policy_mode": "readonly"}
    async with connect(tmp_path / "audit.jsonl", **settings) as client:
        session_id = await spawn_login_shell(client)
        started = await call(
            client, "session_send", session_id=session_id, data="dd bs=6 count=1 status=none", timeout=1
        )
        assert not started.is_error, text_of(started)  # dd now reads 6 bytes of the terminal
        typed = await call(client, "session_send", session_id=session_id, data=f"echo xmv {victim} {moved}")
        assert text_of(typed).startswith("[DENIED tier 1"), text_of(typed)
        assert "the shell runs the rest: moves or renames" in text_of(typed), text_of(typed)
        # A line no rest of which runs more than it does is still typed.
        await call(client, "session_send", session_id=session_id, data="", keys=["ctrl-c"], until=LOGIN_PROMPT)
        ran = await call(client, "session_send", session_id=session_id, data="uname -s", until="Linux")
        assert fields(ran)["wait"] == "match", text_of(ran)
    assert victim.read_text() == "keep" and not moved.exists()


async def test_guarded_refuses_a_delete_left_to_a_remote_pager(fleet: SshFleet, tmp_path: Path) -> None:
    doomed = tmp_path / "doomed"
    doomed.mkdir()
    (doomed / "keep").write_text("precious")
    settings = {"ssh_config": str(fleet.ssh_config), "policy_mode": "guarded"}
    async with connect(tmp_path / "audit.jsonl", **settings) as client:
        session_id = await spawn_login_shell(client)
        paged = await call(
            client, "session_send", session_id=session_id, data=f"less {doomed}/keep", until="precious", timeout=5
        )
        assert fields(paged)["wait"] == "match", text_of(paged)
        typed = await call(client, "session_send", session_id=session_id, data=f"qrm -rf {doomed}")
        assert text_of(typed).startswith("[DENIED tier 3"), text_of(typed)
    assert (doomed / "keep").read_text() == "precious"


async def test_a_rest_is_read_with_the_programs_a_remote_host_may_have(fleet: SshFleet, tmp_path: Path) -> None:
    """Attack 5, W3-PATH: a rest counted only when its program was on this server's PATH, and a remote host has its
    own programs. `lvremove` is on no PATH here (on a real host it is), and typed directly it is tier 3; left to the
    remote shell by a reader of one byte it was admitted at tier 1 (`Xlvremove`, an unknown program)."""
    settings = {"ssh_config": str(fleet.ssh_config), "policy_mode": "guarded"}
    async with connect(tmp_path / "audit.jsonl", **settings) as client:
        session_id = await spawn_login_shell(client)
        started = await call(
            client, "session_send", session_id=session_id, data="dd bs=1 count=1 status=none", timeout=1
        )
        assert not started.is_error, text_of(started)  # dd now reads one byte of the terminal
        typed = await call(client, "session_send", session_id=session_id, data="Xlvremove -f vg0/data", timeout=2)
        assert text_of(typed).startswith("[DENIED tier 3"), text_of(typed)
        assert "the shell runs the rest" in text_of(typed), text_of(typed)
