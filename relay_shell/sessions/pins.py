"""What a local terminal starts with so that what is typed is what runs (adr/0026).

In every mode: the default shell is bash with history expansion off (`+H`: `!!` is two characters, not the last
line), and readline reads relay-shell's own inputrc (no macros from ~/.inputrc, no Meta keys in UTF-8 text).
In readonly and guarded mode the escapes the server can turn off are off for every program of the session:
less runs in its secure mode (LESSSECURE=1: no `!`, `|`, `v`, no log files, no LESSOPEN), systemd's pager too
(SYSTEMD_PAGERSECURE=1), and every variable naming an editor names a restricted one (rvim, rnano or red: no
shell commands, no filters), or `false` when none is installed. The one-shot pager defaults (PAGER=cat,
MANPAGER=cat, GIT_PAGER=cat, SYSTEMD_PAGER empty) apply to sessions as to every command.

These are a second line: a program reached another way (a remote host, `env -i`, `sudo`) has its escapes, which
the classification of typed lines covers (sessions/escapes.py). An env overlay that undoes a pin is tier 2.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Sequence
from pathlib import Path

from relay_shell.policy.code_env import VARIABLES
from relay_shell.sessions.interactive import PINNED, judge_assignment
from relay_shell.sessions.typed import Finding
from relay_shell.settings.patterns import Regex

DEFAULT_SHELL = ["bash", "--noprofile", "--norc", "+H"]  # predictable prompt, no user aliases, no `!` expansion
INPUTRC = Path(__file__).with_name("inputrc")
EDITOR_VARIABLES = (
    "EDITOR",
    "VISUAL",
    "FCEDIT",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "SUDO_EDITOR",
    "SYSTEMD_EDITOR",
    "KUBE_EDITOR",
)
RESTRICTED_EDITORS = ("rvim", "rnano", "red")
UNDOES_A_PIN = "undoes what the server sets for the terminal ({name}): an escape or a key binding"


@functools.cache
def restricted_editor() -> str:
    """The first restricted editor installed (looked up once), or `false`: no editor rather than one whose
    commands run programs."""
    for name in RESTRICTED_EDITORS:
        path = shutil.which(name)
        if path is not None:
            return path
    return shutil.which("false") or "/bin/false"


def pinned_environment(mode: str) -> dict[str, str]:
    """The variables a local terminal starts with, in policy `mode`."""
    pins = {"INPUTRC": str(INPUTRC)}
    if mode in ("readonly", "guarded"):
        pins |= {"LESSSECURE": "1", "SYSTEMD_PAGERSECURE": "1"}
        pins |= dict.fromkeys(EDITOR_VARIABLES, restricted_editor())
    return pins


def overlay_findings(overlay: Sequence[tuple[str, str | None]], passprompt: Sequence[Regex]) -> list[Finding]:
    """A spawn's env overlay, beyond what the policy reads in it: a pin undone, a prompt that reads like a
    password prompt (the lines typed at it would be withheld), code the session runs later."""
    findings: list[Finding] = []
    for name, value in overlay:
        if name in PINNED or name in EDITOR_VARIABLES:
            findings.append((f"{name}={value or ''}", 2, UNDOES_A_PIN.format(name=name)))
        elif value and (name in VARIABLES or name.startswith("BASH_FUNC_")):
            # Set for the whole session: judged as the same assignment typed at its prompt (a prompt that reads
            # like a password prompt, or code it runs later, unseen, is tier 2; an exported bash function replaces a
            # command for every later line).
            findings += judge_assignment(name, value, False, passprompt)
    return findings
