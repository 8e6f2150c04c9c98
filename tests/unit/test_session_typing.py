"""What the policy reads of input typed into a session (adr/0005, adr/0026), in process: the keystroke model
(sessions/typed.py), history expansion (history.py), program escapes (escapes.py), what an interactive shell
keeps (interactive.py), and the whole reading with the classifier (reading.py). The same inputs run for real,
against real shells and programs, in tests/e2e/sessions/test_pty_reading.py and the PTY dialogues of the
adversarial corpus."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from relay_shell.policy.classify import classify
from relay_shell.sessions import open_input
from relay_shell.sessions.escapes import escape_readings, start_findings
from relay_shell.sessions.history import HISTORY, expansion_points, expansions
from relay_shell.sessions.interactive import interactive_findings
from relay_shell.sessions.reader import reads_commands
from relay_shell.sessions.reading import remember, typed_subject
from relay_shell.sessions.typed import AFTER_ESCAPE, COMPLETED, EDITED, RUNS_AT_ONCE, Typed, Typing, read_keystrokes
from relay_shell.settings.sessions import DEFAULT_PASSPROMPT


def keystrokes(data: str, enter: bool = True, keys: tuple[str, ...] = (), typing: Typing | None = None) -> Typed:
    return read_keystrokes(typing or Typing(), data, enter, list(keys), interrupt_clears=False)


def reasons(typed: Typed) -> set[str]:
    return {reason for _, _, reason in typed.findings}


# -- keystrokes --------------------------------------------------------------------------------------------------


def test_input_split_across_calls_is_joined() -> None:
    first = keystrokes("rm -r", enter=False)
    assert (first.texts, first.typing.pieces, first.findings) == (["rm -r"], ["rm -r"], [])
    second = keystrokes("f /tmp/x", typing=first.typing)
    assert (second.texts, second.submitted, second.typing, second.findings) == (
        ["rm -rf /tmp/x"],
        ["rm -rf /tmp/x"],
        Typing(),
        [],
    )


@pytest.mark.parametrize(
    "data",
    ["rm -rf /x\x04", "rm -rf /x\x07", "rm -rf /x #\x16\x15", "rm -rf /x #\x16\x03", "rm -rf /x\x1b[D"],
)
def test_control_characters_never_hide_typed_text_from_the_policy(data: str) -> None:
    # Whether Ctrl-D, Ctrl-G or a quoted Ctrl-U discards the line depends on the program: classify it anyway.
    typed = keystrokes(data, enter=False)
    assert any(text.startswith("rm -rf /x") for text in typed.texts)
    assert "".join(typed.typing.pieces).startswith("rm -rf /x")


def test_a_line_edited_with_keys_is_read_every_way_and_flagged() -> None:
    typed = keystrokes("rm -r\x04f /x")
    assert {"rm -rf /x", "f /x"} <= set(typed.texts) and EDITED in reasons(typed)
    # Ctrl-C may or may not have discarded `echo hi` (a terminal without ISIG): both readings are classified,
    # and as Ctrl-C adds nothing unseen the line is not "edited".
    after = keystrokes("rm -rf /x", typing=keystrokes("echo hi", enter=False, keys=("ctrl-c",)).typing)
    assert {"echo hirm -rf /x", "rm -rf /x"} <= set(after.texts) and EDITED not in reasons(after)
    # Ctrl-C after a finished line edits nothing.
    assert keystrokes("ls", keys=("ctrl-c",)).typing == Typing() and not keystrokes("ls", keys=("ctrl-c",)).findings


def test_ctrl_c_on_a_terminal_with_isig_starts_a_fresh_line() -> None:
    recalled = keystrokes("", enter=False, keys=("up",)).typing
    assert recalled.edited
    cleared = read_keystrokes(recalled, "", False, ["ctrl-c"], interrupt_clears=True)
    assert cleared.typing == Typing()
    kept = read_keystrokes(recalled, "", False, ["ctrl-c"], interrupt_clears=False)
    assert kept.typing.edited  # a remote terminal: Ctrl-C may not have discarded the recalled line


@pytest.mark.parametrize("key", ["up", "ctrl-p", "pagedown", "ctrl-r", "ctrl-y", "f5", "insert"])
def test_a_history_key_on_an_empty_line_makes_the_next_enter_unreadable(key: str) -> None:
    # Up then Enter runs a line from the shell's history (its history file, lines typed elsewhere).
    pressed = keystrokes("", enter=False, keys=(key,))
    assert pressed.findings == [] and pressed.typing.edited
    entered = keystrokes("", typing=pressed.typing)
    assert EDITED in reasons(entered)


@pytest.mark.parametrize("key", ["left", "right", "home", "end", "backspace", "delete", "ctrl-d", "ctrl-l"])
def test_keys_that_change_nothing_on_an_empty_line_leave_it_fresh(key: str) -> None:
    assert keystrokes("ls", typing=keystrokes("", enter=False, keys=(key,)).typing).findings == []


@pytest.mark.parametrize(
    ("data", "keys"),
    [
        ("shre\t -u F", ()),
        ("shre", ("tab",)),
        ("rm -rf /tm\t", ()),
        ("ls", ("backtab",)),
        ("\t", ()),
        ("ls", ("ctrl-i",)),
    ],
)
def test_tab_is_refused_when_pressed(data: str, keys: tuple[str, ...]) -> None:
    typed = keystrokes(data, enter=False, keys=keys)
    assert COMPLETED in reasons(typed)


@pytest.mark.parametrize(
    ("data", "keys", "reason"),
    [
        ("echo x", ("ctrl-x", "ctrl-e"), RUNS_AT_ONCE),  # edit-and-execute-command: runs without Enter
        ("\x1bk0dw", (), AFTER_ESCAPE),  # vi mode: recall, then delete a word
        ("", ("esc", "ctrl-v"), None),  # Escape then a key: nothing typed yet
        ("\x1b.", (), AFTER_ESCAPE),  # ESC . yanks the last argument of the previous line
        ("\x1bv", (), AFTER_ESCAPE),  # vi's v: edit the line in $EDITOR, then run it
        ("echo x\x1b#", (), AFTER_ESCAPE),  # M-#: comment out and accept
    ],
)
def test_keys_that_act_at_once_are_refused_when_pressed(data: str, keys: tuple[str, ...], reason: str | None) -> None:
    typed = keystrokes(data, enter=False, keys=keys)
    assert reason is None or reason in reasons(typed)
    if reason is None:
        assert typed.typing.escaped and typed.typing.edited


def test_ctrl_o_submits_the_line_and_the_next_one_is_from_the_history() -> None:
    typed = keystrokes("echo one", enter=False, keys=("ctrl-o",))
    assert typed.submitted == ["echo one"] and typed.typing.edited


def test_an_arrow_sent_as_raw_bytes_is_the_arrow_key() -> None:
    typed = keystrokes("\x1b[A", enter=False)
    assert typed.typing.edited and not typed.typing.escaped and AFTER_ESCAPE not in reasons(typed)


# -- history expansion ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    ["!!", "!!:1*", "!$", "!-2", "^old^new", "!prefix", "sudo !!", 'echo "!x"', "!?rm?", "!#:0", "x=!$", "echo !(x)"],
)
def test_history_expansion_is_found(line: str) -> None:
    assert expansion_points(line)


@pytest.mark.parametrize(
    "line",
    ["echo 'a!b'", "kill $!", "ls [!a]*", "echo ${!name}", 'echo "done!"', "echo hi!", "[ ! -f x ]", "a\\!b", "x != y"],
)
def test_what_bash_does_not_expand_is_not_found(line: str) -> None:
    assert expansion_points(line) == []


@pytest.mark.parametrize(
    ("line", "made"),
    [
        ("!!:1*", "rm -rf /srv/data"),
        ("!$", "/srv/data"),
        ("!-1", "echo rm -rf /srv/data"),
        ("!echo:s/echo //", "rm -rf /srv/data"),
        ("^echo ^", "rm -rf /srv/data"),
        ("!!:2-3", "-rf /srv/data"),
        ("sudo !!:1", "sudo rm"),
        ("!?srv?:gs/echo //", "rm -rf /srv/data"),
    ],
)
def test_history_expansion_is_read_against_the_sessions_lines(line: str, made: str) -> None:
    history = ["echo rm -rf /srv/data", "ls"]
    assert made in expansions(line, expansion_points(line), history)


# -- escapes and what a program reads --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "reading"),
    [
        ("!rm -rf /x", "rm -rf /x"),
        (":!rm -rf /x", "rm -rf /x"),
        (":r !rm -rf /x", "rm -rf /x"),
        (":'<,'>!rm -rf /x", "rm -rf /x"),
        ("\\! rm -rf /x", "rm -rf /x"),
        ("~!rm -rf /x", "rm -rf /x"),
        ("!Grm -rf /x", "rm -rf /x"),
        ("!!rm -rf /x", "rm -rf /x"),
        ("!3jrm -rf /x", "rm -rf /x"),
        ("|.rm -rf /x", "rm -rf /x"),
        ("shell rm -rf /x", "rm -rf /x"),
        (".system rm -rf /x", "rm -rf /x"),
        ("w !rm -rf /x", "rm -rf /x"),
        ("!", "sh"),
        (":sh", "sh"),
    ],
)
def test_an_escape_is_read_as_the_command_it_runs(line: str, reading: str) -> None:
    assert reading in [text.strip() for text in escape_readings(line)]


@pytest.mark.parametrize(
    "line",
    [
        "vim F",
        "vi",
        "nano F",
        "psql",
        "mysql -u root",
        "sqlite3 x.db",
        "node",
        "perl",
        "gdb ./a.out",
        "top",
        "tmux",
        "sudo vim F",
        "zsh",
        "python3 -m pdb x.py; vim",
        "echo $(vim F)",
        "perl -d x.pl",
        "ncdu -r /",
        "true | vim F",
        "busybox vi F",
    ],
)
def test_a_program_with_an_unreadable_language_is_tier_2_to_start(line: str) -> None:
    assert [tier for _, tier, _ in start_findings(line)] and all(tier == 2 for _, tier, _ in start_findings(line))


@pytest.mark.parametrize(
    "line",
    [
        "vim -Z F",
        "rvim F",
        "nano -R F",
        "psql -c 'select 1'",
        "mysql -e 'select 1'",
        "sqlite3 x.db 'select 1'",
        "sqlite3 -safe x.db",
        "node x.js",
        "perl -e 1",
        "top -b -n 1",
        "top -s",
        "ncdu -rr /",
        "psql < q.sql",
        "echo x | node",
        "bash",
        "python3",
        "less F",
        "ls",
    ],
)
def test_a_program_without_its_escape_or_not_reading_the_terminal_is_left_to_the_policy(line: str) -> None:
    assert start_findings(line) == []


# -- what an interactive shell keeps ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "PROMPT_COMMAND='touch M'",
        "export PROMPT_COMMAND='touch M'",
        "declare -x PS0='$(touch M)'",
        "eval 'PROMPT_'\"COMMAND=x\"",
        "printf -v PROMPT_COMMAND %s x",
        "read PROMPT_COMMAND",
        "unset LESSSECURE",
        "export -n LESSSECURE",
        "env -u LESSSECURE less F",
        "LESSSECURE= less F",
        "histchars='%^#'",
        "declare -n ref=PROMPT_COMMAND",
        'printf -v "$name" x',
        "export {PROMPT_COMMAND,X}=1",
        ": ${PROMPT_COMMAND:=touch M}",
        "PROMPT_COMMAND+=('touch M')",
        'bind \'"\\C-t": "rm -rf /x\\n"\'',
        "shopt -s extglob",
        "set -k",
        "hash -p /tmp/x ls",
        "r echo=rm",
        "exec < /root/.bash_history",
        "stty intr a",
        "stty -isig",
        "mapfile -C 'touch M' -c 1 lines",
        "PS1='Password: '",
        "INPUTRC=/tmp/macros",
        "PATH=/tmp/x:$PATH",
    ],
)
def test_what_the_shell_keeps_for_later_lines_is_tier_2(line: str) -> None:
    assert any(tier == 2 for _, tier, _ in interactive_findings(line, DEFAULT_PASSPROMPT)), line


@pytest.mark.parametrize(
    "line",
    [
        "PS1='READY> '",
        "export PAGER=less",
        "GIT_PAGER=cat git log",
        "read -p 'Name? ' name",
        "set -o vi",
        "set +o emacs; stty -echo",
        "stty rows 40 cols 120",
        "for f in *.txt; do wc -l $f; done",
        "alias ll='ls -l'",
        "echo $PATH",
        "local -x FOO=bar",
        "export -p",
    ],
)
def test_settings_that_change_nothing_dangerous_are_not_flagged(line: str) -> None:
    assert interactive_findings(line, DEFAULT_PASSPROMPT) == [], line


def test_an_alias_is_classified_as_the_text_it_stands_for() -> None:
    findings = interactive_findings("alias ls='rm -rf /srv'", DEFAULT_PASSPROMPT)
    assert [tier for _, tier, _ in findings] == [3]


# -- who reads the line ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "reading"),
    [
        (["bash", "--noprofile", "--norc", "+H"], True),
        (["-bash"], True),
        (["sh"], True),
        (["bash", "-i", "-c", "x"], True),
        (["bash", "-s", "arg"], True),
        (["sh", "/dev/stdin"], True),
        (["bash", "-eo", "pipefail"], True),
        (["busybox", "sh"], True),
        (["bash", "script.sh"], False),
        (["sh", "-c", "read -s pw"], False),
        (["bash", "-ec", "x"], False),
        (["bash", "--rcfile", "x", "script"], False),
    ],
)
def test_a_shell_reads_its_commands_without_c_or_a_script(argv: list[str], reading: bool) -> None:
    assert reads_commands(argv) is reading


# -- the whole reading, with the classifier ---------------------------------------------------------------------


class _Terminal:
    def interrupt_clears_line(self) -> bool:
        return True

    def directories(self) -> tuple[str, ...]:
        return ()  # no program: no working directory to read relative words in

    def line_settings(self) -> None:
        return None  # not a real terminal: read with the defaults (a remote one's are not visible either)


def _session(history: list[str]) -> Any:
    return SimpleNamespace(
        typing=Typing(), history=history, open_input="", passprompt=DEFAULT_PASSPROMPT, terminal=_Terminal()
    )


@pytest.mark.parametrize(
    ("history", "data", "tier"),
    [
        (["echo rm -rf /srv/data"], "!!:1*", 3),  # open mode asks for confirmation
        (["echo rm -rf /srv/data"], "^echo ^", 3),
        ([], "!!", 2),
        ([], "shre\t -u F", 2),
        ([], ":!rm -rf /srv/data", 3),
        ([], "ls -la", 0),
        ([], "echo 'a!b'", 0),
    ],
)
def test_typed_input_is_classified_as_what_runs(history: list[str], data: str, tier: int) -> None:
    subject, _ = typed_subject(_session(history), data, True, [])
    assert classify(subject).tier == tier, classify(subject)


def test_the_lines_submitted_become_the_sessions_history() -> None:
    session = _session([])
    _, typed = typed_subject(session, "echo rm -rf /srv/data", True, [])
    remember(session, typed)
    subject, _ = typed_subject(session, "!!:1*", True, [])
    assert "rm -rf /srv/data" in subject.typed.split("\n")
    assert HISTORY in {reason for _, _, reason in subject.session_findings}


def test_input_left_open_is_followed_as_a_fresh_tokenizing_of_the_submitted_lines_says() -> None:
    """remember() takes whether the submitted input is still open from the classification's own tokenizing of the
    same text (no third tokenizer pass per step): the open input it keeps is exactly what tokenizing the lines anew
    gives, across dialogues that open and close quotes, substitutions, here-documents and triple-quoted strings."""
    dialogues = [
        ["echo 'a", "echo x'; rm -rf D; echo 'y", "ls"],
        ['echo "$(', "date", ')"', "pwd"],
        ["cat <<EOF", "text", "EOF", "true"],
        ["s = '''", "rm -rf /", "'''", "7*7"],
        ["echo `", "id`", "echo ${", "x}"],
        ["a=1", "echo 'one\\", "two'", "(", ")"],
        ["printf '%s\\n' \"a", "b\" 'c", "d'"],
    ]
    kept = closed = 0
    for lines in dialogues:
        session = _session([])
        for line in lines:
            expected_joined = "\n".join([session.open_input, line] if session.open_input else [line])
            fresh = open_input.still_open(expected_joined)
            was_open = bool(session.open_input)
            _, typed = typed_subject(session, line, True, [])
            remember(session, typed)
            assert session.open_input == (expected_joined if fresh else ""), (lines, line)
            kept += fresh
            closed += was_open and not fresh
    assert kept >= 8 and closed >= 5  # both ways are exercised
