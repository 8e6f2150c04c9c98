"""What a local terminal does to typed bytes before a program reads them (review P1, adr/0026).

The policy reads a send with the keys a terminal starts with (typed.py): DEL erases, Ctrl-U kills the line, Enter
ends it. But any program can change them — `tset -k Q`, `reset -e Q`, three lines of Python's termios — and the
line discipline (and readline, which binds the terminal's special characters) then edits with the new ones:
after `tset -k Q`, typing `echo Qrm -rf DIR` runs `rm -rf DIR`. Input translation does the same to every byte
(`istrip` makes any byte over 127 an ASCII one, `iuclc` lowers capitals, `igncr` joins lines).

So each send looks at the terminal's settings as they are (tcgetattr on the PTY's master gives the terminal's
own): a byte it types that is a special character other than its default, or any input while a translating
flag is on, makes the send tier 2 (`stty sane` restores the defaults). The settings are read again just before
the write; if they changed, nothing is typed (send_plan.py). A remote terminal's settings cannot be seen: its
lines are read with the defaults (adr/0026 says so).
"""

from __future__ import annotations

import functools
import operator
import termios
from typing import Any

from relay_shell.sessions.typed import Finding

# The special characters a new terminal has (the kernel's defaults) and the role each plays.
DEFAULT_CHARACTERS = {
    termios.VINTR: (0x03, "interrupt"),
    termios.VQUIT: (0x1C, "quit"),
    termios.VERASE: (0x7F, "erase"),
    termios.VKILL: (0x15, "kill (erase the line)"),
    termios.VEOF: (0x04, "end-of-file"),
    termios.VEOL: (0x00, "end-of-line"),
    termios.VEOL2: (0x00, "second end-of-line"),
    termios.VSTART: (0x11, "start"),
    termios.VSTOP: (0x13, "stop"),
    termios.VSUSP: (0x1A, "suspend"),
    termios.VREPRINT: (0x12, "reprint"),
    termios.VWERASE: (0x17, "word erase"),
    termios.VLNEXT: (0x16, "literal next"),
    termios.VDISCARD: (0x0F, "discard"),
}
TRANSLATING = {termios.ISTRIP: "istrip", termios.INLCR: "inlcr", termios.IGNCR: "igncr", termios.IUCLC: "iuclc"}
CHANGED = (
    "{shown} is the terminal's {role} character now (a program set it): typed, it edits or ends the line, so what "
    "the program reads is not what was typed (`stty sane` restores the defaults)"
)
TRANSLATED = (
    "the terminal translates input ({flags}, set by a program): what the program reads is not what was typed "
    "(`stty sane` restores the defaults)"
)

LineSettings = tuple[int, tuple[int, ...]]  # the translating input flags that are on, the special characters
_PICK = operator.itemgetter(*DEFAULT_CHARACTERS)
_TRANSLATING_MASK = functools.reduce(operator.or_, TRANSLATING)


def line_settings_of(terminal: Any) -> LineSettings | None:
    """The parts of the terminal's settings that change typed bytes, or None when they cannot be seen."""
    return settings_from(terminal.line_settings())


def settings_from(attributes: list[Any] | None) -> LineSettings | None:
    """line_settings_of for the settings as a terminal's line_settings() gave them (one TCGETS serves a send's
    preparation: send_plan.py)."""
    if attributes is None:
        return None
    characters = _PICK(attributes[6])
    try:
        joined = b"".join(characters)  # tcgetattr gives each special character as one byte
    except TypeError:
        joined = b""
    values = tuple(joined) if len(joined) == len(characters) else tuple(_value(value) for value in characters)
    return int(attributes[0]) & _TRANSLATING_MASK, values


def echo_off(attributes: list[Any]) -> bool:
    """A line read with echo off: canonical mode without ECHO (a local terminal's password_mode)."""
    local_flags = int(attributes[3])
    return bool(local_flags & termios.ICANON) and not local_flags & termios.ECHO


def interrupts(attributes: list[Any]) -> bool:
    """Ctrl-C becomes SIGINT (ISIG on): a local terminal's interrupt_clears_line."""
    return bool(int(attributes[3]) & termios.ISIG)


def settings_findings(settings: LineSettings | None, typed: bytes) -> list[Finding]:
    """Tier-2 findings for bytes the terminal's present settings would not pass through as typed."""
    if settings is None or not typed:
        return []
    translating, values = settings
    changed = _changed_characters(values)
    if not translating and not changed:  # the usual case: nothing a program set, nothing to look for
        return []
    findings: list[Finding] = []
    shown_text = typed[:200].decode("utf-8", errors="backslashreplace")
    if translating:
        flags = ", ".join(name for flag, name in TRANSLATING.items() if translating & flag)
        findings.append((shown_text, 2, TRANSLATED.format(flags=flags)))
    for value, role in changed:
        if bytes([value]) in typed:
            findings.append((shown_text, 2, CHANGED.format(shown=repr(chr(value)), role=role)))
    return findings


@functools.lru_cache(maxsize=64)
def _changed_characters(values: tuple[int, ...]) -> tuple[tuple[int, str], ...]:
    """The special characters set to other than their default (nor disabled), with their roles, in order; cached:
    a terminal's settings are the same from one send to the next."""
    return tuple(
        (value, role)
        for value, (default, role) in zip(values, DEFAULT_CHARACTERS.values(), strict=True)
        if value not in (default, 0)
    )


def edited_lines(settings: LineSettings | None, typed: bytes) -> list[str]:
    """The lines a canonical-mode terminal (or readline, which binds the same characters) makes of `typed` with
    its present special characters and translation, when they differ from the defaults: submitted lines and the
    one left being typed. Classified beside the lines as typed, so `echo Qrm -rf DIR` after `tset -k Q` is read
    as `rm -rf DIR` (tier 3: asked for in open mode, not only refused in guarded). Empty when nothing differs."""
    if settings is None or not settings_findings(settings, typed):
        return []
    translating, values = settings
    role = dict(zip(DEFAULT_CHARACTERS, values, strict=True))
    erase, kill, word_erase = role[termios.VERASE], role[termios.VKILL], role[termios.VWERASE]
    literal_next, ends = role[termios.VLNEXT], {role[termios.VEOL], role[termios.VEOL2]} - {0}
    lines: list[str] = []
    line = bytearray()
    literal = False
    for byte in typed:
        if translating & termios.ISTRIP:
            byte &= 0x7F
        if translating & termios.IUCLC and 0x41 <= byte <= 0x5A:
            byte += 0x20
        if byte == 0x0D and translating & termios.IGNCR:
            continue
        if literal:
            line.append(byte)
            literal = False
        elif byte == literal_next:
            literal = True
        elif byte == kill:
            line.clear()
        elif byte == erase:
            del line[-1:]
        elif byte == word_erase:
            stripped = bytes(line).rstrip(b" \t")
            line[:] = stripped[: max(stripped.rfind(b" "), stripped.rfind(b"\t")) + 1]
        elif byte in (0x0D, 0x0A) or byte in ends:
            if byte in ends:
                line.append(byte)
            lines.append(line.decode("utf-8", errors="surrogateescape"))
            line.clear()
        else:
            line.append(byte)
    if line:
        lines.append(line.decode("utf-8", errors="surrogateescape"))
    return lines


def _value(character: Any) -> int:
    """A special character as tcgetattr gives it: one byte, or an int for VMIN/VTIME in non-canonical mode."""
    if isinstance(character, bytes):
        return character[0] if character else 0
    return int(character)
