"""Programs that read their program or commands from stdin (adr/0025, round 4): `awk -f /dev/stdin`, `sed -f -`,
`perl /dev/fd/0`, `python3 -`, `vim -es`, `ex -s`, `ed`, `m4` and `groff -U` with no file. The literal stdin text
(a here-document, a here-string, the call's stdin, an upstream echo/printf) is read as that language; a pipe the
classifier cannot see is 2."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from relay_shell.policy.calls import Context, Verdict
from relay_shell.policy.command_languages import (
    EDITORS,
    STDIN_NAMES,
    code_text_verdict,
    ed_commands,
    ex_commands,
)
from relay_shell.policy.perl_code import perl_verdict
from relay_shell.policy.python_code import python_verdict
from relay_shell.policy.rules import program_verdict
from relay_shell.policy.script_code import node_verdict, ruby_verdict

_SCRIPT_LANGUAGES = {
    "perl": "perl",
    "ruby": "ruby",
    "node": "node",
    "nodejs": "node",
    "tclsh": "tcl",
    "wish": "tcl",
    "expect": "tcl",
    "lua": "lua",
    "luajit": "lua",
    "php": "php",
}
_VERSION = re.compile(r"[0-9][0-9.]*$")


def stdin_language(program: str, words: list[str]) -> str | None:
    """The language in which a program reads its program or commands from stdin (`awk -f /dev/stdin`, `sed -f -`,
    `perl /dev/fd/0`, `python3 -`, `vim -es`, `ex -s`, `ed`, `m4` with no file, `groff -U` with no file), or None."""
    name = _VERSION.sub("", program)
    name = name if name in ("python", "pypy") or name in _SCRIPT_LANGUAGES else program
    arguments = words[1:]
    if name in ("awk", "gawk", "mawk", "nawk", "sed", "gsed"):
        for position, word in enumerate(arguments):
            value = None
            if word in ("-f", "--file") and position + 1 < len(arguments):
                value = arguments[position + 1]
            elif word.startswith("--file="):
                value = word.split("=", 1)[1]
            elif word.startswith("-f") and len(word) > 2 and not word.startswith("--"):
                value = word[2:]
            if value in STDIN_NAMES:
                return "sed" if "sed" in name else "awk"
        return None
    if name in ("python", "pypy") or name in _SCRIPT_LANGUAGES:
        first = next((word for word in arguments if not word.startswith("-") or word == "-"), None)
        if any(word in ("-c", "-e", "-E", "-r", "-p", "-pe", "-m") for word in arguments):
            return None
        return ("python" if name in ("python", "pypy") else _SCRIPT_LANGUAGES[name]) if first in STDIN_NAMES else None
    if name in EDITORS:
        ex_mode = name in ("ex", "nex") or any(word in ("-e", "-E", "-es", "-Es", "-se", "-sE") for word in arguments)
        return "ex" if ex_mode else None
    if name in ("ed", "red"):
        return "ed"
    files = [word for word in arguments if not word.startswith("-") or word == "-"]
    if name == "m4" and (not files or "-" in files):
        return "m4"
    if name == "groff" and "-U" in arguments and (not files or "-" in files):
        return "groff"
    return None


def stdin_code_verdict(language: str, text: str) -> Verdict:
    """What a program does with `text` read as its program or commands in `language`."""
    if language == "python":
        found = python_verdict(text)
        return Verdict(max(1, found.tier), found.reason, found.shell, found.commands)
    if language == "perl":
        return perl_verdict(["perl", "-e", text])
    if language == "ruby":
        return ruby_verdict(["ruby", "-e", text])
    if language == "node":
        return node_verdict(["node", "-e", text])
    if language in ("awk", "sed"):
        return program_verdict(language, [language, *(["-e"] if language == "sed" else []), text], Context())
    if language == "ex":
        return ex_commands(text)
    if language == "ed":
        return ed_commands(text)
    if language == "groff":
        shell = [match.group(1) for match in re.finditer(r"^\.(?:sy|pi)\s+(.+)$", text, re.MULTILINE)]
        return Verdict(2 if shell else 1, "groff -U runs the commands of .sy lines", tuple(shell))
    return code_text_verdict(language, text)


def literal_output(words: list[str]) -> str | None:
    """The text an `echo` or `printf` writes, when its words are literal (escapes of printf's format decoded)."""
    if not words:
        return None
    program = words[0].rsplit("/", 1)[-1]
    arguments = words[1:]
    if program == "echo":
        while arguments and arguments[0] in ("-n", "-e", "-E", "-ne", "-en"):
            arguments = arguments[1:]
        return " ".join(arguments).replace("\\n", "\n")
    if program == "printf" and arguments:
        return _printf(arguments[1:] if arguments[0] == "--" else arguments)
    return None


_CONVERSION = re.compile(r"%(?:%|[-+ #0]*\d*(?:\.\d*)?([sbcdiqu]))")
_ESCAPE = re.compile(r"\\(?:x[0-9A-Fa-f]{1,2}|[0-7]{1,3}|.)", re.DOTALL)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "\\": "\\", "e": "\x1b"}


def _unescape(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        body = match.group()[1:]
        if body[0] == "x" and len(body) > 1:
            return chr(int(body[1:], 16))
        if body[0] in "01234567":
            return chr(int(body, 8) & 0xFF)
        return _SIMPLE_ESCAPES.get(body, match.group())

    return _ESCAPE.sub(one, text)


def _printf(arguments: list[str]) -> str | None:
    """What printf FORMAT ARGS… writes: the format's escapes decoded, `%s`/`%b`/`%c`/`%d` filled in and the format
    used again while arguments remain; None for a conversion it does not model (`%q`)."""
    if not arguments:
        return None
    template, values = _unescape(arguments[0]), arguments[1:]
    conversions = [match.group(1) for match in _CONVERSION.finditer(template) if match.group(1)]
    if any(kind not in "sbcdiu" for kind in conversions):
        return None
    out: list[str] = []
    for _round in range(64):
        taken = values[: len(conversions)]
        values = values[len(conversions) :]
        out.append(_CONVERSION.sub(_filler(iter(taken)), template))
        if not values or not conversions:
            break
    return "".join(out)


def _filler(supply: Iterator[str]) -> Callable[[re.Match[str]], str]:
    """printf's conversions filled in from `supply` (an empty string once it runs out)."""

    def fill(match: re.Match[str]) -> str:
        kind = match.group(1)
        value = next(supply, "") if kind else "%"
        return {"c": value[:1], "b": _unescape(value)}.get(kind or "", value)

    return fill
