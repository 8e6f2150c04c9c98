"""What a pipeline's upstream commands tell the ones downstream: the selection of a `find` (`find … | xargs rm`),
`tail -n +N` (all but the newest N), a bare `ls` (every entry), and the program text `echo`/`printf` hand to a `dc`
reading its input. Updated one command at a time: linear.
"""

from __future__ import annotations

from collections.abc import Callable

from relay_shell.policy.calls import Context
from relay_shell.policy.find import find_selection
from relay_shell.policy.findings import Finding
from relay_shell.policy.scripts import dc_commands, dc_reads_stdin
from relay_shell.policy.wrappers import basename, unwrap


def upstream_context(upstream: Context, raw: list[str]) -> Context:
    """What a command tells the deletions downstream in its pipeline."""
    words = unwrap(raw, [False] * len(raw)).words
    program = basename(words[0]) if words else ""
    if program == "find":
        return Context(selection=find_selection(words)[0], all_but=upstream.all_but, every=upstream.every)
    if program == "tail" and any(word.startswith(("+", "-n+")) for word in words[1:]):
        return Context(selection=upstream.selection, all_but=True, every=upstream.every)
    listed = [word for word in words[1:] if not word.startswith("-")]
    if program == "ls" and not any("*" in word or "." in word.lstrip("./") for word in listed):
        return Context(selection=upstream.selection, all_but=upstream.all_but, every=True)
    return upstream


def dc_pipe_findings(words: list[str], previous: list[str], shell: Callable[[str], list[Finding]]) -> list[Finding]:
    """dc reading its program from a pipe: the `!` commands of an upstream echo/printf text are classified; input
    that cannot be seen is a program of unknown effect (1)."""
    unwrapped = unwrap(words, [False] * len(words)).words
    if not unwrapped or basename(unwrapped[0]) != "dc" or not dc_reads_stdin(unwrapped):
        return []
    if previous and basename(previous[0]) in ("echo", "printf"):
        text = " ".join(previous[1:])
        return [finding for command in dc_commands(text) for finding in shell(command)]
    return [Finding(" ".join(words[:3]), 1, "dc runs a program from its input, which cannot be seen")]


def has_fork_bomb(text: str) -> bool:
    """`name(){ name|name& };name` in any spacing. Each `(){` is inspected within a bounded window."""
    if "fork while fork" in text or "fork;fork" in text.replace(" ", ""):
        return True
    compact_needed = "(" in text and "|" in text and "&" in text
    if not compact_needed:
        return False
    compact = "".join(text.split())
    position = compact.find("(){")
    while position >= 0:
        body = compact[position + 3 : position + 3 + 256].split("}", 1)[0]
        # Only a body that pipes and backgrounds can be a bomb; then find the function's name (≤ 64 chars).
        if "|" in body and "&" in body:
            start = position
            while (
                start > 0 and position - start < 64 and (compact[start - 1].isalnum() or compact[start - 1] in "_:.-")
            ):
                start -= 1
            name = compact[start:position]
            if name and f"{name}|{name}&" in body:
                return True
        position = compact.find("(){", position + 3)
    return False
