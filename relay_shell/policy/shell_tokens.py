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
    reader = _Reader(text, nested)
    index = 0
    length = len(text)
    while index < length:
        plain = _PLAIN.match(text, index)
        if plain is not None:
            reader.word.append(plain.group())
            reader.word_started = True
            index = plain.end()
            continue
        char = text[index]
        if char == "\\" and index + 1 < length:
            if text[index + 1] != "\n":
                reader.word.append(text[index + 1])
                reader.word_started = True
            index += 2
        elif char == "'":
            end = text.find("'", index + 1)
            end = length if end < 0 else end
            reader.word.append(text[index + 1 : end])
            reader.word_started = True
            index = end + 1
        elif char == '"':
            index = reader.double_quoted(index + 1)
        elif char == "$" and text.startswith("$(", index) and not text.startswith("$((", index):
            index = _capture_substitution(text, index + 2, nested)
            reader.word_dynamic = True
            reader.word_started = True
        elif char == "`":
            index = reader.backquoted(index)
            reader.word_started = True
        elif char == "#" and not reader.word_started:
            newline = text.find("\n", index)
            index = length if newline < 0 else newline
        elif char in " \t":
            reader.finish_word()
            index += 1
        elif char == "\n":
            index = reader.line_end(index + 1)
        elif char in ";&|()":
            index = reader.separator(index)
        elif char in "<>":
            index = reader.redirection(index)
        elif char in "{}" and not reader.word_started and (index + 1 >= length or text[index + 1] in " \t\n;"):
            reader.finish_command(False)
            index += 1
        else:
            if char == "$":
                reader.word_dynamic = True
            reader.word.append(char)
            reader.word_started = True
            index += 1
    reader.finish_command(False)
    for owner, _delimiter in reader.pending_heredocs:
        owner.heredoc = ""
    return reader.commands


class _Reader:
    """What the tokenizer holds while it reads one text: the commands so far, the command and the word being built,
    and a redirection or here-documents waiting for their word or the end of their line. Each method reads one
    construct from an index and returns the index after it."""

    def __init__(self, text: str, nested: list[str]) -> None:
        self.text = text
        self.nested = nested
        self.commands: list[Command] = []
        self.current = Command()
        self.word: list[str] = []
        self.word_dynamic = False
        self.word_started = False
        self.pending_redirect: str | None = None
        self.pending_heredocs: list[tuple[Command, str]] = []

    def finish_word(self) -> None:
        if not self.word_started:
            return
        value = "".join(self.word)
        if self.pending_redirect is not None:
            if self.pending_redirect in ("<<", "<<-"):
                self.pending_heredocs.append((self.current, value))
            else:
                self.current.redirects.append((self.pending_redirect, value))
            self.pending_redirect = None
        elif not self.current.words and ASSIGNMENT.fullmatch(value):
            pass  # a leading assignment (VAR=value cmd) is not the command word
        else:
            self.current.words.append(value)
            self.current.dynamic.append(self.word_dynamic)
        self.word = []
        self.word_dynamic = False
        self.word_started = False

    def finish_command(self, piped: bool) -> None:
        self.finish_word()
        if self.current.words or self.current.redirects:
            self.commands.append(self.current)
            self.current = Command(piped_into=piped)
        else:
            self.current.piped_into = piped  # reuse the empty command: `;;;;` costs no allocations

    def double_quoted(self, index: int) -> int:
        """A double-quoted string from just after its opening quote: escapes, `$(…)` and backticks inside it."""
        text, length, word = self.text, len(self.text), self.word
        self.word_started = True
        while index < length and text[index] != '"':
            if text[index] == "\\" and index + 1 < length and text[index + 1] in '"\\$`':
                word.append(text[index + 1])
                index += 2
                continue
            if text[index] == "$" and text.startswith("$(", index):
                index = _capture_substitution(text, index + 2, self.nested)
                self.word_dynamic = True
                continue
            if text[index] == "`":
                index = self.backquoted(index)
                continue
            if text[index] == "$":
                self.word_dynamic = True
            word.append(text[index])
            index += 1
        return index + 1

    def backquoted(self, index: int) -> int:
        """A backquoted command: its text goes to `nested`, the word it is in becomes dynamic."""
        end = self.text.find("`", index + 1)
        end = len(self.text) if end < 0 else end
        self.nested.append(self.text[index + 1 : end])
        self.word_dynamic = True
        return end + 1

    def line_end(self, index: int) -> int:
        """After a newline: the command ends, and the here-documents its line introduced follow; their bodies are
        data."""
        self.finish_command(False)
        text, length = self.text, len(self.text)
        for owner, delimiter in self.pending_heredocs:
            body_end = _heredoc_end(text, index, delimiter.strip("'\"-"))
            owner.heredoc = text[index:body_end]
            index = min(length, body_end + len(delimiter) + 1)
        self.pending_heredocs = []
        return index

    def separator(self, index: int) -> int:
        """`;`, `&`, `|`, `&&`, `||`, `;;`, `(`, `)` end a command (a pipe feeds the next); `&>` and `&>>` redirect."""
        text = self.text
        if text.startswith("&>", index):
            self.finish_word()
            operator = "&>>" if text.startswith("&>>", index) else "&>"
            self.pending_redirect = operator
            return index + len(operator)
        piped = text[index] == "|" and not text.startswith("||", index)
        self.finish_command(piped)
        return index + (2 if text.startswith(("&&", "||", ";;"), index) else 1)

    def redirection(self, index: int) -> int:
        """A redirection operator; its target is the next word. A leading fd number in the current word belongs to
        it (2>, 1>>); fd duplication (2>&1) and closing (>&-) write nothing."""
        text, length = self.text, len(self.text)
        if self.word_started and "".join(self.word).isdigit():
            self.word = []
            self.word_started = False
        else:
            self.finish_word()
        operator_match = REDIRECT_OPERATOR.match(text, index)
        assert operator_match is not None
        operator = operator_match.group(0)
        index += len(operator)
        if operator in (">&", "<&"):
            while index < length and (text[index].isdigit() or text[index] == "-"):
                index += 1
            return index
        self.pending_redirect = operator
        return index


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
