"""Inspectors and viewers that run, write or delete when their operands or arguments say so (the tier-0 list,
read_only.py, names each): ImageMagick's `identify` reading `|cmd`, `ephemeral:` and `msl:` inputs, `ldd` (it runs
the program's own loader), fx's JavaScript arguments, qalc's `command()`, broot's `--cmd` verbs, `dua i`, tuptime
updating its database.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from relay_shell.policy.calls import READ, Call, Verdict, verdict
from relay_shell.policy.outputs import written

# ImageMagick coders that act on their input: `ephemeral:` deletes the file after reading it, `msl:` runs a Magick
# Scripting Language file (which writes images), `pipe:` and a leading `|` read a command's output.
_DELETING_CODERS = ("ephemeral:",)
_SCRIPT_CODERS = ("msl:", "mvg:", "text:@", "label:@", "caption:@")


def _identify(call: Call) -> Verdict:
    found = [READ]
    shell: list[str] = []
    for operand in call.operands:
        lowered = operand.lower()
        if operand.startswith("|") or lowered.startswith("pipe:"):
            shell.append(operand.split(":", 1)[1] if lowered.startswith("pipe:") else operand[1:])
            found.append(verdict(1, f"{call.program} reads a command's output"))
        elif lowered.startswith(_DELETING_CODERS):
            found.append(verdict(2, f"{call.program} ephemeral: deletes its input after reading it"))
        elif lowered.startswith(_SCRIPT_CODERS):
            found.append(verdict(1, f"{call.program} runs a script or reads a file named in its input"))
    worst = max(found, key=lambda item: item.tier)
    return Verdict(worst.tier, worst.reason, shell=tuple(shell)) if shell else worst


def _ldd(call: Call) -> Verdict:
    """ldd has the program's dynamic loader resolve its libraries, and a program can name its own loader: ldd on a
    program nobody vetted runs code (ld.so(8): "do not use ldd on untrusted executables")."""
    return verdict(1, "ldd runs the program's loader, which a program can choose")


_JAVASCRIPT = re.compile(r"=>|\bfunction\b|\(|\brequire\b|\bprocess\b|\bimport\b")


def _fx(call: Call) -> Verdict:
    """fx's arguments after the file are JavaScript it runs (`x => …`, `.key` paths are harmless)."""
    if any(_JAVASCRIPT.search(argument) for argument in call.operands[1:]):
        return verdict(1, "fx runs the JavaScript it is given")
    return READ


def _qalc(call: Call) -> Verdict:
    if any("command(" in word.replace(" ", "") for word in call.words[1:]):
        return verdict(2, "qalc's command() runs a program")
    if call.has("-f", "--file"):
        return verdict(1, "qalc runs the commands of a file that is not seen")
    return READ


def _broot(call: Call) -> Verdict:
    if call.has("-c", "--cmd"):
        return verdict(2, "broot --cmd runs its verbs (:rm, :mv, shell commands)")
    for option in ("--outcmd", "--write-default-conf", "--set-install-state", "--install", "--print-shell-function"):
        value = call.value(option)
        if value:
            return written("broot", value, [])
        if option in call.long:
            return verdict(1, f"broot {option} writes a file")
    return READ


def _dua(call: Call) -> Verdict:
    if call.subcommand in ("i", "interactive"):
        return verdict(2, "dua interactive deletes the entries it is told to")
    return READ


def _tuptime(call: Call) -> Verdict:
    if call.has_exact("-n", "--noup", "-h", "--help", "-V", "--version"):
        return READ
    return verdict(1, "tuptime records this run in its database (unless -n)")


RULES: dict[str, Callable[[Call], Verdict]] = {
    "identify": _identify,
    "ldd": _ldd,
    "fx": _fx,
    "qalc": _qalc,
    "broot": _broot,
    "dua": _dua,
    "tuptime": _tuptime,
}
