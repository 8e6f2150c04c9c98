"""The pending-confirmation store and the call binding, with a controllable clock (TTL, bounds, single use).
The same behaviour end to end, through a real server and client: tests/e2e/policy/test_confirm.py."""

from __future__ import annotations

from typing import Any

import pytest

from relay_shell.confirm.binding import bind_call, token_digest
from relay_shell.confirm.screen import MAX_SHOWN_CHARS
from relay_shell.confirm.store import MAX_PENDING_PER_CLIENT, ConfirmationStore
from relay_shell.confirm.tool import recorded_confirm_arguments
from relay_shell.errors import ToolError
from relay_shell.plan import Execution, Plan, ProgressFn, Subject


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _never(progress: ProgressFn) -> Execution:
    raise AssertionError("not run")


def plan(target: dict[str, Any] | None = None, session_id: str | None = None) -> Plan:
    return Plan(subject=Subject(command="shred -u victim"), execute=_never, target=target, session_id=session_id)


def binding(**arguments: Any) -> Any:
    return bind_call("shell_exec", {"command": "shred -u victim", **arguments}, plan(), "owner-a", "stdio:x", "why")


def test_a_token_is_armed_by_its_owner_and_used_once() -> None:
    store = ConfirmationStore(ttl=60, clock=Clock())
    call = binding(cwd="/tmp")
    token, digest = store.issue(call, "owner-a")
    assert digest == token_digest(token) and token not in repr(store.pending)
    assert store.take(call, "owner-a") is None  # not armed yet
    with pytest.raises(ToolError) as other:
        store.arm(digest, "owner-b")
    assert other.value.kind == "UnknownToken"
    store.arm(digest, "owner-a")
    assert store.take(call, "owner-b") is None
    assert store.take(binding(cwd="/"), "owner-a") is None
    assert store.take(call, "owner-a") == digest
    assert store.take(call, "owner-a") is None
    with pytest.raises(ToolError):
        store.arm(digest, "owner-a")


def test_expiry_is_checked_when_arming_and_when_using() -> None:
    clock = Clock()
    store = ConfirmationStore(ttl=10, clock=clock)
    call = binding()
    _, late = store.issue(call, "owner-a")
    clock.now += 10
    with pytest.raises(ToolError) as expired:
        store.arm(late, "owner-a")
    assert expired.value.kind == "TokenExpired"
    _, armed = store.issue(call, "owner-a")
    store.arm(armed, "owner-a")
    clock.now += 10.01
    assert store.take(call, "owner-a") is None
    assert not store.pending


def test_the_store_is_bounded_per_client_and_in_all() -> None:
    store = ConfirmationStore(ttl=60, max_pending=40, clock=Clock())
    call = binding()
    _, first_of_b = store.issue(call, "owner-b")
    digests = [store.issue(call, "owner-a")[1] for _ in range(MAX_PENDING_PER_CLIENT + 5)]
    mine = [pending for pending in store.pending.values() if pending.owner == "owner-a"]
    assert len(mine) == MAX_PENDING_PER_CLIENT
    assert digests[0] not in store.pending and digests[-1] in store.pending
    assert first_of_b in store.pending  # another client's flood does not push it out
    for index in range(20):
        store.issue(call, f"owner-{index}")
    assert len(store.pending) == 40 and first_of_b not in store.pending  # the oldest go first overall


def test_redeem_is_single_use_and_for_the_same_call() -> None:
    store = ConfirmationStore(ttl=60, clock=Clock())
    call = binding()
    _, digest = store.issue(call, "owner-a")
    assert not store.redeem(digest, binding(cwd="/elsewhere"), "owner-a")
    assert not store.redeem(digest, call, "owner-b")
    assert store.redeem(digest, call, "owner-a")
    assert not store.redeem(digest, call, "owner-a")


def test_the_binding_covers_target_session_client_and_canonical_numbers() -> None:
    def bound(**changes: Any) -> str:
        values: dict[str, Any] = {
            "arguments": {"command": "shred -u victim", "timeout": 60},
            "plan": plan(target={"host": "h01", "address": "127.0.0.2", "port": 22, "user": "root"}),
            "owner": "owner-a",
            "client": "stdio:x",
        }
        values.update(changes)
        return bind_call(
            "ssh_exec", values["arguments"], values["plan"], values["owner"], values["client"], "why"
        ).digest

    same = bound()
    assert bound(arguments={"command": "shred -u victim", "timeout": 60.0}) == same
    assert bound(arguments={"command": "shred -u victim", "timeout": 61}) != same
    assert bound(plan=plan(target={"host": "h01", "address": "127.0.0.3", "port": 22, "user": "root"})) != same
    assert (
        bound(plan=plan(target={"host": "h01", "address": "127.0.0.2", "port": 22, "user": "root"}, session_id="s"))
        != same
    )
    assert bound(owner="owner-b") != same
    assert bound(client="stdio:y") != same


def test_the_record_keeps_digests_of_operation_confirm_arguments_only() -> None:
    token = "A" * 43
    assert recorded_confirm_arguments({"token": token}) == {"confirmation": token_digest(token)}
    odd = recorded_confirm_arguments({"token": [token], "extra": token})
    assert token not in repr(odd) and odd["withheld"]["names"] == ["token"] and odd["withheld"]["count"] == 2
    # The token passed as an argument *name*: counted and digested, never named.
    for arguments in ({token: 1}, {"token": token, token: token}, {"token": 5, token: 1, "x": 2}):
        recorded = recorded_confirm_arguments(arguments)
        assert token not in repr(recorded), recorded
        assert len(recorded["withheld"]["sha256"]) == 64
    assert recorded_confirm_arguments({token: 1})["withheld"]["names"] == []
    assert recorded_confirm_arguments({token: 1})["withheld"]["count"] == 1
    assert recorded_confirm_arguments({token: 1}) != recorded_confirm_arguments({token[:-1] + "B": 1})


# -- what the human is shown ----------------------------------------------------------------------------------


def shown(tool: str = "shell_exec", subject: Subject | None = None, **arguments: Any) -> str:
    """The summary a human is shown for a call with these arguments (classified as its command and stdin)."""
    if subject is None:
        command = arguments.get("command")
        subject = Subject(command=command if isinstance(command, str) else None, stdin=arguments.get("stdin"))
    call = Plan(subject=subject, execute=_never)
    return bind_call(tool, arguments, call, "owner-a", "stdio:x", "why").summary


def test_the_whole_command_is_shown_however_it_is_padded() -> None:
    """The review's reproduction: 420 spaces pushed `; shred -u precious` past the 400 characters shown."""
    text = shown(command="shred -u scratch" + " " * 420 + "; shred -u precious", cwd="/tmp")
    assert "command: shred -u scratch⟨420 spaces⟩; shred -u precious\n" in text, text
    # Every tier-3 piece the classifier found is listed, not only the first.
    assert "tier: 3 (irreversible), for 2 reasons:\n" in text
    assert "(shred -u scratch)\n" in text and "(shred -u precious)\n" in text
    assert "target: this host (relay-shell), in /tmp" in text
    # A run of spaces short enough to see stays as it is.
    assert "command: shred -u a    b" in shown(command="shred -u a    b")


def test_stdin_env_and_every_argument_are_shown_in_full() -> None:
    stdin = "shred -u scratch\n" + "\n" * 300 + "shred -u precious\n"
    env = {"GIT_ASKPASS": "/tmp/run-me", "DB_PASSWORD": "hunter2", "NOTES": "two\nlines", "GONE": None}
    text = shown(command="sh", stdin=stdin, env=env, timeout=60, merge_stderr=False, cwd=None)
    lines = text.split("\n")
    assert lines[lines.index("stdin: shred -u scratch") + 1 : lines.index("stdin: shred -u scratch") + 4] == [
        "  | ⟨300 blank lines⟩",
        "  | shred -u precious",
        "  | ",
    ], text
    # Values in full: masking one would hide what runs (GIT_ASKPASS names a program git starts).
    for line in ("env GIT_ASKPASS: /tmp/run-me", "env DB_PASSWORD: hunter2", "env NOTES: two", "env -u GONE"):
        assert line in lines, text
    assert lines[lines.index("env NOTES: two") + 1] == "  | lines"
    assert "timeout: 60" in lines and "merge_stderr: false" in lines and "cwd: None" not in text
    argv = shown(command=["shred", "-u", "my file"], use_shell=False)
    assert "command: shred -u 'my file'" in argv.split("\n")
    keys = shown("session_send", Subject(typed="x"), data="y", keys=["ctrl-c"], secret_env="DB_PW", enter=True)
    assert {"data: y", 'keys: ["ctrl-c"]', "secret_env: DB_PW", "enter: true"} <= set(keys.split("\n")), keys


@pytest.mark.parametrize(
    ("hidden", "visible"),
    [
        ("\r", "\\r"),  # a carriage return: the terminal writes the rest over the start of the line
        ("\x1b[2K\x1b[1A", "\\x1b[2K\\x1b[1A"),  # ANSI: erase the line, move up
        ("\x1b]8;;x\x07", "\\x1b]8;;x\\x07"),  # OSC hyperlink
        ("\x9b2K", "\\x9b2K"),  # C1 CSI
        ("\t", "\\t"),
        ("\x00\x08\x7f", "\\x00\\x08\\x7f"),
        ("\u202e", "\\u202e"),  # right-to-left override
        ("\u2066\u2069\u200f\u061c", "\\u2066\\u2069\\u200f\\u061c"),  # bidi isolates and marks
        ("\u200b\u200d\u2060\ufeff", "\\u200b\\u200d\\u2060\\ufeff"),  # zero-width
        ("\u2028\u2029\x85", "\\u2028\\u2029\\x85"),  # line and paragraph separators, NEL
        ("\u00a0\u3000", "\\xa0\\u3000"),  # spaces other than U+0020
        ("\U000e0041", "\\U000e0041"),  # a tag character
        ("x\u0336\u0336", "x\\u0336\\u0336"),  # combining strike-through on a Latin letter
        ("é\u0301\u0301", "é\u0301\\u0301"),  # a second mark stacked on a letter
    ],
)
def test_characters_that_could_hide_or_rewrite_text_are_made_visible(hidden: str, visible: str) -> None:
    text = shown(command=f"echo safe{hidden}; shred -u precious")
    assert f"command: echo safe{visible}; shred -u precious" in text.split("\n"), text
    assert text.endswith("lines starting with '  | ' continue the value above.)")  # the legend says how to read it
    assert hidden not in text


def test_a_value_cannot_forge_a_line_of_its_own() -> None:
    text = shown(command="shred -u x\ntarget: a harmless place\ntier: 0", cwd="/tmp")
    lines = text.split("\n")
    assert "  | target: a harmless place" in lines and "  | tier: 0" in lines
    assert [line for line in lines if line.startswith("target: ")] == ["target: this host (relay-shell), in /tmp"]
    names = shown(command="shred -u x", env={"A\ntarget: here": "1"}).split("\n")
    assert "env A\\ntarget: here: 1" in names, names
    assert "Made visible" not in shown(command="shred -u x")  # no legend when nothing was changed


@pytest.mark.parametrize(
    "arguments",
    [
        {"command": "shred -u victim; : " + "x" * MAX_SHOWN_CHARS},
        {"command": "shred -u victim" + "\n:" * 100},  # short, but more lines than a human reads
        {"command": "shred -u victim; : " + "\x1b" * 1000},  # 1000 characters, 4000 once made visible
        {"command": "shred -u victim", "stdin": " " * 300_000},  # padding: refused before rendering
        {"command": "shred -u victim", "env": {"X": "y" * MAX_SHOWN_CHARS}},
    ],
)
def test_a_call_too_long_to_show_a_human_is_refused(arguments: dict[str, Any]) -> None:
    with pytest.raises(ToolError) as refused:
        shown(**arguments)
    assert refused.value.kind == "ConfirmTooLong"
    assert "cannot be confirmed and nothing ran. Split the work into smaller calls" in str(refused.value)


def test_a_call_just_within_the_bound_is_shown_in_full() -> None:
    command = "shred -u victim; : " + "x" * (MAX_SHOWN_CHARS - 300)
    assert f"command: {command}" in shown(command=command).split("\n")


def test_every_host_of_a_fanout_is_shown() -> None:
    hosts = [
        {
            "host": f"h{index:02}",
            "address": f"10.0.0.{index}",
            "port": 22,
            "user": "root",
            "key": "k",
            "host_key_mode": "strict",
        }
        for index in range(30)
    ]
    hosts[3]["jump"] = ["bastion:22"]
    hosts[4]["proxy_command"] = "nc %h %p"
    call = Plan(
        subject=Subject(command="shred -u victim"),
        execute=_never,
        target={"hosts": hosts},
        host_subjects={host["host"]: Subject(command="shred -u victim") for host in hosts},
        denied_hosts={"h05": "denied"},
    )
    lines = bind_call("ssh_fanout", {"command": "shred -u victim"}, call, "o", "c", "why").summary.split("\n")
    assert "target: 30 hosts, 1 refused by policy" in lines
    assert "host h29: root@10.0.0.29:22 (h29), key k, host keys strict" in lines
    assert "host h03: root@10.0.0.3:22 (h03), key k, host keys strict, via bastion:22" in lines
    assert "host h04: root@10.0.0.4:22 (h04), key k, host keys strict, proxy command nc %h %p" in lines
    assert "host h05: root@10.0.0.5:22 (h05) (refused by policy: does not run), key k, host keys strict" in lines
    single = Plan(subject=Subject(command="shred -u victim"), execute=_never, target=hosts[4])
    text = bind_call("ssh_exec", {"command": "shred -u victim"}, single, "o", "c", "why").summary
    assert (
        "target: root@10.0.0.4:22 (h04)\ntarget key: k\ntarget host keys: strict\ntarget proxy command: nc %h %p"
        in text
    )


def test_input_to_a_session_is_bound_to_its_state_and_shows_it() -> None:
    state = {"inputs": 3, "output": 120, "program": "bash (pid 7)", "pending": ["echo "], "last_output": "~/scratch$ "}

    def call(**changes: Any) -> Any:
        typed = Plan(subject=Subject(typed="shred -u victim"), execute=_never, session_id="s-1")
        typed.confirm_state = {**state, **changes}
        return bind_call("session_send", {"session_id": "s-1", "data": "shred -u victim"}, typed, "o", "c", "why")

    same = call()
    assert call(inputs=4).digest != same.digest  # `cd ../prod` typed since
    assert call(output=121).digest != same.digest  # the program printed something since
    assert call().digest == same.digest
    lines = same.summary.split("\n")
    assert "session: s-1: bash (pid 7)" in lines
    assert "typed on the line before, without Enter: echo " in lines
    assert "session's last output line: ~/scratch$ " in lines
    assert "target: the terminal session's program" in lines
