"""Field splitting of substituted values, as the shell does it (adr/0025, round 4): an unquoted `$x`, `${x}`, `$*`,
`$@` or `$N` whose value the classifier knows (the env overlay, the text's own assignments, `for` values, `set --`)
is split on IFS into several words — `x="rm -rf d"; $x` runs `rm` with two arguments, never a program named
`rm -rf d`. IFS is the default unless the text assigns it; since where an assignment stands relative to the word
is not tracked, each value IFS can have gives one reading and every reading is classified. When IFS is only known at
run time, an unquoted substituted word stays a word only known at run time (tier 3 in command position)."""

from __future__ import annotations

import re

_WHITESPACE = " \t\n"
_POSITIONAL = re.compile(r"\$(?:([*@0-9])|\{([*@0-9])\})")


def positional_words(
    words: list[str], flags: list[bool], unquoted: list[bool], positional: list[str]
) -> tuple[list[str], list[bool], list[bool], list[bool]]:
    """Words that are exactly `$*`, `$@`, `$N` (braced or not) replaced by the positional parameters `set --` gave:
    unquoted, their values joined (split later on IFS); `"$@"` one word each; `"$*"` joined with a space. Returns
    the words, their dynamic flags, their unquoted flags and which were substituted."""
    new_words: list[str] = []
    new_flags: list[bool] = []
    new_unquoted: list[bool] = []
    changed: list[bool] = []
    for word, flag, bare in zip(words, flags, unquoted, strict=True):
        match = _POSITIONAL.fullmatch(word) if flag else None
        if match is None:
            new_words.append(word)
            new_flags.append(flag)
            new_unquoted.append(bare)
            changed.append(False)
            continue
        name = match.group(1) or match.group(2)
        if name.isdigit():
            values = positional[int(name) - 1 : int(name)] if name != "0" else ["sh"]
        elif name == "@" and not bare:
            values = positional
        else:
            values = [" ".join(positional)]
        for value in values:
            new_words.append(value)
            new_flags.append(False)
            new_unquoted.append(bare)
            changed.append(True)
    return new_words, new_flags, new_unquoted, changed


def known_values(flags: list[bool], words: list[str], originals: list[str]) -> list[bool]:
    """Which words stay only known at run time after substitution: those not substituted, and those whose value
    names another variable (`x=…; y=$x; $y`: the assignment expanded `$x`, the classifier kept it as text)."""
    return [
        flag and (word == original or "$" in word) for flag, word, original in zip(flags, words, originals, strict=True)
    ]


def split_readings(
    words: list[str], flags: list[bool], split: list[bool], choices: list[str] | None
) -> list[tuple[list[str], list[bool]]]:
    """The words after field splitting of the substituted unquoted ones (`split`), one reading per IFS value; with
    IFS unknown, those words are marked as only known at run time instead."""
    if not any(split):
        return [(words, flags)]
    if choices is None:
        return [(words, [flag or cut for flag, cut in zip(flags, split, strict=True)])]
    readings: list[tuple[list[str], list[bool]]] = []
    for ifs in dict.fromkeys(choices):
        new_words: list[str] = []
        new_flags: list[bool] = []
        for word, flag, cut in zip(words, flags, split, strict=True):
            fields = fields_of(word, ifs) if cut else [word]
            new_words += fields
            new_flags += [flag] * len(fields)
        if all(new_words != seen for seen, _flags in readings):
            readings.append((new_words, new_flags))
    return readings


def fields_of(value: str, ifs: str) -> list[str]:
    """`value` split on `ifs` as the shell splits an unquoted expansion (empty fields dropped: they name nothing)."""
    if not ifs:
        return [value]
    spaces = "".join(char for char in ifs if char in _WHITESPACE)
    others = "".join(char for char in ifs if char not in _WHITESPACE)
    parts = [value]
    if others:
        parts = re.split("[" + re.escape(others) + "]", value)
    if spaces:
        parts = [field for part in parts for field in re.split("[" + re.escape(spaces) + "]+", part)]
    return [field for field in parts if field]
