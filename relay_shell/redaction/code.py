"""Code the shell runs is never masked as a secret (issue 26, adr/0003 "Code in a secret's place").

`API_TOKEN="$(touch M; echo x)" true` names a secret and gives it a value, but the value is a command substitution:
the shell runs `touch M`. Masking it would hide code from the log. So before the passes run, every piece of text
the shell runs as code — `$(…)` (also `$((…))`), backquotes, `<(…)`, `>(…)`, unquoted or inside double quotes or an
unquoted here-document body — is bracketed by marker characters (private-use code points the passes treat as the
edge of a value). The passes then mask only the literal parts around it and still read the code's own text by the
usual rules (`$(curl -u user:pw …)` loses `pw`); `restore_code` puts the original brackets back. Single-quoted
text, `$'…'`, comments and quoted here-document bodies are data: a `$(` there is not code and stays masked.

Linear: one forward scan; each step jumps with a compiled search to the next character that can change the
quoting, and every construct is entered and left once.
"""

from __future__ import annotations

import bisect
import re

from relay_shell.redaction.pattern_compiler import compile_pattern

# The markers: a region opens with OPEN (OPEN_SECRET once a pass found it in a secret's place) and closes with
# CLOSE, or CLOSE_QUOTED when it was opened inside double quotes (the value goes on inside the quotes).
OPEN = "\ue000"
OPEN_SECRET = "\ue001"
CLOSE = "\ue002"
CLOSE_QUOTED = "\ue003"
MARKS = OPEN + OPEN_SECRET + CLOSE + CLOSE_QUOTED
MARK_CLASS = "\ue000-\ue003"  # for a character class
_OPENS = OPEN + OPEN_SECRET
# Markers written by the client are not markers: they become U+FFFD before the scan (the log shows that).
_FORGED = str.maketrans(dict.fromkeys(MARKS, "\ufffd"))
_HINTS = ("$(", "`", "<(", ">(")
# A variable the shell runs (attack 4, A4): `$NAME` as a command word, after `eval`/`exec`/`command`, or as a
# shell's `-c` text. Each attempt starts at a separator or a word and consumes bounded runs possessively: linear.
_RUN_NAME = compile_pattern(
    r"(?:(?:^|[;&|(`{\n])[ \t]*+|(?<![\w.-])(?:eval|exec|command|then|do|else|(?:ba|da|k|z)?sh[ \t]++-c)[ \t]++)"
    r"[\"']?\$\{?([A-Za-z_]\w*+)",
    re.MULTILINE,
)
# eval's words up to the end of its command, or a shell's -c text (one word, quoted or not); possessive: linear.
_RUN_TEXT = compile_pattern(
    r"(?<![\w.-])(?:eval[ \t]++([^;&|\n]++)|(?:ba|da|k|z)?sh[ \t]++-c[ \t]++(\"[^\"]*+\"|'[^']*+'|[^\s;&|]++))"
)
_NAME_IN_TEXT = compile_pattern(r"\$\{?([A-Za-z_]\w*+)")

# The next character that can open or close something, per context.
_IN_SHELL = compile_pattern(r"[\\'\"`$<>()#\n]|(?<![\w.-])(?:case|esac)(?![\w.-])")
_IN_ARITHMETIC = compile_pattern(r"[\\'\"`$()]")
_IN_DOUBLE_QUOTES = compile_pattern(r"[\\\"`$]")
_IN_BACKQUOTES = compile_pattern(r"[\\`$]")
_IN_HEREDOC_BODY = compile_pattern(r"[\\`$]")
_WORD_START_BEFORE = frozenset(" \t\n;&|()<>")
_HEREDOC_WORD_END = frozenset(" \t\n;&|<>()")
_ANSI_C_END = compile_pattern(r"(?:[^'\\]++|\\.)*+'?", re.DOTALL)


class _Context:
    """One open construct: the top level, `$(…)` and friends, backquotes, double quotes, a here-document body."""

    __slots__ = ("after", "cases", "depth", "kind", "limit", "queue", "queued", "region")

    def __init__(self, kind: str, limit: int, region: bool = False) -> None:
        self.kind = kind  # "shell", "arithmetic", "backquotes", "quotes", "heredoc"
        self.region = region  # closing it closes a marked region
        self.depth = 0  # open parentheses inside $( … )
        self.cases = 0  # open `case … esac` inside $( … ): a pattern's `)` does not close
        self.limit = limit  # the scan of this context stops here: the end of the text or of a here-document body
        # A here-document body also has `after` (where the scan goes on) and `queue` from `queued` on (the
        # here-documents after it on the same line), set when it starts: most contexts are substitutions, made by
        # the thousand.
        self.after: int
        self.queue: tuple[tuple[str, bool, bool], ...]
        self.queued: int


def names_run_as_code(text: str) -> frozenset[str]:
    """The variables whose values the text runs as shell code (`eval "$DB_PASSWORD"`, `$TOKEN -rf D`, `sh -c
    "$KEY"`): a value given to such a name is code, not a secret, and is kept in the record (attack 4, A4; adr/0003
    "Code in a secret's place")."""
    if "$" not in text:
        return frozenset()
    names = {match.group(1) for match in _RUN_NAME.finditer(text)}
    for match in _RUN_TEXT.finditer(text):  # anywhere in eval's words or a shell's -c text: `eval "true; $KEY"`
        names.update(_NAME_IN_TEXT.findall(match.group(1) or match.group(2)))
    return frozenset(names)


def mark_code(text: str) -> tuple[str, list[str]] | None:
    """The text with its code regions bracketed by markers, and the original text of each marker in order
    (what `restore_code` puts back); None when the text holds no code."""
    forged = not text.isascii() and _MARKER.search(text) is not None
    if forged:
        text = text.translate(_FORGED)
    events = _scan(text) if any(hint in text for hint in _HINTS) else []
    if not events:
        return (text, []) if forged else None
    pieces: list[str] = []
    originals: list[str] = []
    copied = 0
    for position, length, marker in events:
        pieces.append(text[copied:position])
        pieces.append(marker)
        originals.append(text[position : position + length])
        copied = position + length
    pieces.append(text[copied:])
    return "".join(pieces), originals


def restore_code(text: str, originals: list[str]) -> str:
    """Each marker back to the text it stood for. A marker a pass lost would mean code hidden from the log:
    then the code is written after the text, so it is still there."""
    pieces = _MARKER.split(text)
    if len(pieces) - 1 != len(originals):
        return _MARKER.sub("", text) + " [code the shell runs: " + " … ".join(originals) + "]"
    out = [pieces[0]]
    for original, piece in zip(originals, pieces[1:], strict=True):
        out.append(original)
        out.append(piece)
    return "".join(out)


_MARKER = re.compile(f"[{MARK_CLASS}]")


def _scan(text: str) -> list[tuple[int, int, str]]:
    """(position, length of the original text, marker) for every region's opening and closing."""
    events: list[tuple[int, int, str]] = []
    stack = [_Context("shell", len(text))]
    pending = _Heredocs()
    index = 0
    while True:
        context = stack[-1]
        found = _SEARCHES[context.kind].search(text, index, context.limit)
        if found is None:
            if context.limit >= len(text):
                break
            index = _end_heredoc(text, stack, events, pending)
            continue
        index = _step(text, found.start(), found.group(), stack, events, pending)
    for context in reversed(stack[1:]):  # unterminated: the region runs to the end of the text
        if context.region:
            events.append((len(text), 0, CLOSE))
    return events


_SEARCHES = {
    "shell": _IN_SHELL,
    "arithmetic": _IN_ARITHMETIC,
    "quotes": _IN_DOUBLE_QUOTES,
    "backquotes": _IN_BACKQUOTES,
    "heredoc": _IN_HEREDOC_BODY,
}


def _step(
    text: str,
    index: int,
    found: str,
    stack: list[_Context],
    events: list[tuple[int, int, str]],
    pending: _Heredocs,
) -> int:
    """Handle what was found at index; return where the scan goes on."""
    context = stack[-1]
    kind = context.kind
    following = text[index + 1 : index + 2]
    if found == "\\":
        return index + 2
    if found == "$":
        if following == "(":
            arithmetic = text.startswith("((", index + 1)
            events.append((index, 2, OPEN))
            opened = _Context("arithmetic" if arithmetic else "shell", context.limit, region=True)
            stack.append(opened)
            return index + 2
        if following == "'" and kind in ("shell", "arithmetic"):
            return _ANSI_C_END.match(text, index + 2).end()  # type: ignore[union-attr]
        return index + 1
    if found == "`":
        if kind == "backquotes":
            _close(stack, events, index, 1)
            return index + 1
        events.append((index, 1, OPEN))
        stack.append(_Context("backquotes", context.limit, region=True))
        return index + 1
    if kind == "quotes":  # only `"` is left
        stack.pop()
        return index + 1
    if found == '"':
        stack.append(_Context("quotes", context.limit))
        return index + 1
    if found == "'":
        closing = text.find("'", index + 1)
        return len(text) if closing == -1 else closing + 1
    if found == "(":
        context.depth += 1
        return index + 1
    if found == ")":
        if context.depth > 0:
            context.depth -= 1
        elif context.cases == 0 and context.region:
            _close(stack, events, index, 1)
        return index + 1
    return _shell_step(text, index, found, stack, events, pending)


def _shell_step(
    text: str,
    index: int,
    found: str,
    stack: list[_Context],
    events: list[tuple[int, int, str]],
    pending: _Heredocs,
) -> int:
    """The characters only the shell context (not arithmetic) reads: `<(`, `>(`, `<<`, `#`, newlines, `case`."""
    context = stack[-1]
    if context.kind != "shell":
        return index + 1
    following = text[index + 1 : index + 2]
    if found in "<>" and following == "(":
        events.append((index, 2, OPEN))
        stack.append(_Context("shell", context.limit, region=True))
        return index + 2
    if found == "<" and following == "<":
        if text.startswith("<", index + 2):
            return index + 3  # a here-string: its word is read as any word
        return _read_heredoc_word(text, index + 2, pending)
    if found == "#":
        if index == 0 or text[index - 1] in _WORD_START_BEFORE:
            line_end = text.find("\n", index)
            return len(text) if line_end == -1 else line_end
        return index + 1
    if found == "\n":
        if pending.announced:
            queue = tuple(pending.announced)  # a tuple of strings and flags: the collector need not track it
            pending.announced.clear()
            return _start_heredoc(text, index + 1, queue, 0, stack, events, pending)
        return index + 1
    if found == "case":
        context.cases += 1 if context.region else 0
    elif found == "esac":
        context.cases = max(0, context.cases - 1)
    return index + len(found)


def _close(stack: list[_Context], events: list[tuple[int, int, str]], index: int, length: int) -> None:
    stack.pop()
    inside_quotes = stack[-1].kind in ("quotes", "heredoc")
    events.append((index, length, CLOSE_QUOTED if inside_quotes else CLOSE))


def _read_heredoc_word(text: str, index: int, pending: _Heredocs) -> int:
    """`<<WORD`, `<<-WORD`, `<<'WORD'`, `<<"W"ORD`, `<<\\WORD`: the delimiter with its quotes removed, whether any
    part was quoted (then the body is data), whether leading tabs are stripped. Line continuations are removed."""
    strip_tabs = text.startswith("-", index)
    index += 1 if strip_tabs else 0
    while index < len(text) and text[index] in " \t":
        index += 1
    word: list[str] = []
    quoted = False
    while index < len(text) and text[index] not in _HEREDOC_WORD_END:
        char = text[index]
        if char == "\\":
            if text.startswith("\n", index + 1):
                index += 2
                continue
            quoted = True
            word.append(text[index + 1 : index + 2])
            index += 2
        elif char in "'\"":
            quoted = True
            closing = text.find(char, index + 1)
            closing = len(text) if closing == -1 else closing
            word.append(text[index + 1 : closing])
            index = closing + 1
        else:
            word.append(char)
            index += 1
    if word or quoted:
        pending.announced.append(("".join(word), quoted, strip_tabs))
    return index


def _start_heredoc(
    text: str,
    index: int,
    queue: tuple[tuple[str, bool, bool], ...],
    queued: int,
    stack: list[_Context],
    events: list[tuple[int, int, str]],
    pending: _Heredocs,
) -> int:
    """Bodies start after the line that announced them, one after the other. A body ends at the first line that is
    its delimiter (after tabs, for `<<-`), as the shell reads it: raw, before any expansion. The queue is read
    from `queued` on, never copied: a line may announce thousands."""
    while queued < len(queue):
        word, quoted, strip_tabs = queue[queued]
        queued += 1
        body_end, after = pending.find_delimiter(text, index, word, strip_tabs)
        if quoted:
            index = after
            continue
        body = _Context("heredoc", min(body_end, stack[-1].limit))
        body.after = after
        body.queue = queue
        body.queued = queued
        stack.append(body)
        return index
    return index


class _Heredocs:
    """Here-documents announced on the current line, and where each line of the text starts, indexed by its text
    (built once, at the first here-document), so finding a body's end never rescans the text."""

    __slots__ = ("announced", "lines")

    def __init__(self) -> None:
        self.announced: list[tuple[str, bool, bool]] = []  # (word, quoted, tabs stripped)
        self.lines: tuple[dict[str, list[int]], dict[str, list[int]]] | None = None

    def find_delimiter(self, text: str, index: int, word: str, strip_tabs: bool) -> tuple[int, int]:
        """The first line at or after index that is word (after leading tabs, for `<<-`): where it starts, and
        where the text after it starts; the end of the text twice when there is none."""
        if self.lines is None:
            self.lines = _index_lines(text)
        starts = self.lines[1 if strip_tabs else 0].get(word, [])
        found = bisect.bisect_left(starts, index)
        if found == len(starts):
            return len(text), len(text)
        line_start = starts[found]
        line_end = text.find("\n", line_start)
        return line_start, len(text) if line_end == -1 else line_end + 1


def _index_lines(text: str) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    exact: dict[str, list[int]] = {}
    stripped: dict[str, list[int]] = {}
    start = 0
    for line in text.split("\n"):
        exact.setdefault(line, []).append(start)
        stripped.setdefault(line.lstrip("\t"), []).append(start)
        start += len(line) + 1
    return exact, stripped


def _end_heredoc(text: str, stack: list[_Context], events: list[tuple[int, int, str]], pending: _Heredocs) -> int:
    """A body's end closes what was left open inside it (the shell reads no further for it)."""
    end = stack[-1].limit
    while stack[-1].kind != "heredoc":
        if stack.pop().region:
            events.append((end, 0, CLOSE_QUOTED))
    body = stack.pop()
    return _start_heredoc(text, body.after, body.queue, body.queued, stack, events, pending)


def pair_regions(text: str) -> dict[int, int]:
    """Where each opening marker's region closes (its closing marker's index; len(text) if none)."""
    closes: dict[int, int] = {}
    opened: list[int] = []
    for marker in _MARKER.finditer(text):
        if marker.group() in _OPENS:
            opened.append(marker.start())
        elif opened:
            closes[opened.pop()] = marker.start()
    for start in opened:
        closes[start] = len(text)
    return closes
