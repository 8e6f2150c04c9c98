"""Named keys for session_send, so a caller need not know terminal escape codes.

Sequences are what an xterm-compatible terminal sends in normal cursor mode (TERM=xterm-256color).
"""

from __future__ import annotations

from relay_shell.errors import ArgumentError

KEYS: dict[str, bytes] = {
    "enter": b"\r",
    "tab": b"\t",
    "backtab": b"\x1b[Z",
    "esc": b"\x1b",
    "space": b" ",
    "backspace": b"\x7f",
    "delete": b"\x1b[3~",
    "insert": b"\x1b[2~",
    "up": b"\x1b[A",
    "down": b"\x1b[B",
    "right": b"\x1b[C",
    "left": b"\x1b[D",
    "home": b"\x1b[H",
    "end": b"\x1b[F",
    "pageup": b"\x1b[5~",
    "pagedown": b"\x1b[6~",
    "f1": b"\x1bOP",
    "f2": b"\x1bOQ",
    "f3": b"\x1bOR",
    "f4": b"\x1bOS",
    "f5": b"\x1b[15~",
    "f6": b"\x1b[17~",
    "f7": b"\x1b[18~",
    "f8": b"\x1b[19~",
    "f9": b"\x1b[20~",
    "f10": b"\x1b[21~",
    "f11": b"\x1b[23~",
    "f12": b"\x1b[24~",
    "ctrl-@": b"\x00",
    "ctrl-space": b"\x00",
    "ctrl-[": b"\x1b",
    "ctrl-\\": b"\x1c",
    "ctrl-]": b"\x1d",
    "ctrl-^": b"\x1e",
    "ctrl-_": b"\x1f",
}
KEYS.update({f"ctrl-{letter}": bytes([index + 1]) for index, letter in enumerate("abcdefghijklmnopqrstuvwxyz")})
ALIASES = {
    "return": "enter",
    "escape": "esc",
    "pgup": "pageup",
    "pgdn": "pagedown",
    "pgdown": "pagedown",
    "del": "delete",
    "arrow-up": "up",
    "arrow-down": "down",
    "arrow-left": "left",
    "arrow-right": "right",
}
# Keys that end or abandon the line being typed (for the input line the policy classifies).
LINE_ENDING_KEYS = {"enter", "ctrl-j", "ctrl-m"}
LINE_DISCARDING_KEYS = {"ctrl-c", "ctrl-u", "ctrl-d", "ctrl-g"}


def key_name(raw: str) -> str:
    """The canonical name: case-insensitive, `C-c`, `ctrl+c` and `^C` spell ctrl-c."""
    name = raw.strip().lower().replace("+", "-").replace("_", "-") if raw.strip() != "ctrl-_" else "ctrl-_"
    if name.startswith("c-") and len(name) == 3:
        name = "ctrl-" + name[2]
    elif name.startswith("control-"):
        name = "ctrl-" + name.removeprefix("control-")
    elif name.startswith("^") and len(name) == 2:
        name = "ctrl-" + name[1]
    name = ALIASES.get(name, name)
    if name not in KEYS:
        shown = ", ".join([*list(KEYS)[:28], "ctrl-a … ctrl-z"])
        raise ArgumentError(f"keys: unknown key {raw[:40]!r}; allowed: {shown}")
    return name
