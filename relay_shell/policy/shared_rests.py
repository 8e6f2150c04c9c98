"""The rests of a line read with their work shared (adr/0026 Round 8): what `line_rests` gives, each rest with
the policy's findings of it read alone as shell text, for a terminal whose reader may stop anywhere in a line
(sessions/reading.split_findings; every line typed into a remote terminal). Classifying each rest whole costs
the square of the line's length (a 512-character line: tens of ms on the event loop); a rest whose head is one
simple command that changes nothing after it shares the classification of its tail, a later rest of the line."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from relay_shell.policy import known_places
from relay_shell.policy.calls import Context
from relay_shell.policy.classify import _UNTERMINATED, _readers, command_findings, shell_findings
from relay_shell.policy.findings import Finding
from relay_shell.policy.pipelines import has_fork_bomb, upstream_context
from relay_shell.policy.rests import SHELL_WORDS, line_rests, runs_something
from relay_shell.policy.shell_state import TextState, read_state
from relay_shell.policy.shell_tokens import tokenize
from relay_shell.policy.simple_commands import Command
from relay_shell.policy.stdin import piped_code_findings, relayed_text
from relay_shell.policy.vocabulary import words

# A rest's head: one simple command of whole words (characters with no meaning to the shell, a character after a
# backslash, whole '…' and "…" strings, plain `$NAME` and `${NAME}`) and redirections to or from a word (`2>&1`),
# or nothing (a rest cut just before an operator), then `;` (not `;;`, `;&`), `&&`, `||` or a pipe (not `|&`), then
# blanks. What it is, is then checked on the policy's own tokens of it.
_NAME = r"\$(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\}|[0-9@*#?$])"
# Atomic (`(?>…)`): a word is taken whole or not at all, so a rest that does not match fails in linear time (a
# shorter word would be followed by a word's character, never by a blank or an operator).
_WORD = rf"""(?>(?:[A-Za-z0-9_./:,+@%=-]|\\[^\n]|'[^']*'|"(?:[^"\\`$!]|\\[^\n]|{_NAME})*"|{_NAME})+)"""
_REDIRECT = rf"[0-9]?(?:>&[0-9-]|(?:>>?|<)(?![<>&(|])[ \t]*{_WORD})"
_ITEM = rf"(?:{_REDIRECT}|{_WORD})"
_HEAD = re.compile(rf"({_ITEM}(?:[ \t]+{_ITEM})*)?[ \t]*(;(?![;&])|&&|\|\||\|(?!&))[ \t]*")
# Words a plain head may not hold: builtins and reserved words (loops, names set, functions, groups, aliases),
# but `echo`, which only writes (what it writes into a pipe is part of a pipe's kind, below); and the commands whose
# effect on later words the classifier follows (known_places: `cd`, a loop, a link `ln -s`/`cp -s` makes).
_NOT_PLAIN = (
    (SHELL_WORDS - {"echo"})
    | words("function coproc select case esac [[ ]] alias hash getopts let fork")
    | known_places.STARTS
)


@dataclass
class _Shared:
    """What the rests of one text share: each rest's findings; the tail a rest with a plain head ends in; the
    names each text sets up (shell_state.read_state, read once per text whose head is not plain); and, for a tail
    after a pipe, its findings as read downstream of each kind of head seen (what the pipe carries into it)."""

    findings: dict[str, list[Finding]] = field(default_factory=dict)
    tails: dict[str, str] = field(default_factory=dict)
    states: dict[str, TextState] = field(default_factory=dict)
    piped: dict[str, list[tuple[object, list[Finding]]]] = field(default_factory=dict)
    first: dict[str, list[str]] = field(default_factory=dict)  # the words of a text's first command
    # A text whose first command is a plain head: that command, and how many of the text's findings are its own.
    heads: dict[str, tuple[Command, int]] = field(default_factory=dict)


def shell_rest_findings(text: str) -> list[tuple[int, str, list[Finding]]] | None:
    """Every distinct rest of every line of `text`, where it starts, and the policy's findings of it read alone
    as shell text (the list `shell_findings(rest, 0)` gives); None when too long to classify at every point.

    The work is shared between rests (adr/0026 Round 8). A rest whose head is one plain simple command (`cho
    hello; df -h; …`, cut out of `echo hello; df -h; …`) or nothing, before a list operator or a pipe, ends in a
    tail that is itself a later rest of the line, already classified. A plain head sets no name, opens no loop
    or group and runs no nested text (checked on the policy's own tokens of it), so after `;`, `&&` or `||` the
    rest's findings are the head's, classified with the names the tail sets up (the classifier
    reads a text's names before any of its commands), then the tail's own. After a pipe the head also gives the
    tail what flows through it (what it selects, the literal text it writes, what a reader of code downstream
    makes of it): the tail's findings are shared between heads that give it the same (`_piped`). Every other
    rest is classified whole. Lines are read from their end, so a tail is classified before the rests it ends."""
    found = line_rests(text)
    if found is None:
        return None
    rests = list(found)
    shared = _Shared()
    for _, rest in reversed(rests):
        shared.findings[rest] = _findings(rest, shared)
    return [(start, rest, shared.findings[rest]) for start, rest in rests]


def counted_rest_findings(text: str, least_tier: int, elsewhere: bool = False) -> list[tuple[int, str, Finding]] | None:
    """What counts of `shell_rest_findings(text)` (sessions/reading.split_findings): each rest's findings at
    `least_tier` or above that name something the shell would run (rests.runs_something, asked once per distinct
    text: the rests of a line share most of their findings, and each asks PATH); `elsewhere`: the line is typed to a
    remote host's shell, whose programs are not this server's."""
    rests = shell_rest_findings(text)
    if rests is None:
        return None
    runs: dict[str, bool] = {}
    found = []
    for start, rest, findings in rests:
        for finding in findings:
            if finding.tier < least_tier:
                continue
            named = finding.canonical or rest
            if named not in runs:
                runs[named] = runs_something(named, elsewhere)
            if runs[named]:
                found.append((start, rest, finding))
    return found


def _findings(rest: str, shared: _Shared) -> list[Finding]:
    head = _HEAD.match(rest)
    tail = rest[head.end() :] if head else ""
    if head is None or tail not in shared.findings or tail[:1] in ("", ";", "&", "|", ")"):
        return shell_findings(rest, 0, {})
    if "<<" in tail or "$'" in tail or has_fork_bomb(rest):
        return shell_findings(rest, 0, {})  # read with the whole text: here-documents, sh's $'…'
    tail_findings = shared.findings[tail]
    if len(tail) < 200 and any(item.reason == _UNTERMINATED and item.canonical == tail for item in tail_findings):
        return shell_findings(rest, 0, {})  # a quote left open at the very end is named by the whole text's end
    # A redirection's target is checked against the names a loop over the server's own files gives (own_files).
    loops = "for" in tail or "select" in tail
    command = _plain_command(head.group(1), loops) if head.group(1) else None
    if head.group(1) and command is None:
        return shell_findings(rest, 0, {})
    shared.tails[rest] = tail
    state = _state(tail, shared)
    here = state.env({}) if state.values else {}
    own = command_findings(command, 0, here, Context(), state) if command is not None else []
    if command is not None:
        shared.first[rest] = command.words
        shared.heads[rest] = (command, len(own))
    if head.group(2) != "|":
        return own + tail_findings  # the tokenizer drops an empty command before the operator
    return _piped(rest, tail, command, own, state, shared)


def _plain_command(text: str, loops: bool) -> Command | None:
    """The one simple command `text` is, when it changes nothing the commands after it are classified with: it
    sets no name, opens nothing, runs no nested text (its `$NAME`s are read with the names the tail sets up, as
    in the whole rest), and redirects only where no loop of the tail can name the target."""
    nested: list[str] = []
    tokens = tokenize(text, nested)
    if len(tokens.commands) != 1 or nested or tokens.sets_names or tokens.arithmetic or tokens.unterminated:
        return None
    command = tokens.commands[0]
    if (
        tokens.ansi_c
        or command.assignments
        or (command.redirects and loops)
        or command.heredoc is not None
        or command.piped_into
        or command.marks
        or not command.words
        or any(word in _NOT_PLAIN for word in command.words)
    ):
        return None
    return command


def _piped(
    rest: str, tail: str, command: Command | None, own: list[Finding], state: TextState, shared: _Shared
) -> list[Finding]:
    """A rest `HEAD | TAIL`: the classifier reads TAIL's first command with what HEAD selects (upstream_context),
    the literal text HEAD writes (relayed_text) and HEAD's words for a reader of code (piped_code_findings); the
    commands after it see HEAD only through what the first passes on. Heads that give the same share TAIL's
    findings. When HEAD selects nothing and writes no text the classifier sees, and TAIL's first command is a plain
    head, the commands after it see what they see in TAIL alone: TAIL's findings after its first command's own,
    behind that command read as piped into (a shell reading the pipe) and what a reader of code makes of HEAD.
    Otherwise the first rest of each kind is classified whole and its findings after its head's kept."""
    here = state.env({}) if state.values else {}
    if tail not in shared.first:
        shared.first[tail] = next(iter(tokenize(tail, []).commands), Command()).words
    first = shared.first[tail]
    if not first or any(word == "dc" or word.endswith("/dc") for word in first):
        return shell_findings(rest, 0, {})
    previous = command.words if command is not None else []
    relayed = relayed_text(command, None) if command is not None else None
    code = piped_code_findings(first, previous, _readers(here), 0, relayed)
    upstream = upstream_context(Context(), previous)
    kind = (upstream, relayed, code)
    for seen, findings in shared.piped.get(tail, []):
        if seen == kind:
            return own + findings
    if upstream == Context() and relayed is None and tail in shared.heads:
        first_command, count = shared.heads[tail]
        piped = dataclasses.replace(first_command, piped_into=True)
        part = command_findings(piped, 0, here, upstream, state) + code + shared.findings[tail][count:]
        shared.piped.setdefault(tail, []).append((kind, part))
        return own + part
    whole = shell_findings(rest, 0, {})
    if whole[: len(own)] == own:
        shared.piped.setdefault(tail, []).append((kind, whole[len(own) :]))
    return whole


def _state(text: str, shared: _Shared) -> TextState:
    """The names `text` sets up: a plain head sets none, so a rest's are its tail's (read once, at the first text
    along the chain whose head is not plain)."""
    chain = []
    while text not in shared.states and text in shared.tails:
        chain.append(text)
        text = shared.tails[text]
    if text not in shared.states:
        shared.states[text] = read_state(tokenize(text, []), None, text)
    for linked in chain:
        shared.states[linked] = shared.states[text]
    return shared.states[text]
