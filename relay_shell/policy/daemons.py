"""Programs that hand work to a server already running outside the call: tmux and screen (their server runs the
commands and keys it is sent, in a shell that is not the call's), and D-Bus clients (the service acts with its own
rights). What they send is classified as shell text where it is a command; a D-Bus method call or property change
is 2 (what it does cannot be classified, and the kernel confinement of readonly does not reach the service). Also
`stty -F` of another terminal: the terminal belongs to whoever runs in it.
"""

from __future__ import annotations

from collections.abc import Callable

from relay_shell.policy.calls import READ, Call, Verdict, verdict
from relay_shell.policy.vocabulary import words

# tmux commands whose last argument is a shell command, and those that type keys into a pane.
_TMUX_RUNS = words(
    "new-session new new-window neww split-window splitw respawn-pane respawnp respawn-window respawnw run-shell run"
    " pipe-pane pipep display-popup popup if-shell if"
)
_TMUX_KEYS = words("send-keys send")
_TMUX_READ = words(
    "list-sessions ls list-windows lsw list-panes lsp list-clients lsc list-buffers lsb list-keys lsk"
    " list-commands lscm show-options show show-window-options showw display-message display has-session has"
    " capture-pane capturep show-buffer showb info start-server start"
)
# Ending a server, session, window or pane ends the programs in it: processes outside the call (tiers.md: kill).
_TMUX_KILLS = words("kill-server kill-session kill-window killw kill-pane killp unlink-window unlinkw")
_TMUX_VALUES = words("-t -s -c -n -x -y -F -f -L -S -e -l -d -w -h")


def _tmux(call: Call) -> Verdict:
    words_ = [word for word in call.words[1:]]
    position = 0
    while position < len(words_) and words_[position].startswith("-"):
        position += 2 if words_[position] in ("-L", "-S", "-f", "-c") else 1
    rest = words_[position:]
    if not rest:
        return verdict(1, "tmux starts a session: a shell outside the call")
    command, arguments = rest[0], [word for word in rest[1:] if not word.startswith("-")]
    if command in _TMUX_KEYS:
        typed = " ".join(
            word for word in arguments if word not in ("Enter", "C-m", "KPEnter") and word != call.value("-t")
        )
        return Verdict(1, "tmux types keys into a pane, whose shell runs them", shell=(typed,) if typed else ())
    if command in _TMUX_RUNS:
        text = arguments[-1] if arguments and arguments[-1] != call.value("-t") else ""
        return Verdict(1, f"tmux {command} runs a command in its server", shell=(text,) if text else ())
    if command in _TMUX_READ:
        return READ
    if command in _TMUX_KILLS:
        return verdict(2, f"tmux {command} ends the programs running in it, outside the call")
    return verdict(1, f"tmux {command} changes its sessions")


def _screen(call: Call) -> Verdict:
    """screen -X stuff TEXT types into a window; -X exec/screen runs a command; a new screen runs a shell."""
    words_ = call.words
    if "-X" in words_:
        rest = words_[words_.index("-X") + 1 :]
        if rest[:1] and rest[0] in ("stuff", "exec", "screen", "eval"):
            return Verdict(1, f"screen -X {rest[0]} runs text in a window", shell=(" ".join(rest[1:]),))
        if rest[:1] and rest[0] in ("quit", "kill", "pow_detach", "remove"):
            return verdict(2, f"screen -X {rest[0]} ends programs running in it, outside the call")
        return verdict(1, "screen -X sends a command to a running screen")
    if call.has("-ls", "-list") or "-ls" in words_ or "-list" in words_:
        return READ
    return verdict(1, "screen starts a session: a shell outside the call")


def _dbus(call: Call) -> Verdict:
    """A D-Bus method call, property change or signal acts in the service that receives it: every dbus-send, the
    call/set-property/emit sub-commands of busctl and gdbus, qdbus given a method."""
    operands = call.operands
    sends = (
        call.program == "dbus-send"
        or (call.program in ("busctl", "gdbus") and bool(set(operands[:1]) & {"call", "set-property", "emit"}))
        or (call.program == "qdbus" and len(operands) >= 3)
    )
    if sends:
        return verdict(2, f"{call.program} calls a service over D-Bus: what it does cannot be classified")
    return READ


_STTY_DEVICE = ("-F", "--file", "-f")  # GNU, and BSD's spelling
_STTY_PRINTS = words("-a --all -g --save size speed")


def _stty(call: Call) -> Verdict:
    """stty prints or changes a terminal's settings. Another terminal (`-F DEV`) is outside the call — a session's,
    another client's, an operator's login shell: its echo turned off or its line discipline changed under it
    (attack 3, K1's addendum) is 2; the call's own terminal stays what an unknown program is (1)."""
    device = call.value(*_STTY_DEVICE)
    if device is None:
        device = next((word.split("=", 1)[1] for word in call.words[1:] if word.startswith("--file=")), None)
    settings = []
    skip = False
    for word in call.words[1:]:
        if skip:
            skip = False
        elif word in _STTY_DEVICE:
            skip = True
        elif not word.startswith(("--file=", "-F/", "-f/")):
            settings.append(word)
    changes = bool(settings) and not all(word in _STTY_PRINTS for word in settings)
    if device and device not in ("/dev/tty", "/dev/stdin", "-") and changes:
        return verdict(2, f"stty changes the settings of another terminal ({device})")
    return verdict(1, "stty prints or changes the call's own terminal settings")


RULES: dict[str, Callable[[Call], Verdict]] = {
    "stty": _stty,
    "tmux": _tmux,
    "screen": _screen,
    "busctl": _dbus,
    "dbus-send": _dbus,
    "gdbus": _dbus,
    "qdbus": _dbus,
}
