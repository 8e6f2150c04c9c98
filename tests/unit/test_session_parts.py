"""The pieces of a session that need no process: output ring, keys, escape stripping, expect (typed input:
test_session_typing.py)."""

from __future__ import annotations

import time

import pytest

from relay_shell.errors import ArgumentError
from relay_shell.sessions import expect
from relay_shell.sessions.ansi import strip_ansi
from relay_shell.sessions.expect import compile_until, echo_skip, expected_echo, find, search, window_text
from relay_shell.sessions.keys import KEYS, key_name
from relay_shell.sessions.ring import OutputRing

# -- ring --------------------------------------------------------------------------------------------------


def test_ring_reads_from_cursor_and_tracks_offsets() -> None:
    ring = OutputRing(16)
    ring.append(b"hello ")
    ring.append(b"world")
    read = ring.read(0)
    assert (read.data, read.start, read.end, read.dropped) == (b"hello world", 0, 11, 0)
    assert ring.read(6).data == b"world"
    assert ring.read(11).data == b""


def test_ring_wraps_and_reports_dropped_bytes() -> None:
    ring = OutputRing(8)
    ring.append(b"0123456789")  # longer than the ring: only the last 8 survive
    ring.append(b"abc")
    assert ring.end == 13
    assert ring.start == 5
    read = ring.read(0)
    assert read.data == b"56789abc"
    assert (read.start, read.dropped) == (5, 5)
    assert ring.read(7).data == b"789abc"


def test_ring_matches_a_reference_over_many_appends() -> None:
    ring = OutputRing(1000)
    reference = bytearray()
    for index in range(2000):
        chunk = bytes([index % 251]) * (index % 37 + 1)
        ring.append(chunk)
        reference += chunk
    assert ring.end == len(reference)
    assert ring.read(0).data == bytes(reference[-1000:])
    assert ring.read(len(reference) - 10, 4).data == bytes(reference[-10:-6])


def test_ring_clamps_a_cursor_beyond_the_end() -> None:
    ring = OutputRing(8)
    ring.append(b"abc")
    assert ring.read(99).data == b""
    assert ring.read(-5).data == b"abc"


# -- keys --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spelling", "name"),
    [("ctrl-c", "ctrl-c"), ("C-c", "ctrl-c"), ("^C", "ctrl-c"), ("Ctrl+C", "ctrl-c"), ("ENTER", "enter")],
)
def test_key_spellings(spelling: str, name: str) -> None:
    assert key_name(spelling) == name


def test_key_codes() -> None:
    assert KEYS["ctrl-c"] == b"\x03"
    assert KEYS["ctrl-d"] == b"\x04"
    assert KEYS["up"] == b"\x1b[A"
    assert KEYS[key_name("escape")] == b"\x1b"


def test_unknown_key_is_a_clear_error() -> None:
    with pytest.raises(ArgumentError, match=r"keys: unknown key 'hyper-x'; allowed: enter, tab"):
        key_name("hyper-x")


# -- escape stripping --------------------------------------------------------------------------------------


def test_strip_ansi_removes_csi_osc_and_charset_sequences() -> None:
    raw = b"\x1b]0;title\x07\x1b[1;32mgreen\x1b[0m \x1b(Bplain\x1b[?2004h\r\nnext\x1b=\x07"
    assert strip_ansi(raw) == b"green plain\nnext"


def test_strip_ansi_is_linear_on_adversarial_input() -> None:
    hostile = (b"\x1b[" + b"1;" * 50) * 20000  # unterminated CSI sequences, 1 MB
    started = time.process_time()
    strip_ansi(hostile)
    assert time.process_time() - started < 2.0


# -- expect ------------------------------------------------------------------------------------------------


def test_compile_until_accepts_a_string_or_a_list() -> None:
    assert len(compile_until(">>> ")) == 1
    assert len(compile_until(["a", "b"])) == 2
    assert compile_until(None) == []


@pytest.mark.parametrize(
    ("until", "message"),
    [
        ("(unclosed", r"until: '\(unclosed' is not a valid regex"),
        (["ok", "[z-a]"], r"until\[1\]: '\[z-a\]' is not a valid regex"),
        ([], "until: is an empty list"),
        ("", "until: is empty"),
        (["x"] * 17, "at most 16"),
        ("a" * 2000, "at most 1024"),
    ],
)
def test_bad_until_is_a_clear_error(until: str | list[str], message: str) -> None:
    with pytest.raises(ArgumentError, match=message):
        compile_until(until)
    with pytest.raises(ArgumentError, match=message):  # a refused `until` is never kept: refused again
        compile_until(until)


def test_a_small_until_is_kept_compiled_and_a_large_one_is_not() -> None:
    """Every step of a dialogue sends the same prompt pattern: it is checked and compiled once. One that compiles
    to many steps is not kept (the memory is bounded whatever the calls send), and is checked again each time."""
    expect._CHECKED.clear()
    first = compile_until(["^>>> ", r"\$ $"])
    again = compile_until(["^>>> ", r"\$ $"])
    assert again == first and again is not first  # the caller's own list, the same compiled patterns
    assert ("^>>> ", r"\$ $") in expect._CHECKED
    large = r"\d{2000}"
    assert len(compile_until(large)) == 1
    assert large not in expect._CHECKED
    for index in range(expect.CHECKED_MAX_ENTRIES + 10):
        compile_until(f"prompt {index}> ")
    assert len(expect._CHECKED) <= expect.CHECKED_MAX_ENTRIES


def test_search_finds_the_earliest_match_and_its_pattern() -> None:
    patterns = compile_until(["^>>> ", "Error"])
    text = window_text(b"1+\r\nError: x\r\n>>> ")
    found = search(patterns, text, 0)
    assert found is not None
    assert (found.index, found.text) == (1, "Error")


def test_search_matches_through_colour_codes_and_per_line_anchors() -> None:
    patterns = compile_until(r"^\$ $")
    assert search(patterns, window_text(b"out\r\n\x1b[01;32m$\x1b[0m "), 0) is not None


def test_echo_is_skipped_and_a_partial_echo_waits() -> None:
    echo = expected_echo("print('>>> ')\r")
    assert echo == "print('>>> ')\n"
    assert echo_skip("print('>", echo) is None  # only part of the echo so far
    assert echo_skip("print('>>> ')\n>>> \n", echo) == len(echo)
    assert echo_skip("something else", echo) == 0
    assert expected_echo("\x03") is None


def test_the_matcher_keeps_the_line_end_of_the_echo_and_skips_its_characters() -> None:
    """Python's answer to a typed `print(6*7)` (tests/e2e/sessions/test_until_anchor.py types it for real)."""
    window = b"print(6*7)\r\n42\r\n>>> "
    echo = expected_echo("print(6*7)\r")
    echo_only = [r"6\*7", r"^print\(", r"\)$"]  # found in the echo, never in the answer
    answers = [r"\n42\r?\n", r"^42$", "42", r"42\r\n", r"\r\n42\r\n"]
    matched = {until: find(compile_until(until), window, echo) for until in answers + echo_only}
    assert {until: found.text for until, found in matched.items() if found is not None} == {
        r"\n42\r?\n": "\n42\n",
        r"^42$": "42",
        "42": "42",
        r"42\r\n": "42\r\n",  # against the stream with its CRs kept
        r"\r\n42\r\n": "\r\n42\r\n",
    }
    # A CR-naming pattern still skips the echo (and its escape codes) in the stream with CRs kept.
    coloured = b"\x1b[1mprint(6*7)\x1b[0m\r\n6*7\r\n"
    assert find(compile_until(r"6\*7\r\n"), coloured, echo) is not None
    assert find(compile_until(r"\(6\*7\)\r\n"), coloured, echo) is None


def test_the_name_of_a_secret_sent_by_reference_stays_readable_in_the_log() -> None:
    from relay_shell.audit.record import audit_arguments

    assert audit_arguments({"session_id": "s-1", "secret_env": "DB_PASSWORD"})["secret_env"] == "DB_PASSWORD"
    assert audit_arguments({"env": {"DB_PASSWORD": "hunter2"}})["env"]["DB_PASSWORD"] == "[REDACTED]"


# -- a terminal's line settings, read once a send ------------------------------------------------------------


def _settings_as_read_one_by_one(attributes: list[object]) -> tuple[int, tuple[int, ...]]:
    """line_settings_of as it was written first: each special character converted alone, each flag or-ed in."""
    from relay_shell.sessions.line_settings import DEFAULT_CHARACTERS, TRANSLATING, _value

    characters = attributes[6]
    values = tuple(_value(characters[index]) for index in DEFAULT_CHARACTERS)  # type: ignore[index]
    translating = 0
    for flag in TRANSLATING:
        translating |= int(attributes[0]) & flag  # type: ignore[call-overload]
    return translating, values


@pytest.mark.parametrize(
    "change",
    ["none", "erase Q", "kill disabled", "raw", "istrip iuclc", "every character"],
)
def test_settings_read_once_are_the_settings_read_character_by_character(change: str) -> None:
    """settings_from (one TCGETS a send, its characters joined at once) gives what reading each character alone
    gave, for a real terminal's settings: the defaults, a character changed or disabled, raw mode (VMIN and VTIME
    are numbers then), translating flags; and settings_findings finds the same characters and flags."""
    import os
    import termios

    from relay_shell.sessions.line_settings import DEFAULT_CHARACTERS, TRANSLATING, settings_findings, settings_from

    controller, terminal = os.openpty()
    try:
        attributes = termios.tcgetattr(terminal)
        characters = attributes[6]
        if change == "erase Q":
            characters[termios.VERASE] = b"Q"
        elif change == "kill disabled":
            characters[termios.VKILL] = b"\0"
        elif change == "raw":
            attributes[3] &= ~termios.ICANON
            characters[termios.VMIN], characters[termios.VTIME] = 1, 0
        elif change == "istrip iuclc":
            attributes[0] |= termios.ISTRIP | termios.IUCLC
        elif change == "every character":
            for offset, index in enumerate(DEFAULT_CHARACTERS):
                characters[index] = bytes([0x41 + offset])
        termios.tcsetattr(terminal, termios.TCSANOW, attributes)
        now = termios.tcgetattr(controller)
    finally:
        os.close(controller)
        os.close(terminal)
    expected = _settings_as_read_one_by_one(now)
    assert settings_from(now) == expected
    typed = bytes(range(1, 128))
    reasons = [reason for _text, _tier, reason in settings_findings(expected, typed)]
    changed = [
        value
        for value, (default, _role) in zip(expected[1], DEFAULT_CHARACTERS.values(), strict=True)
        if value not in (default, 0)
    ]
    assert len(reasons) == len(changed) + (1 if expected[0] & sum(TRANSLATING) else 0)
    assert settings_from(None) is None


@pytest.mark.parametrize("pattern", ["^", "x*", "$", ".*"])
def test_an_empty_window_with_an_echo_to_skip_matches_nothing_even_a_pattern_that_matches_empty_text(
    pattern: str,
) -> None:
    """Session.wait does not search before the first output when an echo is to be skipped (registry.py): it relies
    on this. Without an echo the same empty window does match such a pattern (a wait then returns at once)."""
    patterns = compile_until(pattern)
    assert find(patterns, b"", "7*7\n") is None
    assert find(patterns, b"", None) is not None
