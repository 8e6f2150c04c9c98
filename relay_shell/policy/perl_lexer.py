"""A lexer for perl code (perl_code.py rates what it finds): one forward pass into tokens (names, strings,
regular expressions, variables, numbers, punctuation), with perl's quote-like operators (`q qq qw qx m qr s tr y`
with any delimiter, nested brackets), here-documents, POD and `__END__`; then the calls, with their first
arguments, the subs and modules, the commands in backquotes and `qx`, and the code perl runs from inside strings
(`@{[ … ]}`, `${\\ … }`, `s/…/…/e`) lexed in turn.

Where perl decides between a regex and a division (`/`), a readline and a less-than (`<`), a hash and a modulo
(`%`) by what came before, so does this lexer: a term is expected after an operator, an opening bracket, a comma,
the start, or a name perl parses as a list operator; after a variable, a number, a string, a closing bracket or any
other name it is an operator. Reading an operator where perl reads a regex only makes more of the text code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_NAME = re.compile(r"(?:::)?[A-Za-z_]\w*(?:::\w+)*(?:::)?")
_NUMBER = re.compile(r"0[xX][0-9a-fA-F_]+|0[bB][01_]+|(?:\d[\d_]*)?\.?\d[\d_]*(?:[eE][-+]?\d+)?")
_SPACE = re.compile(r"[ \t\r\f]+")
_QUOTE_LIKE = frozenset(["q", "qq", "qw", "qx", "m", "qr", "s", "tr", "y"])
_PAIRS = {"(": ")", "[": "]", "{": "}", "<": ">"}
# Names after which perl expects a term (so `/` starts a regex, `<` a readline): list operators and keywords.
_TERM_AFTER = frozenset(
    [
        "print",
        "printf",
        "say",
        "split",
        "grep",
        "map",
        "join",
        "push",
        "unshift",
        "return",
        "and",
        "or",
        "not",
        "xor",
        "if",
        "unless",
        "while",
        "until",
        "elsif",
        "for",
        "foreach",
        "x",
        "lt",
        "gt",
        "le",
        "ge",
        "eq",
        "ne",
        "cmp",
        "defined",
        "ref",
        "scalar",
        "die",
        "warn",
        "open",
        "close",
        "sort",
        "reverse",
        "keys",
        "values",
        "each",
        "delete",
        "exists",
        "chomp",
        "chop",
        "lc",
        "uc",
        "length",
        "substr",
        "index",
        "sprintf",
        "unlink",
        "system",
        "exec",
        "my",
        "our",
        "local",
        "when",
    ]
)
_STATEMENT_ENDS = frozenset([";", "}", ")", "]"])
_LOW_PRECEDENCE = frozenset(["or", "and", "if", "unless", "while", "until", "for", "foreach", "xor"])
_HEREDOC = re.compile(r"<<(~?)(?:\"([^\"\n]*)\"|'([^'\n]*)'|([A-Za-z_]\w*))")
_READLINE = re.compile(r"<(\$?[\w:]*|[\w.*?/~\[\]{},\- ]*)>")
_INTERPOLATED_CODE = re.compile(r"[$@]\{(?!\s*\^?\w+\s*\})")
_INTERPOLATES = re.compile(r"(?<!\\)[$@](?:[\w:{]|\$)")


@dataclass
class Lexed:
    calls: list[tuple[str, list[str]]] = field(default_factory=list)  # name, first arguments ("'text", "{", "?")
    subs: list[str] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)  # the text of backquotes and qx
    dynamic_commands: bool = False  # a backquote or qx with interpolation
    unreadable: str = ""  # why some code cannot be read statically
    reads_argv: bool = False  # <>, <ARGV>, eof(): two-argument open of every argument
    sets_in_place: bool = False  # $^I = …


@dataclass
class _Token:
    kind: str  # name, method, string, istring, var, number, op, regex, command
    value: str


_CARET_BRACED = re.compile(r"([$@%])\{\s*\^([A-Z\[\]\\^_?])\s*\}")


def lex_perl(code: str, depth: int = 0) -> Lexed:
    lexed = Lexed()
    if depth > 4:
        lexed.unreadable = "is nested too deeply"
        return lexed
    if "^" in code and "{" in code:
        code = _CARET_BRACED.sub(r"\1^\2", code)  # `${^I}` and `${ ^I }` are `$^I`
    tokens = _Lexer(code, lexed, depth).run()
    _calls(tokens, lexed)
    return lexed


class _Lexer:
    def __init__(self, code: str, lexed: Lexed, depth: int) -> None:
        self.code = code
        self.lexed = lexed
        self.depth = depth
        self.tokens: list[_Token] = []
        self.heredocs: list[tuple[str, bool, bool]] = []  # terminator, interpolating, indented

    def expects_term(self) -> bool:
        if not self.tokens:
            return True
        last = self.tokens[-1]
        if last.kind == "op":
            return last.value not in (")", "]", "}")
        return last.kind == "name" and last.value in _TERM_AFTER

    def run(self) -> list[_Token]:
        code, length = self.code, len(self.code)
        index = 0
        while index < length:
            char = code[index]
            if char == "\n":
                index = self.pod(self.heredoc_bodies(index + 1))
                continue
            space = _SPACE.match(code, index)
            if space is not None:
                index = space.end()
                continue
            if char == "#":
                end = code.find("\n", index)
                index = length if end < 0 else end
                continue
            index = self.token(index)
        return self.tokens

    def pod(self, index: int) -> int:
        """POD (`=head1` … `=cut`) at a line's start is documentation, not code."""
        code = self.code
        if not (code.startswith("=", index) and code[index + 1 : index + 2].isalpha()):
            return index
        end = code.find("\n=cut", index)
        if end < 0:
            return len(code)
        after = code.find("\n", end + 1)
        return len(code) if after < 0 else after

    def token(self, index: int) -> int:
        code = self.code
        char = code[index]
        name = _NAME.match(code, index) if (char.isalpha() or char in "_:") else None
        if name is not None and name.group() not in (":", "::"):
            return self.word(name.group(), name.end())
        if char.isdigit() or (char == "." and code[index + 1 : index + 2].isdigit()):
            number = _NUMBER.match(code, index)
            end = number.end() if number and number.end() > index else index + 1
            self.tokens.append(_Token("number", code[index:end]))
            return end
        if char in "'\"`":
            return self.quoted(char, index + 1, {"'": "q", '"': "qq", "`": "qx"}[char], char)
        if char in "$@%&*" and self.variable_ahead(index):
            return self.variable(index)
        if char == "/" and self.expects_term():
            return self.quoted("/", index + 1, "m", "/")
        if char == "<" and self.expects_term():
            return self.angle(index)
        if code.startswith("->", index):
            return self.arrow(index + 2)
        for operator in ("=~", "!~", "=>", "::", "**", "&&", "||", "//", "..", "==", "!=", "<=", ">=", "<<", ">>"):
            if code.startswith(operator, index):
                self.tokens.append(_Token("op", operator))
                return index + 2
        self.tokens.append(_Token("op", char))
        return index + 1

    def word(self, word: str, end: int) -> int:
        code = self.code
        if word in ("__END__", "__DATA__"):
            return len(code)
        following = code[end : end + 64].lstrip(" \t")
        previous = self.tokens[-1] if self.tokens else None
        is_key = following.startswith("=>") or (
            previous is not None and previous.value == "{" and following.startswith("}")
        )
        if word in _QUOTE_LIKE and not is_key and not (previous is not None and previous.kind == "method"):
            start = end + len(code[end:]) - len(code[end:].lstrip(" \t\n"))
            if (
                start < len(code)
                and not code[start].isalnum()
                and code[start] not in "_,;=)" + ("#" if start > end else "")
            ):
                return self.quoted(code[start], start + 1, word, code[start])
        if word == "ARGV" or (word == "eof" and following.startswith("()")):
            self.lexed.reads_argv = True
        self.tokens.append(_Token("string" if is_key else "name", word))
        return end

    def variable_ahead(self, index: int) -> bool:
        code = self.code
        char = code[index]
        following = code[index + 1 : index + 2]
        if char == "$":
            return True
        if char in "%&*" and not self.expects_term():
            return False
        return following.isalpha() or following in "_{$:^" or (char == "@" and following in "-+")

    def variable(self, index: int) -> int:
        code = self.code
        sigil = code[index]
        position = index + 1
        if sigil == "&" and code[position : position + 1] in ("$", "{"):
            self.lexed.unreadable = self.lexed.unreadable or "calls code through a reference"
        if sigil == "*" and code[position : position + 1] == "{":
            self.lexed.unreadable = self.lexed.unreadable or "changes the symbol table"
        if sigil == "$" and code.startswith("#", position):
            position += 1
        if code.startswith("^", position):
            letter = code[position + 1 : position + 2]
            if sigil == "$" and letter == "I" and re.match(r"\s*=(?![=~])", code[position + 2 : position + 8]):
                self.lexed.sets_in_place = True
            self.tokens.append(_Token("var", sigil + "^" + letter))
            return position + 2
        name = _NAME.match(code, position)
        if name is not None:
            if sigil == "&":
                self.tokens.append(_Token("name", name.group()))
            else:
                self.tokens.append(_Token("var", sigil + name.group()))
            return name.end()
        if code.startswith("{", position) or code.startswith("$", position):
            self.tokens.append(_Token("op", sigil))  # a dereference: the block or variable follows as code
            return position
        self.tokens.append(_Token("var", sigil + code[position : position + 1]))
        return position + 1

    def arrow(self, index: int) -> int:
        code = self.code
        name = _NAME.match(code, index)
        if name is not None:
            self.tokens.append(_Token("method", name.group()))
            return name.end()
        if code.startswith(("(", "$"), index):
            self.lexed.unreadable = self.lexed.unreadable or "calls code through a reference"
        self.tokens.append(_Token("op", "->"))
        return index

    def angle(self, index: int) -> int:
        code = self.code
        heredoc = _HEREDOC.match(code, index)
        if heredoc is not None:
            terminator = heredoc.group(2) if heredoc.group(2) is not None else heredoc.group(3) or heredoc.group(4)
            self.heredocs.append((terminator or "", heredoc.group(3) is None, bool(heredoc.group(1))))
            self.tokens.append(_Token("istring" if heredoc.group(3) is None else "string", ""))
            return heredoc.end()
        if code.startswith("<<>>", index):
            self.tokens.append(_Token("op", "<<>>"))  # the double diamond opens with three arguments: safe
            return index + 4
        readline = _READLINE.match(code, index)
        if readline is None:
            self.tokens.append(_Token("op", "<"))
            return index + 1
        if readline.group(1) in ("", "ARGV"):
            self.lexed.reads_argv = True
        self.tokens.append(_Token("var", readline.group()))
        return readline.end()

    def quoted(self, delimiter: str, start: int, operator: str, opening: str) -> int:
        """A quote-like construct from just after its opening delimiter: its parts, then its modifiers."""
        parts_wanted = 2 if operator in ("s", "tr", "y") else 1
        parts: list[str] = []
        index = start
        closing = _PAIRS.get(opening, opening)
        for part in range(parts_wanted):
            text, index = _delimited(self.code, index, opening, closing)
            parts.append(text)
            if part + 1 < parts_wanted and opening in _PAIRS:
                index += len(self.code[index:]) - len(self.code[index:].lstrip())
                if index < len(self.code):
                    opening = self.code[index]
                    closing = _PAIRS.get(opening, opening)
                    index += 1
        modifiers = re.match(r"[a-zA-Z]*", self.code[index:])
        flags = modifiers.group() if operator in ("m", "qr", "s", "tr", "y") and modifiers else ""
        index += len(flags)
        self.quoted_token(operator, parts, flags, delimiter)
        return index

    def quoted_token(self, operator: str, parts: list[str], flags: str, delimiter: str) -> None:
        text = parts[0]
        interpolates = delimiter != "'" and operator in ("qq", "qx", "m", "qr", "s")
        if interpolates:
            for part in parts[:1] if operator != "s" else parts[:2] if "e" not in flags else parts[:1]:
                self.interpolated_code(part)
        if operator in ("m", "qr", "s") and ("(?{" in text or "(??{" in text):
            self.lexed.unreadable = self.lexed.unreadable or "runs code inside a regular expression"
        if operator == "s" and "e" in flags:
            if flags.count("e") > 1:
                self.lexed.unreadable = self.lexed.unreadable or "evaluates a substitution's result as code (s///ee)"
            self.merge(lex_perl(parts[1], self.depth + 1))
        if operator == "qx":
            self.lexed.commands.append(text)
            if interpolates and _INTERPOLATES.search(text):
                self.lexed.dynamic_commands = True
            self.tokens.append(_Token("command", text))
            return
        if operator in ("m", "qr", "s", "tr", "y"):
            self.tokens.append(_Token("regex", text))
            return
        literal = not interpolates or not _INTERPOLATES.search(text)
        self.tokens.append(_Token("string" if literal else "istring", _unescaped(text, delimiter)))

    def interpolated_code(self, text: str) -> None:
        """`@{[ code ]}` and `${\\ code }` inside an interpolating string run code."""
        for match in _INTERPOLATED_CODE.finditer(text):
            inner, _end = _delimited(text, match.end(), "{", "}")
            self.merge(lex_perl(inner, self.depth + 1))

    def merge(self, inner: Lexed) -> None:
        lexed = self.lexed
        lexed.calls += inner.calls
        lexed.subs += inner.subs
        lexed.modules += inner.modules
        lexed.commands += inner.commands
        lexed.dynamic_commands = lexed.dynamic_commands or inner.dynamic_commands
        lexed.unreadable = lexed.unreadable or inner.unreadable
        lexed.reads_argv = lexed.reads_argv or inner.reads_argv
        lexed.sets_in_place = lexed.sets_in_place or inner.sets_in_place

    def heredoc_bodies(self, index: int) -> int:
        """At the start of a line after here-document operators: their bodies, one after another."""
        code = self.code
        for terminator, interpolating, indented in self.heredocs:
            body_start = index
            while index < len(code):
                end = code.find("\n", index)
                end = len(code) if end < 0 else end
                line = code[index:end]
                if (line.strip() if indented else line) == terminator:
                    if interpolating:
                        self.interpolated_code(code[body_start:index])
                    index = end + 1
                    break
                index = end + 1
        self.heredocs = []
        return index


def _delimited(code: str, index: int, opening: str, closing: str) -> tuple[str, int]:
    """The text up to the closing delimiter (brackets nest; a backslash escapes) and the index after it."""
    depth = 1
    start = index
    while index < len(code):
        char = code[index]
        if char == "\\":
            index += 2
            continue
        if char == closing and opening != closing:
            depth -= 1
            if depth == 0:
                return code[start:index], index + 1
        elif char == opening:
            if opening == closing:
                return code[start:index], index + 1
            depth += 1
        index += 1
    return code[start:], len(code)


def _unescaped(text: str, delimiter: str) -> str:
    return text.replace("\\" + delimiter, delimiter).replace("\\\\", "\\") if "\\" in text else text


def _calls(tokens: list[_Token], lexed: Lexed) -> None:
    """The names the code calls (with their first arguments), the subs it defines and the modules it loads."""
    skip_next = False
    for index, token in enumerate(tokens):
        previous = tokens[index - 1] if index else None
        if skip_next:
            skip_next = False
            continue
        if token.kind not in ("name", "method"):
            continue
        name = token.value
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        if name in ("sub", "package", "format") and following is not None and following.kind == "name":
            if name == "sub":
                lexed.subs.append(following.value)
            skip_next = name != "format"
            if name == "format":
                lexed.calls.append(("format", []))
            continue
        if name in ("use", "no", "require") and following is not None and following.kind == "name":
            lexed.modules.append(following.value)
            skip_next = True
            continue
        if name in ("next", "last", "redo", "goto") and following is not None and following.kind == "name":
            skip_next = True
        if (
            following is not None
            and following.kind == "op"
            and following.value == ":"
            and (previous is None or (previous.kind == "op" and previous.value in (";", "{", "}")))
        ):
            continue  # a label
        if name.isupper() and token.kind == "name" and not name.startswith("CORE"):
            continue  # a file handle or a constant
        lexed.calls.append((name, _arguments(tokens, index + 1)))


def _arguments(tokens: list[_Token], index: int) -> list[str]:
    """The first arguments of a call starting at tokens[index] (see _argument; "{" for a block)."""
    if index >= len(tokens):
        return []
    parenthesized = tokens[index].kind == "op" and tokens[index].value == "("
    position = index + 1 if parenthesized else index
    arguments: list[str] = []
    current: list[_Token] = []
    depth = 0
    while position < len(tokens) and len(arguments) < 4:
        token = tokens[position]
        if token.kind == "op" and token.value in ("(", "[", "{"):
            if not current and token.value == "{" and depth == 0:
                arguments.append("{")
                break
            depth += 1
        elif token.kind == "op" and token.value in (")", "]", "}"):
            if depth == 0:
                break
            depth -= 1
        elif depth == 0 and token.kind == "op" and token.value in (",", "=>"):
            arguments.append(_argument(current))
            current = []
            position += 1
            continue
        elif (
            depth == 0
            and not parenthesized
            and (
                (token.kind == "op" and token.value in _STATEMENT_ENDS)
                or (token.kind == "name" and token.value in _LOW_PRECEDENCE)
            )
        ):
            break
        current.append(token)
        position += 1
    if current:
        arguments.append(_argument(current))
    return arguments


def _argument(tokens: list[_Token]) -> str:
    """ "'text" for a literal string, '"text' for an interpolating one (its text as written), "?" otherwise."""
    if len(tokens) == 1 and tokens[0].kind in ("string", "istring"):
        return ("'" if tokens[0].kind == "string" else '"') + tokens[0].value
    return "?"
