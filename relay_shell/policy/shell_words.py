"""The pieces of shell syntax the tokenizer (shell_tokens.py) reads whole: a here-document's delimiter word and the
line that ends its body, bash's ANSI-C strings (`$'…'`), the end of `${…}` and of `$((…))` / `((…))`. Each reads
forward from an index and returns where it stopped; none backtracks.
"""

from __future__ import annotations

import re

# `NAME=`, `NAME+=`, `NAME[subscript]=` at a word's start, unquoted: an assignment, not a command word.
ASSIGNMENT_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]\n]{0,4096}\])?\+?=")
# Builtins that set variables, aliases or hashed names (shell_state.read_state reads them before classifying).
SETTERS = frozenset(
    [
        "for",
        "select",
        "getopts",
        "printf",
        "alias",
        "hash",
        "read",
        "mapfile",
        "readarray",
        "declare",
        "typeset",
        "local",
        "export",
        "readonly",
        "set",
        "shift",
    ]
)


# First words that change how the tokenizer reads what follows (`[[ … ]]`, `case … esac`), and the setters.
FIRST_WORDS = frozenset(["[[", "case", "esac", *SETTERS])
# Reserved words after which a simple command (with its own assignments) starts.
RESERVED = frozenset(["if", "then", "else", "elif", "do", "while", "until", "!", "{", "time", "coproc"])


def after_reserved(words: list[str]) -> bool:
    """Whether only reserved words (`while`, `if`, `!`, `do`, …) come before: a simple command starts here."""
    return words[-1] in RESERVED and all(word in RESERVED for word in words)


MARK_GLOB = 1  # the word has an unquoted *, ? or [
MARK_BRACE = 2  # the word has an unquoted {
_METACHARACTERS = frozenset(" \t\n;&|()<>")
_ANSI_C_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}
_HEX = re.compile(r"[0-9A-Fa-f]{1,8}")
_OCTAL = re.compile(r"[0-7]{1,3}")


def heredoc_delimiter(text: str, index: int) -> tuple[str, bool, int]:
    """The delimiter word after `<<` / `<<-` (blanks before it skipped), as the shell finds it: quote removal
    and nothing else, so `"EOF'"` is `EOF'` and `-EOF` is `-EOF`; whether any part of it was quoted (then the
    body is not expanded); and the index after the word."""
    length = len(text)
    while index < length and (text[index] in " \t" or text.startswith("\\\n", index)):
        index += 2 if text[index] == "\\" else 1
    parts: list[str] = []
    quoted = False
    while index < length and text[index] not in _METACHARACTERS:
        char = text[index]
        if text.startswith("\\\n", index):  # a line continuation, removed before the word is read
            index += 2
        elif char == "\\":
            quoted = True
            parts.append(text[index + 1 : index + 2])
            index += 2
        elif char == "'":
            quoted = True
            end = text.find("'", index + 1)
            end = length if end < 0 else end
            parts.append(text[index + 1 : end])
            index = end + 1
        elif char == '"':
            quoted = True
            index += 1
            while index < length and text[index] != '"':
                if text.startswith("\\\n", index):
                    index += 2
                    continue
                if text[index] == "\\" and index + 1 < length and text[index + 1] in '"\\$`':
                    index += 1
                parts.append(text[index])
                index += 1
            index += 1
        elif char == "$" and text.startswith("$'", index):
            quoted = True
            value, index = ansi_c_string(text, index + 2)
            parts.append(value)
        elif char == "$" and text.startswith(("$(", "${"), index):
            end = _balanced_end(text, index + 2, "(" if text[index + 1] == "(" else "{")
            parts.append(text[index:end])
            index = end
        else:
            parts.append(char)
            index += 1
    return "".join(parts), quoted, index


def heredoc_end(text: str, start: int, delimiter: str, strip_tabs: bool, quoted: bool = True) -> tuple[int, int]:
    """Where a here-document's body that starts at `start` ends (the start of the delimiter line) and where the
    text after that line starts. The delimiter line is the delimiter exactly (after leading tabs for `<<-`); with
    none, the body runs to the end of the text, as bash reads it. In the body of an unquoted delimiter a line
    ending in an odd number of backslashes goes on on the next line, and the shells then disagree: dash compares
    only the first line of such a joined line, as it is, with the delimiter; bash compares the joined line
    (`E\\` newline `F` ends `<<EF`). The earlier of the two ends is taken, so that what either shell runs after
    the body is read as commands."""
    if quoted or "\\\n" not in text[start:]:
        return _plain_body_end(text, start, delimiter, strip_tabs)
    return min(_body_end(text, start, delimiter, strip_tabs, joined) for joined in (False, True))


def _plain_body_end(text: str, start: int, delimiter: str, strip_tabs: bool) -> tuple[int, int]:
    position = start
    length = len(text)
    while position < length:
        newline = text.find("\n", position)
        line_end = length if newline < 0 else newline
        line = text[position:line_end]
        if (line.lstrip("\t") if strip_tabs else line) == delimiter:
            return position, min(length, line_end + 1)
        position = line_end + 1
    return length, length


def _body_end(text: str, start: int, delimiter: str, strip_tabs: bool, joined: bool) -> tuple[int, int]:
    """The body's end as dash (`joined` false) or bash (`joined`) finds it for an unquoted delimiter."""
    position = start
    length = len(text)
    while position < length:
        line_end = position
        first_end = -1
        parts: list[str] = []
        while True:  # one logical line: physical lines joined while one ends in an odd number of backslashes
            newline = text.find("\n", line_end)
            physical_end = length if newline < 0 else newline
            physical = text[line_end:physical_end]
            first_end = physical_end if first_end < 0 else first_end
            backslashes = len(physical) - len(physical.rstrip("\\"))
            if backslashes % 2 == 0 or physical_end >= length:
                parts.append(physical)
                line_end = physical_end
                break
            parts.append(physical[:-1])
            line_end = physical_end + 1
        line = "".join(parts) if joined else text[position:first_end]
        if (line.lstrip("\t") if strip_tabs else line) == delimiter:
            return position, min(length, line_end + 1)
        position = line_end + 1
    return length, length


def ansi_c_string(text: str, start: int) -> tuple[str, int]:
    """bash's `$'…'` from just after its opening quote: the value with its escapes decoded (`\\'` does not end
    it), and the index after the closing quote (past the end when there is none)."""
    parts: list[str] = []
    index = start
    length = len(text)
    while index < length and text[index] != "'":
        char = text[index]
        if char != "\\" or index + 1 >= length:
            parts.append(char)
            index += 1
            continue
        escape = text[index + 1]
        index += 2
        if escape in _ANSI_C_ESCAPES:
            parts.append(_ANSI_C_ESCAPES[escape])
        elif escape in "xuU":
            digits = _HEX.match(text, index, min(length, index + {"x": 2, "u": 4, "U": 8}[escape]))
            if digits is None:
                parts.append("\\" + escape)
            else:
                parts.append(chr(min(int(digits.group(), 16), 0x10FFFF)))
                index = digits.end()
        elif escape in "01234567":
            digits = _OCTAL.match(text, index - 1)
            assert digits is not None
            parts.append(chr(int(digits.group(), 8)))
            index = digits.end()
        elif escape == "c" and index < length:
            parts.append(chr(ord(text[index]) & 0x1F))
            index += 1
        else:
            parts.append("\\" + escape)
    return "".join(parts), index + 1


def braced_end(text: str, start: int) -> int:
    """The index after the `}` that closes a `${` whose contents start at `start` (past the end when none)."""
    return _balanced_end(text, start, "{")


def _balanced_end(text: str, start: int, opening: str) -> int:
    """The index after the bracket that closes `opening` (already read), counting nested brackets of both kinds
    and skipping quoted strings and escapes; past the end of the text when it is never closed."""
    depth = 1
    index = start
    length = len(text)
    while index < length:
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if char == "'" and opening == "(":
            end = text.find("'", index + 1)
            index = length if end < 0 else end + 1
            continue
        if char == '"':
            index += 1
            while index < length and text[index] != '"':
                index += 2 if text[index] == "\\" else 1
            index += 1
            continue
        if char in "({":
            depth += 1
        elif char in ")}":
            depth -= 1
            if depth == 0:
                return index + 1
        index += 1
    return length + 1


def arithmetic_end(text: str, start: int, limit: int) -> tuple[int, int]:
    """`((` … `))` as bash reads it: from just after `((`, the index after the `))` that closes it when the
    parentheses inside balance and it ends with `))`, else -1 (bash then reads `(` `(` as subshells or `$(` and
    a subshell). Scans no further than `limit`; returns (end or -1, where the scan stopped)."""
    depth = 0
    index = start
    end = min(len(text), limit)
    while index < end:
        char = text[index]
        if char == "(":
            depth += 1
        elif char == ")":
            if depth == 0:
                if index + 1 < len(text) and text[index + 1] == ")":
                    return index + 2, index + 2
                return -1, index
            depth -= 1
        elif char in "'\"":
            closing = text.find(char, index + 1)
            if closing < 0:
                return -1, end
            index = closing
        index += 1
    return -1, end


def closing_parenthesis(text: str, start: int) -> int:
    """The index after the `)` that closes a `(` read just before `start`, by counting (quotes skipped); past the
    end of the text when it is never closed. For substitutions nested too deeply to read one by one."""
    return _balanced_end(text, start, "(")
