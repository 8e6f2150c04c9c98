"""What a session_send types, as the policy reads it: the lines submitted with Enter (text typed without
Enter joins the next line; a line edited with control keys counts as edited), bounded in pieces."""

from __future__ import annotations

from relay_shell.sessions.keys import LINE_ENDING_KEYS

MAX_FRAGMENTS = 32  # pieces of one typed line kept for the policy; more control keys than that is no line


def typed_lines(pending: list[str], data: str, enter: bool, keys: list[str]) -> tuple[list[str], list[str], bool]:
    """What the policy classifies for this input, the pieces of the line still being typed, and whether a
    submitted line was edited with control keys.

    A control character or a key (Ctrl-C, Ctrl-U, an arrow, Tab…) may discard, keep or rewrite what was
    typed before it, depending on the program and its terminal settings, so nothing is ever dropped: the
    line is kept as pieces split at those keys, and every way of reading it that drops a leading part is
    classified (`rm -r` + Ctrl-D + `f /` is seen as `rm -rf /`). A line submitted after such edits may have
    become anything, which the policy treats as stateful."""
    # `pending` ends with the piece still open for typing ("" after a control key).
    pieces = [piece for piece in pending[:-1] if piece]
    current = pending[-1] if pending else ""
    texts: list[str] = []
    edited = False

    def split() -> None:
        nonlocal current
        if current:
            pieces.append(current)
        current = ""

    def submit() -> None:
        nonlocal edited, pieces
        split()
        texts.extend(_readings(pieces))
        edited = edited or len(pieces) > 1
        pieces = []

    for char in data:
        if char in "\r\n":
            submit()
        elif (char < " " and char != "\t") or char == "\x7f":
            split()
        else:
            current += char
    if enter:
        submit()
    for key in keys:
        if key in LINE_ENDING_KEYS:
            submit()
        else:
            split()
    if len(pieces) >= MAX_FRAGMENTS:
        pieces = ["".join(pieces[: len(pieces) - MAX_FRAGMENTS + 2]), *pieces[len(pieces) - MAX_FRAGMENTS + 2 :]]
    # What is typed so far counts too: refusing it before Enter costs nothing.
    texts.extend(_readings([*pieces, current] if current else pieces))
    open_line = [*pieces, current]
    return texts, open_line if any(open_line) else [], edited


def _readings(pieces: list[str]) -> list[str]:
    """The line as typed, and with each leading part dropped."""
    return ["".join(pieces[index:]) for index in range(len(pieces))]
