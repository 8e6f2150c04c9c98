"""What a session_send types, as the policy reads it: the lines submitted with Enter and the line still being
typed, every way a line edited with keys may read, and what the keys themselves may do (adr/0005, adr/0026).

A control key may discard, keep or rewrite what was typed before it, depending on the program and its terminal
settings, so nothing is ever dropped: the line is kept as pieces split at those keys, and every reading that
drops a leading part is classified (`rm -r` + Ctrl-D + `f /` is seen as `rm -rf /`). Beyond that, a line editor
(readline, zle, vi) turns keys into text the server never sees, and some keys act at once, without Enter:

- a line submitted after a key that may have changed it (history recall, yank, a motion, a macro; also such a
  key pressed on an empty line: Up then Enter runs a line from the shell's history) is tier 2;
- Tab completes from the commands and files present, and may run completion code: tier 2 when pressed;
- Ctrl-X starts sequences that act at once (Ctrl-X Ctrl-E edits the line in $EDITOR and runs it): tier 2;
- after Escape, what is typed is editing commands (vi command mode: `k` recalls, `v` edits and runs; Meta keys:
  `ESC .` yanks the last argument): tier 2 as it is typed;
- Ctrl-O (operate-and-get-next) submits the line like Enter and loads the next one from the history.

Keys that discard the whole line (Ctrl-C, Ctrl-U, Ctrl-G) or change nothing on it (Ctrl-L, Ctrl-Z) add no unseen
text: the readings cover both outcomes. Ctrl-C on a terminal known to turn it into SIGINT (a local one with ISIG
on) starts a fresh line: the shell (or the tty driver) discards the line, whatever was recalled into it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from relay_shell.sessions.keys import KEYS, LINE_ENDING_KEYS

MAX_FRAGMENTS = 32  # pieces of one typed line kept for the policy; more control keys than that is no line
VI_COMMAND_PREFIX = 8  # characters after Escape that may be editing commands before text is inserted (`ddi…`)

EDITED = (
    "a line edited with keys before Enter (recalled, yanked, moved in): what it became cannot be known "
    '(keys=["ctrl-c"] starts a fresh line)'
)
COMPLETED = "Tab completes the line from the commands and files present (and may run completion code)"
RUNS_AT_ONCE = "Ctrl-X starts key sequences that act at once (Ctrl-X Ctrl-E runs the line after editing it)"
AFTER_ESCAPE = (
    "typed after Escape: editing commands (vi mode: `k` recalls a line, `v` edits and runs it; Meta keys yank)"
)

# Keys that discard the whole line or leave its text as it is: the readings already cover what they do.
_KEEPING_KEYS = frozenset({"ctrl-c", "ctrl-u", "ctrl-g", "ctrl-l", "ctrl-z", "ctrl-\\"})
# Keys that change nothing on an empty line (moving or erasing within nothing); on a line, they edit it.
_EMPTY_LINE_KEYS = frozenset({"left", "right", "home", "end", "delete", "backspace", "ctrl-h", "ctrl-d"})
_TAB_KEYS = frozenset({"tab", "backtab", "ctrl-i"})
_ESCAPE_KEYS = frozenset({"esc", "ctrl-["})
# Raw bytes in `data`, read as the keys they are: control characters one by one, and the escape sequences of
# the named keys (an arrow sent as `\x1b[A` is the Up key, not Escape followed by `[A`).
_CONTROL_NAMES = {
    sequence.decode(): name
    for name, sequence in reversed(KEYS.items())
    if len(sequence) == 1 and (sequence < b" " or sequence == b"\x7f")
}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SEQUENCES = sorted(
    ((sequence.decode(), name) for name, sequence in KEYS.items() if len(sequence) > 1),
    key=lambda item: -len(item[0]),
)

Finding = tuple[str, int, str]  # (the text, its tier, why): what the session layer adds to the policy's view


@dataclass
class Typing:
    """The line being typed in a session, kept between calls: its pieces (the last one open), whether a key
    may have changed it unseen, and whether Escape was pressed on it."""

    pieces: list[str] = field(default_factory=list)
    edited: bool = False
    escaped: bool = False


@dataclass
class Typed:
    texts: list[str]  # every reading the policy classifies as a line
    submitted: list[str]  # the lines submitted, as typed (the session's history)
    findings: list[Finding]  # what the keys did, each with its tier
    typing: Typing  # the line still being typed, after this input
    # Whether each classified reading leaves a shell construct open (open_input.shell_left_open of its tokens):
    # reading.py fills it as it tokenizes them, and reads it for the lines submitted instead of tokenizing again.
    shell_open: dict[str, bool] = field(default_factory=dict)


def read_keystrokes(typing: Typing, data: str, enter: bool, keys: list[str], interrupt_clears: bool) -> Typed:
    """What the policy classifies for `data` (then Enter, then `keys`) typed after `typing`. `interrupt_clears`:
    Ctrl-C is known to discard the line (a local terminal with ISIG on)."""
    reader = _Reader(typing, interrupt_clears)
    if _CONTROL.search(data) is None:  # the usual case: plain text, no key to read
        reader.current += data
        if data and reader.escaped and reader.after_escape is None:
            reader.after_escape = ("", 2, AFTER_ESCAPE)
        data = ""
    index = 0
    while index < len(data):
        char = data[index]
        sequence = (
            next((item for item in _SEQUENCES if data.startswith(item[0], index)), None) if char == "\x1b" else None
        )
        if sequence is not None:
            reader.key(sequence[1])
            index += len(sequence[0])
            continue
        name = _CONTROL_NAMES.get(char)
        if name is not None:
            reader.key(name)
        else:
            reader.text(char)
        index += 1
    if enter:
        reader.key("enter")
    for key in keys:
        reader.key(key)
    return reader.finish()


def readings(pieces: list[str]) -> list[str]:
    """The line as typed, and with each leading part dropped."""
    return ["".join(pieces[index:]) for index in range(len(pieces))]


class _Reader:
    """The keystroke reader of one call: a small state machine over the line being typed."""

    def __init__(self, typing: Typing, interrupt_clears: bool) -> None:
        self.pieces = [piece for piece in typing.pieces[:-1] if piece]
        self.current = typing.pieces[-1] if typing.pieces else ""
        self.edited = typing.edited
        self.escaped = typing.escaped
        self.interrupt_clears = interrupt_clears
        self.texts: list[str] = []
        self.submitted: list[str] = []
        self.findings: list[Finding] = []
        self.after_escape: Finding | None = None  # noted once per line; its text is the line when it ends
        self.escaped_from: int | None = 0 if typing.escaped else None  # the first piece typed after Escape
        self.literal_next = False  # after Ctrl-V (quoted insert, the tty's lnext) the next key is a character

    def line(self) -> str:
        return "".join([*self.pieces, self.current])

    def text(self, char: str) -> None:
        self.current += char
        if self.escaped and self.after_escape is None:
            self.after_escape = ("", 2, AFTER_ESCAPE)

    def key(self, name: str) -> None:
        empty = not self.pieces and not self.current and not self.edited and not self.escaped
        if self.literal_next:
            self.literal_next = False
            self.text(KEYS[name].decode(errors="replace"))
        elif name == "ctrl-v":
            self.split()
            self.edited = self.literal_next = True
        elif name == "space":
            self.text(" ")
        elif name in LINE_ENDING_KEYS or name == "ctrl-o":
            self.submit()
            self.edited = name == "ctrl-o"  # operate-and-get-next loads the next line from the history
        elif name == "ctrl-c" and self.interrupt_clears:
            self.split()
            self.texts.extend(readings(self.pieces))  # classified all the same: nothing typed is ever dropped
            self.end_line()
        elif name in _KEEPING_KEYS or (name in _EMPTY_LINE_KEYS and empty):
            self.split()
        else:
            if name in _TAB_KEYS:
                self.findings.append((self.line(), 2, COMPLETED))
            elif name == "ctrl-x":
                self.findings.append((self.line(), 2, RUNS_AT_ONCE))
            self.split()
            self.edited = True
            if name in _ESCAPE_KEYS and not self.escaped:
                self.escaped = True
                self.escaped_from = len(self.pieces)

    def split(self) -> None:
        if self.current:
            self.pieces.append(self.current)
        self.current = ""

    def submit(self) -> None:
        self.split()
        line = "".join(self.pieces)
        self.texts.extend(readings(self.pieces))
        self.texts.extend(self.vi_readings(self.pieces))
        if self.edited:
            self.findings.append((line, 2, EDITED))
        if line:
            self.submitted.append(line)
        self.end_line()

    def end_line(self) -> None:
        if self.after_escape is not None:
            self.findings.append((self.line(), *self.after_escape[1:]))
        self.pieces, self.current = [], ""
        self.edited = self.escaped = False
        self.after_escape = self.escaped_from = None

    def vi_readings(self, pieces: list[str]) -> list[str]:
        """After Escape, vi commands may precede the text they insert (`ddirm -rf /` is `rm -rf /`): the line
        with each of the first few characters of a piece typed after Escape dropped."""
        if self.escaped_from is None:
            return []
        found = []
        for index in range(self.escaped_from, len(pieces)):
            rest = "".join(pieces[index + 1 :])
            found += [pieces[index][skip:] + rest for skip in range(1, min(VI_COMMAND_PREFIX, len(pieces[index])) + 1)]
        return found

    def finish(self) -> Typed:
        if len(self.pieces) >= MAX_FRAGMENTS:
            cut = len(self.pieces) - MAX_FRAGMENTS + 2
            self.pieces = ["".join(self.pieces[:cut]), *self.pieces[cut:]]
        # What is typed so far counts too: refusing it before Enter costs nothing.
        open_pieces = [*self.pieces, self.current] if self.current else list(self.pieces)
        self.texts.extend(readings(open_pieces))
        self.texts.extend(self.vi_readings(open_pieces))
        if self.after_escape is not None:
            self.findings.append((self.line(), *self.after_escape[1:]))
        pieces = [*self.pieces, self.current]
        typing = Typing(pieces if any(pieces) else [], self.edited, self.escaped)
        return Typed(self.texts, self.submitted, self.findings, typing)
