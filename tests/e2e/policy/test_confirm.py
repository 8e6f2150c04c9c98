"""Tier-3 confirmation end to end (RELAY_SHELL_CONFIRM_TIER3): real relay-shell processes, the SDK client over
stdio (and HTTP for several clients on one server), real tier-3 commands that destroy only files made here
(`shred -u victim` is tier 3: "shred destroys data"), and a real OpenSSH fleet for the host binding.

Token mode: CONFIRM REQUIRED → operation_confirm(token) → the identical call runs once; any other cwd, host,
argument, session or client gets a fresh CONFIRM REQUIRED and nothing runs. Elicit mode: the client's
elicitation callback plays the human (accept / decline / cancel / slow) in both protocol eras: a request during
the call (2025-11-25) and the multi-round-trip `input_required` result (2026-07-28).
"""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import CallToolResult, ElicitRequestFormParams, ElicitResult, InputRequiredResult, InputResponses

from tests.conftest import connect, fields, read_records, server_env, text_of
from tests.e2e.http.server import TOKENS, start, stop, write_token_file
from tests.e2e.http.server import client as http_client
from tests.e2e.policy.helpers import (
    SHRED,
    armed,
    assert_never_logged,
    confirm,
    digest,
    linked,
    shred,
    token_of,
    victim_in,
)

pytestmark = [pytest.mark.anyio, pytest.mark.fleet(hosts=2)]  # `fleet`: tests/conftest.py


# -- off ---------------------------------------------------------------------------------------------------


async def test_off_runs_tier_3_calls_directly(tmp_path: Path) -> None:
    victim = victim_in(tmp_path / "work")
    async with connect(tmp_path / "audit.jsonl") as client:
        result = await shred(client, victim.parent)
        assert text_of(result) == "[exit 0]", text_of(result)
        assert fields(result)["tier"] == 3
        refused = await confirm(client, secrets.token_urlsafe(32))
        assert text_of(refused).startswith("[ERROR: ConfirmationOff: RELAY_SHELL_CONFIRM_TIER3=off")
    assert not victim.exists()
    assert all("confirmation" not in record for record in read_records(tmp_path / "audit.jsonl"))


# -- token mode ----------------------------------------------------------------------------------------------


async def test_a_confirmed_call_runs_once_and_its_records_are_linked(
    token_client: Client, token_audit: Path, tmp_path: Path
) -> None:
    victim = victim_in(tmp_path)
    first = await shred(token_client, tmp_path)
    token = token_of(first)
    text = text_of(first)
    assert "Nothing ran." in text and f"command: {SHRED}" in text and f"in {tmp_path}" in text
    assert victim.exists()

    answer = await confirm(token_client, token)
    assert text_of(answer).startswith("[ok]\nArmed. Repeat the identical call within "), text_of(answer)
    assert f"command: {SHRED}" in text_of(answer) and 0 < fields(answer)["expires_in"] <= 300
    # The same call as the tool receives it: `timeout` left out or given as its default is the same call.
    ran = await shred(token_client, tmp_path, timeout=60)
    assert text_of(ran) == "[exit 0]", text_of(ran)
    assert not victim.exists()

    # Single use: the same call again needs a new confirmation, and the used token is gone.
    victim = victim_in(tmp_path)
    again = await shred(token_client, tmp_path)
    second_token = token_of(again)
    assert second_token != token
    reused = await confirm(token_client, token)
    assert reused.is_error and text_of(reused).startswith("[ERROR: UnknownToken: "), text_of(reused)
    assert victim.exists()

    # plan → confirm → execute, joined by the token's digest; the operation_confirm record keeps only the digest.
    # The calls that run something (arming the token, the confirmed call) have a start and an end record.
    assert linked(token_audit, digest(token)) == [
        ("shell_exec", "confirm_required"),
        ("operation_confirm", "start"),
        ("operation_confirm", "ok"),
        ("shell_exec", "start"),
        ("shell_exec", "ok"),
        ("operation_confirm", "start"),  # the used token: looked up (and not found) only once it was recorded
        ("operation_confirm", "error"),
    ]
    records = [record for record in read_records(token_audit) if record.get("confirmation") == digest(token)]
    assert records[1]["args"] == records[2]["args"] == {"confirmation": digest(token)}
    assert records[0]["tier"] == records[3]["tier"] == records[4]["tier"] == 3
    assert records[1]["decision"] == "admitted" and records[3]["decision"] == "confirmed"
    assert_never_logged(token_audit, token, second_token)


async def test_a_token_armed_for_one_cwd_does_not_run_in_another(
    token_client: Client, token_audit: Path, tmp_path: Path
) -> None:
    here, there = victim_in(tmp_path / "here"), victim_in(tmp_path / "there")
    token = await armed(token_client, await shred(token_client, here.parent))
    elsewhere = await shred(token_client, there.parent)
    other_token = token_of(elsewhere)
    changed = await token_client.call_tool("shell_exec", {"command": SHRED + " ", "cwd": str(here.parent)})
    changed_token = token_of(changed)
    assert here.exists() and there.exists()
    ran = await shred(token_client, here.parent)
    assert text_of(ran) == "[exit 0]"
    assert not here.exists() and there.exists()

    # A symlink re-pointed after the confirmation: the same arguments, another directory.
    first, second = victim_in(tmp_path / "first"), victim_in(tmp_path / "second")
    link = tmp_path / "link"
    link.symlink_to(first.parent)
    link_token = await armed(token_client, await shred(token_client, link))
    link.unlink()
    link.symlink_to(second.parent)
    moved = await shred(token_client, link)
    moved_token = token_of(moved)
    assert first.exists() and second.exists()
    assert_never_logged(token_audit, token, other_token, changed_token, link_token, moved_token)


async def test_a_token_armed_for_one_host_does_not_run_on_another(
    token_client: Client, token_audit: Path, tmp_path: Path
) -> None:
    victim = victim_in(tmp_path)  # both hosts are this machine: the path names the same file
    command = f"shred -u {victim}"
    on_h01 = await token_client.call_tool("ssh_exec", {"host": "h01", "command": command})
    assert "target: root@127.0.0.2:" in text_of(on_h01), text_of(on_h01)
    token = await armed(token_client, on_h01)
    on_h02 = await token_client.call_tool("ssh_exec", {"host": "h02", "command": command})
    other = token_of(on_h02)
    assert victim.exists()
    ran = await token_client.call_tool("ssh_exec", {"host": "h01", "command": command})
    assert text_of(ran) == "[exit 0]", text_of(ran)
    assert not victim.exists()
    planned, _, _, started, executed = [r for r in read_records(token_audit) if r.get("confirmation") == digest(token)]
    assert planned["target"]["host"] == started["target"]["host"] == executed["target"]["host"] == "h01"
    assert_never_logged(token_audit, token, other)


async def test_a_token_armed_for_one_session_does_not_type_into_another(
    token_client: Client, token_audit: Path, tmp_path: Path
) -> None:
    victim = victim_in(tmp_path)
    sessions = []
    for _ in range(2):
        spawned = await token_client.call_tool("shell_spawn", {"command": "bash --norc", "cwd": str(tmp_path)})
        assert not spawned.is_error, text_of(spawned)
        sessions.append(fields(spawned)["session_id"])
    try:
        typed = {"data": SHRED + "; echo shred-done-$?", "until": "shred-done-0"}
        token = await armed(
            token_client, await token_client.call_tool("session_send", {"session_id": sessions[0], **typed})
        )
        other = token_of(await token_client.call_tool("session_send", {"session_id": sessions[1], **typed}))
        assert victim.exists()
        ran = await token_client.call_tool("session_send", {"session_id": sessions[0], **typed})
        assert fields(ran).get("wait") == "match", text_of(ran)
        assert not victim.exists()
    finally:
        for session_id in sessions:
            await token_client.call_tool("session_kill", {"session_id": session_id})
    assert_never_logged(token_audit, token, other)


async def test_input_or_output_after_a_session_confirmation_voids_it(
    token_client: Client, token_audit: Path, tmp_path: Path
) -> None:
    """The review's reproduction: `shred -u victim` confirmed for a shell in scratch/, then `cd ../prod`, then
    the identical send. Any input, signal or output between the confirmation and the send voids it."""
    scratch, prod = victim_in(tmp_path / "scratch"), victim_in(tmp_path / "prod")
    spawned = await token_client.call_tool("shell_spawn", {"command": "bash --norc", "cwd": str(scratch.parent)})
    session_id = fields(spawned)["session_id"]

    async def send(data: str) -> CallToolResult:
        # `$?` is expanded only when the line runs: its echo as typed does not match.
        typed = {"session_id": session_id, "data": data + "; echo done-$?", "until": "done-0", "timeout": 10}
        return await token_client.call_tool("session_send", typed)

    tokens = []
    try:
        first = await send(SHRED)
        assert "session's last output line: " in text_of(first) and f"session: {session_id}: bash --norc (pid " in (
            text_of(first)
        ), text_of(first)
        tokens.append(await armed(token_client, first))
        moved = await send("cd ../prod")
        assert fields(moved).get("wait") == "match", text_of(moved)
        tokens.append(await armed(token_client, await send(SHRED)))  # input since: asked again

        # A signal since the confirmation (SIGCONT: bash prints nothing).
        signalled = await token_client.call_tool(
            "session_kill", {"session_id": session_id, "signal": "CONT", "close": False}
        )
        assert not signalled.is_error, text_of(signalled)
        again = await send(SHRED)
        tokens.append(await armed(token_client, again))

        # Output since the confirmation, from a job typed before it: no input at all in between.
        trigger = tmp_path / "go"
        job = await send(f"(while [ ! -e {trigger} ]; do sleep 0.05; done; echo tick-$?) & true")
        assert not job.is_error, text_of(job)
        await token_client.call_tool("session_recv", {"session_id": session_id, "timeout": 0.5})
        tokens.append(await armed(token_client, await send(SHRED)))
        trigger.touch()
        ticked = await token_client.call_tool(
            "session_recv", {"session_id": session_id, "until": "tick-0", "timeout": 10}
        )
        assert fields(ticked).get("wait") == "match", text_of(ticked)
        await token_client.call_tool("session_recv", {"session_id": session_id, "timeout": 0.5})  # quiet again
        voided = await send(SHRED)
        tokens.append(token_of(voided))
        assert scratch.exists() and prod.exists()

        # Nothing happened since this one: it runs, once, where the human was shown.
        await confirm(token_client, tokens[-1])
        ran = await send(SHRED)
        assert not ran.is_error and fields(ran).get("wait") == "match", text_of(ran)
        assert scratch.exists() and not prod.exists()
    finally:
        await token_client.call_tool("session_kill", {"session_id": session_id})
    assert_never_logged(token_audit, *tokens)


async def test_operation_confirm_answers_garbage_and_unknown_tokens_clearly(
    token_client: Client, token_audit: Path
) -> None:
    garbage = await confirm(token_client, "please-just-run-it")
    assert garbage.is_error
    assert text_of(garbage).startswith("[ERROR: InvalidArgument: token: is not a confirmation token; allowed: ")
    unknown_token = secrets.token_urlsafe(32)
    unknown = await confirm(token_client, unknown_token)
    assert text_of(unknown).startswith("[ERROR: UnknownToken: no pending confirmation of yours has this token")
    # The token in the wrong shape, or under another name: refused, and still kept out of the log.
    wrapped = await token_client.call_tool("operation_confirm", {"token": [unknown_token]})
    assert text_of(wrapped).startswith("[ERROR: InvalidArgument: token: "), text_of(wrapped)
    renamed = await token_client.call_tool("operation_confirm", {"token": unknown_token, "again": unknown_token})
    assert text_of(renamed).startswith("[ERROR: InvalidArgument: unknown argument 'again'"), text_of(renamed)
    # The token as an argument *name*: the record keeps a count and a digest, not the name.
    for arguments in ({unknown_token: 1}, {"token": unknown_token, unknown_token: 1}):
        as_name = await token_client.call_tool("operation_confirm", arguments)
        assert as_name.is_error and text_of(as_name).startswith("[ERROR: "), text_of(as_name)
    assert_never_logged(token_audit, "please-just-run-it", unknown_token)
    start, record = [r for r in read_records(token_audit) if r.get("args") == {"confirmation": digest(unknown_token)}]
    assert record["outcome"] == "error" and record["tool"] == "operation_confirm"
    assert (start["phase"], record["phase"], start["call_id"]) == ("start", "end", record["call_id"])


PADDED = "shred -u scratch" + " " * 420 + "; shred -u precious"  # the review's reproduction
PADDED_STDIN = "shred -u scratch\n" + "\n" * 300 + "shred -u precious\n"


async def test_the_token_text_shows_everything_the_call_sends(token_client: Client, tmp_path: Path) -> None:
    (tmp_path / "scratch").write_text("x")
    (tmp_path / "precious").write_text("keep me")
    padded = await token_client.call_tool("shell_exec", {"command": PADDED, "cwd": str(tmp_path)})
    text = text_of(padded)
    assert "command: shred -u scratch⟨420 spaces⟩; shred -u precious\n" in text, text
    assert "(shred -u scratch)\n" in text and "(shred -u precious)\n" in text  # every tier-3 reason
    token_of(padded)
    hidden = await token_client.call_tool(
        "shell_exec",
        {
            "command": "sh",
            "stdin": PADDED_STDIN,
            "env": {"GIT_ASKPASS": "/tmp/x", "NOTE": "a\x1b[2K\rb"},
            "cwd": str(tmp_path),
        },
    )
    lines = text_of(hidden).split("\n")
    for line in (
        "stdin: shred -u scratch",
        "  | ⟨300 blank lines⟩",
        "  | shred -u precious",
        "env GIT_ASKPASS: /tmp/x",
        "env NOTE: a\\x1b[2K\\rb",
    ):
        assert line in lines, text_of(hidden)
    assert "\x1b" not in text_of(hidden) and "\r" not in text_of(hidden)
    token_of(hidden)
    assert (tmp_path / "scratch").exists() and (tmp_path / "precious").exists()


async def test_a_call_too_long_to_show_is_never_offered(token_client: Client, tmp_path: Path) -> None:
    victim = victim_in(tmp_path)
    long_command = SHRED + "; : " + "x" * 5000
    refused = await token_client.call_tool("shell_exec", {"command": long_command, "cwd": str(tmp_path)})
    assert text_of(refused).startswith("[ERROR: ConfirmTooLong: this tier-3 call is too long to show a human in full")
    assert "Split the work into smaller calls" in text_of(refused)
    assert fields(refused)["confirm_token"] is None and fields(refused)["status"] == "error"
    assert victim.exists()


async def test_an_expired_token_neither_arms_nor_runs(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    victim = victim_in(tmp_path / "work")
    async with connect(audit_path, confirm_tier3="token", confirm_ttl="1") as client:
        late = token_of(await shred(client, victim.parent))
        await anyio.sleep(1.2)
        expired = await confirm(client, late)
        assert text_of(expired).startswith("[ERROR: TokenExpired: this token expired (valid 1s from issue)")
        armed_token = await armed(client, await shred(client, victim.parent))
        await anyio.sleep(1.2)
        again = await shred(client, victim.parent)
        fresh = token_of(again)
    assert victim.exists()
    assert_never_logged(audit_path, late, armed_token, fresh)


async def test_another_client_cannot_arm_or_use_a_token(tmp_path: Path) -> None:
    server = start(tmp_path, token_file=str(write_token_file(tmp_path / "tokens", TOKENS)), confirm_tier3="token")
    victim = victim_in(tmp_path / "work")
    try:
        async with (
            http_client(server, TOKENS["alice"], "legacy") as alice,
            http_client(server, TOKENS["alice"], "legacy") as alice_again,  # another MCP session, same token
            http_client(server, TOKENS["bob"], "auto") as bob,
        ):
            token = token_of(await shred(alice, victim.parent))
            for other in (bob, alice_again):
                refused = await confirm(other, token)
                assert text_of(refused).startswith("[ERROR: UnknownToken: "), text_of(refused)
            assert text_of(await confirm(alice, token)).startswith("[ok]\nArmed.")
            others = [token_of(await shred(other, victim.parent)) for other in (bob, alice_again)]
            assert victim.exists()
            ran = await shred(alice, victim.parent)
            assert text_of(ran) == "[exit 0]", text_of(ran)
        assert not victim.exists()
    finally:
        stop(server)
    assert_never_logged(server.audit_path, token, *others)


async def test_deny_rules_and_readonly_refuse_before_any_confirmation(tmp_path: Path) -> None:
    victim = victim_in(tmp_path / "work")
    for settings in ({"policy_deny": r'["^shred "]'}, {"policy_mode": "readonly"}):
        audit_path = tmp_path / f"audit-{len(settings)}-{next(iter(settings))}.jsonl"
        async with connect(audit_path, confirm_tier3="token", **settings) as client:
            refused = await shred(client, victim.parent)
        assert text_of(refused).startswith("[DENIED tier 3 (irreversible): "), text_of(refused)
        assert fields(refused)["confirm_token"] is None
        calls = [record for record in read_records(audit_path) if record["tool"] != "server:start"]
        assert [record["outcome"] for record in calls] == ["denied"]  # one record: nothing ran
    assert victim.exists()


# -- elicit mode ---------------------------------------------------------------------------------------------


class Human:
    """The client's elicitation callback: answers the scripted way and remembers what it was shown."""

    def __init__(self) -> None:
        self.answers: list[tuple[str, bool | None, float]] = []  # action, confirm field, seconds to think
        self.shown: list[str] = []

    async def __call__(self, context: Any, params: Any) -> ElicitResult:
        assert isinstance(params, ElicitRequestFormParams)
        assert params.requested_schema["required"] == ["confirm"]
        self.shown.append(params.message)
        action, confirmed, delay = self.answers.pop(0)
        await anyio.sleep(delay)
        content = {"confirm": confirmed} if action == "accept" else None
        return ElicitResult(action=action, content=content)


def elicit_client(audit_path: Path, mode: str, human: Human | None, **settings: str) -> Client:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "relay_shell"],
        env=server_env(audit_path, confirm_tier3="elicit", **settings),
    )
    return Client(params, mode=mode, elicitation_callback=human)


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # a request during the call; the input_required round trip
async def test_elicitation_asks_the_human_and_only_a_yes_runs(tmp_path: Path, mode: str) -> None:
    audit_path = tmp_path / "audit.jsonl"
    human = Human()
    victim = victim_in(tmp_path / "work")
    async with elicit_client(audit_path, mode, human, confirm_ttl="1.5") as client:
        for action, confirmed, delay, says in [
            ("decline", None, 0.0, "the human declined this call when asked"),
            ("cancel", None, 0.0, "the human dismissed the confirmation"),
            ("accept", False, 0.0, "the human answered without confirm=true"),
            # Too slow: legacy stops waiting; the 2026 answer arrives after its question expired.
            (
                "accept",
                True,
                2.0,
                "no answer from the human in time" if mode == "legacy" else "this answer belongs to no open",
            ),
        ]:
            human.answers.append((action, confirmed, delay))
            refused = await shred(client, victim.parent)
            assert text_of(refused).startswith(f"[DENIED tier 3 (irreversible): {says}"), text_of(refused)
            assert fields(refused)["confirm_token"] is None
            assert victim.exists()
        human.answers.append(("accept", True, 0.0))
        ran = await shred(client, victim.parent)
        assert text_of(ran) == "[exit 0]", text_of(ran)
    assert not victim.exists()
    assert not human.answers
    question = human.shown[-1]
    for shown in ("tool: shell_exec", f"command: {SHRED}", f"target: this host (relay-shell), in {victim.parent}"):
        assert shown in question, question
    assert "tier: 3 (irreversible)" in question

    records = read_records(audit_path)
    answers = [record for record in records if record["tool"] == "confirm:elicitation"]
    assert [record["answer"] for record in answers] == ["decline", "cancel", "unconfirmed"] + (
        ["timeout", "accept"] if mode == "legacy" else ["stale", "accept"]
    )
    assert [record["outcome"] for record in answers] == ["denied", "cancelled", "denied"] + (
        ["cancelled", "ok"] if mode == "legacy" else ["denied", "ok"]
    )
    assert linked(audit_path, answers[-1]["confirmation"]) == [
        ("shell_exec", "confirm_required"),
        ("confirm:elicitation", "ok"),
        ("shell_exec", "start"),
        ("shell_exec", "ok"),
    ]
    verified = subprocess.run([sys.executable, "-m", "relay_shell", "audit", "verify", str(audit_path)])
    assert verified.returncode == 0


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_human_is_shown_everything_and_never_asked_about_too_much(tmp_path: Path, mode: str) -> None:
    """The review's reproduction: the human saw `shred -u scratch` (the first 400 characters), said yes, and
    `precious` was destroyed. Now they see all of it (and decline); a call too long to show is not asked."""
    audit_path = tmp_path / "audit.jsonl"
    human = Human()
    (tmp_path / "scratch").write_text("x")
    (tmp_path / "precious").write_text("keep me")
    async with elicit_client(audit_path, mode, human) as client:
        human.answers.append(("decline", None, 0.0))
        declined = await client.call_tool("shell_exec", {"command": PADDED, "cwd": str(tmp_path)})
        assert text_of(declined).startswith("[DENIED tier 3 (irreversible): the human declined"), text_of(declined)
        long_command = "shred -u precious" + "\n:" * 100
        refused = await client.call_tool("shell_exec", {"command": long_command, "cwd": str(tmp_path)})
        assert text_of(refused).startswith("[ERROR: ConfirmTooLong: "), text_of(refused)
    (question,) = human.shown
    assert "command: shred -u scratch⟨420 spaces⟩; shred -u precious\n" in question, question
    assert "(shred -u precious)" in question and "This is everything it sends" in question
    assert (tmp_path / "scratch").exists() and (tmp_path / "precious").exists()
    assert [record["outcome"] for record in read_records(audit_path) if record["tool"] == "shell_exec"] == [
        "confirm_required",
        "denied",
        "error",
    ]


async def test_an_elicited_yes_cannot_be_replayed(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    victim = victim_in(tmp_path / "work")
    arguments = {"command": SHRED, "cwd": str(victim.parent)}
    async with elicit_client(audit_path, "auto", Human()) as client:
        question = await client.session.call_tool("shell_exec", arguments, allow_input_required=True)
        assert isinstance(question, InputRequiredResult) and question.request_state
        assert question.input_requests is not None and list(question.input_requests) == ["confirm"]
        yes: InputResponses = {"confirm": ElicitResult(action="accept", content={"confirm": True})}
        state = question.request_state
        ran = await client.session.call_tool("shell_exec", arguments, input_responses=yes, request_state=state)
        assert text_of(ran) == "[exit 0]", text_of(ran)
        victim = victim_in(victim.parent)
        replayed = await client.session.call_tool("shell_exec", arguments, input_responses=yes, request_state=state)
        assert text_of(replayed).startswith("[DENIED tier 3 (irreversible): this answer belongs to no open question")
    assert victim.exists()


async def test_a_client_without_elicitation_gets_tokens(tmp_path: Path) -> None:
    audit_path = tmp_path / "audit.jsonl"
    victim = victim_in(tmp_path / "work")
    async with elicit_client(audit_path, "auto", None) as client:
        token = await armed(client, await shred(client, victim.parent))
        ran = await shred(client, victim.parent)
        assert text_of(ran) == "[exit 0]"
    assert not victim.exists()
    assert not [record for record in read_records(audit_path) if record["tool"] == "confirm:elicitation"]
    assert_never_logged(audit_path, token)
