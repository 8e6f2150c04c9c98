"""What the human is shown for a tier-3 confirmation: everything the call sends (every argument, the env
overlay with its values, the target, the session's state), in full, with every character that would not show
as itself made visible. What does not fit a screen a human reads is not offered for confirmation at all.
"""

from __future__ import annotations

import json
import re
import shlex
import unicodedata
from typing import Any

from relay_shell.errors import ToolError
from relay_shell.plan import Plan

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
    # Python's encoder: integers beyond 64 bits (which JSON allows) are shown too; orjson stops there.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=repr)


def tier3_reasons(plan: Plan) -> list[str]:
    """Every tier-3 finding of the call (one line each: why, and the piece it is about), in order: the
    human sees each irreversible part, not only the first."""
    subjects = [plan.subject]
    subjects += [subject for name, subject in (plan.host_subjects or {}).items() if name not in plan.denied_hosts]
    from relay_shell.policy.classify import analyze  # loaded on first use (policy/admission.py says why)

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
