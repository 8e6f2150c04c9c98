"""The shell tokenizer: one forward pass over shell text into simple commands (words, redirections, pipes,
here-documents), with the contents of `$(…)` and backticks handed back for recursive classification.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

REDIRECT_OPERATOR = re.compile(r"<<<|<<-|<<|>>|>\||>&|<&|<>|>|<")
# A run of characters with no meaning to the shell: taken in one step (the tokenizer's fast path).
_PLAIN = re.compile(r"[^\s\\'\"$`#;&|()<>{}]+")
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.DOTALL)


@dataclass
class Command:
    words: list[str] = field(default_factory=list)
    dynamic: list[bool] = field(default_factory=list)  # word contains an expansion ($X, $(…), `…`)
    redirects: list[tuple[str, str]] = field(default_factory=list)
    piped_into: bool = False  # stdin comes from a pipe
    heredoc: str | None = None  # here-document body fed to this command


def tokenize(text: str, nested: list[str]) -> list[Command]:
    """Split shell text into simple commands. Contents of `$(…)` and backticks go to `nested`."""
    commands: list[Command] = []
    current = Command()
    word: list[str] = []
    word_dynamic = False
    word_started = False
    pending_redirect: str | None = None
    pending_heredocs: list[tuple[Command, str]] = []
    index = 0
    length = len(text)

    def finish_word() -> None:
        nonlocal word, word_dynamic, word_started, pending_redirect
        if not word_started:
            return
        value = "".join(word)
        if pending_redirect is not None:
            if pending_redirect in ("<<", "<<-"):
                pending_heredocs.append((current, value))
            else:
                current.redirects.append((pending_redirect, value))
            pending_redirect = None
        elif not current.words and ASSIGNMENT.fullmatch(value):
            pass  # a leading assignment (VAR=value cmd) is not the command word
        else:
            current.words.append(value)
            current.dynamic.append(word_dynamic)
        word = []
        word_dynamic = False
        word_started = False

    def finish_command(piped: bool) -> None:
        nonlocal current
        finish_word()
        if current.words or current.redirects:
            commands.append(current)
            current = Command(piped_into=piped)
        else:
            current.piped_into = piped  # reuse the empty command: `;;;;` costs no allocations

    while index < length:
        plain = _PLAIN.match(text, index)
        if plain is not None:
            word.append(plain.group())
            word_started = True
            index = plain.end()
            continue
        char = text[index]
        if char == "\\" and index + 1 < length:
            if text[index + 1] != "\n":
                word.append(text[index + 1])
                word_started = True
            index += 2
            continue
        if char == "'":
            end = text.find("'", index + 1)
            end = length if end < 0 else end
            word.append(text[index + 1 : end])
            word_started = True
            index = end + 1
            continue
        if char == '"':
            index += 1
            word_started = True
            while index < length and text[index] != '"':
                if text[index] == "\\" and index + 1 < length and text[index + 1] in '"\\$`':
                    word.append(text[index + 1])
                    index += 2
                    continue
                if text[index] == "$" and text.startswith("$(", index):
                    index = _capture_substitution(text, index + 2, nested)
                    word_dynamic = True
                    continue
                if text[index] == "`":
                    end = text.find("`", index + 1)
                    end = length if end < 0 else end
                    nested.append(text[index + 1 : end])
                    word_dynamic = True
                    index = end + 1
                    continue
                if text[index] == "$":
                    word_dynamic = True
                word.append(text[index])
                index += 1
            index += 1
            continue
        if char == "$" and text.startswith("$(", index) and not text.startswith("$((", index):
            index = _capture_substitution(text, index + 2, nested)
            word_dynamic = True
            word_started = True
            continue
        if char == "`":
            end = text.find("`", index + 1)
            end = length if end < 0 else end
            nested.append(text[index + 1 : end])
            word_dynamic = word_started = True
            index = end + 1
            continue
        if char == "$":
            word_dynamic = True
        if char == "#" and not word_started:
            newline = text.find("\n", index)
            index = length if newline < 0 else newline
            continue
        if char in " \t":
            finish_word()
            index += 1
            continue
        if char == "\n":
            finish_command(False)
            index += 1
            # Here-documents start after the line that introduced them; their bodies are data.
            for owner, delimiter in pending_heredocs:
                body_end = _heredoc_end(text, index, delimiter.strip("'\"-"))
                owner.heredoc = text[index:body_end]
                index = min(length, body_end + len(delimiter) + 1)
            pending_heredocs = []
            continue
        if char in ";&|()":
            if char == "&" and text.startswith("&>", index):
                finish_word()
                operator = "&>>" if text.startswith("&>>", index) else "&>"
                pending_redirect = operator
                index += len(operator)
                continue
            piped = char == "|" and not text.startswith("||", index)
            finish_command(piped)
            index += 2 if text.startswith(("&&", "||", ";;"), index) else 1
            continue
        if char in "<>":
            # A redirection: a leading fd number in the current word belongs to it (2>, 1>>).
            if word_started and "".join(word).isdigit():
                word = []
                word_started = False
            else:
                finish_word()
            operator_match = REDIRECT_OPERATOR.match(text, index)
            assert operator_match is not None
            operator = operator_match.group(0)
            index += len(operator)
            if operator in (">&", "<&"):
                # fd duplication (2>&1) or close (>&-): nothing is written to a file.
                while index < length and (text[index].isdigit() or text[index] == "-"):
                    index += 1
                continue
            pending_redirect = operator
            continue
        if char in "{}" and not word_started and (index + 1 >= length or text[index + 1] in " \t\n;"):
            finish_command(False)
            index += 1
            continue
        word.append(char)
        word_started = True
        index += 1
    finish_command(False)
    for owner, _delimiter in pending_heredocs:
        owner.heredoc = ""
    return commands


def _capture_substitution(text: str, start: int, nested: list[str]) -> int:
    """`$(` … `)` with nested parentheses; quotes inside are skipped so `)` in a string does not end it."""
    depth = 1
    index = start
    length = len(text)
    while index < length and depth:
        char = text[index]
        if char == "'":
            end = text.find("'", index + 1)
            index = length if end < 0 else end + 1
            continue
        if char == "\\":
            index += 2
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        index += 1
    nested.append(text[start : index - 1 if depth == 0 else index])
    return index


def _heredoc_end(text: str, start: int, delimiter: str) -> int:
    position = start
    while position < len(text):
        newline = text.find("\n", position)
        line_end = len(text) if newline < 0 else newline
        if text[position:line_end].strip() == delimiter:
            return position
        position = line_end + 1
    return len(text)
