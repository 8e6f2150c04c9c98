"""The env overlay's values in a command's words (`$NAME`, `${NAME}`): the text that actually reaches the program is
what gets classified, and what is shown (to deny patterns, the client, the audit log's reason) is put back as
written, since a value may be a secret whose name only the overlay's key reveals. Values longer than
MAX_SUBSTITUTION are not substituted (linear time)."""

from __future__ import annotations

import re
from collections.abc import Mapping

_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
MAX_SUBSTITUTION = 65536  # an env value longer than this is not substituted into words (linear time)
Env = Mapping[str, str]


def substitute(words: list[str], env: Env) -> list[str]:
    """The env overlay's values in place of `$NAME` / `${NAME}`: the text that reaches the program."""
    if not env or not any("$" in word for word in words):
        return words

    def value_of(match: re.Match[str]) -> str:
        value = env.get(match.group(1) or match.group(2))
        return value if value is not None and len(value) <= MAX_SUBSTITUTION else match.group()

    return [_VARIABLE.sub(value_of, word) if "$" in word else word for word in words]


def substituted_values(words: list[str], env: Env) -> dict[str, str]:
    """value -> `$NAME` for each overlay variable the words name (longest values first when put back)."""
    names = {match.group(1) or match.group(2) for word in words if "$" in word for match in _VARIABLE.finditer(word)}
    values = {
        env[name]: f"${name}" for name in names if name in env and env[name] and len(env[name]) <= MAX_SUBSTITUTION
    }
    return dict(sorted(values.items(), key=lambda item: -len(item[0])))


def unsubstituted(text: str, substituted: dict[str, str]) -> str:
    for value, name in substituted.items():
        text = text.replace(value, name)
    return text
