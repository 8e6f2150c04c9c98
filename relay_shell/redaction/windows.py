"""Windows secrets: PowerShell secure strings (`ConvertTo-SecureString 'pw' -AsPlainText`) and `net user NAME
PASSWORD`. Linear: every pattern starts only at the start of a run and consumes runs possessively."""

from __future__ import annotations

from relay_shell.redaction.code import MARKS
from relay_shell.redaction.pattern_compiler import compile_pattern
from relay_shell.redaction.values import REDACTED, keep_code

# ConvertTo-SecureString [-AsPlainText] [-Force] [-String] VALUE: the value is the secret (a variable is not).
_SECURE_STRING = compile_pattern(
    r"(?i)(?<![\w-])(convertto-securestring(?:[ \t]++-(?:asplaintext|force|string)\b){0,3}[ \t]++)"
    r"(\"(?:[^\"`\n]|`.)*+\"?|'[^'\n]*+'?|(?![$(-])[^\s)]++)"
)
# net user NAME PASSWORD [/add]: the second operand (`*` prompts, `/x` is a switch).
_NET_USER = compile_pattern(r"(?i)(?<![\w-])(net(?:\.exe)?[ \t]++user[ \t]++[^\s/]++[ \t]++)([^\s/*][^\s]*+)")


def redact_windows(text: str) -> str:
    lowered = text.lower()
    if "convertto-securestring" in lowered:
        text = _SECURE_STRING.sub(lambda match: match.group(1) + _quoted_mask(match.group(2)), text)
    if "net" in lowered and "user" in lowered:
        text = _NET_USER.sub(lambda match: match.group(1) + _quoted_mask(match.group(2)), text)
    return text


def _quoted_mask(value: str) -> str:
    if not value.isascii() and any(mark in value for mark in MARKS):
        return keep_code(value)  # code the shell runs is not a secret (code.py)
    for quote in ('"', "'"):
        if len(value) >= 2 and value.startswith(quote) and value.endswith(quote):
            return f"{quote}{REDACTED}{quote}"
    return REDACTED
