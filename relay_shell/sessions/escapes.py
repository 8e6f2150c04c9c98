"""Programs that read the keyboard in a language of their own (adr/0026): what a line typed into a session may
run through them, and which of them a session may start.

A line typed into a session is classified as shell text, but the program reading it may be a pager, an editor,
a debugger, a database client or a REPL whose commands run shell commands (`!cmd` in less, more, ftp and ed;
`:!cmd` in vi; `\\! cmd` in psql and mysql; `shell cmd` in gdb; `|` in less) or do what the policy would refuse
in words the shell does not know (`DROP TABLE`, `:call system()`, top's `k`). Two rules, for any terminal, local
or remote, whatever the server knows of what reads it:

- every line is also read as the shell command an escape would run (`escape_readings`), and the few commands
  that start one with no visible text (`!` alone, `:sh`) as starting a shell; a line that opens an editor from a
  pager (`v`) or is an editor's command line (`:…`, but for `:q`, `:w` and the like) is tier 2;
- a program whose typed language the classifier cannot read (`STARTS`) is tier 2 to start in a session, unless
  it is started in a form without its escape (`vim -Z`, `nano -R`, `sqlite3 -safe`, `top -s`) or without reading
  the terminal (a script, `-c`, `-e`, stdin from a file or a pipe). The shells bash and sh and Python's REPL
  stay readable: their lines are classified as shell text and as Python.

On local terminals in readonly and guarded mode the server also disables the escapes it can (sessions/pins.py):
less runs with LESSSECURE=1, editors reached through $EDITOR are restricted.
"""

from __future__ import annotations

import re
from typing import Any

from relay_shell.plan import Subject
from relay_shell.policy.shell_tokens import Command, tokenize
from relay_shell.policy.vocabulary import words
from relay_shell.policy.wrappers import basename, unwrap
from relay_shell.sessions.typed import Finding

EDITOR_FROM_PAGER = "`v` in a pager (less, more) opens the file in an editor, whose commands run programs"
GLOBBED_PROGRAM = "a command word with glob or brace characters: the shell picks the program from the files present"
EDITOR_COMMAND = "an editor's command line (`:…`: vi's `:call system()`, `:terminal`; tmux's `:run-shell`)"

# Where a program's escape to the shell begins a line: `!cmd` (less, more, ftp, gdb, pg), `\! cmd` (psql, mysql),
# `~!cmd` (mail), `:…!cmd` (vi: `:!`, `:r !`, `:'<,'>!`, `:exe "!…"`), `w !cmd` and `r !cmd` (ed).
_LEADING_ESCAPE = re.compile(r"\s*(?:\\|~|:[^!\n]*|[\w,.$;'+\-/]*\s*)!")
_GLOB = re.compile(r"[*?\[]|\{[^}]*[,.][^}]*\}")
_ARRAY_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*\[[^\]]*\]\+?=")
_ESCAPE_WORDS = ("shell ", "system ", ".shell ", ".system ")  # gdb, mysql; sqlite3
_SHELL_START = frozenset({"!", "\\!", "~!", ":sh", ":shell", "shell", ".shell", "!sh"})
# Commands of vi and its relatives that only move, leave or write the file being edited.
_PLAIN_EDITOR_COMMAND = re.compile(r":\s*(?:q|qa|wq|wqa|x|xa|w|q!|qa!|wq!|x!|w!|e!|\d+|noh|nohlsearch)")

_EDITORS = (
    "vi vim vim.basic vim.tiny vim.nox vim.gtk3 gvim nvim view vimdiff ex evim gview editor sensible-editor"
    " select-editor emacs emacs-nox emacsclient jed joe jmacs jstar jpico mcedit micro ne kak hx helix mg zile"
    " vis nano pico ed vipw vigr visudo sudoedit edquota"
)
# Full-screen programs and command languages that always read the terminal.
_TERMINAL_PROGRAMS = (
    "w3m lynx links links2 elinks tmux screen byobu zellij dtach abduco tmate mc ranger nnn vifm lf broot yazi"
    " ncdu top htop btop bpytop glances gotop btm tig lazygit gitui mail mailx mutt neomutt alpine pine gdb lldb"
    " cgdb jdb dlv radare2 r2 ftp sftp lftp tftp smbclient ncftp telnet"
)
_DATABASE_CLIENTS = words(
    "mysql mariadb psql pgcli mycli sqlite3 litecli duckdb mongo mongosh redis-cli valkey-cli cqlsh"
    " clickhouse-client influx sqlplus isql usql"
)
_SQL_OPERAND_CLIENTS = frozenset({"sqlite3", "litecli", "duckdb"})  # `sqlite3 DB 'SQL'` runs SQL and ends
_INTERPRETERS = words(
    "node nodejs deno bun irb pry ruby perl php R julia lua luajit ghci erl iex scala groovysh jshell kotlinc"
    " clojure clj racket guile sbcl clisp ocaml utop swipl gp maxima octave gnuplot tclsh wish expect ipython"
    " ipython3 bpython ptpython"
)
# Shells that read lines by other rules: history expansion inside single quotes (csh), code in glob qualifiers
# (zsh), `(…)` as command substitution (fish).
_OTHER_SHELLS = frozenset({"zsh", "csh", "tcsh", "fish"})
STARTS: dict[str, str] = {
    **dict.fromkeys(_EDITORS.split(), "an editor, whose commands run programs (`:!`, `:call system()`)"),
    **dict.fromkeys(
        _TERMINAL_PROGRAMS.split(),
        "reads the keyboard in a language of its own that runs programs, deletes files or signals processes",
    ),
    **dict.fromkeys(_DATABASE_CLIENTS, "a database client: its typed commands (SQL, `\\!`) are not shell text"),
    **dict.fromkeys(_INTERPRETERS, "a REPL or an interpreter reading its program from the terminal"),
    **dict.fromkeys(_OTHER_SHELLS, "a shell whose lines do not read as sh reads them"),
}
# Forms without the escape: restricted editors, sqlite3's safe mode, top's secure and batch modes, ncdu -rr.
_SAFE_OPTIONS = {
    **{name: {"-Z"} for name in ("vi", "vim", "vim.basic", "vim.tiny", "vim.nox", "view", "vimdiff", "ex", "nvim")},
    "nano": {"-R", "--restricted"},
    "pico": {"-R", "--restricted"},
    "ed": {"-r", "--restricted"},
    "sqlite3": {"-safe", "--safe"},
    "top": {"-s", "-b", "--batch"},
    "ncdu": {"-rr"},
}
# The options that give a database client its commands, so that it runs them and ends.
_CLIENT_COMMANDS = {
    **dict.fromkeys(("psql", "pgcli"), ("-c", "--command", "-f", "--file", "-l", "--list")),
    **dict.fromkeys(("mysql", "mariadb", "mycli"), ("-e", "--execute")),
    **dict.fromkeys(("mongo", "mongosh"), ("--eval",)),
    "cqlsh": ("-e", "--execute", "-f", "--file"),
    "clickhouse-client": ("-q", "--query", "--queries-file"),
    "influx": ("-execute",),
    "usql": ("-c", "--command", "-f", "--file"),
}
_CODE_OPTIONS = ("-e", "-E", "-c", "--eval", "-eval", "-p", "--print")


def commands_of(text: str, nested: list[str]) -> list[Command]:
    """The simple commands of shell text, `$(…)` contents to `nested`. The classifier's tokenizer hands them over
    as a list, or (as its reworked version does) in a `Tokens` with `.commands`: either is read."""
    tokens: Any = tokenize(text, nested)
    return list(getattr(tokens, "commands", tokens))


def escape_readings(line: str) -> list[str]:
    """The shell commands an escape in `line` would run, if a program with one reads it."""
    stripped = line.strip()
    found: list[str] = []
    if stripped in _SHELL_START:
        found.append("sh")  # starts an interactive shell: what it reads next is typed, and classified
    for prefix in _ESCAPE_WORDS:
        if stripped.startswith(prefix):
            found.append(stripped[len(prefix) :])
    if stripped.startswith("|") and len(stripped) > 2:
        found.append(stripped[2:])  # less: `|` and a mark pipe the text to a command
    escape = _LEADING_ESCAPE.match(line)
    if escape is not None:
        after = line[escape.end() :]
        # `!cmd` runs cmd, `!!cmd` too (vi filters the line through it); vi's `!{motion}cmd` filters through cmd
        # (`!Gsort`, `!apsort`, `!3jsort`): every start just after a short motion is read.
        moved = after.lstrip("!").lstrip("0123456789")
        found += [after, after.lstrip("!"), moved[1:], moved[2:], moved[3:]]
    return [reading for reading in dict.fromkeys(found) if reading.strip()]


def line_findings(line: str) -> list[Finding]:
    """What a typed line may do in the program that reads it, beyond its shell readings."""
    stripped = line.strip()
    if stripped == "v":
        return [(line, 2, EDITOR_FROM_PAGER)]
    if stripped.startswith(":") and not _PLAIN_EDITOR_COMMAND.fullmatch(stripped):
        return [(line, 2, EDITOR_COMMAND)]
    return []


def start_findings(text: str, depth: int = 0) -> list[Finding]:
    """Programs in shell `text` that would read the terminal in a language of their own (STARTS)."""
    nested: list[str] = []
    return commands_start_findings(commands_of(text, nested), nested, depth)


def commands_start_findings(commands: list[Command], nested: list[str], depth: int = 0) -> list[Finding]:
    """start_findings of a text already split into its commands (and the `$(…)` it holds, read too)."""
    findings = [finding for command in commands for finding in command_start_findings(command)]
    if depth < 4:
        for inner in nested[:8]:
            findings += start_findings(inner, depth + 1)
    return findings


def command_start_findings(command: Command) -> list[Finding]:
    words = unwrap(command.words, command.dynamic).words
    if not words:
        return []
    if words[0] not in ("[", "[[") and _GLOB.search(words[0]) and not _ARRAY_ASSIGNMENT.match(words[0]):
        # `/usr/bin/r[m] -rf DIR`: the shell picks the program from the files present, unseen by the policy.
        return [(" ".join(words)[:200], 2, GLOBBED_PROGRAM)]
    if basename(words[0]) == "busybox" and len(words) > 1:
        words = words[1:]  # `busybox vi F`: the applet named next
    program = basename(words[0])
    reason = STARTS.get(program)
    if reason is None or not _reads_terminal(program, words[1:], command):
        return []
    safe = _SAFE_OPTIONS.get(program, set())
    if any(word in safe for word in words[1:]) or (program == "ncdu" and words.count("-r") >= 2):
        return []
    return [(" ".join(words)[:200], 2, f"{program} in a terminal: {reason}")]


def _reads_terminal(program: str, arguments: list[str], command: Command) -> bool:
    """Whether the program reads its commands from the terminal. Editors and full-screen programs do whatever
    their stdin is (`echo | vim -` reads the text from the pipe and the keys from the terminal); clients,
    interpreters and shells do when their stdin is neither a file nor a pipe and no command or script is given."""
    if program not in _DATABASE_CLIENTS and program not in _INTERPRETERS and program not in _OTHER_SHELLS:
        return True
    if command.piped_into or command.heredoc is not None or any(op.startswith("<") for op, _ in command.redirects):
        return False
    operands = [word for word in arguments if not word.startswith("-")]
    if program in _DATABASE_CLIENTS:
        given = any(_is_option(word, option) for option in _CLIENT_COMMANDS.get(program, ()) for word in arguments)
        return not given and not (program in _SQL_OPERAND_CLIENTS and len(operands) >= 2)
    # An interpreter or a shell: interactive on request, its debugger, or with no script and no code given.
    if "-i" in arguments or "--interactive" in arguments or (program == "php" and "-a" in arguments):
        return True
    if program == "perl" and any(word.startswith("-d") for word in arguments):
        return True  # the debugger reads its commands from the terminal
    code = any(word in _CODE_OPTIONS or (program == "php" and word == "-r") for word in arguments)
    return not operands and not code


def _is_option(word: str, option: str) -> bool:
    """`word` is `option`, with its value attached (`--command=…`, `-cSELECT`) or not."""
    return word == option or word.startswith(option + "=") or (len(option) == 2 and word.startswith(option))


def spawn_findings(subject: Subject) -> list[Finding]:
    """What shell_spawn (or a remote terminal's command) starts, by the same rule as a typed line."""
    if subject.command is not None:
        return start_findings(subject.command)
    if subject.argv:
        return command_start_findings(Command(words=list(subject.argv), dynamic=[False] * len(subject.argv)))
    return []
