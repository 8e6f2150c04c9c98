"""Password withholding looks at the caller's own session only (review nit, adr/0026 Round 4), over streamable
HTTP with two tokens: while alice's session shows a password prompt, bob naming it in session_send (a valid call
the tool refuses as not his, and a call that fails validation) gets his input recorded in full, and his records
neither hide what he typed behind alice's prompt nor name that prompt; alice's own answer is still withheld."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.conftest import assert_error, read_records, text_of
from tests.e2e.http.server import TOKENS, HttpServer, client

pytestmark = pytest.mark.anyio


async def test_another_clients_send_is_not_withheld_by_a_prompt_in_a_session_it_does_not_own(
    authed: HttpServer, tmp_path: Path
) -> None:
    script = tmp_path / "ask.py"
    script.write_text("import getpass\nsecret = getpass.getpass('Password: ')\nprint('got', len(secret))\n")
    async with client(authed, TOKENS["alice"], "legacy") as alice:
        spawned = await alice.call_tool(
            "shell_spawn", {"command": ["python3", str(script)], "until": "Password: ", "timeout": 10}
        )
        assert not spawned.is_error, text_of(spawned)
        session_id = spawned.structured_content["session_id"]  # type: ignore[index]
        await asyncio.sleep(0.2)  # getpass turns echo off around its prompt
        async with client(authed, TOKENS["bob"], "legacy") as bob:
            not_his = await bob.call_tool("session_send", {"session_id": session_id, "data": "bob-typed-this-1"})
            assert_error(not_his, "SessionNotOwned")
            invalid = await bob.call_tool(
                "session_send", {"session_id": session_id, "data": "bob-typed-this-2", "timeout": "soon"}
            )
            assert invalid.is_error, text_of(invalid)
        sent = await alice.call_tool(
            "session_send", {"session_id": session_id, "data": "Tr0ub4dor-EEE", "until": "got [0-9]+\n"}
        )
        assert "got 13" in text_of(sent), text_of(sent)
    sends = [record for record in read_records(authed.audit_path) if record["tool"] == "session_send"]
    by_bob = [record["args"]["data"] for record in sends if record["client_id"] == "http:bob"]
    by_alice = [record["args"]["data"] for record in sends if record["client_id"] == "http:alice"]
    assert sorted(set(by_bob)) == ["bob-typed-this-1", "bob-typed-this-2"], by_bob
    assert by_alice and set(by_alice) == {"[withheld: 13 characters typed at the password prompt 'Password:']"}
    assert "Tr0ub4dor" not in authed.audit_path.read_text()
