"""The shell tokenizer: one forward pass over shell text into simple commands (words, redirections, pipes,
here-documents, assignments), read the way sh and bash read it, with the contents of `$(…)`, backticks, `<(…)`,
`>(…)`, the expansions inside here-documents, `${…}` and `$((…))` handed back for recursive classification.

Where bash and sh read a text differently in a way that moves a quote (bash's `$'…'` is `$` and a single-quoted
string to dash), it is read both ways (`Tokens.ansi_c`; classify.py reads it again with `ansi_c=False`). A quote or
substitution left open is reported (`Tokens.unterminated`), and so is a here-document still waiting for its
delimiter line (`Tokens.heredoc_open`): a shell that keeps reading (a PTY at its PS2 prompt) runs what follows.
"""

from __future__ import annotations

import re

from relay_shell.policy.shell_words import (
    ASSIGNMENT_PREFIX,
    FIRST_WORDS,
    MARK_BRACE,
    MARK_GLOB,
    SETTERS,
    after_reserved,
    ansi_c_string,
    arithmetic_end,
    braced_end,
    closing_parenthesis,
    heredoc_delimiter,
    heredoc_end,
)
from relay_shell.policy.simple_commands import Command, Tokens

REDIRECT_OPERATOR = re.compile(r"<<<|<<-|<<|>>|>\||>&|<&|<>|>|<")
# A run of characters with no meaning to the shell: taken in one step (the tokenizer's fast path). Glob and
# brace characters are left out so that the word can be marked as one the shell expands.
_PLAIN = re.compile(r"[^\s\\'\"$`#;&|()<>{}*?\[]+")
_DUPLICATION = re.compile(r"\d*-?|-")
MAX_NESTING = 48
_FD_NAME = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}")


def tokenize(text: str, nested: list[str], ansi_c: bool = True) -> Tokens:
    """Split shell text into simple commands. Contents of `$(…)`, backticks and the like go to `nested`."""
    reader = _Reader(text, nested, ansi_c)
    reader.read(0, False)
    reader.finish_command(False)
    for owner, _delimiter, _quoted, _tabs in reader.pending_heredocs:
        owner.heredoc, reader.heredoc_open = owner.heredoc or "", True  # the line with `<<` is the last: body to come
    read = (reader.commands, reader.arithmetic, reader.unterminated, reader.saw_ansi_c, reader.sets_names)
    return Tokens(*read, reader.heredoc_open)


class _Reader:
    """What the tokenizer holds while it reads one text: the commands so far, the command and the word being built,
    and a redirection or here-documents waiting for their word or the end of their line. Each method reads one
    construct from an index and returns the index after it."""

    # Rarely changed state lives on the class until an instance sets it: a reader is made for every text.
    pending_redirect: str | None = None
    saw_ansi_c = heredoc_open = False  # heredoc_open: a body ran to the end of the text without its delimiter line
    nesting = 0  # how many readers of `$(…)` enclose this one
    sets_names = False  # an assignment, or a builtin that sets names (read, for, alias, …): shell_state reads them
    depth = 0  # open subshell parentheses inside a `$(…)` being read
    case_depth = 0  # open `case … esac` (their patterns end with an unmatched `)`)
    in_test = False  # inside `[[ … ]]`: < > && || ( ) are words there
    case_pattern = False  # where a `case` pattern goes (after `in`, `;;`, `;&`, `;;&`), up to its `)`
    word_dynamic = False
    word_unquoted = False  # the word has a parameter expansion outside quotes: its value is split on IFS
    in_double = False  # reading inside double quotes
    word_started = False
    word_start = 0  # where the word starts in the text (an assignment's NAME= must be unquoted)
    word_mark = 0

    def __init__(self, text: str, nested: list[str], ansi_c: bool, budget: list[int] | None = None) -> None:
        self.text = text
        # What scanning for the end of `((…))` may cost, shared with the readers of nested `$(…)`: an attempt that
        # fails is read again as parentheses, so without a bound `((((…` would cost quadratic time.
        self.budget = budget if budget is not None else [4 * len(text) + 4096]
        self.nested = nested
        self.ansi_c = ansi_c
        self.commands: list[Command] = []
        self.current = Command()
        self.word: list[str] = []
        self.pending_heredocs: list[tuple[Command, str, bool, bool]] = []
        self.arithmetic: list[str] = []
        self.unterminated: list[str] = []

    # -- the main loop ------------------------------------------------------------------------------------------

    def read(self, index: int, closing: bool) -> int:
        """Read from index to the end, or (closing) to the `)` that closes a `$(`: the index after it."""
        text, length = self.text, len(self.text)
        while index < length:
            plain = _PLAIN.match(text, index)
            if plain is not None:
                if not self.word_started:
                    self.word_started = True
                    self.word_start = index
                self.word.append(plain.group())
                index = plain.end()
                continue
            char = text[index]
            if char == "\\":
                self.start_word(index)
                if index + 1 < length and text[index + 1] != "\n":
                    self.word.append(text[index + 1])
                index += 2
            elif char == "'":
                index = self.single_quoted(index)
            elif char == '"':
                self.start_word(index)
                index = self.double_quoted(index + 1)
            elif char == "$":
                index = self.dollar(index)
            elif char == "`":
                self.start_word(index)
                index = self.backquoted(index)
            elif char == "#" and not self.word_started:
                newline = text.find("\n", index)
                index = length if newline < 0 else newline
            elif char in " \t":
                self.finish_word()
                index += 1
            elif char == "\n":
                if self.in_test:
                    self.finish_word()
                    index += 1
                else:
                    index = self.line_end(index + 1)
            elif self.in_test and char in "<>&|()":
                index = self.test_operator(index)
            elif self.case_pattern and char in "|()":
                self.finish_word()
                if self.case_pattern:  # still a pattern (the word was not `esac`)
                    self.case_pattern = char != ")"
                    index += 1
            elif char == ")" and closing and self.depth == 0 and self.case_depth == 0:
                self.finish_command(False)
                return index + 1
            elif char in ";&|()":
                index = self.separator(index)
            elif char in "<>":
                index = self.redirection(index)
            elif char in "{}" and not self.word_started and (index + 1 >= length or text[index + 1] in " \t\n;"):
                self.finish_command(False)
                index += 1
            else:
                self.start_word(index)
                if char in "*?[":
                    self.word_mark |= MARK_GLOB
                elif char == "{":
                    self.word_mark |= MARK_BRACE
                self.word.append(char)
                index += 1
        if closing:
            self.unterminated.append(text[index:])
        return index

    def start_word(self, index: int) -> None:
        if not self.word_started:
            self.word_started = True
            self.word_start = index

    # -- words and commands -------------------------------------------------------------------------------------

    def finish_word(self) -> None:
        if not self.word_started:
            return
        value = "".join(self.word)
        current = self.current
        if self.case_pattern and not self.pattern_word(value):
            return
        if self.pending_redirect is None and current.words and not after_reserved(current.words):
            if self.in_test and value == "]]":
                self.in_test = False
            self.append_word(current, value)
            if value == "in" and len(current.words) == 3 and current.words[0] == "case":
                self.commands.append(current)  # `case WORD in`: patterns follow, up to their `)`
                self.current = Command()
                self.case_pattern = True
        elif self.pending_redirect is not None:
            operator = self.pending_redirect
            self.pending_redirect = None
            # `>&WORD` (bash) writes WORD unless it names a descriptor (`2>&1`, `>&-`, `>&3-`)
            if operator not in (">&", "<&") or self.word_dynamic or not _DUPLICATION.fullmatch(value):
                current.redirects.append((operator, value))
        elif "=" in value and ASSIGNMENT_PREFIX.match(self.text, self.word_start):
            name = value.split("=", 1)[0].split("[", 1)[0].rstrip("+")
            if current.assignments is None:
                current.assignments = []
            current.assignments.append((name, value.split("=", 1)[1], self.word_dynamic))
            self.sets_names = True
        else:
            if value in FIRST_WORDS and self.text[self.word_start] not in "'\"\\":
                self.first_word(value)
            self.append_word(current, value)
        self.word = []
        self.word_dynamic = self.word_unquoted = self.word_started = False
        self.word_mark = 0

    def append_word(self, current: Command, value: str) -> None:
        """A word of the command, with its glob and brace marks and whether it has an unquoted expansion."""
        if self.word_mark:
            if current.marks is None:
                current.marks = {}
            current.marks[len(current.words)] = self.word_mark
        if self.word_unquoted:
            if current.unquoted is None:
                current.unquoted = set()
            current.unquoted.add(len(current.words))
        current.words.append(value)
        current.dynamic.append(self.word_dynamic)

    def pattern_word(self, value: str) -> bool:
        """A word where a `case` pattern goes: dropped (it is matched, never run), unless it is `esac`."""
        if value != "esac":
            self.word = []
            self.word_dynamic = self.word_unquoted = self.word_started = False
            self.word_mark = 0
            return False
        self.case_pattern = False
        return True

    def first_word(self, value: str) -> None:
        """Reserved words that change how what follows is read, and builtins that set names (shell_state)."""
        if value in SETTERS:
            self.sets_names = True
        elif value == "[[":
            self.in_test = True
        elif value == "case":
            self.case_depth += 1
        elif value == "esac" and self.case_depth:
            self.case_depth -= 1

    def finish_command(self, piped: bool) -> None:
        self.finish_word()
        if self.in_test:
            self.in_test = False
        current = self.current
        if current.words or current.redirects or current.assignments:
            self.commands.append(current)
            self.current = Command(piped_into=piped)
        else:
            current.piped_into = piped  # reuse the empty command: `;;;;` costs no allocations

    # -- quotes and expansions ------------------------------------------------------------------------------------

    def single_quoted(self, index: int) -> int:
        self.start_word(index)
        end = self.text.find("'", index + 1)
        if end < 0:
            self.unterminated.append(self.text[index + 1 :])
            end = len(self.text)
        self.word.append(self.text[index + 1 : end])
        return end + 1

    def double_quoted(self, index: int) -> int:
        """A double-quoted string from just after its opening quote: escapes and expansions inside it."""
        text, length, word = self.text, len(self.text), self.word
        self.in_double = True
        while index < length and text[index] != '"':
            char = text[index]
            if char == "\\" and index + 1 < length and text[index + 1] in '"\\$`\n':
                if text[index + 1] != "\n":
                    word.append(text[index + 1])
                index += 2
            elif char == "$" and index + 1 < length and text[index + 1] in "({":
                index = self.dollar(index)
            elif char == "`":
                index = self.backquoted(index)
            else:
                if char == "$" and index + 1 < length and (text[index + 1].isalnum() or text[index + 1] in "_@*#?$!-"):
                    self.word_dynamic = True
                word.append(char)
                index += 1
        self.in_double = False
        if index >= length:
            self.unterminated.append(text[index:])
        return index + 1

    def dollar(self, index: int) -> int:
        """`$(…)`, `$((…))`, `${…}`, `$'…'`, `$"…"`, `$NAME`, or a plain dollar sign."""
        text, length = self.text, len(self.text)
        self.start_word(index)
        following = text[index + 1] if index + 1 < length else ""
        if not self.in_double and (following in "({_@*#?$!-" or following.isalnum()) and following:
            self.word_unquoted = True
        if following == "(":
            self.word_dynamic = True
            if text.startswith("$((", index):
                end = self.arithmetic_at(index + 3)
                if end >= 0:
                    self.word.append("$((…))")
                    self.arithmetic_text(index + 3, end - 2)
                    return end
            self.word.append("$(…)")
            return self.substitution(index + 2)
        if following == "{":
            self.word_dynamic = True
            end = braced_end(text, index + 2)
            self.word.append(text[index:end])
            self.expansions_in(index + 2, end - 1)
            if end > length:
                self.unterminated.append(text[index + 2 :])
            return end
        if following == "'" and self.ansi_c:
            self.saw_ansi_c = True
            value, end = ansi_c_string(text, index + 2)
            if end > length:
                self.unterminated.append(text[index + 2 :])
            self.word.append(value)
            return end
        if following == '"':
            return self.double_quoted(index + 2)
        if following and (following in "*@#?$!-" or following.isdigit()):
            self.word_dynamic = True  # a special parameter: `$*` and `$?` are no glob
            self.word.append("$" + following)
            return index + 2
        if following.isalnum() or following in "_":
            self.word_dynamic = True
        self.word.append("$")
        return index + 1

    def substitution(self, start: int) -> int:
        """`$(` … `)`, read by a reader of its own so that quotes, here-documents, comments and `case` patterns
        inside are read as the shell reads them; its text goes to `nested`. Nested past MAX_NESTING readers, the
        closing parenthesis is found by counting (the text is classified all the same, and past MAX_DEPTH it is
        tier 3)."""
        if self.nesting >= MAX_NESTING:
            end = closing_parenthesis(self.text, start)
            self.nested.append(self.text[start : end - 1])
            return end
        inner = _Reader(self.text, [], self.ansi_c, self.budget)
        inner.nesting = self.nesting + 1
        end = inner.read(start, True)
        closed = not inner.unterminated
        self.unterminated += inner.unterminated
        self.nested.append(self.text[start : end - 1 if closed else end])
        return end

    def arithmetic_at(self, start: int) -> int:
        """The index after the `))` closing an arithmetic text from `start`, or -1 (not arithmetic, or the budget is
        spent: then it is read as parentheses, which classifies its text as commands)."""
        if self.budget[0] <= 0:
            return -1
        end, stopped = arithmetic_end(self.text, start, start + self.budget[0])
        self.budget[0] -= max(1, stopped - start)
        return end

    def arithmetic_text(self, start: int, end: int) -> None:
        self.arithmetic.append(self.text[start:end])
        self.expansions_in(start, end)

    def expansions_in(self, start: int, end: int) -> None:
        """The command substitutions inside text the shell expands but does not split into commands (an
        arithmetic expression, `${…}`, an unquoted here-document's body): quotes there are not quoting."""
        text = self.text
        index = start
        while index < end:
            char = text[index]
            if char == "\\":
                index += 2
            elif char == "$" and text.startswith("$(", index):
                if text.startswith("$((", index):
                    closing = self.arithmetic_at(index + 3)
                    if 0 <= closing <= end:
                        self.arithmetic.append(text[index + 3 : closing - 2])
                        index += 3
                        continue
                index = self.substitution(index + 2)
            elif char == "`":
                index = self.backquoted(index)
            else:
                index += 1

    def backquoted(self, index: int) -> int:
        """A backquoted command up to the next unescaped backquote: its text (with `\\``, `\\\\` and `\\$`
        unescaped, as the shell does) goes to `nested`, the word it is in becomes dynamic."""
        text, length = self.text, len(self.text)
        position = index + 1
        while position < length and text[position] != "`":
            position += 2 if text[position] == "\\" else 1
        if position >= length:
            self.unterminated.append(text[index + 1 :])
        inner = text[index + 1 : position]
        if "\\" in inner:
            inner = re.sub(r"\\([\\`$])", r"\1", inner)
        self.nested.append(inner)
        self.word_dynamic = True
        self.word.append("`…`")
        return position + 1

    # -- lines, separators, redirections ------------------------------------------------------------------------

    def line_end(self, index: int) -> int:
        """After a newline: the command ends, and the here-documents its line introduced follow. A body is data,
        but an unquoted delimiter makes the shell expand `$(…)` and backquotes in it."""
        self.finish_command(False)
        text = self.text
        for owner, delimiter, quoted, tabs in self.pending_heredocs:
            body_end, after = heredoc_end(text, index, delimiter, tabs, quoted)
            self.heredoc_open = self.heredoc_open or body_end >= len(text)
            body = text[index:body_end]
            owner.heredoc = body if owner.heredoc is None else owner.heredoc + "\n" + body
            if not quoted:
                self.expansions_in(index, body_end)
            index = after
        self.pending_heredocs = []
        return index

    def separator(self, index: int) -> int:
        """`;`, `&`, `|`, `&&`, `||`, `;;`, `(`, `)` end a command (a pipe feeds the next); `&>` and `&>>` redirect;
        `NAME=(…)` is an array assignment; `((…))` at a command's start is arithmetic."""
        text = self.text
        char = text[index]
        following = text[index + 1 : index + 2]
        if char == "(":
            if self.word_started and self.word and self.word[-1].endswith("="):
                return self.array_value(index)
            if following == "(" and not self.word_started and not self.current.words:
                end = self.arithmetic_at(index + 2)
                if end >= 0:
                    self.finish_command(False)
                    self.current.words += ["((", text[index + 2 : end - 2]]
                    self.current.dynamic += [False, False]
                    self.arithmetic_text(index + 2, end - 2)
                    self.finish_command(False)
                    return end
            self.depth += 1
            self.finish_command(False)
            return index + 1
        if char == ")":
            if self.depth:
                self.depth -= 1
            self.finish_command(False)
            return index + 1
        if char == "&" and following == ">":
            self.finish_word()
            operator = "&>>" if text.startswith("&>>", index) else "&>"
            self.pending_redirect = operator
            return index + len(operator)
        if char == "|":
            self.finish_command(following not in "|")
            return index + (2 if following in "|&" and following else 1)  # `||`, and bash's `|&` (stderr too)
        self.finish_command(False)
        if char == ";" and self.case_depth and following in ";&" and following:
            self.case_pattern = True  # the next case pattern follows
            return index + (3 if text.startswith(";;&", index) else 2)
        return index + (2 if following == char and char in "&;" else 1)

    def array_value(self, index: int) -> int:
        """`NAME=(a b $(c))`: the words of the list are the value (their substitutions are classified)."""
        if self.nesting >= MAX_NESTING:
            end = closing_parenthesis(self.text, index + 1)
            self.word.append(self.text[index:end])
            return end
        inner = _Reader(self.text, self.nested, self.ansi_c, self.budget)
        inner.nesting = self.nesting + 1
        end = inner.read(index + 1, True)
        self.unterminated += inner.unterminated
        self.word.append(self.text[index:end])
        self.word_dynamic = self.word_dynamic or any(any(command.dynamic) for command in inner.commands)
        return end

    def test_operator(self, index: int) -> int:
        """Inside `[[ … ]]`: `<`, `>`, `&&`, `||`, `(`, `)` and `!` are words of the test, not operators."""
        self.finish_word()
        text = self.text
        size = 2 if text.startswith(("&&", "||"), index) else 1
        self.start_word(index)
        self.word.append(text[index : index + size])
        self.finish_word()
        return index + size

    def redirection(self, index: int) -> int:
        """A redirection operator; its target is the next word. A leading fd number (2>, 1>>) or `{NAME}` in the
        current word belongs to it; fd duplication (2>&1) and closing (>&-) write nothing. `<(…)` and `>(…)` are
        process substitutions (bash): commands, and a word naming a pipe."""
        text = self.text
        if text.startswith(("<(", ">("), index):
            self.start_word(index)
            self.word_dynamic = True
            self.word.append("/dev/fd/63")
            return self.substitution(index + 2)
        if self.word_started:
            word = "".join(self.word)
            if self.pending_redirect is None and (word.isdigit() or _FD_NAME.fullmatch(word)):
                self.word = []
                self.word_started = False
                self.word_mark = 0
            else:
                self.finish_word()
        operator_match = REDIRECT_OPERATOR.match(text, index)
        assert operator_match is not None
        operator = operator_match.group(0)
        index += len(operator)
        if operator in ("<<", "<<-"):
            delimiter, quoted, index = heredoc_delimiter(text, index)
            self.pending_heredocs.append((self.current, delimiter, quoted, operator == "<<-"))
            return index
        self.pending_redirect = operator
        return index
