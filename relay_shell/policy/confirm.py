"""Tier-3 confirmation (RELAY_SHELL_CONFIRM_TIER3): an irreversible call runs only once a human said yes.

`token` mode: the call returns `[CONFIRM REQUIRED tier 3: …]` with a random single-use token bound to the exact
call: tool, every validated argument, working directory, resolved target identity (address, port, user, key,
jump hops), session id and state (input written and output produced so far), and the client (connection owner
and client label). `operation_confirm(token)` arms it; the identical call within the TTL then runs exactly once.
Any difference does not match and gets a fresh token.

What is shown (to the human, and in the token text) is everything the call sends, in full, with characters that
would not show as themselves made visible; a call too long for that is refused (`ConfirmTooLong`), never
offered with part of it shown.

`elicit` mode: when the client declared the elicitation capability, the runner asks the human through MCP
elicitation and runs the call only on an explicit accept with `confirm: true`; clients without it use tokens.
A 2025-11-25 client is asked with an `elicitation/create` request during the call. A 2026-07-28 client has no
server-to-client requests: the call answers `input_required` with the question and a state id (sealed by the
SDK), the client asks its human and repeats the call with the answer (the multi-round trip, SEP-2322).

The store keeps the SHA-256 of each token, never the token: a memory dump or a record cannot replay one. The
digest is also what links the audit records of one confirmation (plan, confirm, execute).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import secrets
import shlex
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import orjson
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from relay_shell.capture import BoundedCapture
from relay_shell.plan import ArgumentError, Execution, Plan, ProgressFn, ToolError
from relay_shell.policy.classify import Subject, analyze

logger = logging.getLogger("relay_shell")

MAX_PENDING = 256  # tokens awaiting confirmation or use, all clients together; the oldest go first
MAX_PENDING_PER_CLIENT = 32  # so that one client's flood cannot push out another client's pending confirmation
TOKEN_BYTES = 32
_TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32)

Answer = Literal["accept", "decline", "unconfirmed", "cancel", "timeout", "stale", "failed"]
ANSWER_KEY = "confirm"  # the key of our question in input_requests / input_responses


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", errors="surrogatepass")).hexdigest()


# -- the call a confirmation is bound to ------------------------------------------------------------------


@dataclass(frozen=True)
class CallBinding:
    digest: str  # SHA-256 of the canonical call: what a token is bound to
    summary: str  # everything the call sends and where, for the human and for operation_confirm's answer


def bind_call(tool: str, arguments: dict[str, Any], plan: Plan, owner: str, client_id: str, reason: str) -> CallBinding:
    """The exact call: a later call matches only if every one of these is the same. Raises ToolError
    `ConfirmTooLong` when what the call sends is too much to show a human: such a call is never offered."""
    cwd = arguments.get("cwd")
    # The directory the command would really run in: a symlink re-pointed since the confirmation is another
    # directory. Tools without a cwd argument (SSH, sessions) bind their target or session instead.
    where = os.path.realpath(os.path.expanduser(cwd)) if isinstance(cwd, str) else os.getcwd()
    canonical = {
        "tool": tool,
        "arguments": _canonical(arguments),
        "cwd": where,
        "target": plan.target,
        "denied_hosts": sorted(plan.denied_hosts),
        "session_id": plan.session_id,
        # Input to a session: its input and output counts when asked; any input or output since voids it.
        "session_state": plan.confirm_state,
        "owner": owner,
        "client": client_id,
    }
    encoded = orjson.dumps(canonical, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=repr)
    return CallBinding(hashlib.sha256(encoded).hexdigest(), summarize(tool, arguments, plan, where, reason))


def _canonical(value: Any) -> Any:
    """A default the tool declares as `60` and a caller's `60` validated to `60.0` are the same value."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _canonical(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    return value


# -- what the human is shown --------------------------------------------------------------------------------
#
# Everything the call sends (every argument, the env overlay with its values, the target, the session's
# state), in full: a human who is shown part of a command confirms the part. Nothing in it may hide or
# rewrite text on the human's screen, so what would not show as itself is made visible (`\r`, `\x1b`,
# `\u202e`, `⟨420 spaces⟩`), and lines of a value after its first start with `  | ` so a value cannot forge
# a line of its own. What does not fit a screen a human reads is not offered for confirmation at all.

MAX_SHOWN_CHARS = 4000  # of the summary; more is not read, so a longer call cannot be confirmed
MAX_SHOWN_LINES = 80
MAX_RAW_CHARS = 64 * MAX_SHOWN_CHARS  # argument text beyond this is refused before rendering (padding)
CONTINUED = "  | "  # starts every further line of a value
SPACE_RUN = 16  # a longer run of spaces is shown as ⟨N spaces⟩: it could push text out of a window
BLANK_RUN = 2  # more blank lines in a row than this are shown as ⟨N blank lines⟩
# Shown first, in this order; the other arguments follow in the tool's order.
_CONTENT = ("command", "script", "data", "keys", "secret_env", "stdin", "env")
# Unicode categories that do not show as themselves: controls (C0, C1), format characters (bidi overrides,
# zero-width), surrogates, private use, unassigned, line/paragraph separators and every space but U+0020.
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})
_MARKS = frozenset({"Mn", "Mc", "Me"})  # combining marks: stacked, they draw over neighbouring lines
_RUNS = re.compile(f"( {{{SPACE_RUN + 1},}})|([^ ]+| +)")
_LEGEND = (
    "(Shown exactly. Made visible: \\r \\t \\xNN \\uNNNN = a control or invisible character; "
    "⟨N spaces⟩, ⟨N blank lines⟩; lines starting with '  | ' continue the value above.)"
)


class _TooLong(Exception):
    pass


class _Screen:
    """The lines a human is shown, within the bound, with what would not show made visible."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.size = 0
        self.marked = False  # something was escaped or shortened: the legend says how to read it

    def add(self, line: str) -> None:
        self.lines.append(line)
        self.size += len(line) + 1
        if self.size > MAX_SHOWN_CHARS or len(self.lines) > MAX_SHOWN_LINES:
            raise _TooLong

    def field(self, label: str, text: str) -> None:
        """`label: text`, each further line of the text on a continuation line."""
        lines = text.split("\n")
        self.add(f"{self.inline(label)}: {self.visible(lines[0])}")
        blanks: list[str] = []
        for line in lines[1:]:
            if not line.strip(" "):
                blanks.append(line)
                continue
            self._blanks(blanks)
            blanks = []
            self.add(CONTINUED + self.visible(line))
        self._blanks(blanks)

    def _blanks(self, blanks: list[str]) -> None:
        if len(blanks) > BLANK_RUN:
            self.marked = True
            self.add(f"{CONTINUED}⟨{len(blanks)} blank lines⟩")
            return
        for line in blanks:
            self.add(CONTINUED + self.visible(line))

    def inline(self, text: str) -> str:
        """One line, a newline escaped too: for labels (argument and variable names, host names)."""
        if "\n" in text:
            self.marked = True
        return "\\n".join(self.visible(part) for part in text.split("\n"))

    def visible(self, line: str) -> str:
        """The line with every character that would not show as itself escaped, long space runs counted."""
        pieces: list[str] = []
        for match in _RUNS.finditer(line):
            run, text = match.group(1), match.group(2)
            if run is not None:
                self.marked = True
                pieces.append(f"⟨{len(run)} spaces⟩")
            elif text.isascii() and text.isprintable():
                pieces.append(text)
            else:
                pieces.append(self._escape(text))
        return "".join(pieces)

    def _escape(self, text: str) -> str:
        shown: list[str] = []
        marks = 0  # combining marks in a row
        previous = " "
        for char in text:
            category = unicodedata.category(char)
            hidden = category in _INVISIBLE and char != " "
            if category in _MARKS:
                marks += 1
                # On an ASCII letter (a Latin letter has precomposed forms) or stacked: could draw over text.
                hidden = hidden or previous.isascii() or marks > 1
            else:
                marks = 0
                previous = char
            if hidden:
                self.marked = True
                shown.append(_escape_char(char))
            else:
                shown.append(char)
        return "".join(shown)


def _escape_char(char: str) -> str:
    code = ord(char)
    if char == "\r":
        return "\\r"
    if char == "\t":
        return "\\t"
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def summarize(tool: str, arguments: dict[str, Any], plan: Plan, cwd: str, reason: str) -> str:
    """Everything the call sends and where, as a human is shown it. Raises ToolError `ConfirmTooLong`."""
    raw = _raw_size(arguments)
    if raw > MAX_RAW_CHARS:
        raise _too_long(f"its arguments alone are {raw} characters")
    screen = _Screen()
    try:
        _render(screen, tool, arguments, plan, cwd, reason)
        if screen.marked:
            screen.add(_LEGEND)
    except _TooLong:
        raise _too_long("this call's exceed that") from None
    return "\n".join(screen.lines)


def _too_long(size: str) -> ToolError:
    return ToolError(
        "ConfirmTooLong",
        f"this tier-3 call is too long to show a human in full: a confirmation shows at most {MAX_SHOWN_CHARS} "
        f"characters in {MAX_SHOWN_LINES} lines (command, script or data, stdin, env, every other argument and "
        f"the target) and {size}, so it cannot be confirmed and nothing ran. Split the work into smaller calls, "
        "or write it to a script file, have the human review that file, and run it",
    )


def _raw_size(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(_raw_size(key) + _raw_size(item) for key, item in value.items())
    if isinstance(value, list | tuple):
        return sum(_raw_size(item) for item in value)
    return 8


def _render(screen: _Screen, tool: str, arguments: dict[str, Any], plan: Plan, cwd: str, reason: str) -> None:
    screen.field("tool", tool)
    reasons = tier3_reasons(plan) or [reason]
    if len(reasons) == 1:
        screen.field("tier", f"3 (irreversible): {reasons[0]}")
    else:
        screen.field("tier", f"3 (irreversible), for {len(reasons)} reasons:\n" + "\n".join(reasons))
    names = [name for name in _CONTENT if name in arguments]
    names += [name for name in arguments if name not in _CONTENT]
    for name in names:
        value = arguments[name]
        if value is None or value == "" or value == [] or value == {}:
            continue
        if name == "session_id" and plan.session_id is not None:
            continue  # the session line below
        if name == "env" and isinstance(value, dict):
            for variable, setting in value.items():
                if setting is None:
                    screen.add(f"env -u {screen.inline(str(variable))}")
                else:
                    screen.field(f"env {variable}", str(setting))
            continue
        screen.field(name, _argument_text(name, value))
    if plan.session_id is not None:
        _render_session(screen, plan.session_id, plan.confirm_state or {})
    _render_target(screen, plan, cwd)


def _argument_text(name: str, value: Any) -> str:
    if name == "command" and isinstance(value, list):
        return shlex.join(str(word) for word in value)  # an argv: quoted as a shell would read it
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return orjson.dumps(value, default=repr).decode()


def tier3_reasons(plan: Plan) -> list[str]:
    """Every tier-3 finding of the call (one line each: why, and the piece it is about), in order: the
    human sees each irreversible part, not only the first."""
    subjects = [plan.subject]
    subjects += [subject for name, subject in (plan.host_subjects or {}).items() if name not in plan.denied_hosts]
    reasons: list[str] = []
    for subject in subjects:
        for finding in analyze(subject):
            if finding.tier < 3:
                continue
            why = " ".join(finding.reason.split())
            piece = " ".join(finding.canonical.split())
            line = f"{why} ({piece[:160]}{'…' if len(piece) > 160 else ''})" if piece else why
            if line not in reasons:
                reasons.append(line)
    return reasons


def _render_session(screen: _Screen, session_id: str, state: dict[str, Any]) -> None:
    program = state.get("program")
    screen.field("session", f"{session_id}: {program}" if program else session_id)
    pending = [str(piece) for piece in state.get("pending", []) if piece]
    if pending:
        screen.field("typed on the line before, without Enter", " ⟨control key⟩ ".join(pending))
    if state.get("last_output"):
        screen.field("session's last output line", str(state["last_output"]))


def _render_target(screen: _Screen, plan: Plan, cwd: str) -> None:
    target = plan.target
    if target is None:
        where = "the terminal session's program" if plan.session_id else f"this host (relay-shell), in {cwd}"
        screen.field("target", where)
        return
    if "hosts" not in target:
        screen.field("target", _host(target))
        for label, value in _host_details(target):
            screen.field(f"target {label}", value)
        return
    hosts = target["hosts"]
    refused = f", {len(plan.denied_hosts)} refused by policy" if plan.denied_hosts else ""
    screen.field("target", f"{len(hosts)} hosts{refused}")
    for host in hosts:
        details = ", ".join(f"{label} {value}" for label, value in _host_details(host))
        skipped = " (refused by policy: does not run)" if host.get("host") in plan.denied_hosts else ""
        screen.field(f"host {host.get('host')}", f"{_host(host)}{skipped}, {details}")


def _host(host: dict[str, Any]) -> str:
    return f"{host.get('user')}@{host.get('address')}:{host.get('port')} ({host.get('host')})"


def _host_details(host: dict[str, Any]) -> list[tuple[str, str]]:
    details = [("key", str(host.get("key"))), ("host keys", str(host.get("host_key_mode")))]
    if host.get("jump"):
        details.append(("via", " > ".join(str(hop) for hop in host["jump"])))
    if host.get("proxy_command"):
        details.append(("proxy command", str(host["proxy_command"])))
    return details


# -- pending confirmations -------------------------------------------------------------------------------


@dataclass
class Pending:
    binding: str
    owner: str
    summary: str
    expires: float
    armed: bool = False


class ConfirmationStore:
    """Pending tier-3 confirmations by token digest, bounded, each valid until `ttl` seconds after issue."""

    def __init__(self, ttl: float, max_pending: int = MAX_PENDING, clock: Callable[[], float] = time.monotonic):
        self.ttl = ttl
        self.max_pending = max_pending
        self.clock = clock
        self.pending: dict[str, Pending] = {}  # insertion order is issue order: the first is the oldest

    def issue(self, binding: CallBinding, owner: str) -> tuple[str, str]:
        """A new token for this call: (token, its digest). Only the digest is kept."""
        self._drop_expired()
        mine = [digest for digest, pending in self.pending.items() if pending.owner == owner]
        if len(mine) >= MAX_PENDING_PER_CLIENT:
            del self.pending[mine[0]]
        while len(self.pending) >= self.max_pending:
            del self.pending[next(iter(self.pending))]
        token = secrets.token_urlsafe(TOKEN_BYTES)
        digest = token_digest(token)
        self.pending[digest] = Pending(binding.digest, owner, binding.summary, self.clock() + self.ttl)
        return token, digest

    def arm(self, digest: str, owner: str) -> Pending:
        """Let the call this token was issued for run once. Another client's token is unknown to the caller."""
        pending = self.pending.get(digest)
        if pending is None or pending.owner != owner:
            raise ToolError(
                "UnknownToken",
                "no pending confirmation of yours has this token (it was never issued to this client, was already "
                "used, or was dropped); repeat the tier-3 call to get a new token",
            )
        if self.clock() >= pending.expires:
            del self.pending[digest]
            raise ToolError(
                "TokenExpired",
                f"this token expired (valid {self.ttl:g}s from issue); repeat the tier-3 call to get a new token, "
                "ask the human again, then confirm and repeat the call promptly",
            )
        pending.armed = True
        return pending

    def take(self, binding: CallBinding, owner: str) -> str | None:
        """The digest of an armed token for exactly this call, consumed (single use); None when there is none."""
        self._drop_expired()
        for digest, pending in self.pending.items():
            if pending.armed and pending.binding == binding.digest and pending.owner == owner:
                del self.pending[digest]
                return digest
        return None

    def redeem(self, digest: str, binding: CallBinding, owner: str) -> bool:
        """Use up an issued id for exactly this call (an elicitation's question); False when it is unknown,
        already used, expired, or was issued for another call or client."""
        self._drop_expired()
        pending = self.pending.get(digest)
        if pending is None or pending.binding != binding.digest or pending.owner != owner:
            return False
        del self.pending[digest]
        return True

    def _drop_expired(self) -> None:
        now = self.clock()
        for digest in [digest for digest, pending in self.pending.items() if now >= pending.expires]:
            del self.pending[digest]


def confirm_required(token: str, binding: CallBinding, ttl: float, reason: str) -> Execution:
    """The `[CONFIRM REQUIRED …]` result: the token is in the body and structuredContent, never in the error
    text (the audit record keeps the error as its reason)."""
    body = (
        "Nothing ran. This call is irreversible and the operator requires a human's confirmation:\n"
        f"{binding.summary}\n\n"
        "1. Ask the human whether to run exactly this. Do not confirm on your own.\n"
        f'2. If they say yes: operation_confirm(token="{token}")\n'
        f"3. Then repeat the identical call (same tool, arguments, directory, host) within {ttl:g}s of this "
        "result; it runs once. Any change, another client, or (for a session) any input to or output from the "
        "session in between needs a new confirmation.\n"
    )
    capture = BoundedCapture(len(body.encode()) + 1)
    capture.feed(body.encode())
    return Execution(
        status="confirm_required",
        output=capture.result(),
        error=reason,
        fields={"confirm_token": token, "confirm_ttl": ttl},
    )


# -- operation_confirm -----------------------------------------------------------------------------------


CONFIRM_ARGUMENTS = frozenset({"token"})  # operation_confirm's argument names


def recorded_confirm_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """What the audit record keeps of operation_confirm's arguments, valid or not: digests only. The token's
    digest is the `confirmation` that links the records; anything else (a token passed in the wrong shape or
    under another name, or as a name: `{"<token>": 1}`) is kept as one digest of names and values, with the
    count of names and only the names the tool has, since any other name may be the token."""
    recorded: dict[str, Any] = {}
    token = arguments.get("token")
    if isinstance(token, str):
        recorded["confirmation"] = token_digest(token)
    others = {name: value for name, value in arguments.items() if not (name == "token" and isinstance(value, str))}
    if others:
        encoded = orjson.dumps(others, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=repr)
        recorded["withheld"] = {
            "count": len(others),
            "names": sorted(name for name in others if name in CONFIRM_ARGUMENTS),
            "sha256": hashlib.sha256(encoded).hexdigest(),
        }
    return recorded


def prepare_confirm(store: ConfirmationStore, mode: str, owner: str, token: str) -> Plan:
    if mode == "off":
        raise ToolError(
            "ConfirmationOff",
            "RELAY_SHELL_CONFIRM_TIER3=off: tier-3 calls run without confirmation, there is nothing to confirm",
        )
    if not _TOKEN_SHAPE.fullmatch(token):
        raise ArgumentError(
            "token: is not a confirmation token; allowed: the 43-character token of a [CONFIRM REQUIRED …] "
            "result, copied exactly"
        )
    digest = token_digest(token)

    async def execute(progress: ProgressFn) -> Execution:
        pending = store.arm(digest, owner)
        left = max(0.0, pending.expires - store.clock())
        text = f"Armed. Repeat the identical call within {left:.0f}s; it runs once:\n{pending.summary}\n"
        capture = BoundedCapture(len(text.encode()) + 1)
        capture.feed(text.encode())
        return Execution(status="ok", output=capture.result(), fields={"expires_in": round(left, 1)})

    return Plan(subject=Subject(fixed_tier=0), execute=execute, confirmation=digest)


# -- elicitation -----------------------------------------------------------------------------------------


def can_elicit(request_context: ServerRequestContext[Any, Any]) -> bool:
    """True when the client declared form-mode elicitation (an empty `elicitation: {}` means form)."""
    capabilities = request_context.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None:
        return False
    return elicitation.form is not None or elicitation.url is None


APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "confirm": {
            "type": "boolean",
            "title": "Run this irreversible call",
            "description": "true runs the call once, as shown; anything else runs nothing",
            "default": False,
        }
    },
    "required": ["confirm"],
}


def _question(summary: str) -> str:
    return (
        "An AI client asks relay-shell to run an irreversible (tier 3) call. Run it?\n\n"
        f"{summary}\n\nThis is everything it sends; it runs once, exactly as shown. Decline if you are not sure."
    )


def _answer(result: ElicitResult) -> Answer:
    """Only an accept with `confirm: true` is a yes."""
    if result.action == "accept":
        return "accept" if (result.content or {}).get("confirm") is True else "unconfirmed"
    return result.action


async def ask_human(request_context: ServerRequestContext[Any, Any], summary: str, timeout: float) -> Answer:
    """Ask the human through the client during the call (2025-11-25 era), for at most `timeout` seconds."""
    try:
        with anyio.fail_after(timeout):
            result = await request_context.session.elicit_form(
                _question(summary), APPROVAL_SCHEMA, related_request_id=request_context.request_id
            )
    except TimeoutError:
        return "timeout"
    except MCPError:  # the client refused the request or has no back channel: it cannot ask its human
        return "failed"
    except Exception:  # a malformed answer or a closed stream: no answer is not a yes
        logger.warning("elicitation failed", exc_info=True)
        return "failed"
    return _answer(result)


class InputRequired(Exception):
    """The call's answer is `input_required` (2026-07-28): raised through the tool function to the server's
    tool-call gate, which returns `result` instead of a tool result. Nothing ran; the plan is recorded."""

    def __init__(self, result: InputRequiredResult) -> None:
        super().__init__("input required")
        self.result = result


def is_modern(request_context: ServerRequestContext[Any, Any]) -> bool:
    """A 2026-07-28 request: no server-to-client requests, questions go in an `input_required` result."""
    return request_context.protocol_version in MODERN_PROTOCOL_VERSIONS


def question_round(summary: str, state: str) -> InputRequired:
    form = ElicitRequestFormParams(message=_question(summary), requested_schema=APPROVAL_SCHEMA)
    question = ElicitRequest(params=form)
    return InputRequired(InputRequiredResult(input_requests={ANSWER_KEY: question}, request_state=state))


def round_state(request_context: ServerRequestContext[Any, Any] | None) -> str | None:
    """Our state id when this call repeats a question round (the SDK has verified and unsealed it)."""
    params = request_context.params if request_context is not None else None
    state = params.get("requestState") if params else None
    return state if isinstance(state, str) else None


def round_answer(request_context: ServerRequestContext[Any, Any]) -> Answer:
    """The human's answer carried by the repeated call; a missing or malformed one is no answer."""
    responses = (request_context.params or {}).get("inputResponses")
    response = responses.get(ANSWER_KEY) if isinstance(responses, dict) else None
    try:
        return _answer(ElicitResult.model_validate(response))
    except Exception:
        return "failed"
